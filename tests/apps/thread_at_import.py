"""An app whose import starts a thread that never ends and is not a daemon: a process that
finalised Python on exit would wait for it forever (tests/package.rs)."""

import threading
import time


def _forever():
    while True:
        time.sleep(3600)


threading.Thread(target=_forever, name="never-ends", daemon=False).start()


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
