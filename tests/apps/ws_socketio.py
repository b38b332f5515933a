"""For tests/websocket.rs: Flask-SocketIO in threading mode (python-socketio and
simple-websocket under it): an "echo" event is answered with an "echoed" one."""

from flask import Flask
from flask_socketio import SocketIO, emit

flask_app = Flask(__name__)
socketio = SocketIO(flask_app, async_mode="threading")


@socketio.on("echo")
def on_echo(data):
    emit("echoed", data)


app = flask_app
