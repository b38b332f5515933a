"""PEP 3333 behaviours, one route per behaviour (dispatched on PATH_INFO).

Query parameters: `mark=PATH` names a file that routes append observations to
(one line each: "closed", "reraised ...", a chunk count, ...), so a test can see
what happened inside the app, e.g. that close() was called on every path.

`factory()` returns an app, for the `module:factory()` form of APP.
"""

import io
import os
import threading
import sys
import time
import weakref


def _query(environ):
    out = {}
    for part in environ.get("QUERY_STRING", "").split("&"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def _mark(q, text):
    path = q.get("mark")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text + "\n")


def _set_mark(q, text):
    path = q.get("mark")
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, path)


def text():
    """A fresh header list each time: servers (and wsgiref) may mutate the list they get."""
    return [("Content-Type", "text/plain")]


class Body:
    """An iterable body with a close() that records it was called.

    `fail_at=i` raises RuntimeError instead of producing chunk i."""

    def __init__(self, q, chunks, fail_at=None):
        self.q = q
        self.chunks = list(chunks)
        self.fail_at = fail_at
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i == self.fail_at:
            self.i += 1
            raise RuntimeError("m0test-boom-mid-iteration")
        if self.i >= len(self.chunks):
            raise StopIteration
        c = self.chunks[self.i]
        self.i += 1
        return c

    def close(self):
        _mark(self.q, "closed")


class Stream:
    """`n` chunks of `size` bytes; chunk i is filled with the byte (i % 251).

    After each chunk is produced the running count is written (replacing the
    file) to `count=PATH`, so a test can watch backpressure stop the iterator."""

    def __init__(self, q):
        self.q = q
        self.n = int(q.get("n", "16"))
        self.size = int(q.get("size", "65536"))
        self.delay = float(q.get("delay", "0"))
        self.count_path = q.get("count")
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        if self.delay:
            time.sleep(self.delay)
        c = bytes([self.i % 251]) * self.size
        self.i += 1
        if self.count_path:
            tmp = self.count_path + ".tmp"
            with open(tmp, "w") as f:
                f.write("%d\n" % self.i)
            os.replace(tmp, self.count_path)
        return c

    def close(self):
        _mark(self.q, "closed after %d" % self.i)


class MarkedFile(io.FileIO):
    """A real file (it has fileno(), so sendfile may be used) whose close() is recorded."""

    def __init__(self, path, q):
        super().__init__(path, "r")
        self.q = q

    def close(self):
        if not self.closed:
            _mark(self.q, "file closed")
        super().close()


class MarkedBytesIO(io.BytesIO):
    """A file-like object with no usable fileno(); close() is recorded."""

    def __init__(self, data, q):
        super().__init__(data)
        self.q = q

    def close(self):
        if not self.closed:
            _mark(self.q, "file closed")
        super().close()


