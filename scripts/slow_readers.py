#!/usr/bin/env python3
"""Fast clients beside slow readers: what clients that read slowly cost everyone else.

For each server (one worker, one app thread), for each number of slow readers: start the
server on benches/apps/slow_stream.py; open that many connections, each with a 4 KiB
receive buffer, that ask for `/stream` (a 200 MiB body streamed as 64 KiB items) and then
read 1 KiB a second (from a separate process); wait a second; then drive `/` (hello world)
with wrk (one thread, 16 connections, --latency) and record req/s, p50/p99, wrk's timeouts
and errors, the server's resident memory (every process of it) and its CPU. Rounds
alternate the servers; medians are shown.

    scripts/slow_readers.py --servers m0serve,m0serve:blocking-threads=0,granian,gunicorn \\
        --readers 0,10,100 --duration 8 --rounds 2

Servers and .venv as in scripts/bench.py (Granian and gunicorn, the `gthread` worker with
one thread, are installed there on first use).
"""

import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# scripts/bench.py's package (the server, venv and wrk helpers):
from m0bench.clients import to_ms  # noqa: E402
from m0bench.config import APPS, HEADERS, ROOT  # noqa: E402
from m0bench.host import machine, sample, tree, versions  # noqa: E402
from m0bench.servers import (  # noqa: E402
    check_response, ensure_venv, free_port, parse_server, server_cmd, server_env, split_servers,
    stop, wait_ready)

APP = "slow_stream"

# The slow readers, as a program run with `python3 -c`: connects N sockets, sends the
# request on each, then reads 1 KiB from each every second until killed.
READERS = r"""
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    s.setblocking(False)
    socks.append(s)
print("connected", flush=True)
while True:
    t = time.time()
    for s in socks:
        try:
            s.recv(1024)
        except BlockingIOError:
            pass
        except OSError:
            pass
    time.sleep(max(0.0, 1.0 - (time.time() - t)))
"""


def rss_kib(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def wrk_hello(port, conns, duration):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    for h in HEADERS:
        cmd += ["-H", h]
    cmd.append(f"http://127.0.0.1:{port}/")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    out = p.stdout
    num = lambda pat, default=0.0: (float(m.group(1)) if (m := re.search(pat, out)) else default)
    lat = lambda q: (to_ms(*m.groups()) if (m := re.search(rf"{q}%\s+([\d.]+)(\w+)", out))
                     else None)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errs = dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()))) \
        if sock else {}
    return {
        "rps": num(r"Requests/sec:\s+([\d.]+)"),
        "requests": int(num(r"(\d+) requests in")),
        "p50_ms": lat(50), "p99_ms": lat(99),
        "timeouts": errs.get("timeout", 0),
        "errors": sum(v for k, v in errs.items() if k != "timeout")
        + int(num(r"Non-2xx or 3xx responses: (\d+)")),
    }


def run_one(srv, readers, args):
    port = free_port()
    cmd = server_cmd(srv, port, APP, 1, 1)
    with tempfile.TemporaryFile() as errlog:
        proc = subprocess.Popen(cmd, cwd=APPS, env=server_env(),
                                stdout=subprocess.DEVNULL, stderr=errlog)
        slow = None
        try:
            wait_ready(port, proc)
            check_response(port, {"body_len": 13})
            if readers:
                slow = subprocess.Popen([sys.executable, "-c", READERS, str(port), str(readers)],
                                        stdout=subprocess.PIPE, text=True)
                if slow.stdout.readline().strip() != "connected":
                    raise RuntimeError("the slow readers could not connect")
            time.sleep(1.0)
            before = sample(proc.pid)
            t0 = time.time()
            res = wrk_hello(port, args.connections, args.duration)
            wall = time.time() - t0
            after = sample(proc.pid)
            res["rss_mib"] = rss_kib(proc.pid) / 1024
        except Exception as e:
            errlog.seek(0)
            tail = errlog.read()[-800:].decode(errors="replace").strip()
            raise RuntimeError(f"{e}" + (f"\n  server stderr: {tail}" if tail else ""))
        finally:
            if slow is not None:
                slow.kill()
                slow.wait()
            stop(proc)
    cpu = sum(c - before.get(k, (n, 0.0))[1] for k, (n, c) in after.items())
    res.update({"server": srv["spec"], "readers": readers, "cores": cpu / wall,
                "command": shlex.join(cmd)})
    return res


