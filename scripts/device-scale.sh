#!/usr/bin/env bash
# `--workers` scaling (and p99 at a fixed rate with the client on cores of its own) on a
# machine of many cores: the 16-core device machine, which has Python but no Rust, no
# compiler for our peers and no network. Everything it needs is prepared here, into
# .device/ (git-ignored), and the run there is one command.
#
#   scripts/device-scale.sh prepare [--python-version 3.12 | --python PATH] [--wheels DIR]  (here)
#   scripts/device-scale.sh run [--out DIR] [--python PATH] [--only scale|latency] [--quick]
#
# prepare (needs PyPI, Rust, a C compiler, and that CPython, e.g. pyenv's, for the two
# wheels it builds):
#   .device/wheels   the m0serve wheel for that CPython (scripts/wheels.sh; or taken from
#                    --wheels DIR), Granian, bjoern-binary, Flask and what they need, and
#                    pip (pip download for that CPython on manylinux x86-64), and FastWSGI
#                    built here with a C compiler (PyPI has only its sdist)
#   .device/m0load   benches/loadgen's client, stripped (and .device/commit, the tree's)
# run (python3, or --python, must be that version; no network):
#   - makes target/device-venv with those wheels alone, and puts m0load where
#     scripts/bench.py looks for it;
#   - splits the CPUs in two halves by physical core (hyperthread siblings stay together):
#     the servers run on the first, one m0load process on each CPU of the second;
#   - scale: m0serve (threaded and inline) and Granian with 1, 2, 4 ... workers up to the
#     servers' CPUs, hello and Flask, 256 connections, K m0load processes at saturation
#     (scripts/bench.py --clients), 2 alternating rounds;
#   - latency: m0serve (both shapes, and inline with --idle-poll 50), FastWSGI, bjoern and
#     Granian at 27 000 req/s over 64 connections, each server on two CPUs of two physical
#     cores of its half and m0load on one CPU of the other's (the 2-core host's p99
#     comparison, without the client sharing the server's CPUs);
#   - writes machine.txt, setup.log and, for each part, PART.json, PART.md, PART.log into
#     DIR (default bench-results/device). bench.py saves its JSON after every run, so a run
#     cut short still leaves what it measured (`scripts/bench.py --report DIR/PART.json`).
# --quick: a few seconds a part, workers 1 and 2, two clients, for checking the script
# (scripts/bench-check.sh). M0S_DEVICE_DIR: another directory than .device.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/device-scale.sh: $*" >&2
    exit 1
}
say() { echo "scripts/device-scale.sh: $*"; }

DEV=${M0S_DEVICE_DIR:-.device}
# The peers' versions of BENCHMARKS.md's runs; FastWSGI imports pkg_resources, which
# setuptools 81 no longer has and a CPython 3.12 virtualenv does not install.
# pip itself: for an interpreter without ensurepip, whose venv then has no pip.
PEERS=("granian==2.8.9" "bjoern-binary==3.2.2" "flask==3.1.3" "setuptools<81" pip)
FASTWSGI="fastwsgi==0.0.9"
MANYLINUX=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
prepare)
    PYV=3.12
    FROM=
    py=
    while [ $# -gt 0 ]; do
        case "$1" in
        --python-version) PYV=$2; shift 2 ;;
        --python) py=$2; shift 2 ;;
        --wheels) FROM=$2; shift 2 ;;
        *) die "prepare: unknown argument $1 (see the head of this script)" ;;
        esac
    done
    if [ -n "$py" ]; then
        PYV=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
            || die "prepare: $py does not run"
    elif command -v pyenv >/dev/null 2>&1 && prefix=$(pyenv prefix "$PYV" 2>/dev/null); then
        py=$prefix/bin/python$PYV
    elif command -v "python$PYV" >/dev/null 2>&1; then
        py=$(command -v "python$PYV")
    fi
    [ -n "$py" ] && [ -x "$py" ] || die "prepare: no CPython $PYV here (pyenv or python$PYV)"
    tag="cp${PYV/./}"
    rm -rf "$DEV/wheels" "$DEV/m0load"
    mkdir -p "$DEV/wheels"
    if [ -n "$FROM" ]; then
        cp "$FROM"/m0serve_wsgi-*-"$tag"-*.whl "$DEV/wheels/" \
            || die "prepare: no m0serve wheel for $tag in $FROM"
    else
        scripts/wheels.sh --out "$DEV/build" --python "$py" || die "prepare: scripts/wheels.sh failed"
        cp "$DEV/build"/m0serve_wsgi-*-"$tag"-*.whl "$DEV/wheels/"
    fi
    python3 -m pip download --quiet --only-binary=:all: --python-version "$PYV" \
        --implementation cp "${MANYLINUX[@]}" -d "$DEV/wheels" "${PEERS[@]}" \
        || die "prepare: pip download ${PEERS[*]} for $tag failed (needs PyPI)"
    "$py" -m pip wheel --quiet --no-deps -w "$DEV/wheels" "$FASTWSGI" \
        || die "prepare: building the $FASTWSGI wheel with $py failed"
    cargo build --release --quiet -p m0load || die "prepare: building benches/loadgen failed"
    cp target/release/m0load "$DEV/m0load"
    strip "$DEV/m0load" 2>/dev/null || true
    rm -rf "$DEV/build"
    # The tree the wheel was built from, for machine.txt there (where there is no .git).
    git describe --always --dirty >"$DEV/commit" 2>/dev/null || echo unknown >"$DEV/commit"
    say "prepared $DEV ($(du -sh "$DEV" | cut -f1)) for CPython $PYV:"
    ls "$DEV/wheels"
    ;;
