#!/usr/bin/env python3
"""Counts requests lost while workers are replaced under keep-alive load.

Starts m0serve on benches/apps/count.py (the app appends a byte per request to a file), runs
CLIENTS keep-alive clients that each send `GET /` back to back on one connection (a new one
after a `Connection: close`), sends the master HUPS SIGHUPs spread over SECONDS (and/or lets
`--max-requests` recycle workers), then stops the clients and prints every request sent,
answered and lost (no response: the connection ended first), and how many times the app
ran. What tests/workers.rs checks in CI, for longer and with the figures printed.

With --change-code the app is a copy whose answer is rewritten before each SIGHUP (v1,
v2...): the clients count the answers of each version, and the last must be the last
written. --preload runs the server with it (a new preloader imports each version).

    scripts/reload_under_load.py --workers 2 --hups 4 --seconds 12
    scripts/reload_under_load.py --workers 2 --max-requests 200 --seconds 12
    scripts/reload_under_load.py --workers 4 --preload --change-code --hups 4 --seconds 12
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
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(rest) < length:
                d = s.recv(65536)
                if not d:
                    raise EOFError("end of stream inside a response")
                rest += d
            body, buf = rest[:length], rest[length:]
            tally["answered"] += 1
            tally["bodies"][body] = tally["bodies"].get(body, 0) + 1
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
    ap.add_argument("--preload", action="store_true")
    ap.add_argument("--change-code", action="store_true",
                    help="rewrite the app's answer before each SIGHUP")
    args = ap.parse_args()
    apps = os.path.join(ROOT, "benches", "apps")
    source = open(os.path.join(apps, "count.py")).read()
    if args.change_code:
        apps = tempfile.mkdtemp(prefix="m0reload-")

    def write_version(n):
        with open(os.path.join(apps, "count.py"), "w") as f:
            f.write(source.replace('b"Hello, World!"', f'b"Hello, World! v{n}"'))
    if args.change_code:
        write_version(1)
    count = tempfile.NamedTemporaryFile(prefix="m0count-", delete=False).name
    port = 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [args.binary, "count:app", "--app-dir", apps,
           "--port", str(port), "--workers", str(args.workers), "--log-level", "warning"]
    if args.preload:
        cmd.append("--preload")
    if args.max_requests:
        cmd += ["--max-requests", str(args.max_requests)]
    server = subprocess.Popen(cmd, env=dict(os.environ, M0BENCH_COUNT_FILE=count,
                                            PYTHONDONTWRITEBYTECODE="1"))
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        stop = threading.Event()
        tallies = [{"sent": 0, "answered": 0, "lost": [], "bodies": {}}
                   for _ in range(args.clients)]
        threads = [threading.Thread(target=client, args=(port, stop, t)) for t in tallies]
        for t in threads:
            t.start()
        for i in range(args.hups):
            time.sleep(args.seconds / (args.hups + 1))
            if args.change_code:
                write_version(i + 2)
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
    bodies = {}
    for t in tallies:
        for b, n in t["bodies"].items():
            bodies[b.decode()] = bodies.get(b.decode(), 0) + n
    print(f"{args.clients} keep-alive clients, {args.seconds:g} s, --workers {args.workers}"
          f"{' --preload' if args.preload else ''}, "
          f"{args.hups} SIGHUP(s), --max-requests {args.max_requests or 'off'}: "
          f"sent {sent}, answered {answered}, lost {len(lost)}, the app ran {ran}")
    for e in lost[:5]:
        print("  lost:", e)
    changed_ok = True
    if args.change_code:
        print("  answers:", ", ".join(f"{b!r} {n}" for b, n in sorted(bodies.items())))
        last = f"Hello, World! v{args.hups + 1}"
        changed_ok = len(bodies) == args.hups + 1 and last in bodies
    return 1 if lost or ran != answered or not changed_ok else 0


if __name__ == "__main__":
    sys.exit(main())
