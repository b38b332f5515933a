"""For tests/parity.rs: answers JSON with what the process and the request look like from
the app: the working directory, M0TEST_* environment variables, the head of sys.path,
SCRIPT_NAME and PATH_INFO, and the contents of ./data.txt if there is one. With a
query of `sleep=SECONDS`, it sleeps that long first."""

import json
import os
import sys
import time
from urllib.parse import parse_qs


def app(environ, start_response):
    sleep = parse_qs(environ.get("QUERY_STRING", "")).get("sleep")
    if sleep:
        time.sleep(float(sleep[0]))
    try:
        with open("data.txt") as f:
            data = f.read()
    except OSError:
        data = None
    body = json.dumps(
        {
            "cwd": os.getcwd(),
            "env": {k: v for k, v in os.environ.items() if k.startswith("M0TEST_")},
            "sys_path": sys.path[:4],
            "script_name": environ["SCRIPT_NAME"],
            "path_info": environ["PATH_INFO"],
            "data": data,
        }
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
