#!/usr/bin/env bash
# Runs every test (unit, stress, integration against the real binary), then the HTTP and
# PEP 3333 suites a second time with the app inline on the loop thread
# (`--blocking-threads 0` for every server whose test does not choose its own shape).
set -euo pipefail
cd "$(dirname "$0")/.."
INLINE_SUITES=(--test pep3333 --test http11 --test errors --test corpus --test uds)
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo nextest run --no-fail-fast "${INLINE_SUITES[@]}" "$@"
else
    cargo test --no-fail-fast "$@"
    M0S_TEST_BLOCKING_THREADS=0 cargo test --no-fail-fast "${INLINE_SUITES[@]}" "$@"
fi
