#!/usr/bin/env python3
"""Side-by-side HTTP benchmark: m0serve against Granian and bjoern, per thread.

Starts each server on the same app (benches/apps/), checks one response, warms it up, then
drives it with wrk (one wrk thread, browser-like headers) in alternating rounds, and
samples every thread's CPU time of the server's whole process tree from
/proc/PID/task/TID/stat over each run. Writes the raw results as JSON and the markdown
tables for BENCHMARKS.md (also printed), and with --svg a chart of req/s against
connections per scenario (docs/bench-<scenario>.svg).

    scripts/bench.py --servers m0serve,m0serve:blocking-threads=0,granian,bjoern --scenario hello,64k,post1m,flask \\
        --connections 16,64,256 --duration 8 --rounds 3 --svg

`--tls`: every server serves HTTPS with a certificate made for the run, and wrk speaks TLS.
`--pin 1:0`: every server runs on CPU 1 and the load generator on CPU 0 (`taskset -c`), so
that the two do not compete for a core.
`--client m0load`: benches/loadgen (built into target/release on first use) in place of wrk:
the same closed loop, one thread, one request outstanding a connection, but one `read` of up
to 256 KiB a wake-up where wrk reads 8 KiB and asks FIONREAD between reads (20 system calls
for a 64 KiB response), so that a large response measures the server rather than the client.
With `--rate R` it replaces oha too: m0load's open loop sends request k at start + k/R on the
connection idle longest and counts its latency from then (no coordinated omission), on one
thread that waits to the nanosecond, and reports how late it sent (`send_lag_*`), so a run
whose client fell behind shows it. `--interleave S` (with `--rate` and `--client m0load`)
runs a round's servers at once and gives them the schedule in turns of S seconds, so that
each meets the host's state (a hypervisor's steal comes and goes over seconds) of the same
minutes; each turn's p99 is kept, and the report compares them pair by pair.
At a rate m0load first sends for 0.5 s on the run's connections (interleaved: a turn for each
server) and leaves that out of the figures (`--warmup`): every server answers a burst of
fresh connections late, and that burst would set each run's p99.9.
At a rate m0load also runs its `--stall-probe` (a thread that naps 1 ms at a time and notes
each wake-up 150 us or more late: the host ran nothing of ours then), and each run reports
its p99 outside those stalls (`outside_stalls`) beside the p99 of every request: the part
of a tail that was the server's, not the minute's.
`--trace-others` (with `--rate` and `--client m0load`, as root): perf records the machine's
context switches over each run (`sched:sched_switch`, filtered in the kernel to those that
involve a thread that is neither a server's nor the client's), m0load logs each request's
due time and latency (`--log`), and each run also reports its p50/p90/p99/p99.9 over the
requests due outside the windows around other processes' runs of 200 us or more (from 1 ms
before one to 2 ms plus its length after it): what a daemon, a kernel thread or perf itself
took from the CPUs, which the stall probe, a real-time thread, never waits behind.
Every run records the client's own CPU (`client_cores`) beside the server's, and the host's
steal time over the run (`host_steal`, from /proc/stat: CPU time a hypervisor gave to other
guests; a run that lost much of the machine is not comparable with its round's others).

Scenarios: hello (13-byte body), 64k (a 64 KiB body from a list), post1m (1 MiB POST
echoed back; throughput reported in MiB/s each way), flask (a small Flask app, jsonify).

Servers: `m0serve` (target/release/m0serve), `m0serve@PATH` (another build, for an A/B of
a change), `granian`, `bjoern` (through benches/run_bjoern.py), `fastwsgi` (through
benches/run_fastwsgi.py), `uwsgi` (pyuwsgi, `--http11-socket`), `gunicorn` (gthread). Any server may carry
option overrides after a `:`, e.g. `m0serve:workers=2` or `m0serve:blocking-threads=0`
(and `m0serve:static-response`, the loop's ceiling: no Python per request; `m0serve:metrics`, with `--metrics-port` on; `m0serve:preload`, its workers forked from one import;
`m0serve:cpu-affinity=auto`, its `--cpu-affinity`; `m0serve:scheduling-policy=normal`, its `--scheduling-policy`; `m0serve:idle-poll=50`, its `--idle-poll`; `SERVER:pin=N`, that server alone under `taskset -c N`, the client free),
so that two shapes alternate in one run. Granian, bjoern (bjoern-binary) and Flask are
installed into .venv/ on first use (`python3 -m venv .venv`, then pip); m0serve is run
with VIRTUAL_ENV=.venv so every server imports the same packages. If bjoern cannot be
installed, it is skipped with a message.

`--report FILE.json` rebuilds the tables (and the chart, with --svg) from saved results.
Each chart carries its figures (JSON in its <metadata>): `--redraw-svg docs/bench-*.svg`
draws the charts again from them, e.g. after a change of style. Each series has a colour, a
marker and a dash pattern of its own (STYLES), which `--check-svg FILE...` checks.
"""

import argparse
import bisect
import datetime
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import http.client
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPS = os.path.join(ROOT, "benches", "apps")
# M0BENCH_VENV: another virtual environment for the peers (and m0serve's VIRTUAL_ENV).
VENV = os.path.abspath(os.environ.get("M0BENCH_VENV") or os.path.join(ROOT, ".venv"))
VENV_BIN = os.path.join(VENV, "bin")
TICK = os.sysconf("SC_CLK_TCK")
HEADERS = [
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Encoding: gzip, deflate, br",
    "Accept-Language: en-US,en;q=0.5",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Connection: keep-alive",
]
MIB = 1 << 20
# --tls: (certfile, keyfile) every server is given, and the clients speak HTTPS.
TLS = None
# --pin: (the servers' CPU list, the client's), as `taskset -c` takes them.
PIN = None
# --trace-others: perf records the machine's context switches over each run at a rate.
TRACE = False
# --clients: how many m0load processes share a saturation run's connections.
CLIENTS = 1

# name -> app module in benches/apps, what is sent, what must come back.
SCENARIOS = {
    "hello": {"app": "hello", "title": "hello world (13-byte body)",
              "body_len": 13},
    "64k": {"app": "body64k", "title": "64 KiB response body",
            "body_len": 65536},
    "post1m": {"app": "echo", "title": "1 MiB POST echoed back",
               "post_bytes": MIB, "body_len": MIB},
    "flask": {"app": "flask_app", "title": "small Flask app (jsonify)",
              "body_contains": b"Hello, World!", "needs": ["flask"]},
}
DISPLAY = {"m0serve": "m0serve", "granian": "Granian", "bjoern": "bjoern",
           "gunicorn": "gunicorn", "fastwsgi": "FastWSGI", "uwsgi": "uWSGI"}
# Which pip package gives each importable module or console script in .venv.
PIP = {"granian": "granian", "bjoern": "bjoern-binary", "flask": "flask",
       "gunicorn": "gunicorn", "fastwsgi": "fastwsgi", "uwsgi": "pyuwsgi"}


# ---------------------------------------------------------------------------------------
# Servers


# Overrides that take a value (SERVER:key=value); the m0serve-only ones are passed as the
# flag of that name.
VALUE_OVERRIDES = ("workers", "blocking-threads", "pin")
M0SERVE_VALUE_OVERRIDES = ("cpu-affinity", "scheduling-policy", "idle-poll")


def opt_key(k):
    """An override's key as the flag spells it: `--blocking_threads` -> `blocking-threads`."""
    return k.lstrip("-").replace("_", "-")


def parse_server(spec):
    """'m0serve@PATH:workers=2' -> {'spec', 'kind', 'binary', 'opts'}."""
    base, _, opts = spec.partition(":")
    kind, _, binary = base.partition("@")
    if kind not in DISPLAY:
        raise SystemExit(f"unknown server {kind!r} in {spec!r} (m0serve, m0serve@PATH, "
                         "granian, bjoern, gunicorn, fastwsgi, uwsgi)")
    if binary and kind != "m0serve":
        raise SystemExit(f"{spec}: only m0serve takes @PATH")
    overrides = {}
    for kv in filter(None, opts.split(",")):
        k, sep, v = kv.partition("=")
        k = opt_key(k)
        if k in ("static-response", "metrics", "preload") and not sep and kind == "m0serve":
            # static-response: the loop's ceiling (it answers itself, no Python per
            # request); metrics: --metrics-port on, to measure what counting costs;
            # preload: workers forked from one import.
            overrides[k] = True
            continue
        if sep and k in M0SERVE_VALUE_OVERRIDES and kind == "m0serve":
            # --cpu-affinity (auto, or one CPU: a list's commas would split the server
            # list), --scheduling-policy (normal), --idle-poll (microseconds)
            overrides[k] = v
            continue
        if not sep or k not in VALUE_OVERRIDES:
            raise SystemExit(f"{spec}: overrides are workers=N, blocking-threads=N, pin=CPU "
                             "and (m0serve) static-response, metrics, preload, cpu-affinity=V, "
                             "scheduling-policy=V, idle-poll=MICROSECONDS")
        overrides[k] = int(v)
    # A relative PATH is the caller's: each server runs in a directory of its own.
    binary = os.path.abspath(binary) if binary else None
    return {"spec": spec, "kind": kind, "binary": binary, "opts": overrides}


def split_servers(text):
    """Commas separate servers, except inside a server's ':opt=v,opt=v' list."""
    out = []
    for part in text.split(","):
        if out and "=" in part and ":" not in part and "@" not in part \
                and opt_key(part.split("=")[0]) in VALUE_OVERRIDES + M0SERVE_VALUE_OVERRIDES:
            out[-1] += "," + part
        else:
            out.append(part)
    return [p for p in out if p]


def server_cmd(srv, port, app, workers, threads):
    workers = srv["opts"].get("workers", workers)
    threads = srv["opts"].get("blocking-threads", threads)
    if srv["kind"] == "m0serve":
        binary = srv["binary"] or os.path.join(ROOT, "target", "release", "m0serve")
        extra = ["--static-response"] if srv["opts"].get("static-response") else []
        if srv["opts"].get("metrics"):
            extra += ["--metrics-port", str(free_port())]
        if srv["opts"].get("preload"):
            extra.append("--preload")
        for opt in M0SERVE_VALUE_OVERRIDES:
            if srv["opts"].get(opt):
                extra += [f"--{opt}", srv["opts"][opt]]
        if TLS:
            extra += ["--certfile", TLS[0], "--keyfile", TLS[1]]
        return [binary, f"{app}:app",
                "--app-dir", APPS, "--port", str(port), "--workers", str(workers),
                "--blocking-threads", str(threads), "--log-level", "warning"] + extra
    if srv["kind"] == "granian":
        tls = ["--ssl-certificate", TLS[0], "--ssl-keyfile", TLS[1]] if TLS else []
        return [os.path.join(VENV_BIN, "granian"), "--interface", "wsgi",
                "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                "--blocking-threads", str(threads), "--no-ws", "--log-level", "warning"] \
            + tls + [f"{app}:app"]
    if srv["kind"] == "gunicorn":
        # The threaded worker: `threads` app threads per process, like --blocking-threads.
        return [os.path.join(VENV_BIN, "gunicorn"), "--chdir", APPS,
                "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                "--worker-class", "gthread", "--threads", str(max(threads, 1)),
                "--log-level", "warning", f"{app}:app"]
    if srv["kind"] == "fastwsgi":
        return [os.path.join(VENV_BIN, "python"),
                os.path.join(ROOT, "benches", "run_fastwsgi.py"), app, "127.0.0.1", str(port)]
    if srv["kind"] == "uwsgi":
        # Its native HTTP/1.1 keep-alive socket, no master, `threads` app threads.
        return [os.path.join(VENV_BIN, "uwsgi"), "--http11-socket", f"127.0.0.1:{port}",
                "--module", f"{app}:app", "--pythonpath", APPS,
                "--processes", str(workers), "--threads", str(max(threads, 1)),
                "--disable-logging", "--die-on-term", "--need-app", "--lazy-apps"]
    if srv["kind"] == "bjoern":
        return [os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "benches", "run_bjoern.py"),
                app, "127.0.0.1", str(port)]
    raise AssertionError(srv)


