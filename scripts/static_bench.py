#!/usr/bin/env python3
"""Static files side by side: nginx (one worker, sendfile, open_file_cache) against
m0serve --workers 1 --static-map, Granian's --static-path-mount, and WhiteNoise in the app
under m0serve and under gunicorn; wrk at each connection count, for a 4 KiB file, a
100 KiB file, and a 304 revalidation of the 4 KiB one (If-None-Match with the server's
own ETag).

Each server runs alone while wrk (one thread) loads it; the rounds alternate the servers.
Reported per run: requests a second, the server's CPU (every process of it, from
/proc/PID/stat) and requests a second per core of it, the ratio of which to nginx's is
the figure docs/operations.md quotes.

    scripts/static_bench.py --venv target/mem-venv --json out.json
    (the virtualenv: granian, gunicorn, whitenoise; nginx and wrk from Debian)
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m0bench.config import ROOT, TICK  # noqa: E402
from m0bench.host import tree  # noqa: E402
from m0bench.servers import free_port  # noqa: E402

WHITENOISE_APP = '''
import os
from whitenoise import WhiteNoise

def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]

app = WhiteNoise(hello, root=os.environ["STATIC_DIR"], prefix="static/", max_age=60)
'''

HELLO_APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]
'''

NGINX_CONF = '''
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /static/ {{ alias {static}/; expires 60s; }}
    }}
}}
'''


def start(kind, port, tmp, static, venv, binary):
    env = dict(os.environ, STATIC_DIR=static, PYTHONDONTWRITEBYTECODE="1")
    env.pop("VIRTUAL_ENV", None)
    bin_ = os.path.join(venv, "bin")
    if kind == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(tmp=tmp, port=port, static=static))
        cmd = ["nginx", "-c", conf, "-p", tmp]
    elif kind == "m0serve":
        cmd = [binary, "hello_app:app", "--app-dir", tmp, "--venv", venv, "--port", str(port),
               "--workers", "1", "--static-map", f"/static={static}"]
    elif kind == "m0serve+whitenoise":
        cmd = [binary, "wn_app:app", "--app-dir", tmp, "--venv", venv, "--port", str(port),
               "--workers", "1"]
    elif kind == "gunicorn+whitenoise":
        cmd = [os.path.join(bin_, "gunicorn"), "wn_app:app", "--chdir", tmp, "-b",
               f"127.0.0.1:{port}", "-w", "1", "-k", "gthread", "--threads", "1",
               "--keep-alive", "60"]
    elif kind == "granian":
        cmd = [os.path.join(bin_, "granian"), "--interface", "wsgi", "--workers", "1",
               "--blocking-threads", "1", "--host", "127.0.0.1", "--port", str(port),
               "--working-dir", tmp, "--static-path-mount", static, "hello_app:app"]
    else:
        raise SystemExit(f"unknown server {kind}")
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, f"{kind}.log"), "w"),
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/static/small.css", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit(f"{kind} did not start: {open(os.path.join(tmp, f'{kind}.log')).read()[-2000:]}")


def tree_cpu(root):
    """CPU seconds of `root` and every process under it."""
    total = 0.0
    for p in tree(root):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def wrk(port, path, conns, seconds, headers):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                         text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return rps, int(non2xx.group(1)) if non2xx else 0, errors.group(1) if errors else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", required=True)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "m0serve"))
    ap.add_argument("--servers",
                    default="nginx,m0serve,granian,m0serve+whitenoise,gunicorn+whitenoise")
    ap.add_argument("--connections", default="16,64,256")
    ap.add_argument("--scenarios", default="4k,100k,304")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (wrk takes whole seconds)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    venv = os.path.abspath(args.venv)
    tmp = tempfile.mkdtemp(prefix="m0static-")
    # nginx's worker runs as its own user: the files must be readable to it.
    os.chmod(tmp, 0o755)
    static = os.path.join(tmp, "static")
    os.makedirs(static)
    with open(os.path.join(static, "small.css"), "wb") as f:
        f.write((b"body { color: #123456; }\n" * 200)[:4096])
    with open(os.path.join(static, "big.js"), "wb") as f:
        f.write((b"var x = 1234567890; // m0serve static benchmark\n" * 3000)[:102400])
    with open(os.path.join(tmp, "hello_app.py"), "w") as f:
        f.write(HELLO_APP)
    with open(os.path.join(tmp, "wn_app.py"), "w") as f:
        f.write(WHITENOISE_APP)
    paths = {"4k": "/static/small.css", "100k": "/static/big.js", "304": "/static/small.css"}
    servers = args.servers.split(",")
    results = []
    for rnd in range(args.rounds):
        for kind in servers:
            port = free_port()
            proc = start(kind, port, tmp, static, venv, args.binary)
            try:
                for scen in args.scenarios.split(","):
                    headers = []
                    if scen == "304":
                        r = urllib.request.urlopen(f"http://127.0.0.1:{port}{paths[scen]}")
                        etag = r.headers.get("ETag")
                        if not etag:
                            results.append({"server": kind, "scenario": scen, "round": rnd,
                                            "error": "no ETag"})
                            continue
                        headers = [f"If-None-Match: {etag}"]
                    for conns in [int(c) for c in args.connections.split(",")]:
                        wrk(port, paths[scen], conns, 1, headers)
                        cpu0 = tree_cpu(proc.pid)
                        t0 = time.monotonic()
                        rps, non2xx, errors = wrk(port, paths[scen], conns, args.duration,
                                                  headers)
                        wall = time.monotonic() - t0
                        cores = (tree_cpu(proc.pid) - cpu0) / wall
                        r = {"server": kind, "scenario": scen, "connections": conns,
                             "round": rnd, "rps": rps, "server_cores": round(cores, 3),
                             "rps_per_core": round(rps / max(cores, 1e-6)),
                             "non_2xx_3xx": non2xx, "socket_errors": errors}
                        results.append(r)
                        print(json.dumps(r), file=sys.stderr, flush=True)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    # Medians over the rounds.
    table = {}
    for r in results:
        if "error" in r:
            continue
        table.setdefault((r["scenario"], r["connections"], r["server"]), []).append(r)
    med = lambda rs, k: sorted(x[k] for x in rs)[len(rs) // 2]
    print(f"\n{'scenario':<6} {'conns':>5} {'server':<22} {'req/s':>9} {'cores':>6} "
          f"{'req/s/core':>10} {'vs nginx/core':>13}")
    summary = []
    for scen in args.scenarios.split(","):
        for conns in [int(c) for c in args.connections.split(",")]:
            base = table.get((scen, conns, "nginx"))
            base_pc = med(base, "rps_per_core") if base else None
            for kind in servers:
                rs = table.get((scen, conns, kind))
                if not rs:
                    print(f"{scen:<6} {conns:>5} {kind:<22} {'n/a':>9}")
                    continue
                rps, cores, pc = med(rs, "rps"), med(rs, "server_cores"), med(rs, "rps_per_core")
                ratio = f"{pc / base_pc:.2f}" if base_pc else "-"
                print(f"{scen:<6} {conns:>5} {kind:<22} {rps:>9.0f} {cores:>6.2f} {pc:>10} "
                      f"{ratio:>13}")
                summary.append({"scenario": scen, "connections": conns, "server": kind,
                                "rps": rps, "server_cores": cores, "rps_per_core": pc,
                                "per_core_vs_nginx": round(pc / base_pc, 3) if base_pc else None})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "runs": results, "cpus": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()
