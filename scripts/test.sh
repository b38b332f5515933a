#!/usr/bin/env bash
# Runs every test (unit, stress, integration against the real binary), then the HTTP and
# PEP 3333 suites a second time with the app inline on the loop thread
# (`--blocking-threads 0` for every server whose test does not choose its own shape), and a
# third time under the Python package's entry point (M0S_TEST_BINARY: the `m0serve`
# console script of a virtualenv the wheel is installed in); and the process suites
# (workers, reload, systemd, privileges, metrics) a second time with `--preload` on every
# server (M0S_TEST_PRELOAD=1).
#
# First it prepares what the tests that need PyPI use (tests/frameworks.rs,
# tests/package.rs, tests/deploy.rs):
#   target/test-venv        the packages in tests/requirements.txt; made once, kept while
#                           that file and the interpreter stay the same (a stamp holds
#                           their hash)
#   target/wheels           scripts/wheels.sh: a wheel per CPython 3.9-3.13 found, the sdist
#   target/sdist-wheel      the base interpreter's wheel, built from that sdist with pip
#   target/package-venvs/V  per version found: a fresh virtualenv with its wheel and Flask
#                           (the base version's: the sdist's wheel, and Django too)
# and exports M0S_TEST_VENV, M0S_WHEEL_VENV (the base version's package venv),
# M0S_PACKAGE_VENVS, M0S_WHEELS, M0S_PORTABLE_WHEEL and M0S_BUILD_PYTHON_PREFIX for those tests (run
# without them, e.g. by a plain `cargo nextest run`, they are skipped). Without PyPI
# this fails.
#
# A test that cannot run here (a tool, root or the corpus missing) returns early, which the
# test runner counts as a pass: each such test records itself in target/skipped-tests.txt
# (M0S_SKIP_LOG, tests/common/skip.rs), and this script ends with that list and its count.
# With M0S_REQUIRE_ALL=1 (as .ci/run sets) such a test fails instead, but for the gunicorn
# corpus tests, which may be skipped where ../shared/corpus is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target
export M0S_SKIP_LOG="$PWD/target/skipped-tests.txt"
: >"$M0S_SKIP_LOG"
report_skips() {
    local n
    n=$(sort -u "$M0S_SKIP_LOG" | grep -c . || true)
    if [ "$n" -gt 0 ]; then
        echo "scripts/test.sh: $n test(s) did not run (skipped, counted as passed by the runner):"
        sort -u "$M0S_SKIP_LOG" | sed 's/^/  /'
    else
        echo "scripts/test.sh: no test was skipped"
    fi
}
trap report_skips EXIT

die() {
    echo "scripts/test.sh: $*" >&2
    exit 1
}

REQUIREMENTS=tests/requirements.txt
TEST_VENV=target/test-venv
WHEEL_VENV=target/wheel-venv
# The interpreter cargo builds against (pyo3 asks python3 on PATH): the virtualenvs and
# the wheel use the same one.
BASE_PYTHON=$(python3 -c 'import sys; print(sys.executable)') || die "no python3 on PATH"

# --- target/test-venv, re-used while complete and current ---
t0=$SECONDS
want=$(
    {
        cat "$REQUIREMENTS"
        echo "$BASE_PYTHON"
        "$BASE_PYTHON" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
)
stamp="$TEST_VENV/.m0s-requirements.sha256"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x "$TEST_VENV/bin/python" ]; then
    echo "scripts/test.sh: creating $TEST_VENV from $REQUIREMENTS"
    rm -rf "$TEST_VENV"
    "$BASE_PYTHON" -m venv "$TEST_VENV" || die "python3 -m venv $TEST_VENV failed"
    "$TEST_VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS" \
        || die "pip could not install $REQUIREMENTS into $TEST_VENV (the tests need PyPI)"
    echo "$want" >"$stamp"
fi
echo "scripts/test.sh: $TEST_VENV ready ($((SECONDS - t0)) s)"

