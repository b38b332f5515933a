"""Says who it runs as: ids at import and at the request, supplementary groups, and the
mode of a file it creates (the query string names the path)."""

import json
import os


def ids():
    return {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "egid": os.getegid(),
        "groups": sorted(os.getgroups()),
    }


AT_IMPORT = ids()


def application(environ, start_response):
    made = None
    path = environ.get("QUERY_STRING")
    if path:
        with open(path, "w") as f:
            f.write("x")
        made = os.stat(path).st_mode & 0o777
    body = json.dumps({"import": AT_IMPORT, "now": ids(), "made": made}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
