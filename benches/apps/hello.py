"""Hello world, the same app for every server measured."""

BODY = b"Hello, World!"


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [BODY]
