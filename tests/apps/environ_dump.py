"""For tests/parity.rs: answers JSON with the request's environ, its text values (the
CGI variables, the headers, wsgi.url_scheme), and the process's M0TEST_* variables (as
`os.NAME`; M0SERVE_GUNICORN* too, which the app should never see), to compare servers."""

import json
import os


def app(environ, start_response):
    out = {k: v for k, v in environ.items() if isinstance(v, str)}
    out.update(
        {
            "os." + k: v
            for k, v in os.environ.items()
            if k.startswith(("M0TEST_", "M0SERVE_GUNICORN"))
        }
    )
    body = json.dumps(out, sort_keys=True).encode()
    start_response(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]
