"""For tests/pool.rs: requests that wait (`/sleep?SECS`) or compute (`/burn?SECS` of
this thread's CPU time), each counted while it runs; `/max` answers the most that ran at
once since the last `/max`, and starts counting again; `/ran` how many ran in all."""

import threading
import time

_lock = threading.Lock()
_running = 0
_most = 0
_ran = 0


def _enter():
    global _running, _most, _ran
    with _lock:
        _running += 1
        _ran += 1
        _most = max(_most, _running)


def _leave():
    global _running
    with _lock:
        _running -= 1


def app(environ, start_response):
    global _most
    path, arg = environ["PATH_INFO"], environ.get("QUERY_STRING") or "0"
    if path == "/max":
        with _lock:
            body, _most = str(_most).encode(), _running
    elif path == "/ran":
        with _lock:
            body = str(_ran).encode()
    else:
        _enter()
        try:
            if path == "/sleep":
                time.sleep(float(arg))
            elif path == "/burn":
                until = time.thread_time() + float(arg)
                while time.thread_time() < until:
                    pass
        finally:
            _leave()
        body = b"ok"
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]
