"""The servers: their specs (`m0serve@PATH:workers=2`), command lines and environment, the
virtualenv the peers come from, and starting, checking and stopping one."""

import http.client
import os
import signal
import socket
import subprocess
import sys
import time

from . import config
from .config import APPS, DISPLAY, PIP, ROOT, VENV, VENV_BIN
from .host import tree


# Overrides that take a value (SERVER:key=value); the m0serve-only ones are passed as the
# flag of that name.
VALUE_OVERRIDES = ("workers", "blocking-threads", "pin")
M0SERVE_VALUE_OVERRIDES = ("cpu-affinity", "scheduling-policy", "idle-poll")


def opt_key(k):
    """An override's key as the flag spells it: `--blocking_threads` -> `blocking-threads`."""
    return k.lstrip("-").replace("_", "-")


def parse_server(spec):
    """'m0serve@PATH:workers=2' -> {'spec', 'kind', 'binary', 'opts'}."""
    base, _, opts = spec.partition(":")
    kind, _, binary = base.partition("@")
    if kind not in DISPLAY:
        raise SystemExit(f"unknown server {kind!r} in {spec!r} (m0serve, m0serve@PATH, "
                         "granian, bjoern, gunicorn, fastwsgi, uwsgi)")
    if binary and kind != "m0serve":
        raise SystemExit(f"{spec}: only m0serve takes @PATH")
    overrides = {}
    for kv in filter(None, opts.split(",")):
        k, sep, v = kv.partition("=")
        k = opt_key(k)
        if k in ("static-response", "metrics", "preload") and not sep and kind == "m0serve":
            # static-response: the loop's ceiling (it answers itself, no Python per
            # request); metrics: --metrics-port on, to measure what counting costs;
            # preload: workers forked from one import.
            overrides[k] = True
            continue
        if sep and k in M0SERVE_VALUE_OVERRIDES and kind == "m0serve":
            # --cpu-affinity (auto, or one CPU: a list's commas would split the server
            # list), --scheduling-policy (normal), --idle-poll (microseconds)
            overrides[k] = v
            continue
        if not sep or k not in VALUE_OVERRIDES:
            raise SystemExit(f"{spec}: overrides are workers=N, blocking-threads=N, pin=CPU "
                             "and (m0serve) static-response, metrics, preload, cpu-affinity=V, "
                             "scheduling-policy=V, idle-poll=MICROSECONDS")
        overrides[k] = int(v)
    # A relative PATH is the caller's: each server runs in a directory of its own.
    binary = os.path.abspath(binary) if binary else None
    return {"spec": spec, "kind": kind, "binary": binary, "opts": overrides}


def split_servers(text):
    """Commas separate servers, except inside a server's ':opt=v,opt=v' list."""
    out = []
    for part in text.split(","):
        if out and "=" in part and ":" not in part and "@" not in part \
                and opt_key(part.split("=")[0]) in VALUE_OVERRIDES + M0SERVE_VALUE_OVERRIDES:
            out[-1] += "," + part
        else:
            out.append(part)
    return [p for p in out if p]


def server_cmd(srv, port, app, workers, threads):
    workers = srv["opts"].get("workers", workers)
    threads = srv["opts"].get("blocking-threads", threads)
    if srv["kind"] == "m0serve":
        binary = srv["binary"] or os.path.join(ROOT, "target", "release", "m0serve")
        extra = ["--static-response"] if srv["opts"].get("static-response") else []
        if srv["opts"].get("metrics"):
            extra += ["--metrics-port", str(free_port())]
        if srv["opts"].get("preload"):
            extra.append("--preload")
        for opt in M0SERVE_VALUE_OVERRIDES:
            if srv["opts"].get(opt):
                extra += [f"--{opt}", srv["opts"][opt]]
        if config.TLS:
            extra += ["--certfile", config.TLS[0], "--keyfile", config.TLS[1]]
        return [binary, f"{app}:app",
                "--app-dir", APPS, "--port", str(port), "--workers", str(workers),
                "--blocking-threads", str(threads), "--log-level", "warning"] + extra
    if srv["kind"] == "granian":
        tls = ["--ssl-certificate", config.TLS[0], "--ssl-keyfile", config.TLS[1]] if config.TLS else []
        return [os.path.join(VENV_BIN, "granian"), "--interface", "wsgi",
                "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                "--blocking-threads", str(threads), "--no-ws", "--log-level", "warning"] \
            + tls + [f"{app}:app"]
    if srv["kind"] == "gunicorn":
        # The threaded worker: `threads` app threads per process, like --blocking-threads.
        return [os.path.join(VENV_BIN, "gunicorn"), "--chdir", APPS,
                "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                "--worker-class", "gthread", "--threads", str(max(threads, 1)),
                "--log-level", "warning", f"{app}:app"]
    if srv["kind"] == "fastwsgi":
        return [os.path.join(VENV_BIN, "python"),
                os.path.join(ROOT, "benches", "run_fastwsgi.py"), app, "127.0.0.1", str(port)]
    if srv["kind"] == "uwsgi":
        # Its native HTTP/1.1 keep-alive socket, no master, `threads` app threads.
        return [os.path.join(VENV_BIN, "uwsgi"), "--http11-socket", f"127.0.0.1:{port}",
                "--module", f"{app}:app", "--pythonpath", APPS,
                "--processes", str(workers), "--threads", str(max(threads, 1)),
                "--disable-logging", "--die-on-term", "--need-app", "--lazy-apps"]
    if srv["kind"] == "bjoern":
        return [os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "benches", "run_bjoern.py"),
                app, "127.0.0.1", str(port)]
    raise AssertionError(srv)


