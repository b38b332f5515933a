#!/usr/bin/env bash
# The app's latency while the loop sends large static files: wrk's p50/p99 for the
# hello-world app on one m0serve worker (--static-map on), alone and then while DOWNLOADS
# clients fetch a 1 GiB file over and over (each at RATE, curl's --limit-rate; "0" is
# no limit). Loopback only; about 30 s.
#
#   scripts/static_p99.sh [DOWNLOADS] [RATE]        (default: 4 200M)
set -euo pipefail
cd "$(dirname "$0")/.."
downloads=${1:-4}
rate=${2:-200M}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir "$tmp/static"
truncate -s 1G "$tmp/static/huge.bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/m0serve hello:app --app-dir benches/apps --port "$port" --workers 1 \
    --static-map "/static=$tmp/static" --log-level warning &
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
# The file in the page cache, as a served static tree is.
cat "$tmp/static/huge.bin" >/dev/null
measure() {
    wrk -t1 -c16 -d10s --latency "http://127.0.0.1:$port/" |
        awk '/ 50%/{p50=$2} / 99%/{p99=$2} /Requests\/sec/{rps=$2} END{print "p50 " p50 ", p99 " p99 ", " rps " req/s"}'
}
echo "alone: $(measure)"
limit=()
[ "$rate" != "0" ] && limit=(--limit-rate "$rate")
for _ in $(seq "$downloads"); do
    (while true; do curl -s "${limit[@]}" -o /dev/null "http://127.0.0.1:$port/static/huge.bin" || break; done) &
done
sleep 1
echo "with $downloads download(s) at ${rate}/s each: $(measure)"
