"""WebSockets side by side: opens N WebSockets one after another on ws://127.0.0.1:PORT/echo
(tests/apps/ws_flask.py under the server to compare), sends a message on each, then makes
a plain GET of /, and prints how far it got. Each step waits 3 s at most.

    python scripts/ws_compare.py PORT N

Needs websocket-client (in the test virtualenv, tests/requirements.txt)."""

import sys, time, socket, urllib.request, websocket
port = int(sys.argv[1]); n = int(sys.argv[2])
ok = 0; socks = []
for i in range(n):
    try:
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=3)
        ws.send("x"); assert ws.recv() == "x"
        socks.append(ws); ok += 1
    except Exception as e:
        err = f"{type(e).__name__}: {e}"[:80]
        break
else:
    err = ""
try:
    plain = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=3).read() == b"plain"
except Exception as e:
    plain = f"failed: {type(e).__name__}"
print(f"websockets open: {ok}/{n}; plain GET meanwhile: {plain}; {err}")
for ws in socks:
    try: ws.send("close"); ws.close()
    except Exception: pass
