#!/usr/bin/env bash
# Checks the benchmark tooling, end to end on this tree (about 3 minutes after the builds);
# none of it is a benchmark whose figures mean anything:
#   - m0load's tests (benches/loadgen, the workspace's m0load: `cargo test -p m0load`): its
#     response reader, its open loop, its turns, its stall probe and its --log;
#   - scripts/bench.py's fixed-rate run with m0load and --interleave: two m0serve shapes run
#     at once and take turns, and each comes back with its requests, its CPU, its turns'
#     figures and its p99 outside the host's stalls;
#   - --trace-others' windows on a made-up `perf script`, then --trace-others end to end
#     where perf can record the machine's context switches (root; `linux-perf`, which
#     .ci/run installs), else a note says it was not tried;
#   - scripts/device-scale.sh prepared and run --quick, as the device machine would run it.
#
#   scripts/bench-check.sh
#
# Needs Rust, a C compiler, python3 (the interpreter cargo builds against) and PyPI (the
# peers' wheels for device-scale.sh). It builds what it uses: m0serve's release build
# (`cargo build --release`; the servers run target/release/m0serve) and m0load (bench.py
# builds it). The m0serve wheel for device-scale.sh is the base interpreter's from
# target/wheels (M0S_WHEELS), which scripts/test.sh builds, where there is one; else
# device-scale.sh prepare builds it (scripts/wheels.sh). .ci/run runs this after
# scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/bench-check.sh: $*" >&2
    exit 1
}
say() { echo "scripts/bench-check.sh: $*"; }

command -v cargo >/dev/null || die "needs cargo (Rust)"
BASE_PYTHON=$(python3 -c 'import sys; print(sys.executable)') || die "no python3 on PATH"

bench_out=$(mktemp -d)
spinner=
cleanup() {
    if [ -n "$spinner" ]; then
        kill "$spinner" 2>/dev/null || true
        wait "$spinner" 2>/dev/null || true
    fi
    rm -rf "$bench_out"
}
trap cleanup EXIT

# --- the builds ---
t0=$SECONDS
cargo build --release --quiet || die "cargo build --release failed"
bin="$PWD/target/release/m0serve"
[ -x "$bin" ] || die "$bin was not built"
say "m0serve's release build ready ($((SECONDS - t0)) s)"

# --- m0load's tests ---
t0=$SECONDS
# The benchmark client (benches/loadgen, the workspace's m0load): its response reader, its
# open loop and its turns, and the binary's --stall-probe and --log (tests/).
cargo test --quiet -p m0load || die "m0load's tests failed (cargo test -p m0load)"
say "m0load's tests passed ($((SECONDS - t0)) s)"

# --- scripts/bench.py --interleave, end to end ---
t0=$SECONDS
# scripts/bench.py's fixed-rate run with m0load and --interleave, end to end on this build
# (about 15 s): two m0serve shapes run at once and take turns, and each comes back with its
# requests, its CPU, its turns' figures and its p99 outside the host's stalls.
scripts/bench.py --no-install --client m0load \
    --servers "m0serve@$bin,m0serve@$bin:blocking-threads=0" --scenario hello \
    --connections 8 --rate 2000 --interleave 0.5 --duration 2 --warmup 1 --rounds 1 \
    --json "$bench_out/bench.json" >"$bench_out/log" 2>&1 \
    || { cat "$bench_out/log"; die "scripts/bench.py --interleave failed"; }
python3 - "$bench_out/bench.json" <<'PY' || { cat "$bench_out/log"; die "scripts/bench.py --interleave: wrong results"; }
import json, sys
results = json.load(open(sys.argv[1]))["results"]
assert len(results) == 2, results
for r in results:
    assert "error" not in r, r
    # 2000 a second, each server's 2 s in turns of 0.5 s.
    assert 3900 <= r["requests"] <= 4001 and r["non_2xx"] == 0, r
    assert [t["turn"] % 2 for t in r["turns"]] == [r["turns"][0]["turn"] % 2] * 4, r["turns"]
    assert sum(t["requests"] for t in r["turns"]) == r["requests"], r["turns"]
    assert r["cpu_s"] > 0 and r["latency_p99_ms"] > 0, r
    # The client's stall probe ran, and left out at most the requests there were.
    assert 0 < r["outside_stalls"]["requests"] <= r["requests"], r
    assert r["host_stalls"]["count"] >= 0 and r["outside_stalls"]["p99_ms"] > 0, r
    # And each turn its own (null only for a turn a long stall left out whole).
    assert any(t["p99_outside_ms"] for t in r["turns"]), r["turns"]
PY
grep -q "p99 outside host stalls" "$bench_out/log" \
    || { cat "$bench_out/log"; die "scripts/bench.py: no p99 outside host stalls in the report"; }
say "scripts/bench.py --interleave: two shapes in turns, each with its figures ($((SECONDS - t0)) s)"

