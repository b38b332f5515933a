//! `--cpu-affinity`: each worker process, with its loop and handler threads, pinned to one
//! CPU (`auto`: the CPUs the server may run on, one per worker in turn; or a list), kept
//! across a replacement and a reload; bad lists refused at start; by default (`adaptive`)
//! the loop alone beside its handler while that suits them. The app is
//! tests/apps/regress.py.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(10);

/// `0-2,5` -> [0, 1, 2, 5].
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// The CPUs a process's (or thread's) `status` file says it may run on.
fn allowed_of(status_path: &str) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(parse_cpu_list)
        .unwrap_or_default()
}

/// The CPUs this test may run on (what `auto` sees when the server inherits them).
fn our_cpus() -> Vec<usize> {
    allowed_of("/proc/self/status")
}

/// Each thread of `pid` (by name) with the CPUs it may run on, once its loop thread exists.
fn threads_of(pid: u32) -> BTreeMap<String, Vec<Vec<usize>>> {
    let mut out: BTreeMap<String, Vec<Vec<usize>>> = BTreeMap::new();
    wait_until(PROMPT, || {
        out.clear();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let cpus = allowed_of(&dir.join("status").to_string_lossy());
            out.entry(name.trim().to_string()).or_default().push(cpus);
        }
        out.contains_key("m0s-loop") && out.contains_key("m0s-handler-0")
    });
    out
}

/// The one CPU every thread of worker `pid` is pinned to; fails if its threads differ or
/// any may run on more than one CPU.
fn pinned_cpu(s: &Server, pid: u32) -> usize {
    let threads = threads_of(pid);
    assert!(
        threads.contains_key("m0s-loop"),
        "worker {pid} has no loop thread: {threads:?}\n{}",
        s.log_text()
    );
    let all: Vec<&Vec<usize>> = threads.values().flatten().collect();
    let first = all[0].clone();
    assert!(
        first.len() == 1 && all.iter().all(|c| **c == first),
        "worker {pid}'s threads are not all pinned to one CPU: {threads:?}"
    );
    first[0]
}

/// This test's CPUs, or `None` (the test skipped: `require`) when there is only one.
fn two_or_more_cpus() -> Option<Vec<usize>> {
    let cpus = our_cpus();
    require(cpus.len() >= 2, "two CPUs or more").then_some(cpus)
}

#[test]
fn auto_pins_each_worker_with_its_threads_to_the_next_cpu() {
    let cpus = our_cpus();
    assert!(!cpus.is_empty(), "cannot read this process's CPUs");
    let workers = cpus.len().min(4) + 1;
    let s = Server::start(
        "regress:app",
        &["--workers", &workers.to_string(), "--cpu-affinity", "auto"],
    );
    let pids = s.wait_for_workers(workers, PROMPT);
    assert_served(&s, PROMPT, "with --cpu-affinity auto");
    let mut on: BTreeMap<usize, usize> = BTreeMap::new();
    for &pid in &pids {
        let cpu = pinned_cpu(&s, pid);
        assert!(
            cpus.contains(&cpu),
            "worker {pid} on CPU {cpu}, not one of {cpus:?}"
        );
        *on.entry(cpu).or_default() += 1;
    }
    // One worker more than CPUs used: every CPU taken gets one, the first a second.
    let used = workers - 1;
    assert_eq!(
        on.len(),
        used,
        "{workers} workers over {used} CPUs should use each once before any twice: {on:?}"
    );
    assert_eq!(
        on[&cpus[0]], 2,
        "the worker past the last CPU goes to the first: {on:?}"
    );
    // The master is not pinned.
    assert_eq!(
        allowed_of(&format!("/proc/{}/status", s.pid())),
        cpus,
        "the master's own CPUs changed"
    );
}

#[test]
fn auto_takes_only_the_cpus_the_server_was_given() {
    let cpus = our_cpus();
    let last = *cpus.last().expect("a CPU");
    let s = Server::builder("regress:app")
        .wrapped(&["taskset", "-c", &last.to_string()])
        .args(&["--workers", "2", "--cpu-affinity", "auto"])
        .start();
    for pid in s.wait_for_workers(2, PROMPT) {
        assert_eq!(
            pinned_cpu(&s, pid),
            last,
            "a CPU outside the server's own set"
        );
    }
    assert_served(&s, PROMPT, "under taskset with --cpu-affinity auto");
}