def server_env():
    env = dict(os.environ)
    if os.path.exists(os.path.join(VENV_BIN, "python")):
        # m0serve embeds CPython: with VIRTUAL_ENV it uses the venv's site-packages (Flask).
        env["VIRTUAL_ENV"] = VENV
    env.pop("PYTHONPATH", None)
    return env


def venv_has(module):
    if module in ("granian", "gunicorn", "uwsgi"):
        return os.access(os.path.join(VENV_BIN, module), os.X_OK)
    py = os.path.join(VENV_BIN, "python")
    return os.path.exists(py) and subprocess.run(
        [py, "-c", f"import {module}"], capture_output=True).returncode == 0


def ensure_venv(modules):
    """Installs what is missing of `modules` into .venv; returns the modules still missing."""
    missing = [m for m in modules if not venv_has(m)]
    if not missing:
        return []
    if not os.path.exists(os.path.join(VENV_BIN, "python")):
        print(f"creating {VENV} ({sys.executable} -m venv)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    for m in missing:  # one at a time, so that one failure does not block the others
        print(f"installing {PIP[m]} into {VENV}", flush=True)
        r = subprocess.run([os.path.join(VENV_BIN, "pip"), "install", "--quiet", PIP[m]])
        if r.returncode != 0:
            print(f"  pip install {PIP[m]} failed (exit {r.returncode})", flush=True)
    return [m for m in missing if not venv_has(m)]


def versions(servers):
    def out(cmd, any_rc=False):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if r.returncode != 0 and not any_rc:
                return None
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None

    py = os.path.join(VENV_BIN, "python")
    w = out(["wrk", "-v"], any_rc=True)  # "wrk 4.1.0 [epoll] Copyright ...", exit 1
    v = {"wrk": w.split(" Copyright")[0] if w else None, "python": platform.python_version()}
    if os.path.exists(py):
        v["venv_python"] = out([py, "--version"])  # the CPython every server runs
        for pkg in ("granian", "bjoern-binary", "flask", "gunicorn", "fastwsgi", "pyuwsgi"):
            v[pkg] = out([py, "-c", "import importlib.metadata as m, sys; "
                          f"print(m.version('{pkg}'))"])
    for srv in servers:
        if srv["kind"] == "m0serve":
            binary = srv["binary"] or os.path.join(ROOT, "target", "release", "m0serve")
            v["m0serve" + (f"@{srv['binary']}" if srv["binary"] else "")] = \
                out([binary, "--version"])
    try:
        v["m0serve_commit"] = subprocess.run(
            ["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
            text=True).stdout.strip() or None
    except OSError:
        pass
    return v


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / MIB, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_gib": mem, "kernel": platform.release(),
            "hostname": socket.gethostname()}


# ---------------------------------------------------------------------------------------
# Per-thread CPU


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


def host_cpu():
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where it cannot be read:
    the share of a run's CPU time the hypervisor gave to others (a run that lost much of
    the machine is not comparable with its round's neighbours)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[7], sum(fields)


# ---------------------------------------------------------------------------------------
# Load


def wait_ready(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def check_response(port, scen, timeout=30):
    """One request by hand: the server answers this scenario's request correctly."""
    if TLS:
        import ssl
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                           context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if scen.get("post_bytes"):
            conn.request("POST", "/", body=b"x" * scen["post_bytes"],
                         headers={"Content-Type": "application/octet-stream"})
        else:
            conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"check request: status {resp.status}: {body[:200]!r}")
    if "body_len" in scen and len(body) != scen["body_len"]:
        raise RuntimeError(f"check request: body of {len(body)} bytes, "
                           f"expected {scen['body_len']}")
    if "body_contains" in scen and scen["body_contains"] not in body:
        raise RuntimeError(f"check request: unexpected body {body[:200]!r}")


def lua_script(scen):
    """A wrk Lua script for scenarios with a request body, else None."""
    if not scen.get("post_bytes"):
        return None
    f = tempfile.NamedTemporaryFile("w", prefix="m0bench-", suffix=".lua", delete=False)
    f.write('wrk.method = "POST"\n'
            f'wrk.body = string.rep("x", {scen["post_bytes"]})\n'
            'wrk.headers["Content-Type"] = "application/octet-stream"\n')
    f.close()
    return f.name


def to_ms(value, unit):
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}[unit]


def client_cpus():
    """`taskset -c CPUS` for the load generator under --pin, else nothing."""
    return ["taskset", "-c", PIN[1]] if PIN else []


