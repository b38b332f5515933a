"""For tests/websocket.rs: Flask-Sock (simple-websocket under it) echoing what it
receives on /echo until a text "close"; "/" answers plain HTTP."""

from flask import Flask
from flask_sock import Sock

app = Flask(__name__)
sock = Sock(app)


@app.route("/")
def index():
    return "plain"


@sock.route("/echo")
def echo(ws):
    while True:
        data = ws.receive()
        if data == "close":
            break
        ws.send(data)
