"""The markdown report: the tables of BENCHMARKS.md (medians, ratios, CPU, threads), and
the round-by-round, turn-by-turn and workers-scaling summaries below them."""

import statistics

from .config import DISPLAY, MIB, SCENARIOS
from .servers import opt_key, parse_server
from .others import OTHERS_MIN_US


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