def fmt(x, spec="{:.2f}"):
    return "—" if x is None else spec.format(x)


def markdown(doc):
    m = doc["meta"]
    lines = [f"- **Date**: {m['date']}",
             f"- **Machine**: {m['machine']['cpu']}, {m['machine']['cpus']} CPUs, "
             f"{m['machine']['mem_gib']} GiB, Linux {m['machine']['kernel']}",
             "- **Versions**: " + "; ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
             f"- **Command**: `{m['command']}`",
             f"- **Shape**: one worker, one app thread each (`--workers 1 --blocking-threads "
             f"1`; Granian `--blocking-threads 1`; gunicorn `-k gthread --threads 1`); wrk -t1 "
             f"-c{m['connections']} on `/` for {m['duration']} s, medians of {m['rounds']} "
             "alternating rounds; each slow reader asked for a 200 MiB streamed body and "
             "reads 1 KiB a second with a 4 KiB receive buffer. `answered` is how many "
             "requests wrk got a response to in the whole run; p50/p99 are over those "
             "(— where there were none).",
             "",
             "| server | slow readers | req/s | answered | p50 ms | p99 ms | wrk timeouts "
             "| errors | server RSS MiB | cores |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for srv in m["servers"]:
        for n in m["readers"]:
            runs = [r for r in doc["runs"] if r["server"] == srv and r["readers"] == n]
            if not runs:
                continue
            med = lambda k: (statistics.median([r[k] for r in runs if r.get(k) is not None])
                             if any(r.get(k) is not None for r in runs) else None)
            served = med("requests") > 0
            lines.append(f"| {srv} | {n} | {fmt(med('rps'), '{:,.0f}')} | "
                         f"{fmt(med('requests'), '{:,.0f}')} | "
                         f"{fmt(med('p50_ms') if served else None)} | "
                         f"{fmt(med('p99_ms') if served else None)} | "
                         f"{fmt(med('timeouts'), '{:.0f}')} | {fmt(med('errors'), '{:.0f}')} | "
                         f"{fmt(med('rss_mib'), '{:.1f}')} | {fmt(med('cores'))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="m0serve,m0serve:blocking-threads=0,granian,gunicorn")
    ap.add_argument("--readers", default="0,10,100")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default="slow-readers.json")
    args = ap.parse_args()
    servers = [parse_server(s) for s in split_servers(args.servers)]
    missing = ensure_venv([k for k in ("granian", "gunicorn")
                                 if any(s["kind"] == k for s in servers)])
    if missing:
        raise SystemExit(f"missing in .venv: {', '.join(missing)}")
    readers = [int(n) for n in args.readers.split(",")]
    doc = {"meta": {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "servers": [s["spec"] for s in servers], "readers": readers,
        "connections": args.connections, "duration": args.duration, "rounds": args.rounds,
        "machine": machine(), "versions": versions(servers)}, "runs": []}
    for rnd in range(args.rounds):
        for n in readers:
            order = servers if rnd % 2 == 0 else list(reversed(servers))
            for srv in order:
                try:
                    r = run_one(srv, n, args)
                except RuntimeError as e:
                    print(f"[{srv['spec']}, {n} readers] failed: {e}", flush=True)
                    continue
                doc["runs"].append(r)
                print(f"[round {rnd}, {n} slow readers] {srv['spec']:>28}: "
                      f"{r['rps']:9.0f} req/s, p99 {fmt(r['p99_ms'])} ms, "
                      f"timeouts {r['timeouts']}, RSS {r['rss_mib']:.1f} MiB", flush=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    print()
    print(markdown(doc))


if __name__ == "__main__":
    main()
