#!/usr/bin/env bash
# The project's Dockerfile, built and run for real with podman (no container registry is
# reachable here: the base image is Debian 12 with python3 and python3-venv, made with
# debootstrap from Debian's mirror and imported once):
#   serves    a request over a published port is answered;
#   logs      the app's prints arrive on the container's output, one line each, in order;
#   reaps     an orphan the app leaves (a grandchild that outlives its parent) is reaped by
#             m0serve, PID 1: no zombie is left;
#   stops     `podman stop` (SIGTERM) drains and exits 0 well within the grace;
#   --user    `--user nobody` inside the container serves, the app running as nobody.
#
#   scripts/container-check.sh [--dist DIR]     (DIR: the wheels; default target/wheels)
#
# As root on Debian it installs what is missing (podman, runc, debootstrap) with apt-get.
# podman runs with a configuration of its own (target/containers.conf: runc, cgroupfs, no
# default ulimits), not the machine's.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "scripts/container-check.sh: $*" >&2
    exit 1
}

DIST=target/wheels
while [ $# -gt 0 ]; do
    case "$1" in
    --dist) DIST=$2; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done

want=()
command -v podman >/dev/null 2>&1 || want+=(podman)
command -v runc >/dev/null 2>&1 || want+=(runc)
command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
if [ ${#want[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || die "needs ${want[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" \
        >/dev/null) || die "apt-get could not install ${want[*]}"
fi
mkdir -p target
export CONTAINERS_CONF=$PWD/target/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF

# --- the base image: Debian 12, its python3 (3.11) and venv module ---
BASE=localhost/m0serve-ci-base:bookworm
if ! podman image exists "$BASE"; then
    root=target/bookworm-root
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" \
        http://deb.debian.org/debian >target/debootstrap.log 2>&1 \
        || die "debootstrap failed (target/debootstrap.log)"
    tar -C "$root" -c . | podman import - "$BASE" >/dev/null || die "podman import failed"
    rm -rf "$root"
fi

# --- the image, from the repository's Dockerfile and the cp311 wheel ---
shopt -s nullglob
wheel=("$DIST"/m0serve_wsgi-*-cp311-cp311-*_x86_64.whl)
[ ${#wheel[@]} -eq 1 ] || die "no single cp311 x86_64 wheel in $DIST (the base's Python is 3.11)"
CTX=$(mktemp -d /tmp/m0s-container-XXXXXX)
NAME=m0s-check-$$
cleanup() {
    podman rm -f "$NAME" "$NAME-user" >/dev/null 2>&1 || true
    rm -rf "$CTX"
}
trap cleanup EXIT
mkdir -p "$CTX/dist"
cp "${wheel[0]}" "$CTX/dist/"
cp Dockerfile "$CTX/"
cp -r examples "$CTX/examples"
cat >"$CTX/examples/check.py" <<'PY'
"""For scripts/container-check.sh: answers the user id it runs as, prints a line a request,
and on /orphan leaves a grandchild that outlives its parent (PID 1 must reap it)."""
import os
import time


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/orphan":
        child = os.fork()
        if child == 0:
            if os.fork() == 0:
                time.sleep(0.3)
                os._exit(0)
            os._exit(0)
        os.waitpid(child, 0)
    print(f"check: served {path}")
    body = f"uid={os.getuid()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
PY
IMAGE=localhost/m0serve-ci-check
podman build -q --build-arg BASE_IMAGE="$BASE" -t "$IMAGE" "$CTX" >/dev/null \
    || die "podman build of the Dockerfile failed"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
get() { # PORT PATH: the body, waiting up to 30 s for the server
    local i
    for i in $(seq 1 120); do
        if out=$(python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$1$2', timeout=5).read().decode())" 2>/dev/null); then
            echo "$out"
            return 0
        fi
        sleep 0.25
    done
    return 1
}

# --- serves, logs, reaps, stops ---
port=$(free_port)
podman run -d --name "$NAME" -p "127.0.0.1:$port:8000" "$IMAGE" check:app >/dev/null \
    || die "podman run failed"
[ "$(get "$port" /first)" = "uid=0" ] || die "the container did not serve (podman logs $NAME)"
[ "$(get "$port" /orphan)" = "uid=0" ] || die "/orphan was not served"
[ "$(get "$port" /last)" = "uid=0" ] || die "/last was not served"
sleep 1
zombies=$(podman exec "$NAME" sh -c 'cat /proc/[0-9]*/stat 2>/dev/null' | awk '$3 == "Z"' | wc -l)
[ "$zombies" -eq 0 ] || die "$zombies zombie process(es) left in the container: PID 1 did not reap"
lines=$(podman logs "$NAME" 2>&1 | grep '^check: served' | tr '\n' ' ')
[ "$lines" = "check: served /first check: served /orphan check: served /last " ] \
    || die "the app's lines did not arrive one by one, in order: '$lines'"
t0=$SECONDS
podman stop -t 20 "$NAME" >/dev/null || die "podman stop failed"
took=$((SECONDS - t0))
code=$(podman inspect "$NAME" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] || die "m0serve exited $code on podman stop"
[ "$took" -lt 15 ] || die "podman stop took $took s (the grace is 20 s)"
podman logs "$NAME" 2>&1 | grep -q 'stopping 1 worker(s) gracefully' || die "no graceful stop in the logs"
echo "scripts/container-check.sh: served, logged line by line, reaped, stopped with exit 0 in ${took} s"

# --- --user inside the container ---
port=$(free_port)
podman run -d --name "$NAME-user" -p "127.0.0.1:$port:8000" "$IMAGE" check:app --user nobody \
    >/dev/null || die "podman run --user failed"
said=$(get "$port" /) || { podman logs "$NAME-user" >&2; die "the container with --user nobody did not serve"; }
[ "$said" = "uid=65534" ] || die "with --user nobody the app ran as $said"
echo "scripts/container-check.sh: --user nobody serves, the app running as uid 65534"
