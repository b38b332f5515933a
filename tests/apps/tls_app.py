"""For tests/tls.rs and tests/proxy_protocol.rs: what the server told the app about the connection, and bodies of a
given size in each way a response can be sent.

  /        JSON: wsgi.url_scheme, SSL_CLIENT_S_DN, REMOTE_ADDR, REMOTE_PORT, SERVER_PORT
  /big     ?n=BYTES, streamed in 64 KiB items (a generator)
  /file    ?n=BYTES, through wsgi.file_wrapper (sendfile(2) without TLS)
  /upload  the request body's length and SHA-256
"""

import hashlib
import json
import tempfile


def _n(environ):
    for part in environ.get("QUERY_STRING", "").split("&"):
        if part.startswith("n="):
            return int(part[2:])
    return 0


def _pattern(n):
    block = bytes(range(256)) * 256
    out = block * (n // len(block)) + block[: n % len(block)]
    return out


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/big":
        n = _n(environ)
        data = _pattern(n)
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return (data[i : i + 65536] for i in range(0, n, 65536))
    if path == "/file":
        n = _n(environ)
        f = tempfile.TemporaryFile()
        f.write(_pattern(n))
        f.seek(0)
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(n))])
        return environ["wsgi.file_wrapper"](f, 65536)
    if path == "/upload":
        body = environ["wsgi.input"].read()
        out = json.dumps({"len": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    else:
        out = json.dumps({
            "scheme": environ["wsgi.url_scheme"],
            "dn": environ.get("SSL_CLIENT_S_DN"),
            "remote_addr": environ.get("REMOTE_ADDR"),
            "remote_port": environ.get("REMOTE_PORT"),
            "server_port": environ.get("SERVER_PORT"),
        })
    body = out.encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]