def pattern(n):
    """n bytes of a pattern that shows misplaced or lost ranges."""
    return bytes((i * 7 + i // 256) % 256 for i in range(n))


def app(environ, start_response):
    path = environ["PATH_INFO"]
    q = _query(environ)
    route = ROUTES.get(path)
    if route is None:
        body = b"no route " + path.encode("latin-1")
        start_response("404 Not Found", text() + [("Content-Length", str(len(body)))])
        return [body]
    return route(environ, start_response, q)


# --- routes -----------------------------------------------------------------


def r_write(environ, start_response, q):
    write = start_response("200 OK", text())
    write(b"Hello, ")
    write(b"")
    write(b"write ")
    return Body(q, [b"and ", b"iterable"])


def r_write_only(environ, start_response, q):
    write = start_response("200 OK", text() + [("Content-Length", "13")])
    write(b"all via ")
    write(b"write")
    return Body(q, [])


def r_exc_info_before(environ, start_response, q):
    start_response("200 OK", text() + [("X-Original", "yes")])
    try:
        raise ValueError("m0test-replaced-before-send")
    except ValueError:
        start_response(
            "500 Internal Server Error",
            text() + [("X-Replaced", "yes")],
            sys.exc_info(),
        )
    return Body(q, [b"replaced body"])


def r_exc_info_lazy(environ, start_response, q):
    """Headers set, only empty chunks yielded, then exc_info: nothing was sent, so
    start_response must replace the headers and return normally."""

    def gen():
        start_response("200 OK", text() + [("X-Original", "yes")])
        yield b""
        try:
            raise ValueError("m0test-lazy-replaced")
        except ValueError:
            try:
                start_response(
                    "503 Service Unavailable", text() + [("X-Replaced", "yes")], sys.exc_info()
                )
            except Exception as e:
                _mark(q, "raised %s" % type(e).__name__)
                raise
            _mark(q, "replaced")
        yield b""
        yield b"recovered"

    return gen()


def r_exc_info_after(environ, start_response, q):
    """Headers went out with the first non-empty chunk; exc_info must re-raise."""

    def gen():
        start_response("200 OK", text())
        yield b"partial"
        try:
            raise ValueError("m0test-after-headers")
        except ValueError:
            try:
                start_response("500 Internal Server Error", text(), sys.exc_info())
            except ValueError as e:
                _mark(q, "reraised ValueError %s" % e)
                raise
            except BaseException as e:
                _mark(q, "raised other %s" % type(e).__name__)
                raise
            _mark(q, "not reraised")
            yield b" should never be sent"

    return gen()


def r_start_response_twice(environ, start_response, q):
    """A second start_response without exc_info is a fatal error (PEP 3333)."""
    start_response("200 OK", text())
    try:
        start_response("201 Created", text())
    except Exception as e:
        _mark(q, "raised %s" % type(e).__name__)
        raise
    _mark(q, "accepted")
    return [b"second start_response was accepted"]


def r_lazy(environ, start_response, q):
    def gen():
        start_response("200 OK", text() + [("X-Lazy", "yes")])
        yield b""
        yield b""
        yield b"lazy-"
        yield b""
        yield b"body"

    return gen()


def r_lazy_error_before_body(environ, start_response, q):
    def gen():
        start_response("200 OK", text() + [("X-Lazy", "yes")])
        yield b""
        raise RuntimeError("m0test-lazy-boom-before-body")

    return gen()


def r_error_before_start(environ, start_response, q):
    raise RuntimeError("m0test-boom-before-start")


def r_error_after_start(environ, start_response, q):
    start_response("200 OK", text())
    return Body(q, [b"partial-", b"more-", b"never"], fail_at=2)


def r_error_after_start_cl(environ, start_response, q):
    start_response("200 OK", text() + [("Content-Length", "100")])
    return Body(q, [b"partial-", b"more-", b"never"], fail_at=2)


def r_no_start_response(environ, start_response, q):
    return [b"start_response was never called"]


def r_close_normal(environ, start_response, q):
    start_response("200 OK", text())
    return Body(q, [b"one-", b"two"])


class ClosingBadly:
    """A whole body whose close() raises (after recording that it ran)."""

    def __init__(self, q):
        self.q = q

    def __iter__(self):
        return iter([b"whole ", b"body"])

    def close(self):
        _mark(self.q, "closed")
        raise RuntimeError("m0test-close-raises")


def r_close_raise_after(environ, start_response, q):
    start_response("200 OK", text())
    return ClosingBadly(q)


def r_thread_and_gen(environ, start_response, q):
    """A thread calls write() over and over while the body iterable yields `n` items of its
    own; when the iterable is done, the thread stops. Both reach the client, in whatever
    order, and write() never raises."""
    n = int(q.get("n", "2000"))
    write = start_response("200 OK", text())
    errors = []
    stop = threading.Event()
    count = [0]

    def writer():
        try:
            while not stop.is_set():
                write(b"T")
                count[0] += 1
        except Exception as e:  # noqa: BLE001 -- reported in the body
            errors.append("%s: %s" % (type(e).__name__, e))

    t = threading.Thread(target=writer)
    t.start()

    def gen():
        for _ in range(n):
            yield b"G"
        stop.set()
        t.join()
        yield ("|writes=%d|errors=%r" % (count[0], errors)).encode()

    return gen()


def r_bad_length(environ, start_response, q):
    """Declares the Content-Length `value` (a malformed one, for the test)."""
    start_response("200 OK", text() + [("Content-Length", q.get("value", "3x"))])
    return [b"abc"]


def r_close_raise_mid(environ, start_response, q):
    start_response("200 OK", text())
    return Body(q, [b"one-", b"two"], fail_at=1)


def r_empty_chunks(environ, start_response, q):
    start_response("200 OK", text())
    return [b"", b"abc", b"", b"", b"def", b""]


def r_empty_list(environ, start_response, q):
    start_response("200 OK", text())
    return []


def r_list(environ, start_response, q):
    start_response("200 OK", text())
    return [b"abc", b"defg"]


def r_tuple(environ, start_response, q):
    start_response("200 OK", text())
    return (b"abc", b"de")


def r_gen(environ, start_response, q):
    start_response("200 OK", text())

    def gen():
        yield b"gen-"
        yield b"body"

    return gen()


def r_gen_cl(environ, start_response, q):
    start_response("200 OK", text() + [("Content-Length", "8")])

    def gen():
        yield b"gen-"
        yield b"body"

    return gen()


def r_cl_short(environ, start_response, q):
    """The app promises 10 bytes and produces 3."""
    start_response("200 OK", text() + [("Content-Length", "10")])
    return Body(q, [b"abc"])


def r_cl_long(environ, start_response, q):
    """The app promises 3 bytes and produces 6: the rest must not reach the wire."""
    start_response("200 OK", text() + [("Content-Length", "3")])
    return Body(q, [b"abc", b"HTTP/1.1 200 OK\r\nX-Smuggled: yes\r\nContent-Length: 0\r\n\r\n"])


def r_head(environ, start_response, q):
    body = b"0123456789"
    start_response("200 OK", text() + [("Content-Length", str(len(body)))])
    return Body(q, [body])


def r_head_gen(environ, start_response, q):
    start_response("200 OK", text())

    def gen():
        yield b"generated "
        yield b"body"

    return gen()


def r_status(environ, start_response, q):
    code = q.get("code", "200")
    reasons = {"204": "No Content", "304": "Not Modified", "103": "Early Hints",
               "100": "Continue", "200": "OK"}
    headers = [("ETag", '"m0test"')] if code == "304" else []
    if code in ("103", "100", "200"):
        headers += text()
    start_response("%s %s" % (code, reasons.get(code, "Whatever")), headers)
    if q.get("body") == "1":
        return Body(q, [b"this body must not be sent"])
    return Body(q, [])


def r_file_wrapper(environ, start_response, q):
    path = q["path"]
    headers = list(text())
    f = MarkedFile(path, q)
    size = os.path.getsize(path)
    offset = int(q.get("offset", "0"))
    if offset:
        f.seek(offset)
    if q.get("cl") == "1":
        headers.append(("Content-Length", str(size - offset)))
    start_response("200 OK", headers)
    return environ["wsgi.file_wrapper"](f, 8192)


def r_file_wrapper_bytesio(environ, start_response, q):
    data = pattern(int(q.get("n", "100000")))
    start_response("200 OK", text())
    return environ["wsgi.file_wrapper"](MarkedBytesIO(data, q), 4096)


def r_stream(environ, start_response, q):
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return Stream(q)


def r_slow(environ, start_response, q):
    _mark(q, "started")
    time.sleep(float(q.get("secs", "2")))
    body = b"slow done"
    start_response("200 OK", text() + [("Content-Length", str(len(body)))])
    return [body]


def r_echo_body(environ, start_response, q):
    """The request body back, read whole with read()."""
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(len(body)))])
    return [body]


