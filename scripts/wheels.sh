#!/usr/bin/env bash
# Builds the Python package: a wheel for each CPython 3.9-3.13 found on this machine, and
# the sdist, into dist/ (or --out DIR), with interpreters.txt ("3.X /path/to/python" per
# wheel built).
#
#   scripts/wheels.sh [--out DIR] [--python PATH]... [--target aarch64-unknown-linux-gnu]
#
# Interpreters: each --python given, else for each of 3.9 ... 3.13 the first of pyenv's
# installation of it (`pyenv prefix 3.X`) and `python3.X` on PATH that runs and is that
# version. Missing versions are named and skipped; finding none is an error.
#
# The wheels are tagged manylinux2014 (glibc 2.17 and later): maturin links them with zig
# for that glibc (`--zig`), then checks the symbols they use. Each is built once per
# interpreter against that interpreter's headers (cp39 ... cp313); no libpython is linked.
# maturin and zig come from target/build-venv, made with pip on first use (needs PyPI) and
# kept while this script's pins stay the same. `--target aarch64-unknown-linux-gnu` builds
# the aarch64 wheels instead (cross-compiled: `rustup target add` it first; zig links them
# for glibc 2.17 too, against each version's build configuration that maturin carries),
# and no sdist.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/wheels.sh: $*" >&2
    exit 1
}

OUT=dist
PYTHONS=()
TARGET=
while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=$2; shift 2 ;;
    --python) PYTHONS+=("$2"); shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done

# --- the build tools ---
BUILD_VENV=target/build-venv
PINS=("maturin>=1.9,<2" "ziglang>=0.13,<0.18")
stamp="$BUILD_VENV/.m0s-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${PINS[*]}" ] || [ ! -x "$BUILD_VENV/bin/maturin" ]; then
    echo "scripts/wheels.sh: creating $BUILD_VENV (${PINS[*]})"
    rm -rf "$BUILD_VENV"
    python3 -m venv "$BUILD_VENV" || die "python3 -m venv $BUILD_VENV failed"
    "$BUILD_VENV/bin/python" -m pip install --quiet "${PINS[@]}" \
        || die "pip could not install ${PINS[*]} (building the wheels needs PyPI)"
    echo "${PINS[*]}" >"$stamp"
fi
# maturin finds zig as `python -m ziglang` of the interpreter on PATH.
export PATH="$PWD/$BUILD_VENV/bin:$PATH"

# --- the interpreters ---
version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
if [ ${#PYTHONS[@]} -eq 0 ]; then
    for v in 3.9 3.10 3.11 3.12 3.13; do
        found=
        candidates=()
        if command -v pyenv >/dev/null 2>&1 && prefix=$(pyenv prefix "$v" 2>/dev/null); then
            candidates+=("$prefix/bin/python$v")
        fi
        if p=$(command -v "python$v" 2>/dev/null); then
            candidates+=("$p")
        fi
        for p in "${candidates[@]}"; do
            if [ "$(version_of "$p")" = "$v" ]; then
                found=$p
                break
            fi
        done
        if [ -n "$found" ]; then
            PYTHONS+=("$found")
        else
            echo "scripts/wheels.sh: no CPython $v found: no wheel for it"
        fi
    done
fi
[ ${#PYTHONS[@]} -gt 0 ] || die "no CPython 3.9-3.13 found"

# --- build ---
mkdir -p "$OUT"
# This project's earlier wheels and sdists go (under the distribution's old name too), so
# that what is there is what this run built.
rm -f "$OUT"/m0serve_wsgi-*.whl "$OUT"/m0serve_wsgi-*.tar.gz "$OUT"/m0serve-*.whl "$OUT"/m0serve-*.tar.gz
interpreters=()
: >"$OUT/interpreters.txt"
for p in "${PYTHONS[@]}"; do
    interpreters+=(--interpreter "$p")
    echo "$(version_of "$p") $p" >>"$OUT/interpreters.txt"
done
if [ -n "$TARGET" ]; then
    echo "scripts/wheels.sh: building for ${PYTHONS[*]}, for $TARGET"
    maturin build --release --zig --compatibility manylinux_2_17 --target "$TARGET" \
        "${interpreters[@]}" --out "$OUT" || die "maturin build --target $TARGET failed"
    ls -l "$OUT"
    exit 0
fi
echo "scripts/wheels.sh: building for ${PYTHONS[*]}"
maturin build --release --zig --compatibility manylinux_2_17 "${interpreters[@]}" --out "$OUT" \
    || die "maturin build failed"
maturin sdist --out "$OUT" || die "maturin sdist failed"
ls -l "$OUT"
