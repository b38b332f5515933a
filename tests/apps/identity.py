"""Says who it runs as: ids at import and at the request, supplementary groups, and the
mode of a file it creates (the query string names the path; `signal-master` instead
tries to signal the master)."""

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


def _signal_master():
    """What sending signal 0 to the parent (the master) gives: "allowed" or the error."""
    try:
        os.kill(os.getppid(), 0)
        return "allowed"
    except OSError as e:
        return type(e).__name__


def application(environ, start_response):
    made = None
    path = environ.get("QUERY_STRING")
    signal_master = None
    if path == "signal-master":
        signal_master = _signal_master()
        path = None
    if path:
        with open(path, "w") as f:
            f.write("x")
        made = os.stat(path).st_mode & 0o777
    body = json.dumps({"import": AT_IMPORT, "now": ids(), "made": made,
                       "signal_master": signal_master}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
