"""The machine and its processes: versions and hardware for a report's header, a process
tree's per-thread CPU time (/proc), the host's steal time (/proc/stat), the CPU time of the
client processes reaped, and `taskset -c` CPU lists."""

import os
import platform
import resource
import socket
import subprocess

from .config import MIB, ROOT, TICK, VENV_BIN


def versions(servers):
    def out(cmd, any_rc=False):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if r.returncode != 0 and not any_rc:
                return None
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None

    py = os.path.join(VENV_BIN, "python")
    w = out(["wrk", "-v"], any_rc=True)  # "wrk 4.1.0 [epoll] Copyright ...", exit 1
    v = {"wrk": w.split(" Copyright")[0] if w else None, "python": platform.python_version()}
    if os.path.exists(py):
        v["venv_python"] = out([py, "--version"])  # the CPython every server runs
        for pkg in ("granian", "bjoern-binary", "flask", "gunicorn", "fastwsgi", "pyuwsgi"):
            v[pkg] = out([py, "-c", "import importlib.metadata as m, sys; "
                          f"print(m.version('{pkg}'))"])
    for srv in servers:
        if srv["kind"] == "m0serve":
            binary = srv["binary"] or os.path.join(ROOT, "target", "release", "m0serve")
            v["m0serve" + (f"@{srv['binary']}" if srv["binary"] else "")] = \
                out([binary, "--version"])
    try:
        v["m0serve_commit"] = subprocess.run(
            ["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
            text=True).stdout.strip() or None
    except OSError:
        pass
    return v


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / MIB, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "mem_gib": mem, "kernel": platform.release(),
            "hostname": socket.gethostname()}


def tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def sample(pid):
    """{(pid, tid): (name, cpu_seconds)} over the process tree."""
    res = {}
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            res[(p, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return res


def host_cpu():
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where it cannot be read:
    the share of a run's CPU time the hypervisor gave to others (a run that lost much of
    the machine is not comparable with its round's neighbours)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[7], sum(fields)


def children_cpu_s():
    """CPU seconds used so far by the children reaped (the load generators: a server, also
    a child, is reaped only after its run)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_list(spec):
    """The CPUs a `taskset -c` list names ('0,2,4-7'), in order."""
    out = []
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        out += range(int(lo), int(hi) + 1) if sep else [int(lo)]
    return out