# --- the package: the wheels, the sdist built from source, a virtualenv per version ---
t0=$SECONDS
WHEELS=target/wheels
rm -rf "$WHEELS"
scripts/wheels.sh --out "$WHEELS" || die "scripts/wheels.sh failed"
echo "scripts/test.sh: built $(ls "$WHEELS"/*.whl | wc -l) wheel(s) and the sdist ($((SECONDS - t0)) s)"

# The sdist must build: the base interpreter's wheel is built from it, with pip, as a user
# without a wheel for their platform would (maturin from target/build-venv; the cargo
# build directory is kept between runs).
t0=$SECONDS
SDIST_WHEELS=target/sdist-wheel
rm -rf "$SDIST_WHEELS"
sdists=("$WHEELS"/m0serve_wsgi-*.tar.gz)
# Every file in the sdist carries the same old timestamp, so cargo would take the kept
# build of m0serve itself for fresh after any change: its fingerprints go, the
# dependencies' stay.
find target/sdist-build -type d -path '*/.fingerprint/m0serve-*' -prune -exec rm -rf {} + 2>/dev/null || true
PATH="$PWD/target/build-venv/bin:$PATH" CARGO_TARGET_DIR="$PWD/target/sdist-build" \
    target/build-venv/bin/python -m pip wheel --quiet \
    --no-deps --no-build-isolation --wheel-dir "$SDIST_WHEELS" "${sdists[0]}" \
    || die "the sdist ${sdists[0]} did not build"
echo "scripts/test.sh: built $(ls "$SDIST_WHEELS") from ${sdists[0]} ($((SECONDS - t0)) s)"

