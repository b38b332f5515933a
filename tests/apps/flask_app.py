"""A Flask app for tests/frameworks.rs and tests/wheel.rs: routing with URL parameters, an
urlencoded form, a multipart upload, a streamed response that reads the request inside its
generator (stream_with_context), send_file of the file named by M0S_SEND_FILE, and JSON.

`app` is the plain Flask app; `probed` also answers GET /_last_iterable (iterable_probe)."""

import hashlib
import os
import sys

import flask
from flask import Flask, Response, jsonify, request, send_file, stream_with_context

import iterable_probe

app = Flask(__name__)


@app.get("/hello/<name>")
def hello(name):
    return f"hello {name}"


@app.get("/items/<int:n>")
def item(n):
    return jsonify(n=n, double=n * 2)


@app.get("/url-for/<int:n>")
def url_for_item(n):
    # Under --root-path the app's own URLs carry the prefix (SCRIPT_NAME).
    return jsonify(path=flask.url_for("item", n=n), external=flask.url_for("item", n=n, _external=True))


@app.post("/form")
def form():
    return jsonify(form=request.form.to_dict(flat=False), mimetype=request.mimetype)


@app.post("/upload")
def upload():
    f = request.files["file"]
    data = f.read()
    return jsonify(
        title=request.form["title"],
        filename=f.filename,
        mimetype=f.mimetype,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


@app.route("/stream", methods=["GET", "POST"])
def stream():
    n = int(request.values.get("n", "5"))

    def generate():
        # The request context is gone by the time the server iterates this, unless
        # stream_with_context keeps it: reading request here is the point.
        word = request.values["word"]
        for i in range(n):
            yield f"{i}:{word}:{request.method}\n"

    return Response(stream_with_context(generate()), mimetype="text/plain")


@app.get("/file")
def file():
    return send_file(os.environ["M0S_SEND_FILE"], mimetype="application/octet-stream")


@app.route("/json", methods=["GET", "POST"])
def json_endpoint():
    if request.method == "GET":
        return {
            "ok": True,
            "items": [1, 2, 3],
            "python": sys.prefix,
            "version": "%d.%d" % sys.version_info[:2],
            "flask_file": flask.__file__,
        }
    data = request.get_json()
    return {"got": data, "sum": sum(data["numbers"])}


probed = iterable_probe.wrap(app)
