#!/usr/bin/env bash
# The app's latency while large static files are sent: wrk's p50/p99 for the hello-world
# app on one m0serve worker (--static-map on), alone; then while DOWNLOADS clients fetch
# a 1 GiB file over and over (each at RATE, curl's --limit-rate) from the same m0serve
# (its loop sends them); then, as the control, the same downloads from nginx (another
# process: what the machine's CPUs alone do to the app's latency). Loopback only; about
# 40 s; needs wrk, curl and nginx.
#
#   scripts/static_p99.sh [DOWNLOADS] [RATE]        (default: 4 200M)
set -euo pipefail
cd "$(dirname "$0")/.."
downloads=${1:-4}
rate=${2:-200M}
tmp=$(mktemp -d)
chmod 755 "$tmp"
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    [ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/static"
truncate -s 1G "$tmp/static/huge.bin"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
nport=$(free_port)
target/release/m0serve hello:app --app-dir benches/apps --port "$port" --workers 1 \
    --static-map "/static=$tmp/static" --log-level warning &
cat >"$tmp/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off; sendfile on; tcp_nopush on;
    client_body_temp_path $tmp/b; proxy_temp_path $tmp/p; fastcgi_temp_path $tmp/f;
    uwsgi_temp_path $tmp/u; scgi_temp_path $tmp/s;
    server { listen 127.0.0.1:$nport; location /static/ { alias $tmp/static/; } }
}
NGINX
nginx -c "$tmp/nginx.conf" -p "$tmp" &
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
# The file in the page cache, as a served static tree is.
cat "$tmp/static/huge.bin" >/dev/null
measure() {
    wrk -t1 -c16 -d8s --latency "http://127.0.0.1:$port/" |
        awk '/ 50%/{p50=$2} / 99%/{p99=$2} /Requests\/sec/{rps=$2} END{print "p50 " p50 ", p99 " p99 ", " rps " req/s"}'
}
downloading() {
    local from=$1 pids=()
    for _ in $(seq "$downloads"); do
        (while true; do curl -s --limit-rate "$rate" -o /dev/null "http://127.0.0.1:$from/static/huge.bin" || break; done) &
        pids+=($!)
    done
    sleep 1
    measure
    kill "${pids[@]}" 2>/dev/null || true
    pkill -f "limit-rate $rate" 2>/dev/null || true
    sleep 1
}
echo "app alone:                                      $(measure)"
echo "$downloads download(s) at $rate/s from m0serve's loop: $(downloading "$port")"
echo "$downloads download(s) at $rate/s from nginx (control): $(downloading "$nport")"
