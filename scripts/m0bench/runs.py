"""One measured run of a server (or of a round's servers at once, `--interleave`), with its
per-thread CPU and the host's steal, and the rounds over scenarios and connection counts."""

import json
import os
import shlex
import tempfile
import time

from . import config
from .clients import client_cpus, lua_script, oha, run_client, wrk
from .config import HEADERS, MIB, SCENARIOS
from .host import host_cpu, sample
from .m0load import M0LOAD, m0load, m0load_result
from .report import display
from .servers import check_response, launch, stop, wait_ready, with_stderr
from .others import OthersTrace


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
            if config.TRACE and args.rate and args.client == "m0load":
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
        if config.TRACE:
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


def print_result(tag, r):
    busy = ", ".join(f"{t['thread']} {t['busy'] * 100:.0f}%" for t in r["threads"][:4])
    extra = f" ({r['mib_s_each_way']:.0f} MiB/s)" if "mib_s_each_way" in r else ""
    errs = ""
    if r["non_2xx"] or any(r["socket_errors"].values()):
        errs = f" [non-2xx {r['non_2xx']}, socket errors {r['socket_errors']}]"
    print(f"{tag}: {r['rps']:>9.0f} req/s{extra}, {r['cpu_us_per_req']:5.1f} µs CPU/req, "
          f"{r['cores']:.2f} cores, p99 {r['latency_p99_ms']:.2f} ms; {busy}{errs}",
          flush=True)


def run_rounds(doc, servers, scenarios, conns_list, args, save):
    """Every scenario, connection count and round: each round's servers in turn (in the
    reverse order every other round), or at once with `--interleave`; each result, or the
    error of a run that failed, goes into doc["results"], and `save` is called after each."""
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
