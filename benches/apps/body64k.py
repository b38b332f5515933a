"""A 64 KiB response body, returned as a one-item list (the write path)."""

BODY = b"x" * 65536


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(len(BODY)))])
    return [BODY]
