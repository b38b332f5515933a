#!/usr/bin/env bash
# Model-checks the SPSC ring and the park-only-if-parked wake protocol with loom.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    cargo test --release --lib --target-dir target/loom -- loom "$@"
