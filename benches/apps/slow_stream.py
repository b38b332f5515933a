"""For scripts/slow_readers.py: `/` is hello world; `/stream` is a 200 MiB body streamed
as 64 KiB items (an iterable the server cannot measure), for clients that read it slowly
or not at all. Each item is a new bytes object, as an app producing data makes, so what a
server holds for a slow reader shows in its memory."""

CHUNK = b"x" * 65536
HELLO = b"Hello, World!"


def app(environ, start_response):
    if environ["PATH_INFO"] == "/stream":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return (bytes(bytearray(CHUNK)) for _ in range(3200))
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(HELLO)))])
    return [HELLO]
