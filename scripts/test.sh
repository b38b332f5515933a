#!/usr/bin/env bash
# Runs every test (unit, stress, integration against the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast "$@"
else
    cargo test --no-fail-fast "$@"
fi
