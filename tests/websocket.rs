//! WebSockets by socket hand-over: simple-websocket (under Flask-Sock and Flask-SocketIO's
//! threading mode) takes `environ["gunicorn.socket"]` and speaks WebSocket on it; the
//! server writes nothing more for that connection. The libraries and the clients
//! (websocket-client, python-socketio's) come from the test virtualenv; the apps are
//! tests/apps/ws_flask.py and ws_socketio.py.

mod common;
mod venvs;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use venvs::*;

/// Runs `script` with the test virtualenv's Python, `args` after it; its output, which
/// must say `ok` last.
fn client(venv: &Path, script: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(venv.join("bin/python"))
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim_end().ends_with("ok"),
        "{:?}\n{text}",
        out.status
    );
    text
}

fn start(venv: &Path, app: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--venv", venv.to_str().unwrap(), "--access-log"];
    args.extend(extra);
    Server::start(app, &args)
}

const ECHO: &str = r#"
import sys, websocket
port = sys.argv[1]
ws = websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=10)
for i in range(100):
    ws.send(f"text {i}")
    assert ws.recv() == f"text {i}"
for i in range(100):
    ws.send_binary(bytes([i, 0, 255]) * 100)
    assert ws.recv() == bytes([i, 0, 255]) * 100
ws.ping(b"are you there")
op, frame = ws.recv_data_frame(control_frame=True)
assert op == websocket.ABNF.OPCODE_PONG and frame.data == b"are you there", (op, frame.data)
ws.send("close")
ws.close()
print("ok")
"#;

#[test]
fn flask_sock_echoes_text_and_binary_answers_a_ping_and_closes() {
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &[]);
    client(&venv, ECHO, &[&s.port().to_string()]);
    // The same connection serves nothing else: a plain request still does.
    assert_eq!(s.get("/").body_text(), "plain");
    assert!(s.wait_for_log("\"GET /echo HTTP/1.1\" 101", Duration::from_secs(5)));
    s.assert_no_panic();
}

const MANY: &str = r#"
import sys, time, urllib.request, websocket
port, n = sys.argv[1], int(sys.argv[2])
socks = [websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=20) for _ in range(n)]
for i, ws in enumerate(socks):
    ws.send(f"hello {i}")
    assert ws.recv() == f"hello {i}"
# Plain HTTP on the same worker while they are all open.
for _ in range(50):
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read() == b"plain"
for i, ws in enumerate(socks):
    ws.send(f"again {i}")
    assert ws.recv() == f"again {i}"
for ws in socks:
    ws.send("close")
    ws.close()
print("ok")
"#;

#[test]
fn fifty_websockets_at_once_leave_plain_http_served_with_default_flags() {
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &[]);
    client(&venv, MANY, &[&s.port().to_string(), "50"]);
    s.assert_no_panic();
}

const SOCKETIO: &str = r#"
import sys, threading, socketio
port, transport = sys.argv[1], sys.argv[2]
got = threading.Event()
box = {}
sio = socketio.Client()
@sio.on("echoed")
def on_echoed(data):
    box["data"] = data
    got.set()
transports = ["websocket"] if transport == "websocket" else ["polling", "websocket"]
sio.connect(f"http://127.0.0.1:{port}", transports=transports, wait_timeout=10)
sio.emit("echo", {"n": 42, "s": "héllo"})
assert got.wait(10), "no echo"
assert box["data"] == {"n": 42, "s": "héllo"}, box
sio.disconnect()
print("ok")
"#;

#[test]
fn flask_socketio_in_threading_mode_connects_emits_receives_and_disconnects() {
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_socketio:app", &[]);
    for transport in ["websocket", "polling-then-upgrade"] {
        client(&venv, SOCKETIO, &[&s.port().to_string(), transport]);
    }
    s.assert_no_panic();
}

const VANISH: &str = r#"
import sys, socket, websocket
port = sys.argv[1]
ws = websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=10)
ws.send("hi")
assert ws.recv() == "hi"
# Gone without a close frame.
ws.sock.shutdown(socket.SHUT_RDWR)
ws.sock.close()
print("ok")
"#;

