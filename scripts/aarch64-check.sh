#!/usr/bin/env bash
# Runs the aarch64 wheel, not only builds it: an aarch64 CPython 3.11 (Debian's arm64
# packages, unpacked into target/arm64-root) runs under user-mode emulation (Debian's
# qemu-user-static, registered with binfmt_misc so that the workers it executes are
# emulated too), imports the cp311 aarch64 wheel, and serves; the host is its client over
# loopback: requests on one keep-alive connection, a chunked upload echoed back, then
# SIGTERM and a clean exit. The wheel's symbols are audited for its platform tag
# (auditwheel).
#
#   scripts/aarch64-check.sh [--dist DIR]
#
# Without --dist it builds the wheel first (scripts/wheels.sh --target
# aarch64-unknown-linux-gnu for the host's python3.11, into target/aarch64-dist). As root
# on Debian it installs what is missing with apt-get (qemu-user-static) and registers the
# emulator; elsewhere it says what is missing and fails.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/aarch64-check.sh: $*" >&2
    exit 1
}

DIST=
while [ $# -gt 0 ]; do
    case "$1" in
    --dist) DIST=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done

# --- the emulator, registered for aarch64 ELF files ---
QEMU=/usr/bin/qemu-aarch64-static
if [ ! -x "$QEMU" ]; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
        || die "needs $QEMU (Debian: apt-get install qemu-user-static)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static \
        >/dev/null) || die "apt-get could not install qemu-user-static"
fi
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null || die "cannot mount $BINFMT (needs root)"
fi
if [ ! -e "$BINFMT/qemu-aarch64" ]; then
    conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || die "no $conf (qemu-user-static provides it)"
    cat "$conf" >"$BINFMT/register" || die "cannot register $conf with binfmt_misc (needs root)"
fi

# --- an aarch64 CPython 3.11: Debian's arm64 packages, unpacked; made once ---
ROOT=$PWD/target/arm64-root
PKGS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libexpat1 zlib1g
    libgcc-s1 libffi8 libssl3 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libtinfo6
    libreadline8 libuuid1 libcrypt1 libnsl2 libtirpc3 libdb5.3 libgdbm6)
stamp="$ROOT/.m0s-packages"
if [ "$(cat "$stamp" 2>/dev/null)" != "${PKGS[*]}" ]; then
    rm -rf "$ROOT" target/arm64-debs
    mkdir -p "$ROOT" target/arm64-debs
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64 && apt-get update -qq || die "cannot add the arm64 architecture"
    fi
    (cd target/arm64-debs && apt-get download "${PKGS[@]/%/:arm64}" >/dev/null 2>&1) \
        || die "apt-get download of the arm64 packages failed"
    for deb in target/arm64-debs/*.deb; do
        dpkg -x "$deb" "$ROOT"
    done
    echo "${PKGS[*]}" >"$stamp"
fi
export QEMU_LD_PREFIX=$ROOT
PY=$ROOT/usr/bin/python3.11
machine=$("$PY" -c 'import platform; print(platform.machine())') || die "the aarch64 python does not run"
[ "$machine" = aarch64 ] || die "the emulated python says $machine"

# --- the wheel, installed for that interpreter ---
if [ -z "$DIST" ]; then
    DIST=target/aarch64-dist
    rm -rf "$DIST"
    host311=$(command -v python3.11 || true)
    [ -n "$host311" ] || die "no python3.11 on PATH to build the cp311 wheel with"
    rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
    scripts/wheels.sh --target aarch64-unknown-linux-gnu --python "$host311" --out "$DIST" \
        || die "the aarch64 wheel did not build"
fi
shopt -s nullglob
wheels=("$DIST"/m0serve_wsgi-*-cp311-cp311-*aarch64*.whl)
[ ${#wheels[@]} -eq 1 ] || die "no single cp311 aarch64 wheel in $DIST"
wheel=${wheels[0]}
AUDIT=target/release-venv
[ -x "$AUDIT/bin/auditwheel" ] || {
    [ -x "$AUDIT/bin/python" ] || python3 -m venv "$AUDIT"
    "$AUDIT/bin/python" -m pip install --quiet auditwheel || die "pip could not install auditwheel"
}
"$AUDIT/bin/auditwheel" show "$wheel" | tr -s ' \n' ' ' \
    | grep -q 'consistent with the following platform tag: "manylinux_2_17_aarch64"' \
    || die "$wheel: auditwheel does not find it consistent with manylinux_2_17_aarch64"
SITE=$(mktemp -d /tmp/m0s-aarch64-XXXXXX)
trap 'rm -rf "$SITE"' EXIT
# pip on the host installs it for the emulated interpreter (its platform and version).
"$AUDIT/bin/python" -m pip install --quiet --no-index --find-links "$DIST" --only-binary=:all: \
    --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp \
    --target "$SITE/lib" m0serve-wsgi || die "pip could not install $wheel for aarch64 cp311"
cat >"$SITE/echo.py" <<'PY'
def app(environ, start_response):
    body = environ["wsgi.input"].read() if environ["REQUEST_METHOD"] == "POST" else b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
PY

# --- it serves, emulated; the host is the client ---
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PYTHONPATH=$SITE/lib "$PY" -m m0serve echo:app --app-dir "$SITE" --port "$port" \
    >"$SITE/server.log" 2>&1 &
pid=$!
python3 - "$port" <<'PY' || { cat "$SITE/server.log" >&2; kill "$pid" 2>/dev/null; die "the emulated server did not answer as it should"; }
import http.client, sys, time
port = int(sys.argv[1])
deadline = time.time() + 120
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/")
        r = c.getresponse()
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.5)
assert (r.status, r.read()) == (200, b"hello"), r.status
for _ in range(3):  # the same connection, kept alive
    c.request("GET", "/again")
    r = c.getresponse()
    assert (r.status, r.read()) == (200, b"hello")
body = bytes(range(256)) * 64
c.putrequest("POST", "/echo")
c.putheader("Transfer-Encoding", "chunked")
c.endheaders()
for i in range(0, len(body), 1000):
    part = body[i:i + 1000]
    c.send(b"%x\r\n%s\r\n" % (len(part), part))
c.send(b"0\r\n\r\n")
r = c.getresponse()
assert (r.status, r.read()) == (200, body), "the chunked upload did not come back whole"
print("scripts/aarch64-check.sh: served 4 requests on one connection and echoed a chunked upload")
PY
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 0 ] || { cat "$SITE/server.log" >&2; die "the emulated server exited $status after SIGTERM"; }
grep -q "Python 3.11" "$SITE/server.log" || die "the server's log does not name its Python"
echo "scripts/aarch64-check.sh: $(basename "$wheel") audited, installed for aarch64 CPython 3.11, served under emulation, stopped cleanly"