#[test]
fn a_listed_cpu_holds_for_replacements_and_reloads() {
    let cpu = *our_cpus().last().expect("a CPU");
    let s = Server::start(
        "regress:app",
        &["--workers", "2", "--cpu-affinity", &cpu.to_string()],
    );
    let first = s.wait_for_workers(2, PROMPT);
    for &pid in &first {
        assert_eq!(pinned_cpu(&s, pid), cpu);
    }
    // A worker killed is replaced on the same CPU.
    let replaced = s.kill_worker_until_replaced(first[0], 2, PROMPT);
    assert!(
        replaced,
        "the killed worker was not replaced\n{}",
        s.log_text()
    );
    for pid in s.worker_pids() {
        assert_eq!(pinned_cpu(&s, pid), cpu, "after a replacement");
    }
    // A reload's workers too.
    let reloaded = s.sighup_until_replaced(2, PROMPT);
    assert!(reloaded, "the workers were not reloaded\n{}", s.log_text());
    for pid in s.worker_pids() {
        assert_eq!(pinned_cpu(&s, pid), cpu, "after SIGHUP");
    }
    assert_served(&s, PROMPT, "after the reload");
}

/// `none` pins nothing, not even under the light load that the default pins the loop for.
#[test]
fn none_pins_nothing() {
    let cpus = our_cpus();
    let s = Server::start("regress:app", &["--cpu-affinity", "none"]);
    let pid = s.wait_for_workers(1, PROMPT)[0];
    let light = keep_asking(&s, "/spin?ms=2", 1, Duration::from_millis(1));
    let (pinned, seen) = wait_for_cpus(pid, Duration::from_secs(6), |t| {
        t.values().flatten().any(|c| *c != cpus)
    });
    stop_asking(light);
    assert!(
        !pinned,
        "a thread pinned with --cpu-affinity none: {seen:?}"
    );
}

#[test]
fn bad_cpu_lists_are_refused_at_start() {
    let beyond = our_cpus().last().copied().unwrap_or(0) + 1000;
    for (spec, says) in [
        (
            beyond.to_string(),
            format!("CPU {beyond} is not one this process may run on"),
        ),
        (
            "x".to_string(),
            "expected `auto`, `adaptive`, `none`, or CPU numbers and ranges".to_string(),
        ),
        ("1-0".to_string(), "runs backwards".to_string()),
        (
            "0,".to_string(),
            "expected `auto`, `adaptive`, `none`, or CPU numbers and ranges".to_string(),
        ),
    ] {
        let out = run_to_exit(
            &[
                "regress:app",
                "--app-dir",
                &apps_dir().to_string_lossy(),
                "--cpu-affinity",
                &spec,
            ],
            &[],
            PROMPT,
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "--cpu-affinity {spec:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(&says) && !out.stderr.contains(PANIC_MARKER),
            "--cpu-affinity {spec:?}: expected {says:?} in\n{}",
            out.stderr
        );
    }
}