#[test]
fn a_client_that_vanishes_ends_its_websocket_and_the_server_goes_on() {
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &[]);
    for _ in 0..3 {
        client(&venv, VANISH, &[&s.port().to_string()]);
    }
    // Each call ended (its access line is written when it returns).
    assert!(
        wait_until(Duration::from_secs(10), || s
            .log_text()
            .matches("\"GET /echo HTTP/1.1\" 101")
            .count()
            == 3),
        "{}",
        s.log_text()
    );
    client(&venv, ECHO, &[&s.port().to_string()]);
    s.assert_no_panic();
}

const HOLD: &str = r#"
import sys, time, websocket
port = sys.argv[1]
ws = websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=30)
ws.send("hi")
assert ws.recv() == "hi"
print("open", flush=True)
try:
    ws.recv()
except Exception:
    pass
print("ok")
"#;

#[test]
fn sigterm_with_websockets_open_waits_the_graceful_timeout_then_exits() {
    let Some(venv) = test_venv() else { return };
    let mut s = start(&venv, "ws_flask:app", &["--graceful-timeout", "1"]);
    let port = s.port().to_string();
    let mut holder = Command::new(venv.join("bin/python"))
        .args(["-c", HOLD, &port])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its WebSocket is open once it says so.
    let mut first = String::new();
    {
        use std::io::BufRead;
        let stdout = holder.stdout.as_mut().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .unwrap();
    }
    assert_eq!(first.trim(), "open");
    s.signal(libc::SIGTERM);
    let code = exit_code(
        &mut s,
        Duration::from_secs(15),
        "a stop with a WebSocket open",
    );
    assert_eq!(code, 0, "{}", s.log_text());
    // The client saw its connection end.
    let out = wait_child(&mut holder, Duration::from_secs(10));
    assert!(out.contains("ok"), "{out}");
}

fn wait_child(child: &mut std::process::Child, limit: Duration) -> String {
    let done = wait_until(limit, || child.try_wait().ok().flatten().is_some());
    if !done {
        let _ = child.kill();
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut out);
    }
    out
}

const REFUSED: &str = r#"
import sys, websocket
port = sys.argv[1]
try:
    websocket.create_connection(f"ws://127.0.0.1:{port}/echo", timeout=10)
except websocket.WebSocketBadStatusException as e:
    assert e.status_code == 500, e.status_code
    print("ok")
"#;

#[test]
fn inline_mode_says_why_it_cannot_hand_a_socket_over() {
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &["--blocking-threads", "0"]);
    client(&venv, REFUSED, &[&s.port().to_string()]);
    assert!(
        s.wait_for_log(
            "cannot hand a WebSocket's socket over in inline mode",
            Duration::from_secs(5)
        ),
        "{}",
        s.log_text()
    );
    assert_eq!(s.get("/").body_text(), "plain");
}

#[test]
fn each_websocket_is_given_a_thread_in_its_place_up_to_max_websockets() {
    // A pool of two threads at most: twenty WebSockets and plain HTTP are all served, each
    // WebSocket's thread replaced.
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &["--max-blocking-threads", "2"]);
    client(&venv, MANY, &[&s.port().to_string(), "20"]);
    s.assert_no_panic();
    drop(s);
    // Past --max-websockets, a WebSocket keeps its thread, and says so.
    let s = start(
        &venv,
        "ws_flask:app",
        &["--max-blocking-threads", "8", "--max-websockets", "2"],
    );
    client(&venv, MANY, &[&s.port().to_string(), "4"]);
    assert!(
        s.wait_for_log("past --max-websockets", Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
}

#[test]
fn bytes_sent_before_the_handshakes_answer_keep_the_socket_from_the_app() {
    // A client that sends a frame with its upgrade request: those bytes were read by the
    // loop, so the socket is not handed over (they would be lost); the app says why.
    let Some(venv) = test_venv() else { return };
    let s = start(&venv, "ws_flask:app", &[]);
    let mut c = s.connect();
    c.send(
        b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n\
          \x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58",
    );
    assert_eq!(c.read_response().status, 500);
    assert!(
        s.wait_for_log(
            "other requests or bytes came with the WebSocket request",
            Duration::from_secs(5)
        ),
        "{}",
        s.log_text()
    );
    // The same request alone is handed over.
    client(&venv, ECHO, &[&s.port().to_string()]);
}
