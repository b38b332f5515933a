"""An app whose import takes `M0TEST_IMPORT_SLEEP` seconds while the file named by
`M0TEST_SLOW_IMPORT_FILE` exists (or always, when that variable is unset), to test a master
with workers still starting."""

import os
import time

_flag = os.environ.get("M0TEST_SLOW_IMPORT_FILE")
if _flag is None or os.path.exists(_flag):
    time.sleep(float(os.environ.get("M0TEST_IMPORT_SLEEP", "30")))


def app(environ, start_response):
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]