#[test]
fn a_worker_draining_after_sigttou_leaves_its_cpu_to_the_next() {
    if two_or_more_cpus().is_none() {
        return;
    }
    let s = Server::start(
        "regress:app",
        &[
            "--workers",
            "2",
            "--cpu-affinity",
            "auto",
            "--blocking-threads",
            "4",
        ],
    );
    let workers = s.wait_for_workers(2, PROMPT);
    // A kept-alive connection to each worker (asked which one answered, until both have),
    // then a slow request on each, so the one SIGTTOU removes keeps draining while
    // SIGTTIN starts another.
    let mut conns: Vec<Conn> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let found = wait_until(PROMPT, || {
        let mut c = s.connect();
        c.send(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n");
        let pid: u32 = c.read_response().body_text().parse().unwrap();
        if seen.insert(pid) {
            conns.push(c);
        }
        seen.len() == 2
    });
    assert!(found, "only {seen:?} of {workers:?} answered");
    for c in &mut conns {
        c.send(b"GET /slow?secs=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    }
    std::thread::sleep(Duration::from_millis(300));
    s.signal(libc::SIGTTOU);
    std::thread::sleep(Duration::from_millis(300));
    s.signal(libc::SIGTTIN);
    for c in &mut conns {
        assert_eq!(c.read_response().status, 200);
    }
    // Once the drain ends, the two workers left are on two CPUs. (Each worker's main
    // thread is pinned as its threads are: read without waiting for them, since a
    // draining worker may exit between the listing and the read.)
    let mut placed = Vec::new();
    let balanced = wait_until(PROMPT, || {
        let pids = s.worker_pids();
        placed = pids
            .iter()
            .map(|p| allowed_of(&format!("/proc/{p}/status")))
            .collect();
        pids.len() == 2 && placed.iter().all(|c| c.len() == 1) && placed[0] != placed[1]
    });
    assert!(
        balanced,
        "after SIGTTOU and SIGTTIN the workers are on CPUs {placed:?}\n{}",
        s.log_text()
    );
}

#[test]
fn a_reload_after_the_masters_cpus_narrowed_pins_to_what_is_left() {
    let Some(cpus) = two_or_more_cpus() else {
        return;
    };
    let list = format!("{},{}", cpus[0], cpus[1]);
    let s = Server::start("regress:app", &["--workers", "2", "--cpu-affinity", &list]);
    s.wait_for_workers(2, PROMPT);
    // An operator narrows the master to the second CPU (`taskset -p`), then reloads: the
    // new workers must boot (they do not judge the list against their own, narrowed
    // set) and go to the CPU the master may still use.
    let out = std::process::Command::new("taskset")
        .args(["-pc", &cpus[1].to_string(), &s.pid().to_string()])
        .output()
        .expect("taskset");
    assert!(out.status.success(), "taskset -p: {out:?}");
    let reloaded = s.sighup_until_replaced(2, PROMPT);
    assert!(reloaded, "the reload did not complete\n{}", s.log_text());
    for pid in s.worker_pids() {
        assert_eq!(
            pinned_cpu(&s, pid),
            cpus[1],
            "a worker outside the master's CPUs"
        );
    }
    assert_served(&s, PROMPT, "after the reload");
    assert!(!s.log_text().contains("failed to boot"), "{}", s.log_text());
}

type Threads = BTreeMap<String, Vec<Vec<usize>>>;

/// Waits up to `limit` for the CPUs of worker `pid`'s threads (by name) to satisfy `ok`;
/// whether they did, and what was seen last.
fn wait_for_cpus(pid: u32, limit: Duration, ok: impl Fn(&Threads) -> bool) -> (bool, Threads) {
    let mut seen = Threads::new();
    let done = wait_until(limit, || {
        seen = threads_of(pid);
        ok(&seen)
    });
    (done, seen)
}

/// The one CPU the loop of a worker is pinned to while every other thread of it may run on
/// `cpus`; `None` otherwise.
fn loop_alone_pinned(threads: &Threads, cpus: &[usize]) -> Option<usize> {
    let mut pinned = None;
    for (name, sets) in threads {
        for set in sets {
            match name.as_str() {
                "m0s-loop" if set.len() == 1 => pinned = Some(set[0]),
                _ if set == cpus => {}
                _ => return None,
            }
        }
    }
    pinned
}

/// The `/proc` directory of thread `name` of worker `pid`.
fn thread_dir(pid: u32, name: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .map(|t| t.path())
        .find(|dir| std::fs::read_to_string(dir.join("comm")).is_ok_and(|comm| comm.trim() == name))
}

/// The CPU thread `name` of worker `pid` last ran on (`/proc`'s `processor` field).
fn last_cpu_of(pid: u32, name: &str) -> Option<usize> {
    let stat = std::fs::read_to_string(thread_dir(pid, name)?.join("stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    // Field 39 of the line, the 37th after the name.
    after_name.split(' ').nth(36)?.parse().ok()
}

/// Lets thread `name` of worker `pid` run only on `cpus` (as `taskset -p` would).
fn set_thread_cpus(pid: u32, name: &str, cpus: &[usize]) {
    let dir = thread_dir(pid, name).expect("no such thread");
    let tid: libc::pid_t = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
    // SAFETY: an all-zero cpu_set_t is a valid, empty set; each CPU is below CPU_SETSIZE
    // (it came from /proc); sched_setaffinity reads the live set of the given size.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// Client threads that each send `target` on a keep-alive connection, pausing `pause`
/// between requests, until the returned flag is set; they return how many answers they got.
fn keep_asking(
    s: &Server,
    target: &'static str,
    clients: usize,
    pause: Duration,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<usize>>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads = (0..clients)
        .map(|_| {
            let stop = stop.clone();
            let addr = s.addr();
            std::thread::spawn(move || {
                let mut c = Conn::connect(addr);
                let mut answered = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    c.send(&get(target));
                    assert_eq!(c.read_response().status, 200);
                    answered += 1;
                    std::thread::sleep(pause);
                }
                answered
            })
        })
        .collect();
    (stop, threads)
}

fn stop_asking(
    (stop, threads): (
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        Vec<std::thread::JoinHandle<usize>>,
    ),
) -> usize {
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// One worker with one handler thread (where `adaptive` places its loop), logging each
/// move; the server and the worker's pid.
fn one_handler_worker() -> (Server, u32) {
    let s = Server::start(
        "regress:app",
        &[
            "--workers",
            "1",
            "--blocking-threads",
            "1",
            "--log-level",
            "debug",
        ],
    );
    let pid = s.wait_for_workers(1, PROMPT)[0];
    (s, pid)
}

/// `--cpu-affinity adaptive`, the default: in a worker using part of a core, the loop
/// thread is pinned to the CPU its handler runs on within seconds, and only the loop (the
/// app keeps every CPU); once the app keeps that CPU full while another one idles, the loop
/// may run anywhere again. (Run alone: .config/nextest.toml. A busy machine leaves no CPU
/// idle for the second half to see.)
///
/// Informational, not run by default: its outcome depends on what else loads the host
/// (other processes crowding the loop's CPU let it go early; none spare keeps it pinned),
/// so it failed on loaded hosts however right the server was. The decisions it checks are
/// asserted on recorded readings, quiet and loaded, by the `recorded_on_*` unit tests in
/// src/worker/placement.rs. To watch it on a quiet machine:
/// `cargo nextest run --test affinity --run-ignored only -E 'test(/^by_default_the_loop_runs_beside_a_light/)'`.
#[test]
#[ignore = "informational: depends on a quiet host; the decisions are unit-tested in src/worker/placement.rs"]
fn by_default_the_loop_runs_beside_a_light_handler_and_is_let_go_when_its_cpu_fills() {
    let Some(cpus) = two_or_more_cpus() else {
        return;
    };
    // The loop lets its handler go, by design, when the kernel moves the handler more than
    // MAX_FOLLOWS times a second; some kernels, on some runs, wake a handler on the other
    // CPU that often under this load. That run says nothing of what is tested here, so
    // it is tried again with a fresh server (the hold-off would keep the first one apart).
    let apart = |t: &Threads| t.values().flatten().all(|c| *c == cpus);
    let mut attempt = 0;
    let (s, pid) = loop {
        attempt += 1;
        let (s, pid) = one_handler_worker();
        assert!(apart(&threads_of(pid)), "pinned before any load");

        // About 0.65 of a core: 2 ms of Python, then 1 ms of quiet.
        let light = keep_asking(&s, "/spin?ms=2", 1, Duration::from_millis(1));
        let (pinned, seen) = wait_for_cpus(pid, Duration::from_secs(15), |t| {
            loop_alone_pinned(t, &cpus).is_some()
        });
        // Beside the handler: where the handler last ran is where the loop is pinned, nearly
        // always. The loop goes after it within milliseconds when the kernel moves it, so a
        // look that catches the handler just moved looks again 10 ms later.
        let is_beside = || {
            let threads = threads_of(pid);
            let handler = last_cpu_of(pid, "m0s-handler-0");
            handler.is_some() && loop_alone_pinned(&threads, &cpus) == handler
        };
        let mut beside = 0;
        for _ in 0..20 {
            if is_beside() || {
                std::thread::sleep(Duration::from_millis(10));
                is_beside()
            } {
                beside += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The app sees every CPU: its thread, one it starts, a process it starts.
        let pinned_loop = loop_alone_pinned(&threads_of(pid), &cpus);
        let view = s.get("/cpus").body_text();
        let views: Vec<Vec<usize>> = view
            .lines()
            .map(|l| parse_cpu_list(l.split_once(' ').unwrap().1))
            .collect();
        // Where the handler goes (here, sent by its affinity), the loop goes after it.
        let from = loop_alone_pinned(&threads_of(pid), &cpus);
        let to = *cpus.iter().find(|&&c| Some(c) != from).unwrap();
        set_thread_cpus(pid, "m0s-handler-0", &[to]);
        let (followed, seen_after) = wait_for_cpus(pid, Duration::from_secs(2), |t| {
            t.get("m0s-loop") == Some(&vec![vec![to]])
        });
        set_thread_cpus(pid, "m0s-handler-0", &cpus);
        // Past the settling time, still beside it.
        std::thread::sleep(Duration::from_secs(3));
        let later = threads_of(pid);
        let answered = stop_asking(light);
        let log = s.log_text();
        let kept_moving = log.contains("now runs on every allowed CPU (the kernel keeps moving");
        if kept_moving && attempt < 3 {
            eprintln!("attempt {attempt}: the kernel kept moving the handler; again\n{log}");
            continue;
        }
        assert!(
            pinned,
            "the loop not pinned alone under a light load ({answered} answered): {seen:?}\n{log}"
        );
        assert!(log.contains("this worker's loop now runs beside its handler (CPU"));
        if kept_moving {
            // Three servers in a row: on this host the kernel moves a handler that sleeps
            // for 1 ms between requests that often (it balances the handler off the CPU
            // where the loop is pinned beside it). The loop letting go is what happened and
            // what is checked: it runs on every CPU again.
            assert!(
                apart(&later),
                "the log says the loop was let go, but: {later:?}\n{log}"
            );
            eprintln!(
                "the kernel moved the handler too often on three servers in a row: the loop \
                 letting go was checked, not its staying beside the handler"
            );
            s.assert_no_panic();
            return;
        }
        assert!(
            beside >= 15,
            "beside the handler in {beside} of 20 looks\n{log}"
        );
        assert!(
            followed,
            "the loop stayed on CPU {from:?} when its handler went to CPU {to}: {seen_after:?}\n{log}"
        );
        assert!(
            pinned_loop.is_some() && views.len() == 3 && views.iter().all(|v| *v == cpus),
            "with the loop pinned ({pinned_loop:?}) the app saw:\n{view}"
        );
        assert!(
            loop_alone_pinned(&later, &cpus).is_some(),
            "a light worker's loop did not stay pinned (attempt {attempt}): {later:?}\n{log}"
        );
        break (s, pid);
    };

    // Three clients without pause: the handler keeps its CPU full.
    let heavy = keep_asking(&s, "/spin?ms=5", 3, Duration::ZERO);
    let (spread, seen) = wait_for_cpus(pid, Duration::from_secs(20), apart);
    let answered = stop_asking(heavy);
    let log = s.log_text();
    assert!(
        spread,
        "the loop still pinned with its CPU full ({answered} answered): {seen:?}\n{log}"
    );
    assert!(log.contains("this worker's loop now runs on every allowed CPU"));
    s.assert_no_panic();
}

/// Traffic in bursts: a worker with a light load for 1.5 s at a time and 2 s of quiet
/// between is judged by its bursts (a quiet window neither counts nor undoes the busy one
/// before it), so its loop goes beside its handler as under a steady light load. (Run
/// alone, as the test above.)
#[test]
fn by_default_the_loop_runs_beside_a_handler_busy_in_bursts() {
    if two_or_more_cpus().is_none() {
        return;
    }
    let (s, _) = one_handler_worker();
    let beside = || {
        s.log_text()
            .contains("this worker's loop now runs beside its handler (CPU")
    };
    let mut bursts = 0;
    let mut answered = 0;
    while bursts < 5 && !beside() {
        bursts += 1;
        // About 0.65 of a core, as in the test above.
        let light = keep_asking(&s, "/spin?ms=2", 1, Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(1500));
        answered += stop_asking(light);
        if !beside() {
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    let log = s.log_text();
    assert!(
        beside(),
        "the loop not beside its handler after {bursts} bursts ({answered} answered)\n{log}"
    );
    s.assert_no_panic();
}

/// A loop beside its handler whose app turns to long requests that fill their CPU (200 ms
/// of Python each, one after another, from one client) is let go: its sleeps through a request in hand are
/// no quiet, so the window is judged. (Run alone, as the tests above.)
#[test]
fn by_default_the_loop_runs_beside_a_handler_until_long_requests_fill_its_cpu() {
    let Some(cpus) = two_or_more_cpus() else {
        return;
    };
    let (s, pid) = one_handler_worker();
    let light = keep_asking(&s, "/spin?ms=2", 1, Duration::from_millis(1));
    let (pinned, seen) = wait_for_cpus(pid, Duration::from_secs(15), |t| {
        loop_alone_pinned(t, &cpus).is_some()
    });
    stop_asking(light);
    let log = s.log_text();
    if !pinned && log.contains("the kernel keeps moving its handler") {
        // What `by_default_the_loop_runs_beside_a_light_handler_...` tries again for.
        eprintln!("the kernel kept moving the handler: nothing here to let go\n{log}");
        return;
    }
    assert!(pinned, "not pinned under a light load: {seen:?}\n{log}");
    // One client: one request in hand at a time, through which the loop sleeps.
    let long = keep_asking(&s, "/spin?ms=200", 1, Duration::ZERO);
    let apart = |t: &Threads| t.values().flatten().all(|c| *c == cpus);
    let (spread, seen) = wait_for_cpus(pid, Duration::from_secs(20), apart);
    let answered = stop_asking(long);
    let log = s.log_text();
    assert!(
        spread,
        "the loop still pinned beside a handler running long requests ({answered} \
         answered): {seen:?}\n{log}"
    );
    assert!(log.contains("now runs on every allowed CPU ("), "{log}");
    s.assert_no_panic();
}

/// A loop beside its handler whose CPUs something else sets (`taskset -p` on its thread) is
/// left where that put it, not pinned back. (Run alone, as the test above.)
#[test]
fn by_default_a_loop_moved_by_something_else_is_left_there() {
    let Some(cpus) = two_or_more_cpus() else {
        return;
    };
    let s = Server::start("regress:app", &["--log-level", "debug"]);
    let pid = s.wait_for_workers(1, PROMPT)[0];
    let light = keep_asking(&s, "/spin?ms=2", 1, Duration::from_millis(1));
    let (pinned, seen) = wait_for_cpus(pid, Duration::from_secs(15), |t| {
        loop_alone_pinned(t, &cpus).is_some()
    });
    assert!(
        pinned,
        "not pinned under a light load: {seen:?}\n{}",
        s.log_text()
    );
    set_thread_cpus(pid, "m0s-loop", &cpus);
    // Two windows and more: still where `taskset` put it.
    std::thread::sleep(Duration::from_secs(3));
    let after = threads_of(pid);
    stop_asking(light);
    let log = s.log_text();
    assert_eq!(
        after.get("m0s-loop"),
        Some(&vec![cpus.clone()]),
        "pinned again after being moved\n{log}"
    );
    assert!(
        log.contains("this worker's loop was moved off CPU"),
        "{log}"
    );
}

/// Inline mode and several handlers have no one handler to run the loop beside: `adaptive`
/// said outright says so at start, and serves; left as the default, it says nothing.
#[test]
fn adaptive_without_one_handler_warns_that_it_does_nothing() {
    for threads in ["0", "2"] {
        let warns = |said: bool| {
            let mut args = vec!["--blocking-threads", threads];
            if said {
                args.extend(["--cpu-affinity", "adaptive"]);
            }
            let s = Server::start("regress:app", &args);
            assert_served(&s, PROMPT, "--cpu-affinity adaptive without one handler");
            let want =
                format!("--cpu-affinity adaptive: does nothing with --blocking-threads {threads}");
            s.stderr_text()
                .lines()
                .any(|l| l.contains("[WARN]") && l.contains(&want))
        };
        assert!(warns(true), "no warning with --blocking-threads {threads}");
        assert!(
            !warns(false),
            "a warning for the default with --blocking-threads {threads}"
        );
    }
}
