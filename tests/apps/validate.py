"""An ordinary app wrapped in wsgiref.validate.validator.

The validator raises AssertionError (and warns WSGIWarning) whenever the server
or the app breaks PEP 3333: environ key types, wsgi.input/wsgi.errors methods,
start_response and write() use, iteration after close, and close() never being
called (reported from __del__ as "Exception ignored in ...").
"""

from wsgiref.validate import validator


def _inner(environ, start_response):
    path = environ["PATH_INFO"]
    method = environ["REQUEST_METHOD"]
    inp = environ["wsgi.input"]
    body = b""
    if method in ("POST", "PUT"):
        # The validator's input wrapper only allows read() with one argument.
        while True:
            c = inp.read(4096)
            if not c:
                break
            body += c
    if path == "/readline":
        lines = []
        while True:
            line = inp.readline()
            if not line:
                break
            lines.append(line)
        body += b"".join(lines)
    out = b"method=" + method.encode("latin-1") + b" path=" + path.encode("latin-1")
    out += b" body=" + body
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "text/plain")])

        def gen():
            yield b"gen:"
            yield out
        return gen()
    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"write:")
        return [out]
    if path == "/empty":
        start_response("204 No Content", [])
        return []
    if path == "/errors":
        environ["wsgi.errors"].write("m0test validate wsgi.errors line\n")
        environ["wsgi.errors"].flush()
    start_response(
        "200 OK",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))],
    )
    return [out]


app = validator(_inner)