def r_errors(environ, start_response, q):
    err = environ["wsgi.errors"]
    err.write("m0test-wsgi-errors-write\n")
    err.writelines(["m0test-wsgi-errors-writelines-1\n", "m0test-wsgi-errors-writelines-2\n"])
    err.flush()
    start_response("200 OK", text() + [("Content-Length", "2")])
    return [b"ok"]


def r_status_reason(environ, start_response, q):
    start_response("299 Custom Reason Phrase", text() + [("Content-Length", "2"),
                                                       ("X-Custom", "a value")])
    return [b"ok"]


def r_thread_start(environ, start_response, q):
    """start_response and write() called from a thread the app starts and joins."""
    def work():
        write = start_response("200 OK", text())
        write(b"from a thread, ")

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return [b"then the iterable"]


def r_thread_writers(environ, start_response, q):
    """`n` threads each write() `count` pieces of `size` bytes of their own letter, at the
    same time as each other, while the app's own call waits for them."""
    n, count, size = int(q.get("n", "4")), int(q.get("count", "50")), int(q.get("size", "1000"))
    write = start_response("200 OK", text())
    barrier = threading.Barrier(n)

    def work(i):
        barrier.wait()
        for _ in range(count):
            write(bytes([97 + i]) * size)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return []


def r_late_writer(environ, start_response, q):
    """Answers at once, and leaves a thread that calls the request's write() `after`
    seconds later, when the request has finished; it records what write() raised."""
    write = start_response("200 OK", text())
    after = float(q.get("after", "0.3"))

    def late():
        time.sleep(after)
        try:
            write(b"INJECTED")
            _mark(q, "late write: no error")
        except Exception as e:  # noqa: BLE001 -- the type is what the test checks
            _mark(q, "late write: %s: %s" % (type(e).__name__, e))

    threading.Thread(target=late).start()
    write(b"hello")
    return []


_KEPT = {}