# A fresh virtualenv per interpreter, the wheel for it and Flask installed with pip; the
# base interpreter's gets the wheel built from the sdist, and Django (tests/wheel.rs).
t0=$SECONDS
PACKAGE_VENVS=()
BASE_VERSION=$("$BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
rm -rf target/package-venvs
while read -r version python; do
    venv=target/package-venvs/$version
    tag=cp${version/./}
    if [ "$version" = "$BASE_VERSION" ]; then
        wheel=$(ls "$SDIST_WHEELS"/m0serve_wsgi-*-"$tag"-*.whl)
        extra=(django)
        WHEEL_VENV=$venv
        PORTABLE_WHEEL=$(ls "$WHEELS"/m0serve_wsgi-*-"$tag"-*.whl)
    else
        wheel=$(ls "$WHEELS"/m0serve_wsgi-*-"$tag"-*.whl)
        extra=()
    fi
    "$python" -m venv "$venv" || die "$python -m venv $venv failed"
    "$venv/bin/python" -m pip install --quiet --constraint "$REQUIREMENTS" \
        "$wheel" flask "${extra[@]}" \
        || die "pip could not install $wheel with flask into $venv (the tests need PyPI)"
    PACKAGE_VENVS+=("$PWD/$venv")
done <"$WHEELS/interpreters.txt"
[ -n "${WHEEL_VENV:-}" ] || die "no wheel was built for the base interpreter $BASE_PYTHON"
echo "scripts/test.sh: ${PACKAGE_VENVS[*]} ready ($((SECONDS - t0)) s)"

export M0S_TEST_VENV="$PWD/$TEST_VENV"
export M0S_WHEEL_VENV="$PWD/$WHEEL_VENV"
export M0S_PACKAGE_VENVS="${PACKAGE_VENVS[*]}"
export M0S_WHEELS="$PWD/$WHEELS"
export M0S_PORTABLE_WHEEL="$PWD/$PORTABLE_WHEEL"
M0S_BUILD_PYTHON_PREFIX=$("$BASE_PYTHON" -c 'import sys; print(sys.base_prefix)')
export M0S_BUILD_PYTHON_PREFIX

INLINE_SUITES=(--test pep3333 --test http11 --test errors --test corpus --test uds)
PRELOAD_SUITES=(--test workers --test reload --test systemd --test privileges --test metrics)
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo nextest run --no-fail-fast "${INLINE_SUITES[@]}" "$@"
    M0S_TEST_BINARY="$M0S_WHEEL_VENV/bin/m0serve" \
        cargo nextest run --no-fail-fast "${INLINE_SUITES[@]}" "$@"
    M0S_TEST_PRELOAD=1 cargo nextest run --no-fail-fast "${PRELOAD_SUITES[@]}" "$@"
else
    cargo test --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo test --no-fail-fast "${INLINE_SUITES[@]}" "$@"
    M0S_TEST_BINARY="$M0S_WHEEL_VENV/bin/m0serve" \
        cargo test --no-fail-fast "${INLINE_SUITES[@]}" "$@"
    M0S_TEST_PRELOAD=1 cargo test --no-fail-fast "${PRELOAD_SUITES[@]}" "$@"
fi

# The benchmark client (benches/loadgen, the workspace's m0load): its response reader, its
# open loop and its turns.
cargo test --quiet -p m0load

# scripts/bench.py's fixed-rate run with m0load and --interleave, end to end on this build
# (about 15 s): two m0serve shapes run at once and take turns, and each comes back with its
# requests, its CPU, its turns' figures and its p99 outside the host's stalls.
bench_out=$(mktemp -d)
bin="$PWD/target/debug/m0serve"
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
# process that spins 0.3 s of every 0.75 (for 60 s at most; so it meets both servers'
# turns) shows as another process's runs, and the requests due then are left out.
if perf record -q -e sched:sched_switch -a -o "$bench_out/probe.data" -- true >/dev/null 2>&1; then
    python3 -c '
import time
end = time.time() + 60
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
    kill $spinner; wait $spinner 2>/dev/null || true
    python3 - "$bench_out/trace1.json" <<'PY' || { cat "$bench_out/log1"; die "scripts/bench.py --trace-others (one server): wrong results"; }
import json, sys
[r] = json.load(open(sys.argv[1]))["results"]
o = r["outside_others"]
# The spinner's 0.3 s in 0.75 over the run's 2 s; the 0.5 s warm-up's requests counted apart.
assert o["other_ms"] >= 300 and 0.15 <= o["excluded"] < 0.9, o
assert 0 < o["requests"] < r["requests"] <= 4001 and r["warmup_requests"] >= 900, (o, r)
PY
    python3 - "$bench_out/trace.json" <<'PY' || { cat "$bench_out/log"; die "scripts/bench.py --trace-others: wrong results"; }
import json, sys
results = json.load(open(sys.argv[1]))["results"]
assert len(results) == 2, results
for r in results:
    o = r["outside_others"]
    # The spinner had a CPU for most of its 0.3 s in 0.75, over the 4 s the two servers'
    # turns took, and the requests due then are left out.
    assert o["other_ms"] >= 600 and o["other_runs"] >= 4, o
    assert 0.15 <= o["excluded"] < 0.9 and 0 < o["requests"] < r["requests"], (o, r["requests"])
    assert o["p99_ms"] > 0 and o["p999_ms"] >= o["p99_ms"], o
PY
    grep -q "p99 / p99.9 outside other processes" "$bench_out/log" \
        || { cat "$bench_out/log"; die "scripts/bench.py: no figures outside other processes"; }
else
    echo "note: perf cannot record sched_switch here: scripts/bench.py --trace-others not tried"
fi

# scripts/device-scale.sh, as the device machine would run it but for a few seconds a part
# (about 40 s): prepared for the base interpreter (its wheel from above, the peers' from
# PyPI), then run from those wheels alone: workers 1 and 2 of each shape and of Granian,
# two m0load processes sharing each run (bench.py --clients), and the latency part's six
# servers.
export M0S_DEVICE_DIR=target/device-smoke
scripts/device-scale.sh prepare --python "$BASE_PYTHON" --wheels "$WHEELS" >"$bench_out/log" 2>&1 \
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
rm -rf "$bench_out"
