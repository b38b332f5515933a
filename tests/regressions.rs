//! Regressions: one test per bug a review found in the loop and the bridge (each fails
//! against the server as it was before the fix). The app is tests/apps/regress.py.

mod common;

use common::*;
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// How long a server that works may take to do what a test waits for.
const PROMPT: Duration = Duration::from_secs(4);

// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

#[test]
fn endless_stream_is_closed_even_when_another_connection_resets_right_after_its_client_left() {
    // One handler: A's endless stream occupies it, B's request waits in its ring. A goes,
    // then B goes: the handler is told "B is gone" after "A is gone", before it looked.
    let tmp = TempDir::new("lost-cancel");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut a = s.connect();
    a.send(&get(&format!("/sse?every=0.5&mark={mark}")));
    read_until_count(&mut a, b"tick", 1, PROMPT);
    let mut b = s.connect();
    b.send(&get("/hello"));
    // The next tick: by now B's request is queued, and the handler has just yielded, so
    // its next look at the cancellation is half a second away.
    read_until_count(&mut a, b"tick", 1, PROMPT);
    reset(a);
    std::thread::sleep(Duration::from_millis(100));
    reset(b);

    if let Err(m) = wait_for_file_containing(&mark, "closed", PROMPT) {
        panic!(
            "the endless generator was not closed within {PROMPT:?} of its client leaving \
             (the cancellation was lost); marks: {m:?}"
        );
    }
    assert_served(&s, PROMPT, "after the stream was cancelled");
}

