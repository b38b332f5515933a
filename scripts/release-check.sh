#!/usr/bin/env bash
# Checks a release's files as the package index and a user will see them:
#
#   scripts/release-check.sh [--dist DIR]
#
# Without --dist it first builds them (scripts/wheels.sh --out target/release-dist: a wheel
# per CPython 3.9-3.13 found, and the sdist). Then:
#   1. `twine check` on every file: the metadata is complete and the long description (the
#      README) renders as the index will render it; and `auditwheel show` on every wheel:
#      its symbols' glibc versions and the libraries it needs fit the manylinux tag it
#      claims (x86_64 and aarch64 alike);
#   2. the versions agree: Cargo.toml's (the one definition), each file's name, each
#      wheel's METADATA, and CHANGELOG.md has a section for it (or an Unreleased one);
#   3. every wheel for this machine's architecture installs with pip from DIR alone (`--no-index`) into a fresh virtualenv
#      of its Python (DIR/interpreters.txt, as scripts/wheels.sh writes it), and serves:
#      `m0serve --version`, examples/hello.py answered over loopback, SIGTERM, exit 0.
# twine and auditwheel come from target/release-venv, made with pip on first use (needs PyPI). Exits
# non-zero naming the first thing that failed.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/release-check.sh: $*" >&2
    exit 1
}

DIST=
while [ $# -gt 0 ]; do
    case "$1" in
    --dist) DIST=$2; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
if [ -z "$DIST" ]; then
    DIST=target/release-dist
    rm -rf "$DIST"
    scripts/wheels.sh --out "$DIST" || die "scripts/wheels.sh failed"
fi
[ -f "$DIST/interpreters.txt" ] || die "$DIST/interpreters.txt is missing (scripts/wheels.sh writes it)"
shopt -s nullglob
wheels=("$DIST"/m0serve_wsgi-*.whl)
sdists=("$DIST"/m0serve_wsgi-*.tar.gz)
[ ${#wheels[@]} -gt 0 ] || die "no m0serve_wsgi wheel in $DIST"
[ ${#sdists[@]} -eq 1 ] || die "expected one m0serve_wsgi sdist in $DIST, found ${#sdists[@]}"

# --- 1. metadata and the long description ---
VENV=target/release-venv
PINS=("twine>=5,<7" "auditwheel>=6,<7")
stamp="$VENV/.m0s-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${PINS[*]}" ] || [ ! -x "$VENV/bin/auditwheel" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
    "$VENV/bin/python" -m pip install --quiet "${PINS[@]}" \
        || die "pip could not install ${PINS[*]} (this check needs PyPI)"
    echo "${PINS[*]}" >"$stamp"
fi
"$VENV/bin/twine" check --strict "${wheels[@]}" "${sdists[@]}" || die "twine check failed"
for w in "${wheels[@]}"; do
    arch=$(basename "$w" .whl)
    arch=${arch##*_2_17_}
    "$VENV/bin/auditwheel" show "$w" | tr -s ' \n' ' ' \
        | grep -q "consistent with the following platform tag: \"manylinux_2_17_$arch\"" \
        || die "$w: auditwheel does not find it consistent with manylinux_2_17_$arch"
done

# --- 2. one version everywhere ---
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || die "no version in Cargo.toml"
for f in "${wheels[@]}" "${sdists[@]}"; do
    case "$(basename "$f")" in
    m0serve_wsgi-"$version"-* | m0serve_wsgi-"$version".tar.gz) ;;
    *) die "$f is not version $version (Cargo.toml)" ;;
    esac
done
for w in "${wheels[@]}"; do
    meta=$("$VENV/bin/python" - "$w" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    fields = dict(l.split(": ", 1) for l in z.read(name).decode().splitlines() if ": " in l)
print(fields.get("Name", ""), fields.get("Version", ""))
PY
)
    [ "$meta" = "m0serve-wsgi $version" ] || die "$w: METADATA says '$meta', not 'm0serve-wsgi $version'"
done
grep -Eq "^## \[($version|Unreleased)\]" CHANGELOG.md \
    || die "CHANGELOG.md has no section for $version (nor an Unreleased one)"
echo "scripts/release-check.sh: twine check passed; ${#wheels[@]} wheel(s) and the sdist are version $version"

# --- 3. every wheel installs from the files alone, and serves ---
port_free() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
while read -r pyversion python; do
    tag=cp${pyversion/./}
    wheel=("$DIST"/m0serve_wsgi-"$version"-"$tag"-*_"$(uname -m)".whl)
    [ ${#wheel[@]} -eq 1 ] || die "no single wheel for $tag in $DIST"
    venv=$(mktemp -d /tmp/m0s-release-XXXXXX)
    trap 'rm -rf "$venv"' EXIT
    "$python" -m venv "$venv/env" || die "$python -m venv failed"
    "$venv/env/bin/python" -m pip install --quiet --no-index --find-links "$DIST" m0serve-wsgi \
        || die "pip could not install m0serve-wsgi for $tag from $DIST alone"
    said=$("$venv/env/bin/m0serve" --version) || die "$tag: m0serve --version failed"
    [ "$said" = "m0serve $version" ] || die "$tag: m0serve --version says '$said'"
    port=$(port_free)
    "$venv/env/bin/m0serve" hello:app --app-dir examples --port "$port" --log-level warning &
    pid=$!
    body=
    for _ in $(seq 1 100); do
        body=$(python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/', timeout=2).read().decode().strip())" 2>/dev/null) && break
        sleep 0.1
    done
    kill -TERM "$pid"
    status=0
    wait "$pid" || status=$?
    [ "$body" = "Hello, World!" ] || die "$tag: the installed m0serve did not serve examples/hello.py (got '$body')"
    [ "$status" -eq 0 ] || die "$tag: m0serve exited $status after SIGTERM"
    rm -rf "$venv"
    trap - EXIT
    echo "scripts/release-check.sh: $tag: installed from $DIST alone, served, stopped cleanly"
done <"$DIST/interpreters.txt"
echo "scripts/release-check.sh: all passed"
