"""For scripts/reload_under_load.py: hello world that appends one byte per request to the
file named by M0BENCH_COUNT_FILE (every worker appends to the same file), so the file's size
is how many times the app ran."""

import os

FD = os.open(os.environ["M0BENCH_COUNT_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
HELLO = b"Hello, World!"


def app(environ, start_response):
    os.write(FD, b"x")
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(HELLO)))])
    return [HELLO]
