"""Response heads made of the same objects again and again, and then of others: a handler
that remembers the last head by the identity of its status and header tuples must still
send each response's own head. The path picks the answer; every status and tuple below is
a constant of this module, so requests for the same path pass the very same objects."""

STATUS_OK = "200 OK"
CT = ("Content-Type", "text/plain")
LEN1 = ("Content-Length", "1")
LEN2 = ("Content-Length", "2")
XB = ("X-B", "b")
DATE = ("Date", "Thu, 01 Jan 2026 00:00:00 GMT")
SERVER = ("Server", "heads-app")
LEN0 = ("Content-Length", "0")


class Status(str):
    pass


SUBCLASSED = Status("200 OK")


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/a":
        start_response(STATUS_OK, [CT, LEN1])
        return [b"a"]
    if path == "/b":
        # The same status object, another list of tuples: a longer head.
        start_response(STATUS_OK, [CT, LEN2, XB])
        return [b"bb"]
    if path == "/a-short":
        # The first of /a's tuples only: the length comes from the server.
        start_response(STATUS_OK, [CT])
        return [b"a"]
    if path == "/reordered":
        start_response(STATUS_OK, [LEN1, CT])
        return [b"r"]
    if path == "/own-date":
        start_response(STATUS_OK, [CT, LEN1, DATE, SERVER])
        return [b"d"]
    if path == "/created":
        # /a's tuples under another status.
        start_response("201 Created", [CT, LEN1])
        return [b"c"]
    if path == "/no-content":
        # A Content-Length on a 204 is not sent (RFC 9110 8.6), however often it comes.
        start_response("204 No Content", [CT, LEN0])
        return []
    if path == "/subclass":
        start_response(SUBCLASSED, [CT, LEN1])
        return [b"s"]
    if path == "/built":
        # Equal strings, new objects every time.
        start_response(" ".join(["200", "OK"]), [("Content-" + "Type", "text/" + "plain"), LEN1])
        return [b"n"]
    if path == "/stream":
        # No Content-Length: chunked for HTTP/1.1, close-delimited for 1.0.
        start_response(STATUS_OK, [CT])
        return iter([b"x", b"y"])
    start_response("404 Not Found", [CT, LEN0])
    return []
