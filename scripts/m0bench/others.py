"""`--trace-others`: what the rest of the machine ran beside a run at a rate (perf's
sched_switch events), and each target's figures outside the windows around those runs."""

import bisect
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from .host import tree


# A run of another process's thread this long or longer (on any CPU) marks a window...
OTHERS_MIN_US = 200
# ... from this long before it starts to this long plus its own length after it ends (the
# backlog it left drains), and the requests due in a window are left out of the figures
# outside other processes.
OTHERS_BEFORE_US = 1000
OTHERS_AFTER_US = 2000
# A run whose end the trace lacks (the next switch recorded on its CPU is from another
# thread) is taken to end at that switch, at most this long after it began. (This VM's PID
# 1, its agent, shows its threads' switches in and never out, in perf and ftrace alike; its
# bursts last up to a few ms.)
OTHERS_MAX_RUN_US = 10_000


class OthersTrace:
    """`perf record -e sched:sched_switch -a` over one m0load run at a rate, with
    `m0load --log`: afterwards each request's due time is set beside the runs of every
    thread on the machine that is neither the servers' nor m0load's (another tenant's
    daemon, a kernel thread, perf itself), and each target gets its figures over the
    requests due outside those runs' windows. The timestamps are CLOCK_MONOTONIC on both
    sides (`perf record -k CLOCK_MONOTONIC`, m0load's log).

    A switch from one of ours (the servers' threads when the trace starts, m0load, the
    idle task) to another of ours is filtered out in the kernel: recording each of the
    tens of thousands a second would cost the server that switches most (threaded m0serve
    at 27 000 req/s: 7 % more of its CPU, against 3 % with the filter); the rest are a few
    thousand a second."""

    def __init__(self, server_pids):
        self.dir = tempfile.mkdtemp(prefix="m0bench-trace-")
        self.log = os.path.join(self.dir, "requests.txt")
        self.data = os.path.join(self.dir, "perf.data")
        # Ours: the idle task (0), the servers' threads, and m0load's (by name: it starts
        # after the trace).
        self.tids = {0}
        for pid in server_pids:
            for p in tree(pid):
                try:
                    self.tids.update(int(t) for t in os.listdir(f"/proc/{p}/task"))
                except OSError:
                    pass
        ours = {side: " && ".join([f'{side}_comm != "m0load"'] +
                                  [f"{side}_pid != {t}" for t in sorted(self.tids)])
                for side in ("prev", "next")}
        # Its messages go to a file: a pipe nobody reads could fill and stop it.
        with open(os.path.join(self.dir, "perf.err"), "w+b") as err:
            self.perf = subprocess.Popen(
                ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "sched:sched_switch",
                 "--filter", f"({ours['prev']}) || ({ours['next']})", "-a", "-o", self.data],
                stdout=subprocess.DEVNULL, stderr=err)
            # perf opens its events before it writes the file's header: wait for the header.
            deadline = time.time() + 10
            while not (os.path.exists(self.data) and os.path.getsize(self.data) > 0):
                if self.perf.poll() is not None or time.time() > deadline:
                    self.perf.kill()
                    self.perf.wait()
                    err.seek(0)
                    why = err.read().decode(errors="replace")[-300:]
                    self.close()
                    raise RuntimeError(f"perf record did not start: {why}")
                time.sleep(0.02)

    def figures(self, targets):
        """Stops perf; returns one dict a target: requests, excluded (the share left out),
        p50/p90/p99/p999 ms outside the windows, and the other processes' runs (count,
        ms) that made windows."""
        self.perf.send_signal(signal.SIGINT)
        try:
            self.perf.wait(30)
        except subprocess.TimeoutExpired:
            self.perf.kill()
            self.perf.wait()
        p = subprocess.run(["perf", "script", "-i", self.data, "--ns", "-F", "cpu,time,trace"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"perf script failed: {p.stderr[-300:]}")
        windows, runs, run_ms = others_windows(p.stdout, self.tids)
        out = []
        with open(self.log) as f:
            log = [tuple(map(int, line.split())) for line in f]
        for t in range(targets):
            lat = [(due, us) for i, due, us in log if i == t]
            out.append(outside_windows(lat, windows) | {"other_runs": runs,
                                                         "other_ms": round(run_ms, 1)})
        return out

    def close(self):
        if self.perf.poll() is None:
            self.perf.kill()
            self.perf.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def others_windows(script, ours):
    """From `perf script -F cpu,time,trace` of sched_switch events: the merged windows, in
    CLOCK_MONOTONIC ns, around the runs of OTHERS_MIN_US or more of the threads that are
    not ours (thread ids in `ours`, or named m0load); their count and total ms.

    A run is the switched-to thread's, from its event to the next event on that CPU (the
    kernel filter drops only switches between two of ours, so the next event on the CPU
    of a run not ours is the one that ends it, unless the trace lacks it:
    OTHERS_MAX_RUN_US)."""
    line_re = re.compile(r"^\s*\[(\d+)\]\s+(\d+)\.(\d{9}):.* prev_pid=(\d+) .*"
                         r" ==> next_comm=(.*?) next_pid=(\d+) next_prio=")
    running = {}  # cpu -> (since, thread id, one of ours)
    spans, total = [], 0
    for line in script.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        cpu = int(m.group(1))
        t = int(m.group(2)) * 1_000_000_000 + int(m.group(3))
        tid = int(m.group(6))
        prev = running.get(cpu)
        running[cpu] = (t, tid, m.group(5) == "m0load" or tid in ours)
        if prev is None or prev[2]:
            continue
        length = t - prev[0]
        if int(m.group(4)) != prev[1]:
            length = min(length, OTHERS_MAX_RUN_US * 1000)
        if length < OTHERS_MIN_US * 1000:
            continue
        total += length
        spans.append((prev[0] - OTHERS_BEFORE_US * 1000,
                      prev[0] + length + OTHERS_AFTER_US * 1000 + length))
    spans.sort()
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged, len(spans), total / 1e6


def outside_windows(lat, windows):
    """Percentiles (m0load's rank: the ceil(p% of n)th) of the latencies whose due time
    falls outside every window; `lat` is [(due_ns, us)]."""
    starts = [w[0] for w in windows]
    kept = []
    for due, us in lat:
        i = bisect.bisect_right(starts, due) - 1
        if i < 0 or due > windows[i][1]:
            kept.append(us)
    kept.sort()

    def at(p):
        if not kept:
            return None
        return kept[max(math.ceil(p / 100 * len(kept)), 1) - 1] / 1000

    return {"requests": len(kept), "excluded": round(1 - len(kept) / max(len(lat), 1), 4),
            "p50_ms": at(50), "p90_ms": at(90), "p99_ms": at(99), "p999_ms": at(99.9)}


def require_perf():
    """--trace-others: exits with the reason unless perf can record sched_switch events on
    every CPU (as root, or with kernel.perf_event_paranoid at -1)."""
    probe = tempfile.mkdtemp(prefix="m0bench-perf-")
    try:
        r = subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o",
                            os.path.join(probe, "d"), "--", "true"], capture_output=True,
                           text=True)
    except OSError as e:
        raise SystemExit(f"--trace-others needs perf: {e}") from None
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if r.returncode != 0:
        raise SystemExit(f"--trace-others: perf cannot record sched_switch system-wide "
                         f"(root, or kernel.perf_event_paranoid -1): {r.stderr[-300:]}")