# --- --trace-others ---
t0=$SECONDS
# --trace-others' windows, on a made-up `perf script`: a run of another process's thread of
# 200 us or more leaves out the requests due from 1 ms before it to 2 ms plus its length
# after it; a shorter one, and the runs of ours, leave out nothing; a run whose switch out
# the trace lacks ends at the next switch on its CPU, 10 ms after it began at most, and one
# whose switch out is there lasts as long as it did.
python3 - <<'PY' || die "scripts/bench.py: --trace-others' windows are wrong"
import sys
sys.path.insert(0, "scripts")
from m0bench.others import others_windows, outside_windows
def switch(cpu, t, prev, to, pid):
    return (f"[{cpu:03}] {t}: prev_comm=x prev_pid={prev} prev_prio=120 prev_state=S ==> "
            f"next_comm={to} next_pid={pid} next_prio=120")
script = "\n".join([
    switch(0, "10.000000000", 42, "daemon", 77),    # another process, 500 us: 9.999-10.003 s
    switch(0, "10.000500000", 77, "srv", 42),       # ours, by its thread id
    switch(1, "10.001000000", 0, "kworker/1", 78),  # another, 100 us: too short
    switch(1, "10.001100000", 78, "swapper/1", 0),  # the idle task
    switch(1, "11.000000000", 0, "m0load", 999),    # ours, by name, 500 ms
    switch(1, "11.500000000", 999, "daemon", 79),   # another, 300 us: 11.499-11.5026 s
    switch(1, "11.500300000", 79, "srv", 42),
    switch(0, "12.000000000", 42, "agent", 80),     # another, its end not traced: 10 ms
    switch(0, "12.050000000", 42, "cron", 81),      #   (11.999-12.022 s); then another,
    switch(0, "12.100000000", 81, "srv", 43),       #   50 ms whole: 12.049-12.152 s
])
windows, runs, ms = others_windows(script, {0, 42, 43})
assert (runs, round(ms, 3)) == (4, 60.8), (runs, ms)
assert windows == [[9_999_000_000, 10_003_000_000], [11_499_000_000, 11_502_600_000],
                   [11_999_000_000, 12_022_000_000], [12_049_000_000, 12_152_000_000]], windows
# Due (ns) and latency (us): the edges of a window are in it.
lat = [(9_998_999_999, 1), (9_999_000_000, 2000), (10_003_000_000, 3000), (10_003_000_001, 4),
       (11_502_000_000, 5000), (11_502_600_001, 6), (12_021_000_000, 7000), (12_022_000_001, 8),
       (12_152_000_001, 9), (12_150_000_000, 9000)]
o = outside_windows(lat, windows)
assert o["requests"] == 5 and o["p99_ms"] == 0.009 and o["excluded"] == 0.5, o
PY

# --trace-others end to end where perf can record the machine's context switches: a
# process that spins 0.3 s of every 0.75 (for 120 s at most, past both runs on a busy
# machine; killed after them; so it meets both servers' turns) shows as another process's
# runs, and the requests due then are left out.
if perf record -q -e sched:sched_switch -a -o "$bench_out/probe.data" -- true >/dev/null 2>&1; then
    python3 -c '
import time
end = time.time() + 120
while time.time() < end:
    spin = time.time() + 0.3
    while time.time() < spin:
        pass
    time.sleep(0.45)' &
    spinner=$!
    scripts/bench.py --no-install --client m0load --trace-others \
        --servers "m0serve@$bin,m0serve@$bin:blocking-threads=0" --scenario hello \
        --connections 8 --rate 2000 --interleave 0.5 --duration 2 --warmup 1 --rounds 1 \
        --json "$bench_out/trace.json" >"$bench_out/log" 2>&1 \
        || { cat "$bench_out/log"; die "scripts/bench.py --trace-others failed"; }
    # And a server on its own (its own code path in bench.py).
    scripts/bench.py --no-install --client m0load --trace-others --servers "m0serve@$bin" \
        --scenario hello --connections 8 --rate 2000 --duration 2 --warmup 1 --rounds 1 \
        --json "$bench_out/trace1.json" >"$bench_out/log1" 2>&1 \
        || { cat "$bench_out/log1"; die "scripts/bench.py --trace-others (one server) failed"; }
    kill "$spinner" 2>/dev/null || true
    wait "$spinner" 2>/dev/null || true
    spinner=
    python3 - "$bench_out/trace1.json" <<'PY' || { cat "$bench_out/log1"; die "scripts/bench.py --trace-others (one server): wrong results"; }
