"""What a worker forked from a preloader can tell about itself (tests/preload.rs): the
process that imported the app, its own pid and parent's, what gc.freeze() left frozen,
the pid the app's os.register_at_fork hook saw, and a number from `random` (reseeded in
each worker by Python's own after-fork hook).

The import appends a line to the file named by PRELOAD_PROBE_LOG, so a test counts the
imports; VERSION is what a reload test rewrites."""

import gc
import json
import os
import random

VERSION = "v1"
IMPORTED_BY = os.getpid()
_forked_into = []

os.register_at_fork(after_in_child=lambda: _forked_into.append(os.getpid()))

_log = os.environ.get("PRELOAD_PROBE_LOG")
if _log:
    with open(_log, "a") as f:
        f.write(f"{IMPORTED_BY}\n")


def app(environ, start_response):
    if environ["PATH_INFO"] == "/version":
        body = VERSION.encode()
    else:
        body = json.dumps(
            {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "imported_by": IMPORTED_BY,
                "frozen": gc.get_freeze_count(),
                "forked_into": _forked_into,
                "random": random.random(),
                "version": VERSION,
            }
        ).encode()
    start_response(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]
