"""Echo the WSGI environ and the request body as JSON.

Every CGI-style key (no dot in the name, or HTTP_*) is echoed with its value, every key's
Python type name is echoed, the wsgi.* values are echoed, and the body is read
through wsgi.input in the way the query parameter `read=` asks for:

    read=all      one read() with no argument (the default)
    read=none     the body is not read at all
    read=n:K      read(K) until b""
    read=line     readline() until b""
    read=line:K   readline(K) until b""
    read=lines    one readlines()
    read=lines:H  readlines(H) until []
    read=iter     for line in wsgi.input
    read=mixed    read(3), readline(), read(5), readline(4), then readlines()

Each piece the calls returned is echoed in order ("pieces") with the whole
body ("body"); bytes are echoed as latin-1 strings (JSON \\u escapes).

With `mutate=1`, the app changes the environ after echoing it (a header's value replaced,
a key added, one deleted), as middleware does, so a test can see that the next request's
environ holds none of it.

When the environment variable M0TEST_CALL_LOG names a file, every call appends
one line to it, so a test can tell whether the app was called at all.
"""

import json
import os
import sys


from pep3333 import _query  # same folder, on sys.path


def _read(inp, mode):
    pieces = []
    if mode == "all":
        pieces.append(inp.read())
    elif mode == "none":
        pass
    elif mode.startswith("n:"):
        k = int(mode[2:])
        while True:
            c = inp.read(k)
            if not c:
                break
            pieces.append(c)
    elif mode == "line":
        while True:
            c = inp.readline()
            if not c:
                break
            pieces.append(c)
    elif mode.startswith("line:"):
        k = int(mode[5:])
        while True:
            c = inp.readline(k)
            if not c:
                break
            pieces.append(c)
    elif mode == "lines":
        pieces.extend(inp.readlines())
    elif mode.startswith("lines:"):
        h = int(mode[6:])
        while True:
            ls = inp.readlines(h)
            if not ls:
                break
            pieces.extend(ls)
    elif mode == "iter":
        for line in inp:
            pieces.append(line)
    elif mode == "mixed":
        pieces.append(inp.read(3))
        pieces.append(inp.readline())
        pieces.append(inp.read(5))
        pieces.append(inp.readline(4))
        pieces.extend(inp.readlines())
    else:
        raise ValueError("unknown read mode %r" % mode)
    return pieces


def _log_call(environ):
    path = os.environ.get("M0TEST_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("%s %r\n" % (environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")))


def app(environ, start_response):
    _log_call(environ)
    q = _query(environ)
    mode = q.get("read", "all")
    inp = environ["wsgi.input"]
    pieces = _read(inp, mode)
    for p in pieces:
        if type(p) is not bytes:
            raise TypeError("wsgi.input returned %r, not bytes" % type(p))
    eof_ok = None
    if mode != "none":
        # PEP 3333: an exhausted input stream returns empty bytestrings.
        eof_ok = inp.read(1) == b"" and inp.readline() == b"" and inp.read() == b""
    body = b"".join(pieces)

    def typename(v):
        return type(v).__name__

    cgi = {}
    for k, v in environ.items():
        # HTTP_* keys can hold a dot when a header name does (X.Custom).
        if "." not in k or k.startswith("HTTP_"):
            cgi[k] = v if isinstance(v, str) else repr(v)
    version = environ.get("wsgi.version")
    errors = environ.get("wsgi.errors")
    out = {
        "types": {k: typename(v) for k, v in environ.items()},
        "cgi": cgi,
        "wsgi": {
            "version": list(version) if isinstance(version, tuple) else repr(version),
            "url_scheme": environ.get("wsgi.url_scheme"),
            "multithread": environ.get("wsgi.multithread"),
            "multiprocess": environ.get("wsgi.multiprocess"),
            "run_once": environ.get("wsgi.run_once"),
            "input_terminated": environ.get("wsgi.input_terminated"),
            "has_file_wrapper": "wsgi.file_wrapper" in environ
            and callable(environ["wsgi.file_wrapper"]),
            "input_methods": all(
                callable(getattr(inp, m, None))
                for m in ("read", "readline", "readlines", "__iter__")
            ),
            "errors_methods": all(
                callable(getattr(errors, m, None)) for m in ("write", "writelines", "flush")
            ),
        },
        "mode": mode,
        "pieces": [p.decode("latin-1") for p in pieces],
        "body": body.decode("latin-1"),
        "eof_ok": eof_ok,
    }
    data = json.dumps(out, ensure_ascii=True, sort_keys=True).encode("ascii")
    if q.get("mutate"):
        environ["HTTP_ACCEPT"] = "mutated"
        environ["X_ADDED"] = "added"
        environ.pop("HTTP_USER_AGENT", None)
    start_response(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]
