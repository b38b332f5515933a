"""The smallest WSGI app: `m0serve hello:app --app-dir examples`."""


def app(environ, start_response):
    body = b"Hello, World!\n"
    start_response(
        "200 OK",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [body]