import json, sys
[r] = json.load(open(sys.argv[1]))["results"]
o = r["outside_others"]
# The spinner's 0.3 s in 0.75 over the run's 2 s; the 0.5 s warm-up's requests counted apart.
# On a host busy with other work (others ran more than a CPU's worth of the run), most or
# all requests fall in their windows: then only the lower bounds hold.
busy = o["other_ms"] > 2000
assert o["other_ms"] >= 300 and o["excluded"] >= 0.15, o
assert busy or (o["excluded"] < 0.9 and o["requests"] > 0), o
assert o["requests"] < r["requests"] <= 4001 and r["warmup_requests"] >= 900, (o, r)
PY
    python3 - "$bench_out/trace.json" <<'PY' || { cat "$bench_out/log"; die "scripts/bench.py --trace-others: wrong results"; }
import json, sys
results = json.load(open(sys.argv[1]))["results"]
assert len(results) == 2, results
for r in results:
    o = r["outside_others"]
    # The spinner had a CPU for most of its 0.3 s in 0.75, over the 4 s the two servers'
    # turns took, and the requests due then are left out (on a busy host, as above, most or
    # all of them).
    busy = o["other_ms"] > 4000
    assert o["other_ms"] >= 600 and o["other_runs"] >= 4, o
    assert o["excluded"] >= 0.15 and o["requests"] < r["requests"], (o, r["requests"])
    assert busy or (o["excluded"] < 0.9 and o["requests"] > 0), o
    assert o["requests"] == 0 or 0 < o["p99_ms"] <= o["p999_ms"], o
PY
    grep -q "p99 / p99.9 outside other processes" "$bench_out/log" \
        || { cat "$bench_out/log"; die "scripts/bench.py: no figures outside other processes"; }
    say "scripts/bench.py --trace-others: other processes' runs left out ($((SECONDS - t0)) s)"
else
    echo "note: perf cannot record sched_switch here: scripts/bench.py --trace-others not tried"
fi

# --- scripts/device-scale.sh ---
t0=$SECONDS
# scripts/device-scale.sh, as the device machine would run it but for a few seconds a part
# (about 40 s): prepared for the base interpreter (its wheel from target/wheels, or built;
# the peers' from PyPI), then run from those wheels alone: workers 1 and 2 of each shape and
# of Granian, two m0load processes sharing each run (bench.py --clients), and the latency
# part's six servers.
WHEELS=${M0S_WHEELS:-target/wheels}
tag=$("$BASE_PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
from=()
if ls "$WHEELS"/m0serve_wsgi-*-"$tag"-*.whl >/dev/null 2>&1; then
    from=(--wheels "$WHEELS")
    say "device-scale.sh: the $tag wheel from $WHEELS"
else
    say "device-scale.sh: no $tag wheel in $WHEELS: prepare builds it (scripts/wheels.sh)"
fi
export M0S_DEVICE_DIR=target/device-smoke
scripts/device-scale.sh prepare --python "$BASE_PYTHON" "${from[@]}" >"$bench_out/log" 2>&1 \
    || { cat "$bench_out/log"; die "scripts/device-scale.sh prepare failed"; }
scripts/device-scale.sh run --quick --python "$BASE_PYTHON" --out "$bench_out/device" \
    >"$bench_out/log" 2>&1 || { cat "$bench_out/log"; die "scripts/device-scale.sh run failed"; }
unset M0S_DEVICE_DIR
python3 - "$bench_out/device" <<'PY' || { cat "$bench_out/log"; die "scripts/device-scale.sh: wrong results"; }
import json, os, sys
d = sys.argv[1]
scale = json.load(open(os.path.join(d, "scale.json")))
assert scale["meta"]["clients"] == 2, scale["meta"]
results = scale["results"]
specs = [r["server"] for r in results]
assert len(results) == 6 and all("error" not in r for r in results), results
for shape in ("m0serve@", "blocking-threads=0", "granian"):
    assert sum(shape in s for s in specs) >= 2, specs
for r in results:
    # Two clients, the connections shared out, each answered over its own second.
    assert [c["connections"] for c in r["clients"]] == [2, 2], r["clients"]
    assert all(c["requests"] > 100 and c["latency_p99_ms"] > 0 for c in r["clients"]), r
    assert r["non_2xx"] == 0 and not any(r["socket_errors"].values()), r
    assert r["cpu_s"] > 0 and r["client_cores"] > 0, r
md = open(os.path.join(d, "scale.md")).read()
assert "Workers scaling (hello)" in md and "| 1 worker | 2 workers |" in md, md
latency = json.load(open(os.path.join(d, "latency.json")))["results"]
assert sorted(r["kind"] for r in latency) == ["bjoern", "fastwsgi", "granian"] + ["m0serve"] * 3, latency
assert any(r["server"].endswith("idle-poll=50") and "--idle-poll 50" in r["command"] for r in latency), latency
for r in latency:
    assert "error" not in r and 1900 <= r["requests"] <= 2001 and r["non_2xx"] == 0, r
PY
say "scripts/device-scale.sh: prepared, and run --quick from its wheels ($((SECONDS - t0)) s)"
say "every check passed"
