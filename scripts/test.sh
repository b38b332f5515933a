#!/usr/bin/env bash
# Runs every test (unit, stress, integration against the real binary), then the HTTP and
# PEP 3333 suites a second time with the app inline on the loop thread
# (`--blocking-threads 0` for every server whose test does not choose its own shape).
#
# First it prepares two virtualenvs for the tests that need packages from PyPI (Flask,
# Django, Werkzeug, PyYAML: tests/frameworks.rs, tests/wheel.rs, tests/deploy.rs):
#   target/test-venv   the packages in tests/requirements.txt; made once, kept while that
#                      file and the interpreter stay the same (a stamp holds their hash)
#   target/wheel-venv  the wheel of this tree (maturin, release profile, target/wheels),
#                      pip-installed with Flask and Django; made afresh on every run
# and exports M0S_TEST_VENV and M0S_WHEEL_VENV for those tests (run without them, e.g.
# by a plain `cargo nextest run`, they skip with a note). Without PyPI this fails.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# --- the wheel, and target/wheel-venv with it installed ---
t0=$SECONDS
mkdir -p target/wheels
rm -f target/wheels/m0serve-*.whl
"$TEST_VENV/bin/maturin" build --release --interpreter "$BASE_PYTHON" --out target/wheels \
    || die "maturin build failed"
wheels=(target/wheels/m0serve-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || die "expected one wheel in target/wheels: ${wheels[*]}"
echo "scripts/test.sh: built ${wheels[0]} ($((SECONDS - t0)) s)"

t0=$SECONDS
rm -rf "$WHEEL_VENV"
"$BASE_PYTHON" -m venv "$WHEEL_VENV" || die "python3 -m venv $WHEEL_VENV failed"
"$WHEEL_VENV/bin/python" -m pip install --quiet --constraint "$REQUIREMENTS" \
    "${wheels[0]}" flask django \
    || die "pip could not install the wheel with flask and django into $WHEEL_VENV (the tests need PyPI)"
echo "scripts/test.sh: $WHEEL_VENV ready ($((SECONDS - t0)) s)"

export M0S_TEST_VENV="$PWD/$TEST_VENV"
export M0S_WHEEL_VENV="$PWD/$WHEEL_VENV"

INLINE_SUITES=(--test pep3333 --test http11 --test errors --test corpus --test uds)
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo nextest run --no-fail-fast "${INLINE_SUITES[@]}" "$@"
else
    cargo test --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo test --no-fail-fast "${INLINE_SUITES[@]}" "$@"
fi
