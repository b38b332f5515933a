#!/usr/bin/env bash
# Runs every test (unit, stress, integration against the real binary), then the HTTP and
# PEP 3333 suites a second time with the app inline on the loop thread
# (`--blocking-threads 0` for every server whose test does not choose its own shape), and a
# third time under the Python package's entry point (M0S_TEST_BINARY: the `m0serve`
# console script of a virtualenv the wheel is installed in); and the process suites
# (workers, reload, systemd, privileges, metrics) a second time with `--preload` on every
# server (M0S_TEST_PRELOAD=1). The benchmark tooling's checks (m0load's tests, and
# scripts/bench.py and scripts/device-scale.sh end to end) are scripts/bench-check.sh's,
# which .ci/run runs after this.
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
