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

The package, whose command line scripts/bench.py is (`m0bench.cli.main`): `config` (the
tree's paths, the scenarios, the run's settings), `servers` (their specs and command lines;
starting, checking and stopping one; the peers' virtualenv), `host` (versions, the machine,
per-thread CPU from /proc, the host's steal), `clients` (wrk and oha), `m0load`
(benches/loadgen's client), `others` (`--trace-others`: what other processes ran), `runs`
(one run, a round interleaved, the rounds), `report` (the markdown tables), `charts` (the
SVG charts, `--redraw-svg`, `--check-svg`) and `cli` (the options). scripts/overload.py and
scripts/slow_readers.py use its servers and host helpers too.
"""