def server_env():
    env = dict(os.environ)
    if os.path.exists(os.path.join(VENV_BIN, "python")):
        # m0serve embeds CPython: with VIRTUAL_ENV it uses the venv's site-packages (Flask).
        env["VIRTUAL_ENV"] = VENV
    env.pop("PYTHONPATH", None)
    return env


def venv_has(module):
    if module in ("granian", "gunicorn", "uwsgi"):
        return os.access(os.path.join(VENV_BIN, module), os.X_OK)
    py = os.path.join(VENV_BIN, "python")
    return os.path.exists(py) and subprocess.run(
        [py, "-c", f"import {module}"], capture_output=True).returncode == 0


def ensure_venv(modules):
    """Installs what is missing of `modules` into .venv; returns the modules still missing."""
    missing = [m for m in modules if not venv_has(m)]
    if not missing:
        return []
    if not os.path.exists(os.path.join(VENV_BIN, "python")):
        print(f"creating {VENV} ({sys.executable} -m venv)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    for m in missing:  # one at a time, so that one failure does not block the others
        print(f"installing {PIP[m]} into {VENV}", flush=True)
        r = subprocess.run([os.path.join(VENV_BIN, "pip"), "install", "--quiet", PIP[m]])
        if r.returncode != 0:
            print(f"  pip install {PIP[m]} failed (exit {r.returncode})", flush=True)
    return [m for m in missing if not venv_has(m)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(srv, app, args, errlog):
    """Starts one server on a free port; returns (process, port, command)."""
    port = free_port()
    cmd = server_cmd(srv, port, app, args.workers, args.blocking_threads)
    if config.PIN or "pin" in srv["opts"]:
        # taskset executes the server in its own process, so the pid sampled is the server's.
        cmd = ["taskset", "-c", str(srv["opts"].get("pin", config.PIN and config.PIN[0]))] + cmd
    try:
        proc = subprocess.Popen(cmd, cwd=APPS, env=server_env(), stdout=subprocess.DEVNULL,
                                stderr=errlog)
    except OSError as e:
        raise RuntimeError(f"cannot start {cmd[0]}: {e}") from None
    return proc, port, cmd


def wait_ready(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def check_response(port, scen, timeout=30):
    """One request by hand: the server answers this scenario's request correctly."""
    if config.TLS:
        import ssl
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                           context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if scen.get("post_bytes"):
            conn.request("POST", "/", body=b"x" * scen["post_bytes"],
                         headers={"Content-Type": "application/octet-stream"})
        else:
            conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"check request: status {resp.status}: {body[:200]!r}")
    if "body_len" in scen and len(body) != scen["body_len"]:
        raise RuntimeError(f"check request: body of {len(body)} bytes, "
                           f"expected {scen['body_len']}")
    if "body_contains" in scen and scen["body_contains"] not in body:
        raise RuntimeError(f"check request: unexpected body {body[:200]!r}")


def with_stderr(err, errlog):
    """`err` as a RuntimeError that quotes the end of the server's stderr."""
    errlog.seek(0)
    tail = errlog.read()[-1500:].decode(errors="replace").strip()
    return RuntimeError(f"{err}" + (f"\n  server stderr: {tail}" if tail else ""))


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            print(f"  pid {proc.pid} ignored SIGINT for 10 s: killed", flush=True)
            for p in reversed(tree(proc.pid)):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()