def r_stale_callables(environ, start_response, q):
    """`?keep`: answers and keeps its start_response and write. `?use`: calls the kept ones
    (from this request's thread and from another) and answers with what each raised."""
    if "keep" in q:
        write = start_response("200 OK", text() + [("Content-Length", "4")])
        _KEPT["sr"], _KEPT["write"] = start_response, write
        return [b"kept"]
    seen = []

    def attempt(what, call):
        try:
            call()
            seen.append("%s: no error" % what)
        except Exception as e:  # noqa: BLE001 -- the type is what the test checks
            seen.append("%s: %s: %s" % (what, type(e).__name__, e))

    attempt("write", lambda: _KEPT["write"](b"late"))
    attempt("start_response", lambda: _KEPT["sr"]("200 OK", []))
    t = threading.Thread(target=attempt, args=("thread write", lambda: _KEPT["write"](b"late")))
    t.start()
    t.join()
    body = "\n".join(seen).encode()
    start_response("200 OK", text() + [("Content-Length", str(len(body)))])
    return [body]


def r_kept_one(environ, start_response, q):
    """`?keep=KIND`: answers and keeps one thing of its callables: `sr` or `write` (the
    callables), `sr-self` or `write-self` (the objects they are methods of), `sr-weak` or
    `write-weak` (a weak reference to a callable), `input` (`wsgi.input`, unread).
    `?use=1`: calls what was kept for a request that ended, and answers what that did
    ("gone" for a dead weak reference; the body read, for `input`)."""
    kind = q.get("keep")
    if kind == "input":
        _KEPT.clear()
        _KEPT["kind"], _KEPT["it"] = kind, environ["wsgi.input"]
        start_response("200 OK", text() + [("Content-Length", "4")])
        return [b"kept"]
    if kind:
        _KEPT.clear()
        write = start_response("200 OK", text() + [("Content-Length", "4")])
        sr = start_response
        _KEPT["kind"] = kind
        _KEPT["it"] = {
            "sr": lambda: sr,
            "write": lambda: write,
            "sr-self": lambda: sr.__self__,
            "write-self": lambda: write.__self__,
            "sr-weak": lambda: weakref.ref(sr),
            "write-weak": lambda: weakref.ref(write),
        }[kind]()
        del sr, write
        return [b"kept"]
    kind, it = _KEPT["kind"], _KEPT["it"]
    if kind == "input":
        body = b"input: " + it.read() + b" / this request's: " + environ["wsgi.input"].read()
        start_response("200 OK", text() + [("Content-Length", str(len(body)))])
        return [body]
    if kind.endswith("-weak"):
        it = it()
    if it is None:
        outcome = "gone"
    else:
        call = {
            "sr": lambda: it("500 Stale", []),
            "write": lambda: it(b"stale"),
            "sr-self": lambda: it.start_response("500 Stale", []),
            "write-self": lambda: it.write(b"stale"),
        }[kind.replace("-weak", "")]
        try:
            call()
            outcome = "no error"
        except Exception as e:  # noqa: BLE001 -- the type is what the test checks
            outcome = "%s: %s" % (type(e).__name__, e)
    body = ("%s: %s" % (kind, outcome)).encode()
    start_response("200 OK", text() + [("Content-Length", str(len(body)))])
    return [body]


ROUTES = {
    "/thread-start": r_thread_start,
    "/kept-one": r_kept_one,
    "/thread-writers": r_thread_writers,
    "/stale-callables": r_stale_callables,
    "/late-writer": r_late_writer,
    "/write": r_write,
    "/write-only": r_write_only,
    "/exc-info/before": r_exc_info_before,
    "/exc-info/lazy": r_exc_info_lazy,
    "/exc-info/after": r_exc_info_after,
    "/start-response-twice": r_start_response_twice,
    "/lazy": r_lazy,
    "/lazy-error-before-body": r_lazy_error_before_body,
    "/error/before-start": r_error_before_start,
    "/error/after-start": r_error_after_start,
    "/error/after-start-cl": r_error_after_start_cl,
    "/error/no-start-response": r_no_start_response,
    "/close/normal": r_close_normal,
    "/close/raise-mid": r_close_raise_mid,
    "/close/raise-after": r_close_raise_after,
    "/bad-length": r_bad_length,
    "/thread-and-gen": r_thread_and_gen,
    "/empty-chunks": r_empty_chunks,
    "/empty-list": r_empty_list,
    "/list": r_list,
    "/tuple": r_tuple,
    "/gen": r_gen,
    "/gen-cl": r_gen_cl,
    "/cl-short": r_cl_short,
    "/cl-long": r_cl_long,
    "/head": r_head,
    "/head-gen": r_head_gen,
    "/status": r_status,
    "/status-reason": r_status_reason,
    "/file-wrapper": r_file_wrapper,
    "/file-wrapper-bytesio": r_file_wrapper_bytesio,
    "/stream": r_stream,
    "/slow": r_slow,
    "/errors": r_errors,
    "/echo-body": r_echo_body,
}


def factory():
    """For APP = "pep3333:factory()"."""

    def made(environ, start_response):
        body = b"made by factory"
        start_response("200 OK", text() + [("Content-Length", str(len(body)))])
        return [body]

    return made
