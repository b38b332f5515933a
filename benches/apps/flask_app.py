"""A small Flask app: one route returning a short JSON document through jsonify."""

from flask import Flask, jsonify

app = Flask(__name__)


@app.route("/")
def index():
    return jsonify(message="Hello, World!", server="wsgi")
