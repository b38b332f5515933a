"""`--client m0load`: benches/loadgen's m0load, built with cargo, at saturation (one process
or `--clients K`) and at a rate (its open loop, stall probe and warm-up), its JSON read
into a result as the other clients' are."""

import json
import os
import shutil
import subprocess

from . import config
from .clients import client_cpus, run_client
from .config import HEADERS, ROOT
from .host import children_cpu_s, cpu_list


# At a rate, m0load first sends this long on the run's connections and leaves it out of its
# figures (`--warmup`; interleaved, a turn for each server): a burst of fresh connections is
# answered late by every server (0.5-13 ms for the first 20-30 ms at 256 connections here),
# which would set every run's p99.9.
SETTLE_S = 0.5
# Built by build_m0load (cargo), or copied there (scripts/device-scale.sh).
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
    if config.TLS:
        raise RuntimeError("--client m0load speaks plain HTTP only")
    if config.CLIENTS > 1 and not rate:
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


def m0load_many(port, conns, duration, post_bytes, path):
    """`--clients K` at saturation: K m0load processes at once, the connections shared out
    among them (the first `conns % K` one more each) and, under --pin, each on one CPU of
    the client's list in turn: one client thread cannot load a server of many workers. The
    result sums their requests and errors; its p99 is the highest of theirs (their
    histograms are not merged) and its average latency theirs weighted by requests."""
    cpus = cpu_list(config.PIN[1]) if config.PIN else []
    shares = [conns // config.CLIENTS + (i < conns % config.CLIENTS) for i in range(config.CLIENTS)]
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
            raise RuntimeError(f"m0load (one of {config.CLIENTS}) failed (exit {p.returncode}): "
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
