"""For tests/logs.rs: `/print` prints a numbered line to stdout without flushing it,
`/raise` raises (its traceback goes to the error log), anything else says hello."""

import itertools

_count = itertools.count(1)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/print":
        n = next(_count)
        print(f"m0test-print-{n}")
        body = str(n).encode()
    elif path == "/raise":
        raise RuntimeError("m0test-raised")
    else:
        body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
