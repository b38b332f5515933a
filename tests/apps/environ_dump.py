"""For tests/parity.rs: answers JSON with the request's environ, its text values (the
CGI variables, the headers, wsgi.url_scheme), to compare servers."""

import json


def app(environ, start_response):
    body = json.dumps(
        {k: v for k, v in environ.items() if isinstance(v, str)}, sort_keys=True
    ).encode()
    start_response(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]
