"""For tests/workers.rs: installs its own SIGTERM handler (one that ignores it) when
imported, and on /install sets SIGTERM to ignored from the handler thread, through libc
(Python's signal.signal works only on the main thread); answers with the worker's pid."""

import ctypes
import os
import signal


def _ignore(signum, frame):
    pass


signal.signal(signal.SIGTERM, _ignore)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/install":
        libc = ctypes.CDLL(None)
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(int(signal.SIGTERM), ctypes.c_void_p(1))  # SIG_IGN
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
