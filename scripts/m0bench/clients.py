"""The load generators wrk (at saturation) and oha (at `--rate`), and what every client
run shares: `--pin`'s CPUs and the client's CPU time. m0load is in m0load.py."""

import json
import re
import subprocess
import tempfile

from . import config
from .config import HEADERS
from .host import children_cpu_s


def client_cpus():
    """`taskset -c CPUS` for the load generator under --pin, else nothing."""
    return ["taskset", "-c", config.PIN[1]] if config.PIN else []


def run_client(cmd, duration):
    """Runs the load generator; returns its CompletedProcess and the CPU seconds it used."""
    before = children_cpu_s()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    return p, children_cpu_s() - before


def to_ms(value, unit):
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}[unit]


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


def wrk(port, conns, duration, script=None, path="/"):
    cmd = client_cpus() + ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    for h in HEADERS:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    cmd.append(f"{'https' if config.TLS else 'http'}://127.0.0.1:{port}{path}")
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
    cmd.append(f"{'https' if config.TLS else 'http'}://127.0.0.1:{port}{path}")
    if config.TLS:
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
