"""Routes for tests/own_write.rs: responses a handler thread may write to its connection's
socket itself.

/sleep?s=SECONDS  "slept" after sleeping that long (`&mark=PATH`: first writes "started"
                  to that file)
/hello            "hello"
/many?n=N&size=B  N body items of B bytes each ("a", "b", ... repeated), small enough to
                  be copied into one buffer
/big              64 001 bytes: an item large enough to go uncopied (33 000 "x"), then
                  "-" and 31 000 "y", copied after it
"""

import time
from urllib.parse import parse_qs


def app(environ, start_response):
    q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ["PATH_INFO"]
    if path == "/sleep":
        if "mark" in q:
            with open(q["mark"], "a") as f:
                f.write("started\n")
        time.sleep(float(q.get("s", "0.5")))
        items = [b"slept"]
    elif path == "/hello":
        items = [b"hello"]
    elif path == "/big":
        items = [b"x" * 33000, b"-", b"y" * 31000]
    elif path == "/many":
        n, size = int(q.get("n", "60")), int(q.get("size", "1000"))
        items = [bytes([97 + i % 26]) * size for i in range(n)]
    else:
        items = [b"no route"]
    length = sum(len(i) for i in items)
    start_response("200 OK", [("Content-Length", str(length))])
    return items
