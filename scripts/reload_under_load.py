#!/usr/bin/env python3
"""Counts requests lost while workers are replaced under keep-alive load.

Starts m0serve on benches/apps/count.py (the app appends a byte per request to a file), runs
CLIENTS keep-alive clients that each send `GET /` back to back on one connection (a new one
after a `Connection: close`), sends the master HUPS SIGHUPs spread over SECONDS (and/or lets
`--max-requests` recycle workers), then stops the clients and prints every request sent,
answered and lost (no response: the connection ended first), and how many times the app
ran. What tests/workers.rs checks in CI, for longer and with the figures printed.

    scripts/reload_under_load.py --workers 2 --hups 4 --seconds 12
    scripts/reload_under_load.py --workers 2 --max-requests 200 --seconds 12
    scripts/reload_under_load.py --binary /path/to/other/m0serve ...
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQ = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def client(port, stop, tally):
    s, buf = None, b""
    while not stop.is_set():
        if s is None:
            s = socket.create_connection(("127.0.0.1", port))
            s.settimeout(10)
            buf = b""
        try:
            s.sendall(REQ)
        except OSError as e:
            tally["lost"].append(f"send: {e!r}")
            s.close()
            s = None
            continue
        tally["sent"] += 1
        try:
            while b"\r\n\r\n" not in buf:
                d = s.recv(65536)
                if not d:
                    raise EOFError("end of stream before a response")
                buf += d
            head, _, rest = buf.partition(b"\r\n\r\n")
            while len(rest) < 13:
                d = s.recv(65536)
                if not d:
                    raise EOFError("end of stream inside a response")
                rest += d
            buf = rest[13:]
            tally["answered"] += 1
            if b"connection: close" in head.lower():
                s.close()
                s = None
        except (OSError, EOFError) as e:
            tally["lost"].append(repr(e))
            s.close()
            s = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "m0serve"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--hups", type=int, default=4)
    ap.add_argument("--max-requests", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=12)
    args = ap.parse_args()
    count = tempfile.NamedTemporaryFile(prefix="m0count-", delete=False).name
    port = 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [args.binary, "count:app", "--app-dir", os.path.join(ROOT, "benches", "apps"),
           "--port", str(port), "--workers", str(args.workers), "--log-level", "warning"]
    if args.max_requests:
        cmd += ["--max-requests", str(args.max_requests)]
    server = subprocess.Popen(cmd, env=dict(os.environ, M0BENCH_COUNT_FILE=count))
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        stop = threading.Event()
        tallies = [{"sent": 0, "answered": 0, "lost": []} for _ in range(args.clients)]
        threads = [threading.Thread(target=client, args=(port, stop, t)) for t in tallies]
        for t in threads:
            t.start()
        for _ in range(args.hups):
            time.sleep(args.seconds / (args.hups + 1))
            server.send_signal(signal.SIGHUP)
        time.sleep(args.seconds / (args.hups + 1))
        stop.set()
        for t in threads:
            t.join()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    ran = os.path.getsize(count)
    os.unlink(count)
    sent = sum(t["sent"] for t in tallies)
    answered = sum(t["answered"] for t in tallies)
    lost = [e for t in tallies for e in t["lost"]]
    print(f"{args.clients} keep-alive clients, {args.seconds:g} s, --workers {args.workers}, "
          f"{args.hups} SIGHUP(s), --max-requests {args.max_requests or 'off'}: "
          f"sent {sent}, answered {answered}, lost {len(lost)}, the app ran {ran}")
    for e in lost[:5]:
        print("  lost:", e)
    return 1 if lost or ran != answered else 0


if __name__ == "__main__":
    sys.exit(main())