#[test]
fn head_request_to_an_endless_stream_stops_it_once_the_head_is_out() {
    let tmp = TempDir::new("head-endless");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut c = s.connect();
    c.send(format!("HEAD /sse?mark={mark} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    let r = c.read_head_response();
    assert_eq!(r.status, 200, "{}", r.status_line());
    drop(c);
    if let Err(m) = wait_for_file_containing(&mark, "closed", PROMPT) {
        panic!(
            "the generator of a HEAD response kept running after the head went out and \
             the client left; marks: {m:?}"
        );
    }
    assert_served(&s, PROMPT, "after a HEAD to an endless stream");
}

// ---------------------------------------------------------------------------
// Chunk credit and write backpressure
// ---------------------------------------------------------------------------

#[test]
fn a_finished_response_its_client_does_not_read_holds_no_chunk_credit() {
    // A's response is 16 streamed chunks, the first too big to be written to a client
    // that reads nothing, so all 16 sit in A's write queue. The handler is done with A;
    // the next responses on it must not wait for A's client.
    let tmp = TempDir::new("credit");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut a = s.connect();
    a.send(&get(&format!(
        "/big-first?size={}&tiny=15&mark={mark}",
        32 << 20
    )));
    // Whether the handler gets to the end of A's body is not the question here; give it
    // the time to, then look at the others.
    let _ = wait_for_file_containing(&mark, "produced", Duration::from_secs(3));

    let t = Instant::now();
    let b = try_get(&s, "/ticks?n=20", PROMPT).unwrap_or_else(|e| {
        panic!(
            "a streamed response on the handler that finished A's was not served \
             ({:?}): {e}",
            t.elapsed()
        )
    });
    let want: String = (0..20).map(|i| format!("s{i}\n")).collect();
    assert_eq!(b.body_text(), want);
    assert_served(&s, PROMPT, "while A's finished response sits unread");
    drop(a);
}

#[test]
fn pipelined_streamed_responses_a_client_never_reads_keep_memory_bounded() {
    const REQUESTS: usize = 600;
    const RESPONSE_MIB: usize = 1; // 4 chunks of 256 KiB each
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    assert_served(&s, PROMPT, "warm-up");
    let rss_before = rss_kib(s.pid());
    let mut c = s.connect();
    let one = get("/chunks?n=4&size=262144");
    c.send(&one.repeat(REQUESTS));

    // Give an unbounded server the time to answer everything into memory.
    let mut peak = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        peak = peak.max(rss_kib(s.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let growth_mib = peak.saturating_sub(rss_before) / 1024;
    assert!(
        growth_mib <= 150,
        "server memory grew by {growth_mib} MiB for {REQUESTS} pipelined responses of \
         {RESPONSE_MIB} MiB that the client never reads"
    );
    assert_served(&s, PROMPT, "while a client pipelines and reads nothing");
}

// ---------------------------------------------------------------------------
// Closing a connection
// ---------------------------------------------------------------------------

#[test]
fn request_pipelined_behind_a_response_that_closes_the_connection_is_never_run() {
    let tmp = TempDir::new("pipe-close");
    let mark = tmp.file("mark");
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let mut c = s.connect();
    // /short declares 10 bytes and sends 5, so its response ends the connection.
    let mut burst = get("/short");
    burst.extend_from_slice(&get(&format!("/side?mark={mark}")));
    c.send(&burst);
    let (got, closed) = c.read_until_close(PROMPT);
    assert!(closed, "the connection stayed open: {:?}", show(&got));
    assert!(
        got.starts_with(b"HTTP/1.1 200 "),
        "first response: {:?}",
        show(&got)
    );
    assert!(
        !contains(&got, b"side"),
        "a response followed the one that closed: {:?}",
        show(&got)
    );
    // One handler takes requests in order: once a later request is answered, /side has
    // been run or skipped.
    assert_served(&s, PROMPT, "after the closed pipeline");
    let marks = read_or_empty(&mark);
    assert!(
        marks.is_empty(),
        "the app ran for a request whose connection was already closed: {marks:?}"
    );
}

#[test]
fn http10_streamed_response_that_fails_mid_body_ends_with_a_reset() {
    // An HTTP/1.0 streamed body is delimited by the close: a clean EOF would tell the
    // client the truncated body is whole.
    let s = Server::start("regress:app", &[]);
    let mut c = s.connect();
    c.send(b"GET /abort HTTP/1.0\r\n\r\n");
    let deadline = Instant::now() + PROMPT;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the connection did not end within {PROMPT:?}: {:?}",
            show(&got)
        );
        c.stream.set_read_timeout(Some(left)).unwrap();
        match c.stream.read(&mut buf) {
            Ok(0) => panic!(
                "the truncated close-delimited body ended with a clean EOF (FIN), not a \
                 reset: {:?}",
                show(&got)
            ),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading after {:?}: {e}", show(&got)),
        }
    }
    assert!(
        got.is_empty() || (got.starts_with(b"HTTP/1.") && contains(&got, b" 200 ")),
        "{:?}",
        show(&got)
    );
    assert!(
        s.wait_for_log("m0test-regress-abort", PROMPT),
        "the app's error was not logged:\n{}",
        s.log_text()
    );
    assert_served(&s, PROMPT, "after an aborted HTTP/1.0 response");
}

// ---------------------------------------------------------------------------
// Zero-copy bodies
// ---------------------------------------------------------------------------

/// Large body items are written straight from the app's `bytes` objects; the references
/// the loop drops after writing them must be released (pyo3 defers those decrefs), or
/// every response's body would stay in memory.
pub fn large_items_written_without_copy_are_released(blocking_threads: &str) {
    let s = Server::start("regress:app", &["--blocking-threads", blocking_threads]);
    // Pipelined batches on four connections: many bodies in flight at once.
    const BATCH: usize = 16;
    let mut conns: Vec<Conn> = (0..4).map(|_| s.connect()).collect();
    let batch = |conns: &mut Vec<Conn>, rounds: usize| {
        for round in 0..rounds {
            for c in conns.iter_mut() {
                c.send(&get("/big-list?size=1048576").repeat(BATCH));
            }
            for c in conns.iter_mut() {
                for r in c.read_responses(BATCH) {
                    assert_eq!(r.body.len(), 1 << 20, "round {round}: {}", r.status_line());
                }
            }
        }
    };
    batch(&mut conns, 1);
    let before = rss_kib(s.pid());
    batch(&mut conns, 3);
    let after = rss_kib(s.pid());
    assert!(
        after < before + 96 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 192 responses of 1 MiB: the written \
         bodies were not released"
    );
    // And the bytes are the app's.
    let r = s.get("/big-list?size=1048576");
    assert!(r.body.iter().all(|&b| b == b'x'), "wrong body bytes");
}

#[test]
fn large_items_written_without_copy_are_released_by_a_handler_thread() {
    large_items_written_without_copy_are_released("1");
}

#[test]
fn chunked_stream_of_large_items_arrives_intact() {
    // Four 256 KiB items, each framed as one chunk around the uncopied bytes.
    let s = Server::start("regress:app", &["--blocking-threads", "1"]);
    let r = s.get("/chunks?n=4&size=262144");
    assert_eq!(r.status, 200, "{}", r.status_line());
    assert_eq!(r.body.len(), 4 * 262144);
    for i in 0..4 {
        let part = &r.body[i * 262144..(i + 1) * 262144];
        assert!(
            part.iter().all(|&b| b == b'a' + i as u8),
            "chunk {i} is wrong"
        );
    }
}

// ---------------------------------------------------------------------------
// A crash after a finished response (issue 40)
// ---------------------------------------------------------------------------

/// The one handler is held by a slow request while 20 quick ones queue behind it, each on
/// its own connection (so deep that it hands their responses to the loop without a wake),
/// and then one that kills the worker. Every quick response was finished before the
/// crash, and each must reach its client, however the process dies.
fn finished_responses_survive_a_crash_by(how: &str, args: &[&str]) {
    let tmp = TempDir::new("crash-after");
    let mark = tmp.file("mark");
    let mut all = vec!["--blocking-threads", "1"];
    all.extend_from_slice(args);
    let s = Server::start("regress:app", &all);
    let mut blocker = s.connect();
    blocker.send(&get(&format!("/slow?secs=0.3&mark={mark}")));
    wait_for_file_containing(&mark, "started", PROMPT).expect("the slow request never ran");
    let mut quick: Vec<Conn> = (0..20)
        .map(|_| {
            let mut c = s.connect();
            c.send(&get("/hello"));
            c
        })
        .collect();
    // After them in the handler's ring.
    std::thread::sleep(Duration::from_millis(50));
    let mut killer = s.connect();
    killer.send(&get(&format!("/die?how={how}")));
    let mut lost = 0;
    for c in &mut quick {
        c.set_io_timeout(Duration::from_secs(10));
        match c.try_read_response() {
            Ok(r) if r.body_text() == "hello" => {}
            _ => lost += 1,
        }
    }
    assert_eq!(
        lost, 0,
        "{how}: {lost} of 20 finished responses never arrived"
    );
    drop(killer);
    drop(blocker);
    // The master replaced the worker (a connection the dying one took is lost with it).
    let served = wait_until(Duration::from_secs(10), || {
        try_get(&s, "/hello", PROMPT).is_ok_and(|r| r.body_text() == "hello")
    });
    assert!(served, "{how}: nothing answered after the crash");
}

#[test]
fn finished_responses_reach_their_clients_when_the_next_request_calls_os_exit() {
    finished_responses_survive_a_crash_by("exit", &[]);
}

#[test]
fn finished_responses_reach_their_clients_when_the_next_request_segfaults() {
    finished_responses_survive_a_crash_by("segv", &[]);
}

#[test]
fn finished_responses_reach_their_clients_when_the_next_request_aborts() {
    finished_responses_survive_a_crash_by("abort", &[]);
}

#[test]
fn finished_responses_reach_their_clients_when_a_request_kills_the_inline_worker() {
    finished_responses_survive_a_crash_by("exit", &["--blocking-threads", "0"]);
}
