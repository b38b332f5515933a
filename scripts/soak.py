#!/usr/bin/env python3
"""Soak test (not a CI test): a million requests against one m0serve worker, most of them
good (wrk, keep-alive), the rest bad or abandoned in every way a client can (malformed
heads, smuggling attempts, bodies over the limit, connections dropped mid-head, mid-body,
before the response and mid-stream). The worker's resident memory and open descriptors
are sampled after a warm-up and again after the soak: both must come back flat.

    cargo build --release
    scripts/soak.py [--requests 1000000] [--binary target/release/m0serve]

Prints a table for benchmarks/decisions.md ("soak") and exits 1 when memory or descriptors grew past
the tolerance, or when a bad request got an answer other than the expected status.
"""

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# kind -> (bytes to send, what happens next, expected status or None)
ABUSE = {
    "malformed head (400)": (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "read", 400),
    "CL and TE together (400)": (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n", "read", 400),
    "body over --max-body-size (413)": (
        b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", "read", 413),
    "dropped mid-head": (b"GET /hello HTTP/1.1\r\nHo", "close", None),
    "dropped mid-body": (
        b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"x" * 100,
        "close", None),
    "dropped before the response (reset)": (
        b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", "reset", None),
    "dropped mid-stream": (b"GET /ticks?n=100000 HTTP/1.1\r\nHost: x\r\n\r\n", "partial", None),
}


def worker_pid(master):
    for _ in range(100):
        try:
            with open(f"/proc/{master}/task/{master}/children") as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no worker process")


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


def status_of(data):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(m.group(1)) if m else None


def abuse_loop(port, stop, counts, errors, lock):
    kinds = list(ABUSE.items())
    i = 0
    while not stop.is_set():
        name, (payload, then, want) = kinds[i % len(kinds)]
        i += 1
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(payload)
            if then == "read":
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                got = status_of(data)
                if got != want:
                    with lock:
                        errors.append(f"{name}: got {got} ({data[:60]!r})")
            elif then == "partial":
                s.recv(4096)
            elif then == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        except OSError as e:
            with lock:
                errors.append(f"{name}: {e}")
            continue
        with lock:
            counts[name] = counts.get(name, 0) + 1


def wrk(port, seconds, conns=64):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", f"http://127.0.0.1:{port}/hello"],
        capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    return total, int(non2xx.group(1)) if non2xx else 0, errs.group(1) if errs else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/m0serve"))
    ap.add_argument("--abusers", type=int, default=4, help="threads sending bad requests")
    ap.add_argument("--rss-tolerance-kib", type=int, default=8 * 1024)
    args = ap.parse_args()

    server = subprocess.Popen(
        [args.binary, "regress:app", "--port", "0", "--app-dir",
         os.path.join(ROOT, "tests/apps"), "--header-timeout", "2", "--body-timeout", "2",
         "--max-body-size", "1M"],
        stderr=subprocess.PIPE, text=True)
    port = None
    for line in server.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    pid = worker_pid(server.pid)
    try:
        # Warm-up: every pool and cache at its working size, one round of each abuse.
        wrk(port, 3)
        stop, lock = threading.Event(), threading.Lock()
        counts, errors = {}, []
        warm = threading.Thread(target=abuse_loop, args=(port, stop, counts, errors, lock))
        warm.start()
        time.sleep(2)
        stop.set()
        warm.join()
        time.sleep(3)  # timeouts and lingering closes run out
        before = sample(pid)

        stop, counts, errors = threading.Event(), {}, []
        abusers = [threading.Thread(target=abuse_loop, args=(port, stop, counts, errors, lock))
                   for _ in range(args.abusers)]
        for t in abusers:
            t.start()
        started = time.time()
        good, non2xx, sock_errs = 0, 0, []
        while good + sum(counts.values()) < args.requests:
            n, bad, e = wrk(port, 5)
            good += n
            non2xx += bad
            if e:
                sock_errs.append(e)
        stop.set()
        for t in abusers:
            t.join()
        elapsed = time.time() - started
        time.sleep(3)  # timeouts and lingering closes run out
        after = sample(pid)
    finally:
        server.terminate()
        server.wait(timeout=40)

    abused = sum(counts.values())
    print(f"requests: {good + abused:,} in {elapsed:.0f} s ({good:,} good through wrk, "
          f"{abused:,} bad or abandoned); server exit code {server.returncode}")
    print()
    print("| kind | count |")
    print("|---|---:|")
    print(f"| good (wrk, keep-alive, /hello) | {good:,} |")
    for name in ABUSE:
        print(f"| {name} | {counts.get(name, 0):,} |")
    print()
    print("| worker | after warm-up | after the soak | change |")
    print("|---|---:|---:|---:|")
    print(f"| RSS KiB | {before[0]:,} | {after[0]:,} | {after[0] - before[0]:+,} |")
    print(f"| open descriptors | {before[1]} | {after[1]} | {after[1] - before[1]:+} |")
    print()
    problems = []
    if non2xx:
        problems.append(f"{non2xx} good requests got a non-2xx answer")
    if errors:
        problems.append(f"{len(errors)} unexpected answers, e.g. {errors[:3]}")
    if after[0] - before[0] > args.rss_tolerance_kib:
        problems.append(f"RSS grew by {after[0] - before[0]} KiB")
    if after[1] != before[1]:
        problems.append(f"open descriptors went from {before[1]} to {after[1]}")
    if sock_errs:
        print(f"wrk socket errors (runs with any): {sock_errs}")
    if problems:
        print("FAILED: " + "; ".join(problems))
        sys.exit(1)
    print("flat: no growth in memory or descriptors, every bad request answered as expected")


if __name__ == "__main__":
    main()
