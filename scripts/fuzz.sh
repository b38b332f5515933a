#!/usr/bin/env bash
# Runs each cargo-fuzz target (fuzz/fuzz_targets: head, chunked, conn,
# proxy_protocol, static_path) for a set time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default: 60 s each, all five)
#
# Needs a nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz (installed
# here when missing). The corpus (fuzz/corpus/TARGET, not committed) is seeded from
# fuzz/seeds and from the peer corpus ../shared/corpus/gunicorn-requests (decoded from its
# escaped text form). A crash leaves its input in fuzz/artifacts/TARGET; turn each into a
# regression test before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(head chunked conn proxy_protocol static_path)
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz
# The fuzz binaries link libpython (through m0serve) without the server's rpath.
libdir=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    mkdir -p "$corpus"
    cp -n fuzz/seeds/* "$corpus"/ 2>/dev/null || true
    python3 - "$corpus" <<'PY'
import pathlib, re, sys
src = pathlib.Path("../shared/corpus/gunicorn-requests")
out = pathlib.Path(sys.argv[1])
for f in sorted(src.glob("*/*.http")) if src.is_dir() else []:
    t = f.read_bytes().replace(b"\n", b"").replace(b"\\r\\n", b"\r\n")
    t = t.replace(b"\\0", b"\0").replace(b"\\n", b"\n").replace(b"\\t", b"\t")
    t = re.sub(rb"\\x([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]), t)
    (out / f"gunicorn-{f.parent.name}-{f.stem}").write_bytes(t)
PY
    echo "== fuzzing $t for ${secs}s"
    log=fuzz/last-$t.log
    if cargo +nightly fuzz run "$t" "$corpus" -- -max_total_time="$secs" -max_len=65536 \
        -print_final_stats=1 >"$log" 2>&1; then
        grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|^Done" "$log" || true
    else
        failed+=("$t")
        grep -E "panicked|SUMMARY|ERROR|Test unit written" "$log" || tail -20 "$log"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes in: ${failed[*]} (inputs in fuzz/artifacts/)"
    exit 1
fi
echo "no crashes"
