"""For scripts/overload.py: each request computes for `?MS` milliseconds of this thread's
CPU time (10 by default), the shape of a view that renders, holding the GIL; `/sleep?MS`
waits instead, the shape of one that waits on a database."""

import time


def app(environ, start_response):
    ms = float(environ.get("QUERY_STRING") or "10")
    if environ["PATH_INFO"] == "/sleep":
        time.sleep(ms / 1000)
    else:
        until = time.thread_time() + ms / 1000
        while time.thread_time() < until:
            pass
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
    return [b"ok\n"]
