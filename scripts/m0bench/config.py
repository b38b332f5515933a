"""What every part of the package reads: the tree's paths, the peers' virtualenv, the
scenarios, the servers' names, and the run's settings that the command line sets once
(`config.TLS`, `config.PIN`, `config.TRACE`, `config.CLIENTS`: read them through the
module, as they are set after import)."""

import os

# The repository: this file is scripts/m0bench/config.py.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APPS = os.path.join(ROOT, "benches", "apps")
# M0BENCH_VENV: another virtual environment for the peers (and m0serve's VIRTUAL_ENV).
VENV = os.path.abspath(os.environ.get("M0BENCH_VENV") or os.path.join(ROOT, ".venv"))
VENV_BIN = os.path.join(VENV, "bin")
TICK = os.sysconf("SC_CLK_TCK")
HEADERS = [
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Encoding: gzip, deflate, br",
    "Accept-Language: en-US,en;q=0.5",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Connection: keep-alive",
]
MIB = 1 << 20
# --tls: (certfile, keyfile) every server is given, and the clients speak HTTPS.
TLS = None
# --pin: (the servers' CPU list, the client's), as `taskset -c` takes them.
PIN = None
# --trace-others: perf records the machine's context switches over each run at a rate.
TRACE = False
# --clients: how many m0load processes share a saturation run's connections.
CLIENTS = 1

# name -> app module in benches/apps, what is sent, what must come back.
SCENARIOS = {
    "hello": {"app": "hello", "title": "hello world (13-byte body)",
              "body_len": 13},
    "64k": {"app": "body64k", "title": "64 KiB response body",
            "body_len": 65536},
    "post1m": {"app": "echo", "title": "1 MiB POST echoed back",
               "post_bytes": MIB, "body_len": MIB},
    "flask": {"app": "flask_app", "title": "small Flask app (jsonify)",
              "body_contains": b"Hello, World!", "needs": ["flask"]},
}
DISPLAY = {"m0serve": "m0serve", "granian": "Granian", "bjoern": "bjoern",
           "gunicorn": "gunicorn", "fastwsgi": "FastWSGI", "uwsgi": "uWSGI"}
# Which pip package gives each importable module or console script in .venv.
PIP = {"granian": "granian", "bjoern": "bjoern-binary", "flask": "flask",
       "gunicorn": "gunicorn", "fastwsgi": "fastwsgi", "uwsgi": "pyuwsgi"}