def children_cpu_s():
    """CPU seconds used so far by the children reaped (the load generators: a server, also
    a child, is reaped only after its run)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_client(cmd, duration):
    """Runs the load generator; returns its CompletedProcess and the CPU seconds it used."""
    before = children_cpu_s()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    return p, children_cpu_s() - before


# ---------------------------------------------------------------------------------------
# --trace-others: what the rest of the machine ran beside a run at a rate

# A run of another process's thread this long or longer (on any CPU) marks a window...
OTHERS_MIN_US = 200
# ... from this long before it starts to this long plus its own length after it ends (the
# backlog it left drains), and the requests due in a window are left out of the figures
# outside other processes.
OTHERS_BEFORE_US = 1000
OTHERS_AFTER_US = 2000
# A run whose end the trace lacks (the next switch recorded on its CPU is from another
# thread) is taken to end at that switch, at most this long after it began. (This VM's PID
# 1, its agent, shows its threads' switches in and never out, in perf and ftrace alike; its
# bursts last up to a few ms.)
OTHERS_MAX_RUN_US = 10_000
# At a rate, m0load first sends this long on the run's connections and leaves it out of its
# figures (`--warmup`; interleaved, a turn for each server): a burst of fresh connections is
# answered late by every server (0.5-13 ms for the first 20-30 ms at 256 connections here),
# which would set every run's p99.9.
SETTLE_S = 0.5


class OthersTrace:
    """`perf record -e sched:sched_switch -a` over one m0load run at a rate, with
    `m0load --log`: afterwards each request's due time is set beside the runs of every
    thread on the machine that is neither the servers' nor m0load's (another tenant's
    daemon, a kernel thread, perf itself), and each target gets its figures over the
    requests due outside those runs' windows. The timestamps are CLOCK_MONOTONIC on both
    sides (`perf record -k CLOCK_MONOTONIC`, m0load's log).

    A switch from one of ours (the servers' threads when the trace starts, m0load, the
    idle task) to another of ours is filtered out in the kernel: recording each of the
    tens of thousands a second would cost the server that switches most (threaded m0serve
    at 27 000 req/s: 7 % more of its CPU, against 3 % with the filter); the rest are a few
    thousand a second."""

    def __init__(self, server_pids):
        self.dir = tempfile.mkdtemp(prefix="m0bench-trace-")
        self.log = os.path.join(self.dir, "requests.txt")
        self.data = os.path.join(self.dir, "perf.data")
        # Ours: the idle task (0), the servers' threads, and m0load's (by name: it starts
        # after the trace).
        self.tids = {0}
        for pid in server_pids:
            for p in tree(pid):
                try:
                    self.tids.update(int(t) for t in os.listdir(f"/proc/{p}/task"))
                except OSError:
                    pass
        ours = {side: " && ".join([f'{side}_comm != "m0load"'] +
                                  [f"{side}_pid != {t}" for t in sorted(self.tids)])
                for side in ("prev", "next")}
        # Its messages go to a file: a pipe nobody reads could fill and stop it.
        with open(os.path.join(self.dir, "perf.err"), "w+b") as err:
            self.perf = subprocess.Popen(
                ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "sched:sched_switch",
                 "--filter", f"({ours['prev']}) || ({ours['next']})", "-a", "-o", self.data],
                stdout=subprocess.DEVNULL, stderr=err)
            # perf opens its events before it writes the file's header: wait for the header.
            deadline = time.time() + 10
            while not (os.path.exists(self.data) and os.path.getsize(self.data) > 0):
                if self.perf.poll() is not None or time.time() > deadline:
                    self.perf.kill()
                    self.perf.wait()
                    err.seek(0)
                    why = err.read().decode(errors="replace")[-300:]
                    self.close()
                    raise RuntimeError(f"perf record did not start: {why}")
                time.sleep(0.02)

    def figures(self, targets):
        """Stops perf; returns one dict a target: requests, excluded (the share left out),
        p50/p90/p99/p999 ms outside the windows, and the other processes' runs (count,
        ms) that made windows."""
        self.perf.send_signal(signal.SIGINT)
        try:
            self.perf.wait(30)
        except subprocess.TimeoutExpired:
            self.perf.kill()
            self.perf.wait()
        p = subprocess.run(["perf", "script", "-i", self.data, "--ns", "-F", "cpu,time,trace"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"perf script failed: {p.stderr[-300:]}")
        windows, runs, run_ms = others_windows(p.stdout, self.tids)
        out = []
        with open(self.log) as f:
            log = [tuple(map(int, line.split())) for line in f]
        for t in range(targets):
            lat = [(due, us) for i, due, us in log if i == t]
            out.append(outside_windows(lat, windows) | {"other_runs": runs,
                                                         "other_ms": round(run_ms, 1)})
        return out

    def close(self):
        if self.perf.poll() is None:
            self.perf.kill()
            self.perf.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def others_windows(script, ours):
    """From `perf script -F cpu,time,trace` of sched_switch events: the merged windows, in
    CLOCK_MONOTONIC ns, around the runs of OTHERS_MIN_US or more of the threads that are
    not ours (thread ids in `ours`, or named m0load); their count and total ms.

    A run is the switched-to thread's, from its event to the next event on that CPU (the
    kernel filter drops only switches between two of ours, so the next event on the CPU
    of a run not ours is the one that ends it, unless the trace lacks it:
    OTHERS_MAX_RUN_US)."""
    line_re = re.compile(r"^\s*\[(\d+)\]\s+(\d+)\.(\d{9}):.* prev_pid=(\d+) .*"
                         r" ==> next_comm=(.*?) next_pid=(\d+) next_prio=")
    running = {}  # cpu -> (since, thread id, one of ours)
    spans, total = [], 0
    for line in script.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        cpu = int(m.group(1))
        t = int(m.group(2)) * 1_000_000_000 + int(m.group(3))
        tid = int(m.group(6))
        prev = running.get(cpu)
        running[cpu] = (t, tid, m.group(5) == "m0load" or tid in ours)
        if prev is None or prev[2]:
            continue
        length = t - prev[0]
        if int(m.group(4)) != prev[1]:
            length = min(length, OTHERS_MAX_RUN_US * 1000)
        if length < OTHERS_MIN_US * 1000:
            continue
        total += length
        spans.append((prev[0] - OTHERS_BEFORE_US * 1000,
                      prev[0] + length + OTHERS_AFTER_US * 1000 + length))
    spans.sort()
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged, len(spans), total / 1e6


def outside_windows(lat, windows):
    """Percentiles (m0load's rank: the ceil(p% of n)th) of the latencies whose due time
    falls outside every window; `lat` is [(due_ns, us)]."""
    starts = [w[0] for w in windows]
    kept = []
    for due, us in lat:
        i = bisect.bisect_right(starts, due) - 1
        if i < 0 or due > windows[i][1]:
            kept.append(us)
    kept.sort()

    def at(p):
        if not kept:
            return None
        return kept[max(math.ceil(p / 100 * len(kept)), 1) - 1] / 1000

    return {"requests": len(kept), "excluded": round(1 - len(kept) / max(len(lat), 1), 4),
            "p50_ms": at(50), "p90_ms": at(90), "p99_ms": at(99), "p999_ms": at(99.9)}


def wrk(port, conns, duration, script=None, path="/"):
    cmd = client_cpus() + ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    for h in HEADERS:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    cmd.append(f"{'https' if TLS else 'http'}://127.0.0.1:{port}{path}")
    p, cpu = run_client(cmd, duration)
    out = p.stdout
    if p.returncode != 0 or "Requests/sec" not in out:
        raise RuntimeError(f"wrk failed (exit {p.returncode}): {(out + p.stderr)[-500:]}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    lat = re.search(r"Latency\s+([\d.]+)(\w+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(\w+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": rps,
        "requests": reqs,
        "latency_avg_ms": to_ms(*lat.groups()),
        "latency_p99_ms": to_ms(*p99.groups()),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": dict(zip(("connect", "read", "write", "timeout"),
                                  map(int, sock.groups()))) if sock else {},
        "client_cpu_s": cpu,
    }


M0LOAD = os.path.join(ROOT, "target", "release", "m0load")


def build_m0load():
    """cargo builds benches/loadgen (the workspace's m0load) into target/release (a no-op
    when it is current). Where there is no cargo (a machine the tree was copied to with
    m0load built), the binary already there is used."""
    if shutil.which("cargo") is None and os.access(M0LOAD, os.X_OK):
        print(f"no cargo here: using {os.path.relpath(M0LOAD, ROOT)} as it is", flush=True)
        return
    r = subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "m0load",
                        "--manifest-path", os.path.join(ROOT, "Cargo.toml"),
                        "--target-dir", os.path.join(ROOT, "target")])
    if r.returncode != 0 or not os.access(M0LOAD, os.X_OK):
        raise SystemExit(f"building benches/loadgen failed (exit {r.returncode})")


def m0load_cmd(conns, duration, port, post_bytes=0, path="/", rate=0):
    cmd = [M0LOAD, "-c", str(conns), "-d", str(duration)]
    if rate:
        cmd += ["--rate", str(rate), "--warmup", str(SETTLE_S), "--stall-probe"]
    for h in HEADERS:
        cmd += ["-H", h]
    if post_bytes:
        cmd += ["--body-bytes", str(post_bytes)]
    return cmd + [f"http://127.0.0.1:{port}{path}"]


def m0load(port, conns, duration, post_bytes=0, path="/", rate=0, trace=None):
    """A run with benches/loadgen: at saturation, wrk's closed loop at a lower cost a
    response; with `rate`, its open loop (each request measured from when it was due, one
    thread, each request sent at its own time). `trace`: an OthersTrace over the run."""
    if TLS:
        raise RuntimeError("--client m0load speaks plain HTTP only")
    if CLIENTS > 1 and not rate:
        return m0load_many(port, conns, duration, post_bytes, path)
    cmd = client_cpus() + m0load_cmd(conns, duration, port, post_bytes, path, rate)
    if trace:
        cmd[-1:-1] = ["--log", trace.log]
    p, cpu = run_client(cmd, duration)
    try:
        d = json.loads(p.stdout)
    except ValueError:
        d = None
    if p.returncode != 0 or d is None:
        raise RuntimeError(f"m0load failed (exit {p.returncode}): {(p.stdout + p.stderr)[-500:]}")
    out = m0load_result(d, cpu, rate)
    if trace:
        out["outside_others"] = trace.figures(1)[0]
    return out


def cpu_list(spec):
    """The CPUs a `taskset -c` list names ('0,2,4-7'), in order."""
    out = []
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        out += range(int(lo), int(hi) + 1) if sep else [int(lo)]
    return out


def m0load_many(port, conns, duration, post_bytes, path):
    """`--clients K` at saturation: K m0load processes at once, the connections shared out
    among them (the first `conns % K` one more each) and, under --pin, each on one CPU of
    the client's list in turn: one client thread cannot load a server of many workers. The
    result sums their requests and errors; its p99 is the highest of theirs (their
    histograms are not merged) and its average latency theirs weighted by requests."""
    cpus = cpu_list(PIN[1]) if PIN else []
    shares = [conns // CLIENTS + (i < conns % CLIENTS) for i in range(CLIENTS)]
    before = children_cpu_s()
    procs = []
    try:
        for i, c in enumerate(shares):
            pin = ["taskset", "-c", str(cpus[i % len(cpus)])] if cpus else []
            procs.append(subprocess.Popen(pin + m0load_cmd(c, duration, port, post_bytes, path),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outs = [p.communicate(timeout=duration + 60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    cpu = children_cpu_s() - before
    each = []
    for p, (stdout, stderr) in zip(procs, outs):
        try:
            d = json.loads(stdout)
        except ValueError:
            d = None
        if p.returncode != 0 or d is None:
            raise RuntimeError(f"m0load (one of {CLIENTS}) failed (exit {p.returncode}): "
                               f"{(stdout + stderr)[-500:]}")
        each.append(m0load_result(d, 0.0, 0))
    requests = sum(r["requests"] for r in each)
    errors = {}
    for r in each:
        for k, v in r["socket_errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "rps": sum(r["rps"] for r in each),
        "requests": requests,
        "latency_avg_ms": sum(r["latency_avg_ms"] * r["requests"] for r in each)
        / max(requests, 1),
        "latency_p99_ms": max(r["latency_p99_ms"] for r in each),
        "non_2xx": sum(r["non_2xx"] for r in each),
        "socket_errors": errors,
        "client_cpu_s": cpu,
        "clients": [{"connections": c, "requests": r["requests"], "rps": r["rps"],
                     "latency_p99_ms": r["latency_p99_ms"]} for c, r in zip(shares, each)],
    }


def m0load_result(d, cpu, rate):
    """One target's figures from m0load's JSON, as the other clients' results have them."""
    e = d["errors"]
    out = {
        "rps": d["rps"],
        "requests": d["requests"],
        "latency_avg_ms": d["latency_avg_ms"],
        "latency_p99_ms": d["latency_p99_ms"],
        "non_2xx": d["non_2xx"],
        "socket_errors": {k: e[k] for k in ("connect", "read", "write", "timeout")},
        "client_cpu_s": cpu,
    }
    if rate:
        out.update({k: d[k] for k in ("latency_p50_ms", "latency_p90_ms", "latency_p999_ms",
                                      "latency_max_ms", "send_lag_p50_ms", "send_lag_p99_ms",
                                      "send_lag_max_ms", "unsent", "warmup_requests")})
        if d["unsent"]:
            # Due and never sent: the server held every connection past the run's end.
            out["socket_errors"]["unsent"] = d["unsent"]
    for k in ("outside_stalls", "host_stalls"):
        if k in d:
            out[k] = d[k]
    if "turns" in d:
        out["turns"] = d["turns"]
        out["quiet"] = d["quiet"]
        steal = [t["steal"] for t in d["turns"] if t["steal"] is not None]
        if steal:
            out["host_steal"] = sum(steal) / len(steal)
    return out


def oha(port, conns, duration, rate, script=None, path="/"):
    """A fixed-rate run: oha sends `rate` requests a second over `conns` keep-alive
    connections and measures each from when it was due to be sent
    (`--latency-correction`), so a stall is charged to every request it delays (no
    coordinated omission, which wrk's closed loop has)."""
    if script:
        raise RuntimeError("--rate runs GET scenarios only")
    cmd = ["oha", "-z", f"{duration}s", "-q", str(rate), "-c", str(conns),
           "--latency-correction", "--no-tui", "--output-format", "json"]
    for h in HEADERS:
        cmd += ["-H", h]
    cmd.append(f"{'https' if TLS else 'http'}://127.0.0.1:{port}{path}")
    if TLS:
        cmd.insert(1, "--insecure")
    cmd = client_cpus() + cmd
    p, cpu = run_client(cmd, duration)
    try:
        d = json.loads(p.stdout)
    except ValueError:
        raise RuntimeError(f"oha failed (exit {p.returncode}): {(p.stdout + p.stderr)[-500:]}")
    codes = {int(k): v for k, v in d.get("statusCodeDistribution", {}).items()}
    lat = d["latencyPercentiles"]
    return {
        "rps": d["summary"]["requestsPerSec"],
        "requests": sum(codes.values()),
        "latency_avg_ms": d["summary"]["average"] * 1e3,
        "latency_p50_ms": lat["p50"] * 1e3,
        "latency_p99_ms": lat["p99"] * 1e3,
        "latency_p999_ms": lat["p99.9"] * 1e3,
        "non_2xx": sum(v for k, v in codes.items() if not 200 <= k < 400),
        # Requests still in flight when the duration ends are "aborted due to deadline":
        # the end of the run, not an error.
        "socket_errors": {k: v for k, v in d.get("errorDistribution", {}).items()
                          if k != "aborted due to deadline"},
        "client_cpu_s": cpu,
    }


def load(port, conns, duration, args, scen, script=None, trace=None):
    """One measured run: wrk (or m0load, --client) at saturation; at `--rate`, oha (or
    m0load's open loop, --client m0load). `trace` (--trace-others): an OthersTrace over
    the run, whose figures outside other processes' runs it adds."""
    if args.rate and args.client == "m0load":
        if script:
            raise RuntimeError("--rate runs GET scenarios only")
        return m0load(port, conns, duration, rate=args.rate, trace=trace)
    if args.rate:
        return oha(port, conns, duration, args.rate, script)
    if args.client == "m0load":
        return m0load(port, conns, duration, scen.get("post_bytes", 0))
    return wrk(port, conns, duration, script)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            print(f"  pid {proc.pid} ignored SIGINT for 10 s: killed", flush=True)
            for p in reversed(tree(proc.pid)):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()


def launch(srv, app, args, errlog):
    """Starts one server on a free port; returns (process, port, command)."""
    port = free_port()
    cmd = server_cmd(srv, port, app, args.workers, args.blocking_threads)
    if PIN or "pin" in srv["opts"]:
        # taskset executes the server in its own process, so the pid sampled is the server's.
        cmd = ["taskset", "-c", str(srv["opts"].get("pin", PIN and PIN[0]))] + cmd
    try:
        proc = subprocess.Popen(cmd, cwd=APPS, env=server_env(), stdout=subprocess.DEVNULL,
                                stderr=errlog)
    except OSError as e:
        raise RuntimeError(f"cannot start {cmd[0]}: {e}") from None
    return proc, port, cmd


def with_stderr(err, errlog):
    """`err` as a RuntimeError that quotes the end of the server's stderr."""
    errlog.seek(0)
    tail = errlog.read()[-1500:].decode(errors="replace").strip()
    return RuntimeError(f"{err}" + (f"\n  server stderr: {tail}" if tail else ""))


def run_one(srv, scen_name, app, conns, args, script):
    scen = SCENARIOS[scen_name]
    with tempfile.TemporaryFile() as errlog:
        proc, port, cmd = launch(srv, app, args, errlog)
        err, trace = None, None
        try:
            wait_ready(port, proc)
            check_response(port, scen)
            if args.warmup > 0:
                load(port, conns, args.warmup, args, scen, script)
            # --trace-others: perf is up before the server's CPU is sampled.
            if TRACE and args.rate and args.client == "m0load":
                trace = OthersTrace([proc.pid])
            before = sample(proc.pid)
            host0 = host_cpu()
            t0 = time.time()
            res = load(port, conns, args.duration, args, scen, script, trace)
            wall = time.time() - t0
            host1 = host_cpu()
            after = sample(proc.pid)
        except Exception as e:  # reported with the server's stderr, and the bench goes on
            err = e
        finally:
            if trace:
                trace.close()
            stop(proc)  # also on KeyboardInterrupt
        if err is not None:
            raise with_stderr(err, errlog)
    res = measured(res, srv, scen_name, app, conns, cmd, before, after, wall)
    if host0 and host1 and host1[1] > host0[1]:
        res["host_steal"] = (host1[0] - host0[0]) / (host1[1] - host0[1])
    return res


def run_interleaved(servers, scen_name, app, conns, args):
    """Every server of the round at once, each on its own port, and one m0load run at
    `--rate` that gives them the schedule in turns of `--interleave` seconds, in order,
    `--duration` seconds each in all: every server meets the host's state of the same
    minutes. Returns one result per server, or {"error"} for one that could not start."""
    scen = SCENARIOS[scen_name]
    started, out = [], {}
    logs = [tempfile.TemporaryFile() for _ in servers]
    try:
        for srv, errlog in zip(servers, logs):
            proc, port, cmd = launch(srv, app, args, errlog)
            started.append((srv, proc, port, cmd, errlog))
        ready = []
        for srv, proc, port, cmd, errlog in started:
            try:
                wait_ready(port, proc)
                check_response(port, scen)
                if args.warmup > 0:
                    load(port, conns, args.warmup, args, scen)
                ready.append((srv, proc, port, cmd, errlog))
            except Exception as e:
                out[srv["spec"]] = {"error": str(with_stderr(e, errlog))}
                stop(proc)
        if not ready:
            return out
        n = len(ready)
        cmd = client_cpus() + [M0LOAD, "-c", str(conns), "-d", str(args.duration * n),
                               "--rate", str(args.rate), "--switch", str(args.interleave),
                               "--warmup", str(args.interleave * n), "--stall-probe"]
        for h in HEADERS:
            cmd += ["-H", h]
        cmd += [f"http://127.0.0.1:{port}/" for _, _, port, _, _ in ready]
        trace = None
        if TRACE:
            trace = OthersTrace([proc.pid for _, proc, _, _, _ in ready])
            cmd += ["--log", trace.log]
        before = {srv["spec"]: sample(proc.pid) for srv, proc, _, _, _ in ready}
        t0 = time.time()
        try:
            p, cpu = run_client(cmd, args.duration * n)
            wall = time.time() - t0
            after = {srv["spec"]: sample(proc.pid) for srv, proc, _, _, _ in ready}
            others = trace.figures(n) if trace and os.path.exists(trace.log) else None
        finally:
            if trace:
                trace.close()
        try:
            d = json.loads(p.stdout)
        except ValueError:
            d = None
        if d is None or "targets" not in d:
            err = f"m0load failed (exit {p.returncode}): {(p.stdout + p.stderr)[-500:]}"
            for srv, *_ in ready:
                out[srv["spec"]] = {"error": err}
            return out
        for k, ((srv, proc, port, scmd, errlog), t) in enumerate(zip(ready, d["targets"])):
            if p.returncode != 0 and (t["requests"] == 0 or t["errors"]["protocol"]):
                out[srv["spec"]] = {"error": f"m0load: {t.get('first_protocol_error') or 'no response'}"}
                continue
            res = m0load_result(t, cpu / n, args.rate)
            if others:
                res["outside_others"] = others[k]
            # Each server had the load for its turns only: a 1/n share of the wall time.
            out[srv["spec"]] = measured(res, srv, scen_name, app, conns, scmd,
                                        before[srv["spec"]], after[srv["spec"]], wall / n)
            out[srv["spec"]]["interleave"] = {"switch": d["switch"], "order": [
                s["spec"] for s, *_ in ready]}
        return out
    finally:
        for _, proc, *_ in started:
            stop(proc)
        for f in logs:
            f.close()


def measured(res, srv, scen_name, app, conns, cmd, before, after, wall):
    """A load generator's result with the server's per-thread CPU over `wall` added (per
    request: over the run's requests and its client's warm-up's, which `wall` includes)."""
    scen = SCENARIOS[scen_name]
    served = max(res["requests"] + res.get("warmup_requests", 0), 1)
    threads_cpu = []
    for key, (tname, cpu) in after.items():
        used = cpu - before.get(key, (tname, 0.0))[1]
        if used > 0:
            threads_cpu.append({"thread": tname, "pid": key[0], "tid": key[1], "cpu_s": used,
                                "busy": used / wall,
                                "cpu_us_per_req": used / served * 1e6})
    threads_cpu.sort(key=lambda t: -t["cpu_s"])
    total = sum(t["cpu_s"] for t in threads_cpu)
    res.update({
        "server": srv["spec"], "kind": srv["kind"], "scenario": scen_name, "app": app,
        "connections": conns, "wall_s": wall, "cpu_s": total,
        "cores": total / wall, "cpu_us_per_req": total / served * 1e6,
        "client_cores": res["client_cpu_s"] / wall,
        "command": shlex.join(cmd), "threads": threads_cpu,
    })
    if scen.get("post_bytes"):
        # Each request carries the body in and the same body out.
        res["mib_s_each_way"] = res["rps"] * scen["post_bytes"] / MIB
    return res


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------
# Report


def fmt_int(x):
    return f"{x:,.0f}".replace(",", " ")


def display(spec):
    kind = spec.partition(":")[0].partition("@")[0]
    return DISPLAY.get(kind, kind) + spec[len(kind):]


def median_run(runs):
    """The run with the median req/s (the lower middle for an even count): its CPU and
    thread figures belong to the same run as its req/s."""
    # At a fixed rate every run has about the same req/s: the median is by p99 then.
    key = "latency_p99_ms" if "latency_p999_ms" in runs[0] else "rps"
    rs = sorted(runs, key=lambda r: r[key])
    return rs[(len(rs) - 1) // 2]


def summarise(results):
    """{(scenario, server, conns): {'median': run, 'runs': [...]}} over the good runs."""
    out = {}
    for r in results:
        if "error" in r:
            continue
        out.setdefault((r["scenario"], r["server"], r["connections"]), []).append(r)
    return {k: {"median": median_run(v), "runs": sorted(v, key=lambda r: r.get("round", 0)),
                "rps_median": statistics.median(x["rps"] for x in v)}
            for k, v in out.items()}


def thread_cell(run, min_busy):
    parts = [f"{t['thread']} {t['busy'] * 100:.0f} % ({t['cpu_us_per_req']:.1f})"
             for t in run["threads"] if t["busy"] >= min_busy]
    rest = [t for t in run["threads"] if t["busy"] < min_busy]
    if rest:
        parts.append(f"{len(rest)} more {sum(t['busy'] for t in rest) * 100:.0f} %")
    return ", ".join(parts)


def rate_client(meta):
    """The load generator of a fixed-rate run, as the reports name it."""
    return "m0load's open loop (benches/loadgen, one thread)" \
        if meta.get("client") == "m0load" else "oha with latency correction"


def client_name(meta):
    """The load generator of a saturation run, as the reports name it."""
    k = meta.get("clients", 1)
    if k > 1:
        return (f"{k} m0load processes (benches/loadgen, one thread each) sharing each run's "
                "connections; a run's p99 is the highest of theirs")
    return "m0load (benches/loadgen, one thread)" if meta.get("client") == "m0load" \
        else "wrk -t1"


def markdown(doc):
    meta, results = doc["meta"], doc["results"]
    servers = meta["servers"]
    summary = summarise(results)
    lines = []
    m = meta.get("machine", {})
    v = meta.get("versions", {})
    lines.append(f"- **Date**: {meta.get('date', '?')}")
    lines.append(f"- **Machine**: {m.get('cpu')}, {m.get('cpus')} CPUs, {m.get('mem_gib')} GiB, "
                 f"Linux {m.get('kernel')}" + (f"; {v['wrk']}" if v.get("wrk") else ""))
    vs = [val if str(val).startswith(k.split("@")[0]) else f"{k} {val}"
          for k, val in v.items() if val and k != "wrk"]
    lines.append("- **Versions**: " + "; ".join(vs))
    lines.append(f"- **Command**: `{meta.get('command')}`")
    lines.append(f"- **Shape**: `--workers {meta['workers']} --blocking-threads "
                 f"{meta['blocking_threads']}` (per-server overrides in the server names); "
                 f"{client_name(meta)}, {meta['duration']} s per run after {meta['warmup']} s of warm-up, "
                 f"{meta['rounds']} alternating rounds, "
                 + ("the round with the median p99 shown (the lower middle of an even count; its p50, "
                    "p99.9 and CPU with it)"
                    if meta.get("rate") else "medians shown")
                 + ("; **HTTPS** (TLS 1.3, P-256 certificate, one handshake per connection)"
                    if meta.get("tls") else "")
                 + (f"; **fixed rate**: {rate_client(meta)} {meta['rate']} req/s, "
                    "p50/p99/p99.9 from each request's due time"
                    if meta.get("rate") else "")
                 + (f"; **interleaved**: a round's servers run at once and take the schedule "
                    f"in turns of {meta['interleave']:g} s, in the round's order, "
                    f"{meta['duration']} s each in all" if meta.get("interleave") else "")
                 + (f"; **pinned**: every server on CPU {meta['pin'][0]}, the client"
                    + (f"s on CPU {meta['pin'][1]}, one CPU each in turn" if meta.get("clients", 1) > 1
                       else f" on CPU {meta['pin'][1]}") + " (`taskset -c`)"
                    if meta.get("pin") else "") + ".")
    lines.append("")
    by_kind = {}
    for s in servers:
        by_kind.setdefault(parse_server(s)["kind"], s)
    gran = by_kind.get("granian")
    # Ratio columns: against each of these peers that was measured.
    refs = [(by_kind[k], DISPLAY[k]) for k in ("granian", "bjoern", "fastwsgi") if k in by_kind]

    def peer(ref, s):
        """The run of `ref`'s server to set `s` against: where the peer ran with several
        worker counts, the one with as many workers as `s` (None without one)."""
        kind, w = parse_server(ref)["kind"], shape_of(s, meta["workers"])[1]
        runs = [x for x in servers if parse_server(x)["kind"] == kind]
        if len({shape_of(x, meta["workers"])[1] for x in runs}) == 1:
            return ref
        return next((x for x in runs if shape_of(x, meta["workers"])[1] == w), None)
    for scen in meta["scenarios"]:
        post = SCENARIOS.get(scen, {}).get("post_bytes")
        lines.append(f"#### {scen}: {SCENARIOS.get(scen, {}).get('title', scen)}")
        lines.append("")
        head = ["conns", "server", "req/s"]
        if post:
            head.append("MiB/s each way")
        head += [f"vs {label}" for _, label in refs]
        fixed_rate = bool(meta.get("rate"))
        head += (["p50 ms", "p99 ms", "p99.9 ms"] if fixed_rate else ["lat avg ms", "p99 ms"])
        with_clean = any("outside_stalls" in r for r in results if r["scenario"] == scen)
        if with_clean:
            head.append("p99 outside host stalls, rounds' median")
        with_others = any("outside_others" in r for r in results if r["scenario"] == scen)
        if with_others:
            head.append("p99 / p99.9 outside other processes, rounds' median")
        head += ["cores", "CPU µs/req"]
        with_client = any("client_cores" in r for r in results if r["scenario"] == scen)
        if with_client:
            head.append("client cores")
        with_steal = any("host_steal" in r for r in results if r["scenario"] == scen)
        if with_steal:
            head.append("steal %")
        if gran:
            head.append("CPU vs Granian")
        head.append("threads: busy share (CPU µs/req)")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        conns_all = sorted({k[2] for k in summary if k[0] == scen})
        for conns in conns_all:
            for s in servers:
                e = summary.get((scen, s, conns))
                if not e:
                    continue
                r = e["median"]
                row = [str(conns), display(s), fmt_int(e["rps_median"])]
                if post:
                    row.append(f"{e['rps_median'] * post / MIB:.0f}")
                for name, _ in refs:
                    name = peer(name, s)
                    ref = summary.get((scen, name, conns))
                    row.append("" if s == name or not ref
                               else f"{e['rps_median'] / ref['rps_median']:.2f}×")
                if fixed_rate:
                    row += [f"{r['latency_p50_ms']:.3f}", f"{r['latency_p99_ms']:.3f}",
                            f"{r['latency_p999_ms']:.3f}"]
                else:
                    row += [f"{r['latency_avg_ms']:.2f}", f"{r['latency_p99_ms']:.2f}"]
                if with_clean:
                    clean = [x["outside_stalls"]["p99_ms"] for x in e["runs"] if "outside_stalls" in x]
                    row.append(f"{statistics.median(clean):.3f}" if clean else "")
                if with_others:
                    row.append(others_cell(e["runs"]))
                row += [f"{r['cores']:.2f}", f"{r['cpu_us_per_req']:.1f}"]
                if with_client:
                    row.append(f"{r['client_cores']:.2f}" if "client_cores" in r else "")
                if with_steal:
                    row.append(f"{r['host_steal'] * 100:.0f}" if "host_steal" in r else "")
                if gran:
                    ref_g = summary.get((scen, peer(gran, s), conns))
                    row.append("" if s == peer(gran, s) or not ref_g else
                               f"{r['cpu_us_per_req'] / ref_g['median']['cpu_us_per_req']:.2f}×")
                row.append(thread_cell(r, 0.02))
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        # Per round, so the spread behind each median is visible.
        per = per_round(summary, scen, servers, conns_all, lambda x: fmt_int(x["rps"]))
        if per:
            lines += ["Per round (req/s): " + per + ".", ""]
        if with_steal:
            per = per_round(summary, scen, servers, conns_all,
                            lambda x: f"{x['host_steal'] * 100:.0f}" if "host_steal" in x else "?")
            lines += ["Host steal per round (% of all CPUs' time the hypervisor gave to "
                      "others during the run): " + per + ".", ""]
        if fixed_rate:
            lines += round_by_round_p99(summary, scen, servers, conns_all)
            if with_clean:
                lines += round_by_round_p99(summary, scen, servers, conns_all, clean_p99,
                                            "p99 outside host stalls")
                per = per_round(summary, scen, servers, conns_all, stall_cell)
                lines += ["Host stalls the client's probe saw per round (count, total ms; the "
                          "share of requests left out as due near one): " + per + ".", ""]
            if with_others:
                for what, key in (("p99", "p99_ms"), ("p99.9", "p999_ms")):
                    lines += round_by_round_p99(
                        summary, scen, servers, conns_all,
                        lambda x, key=key: x["outside_others"][key] if "outside_others" in x else None,
                        f"{what} outside other processes")
                per = per_round(summary, scen, servers, conns_all, others_round)
                lines += ["Other processes' runs per round (count, total ms, of threads "
                          f"neither the servers' nor the client's, {OTHERS_MIN_US} us or more; "
                          "the share of requests left out as due near one): " + per + ".", ""]
            lines += turn_by_turn(summary, scen, servers, conns_all)
            if any("send_lag_p99_ms" in r for r in results if r["scenario"] == scen):
                per = per_round(summary, scen, servers, conns_all,
                                lambda x: f"{x.get('send_lag_p99_ms', 0):.2f}")
                lines += ["The client's send lag per round, p99 ms (how late m0load sent "
                          "a request after it was due, for any reason): " + per + ".", ""]
        lines += workers_scaling(meta, summary, scen, conns_all)
        def real(errors):
            return {k: v for k, v in errors.items() if k != "aborted due to deadline" and v}
        errs = [r for r in results if r["scenario"] == scen and
                ("error" in r or r.get("non_2xx") or real(r.get("socket_errors", {})))]
        for r in errs:
            what = r.get("error") or (f"non-2xx {r.get('non_2xx')}, socket errors "
                                      f"{r.get('socket_errors')}")
            lines.append(f"- {display(r['server'])}, {r['connections']} conns, round "
                         f"{r.get('round')}: {what.splitlines()[0]}")
        if errs:
            lines.append("")
    return "\n".join(lines)


def shape_of(spec, default_workers):
    """A server spec without its workers override, and its worker count."""
    base, _, opts = spec.partition(":")
    kept, workers = [], default_workers
    for kv in filter(None, opts.split(",")):
        k, _, v = kv.partition("=")
        if opt_key(k) == "workers":
            workers = int(v)
        else:
            kept.append(kv)
    return base + (":" + ",".join(kept) if kept else ""), workers


def workers_scaling(meta, summary, scen, conns_all):
    """Where a server ran with several worker counts (`SERVER:workers=N`), a table of its
    median req/s by worker count: each × its own with the fewest workers, and × Granian
    with as many where Granian ran with that count too."""
    shapes = {}
    for s in meta["servers"]:
        shape, w = shape_of(s, meta["workers"])
        shapes.setdefault(shape, {})[w] = s
    shapes = {k: v for k, v in shapes.items() if len(v) > 1}
    if not shapes:
        return []
    counts = sorted({w for v in shapes.values() for w in v})
    gran = shapes.get("granian", {})
    out = [f"Workers scaling ({scen}): median req/s by `--workers`, × the same server with "
           f"{counts[0]}" + (", and × Granian with as many workers" if gran else "")
           + "; then the server's cores and the clients' cores.", ""]
    out.append("| conns | server | " + " | ".join(f"{w} worker{'s' * (w > 1)}" for w in counts) + " |")
    out.append("|" + "---|" * (len(counts) + 2))
    for conns in conns_all:
        for shape, by_w in shapes.items():
            base = summary.get((scen, by_w.get(min(by_w)), conns))
            cells = []
            for w in counts:
                e = summary.get((scen, by_w.get(w), conns))
                if not e:
                    cells.append("")
                    continue
                r = e["median"]
                ratios = []
                if base and w != min(by_w):
                    ratios.append(f"{e['rps_median'] / base['rps_median']:.2f}×")
                g = summary.get((scen, gran.get(w), conns)) if shape != "granian" else None
                if g:
                    ratios.append(f"{e['rps_median'] / g['rps_median']:.2f}× Granian")
                cell = fmt_int(e["rps_median"]) + (f" ({', '.join(ratios)})" if ratios else "")
                cell += f"; {r['cores']:.2f} / {r.get('client_cores', 0):.2f} cores"
                cells.append(cell)
            out.append(f"| {conns} | {display(shape)} | " + " | ".join(cells) + " |")
    return out + [""]


def per_round(summary, scen, servers, conns_all, cell):
    """One figure of each round's run (`cell` makes it), per connection count and server."""
    per = []
    for conns in conns_all:
        cells = []
        for s in servers:
            e = summary.get((scen, s, conns))
            if e:
                cells.append(f"{display(s)} " + " / ".join(cell(x) for x in e["runs"]))
        per.append(f"{conns} conns: " + "; ".join(cells))
    return ". ".join(per)


def clean_p99(run):
    """A run's p99 over the requests due outside the host's stalls (m0load --stall-probe)."""
    return run["outside_stalls"]["p99_ms"] if "outside_stalls" in run else None


def others_cell(runs):
    """The rounds' medians of p99 and p99.9 outside other processes' runs (--trace-others)."""
    o = [x["outside_others"] for x in runs if "outside_others" in x]
    p99 = [x["p99_ms"] for x in o if x["p99_ms"] is not None]
    p999 = [x["p999_ms"] for x in o if x["p999_ms"] is not None]
    if not p99:
        return ""
    return f"{statistics.median(p99):.3f} / {statistics.median(p999):.2f}"


def others_round(run):
    if "outside_others" not in run:
        return "?"
    o = run["outside_others"]
    return f"{o['other_runs']}, {o['other_ms']:.0f} ms ({o['excluded'] * 100:.1f} %)"


def stall_cell(run):
    if "host_stalls" not in run:
        return "?"
    h, o = run["host_stalls"], run["outside_stalls"]
    return f"{h['count']}, {h['total_ms']:.0f} ms ({o['excluded'] * 100:.1f} %)"


def round_by_round_p99(summary, scen, servers, conns_all,
                       p99=lambda run: run["latency_p99_ms"], what="p99"):
    """At a fixed rate: each round's p99 (or another figure: `p99` reads it from a run,
    `what` names it), and for each m0serve shape, in how many rounds its figure was at or
    below each other server's of the same round (rounds alternate servers, so one round's
    runs share the machine's state of that minute)."""
    lines, per, wins = [], [], []
    for conns in conns_all:
        runs = {s: [x for x in summary[(scen, s, conns)]["runs"] if p99(x) is not None]
                for s in servers if (scen, s, conns) in summary}
        per.append(f"{conns} conns: " + "; ".join(
            f"{display(s)} " + " / ".join(f"{p99(x):.2f}" for x in r)
            for s, r in runs.items()))
        for s, r in runs.items():
            if not s.startswith("m0serve"):
                continue
            cells = []
            for peer, pr in runs.items():
                if peer.startswith("m0serve"):
                    continue
                mine = {x.get("round"): p99(x) for x in r}
                theirs = {x.get("round"): p99(x) for x in pr}
                both = [k for k in mine if k in theirs]
                won = sum(mine[k] <= theirs[k] for k in both)
                cells.append(f"{display(peer)} {won}/{len(both)}")
            if cells:
                wins.append(f"{conns} conns, {display(s)}: " + ", ".join(cells))
    if per:
        lines += [f"Per round ({what} ms): " + ". ".join(per) + ".", ""]
    if wins:
        lines += [f"Rounds in which m0serve's {what} was at or below the other server's in the "
                  "same round: " + ". ".join(wins) + ".", ""]
    return lines


QUIET_STEAL = 0.02


def turn_by_turn(summary, scen, servers, conns_all):
    """With --interleave: each server's turns' p99s (median and range), and for each m0serve
    shape against each peer, in how many pairs of turns it was at or below the peer's p99:
    a pair is the two servers' turns of one rotation of one round, at most one rotation
    apart; "quiet" pairs are those where both turns had under 2 % steal. With m0load's stall
    probe each turn also has its p99 outside the host's stalls, compared the same way."""
    lines, cells, wins = [], [], []
    for conns in conns_all:
        turns = {}
        for s in servers:
            e = summary.get((scen, s, conns))
            if not e or not any("turns" in r for r in e["runs"]):
                continue
            n = {r.get("round"): len(r["interleave"]["order"]) for r in e["runs"]
                 if "interleave" in r}
            turns[s] = {(r.get("round"), t["turn"] // n[r.get("round")]): t
                        for r in e["runs"] for t in r.get("turns", [])}
        if not turns:
            continue
        for s, ts in turns.items():
            p99 = sorted(t["p99_ms"] for t in ts.values())
            quiet = sorted(t["p99_ms"] for t in ts.values()
                           if t["steal"] is not None and t["steal"] < QUIET_STEAL)
            outside = sorted(t["p99_outside_ms"] for t in ts.values()
                             if t.get("p99_outside_ms") is not None)
            cells.append(f"{conns} conns, {display(s)}: {len(p99)} turns, p99 median "
                         f"{statistics.median(p99):.2f} ms (range {p99[0]:.2f}-{p99[-1]:.2f})"
                         + (f", {len(quiet)} quiet turns' median {statistics.median(quiet):.2f}"
                            if quiet else "")
                         + (f", median outside host stalls {statistics.median(outside):.2f}"
                            if outside else ""))
        for s, mine in turns.items():
            if not s.startswith("m0serve"):
                continue
            parts = []
            for peer, theirs in turns.items():
                if peer.startswith("m0serve"):
                    continue
                both = [k for k in mine if k in theirs]
                won = sum(mine[k]["p99_ms"] <= theirs[k]["p99_ms"] for k in both)
                quiet = [k for k in both if all(
                    x[k]["steal"] is not None and x[k]["steal"] < QUIET_STEAL
                    for x in (mine, theirs))]
                qwon = sum(mine[k]["p99_ms"] <= theirs[k]["p99_ms"] for k in quiet)
                out = [k for k in both if mine[k].get("p99_outside_ms") is not None
                       and theirs[k].get("p99_outside_ms") is not None]
                owon = sum(mine[k]["p99_outside_ms"] <= theirs[k]["p99_outside_ms"] for k in out)
                parts.append(f"{display(peer)} {won}/{len(both)} (quiet {qwon}/{len(quiet)}"
                             + (f", outside host stalls {owon}/{len(out)}" if out else "") + ")")
            if parts:
                wins.append(f"{conns} conns, {display(s)}: " + ", ".join(parts))
    if cells:
        lines += ["Turns (`--interleave`): " + "; ".join(cells) + ".", ""]
    pooled = []
    for conns in conns_all:
        for s in servers:
            e = summary.get((scen, s, conns))
            q = [r["quiet"] for r in e["runs"] if "quiet" in r] if e else []
            if q:
                pooled.append(f"{conns} conns, {display(s)}: p99 "
                              + " / ".join(f"{x['p99_ms']:.2f}" for x in q)
                              + f" ms ({sum(x['requests'] for x in q)} requests in "
                              f"{sum(x['turns'] for x in q)} turns; p50 "
                              + " / ".join(f"{x['p50_ms']:.3f}" for x in q) + ", p99.9 "
                              + " / ".join(f"{x['p999_ms']:.2f}" for x in q) + ")")
    if pooled:
        lines += ["Each round's quiet turns pooled (under 2 % steal; every request of them, "
                  "round by round): " + "; ".join(pooled) + ".", ""]
    if wins:
        lines += ["Pairs of turns (the same rotation of a round) in which m0serve's p99 was at "
                  "or below the other server's: " + ". ".join(wins) + ".", ""]
    return lines


# Each series' look: (colour, marker, dash pattern), all three distinct between the series of
# a run, so that a chart reads in greyscale and to a colour-blind reader as well. The colours
# are Okabe and Ito's colour-blind-safe palette (its yellow, faint as a line on white, last
# of all), then grey and three of Paul Tol's. A server named here has the same look in every
# chart; another server of a kind named here takes that kind's look when no series of the run
# has it, and any other series the first colour, marker and dash no series of the run has
# (in the run's order, so each keeps its look across that run's charts).
STYLES = {
    "m0serve": ("#D55E00", "circle", ""),
    "m0serve:blocking-threads=0": ("#CC79A7", "square-open", "10 3"),
    "m0serve:static-response": ("#000000", "diamond", "2 3"),
    "fastwsgi": ("#0072B2", "triangle", "14 4 3 4"),
    "bjoern": ("#009E73", "triangle-down", "14 3 3 3 3 3"),
    "granian": ("#56B4E9", "cross", "5 5"),
    "gunicorn": ("#E69F00", "plus", "1 5"),
    "uwsgi": ("#999999", "star", "20 4 8 4"),
}
COLOR_POOL = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000",
              "#999999", "#882255", "#44AA99", "#999933", "#F0E442"]
MARKER_POOL = ["circle", "square-open", "diamond", "triangle", "triangle-down", "cross", "plus",
               "star", "square", "circle-open", "triangle-open", "diamond-open"]
DASH_POOL = ["", "10 3", "2 3", "14 4 3 4", "14 3 3 3 3 3", "5 5", "1 5", "20 4 8 4",
             "6 2 1 2", "3 7", "14 3 5 3", "2 2 8 2"]


def series_styles(servers):
    """{spec: (colour, marker, dash)} for a run's servers (see STYLES)."""
    out = {s: STYLES[s] for s in servers if s in STYLES}
    for s in servers:
        kind = s.partition(":")[0].partition("@")[0]
        if s not in out and kind in STYLES and STYLES[kind] not in out.values():
            out[s] = STYLES[kind]
    for s in servers:
        if s not in out:
            out[s] = tuple(next((v for v in pool if v not in {st[i] for st in out.values()}),
                                pool[len(out) % len(pool)])
                           for i, pool in enumerate((COLOR_POOL, MARKER_POOL, DASH_POOL)))
    return out


STAR = [((6 if i % 2 == 0 else 2.6) * math.sin(i * math.pi / 5),
         -(6 if i % 2 == 0 else 2.6) * math.cos(i * math.pi / 5)) for i in range(10)]
# A marker's outline about its centre; cross and plus are strokes, not outlines.
POLYGONS = {"square": [(-4, -4), (4, -4), (4, 4), (-4, 4)],
            "triangle": [(0, -5.5), (5, 3.5), (-5, 3.5)],
            "triangle-down": [(0, 5.5), (5, -3.5), (-5, -3.5)],
            "diamond": [(0, -5.5), (5, 0), (0, 5.5), (-5, 0)],
            "star": STAR}
STROKES = {"cross": [((-4, -4), (4, 4)), ((-4, 4), (4, -4))],
           "plus": [((-5, 0), (5, 0)), ((0, -5), (0, 5))]}


def marker_svg(shape, cx, cy, color, title=None):
    """A marker centred on (cx, cy), its shape named in data-marker (for --check-svg): filled
    ones outlined in white, so that two that overlap stay apart; the `-open` ones hollow and
    a little larger, so that a point under one still shows."""
    hollow = shape.endswith("-open")
    base = shape.removesuffix("-open")
    k = 1.25 if hollow else 1
    if base in STROKES:
        paint = f'fill="none" stroke="{color}" stroke-width="2.2"'
    elif hollow:
        paint = f'fill="none" stroke="{color}" stroke-width="2"'
    else:
        paint = f'fill="{color}" stroke="#ffffff" stroke-width="0.8"'
    if base == "circle":
        tag, geo = "circle", f'cx="{cx:.1f}" cy="{cy:.1f}" r="{4.5 * k:g}"'
    elif base in STROKES:
        tag, geo = "path", 'd="' + "".join(
            f"M{cx + a:.1f},{cy + b:.1f}L{cx + c:.1f},{cy + d:.1f}"
            for (a, b), (c, d) in STROKES[base]) + '"'
    else:
        tag, geo = "path", 'd="M' + "L".join(
            f"{cx + k * a:.1f},{cy + k * b:.1f}" for a, b in POLYGONS[base]) + 'Z"'
    el = f'<{tag} {geo} data-marker="{shape}" {paint}'
    return el + (f"><title>{esc(title)}</title></{tag}>" if title else "/>")


def nice_step(span, ticks=5):
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for f in (1, 2, 2.5, 5, 10):
        if raw <= f * mag:
            return f * mag
    return 10 * mag


def esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def svg_chart(doc, scen):
    """Requests/s (median, with the min–max of the rounds) against connections, one line
    per server; hand-written SVG."""
    meta = doc["meta"]
    summary = summarise(doc["results"])
    servers = [s for s in meta["servers"] if any(k[0] == scen and k[1] == s for k in summary)]
    conns = sorted({k[2] for k in summary if k[0] == scen})
    if not servers or not conns:
        return None
    labels = [display(s) for s in servers]
    W, H = 576 + max(120, int(60 + 7.5 * max(map(len, labels)))), 440
    L, T, B = 80, 72, 60
    pw, R = 480, W - 80 - 480
    pad = 24  # keeps the first and last points off the axes
    ph = H - T - B
    ymax = max(max(x["rps"] for x in e["runs"]) for k, e in summary.items() if k[0] == scen)
    step = nice_step(ymax * 1.08)
    top = step * math.ceil(ymax * 1.08 / step)
    lo, hi = math.log2(conns[0]), math.log2(conns[-1])

    def x(c):
        return L + (pw / 2 if hi == lo else pad + (math.log2(c) - lo) / (hi - lo) * (pw - 2 * pad))

    def y(v):
        return T + ph - v / top * ph

    title = SCENARIOS.get(scen, {}).get("title", scen)
    mach = meta.get("machine", {})
    sub = (f"median of {meta['rounds']} alternating rounds of {meta['duration']} s "
           f"(bars: min–max), --workers {meta['workers']} --blocking-threads "
           f"{meta['blocking_threads']}",
           f"{mach.get('cpus')} CPUs ({mach.get('cpu')}), {client_name(meta).split()[0]} on "
           f"the same host; "
           f"{meta.get('date', '')[:10]}")
    ylabel = "requests/s" + (" = MiB/s each way" if SCENARIOS.get(scen, {}).get(
        "post_bytes") == MIB else "")
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" '
         'font-size="12">',
         chart_data(doc, scen),
         f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
         f'<text x="{L}" y="22" font-size="15" font-weight="bold">{esc(scen)}: '
         f'{esc(title)} — requests/s by connections</text>',
         f'<text x="{L}" y="40" fill="#555" font-size="11">{esc(sub[0])}</text>',
         f'<text x="{L}" y="55" fill="#555" font-size="11">{esc(sub[1])}</text>']
    v = 0.0
    while v <= top + step / 2:
        yy = y(v)
        o.append(f'<line x1="{L}" y1="{yy:.1f}" x2="{L + pw}" y2="{yy:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{L - 8}" y="{yy + 4:.1f}" text-anchor="end">{fmt_int(v)}</text>')
        v += step
    for c in conns:
        xx = x(c)
        o.append(f'<line x1="{xx:.1f}" y1="{T + ph}" x2="{xx:.1f}" y2="{T + ph + 5}" '
                 'stroke="#333"/>')
        o.append(f'<text x="{xx:.1f}" y="{T + ph + 20}" text-anchor="middle">{c}</text>')
    o.append(f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<text x="{L + pw / 2:.1f}" y="{H - 15}" text-anchor="middle">connections '
             f'({esc(client_name(meta))}, log scale)</text>')
    o.append(f'<text transform="translate(18 {T + ph / 2:.1f}) rotate(-90)" '
             f'text-anchor="middle">{esc(ylabel)}</text>')
    styles = series_styles(meta["servers"])
    # The lines and bars first, then every marker, so that no line hides a point.
    for s in servers:
        color, _, dash = styles[s]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        pts = [(c, summary[(scen, s, c)]) for c in conns if (scen, s, c) in summary]
        if len(pts) > 1:
            path = " ".join(f"{'M' if j == 0 else 'L'}{x(c):.1f},{y(e['rps_median']):.1f}"
                            for j, (c, e) in enumerate(pts))
            o.append(f'<path d="{path}" data-series="{esc(display(s))}" fill="none" '
                     f'stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        for c, e in pts:
            rs = [r["rps"] for r in e["runs"]]
            xx = x(c)
            if len(rs) > 1:
                o.append(f'<line x1="{xx:.1f}" y1="{y(min(rs)):.1f}" x2="{xx:.1f}" '
                         f'y2="{y(max(rs)):.1f}" stroke="{color}" stroke-width="1.2"/>')
                for b in (min(rs), max(rs)):
                    o.append(f'<line x1="{xx - 4:.1f}" y1="{y(b):.1f}" x2="{xx + 4:.1f}" '
                             f'y2="{y(b):.1f}" stroke="{color}" stroke-width="1.2"/>')
    for s in servers:
        color, marker, _ = styles[s]
        for c in conns:
            if (scen, s, c) in summary:
                e = summary[(scen, s, c)]
                o.append(marker_svg(marker, x(c), y(e["rps_median"]), color,
                                    f'{display(s)}, {c} connections: '
                                    f'{fmt_int(e["rps_median"])} req/s'))
    # The legend: each series' colour, dash pattern and marker, as --check-svg reads them.
    for i, s in enumerate(servers):
        color, marker, dash = styles[s]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        ly = T + 10 + i * 22
        o.append(f'<g class="legend-entry" data-series="{esc(labels[i])}">')
        o.append(f'<line x1="{L + pw + 12}" y1="{ly}" x2="{L + pw + 60}" y2="{ly}" '
                 f'stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        o.append(marker_svg(marker, L + pw + 36, ly, color))
        o.append(f'<text x="{L + pw + 66}" y="{ly + 4}">{esc(labels[i])}</text>')
        o.append("</g>")
    o.append("</svg>")
    return "\n".join(o) + "\n"


DATA_ID = "m0bench-data"
SVG_NS = "http://www.w3.org/2000/svg"


def chart_data(doc, scen):
    """The figures a chart is drawn from, as JSON in its <metadata>, so that
    `--redraw-svg` can draw it again (another style) without the run's JSON."""
    keys = ("date", "command", "servers", "rounds", "duration", "workers", "blocking_threads",
            "client", "clients")
    meta = {k: doc["meta"][k] for k in keys if k in doc["meta"]}
    mach = doc["meta"].get("machine", {})
    meta["machine"] = {k: mach[k] for k in ("cpu", "cpus") if k in mach}
    runs = [{k: r[k] for k in ("server", "connections", "round", "rps")}
            for r in doc["results"] if r["scenario"] == scen and "error" not in r]
    text = ('{"scenario": ' + json.dumps(scen) + ',\n"meta": ' + json.dumps(meta)
            + ',\n"results": [\n' + ",\n".join(json.dumps(r) for r in runs) + "]}")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<metadata id="{DATA_ID}">\n{text}\n</metadata>'


def redraw_svg(path):
    """Draws a chart again from the figures embedded in it (chart_data)."""
    root = ET.parse(path).getroot()
    el = root.find(f".//{{{SVG_NS}}}metadata[@id='{DATA_ID}']")
    if el is None:
        raise SystemExit(f"{path}: no embedded figures (<metadata id=\"{DATA_ID}\">); "
                         "draw it from the run's JSON with --report JSON --svg")
    data = json.loads(el.text)
    scen = data["scenario"]
    results = [dict(r, scenario=scen) for r in data["results"]]
    svg = svg_chart({"meta": data["meta"], "results": results}, scen)
    with open(path, "w") as f:
        f.write(svg)
    print(f"chart: {path}")


def check_svg(path):
    """What makes a chart's series hard to tell apart: a colour, marker or dash pattern that
    two series share, in the points (each marker's <title> names its series) or in the
    legend, or a legend entry that does not match its series' points and line. [] if none."""
    ns = f"{{{SVG_NS}}}"
    root = ET.parse(path).getroot()

    def colour(el):
        fill = el.get("fill")
        return el.get("stroke") if fill in (None, "none", "#fff", "#ffffff", "white") else fill

    def marker(el):
        return el.get("data-marker") or el.tag.replace(ns, "")

    def dups(what, looks):
        by = {}
        for series, look in looks.items():
            by.setdefault(look, []).append(series)
        return [f"{what} {look or 'solid'} shared by {', '.join(ss)}"
                for look, ss in by.items() if len(ss) > 1]

    points = {}
    for el in root.iter():
        t = el.find(ns + "title")
        m = re.match(r"(.+), \d+ connections: ", (t.text or "") if t is not None else "")
        if m:
            points.setdefault(m.group(1), set()).add((colour(el), marker(el)))
    lines = {el.get("data-series"): el.get("stroke-dasharray") or ""
             for el in root.iter(ns + "path") if el.get("data-series")}
    legend = {}
    for g in root.iter(ns + "g"):
        if g.get("class") == "legend-entry":
            ln, mk = g.find(ns + "line"), g.find("*[@data-marker]")
            legend[g.get("data-series")] = (
                None if ln is None else ln.get("stroke"),
                None if mk is None else mk.get("data-marker"),
                None if ln is None else ln.get("stroke-dasharray") or "")
    problems = []
    if not points:
        problems.append("no points (elements with a <title> 'SERIES, N connections: ...')")
    for series, looks in points.items():
        if len(looks) > 1:
            problems.append(f"{series}: its points differ: {sorted(looks, key=str)}")
    one = {s: min(looks, key=str) for s, looks in points.items()}
    problems += dups("colour", {s: c for s, (c, _) in one.items()})
    problems += dups("marker", {s: m for s, (_, m) in one.items()})
    problems += dups("dash pattern", {s: d for s, d in lines.items()})
    if set(legend) != set(points):
        problems.append(f"legend entries (<g class=\"legend-entry\">) {sorted(legend)} are "
                        f"not the series {sorted(points)}")
    problems += dups("legend colour", {s: c for s, (c, _, _) in legend.items()})
    problems += dups("legend marker", {s: m for s, (_, m, _) in legend.items()})
    problems += dups("legend dash pattern", {s: d for s, (_, _, d) in legend.items()})
    for s, (c, m, d) in legend.items():
        if s in one and (c, m) != one[s]:
            problems.append(f"{s}: legend shows {c} {m}, its points {one[s][0]} {one[s][1]}")
        if s in lines and d != lines[s]:
            problems.append(f"{s}: legend dash pattern {d or 'solid'}, its line's "
                            f"{lines[s] or 'solid'}")
    return problems


def write_outputs(doc, args):
    md = markdown(doc)
    print()
    print(md)
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(md + "\n")
        print(f"tables: {args.md}")
    if args.svg:
        os.makedirs(args.svg_dir, exist_ok=True)
        for scen in doc["meta"]["scenarios"]:
            svg = svg_chart(doc, scen)
            if svg:
                path = os.path.join(args.svg_dir, f"bench-{scen}.svg")
                with open(path, "w") as f:
                    f.write(svg)
                print(f"chart: {path}")


# ---------------------------------------------------------------------------------------


def print_result(tag, r):
    busy = ", ".join(f"{t['thread']} {t['busy'] * 100:.0f}%" for t in r["threads"][:4])
    extra = f" ({r['mib_s_each_way']:.0f} MiB/s)" if "mib_s_each_way" in r else ""
    errs = ""
    if r["non_2xx"] or any(r["socket_errors"].values()):
        errs = f" [non-2xx {r['non_2xx']}, socket errors {r['socket_errors']}]"
    print(f"{tag}: {r['rps']:>9.0f} req/s{extra}, {r['cpu_us_per_req']:5.1f} µs CPU/req, "
          f"{r['cores']:.2f} cores, p99 {r['latency_p99_ms']:.2f} ms; {busy}{errs}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See the module docstring (head scripts/bench.py).")
    ap.add_argument("--servers", default="m0serve,granian",
                    help="comma-separated: m0serve, m0serve@PATH, granian, bjoern, each "
                         "optionally with :workers=N / :blocking-threads=N (default %(default)s)")
    ap.add_argument("--scenario", "--scenarios", dest="scenario", default="hello",
                    help=f"comma-separated, of {', '.join(SCENARIOS)} (default %(default)s)")
    ap.add_argument("--app", default=None,
                    help="app module in benches/apps instead of the scenario's (GET scenarios)")
    ap.add_argument("--connections", default="64", help="comma-separated (default %(default)s)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of load before each run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="for m0serve and granian")
    ap.add_argument("--blocking-threads", type=int, default=1, help="for m0serve and granian")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench-results", "bench.json"))
    ap.add_argument("--md", default=None,
                    help="markdown tables file (default: the --json path with .md)")
    ap.add_argument("--svg", action="store_true",
                    help="write a chart per scenario to SVG_DIR/bench-<scenario>.svg")
    ap.add_argument("--svg-dir", default=os.path.join(ROOT, "docs"))
    ap.add_argument("--redraw-svg", nargs="+", metavar="SVG",
                    help="draw charts again from the figures embedded in them, in place")
    # Exits non-zero if two series of a chart share a colour, marker or dash pattern
    # (tests/charts.rs runs it on docs/bench-*.svg).
    ap.add_argument("--check-svg", nargs="+", metavar="SVG", help=argparse.SUPPRESS)
    ap.add_argument("--report", metavar="JSON",
                    help="no run: rebuild the tables (and charts) from saved results")
    ap.add_argument("--no-install", action="store_true",
                    help="do not create or install into .venv; skip what is missing")
    ap.add_argument("--rate", type=int, default=0,
                    help="requests a second: a fixed-rate run (p50/p99/p99.9 from each "
                         "request's due time) instead of one at saturation, with oha, or with "
                         "m0load's open loop under --client m0load")
    ap.add_argument("--client", choices=("wrk", "m0load"), default="wrk",
                    help="the load generator: wrk -t1 at saturation and oha at --rate "
                         "(default), or benches/loadgen's m0load for both: the same closed "
                         "loop reading up to 256 KiB a call (for large responses, where wrk's "
                         "8 KiB reads bound the run), and an open loop on one thread at --rate")
    ap.add_argument("--clients", type=int, default=1, metavar="K",
                    help="with --client m0load, at saturation: K m0load processes share each "
                         "run's connections (under --pin each on one CPU of the client's list "
                         "in turn), for a server of many workers that one client thread "
                         "cannot load")
    ap.add_argument("--interleave", type=float, default=0, metavar="SECONDS",
                    help="with --rate and --client m0load: run a round's servers at once and "
                         "give them the schedule in turns of SECONDS (--duration each in "
                         "all), so that every server meets the host's state of the same "
                         "minutes; each turn's p99 is kept and compared turn by turn")
    ap.add_argument("--trace-others", action="store_true",
                    help="with --rate and --client m0load: record every CPU's context "
                         "switches over each run (perf record, as root) and report each "
                         "server's p99 and p99.9 also over the requests due outside the runs "
                         "of other processes' threads (another daemon, a kernel thread, perf "
                         f"itself) of {OTHERS_MIN_US} us or more")
    ap.add_argument("--pin", metavar="SERVER_CPUS:CLIENT_CPUS",
                    help="run every server on SERVER_CPUS and the load generator on "
                         "CLIENT_CPUS (taskset -c lists, e.g. 1:0), so that they do not "
                         "compete for a core")
    ap.add_argument("--tls", action="store_true",
                    help="every server serves HTTPS (a P-256 certificate made with openssl "
                         "for the run; m0serve --certfile, Granian --ssl-certificate), and "
                         "wrk speaks TLS (one handshake per connection, then keep-alive)")
    args = ap.parse_args()
    if args.check_svg:
        bad = 0
        for path in args.check_svg:
            problems = check_svg(path)
            bad += bool(problems)
            print(f"{path}: " + ("; ".join(problems) if problems else "every series distinct"))
        return 1 if bad else 0
    if args.redraw_svg:
        for path in args.redraw_svg:
            redraw_svg(path)
        return 0
    if args.pin:
        global PIN
        server_cpus, sep, client = args.pin.partition(":")
        if not sep or not server_cpus or not client:
            raise SystemExit(f"--pin {args.pin}: expected SERVER_CPUS:CLIENT_CPUS, e.g. 1:0")
        PIN = (server_cpus, client)
    if args.tls:
        global TLS
        d = tempfile.mkdtemp(prefix="m0bench-tls-")
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost",
                        "-days", "2", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        TLS = (cert, key)
    if args.md is None:
        base = args.report or args.json
        args.md = os.path.splitext(base)[0] + ".md"

    if args.report:
        with open(args.report) as f:
            doc = json.load(f)
        write_outputs(doc, args)
        return 0

    scenarios = [s for s in args.scenario.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r} (of {', '.join(SCENARIOS)})")
    servers = [parse_server(s) for s in split_servers(args.servers)]
    if len({s["spec"] for s in servers}) != len(servers):
        raise SystemExit("a server is named twice")

    # Install what is needed and missing; skip bjoern (only) if it cannot be had.
    needs = {k for k in (s["kind"] for s in servers)
             if k in ("granian", "bjoern", "gunicorn", "fastwsgi", "uwsgi")}
    for s in scenarios:
        needs.update(SCENARIOS[s].get("needs", []))
    order = [m for m in ("granian", "bjoern", "gunicorn", "fastwsgi", "uwsgi", "flask")
             if m in needs]
    missing = [m for m in order if not venv_has(m)] if args.no_install else ensure_venv(order)
    if "bjoern" in missing:
        print("bjoern is not available in .venv (pip install bjoern-binary failed or "
              "--no-install): skipping bjoern", flush=True)
        servers = [s for s in servers if s["kind"] != "bjoern"]
        missing.remove("bjoern")
    if missing:
        raise SystemExit(f"missing in .venv: {', '.join(PIP[m] for m in missing)}")
    for s in servers:
        if s["kind"] == "m0serve":
            b = s["binary"] or os.path.join(ROOT, "target", "release", "m0serve")
            if not os.access(b, os.X_OK):
                raise SystemExit(f"{b} not found (cargo build --release)")
    if not servers:
        raise SystemExit("no server left to measure")

    if args.interleave and not (args.rate and args.client == "m0load"):
        raise SystemExit("--interleave needs --rate and --client m0load")
    if args.interleave and any(SCENARIOS.get(s, {}).get("post_bytes")
                               for s in args.scenario.split(",")):
        raise SystemExit("--interleave runs GET scenarios only")
    if args.trace_others:
        if not (args.rate and args.client == "m0load"):
            raise SystemExit("--trace-others needs --rate and --client m0load")
        probe = tempfile.mkdtemp(prefix="m0bench-perf-")
        try:
            r = subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o",
                                os.path.join(probe, "d"), "--", "true"], capture_output=True,
                               text=True)
        except OSError as e:
            raise SystemExit(f"--trace-others needs perf: {e}") from None
        finally:
            shutil.rmtree(probe, ignore_errors=True)
        if r.returncode != 0:
            raise SystemExit(f"--trace-others: perf cannot record sched_switch system-wide "
                             f"(root, or kernel.perf_event_paranoid -1): {r.stderr[-300:]}")
        global TRACE
        TRACE = True
    if args.clients < 1:
        raise SystemExit("--clients takes 1 or more")
    if args.clients > 1:
        if args.client != "m0load" or args.rate:
            raise SystemExit("--clients needs --client m0load, at saturation (no --rate)")
        global CLIENTS
        CLIENTS = args.clients
    if args.client == "m0load":
        if args.tls:
            raise SystemExit("--client m0load speaks plain HTTP only (no --tls)")
        build_m0load()
    conns_list = [int(c) for c in args.connections.split(",") if c]
    if any(c < args.clients for c in conns_list):
        raise SystemExit(f"--clients {args.clients}: every run needs as many connections")
    doc = {"meta": {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "servers": [s["spec"] for s in servers], "scenarios": scenarios,
        "connections": conns_list, "duration": args.duration, "warmup": args.warmup,
        "rounds": args.rounds, "workers": args.workers, "tls": bool(args.tls),
        "rate": args.rate, "pin": list(PIN) if PIN else None, "client": args.client,
        "interleave": args.interleave, "clients": args.clients,
        "blocking_threads": args.blocking_threads,
        "machine": machine(), "versions": versions(servers),
    }, "results": []}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)

    def save():
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)

    for scen in scenarios:
        app = SCENARIOS[scen]["app"]
        if args.app and not SCENARIOS[scen].get("post_bytes"):
            # Another app: the check request then only asks for a 200.
            app = args.app
            SCENARIOS[scen] = {k: v for k, v in SCENARIOS[scen].items()
                               if k not in ("body_len", "body_contains")}
        script = lua_script(SCENARIOS[scen])
        try:
            for conns in conns_list:
                for rnd in range(args.rounds):
                    order = servers if rnd % 2 == 0 else list(reversed(servers))
                    # static-response answers hello world to every request: no figure of its
                    # own for another scenario (a Flask check would even pass).
                    order = [s for s in order
                             if not (s["opts"].get("static-response") and scen != "hello")]
                    if args.interleave:
                        together = run_interleaved(order, scen, app, conns, args)
                    for srv in order:
                        tag = f"[{scen} {conns:>3} conns, round {rnd}] {display(srv['spec']):>8}"
                        try:
                            if args.interleave:
                                r = together[srv["spec"]]
                                if "error" in r:
                                    raise RuntimeError(r["error"])
                            else:
                                r = run_one(srv, scen, app, conns, args, script)
                        except RuntimeError as e:
                            print(f"{tag}: ERROR {e}", flush=True)
                            doc["results"].append({"server": srv["spec"], "kind": srv["kind"],
                                                   "scenario": scen, "connections": conns,
                                                   "round": rnd, "error": str(e)})
                            save()
                            continue
                        r["round"] = rnd
                        doc["results"].append(r)
                        save()
                        print_result(tag, r)
        finally:
            if script:
                os.unlink(script)
    save()
    print(f"\nresults: {args.json}")
    write_outputs(doc, args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
