#!/usr/bin/env python3
"""Side-by-side HTTP benchmark: m0serve against other WSGI servers, per thread.

Starts each server on the same app, drives it with wrk (one wrk thread, browser-like
headers) in alternating rounds, and samples every thread's CPU time of the server's whole
process tree from /proc/PID/task/TID/stat over each run. Prints a markdown table and writes
the raw results as JSON.

    scripts/bench.py --servers m0serve,granian --connections 64 --duration 10 --rounds 3

Granian is looked up in .venv/bin (install with `.venv/bin/pip install granian`).
`--servers m0serve,m0serve@/tmp/other-build/m0serve` compares two builds of m0serve.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPS = os.path.join(ROOT, "benches", "apps")
TICK = os.sysconf("SC_CLK_TCK")
HEADERS = [
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Encoding: gzip, deflate, br",
    "Accept-Language: en-US,en;q=0.5",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Connection: keep-alive",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_cmd(name, port, app, threads):
    venv = os.path.join(ROOT, ".venv", "bin")
    if name.startswith("m0serve"):
        # "m0serve@PATH" measures another build of m0serve side by side (A/B of a change).
        binary = name.split("@", 1)[1] if "@" in name else os.path.join(ROOT, "target", "release", "m0serve")
        return [binary, f"{app}:app",
                "--app-dir", APPS, "--port", str(port), "--workers", "1",
                "--blocking-threads", str(threads), "--log-level", "warning"]
    if name == "granian":
        return [os.path.join(venv, "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1", "--blocking-threads", str(threads),
                "--no-ws", "--log-level", "warning", f"{app}:app"]
    raise SystemExit(f"unknown server {name}")


def tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def sample(pid):
    """{(pid, tid): (name, cpu_seconds)} over the process tree."""
    res = {}
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            res[(p, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return res


def wait_ready(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def wrk(port, conns, duration, path="/"):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    for h in HEADERS:
        cmd += ["-H", h]
    cmd.append(f"http://127.0.0.1:{port}{path}")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    lat = re.search(r"Latency\s+([\d.]+)(\w+)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[lat.group(2)]
    p99 = re.search(r"99%\s+([\d.]+)(\w+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": rps,
        "requests": reqs,
        "latency_avg_ms": float(lat.group(1)) * scale,
        "latency_p99_ms": float(p99.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)],
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


def run_one(name, app, conns, duration, threads, warmup):
    port = free_port()
    proc = subprocess.Popen(server_cmd(name, port, app, threads), cwd=APPS,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(port, proc)
        wrk(port, conns, warmup)
        before = sample(proc.pid)
        t0 = time.time()
        res = wrk(port, conns, duration)
        wall = time.time() - t0
        after = sample(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    threads_cpu = []
    for key, (tname, cpu) in after.items():
        used = cpu - before.get(key, (tname, 0.0))[1]
        if used > 0:
            threads_cpu.append({"thread": tname, "cpu_s": used, "busy": used / wall})
    threads_cpu.sort(key=lambda t: -t["cpu_s"])
    total = sum(t["cpu_s"] for t in threads_cpu)
    res.update({
        "server": name, "connections": conns, "wall_s": wall, "cpu_s": total,
        "cores": total / wall, "cpu_us_per_req": total / max(res["requests"], 1) * 1e6,
        "threads": threads_cpu,
    })
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="m0serve,granian")
    ap.add_argument("--app", default="hello")
    ap.add_argument("--connections", default="64")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocking-threads", type=int, default=1)
    ap.add_argument("--json", default=os.path.join(ROOT, "bench-results", "bench.json"))
    args = ap.parse_args()
    servers = args.servers.split(",")
    results = []
    for conns in [int(c) for c in args.connections.split(",")]:
        for rnd in range(args.rounds):
            order = servers if rnd % 2 == 0 else list(reversed(servers))
            for name in order:
                r = run_one(name, args.app, conns, args.duration, args.blocking_threads,
                            args.warmup)
                r["round"] = rnd
                results.append(r)
                busy = ", ".join(f"{t['thread']} {t['busy']*100:.0f}%" for t in r["threads"][:4])
                print(f"[{conns:>3} conns, round {rnd}] {name:>8}: {r['rps']:>9.0f} req/s, "
                      f"{r['cpu_us_per_req']:5.1f} µs CPU/req, p99 {r['latency_p99_ms']:.2f} ms; "
                      f"{busy}", flush=True)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print()
    print("| server | conns | req/s (median) | CPU µs/req | cores | p99 ms | busiest threads |")
    print("|---|---|---|---|---|---|---|")
    for conns in sorted({r["connections"] for r in results}):
        for name in servers:
            rs = sorted((r for r in results if r["server"] == name and r["connections"] == conns),
                        key=lambda r: r["rps"])
            if not rs:
                continue
            m = rs[len(rs) // 2]
            busy = ", ".join(f"{t['thread']} {t['busy']*100:.0f}%" for t in m["threads"][:3])
            print(f"| {name} | {conns} | {m['rps']:.0f} | {m['cpu_us_per_req']:.1f} | "
                  f"{m['cores']:.2f} | {m['latency_p99_ms']:.2f} | {busy} |")


if __name__ == "__main__":
    sys.exit(main())
