"""A plain Werkzeug app (no Flask) for tests/frameworks.rs: reports what Werkzeug's own
request parsing got from the body, so a chunked upload (no Content-Length; the server sets
wsgi.input_terminated) can be checked.

    /raw    request.get_data(): size, sha256, the first bytes
    /form   request.form and request.files (each file's name, type, size, sha256)
"""

import hashlib
import json

from werkzeug.wrappers import Request, Response


def _digest(data):
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@Request.application
def app(request):
    out = {
        "content_length": request.content_length,
        "transfer_encoding": request.headers.get("Transfer-Encoding"),
    }
    if request.path == "/raw":
        data = request.get_data()
        out["body"] = _digest(data)
        out["head"] = data[:32].decode("latin-1")
    elif request.path == "/form":
        out["form"] = request.form.to_dict(flat=False)
        out["files"] = [
            dict(name=name, filename=f.filename, mimetype=f.mimetype, **_digest(f.read()))
            for name, f in request.files.items(multi=True)
        ]
    else:
        return Response("not found\n", status=404)
    return Response(json.dumps(out), mimetype="application/json")
