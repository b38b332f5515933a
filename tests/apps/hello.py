"""The smallest app: 200 "Hello, World!" with an app-provided Content-Length."""

BODY = b"Hello, World!"


def app(environ, start_response):
    start_response(
        "200 OK",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))],
    )
    return [BODY]
