"""Routes for tests/regressions.rs: the scenarios of review findings, one route each.

Query parameters: `mark=PATH` names a file the route appends observations to (one
line each), so a test can see what happened inside the app after the fact.
"""

import ctypes
import os
import subprocess
import threading
import time

# The query parsing and marker files are pep3333.py's (same folder, on sys.path).
from pep3333 import _mark, _query


def app(environ, start_response):
    q = _query(environ)
    route = ROUTES.get(environ["PATH_INFO"])
    if route is None:
        body = b"no route"
        start_response("404 Not Found", [("Content-Length", str(len(body)))])
        return [body]
    return route(environ, start_response, q)


def r_hello(environ, start_response, q):
    body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [body]


def r_sse(environ, start_response, q):
    """An endless event stream: a tick, then `every` seconds of sleep, forever. Only
    close() ends it, and close() is recorded ("closed")."""
    every = float(q.get("every", "0.2"))

    def gen():
        try:
            while True:
                yield b"data: tick\n\n"
                time.sleep(every)
        finally:
            _mark(q, "closed")

    start_response("200 OK", [("Content-Type", "text/event-stream")])
    return gen()


def r_big_first(environ, start_response, q):
    """A streamed response whose first chunk is `size` bytes, then `tiny` 1-byte chunks;
    "produced" is recorded once the generator is exhausted."""
    size = int(q.get("size", str(32 << 20)))
    tiny = int(q.get("tiny", "15"))

    def gen():
        yield b"y" * size
        for _ in range(tiny):
            yield b"z"
        _mark(q, "produced")

    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return gen()


def r_ticks(environ, start_response, q):
    """`n` small chunks, streamed: "s0\\n", "s1\\n", ..."""
    n = int(q.get("n", "20"))

    def gen():
        for i in range(n):
            yield b"s%d\n" % i

    start_response("200 OK", [("Content-Type", "text/plain")])
    return gen()


def r_chunks(environ, start_response, q):
    """`n` streamed chunks of `size` bytes each."""
    n = int(q.get("n", "4"))
    size = int(q.get("size", "262144"))

    def gen():
        for i in range(n):
            yield bytes([97 + i % 26]) * size

    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return gen()


def r_big_list(environ, start_response, q):
    """A list body of `size` bytes of b"x": sent as one buffer with a Content-Length."""
    size = int(q.get("size", str(64 << 20)))
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return [b"x" * size]


