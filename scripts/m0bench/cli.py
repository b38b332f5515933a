"""The command line (scripts/bench.py): its options, their checks, and a benchmark's run
from the installs to the report and charts."""

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile

import m0bench
from . import config
from .charts import check_svg, redraw_svg, svg_chart
from .config import PIP, ROOT, SCENARIOS
from .host import machine, versions
from .m0load import build_m0load
from .report import markdown
from .runs import run_rounds
from .servers import ensure_venv, parse_server, split_servers, venv_has
from .others import OTHERS_MIN_US, require_perf


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


def parser():
    """scripts/bench.py's options."""
    ap = argparse.ArgumentParser(
        description=m0bench.__doc__.split("\n\n")[0],
        epilog="See the package's docstring (head scripts/m0bench/__init__.py).")
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
    return ap


def main(argv=None):
    """Runs scripts/bench.py with `argv` (sys.argv's by default); returns its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
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
        server_cpus, sep, client = args.pin.partition(":")
        if not sep or not server_cpus or not client:
            raise SystemExit(f"--pin {args.pin}: expected SERVER_CPUS:CLIENT_CPUS, e.g. 1:0")
        config.PIN = (server_cpus, client)
    if args.tls:
        d = tempfile.mkdtemp(prefix="m0bench-tls-")
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost",
                        "-days", "2", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        config.TLS = (cert, key)
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
        require_perf()
        config.TRACE = True
    if args.clients < 1:
        raise SystemExit("--clients takes 1 or more")
    if args.clients > 1:
        if args.client != "m0load" or args.rate:
            raise SystemExit("--clients needs --client m0load, at saturation (no --rate)")
        config.CLIENTS = args.clients
    if args.client == "m0load":
        if args.tls:
            raise SystemExit("--client m0load speaks plain HTTP only (no --tls)")
        build_m0load()
    conns_list = [int(c) for c in args.connections.split(",") if c]
    if any(c < args.clients for c in conns_list):
        raise SystemExit(f"--clients {args.clients}: every run needs as many connections")
    doc = {"meta": {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.argv[0], ROOT)] + argv),
        "servers": [s["spec"] for s in servers], "scenarios": scenarios,
        "connections": conns_list, "duration": args.duration, "warmup": args.warmup,
        "rounds": args.rounds, "workers": args.workers, "tls": bool(args.tls),
        "rate": args.rate, "pin": list(config.PIN) if config.PIN else None,
        "client": args.client,
        "interleave": args.interleave, "clients": args.clients,
        "blocking_threads": args.blocking_threads,
        "machine": machine(), "versions": versions(servers),
    }, "results": []}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)

    def save():
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)

    run_rounds(doc, servers, scenarios, conns_list, args, save)
    save()
    print(f"\nresults: {args.json}")
    write_outputs(doc, args)
    return 0


def run():
    """scripts/bench.py: main's exit status, or 130 when interrupted (Ctrl-C)."""
    try:
        return main()
    except KeyboardInterrupt:
        return 130
