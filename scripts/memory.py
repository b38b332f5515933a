#!/usr/bin/env python3
"""Memory and start-up of a Django site with 1, 4 and 8 workers, side by side:
m0serve with and without --preload, gunicorn (gthread, one thread) with and without
--preload, and Granian.

For each server and worker count, in one run on this machine:
  ready_s   seconds from the server's start until every worker has answered (the site's
            /pid view answers its process id; connections are spread by the kernel);
  pss_mib   the proportional set size summed over every process of the server (master,
            preloader, workers), from /proc/PID/smaps_rollup, after each worker has served
            requests (so the pages a worker writes to are its own by then).

The site is benches/apps/django_site (the admin, auth, sessions, messages and static files
installed: what `startproject` gives). Every server runs the same interpreter and
packages: a virtualenv with Django, gunicorn and Granian (--venv; made with
`python3 -m venv V && V/bin/pip install django gunicorn granian`).

    scripts/memory.py --venv target/mem-venv --binary target/release/m0serve --json out.json
"""

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m0bench.config import ROOT  # noqa: E402
from m0bench.host import tree  # noqa: E402
from m0bench.servers import free_port  # noqa: E402
APPS = os.path.join(ROOT, "benches", "apps")
APP = "django_site.wsgi:application"


def command(kind, binary, venv, port, workers):
    bin_ = os.path.join(venv, "bin")
    if kind.startswith("m0serve"):
        cmd = [binary, APP, "--venv", venv, "--app-dir", APPS, "--port", str(port),
               "--workers", str(workers)]
        return cmd + (["--preload"] if kind.endswith("--preload") else [])
    if kind.startswith("gunicorn"):
        cmd = [os.path.join(bin_, "gunicorn"), APP, "--chdir", APPS, "-b", f"127.0.0.1:{port}",
               "-w", str(workers), "-k", "gthread", "--threads", "1"]
        return cmd + (["--preload"] if kind.endswith("--preload") else [])
    if kind == "granian":
        return [os.path.join(bin_, "granian"), "--interface", "wsgi", "--workers", str(workers),
                "--blocking-threads", "1", "--host", "127.0.0.1", "--port", str(port),
                "--working-dir", APPS, APP]
    raise SystemExit(f"unknown server {kind}")


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path, headers={"Host": "localhost", "Connection": "close"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def answering(port, workers, deadline):
    """Distinct pids answering /pid, until `workers` of them or the deadline."""
    seen = set()
    while len(seen) < workers and time.monotonic() < deadline:
        results = []

        def one():
            try:
                status, body = get(port, "/pid")
                if status == 200:
                    results.append(int(body))
            except (OSError, ValueError, http.client.HTTPException):
                time.sleep(0.01)

        threads = [threading.Thread(target=one) for _ in range(2 * workers + 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seen.update(results)
    return seen


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(kind, binary, venv, workers):
    port = free_port()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="django_site.settings",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("VIRTUAL_ENV", None)
    cmd = command(kind, binary, venv, port, workers)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=APPS, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        seen = answering(port, workers, t0 + 120)
        ready = time.monotonic() - t0
        if len(seen) < workers:
            proc.kill()
            return {"server": kind, "workers": workers,
                    "error": f"{len(seen)} of {workers} answered: "
                             + proc.stderr.read().decode()[-2000:]}
        # Each worker serves the page many times over (the kernel spreads connections).
        def load():
            for _ in range(60):
                get(port, "/")
        threads = [threading.Thread(target=load) for _ in range(2 * workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1)
        pids = tree(proc.pid)
        pss = sum(pss_kib(p) for p in pids)
        return {"server": kind, "workers": workers, "ready_s": round(ready, 3),
                "pss_mib": round(pss / 1024, 1), "processes": len(pids)}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", required=True, help="a virtualenv with django, gunicorn, granian")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "m0serve"))
    ap.add_argument("--servers",
                    default="m0serve,m0serve --preload,gunicorn,gunicorn --preload,granian")
    ap.add_argument("--workers", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every pair; the median of each figure is reported")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    venv = os.path.abspath(args.venv)
    servers = [s.strip() for s in args.servers.split(",")]
    counts = [int(w) for w in args.workers.split(",")]
    runs = {}
    for _ in range(args.rounds):
        for w in counts:
            for s in servers:
                r = measure(s, args.binary, venv, w)
                runs.setdefault((s, w), []).append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    results = []
    for (s, w), rs in runs.items():
        good = [r for r in rs if "error" not in r]
        if not good:
            results.append(rs[0])
            continue
        med = lambda k: sorted(r[k] for r in good)[len(good) // 2]
        results.append({"server": s, "workers": w, "ready_s": med("ready_s"),
                        "pss_mib": med("pss_mib"), "processes": good[0]["processes"],
                        "rounds": len(good)})
    print(f"\n{'server':<20} " + " ".join(f"{w:>3} workers: MiB, s to ready" for w in counts))
    for s in servers:
        cells = []
        for w in counts:
            r = next(r for r in results if r["server"] == s and r["workers"] == w)
            cells.append("error" if "error" in r else f"{r['pss_mib']:>10.1f} {r['ready_s']:>12.2f}")
        print(f"{s:<20} " + " ".join(f"{c:>26}" for c in cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "python": sys.version.split()[0],
                       "cpus": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()