def r_short(environ, start_response, q):
    """Declares 10 bytes and sends 5: the server must close after it."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
    return [b"12345"]


def r_side(environ, start_response, q):
    """Records that the app ran."""
    _mark(q, "side ran")
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
    return [b"side"]


def r_abort(environ, start_response, q):
    """Streams a part of the body, then fails."""

    def gen():
        yield b"partial"
        raise RuntimeError("m0test-regress-abort")

    start_response("200 OK", [("Content-Type", "text/plain")])
    return gen()


def r_slow(environ, start_response, q):
    """Records "started", sleeps `secs`, records "done", then answers."""
    _mark(q, "started")
    time.sleep(float(q.get("secs", "1.5")))
    _mark(q, "done")
    body = b"slow done"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "9")])
    return [body]


def r_spin(environ, start_response, q):
    """Keeps the CPU busy in Python (the GIL held) for `ms` milliseconds, then answers."""
    until = time.perf_counter() + float(q.get("ms", "1")) / 1000
    n = 0
    while time.perf_counter() < until:
        n += 1
    body = b"spun"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
    return [body]


def r_cpus(environ, start_response, q):
    """The CPUs the app may run on, as it sees them: "thread LIST", "new-thread LIST" (a
    thread it starts) and "child LIST" (a process it starts), a line each, LIST as 0,1."""
    def listed(cpus):
        return ",".join(str(c) for c in sorted(cpus))

    seen = {}
    t = threading.Thread(target=lambda: seen.update(t=os.sched_getaffinity(0)))
    t.start()
    t.join()
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True)
    child = next(l.split(":", 1)[1].strip() for l in status.stdout.splitlines()
                 if l.startswith("Cpus_allowed_list:"))
    body = ("thread %s\nnew-thread %s\nchild %s\n" % (
        listed(os.sched_getaffinity(0)), listed(seen["t"]), child)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def r_bg_thread(environ, start_response, q):
    """Starts a thread that records "thread ran" after `after` seconds, and answers at
    once: the thread can only run if the server lets go of the GIL while it is idle."""
    after = float(q.get("after", "0.2"))

    def later():
        time.sleep(after)
        _mark(q, "thread ran")

    threading.Thread(target=later, daemon=True).start()
    body = b"started"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "7")])
    return [body]


def r_endless(environ, start_response, q):
    """Streams "e<i>\n" chunks as fast as they are taken, forever; close() is recorded
    ("closed")."""

    def gen():
        i = 0
        try:
            while True:
                yield b"e%d\n" % i
                i += 1
        finally:
            _mark(q, "closed")

    start_response("200 OK", [("Content-Type", "text/plain")])
    return gen()


def r_pid(environ, start_response, q):
    """The worker's process id, as text."""
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def r_watch(environ, start_response, q):
    """Records "started", then asks environ["m0serve.client_disconnected"]() every 10 ms
    for up to `secs` seconds; records "noticed" when it says the client left, else
    "still connected", and answers with which."""
    _mark(q, "started")
    gone = environ["m0serve.client_disconnected"]
    deadline = time.monotonic() + float(q.get("secs", "5"))
    seen = False
    while time.monotonic() < deadline:
        if gone():
            seen = True
            break
        time.sleep(0.01)
    what = "noticed" if seen else "still connected"
    _mark(q, what)
    body = what.encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def r_orphan(environ, start_response, q):
    """Leaves an orphan behind: a shell that exits at once after starting `sleep 0.2` in
    the background; the sleep is reparented to the namespace's init (or the nearest
    subreaper), which must reap it."""
    import subprocess
    p = subprocess.Popen(["sh", "-c", "sleep 0.2 & exit 0"])
    p.wait()
    body = b"orphaned"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "8")])
    return [body]


_COUNT_FD = []


def r_count(environ, start_response, q):
    """Appends one byte to the file named by the M0TEST_COUNT_FILE environment variable
    (every worker appends to the same file, so its size is how many times the app ran),
    and answers with the worker's pid."""
    if not _COUNT_FD:
        _COUNT_FD.append(os.open(os.environ["M0TEST_COUNT_FILE"],
                                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    os.write(_COUNT_FD[0], b"x")
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def r_write_big(environ, start_response, q):
    """Writes `mib` MiB with write(), 1 MiB at a time (each a new object); records "wrote
    all", or "refused ERRNO NAME" when write() raises an OSError (then raises it on)."""
    write = start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                      ("Content-Length", str(int(q.get("mib", "1")) << 20))])
    try:
        for _ in range(int(q.get("mib", "1"))):
            # A new object each time, as an app's data is: its memory is held until sent.
            write(b"w" * (1 << 20))
    except OSError as e:
        _mark(q, f"refused {e.errno} {type(e).__name__}")
        raise
    _mark(q, "wrote all")
    return []


def r_die(environ, start_response, q):
    """Takes the worker down at once, as a crashing app does: `how=exit` (os._exit),
    `segv` (a segfault, as in a C extension) or `abort` (os.abort)."""
    how = q.get("how", "exit")
    if how == "segv":
        ctypes.string_at(0)
    elif how == "abort":
        os.abort()
    os._exit(3)


_HELD = []


def r_hold(environ, start_response, q):
    """Keeps `mib` MiB more (written, so resident) for the life of the worker."""
    _HELD.append(b"x" * (int(q.get("mib", "1")) << 20))
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


ROUTES = {
    "/hold": r_hold,
    "/count": r_count,
    "/hello": r_hello,
    "/sse": r_sse,
    "/big-first": r_big_first,
    "/ticks": r_ticks,
    "/chunks": r_chunks,
    "/big-list": r_big_list,
    "/short": r_short,
    "/side": r_side,
    "/abort": r_abort,
    "/slow": r_slow,
    "/spin": r_spin,
    "/cpus": r_cpus,
    "/bg-thread": r_bg_thread,
    "/endless": r_endless,
    "/pid": r_pid,
    "/watch": r_watch,
    "/orphan": r_orphan,
    "/die": r_die,
    "/write-big": r_write_big,
}
