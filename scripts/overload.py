#!/usr/bin/env python3
"""Overload, side by side: each server with its default flags, offered several times what
it can serve, in an open loop.

    scripts/overload.py --servers m0serve,granian,gunicorn --factors 4,10 --duration 8

The app (benches/apps/burn.py) computes for `--ms` milliseconds of CPU a request (10 by
default: about 100 requests a second on one worker). For each factor and server, on the server started afresh:

1. its capacity, measured: 8 keep-alive connections in a closed loop for 3 s;
2. its unloaded latency: 20 requests a second for 2 s;
3. for the factor F, an open loop at F x 1000/ms requests a second (F times the app's
   nominal capacity, the same offered load for every server) for `--duration` seconds:
   request k is due at start + k/rate, goes on a connection of its own, and is timed from
   when it was due (a client that falls behind adds to it; its lag is reported); a client
   gives up after 10 s. Then, while what is still out finishes, 20 probes a second for
   4 s: the p99 of those sent 2 s or more after the load ended, against the unloaded p99.

It reports per run: the 200s answered as a share of the server's capacity over the run
(or until its last 200, if later),
their p50/p99, the 503s (with `Retry-After`) and their p99, refused connections, errors,
requests given up on, the longest any request waited for its answer, the server's RSS
before and at its most, and the recovery. `--json FILE` keeps the raw figures.

Servers: `m0serve` (target/release/m0serve, or `m0serve@PATH`), `granian`, `gunicorn`
(gthread, 1 thread, as in its docs' default), each with optional overrides after `:`
(`m0serve:max-queue-wait=0`, `granian:workers=2`): passed as `--KEY VALUE`. Granian and
gunicorn come from .venv (scripts/bench.py installs them).
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# scripts/bench.py's package (the servers' venv, ports, process trees):
from m0bench.config import APPS, ROOT, VENV, VENV_BIN  # noqa: E402
from m0bench.host import tree  # noqa: E402
from m0bench.servers import ensure_venv, free_port, server_env, stop, wait_ready  # noqa: E402

GIVE_UP_S = 10.0
PROBE_RATE = 20


def server_cmd(spec, port):
    base, _, opts = spec.partition(":")
    kind, _, binary = base.partition("@")
    extra = []
    for kv in filter(None, opts.split(",")):
        k, _, v = kv.partition("=")
        extra += [f"--{k}", v] if v else [f"--{k}"]
    if kind == "m0serve":
        binary = os.path.abspath(binary) if binary else \
            os.path.join(ROOT, "target", "release", "m0serve")
        return [binary, "burn:app", "--app-dir", APPS, "--port", str(port),
                "--log-level", "warning"] + extra
    if kind == "granian":
        return [os.path.join(VENV_BIN, "granian"), "--interface", "wsgi",
                "--host", "127.0.0.1", "--port", str(port), "--no-ws",
                "--log-level", "warning"] + extra + ["burn:app"]
    if kind == "gunicorn":
        return [os.path.join(VENV_BIN, "gunicorn"), "--chdir", APPS,
                "--bind", f"127.0.0.1:{port}", "--worker-class", "gthread",
                "--threads", "1", "--log-level", "warning"] + extra + ["burn:app"]
    raise SystemExit(f"unknown server {spec!r} (m0serve, m0serve@PATH, granian, gunicorn)")


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


async def one(port, path, due, out):
    """One request on its own connection, timed from `due`."""
    delay = due - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    sent = time.monotonic()
    rec = {"due": due, "lag": sent - due}
    writer = None
    try:
        async def exchange():
            nonlocal writer
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                         .encode())
            return await reader.read(-1)
        data = await asyncio.wait_for(exchange(), GIVE_UP_S - (sent - due))
        head = data.split(b"\r\n\r\n", 1)[0].lower()
        rec["status"] = int(head.split()[1]) if head.startswith(b"http/") else 0
        rec["retry_after"] = b"\r\nretry-after:" in head
    except asyncio.TimeoutError:
        rec["status"] = "gave up"
    except ConnectionRefusedError:
        rec["status"] = "refused"
    except (OSError, ValueError, IndexError):
        rec["status"] = "error"
    finally:
        if writer is not None:
            writer.close()
    rec["latency"] = time.monotonic() - due
    out.append(rec)


async def open_loop(port, path, rate, duration, start):
    out, tasks = [], []
    n = int(rate * duration)
    for k in range(n):
        due = start + k / rate
        # Tasks are made a little ahead of their time, not all at once.
        while due - time.monotonic() > 0.05:
            await asyncio.sleep(0.01)
        tasks.append(asyncio.ensure_future(one(port, path, due, out)))
    return out, tasks


async def closed_loop(port, path, conns, seconds):
    done = 0
    end = time.monotonic() + seconds

    async def conn():
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        req = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        while time.monotonic() < end:
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            done += 1
        writer.close()
    await asyncio.gather(*(conn() for _ in range(conns)))
    return done / seconds


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarise(recs, capacity, duration):
    ok = [r["latency"] for r in recs if r["status"] == 200]
    # Over the run, or until its last 200 if that came later (queued answers go on).
    start = min((r["due"] for r in recs), default=0.0)
    span = max([duration] + [r["due"] + r["latency"] - start for r in recs
                             if r["status"] == 200])
    shed = [r for r in recs if r["status"] == 503]
    count = lambda s: sum(1 for r in recs if r["status"] == s)  # noqa: E731
    return {
        "sent": len(recs),
        "ok": len(ok),
        "goodput_share": len(ok) / span / capacity,
        "ok_p50": pct(ok, 0.5), "ok_p99": pct(ok, 0.99),
        "shed": len(shed),
        "shed_with_retry_after": sum(1 for r in shed if r.get("retry_after")),
        "shed_p99": pct([r["latency"] for r in shed], 0.99),
        "refused": count("refused"), "errors": count("error"),
        "other_status": sum(1 for r in recs if isinstance(r["status"], int)
                            and r["status"] not in (200, 503)),
        "gave_up": count("gave up"),
        "longest_answered": max((r["latency"] for r in recs
                                 if isinstance(r["status"], int)), default=None),
        "client_lag_p99": pct([r["lag"] for r in recs], 0.99),
    }


async def run_server(spec, factor, duration, ms):
    """One server, started fresh for one factor (a backlog left by an earlier run would
    weigh on the next)."""
    port = free_port()
    cmd = server_cmd(spec, port)
    errlog = open(os.devnull, "wb")
    proc = subprocess.Popen(cmd, cwd=APPS, env=server_env(),
                            stdout=subprocess.DEVNULL, stderr=errlog)
    path = f"/?{ms:g}"
    try:
        wait_ready(port, proc)
        await closed_loop(port, path, 4, 1.0)  # warm up
        capacity = await closed_loop(port, path, 8, 3.0)
        base, tasks = await open_loop(port, path, PROBE_RATE, 2.0, time.monotonic() + 0.1)
        await asyncio.gather(*tasks)
        unloaded = pct([r["latency"] for r in base if r["status"] == 200], 0.99)
        rate = factor * 1000.0 / ms
        rss0 = rss_kib(proc.pid)
        rss_max = rss0
        start = time.monotonic() + 0.2
        recs, tasks = await open_loop(port, path, rate, duration, start)
        end = start + duration
        probes, ptasks = await open_loop(port, path, PROBE_RATE, 4.0, end)
        pending = set(tasks + ptasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.25)
            rss_max = max(rss_max, rss_kib(proc.pid))
        run = summarise(recs, capacity, duration)
        late = [r for r in probes if r["due"] >= end + 2.0]
        run.update({"server": spec, "cmd": cmd, "capacity": capacity, "unloaded_p99": unloaded,
                    "factor": factor, "rate": rate, "rss_kib_before": rss0,
                    "rss_kib_max": rss_max,
                    "recovered_p99": pct([r["latency"] for r in late if r["status"] == 200],
                                         0.99),
                    "recovered_not_200": sum(1 for r in late if r["status"] != 200)})
        print(json.dumps(run), flush=True)
        return run
    finally:
        stop(proc)
        errlog.close()


def ms_cell(s):
    return "-" if s is None else (f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s")


def markdown(runs, duration):
    lines = ["| server | offered | 200s, share of capacity | p50 / p99 of 200s | 503 (Retry-After) "
             "/ p99 | refused / errors | gave up | longest answer | RSS before / most | "
             "p99 2-4 s after (unloaded) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        recovered = ms_cell(r["recovered_p99"])
        if r["recovered_not_200"]:
            recovered += f", {r['recovered_not_200']} not 200"
        lines.append(
            f"| {r['server']} | {r['factor']:g}x ({r['rate']:.0f}/s, {r['sent']} in "
            f"{duration:g} s) | {r['goodput_share']:.2f} ({r['ok']}; capacity "
            f"{r['capacity']:.0f}/s) | {ms_cell(r['ok_p50'])} / {ms_cell(r['ok_p99'])} | "
            f"{r['shed']} ({r['shed_with_retry_after']}) / {ms_cell(r['shed_p99'])} | "
            f"{r['refused']} / {r['errors'] + r['other_status']} | {r['gave_up']} | "
            f"{ms_cell(r['longest_answered'])} | {r['rss_kib_before'] / 1024:.0f} / "
            f"{r['rss_kib_max'] / 1024:.0f} MiB | {recovered} ({ms_cell(r['unloaded_p99'])}) |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="m0serve,granian,gunicorn")
    ap.add_argument("--factors", default="4,10")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--ms", type=float, default=10.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    peers = sorted({s.split(":")[0] for s in servers} & {"granian", "gunicorn"})
    missing = ensure_venv(peers)
    if missing:
        raise SystemExit(f"cannot install {missing} into {VENV}")
    factors = [float(f) for f in args.factors.split(",")]
    results = [asyncio.run(run_server(s, f, args.duration, args.ms))
               for f in factors for s in servers]
    print(markdown(results, args.duration))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