run)
    OUT=bench-results/device
    PY=python3
    ONLY=
    QUICK=
    while [ $# -gt 0 ]; do
        case "$1" in
        --out) OUT=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        *) die "run: unknown argument $1 (see the head of this script)" ;;
        esac
    done
    case "$ONLY" in "" | scale | latency) ;; *) die "run: --only scale or latency" ;; esac
    [ -d "$DEV/wheels" ] && [ -x "$DEV/m0load" ] \
        || die "run: $DEV is not prepared (scripts/device-scale.sh prepare, on a machine with PyPI and Rust)"
    wheel=$(ls "$DEV"/wheels/m0serve_wsgi-*.whl)
    tag=$(basename "$wheel" | cut -d- -f3)
    have=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') \
        || die "run: $PY does not run"
    [ "$have" = "$tag" ] || die "run: $PY is $have, the wheels are for $tag (prepare --python-version)"
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    exec 3>"$OUT/setup.log"

    # --- the virtualenv, from the wheels alone ---
    # Outside $DEV, which travels to the device machine and should hold only the inputs.
    VENV=target/device-venv
    rm -rf "$VENV"
    pkgs=(m0serve-wsgi granian bjoern-binary fastwsgi flask setuptools)
    pipargs=(install --quiet --no-index --find-links "$DEV/wheels" "${pkgs[@]}")
    if "$PY" -m venv "$VENV" >&3 2>&1; then
        "$VENV/bin/python" -m pip "${pipargs[@]}" >&3 2>&1 || die "run: pip install failed (setup.log)"
    else
        # An interpreter without ensurepip: an empty venv, filled by pip run from its wheel.
        rm -rf "$VENV"
        "$PY" -m venv --without-pip "$VENV" >&3 2>&1 || die "run: $PY -m venv failed (setup.log)"
        pipwheel=$(ls "$DEV"/wheels/pip-*.whl) || die "run: no pip wheel in $DEV/wheels"
        "$VENV/bin/python" "$pipwheel/pip" "${pipargs[@]}" >&3 2>&1 \
            || die "run: pip install into $VENV failed (setup.log)"
    fi
    export M0BENCH_VENV=$PWD/$VENV
    mkdir -p target/release
    # (Where cargo is, bench.py builds it from the tree instead.)
    command -v cargo >/dev/null || cp -f "$DEV/m0load" target/release/m0load

    # --- the machine, and its CPUs in two halves by physical core ---
    {
        date -u +%FT%TZ
        echo "m0serve prepared from $(cat "$DEV/commit" 2>/dev/null || echo '?')"
        uname -a
        "$VENV/bin/python" --version
        lscpu 2>/dev/null || grep -m1 'model name' /proc/cpuinfo
        echo "cpuidle: $(cat /sys/devices/system/cpu/cpuidle/current_governor 2>/dev/null || echo '?')," \
            "cpufreq: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo '?')"
    } >"$OUT/machine.txt" 2>&1
    split=$("$PY" - <<'PY'
import os
cpus = sorted(os.sched_getaffinity(0))
def core(c):
    try:
        with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
            return f.read().strip()
    except OSError:
        return str(c)
cores = {}
for c in cpus:
    cores.setdefault(core(c), []).append(c)
groups = list(cores.values())
half = max(len(groups) // 2, 1)
server = sorted(c for g in groups[:half] for c in g)
client = sorted(c for g in groups[half:] for c in g) or server
# The latency part: the first CPU of each of the first two server cores (a core's siblings
# may be numbered next to each other), and the first of the first client core.
two = [g[0] for g in groups[:half]][:2] or server[:1]
one = (groups[half:] or groups)[0][0]
print(",".join(map(str, server)), ",".join(map(str, client)), len(server), len(client),
      ",".join(map(str, two)), one)
PY
    ) || die "run: the CPU split failed"
    read -r SERVER_CPUS CLIENT_CPUS NSERVER NCLIENT LAT_SERVER LAT_CLIENT <<<"$split"
    PINNED=1
    where="servers on CPUs $SERVER_CPUS, clients on CPUs $CLIENT_CPUS"
    if ! command -v taskset >/dev/null; then
        # Measured all the same, unpinned: the reports' Shape lines then name no CPUs.
        PINNED=
        where="no taskset here: servers and clients unpinned"
    fi
    say "$where"
    echo "$where" >>"$OUT/machine.txt"

    M0=$VENV/bin/m0serve
    if [ -z "$ONLY" ] || [ "$ONLY" = scale ]; then
        counts=()
        for ((w = 1; w <= NSERVER; w *= 2)); do counts+=("$w"); done
        [ "${counts[-1]}" = "$NSERVER" ] || counts+=("$NSERVER")
        rounds=2 duration=3 warmup=1 scen=hello,flask conns=256
        if [ -n "$QUICK" ]; then
            counts=(1 2) rounds=1 duration=1 scen=hello NCLIENT=2 conns=4
        fi
        servers=
        for shape in "m0serve@$M0" "m0serve@$M0:blocking-threads=0" granian; do
            for w in "${counts[@]}"; do
                case "$shape" in *:*) s="$shape,workers=$w" ;; *) s="$shape:workers=$w" ;; esac
                servers+="${servers:+,}$s"
            done
        done
        say "scale: workers ${counts[*]}, $NCLIENT client(s), $conns connections"
        pinarg=()
        [ -z "$PINNED" ] || pinarg=(--pin "$SERVER_CPUS:$CLIENT_CPUS")
        "$PY" scripts/bench.py --no-install --client m0load --clients "$NCLIENT" \
            "${pinarg[@]}" --servers "$servers" --scenario "$scen" \
            --connections "$conns" --rounds "$rounds" --duration "$duration" \
            --warmup "$warmup" --json "$OUT/scale.json" --md "$OUT/scale.md" \
            2>&1 | tee "$OUT/scale.log" || die "run: the scale part failed (scale.log)"
    fi
    if [ -z "$ONLY" ] || [ "$ONLY" = latency ]; then
        two=$LAT_SERVER one=$LAT_CLIENT
        rounds=3 duration=8 warmup=2 rate=27000
        if [ -n "$QUICK" ]; then
            rounds=1 duration=1 warmup=1 rate=2000
        fi
        say "latency: servers on CPUs $two, m0load on CPU $one, $rate req/s"
        pinarg=()
        [ -z "$PINNED" ] || pinarg=(--pin "$two:$one")
        "$PY" scripts/bench.py --no-install --client m0load --rate "$rate" "${pinarg[@]}" \
            --servers "m0serve@$M0,m0serve@$M0:blocking-threads=0,m0serve@$M0:blocking-threads=0,idle-poll=50,fastwsgi,bjoern,granian" \
            --scenario hello --connections 64 --rounds "$rounds" --duration "$duration" \
            --warmup "$warmup" --json "$OUT/latency.json" --md "$OUT/latency.md" \
            2>&1 | tee "$OUT/latency.log" || die "run: the latency part failed (latency.log)"
    fi
    say "done: $OUT"
    ;;
*)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
