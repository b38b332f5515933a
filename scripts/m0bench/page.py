#!/usr/bin/env python3
"""BENCHMARKS.md's figures, from the runs they cite.

    python3 scripts/m0bench/page.py            # --check: exit 1 naming what differs
    python3 scripts/m0bench/page.py --write    # rewrite the generated regions

Every table of figures on the page sits between two comments:

    <!-- generated from benchmarks/runs/RUN (KIND): do not edit -->
    ...
    <!-- end -->

and is made here from that run directory: its `bench.json` (scripts/bench.py's --json)
where it has one, else the tables of its `bench.md` as recorded, or the JSON of
scripts/overload.py, scripts/memory.py or scripts/static_bench.py. KIND says which table:
a scenario of a bench.py run (hello, 64k, post1m, flask), `p99` (its fixed-rate table),
`64k-m0load`, `overload`, `memory`, `static`, `static-p99`.

--check also checks that the page has at most 200 lines; that every run directory it names
exists; that each chart it shows (docs/bench-*.svg) was drawn from a run it cites (the
date and command in the chart's metadata); that every relative link of BENCHMARKS.md and
benchmarks/*.md (and those of README.md and docs/*.md into them) resolves, anchors
included; and that
every pointer in src/, docs/, scripts/ and README.md written `benchmarks/decisions.md,
"NAME"`, `benchmarks/decisions.md ("NAME")` or the same with BENCHMARKS.md names a
heading of that file that contains NAME (case-insensitive).

Standard library only; runs from any directory (the repository is this file's
grandparent's parent unless --root says otherwise). A run's medians and the servers' names
come from the package's own report code, so the page reads a run as scripts/bench.py
reports it.
"""

import argparse
import difflib
import json
import os
import re
import statistics
import sys

# Run as a script, this file's directory is on the path, not the package's parent.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from m0bench.config import DISPLAY  # noqa: E402
from m0bench.report import display, fmt_int, median_run  # noqa: E402

MAX_LINES = 200
MARK = re.compile(r"^<!-- generated from (benchmarks/runs/[^ ]+) \(([\w-]+)\): do not edit -->$")
END = "<!-- end -->"
SCENARIOS = ("hello", "64k", "post1m", "flask")
# How the page names the servers of a bench.py run (the rest by their kind's name).
NAMES = {"m0serve": "m0serve", "m0serve:blocking-threads=0": "m0serve inline",
         "m0serve:static-response": "the loop alone, no Python"}
# A scenario's table names it in its first column's head.
TITLES = {"hello": "hello world, req/s", "64k": "64 KiB response, req/s",
          "post1m": "1 MiB POST echoed, req/s (= MiB/s each way)",
          "flask": "small Flask app, req/s"}


class Problem(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Reading a run


def md_tables(text):
    """[(heading, [row dict])] for every table of a markdown text, each with the nearest
    heading above it."""
    out, heading, lines = [], "", text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-|: ]+\|$", lines[i + 1]):
            head = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows.append(dict(zip(head, cells)))
                i += 1
            out.append((heading, rows))
            continue
        i += 1
    return out


def header(text, key):
    """A `- **Key**: value` line of a bench.md header."""
    m = re.search(r"^- \*\*" + re.escape(key) + r"\*\*: (.*)$", text, re.M)
    return m.group(1).strip() if m else None


def unbold(s):
    return s.replace("**", "")


def json_summary(doc):
    """{(scenario, server, conns): [runs in round order]} over a bench.json's good runs."""
    out = {}
    for r in doc["results"]:
        if "error" in r:
            continue
        out.setdefault((r["scenario"], r["server"], r["connections"]), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r.get("round", 0))
    return out


def rows_from_json(doc, scen):
    """A scenario's rows as bench.py's markdown gives them (the columns the page uses)."""
    summary = json_summary(doc)
    servers = doc["meta"]["servers"]
    by_kind = {}
    for s in servers:
        by_kind.setdefault(s.partition(":")[0].partition("@")[0], s)
    refs = [(by_kind[k], DISPLAY[k]) for k in ("granian", "bjoern", "fastwsgi") if k in by_kind]
    rows = []
    conns_all = sorted({k[2] for k in summary if k[0] == scen})
    for conns in conns_all:
        for s in servers:
            runs = summary.get((scen, s, conns))
            if not runs:
                continue
            med = statistics.median(x["rps"] for x in runs)
            r = median_run(runs)
            row = {"conns": str(conns), "server": display(s), "req/s": fmt_int(med)}
            for ref, label in refs:
                other = summary.get((scen, ref, conns))
                row[f"vs {label}"] = "" if s == ref or not other else \
                    f"{med / statistics.median(x['rps'] for x in other):.2f}×"
            if "latency_p999_ms" in r:
                row["p50 ms"] = f"{r['latency_p50_ms']:.3f}"
                row["p99 ms"] = f"{r['latency_p99_ms']:.3f}"
                row["p99.9 ms"] = f"{r['latency_p999_ms']:.3f}"
                row["rounds"] = " ".join(f"{x['latency_p99_ms']:.2f}" for x in runs)
                o = [x["outside_others"] for x in runs if "outside_others" in x]
                p99 = [x["p99_ms"] for x in o if x["p99_ms"] is not None]
                p999 = [x["p999_ms"] for x in o if x["p999_ms"] is not None]
                row["outside"] = (f"{statistics.median(p99):.3f} / {statistics.median(p999):.2f}"
                                  if p99 else "")
            elif "latency_p99_ms" in r:
                row["p99 ms"] = f"{r['latency_p99_ms']:.2f}"
            if "cpu_us_per_req" in r:
                row["CPU µs/req"] = f"{r['cpu_us_per_req']:.1f}"
            rows.append(row)
    return rows


class Run:
    """One directory of benchmarks/runs."""

    def __init__(self, root, rel):
        self.rel = rel
        self.path = os.path.join(root, rel)
        if not os.path.isdir(self.path):
            raise Problem(f"{rel}: no such run directory")

    def file(self, name):
        p = os.path.join(self.path, name)
        return p if os.path.isfile(p) else None

    def json(self, name):
        p = self.file(name)
        if not p:
            raise Problem(f"{self.rel}: no {name}")
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    def md(self):
        p = self.file("bench.md")
        if not p:
            raise Problem(f"{self.rel}: neither bench.json nor bench.md")
        with open(p, encoding="utf-8") as f:
            return f.read()

    def scenario_rows(self, scen):
        if self.file("bench.json"):
            return rows_from_json(self.json("bench.json"), scen)
        for heading, rows in md_tables(self.md()):
            if heading.split(":")[0].strip() == scen and rows and "req/s" in rows[0]:
                return rows
        raise Problem(f"{self.rel}/bench.md: no table for the scenario {scen}")

    def fixed_rate_rows(self):
        if self.file("bench.json"):
            doc = self.json("bench.json")
            return [r for s in doc["meta"]["scenarios"] for r in rows_from_json(doc, s)]
        for _, rows in md_tables(self.md()):
            if rows and "p50 ms" in rows[0]:
                out = []
                for r in rows:
                    m = re.match(r"^(\S+) \(([\d. ]+)\)$", unbold(r["p99 ms (per round)"]))
                    if not m:
                        raise Problem(f"{self.rel}/bench.md: p99 cell {r['p99 ms (per round)']!r}")
                    server = {"m0serve inline": "m0serve:blocking-threads=0"}.get(r["server"], r["server"])
                    out.append({"conns": r["conns"], "server": server, "p50 ms": unbold(r["p50 ms"]),
                                "p99 ms": m.group(1), "rounds": m.group(2),
                                "p99.9 ms": unbold(r["p99.9 ms"]),
                                "outside": unbold(r["p99 / p99.9 outside other processes"]),
                                "CPU µs/req": unbold(r["CPU µs/req"])})
                return out
        raise Problem(f"{self.rel}/bench.md: no fixed-rate table")

    def date_command(self):
        if self.file("bench.json"):
            meta = self.json("bench.json")["meta"]
            return meta.get("date"), meta.get("command")
        if self.file("bench.md"):
            text = self.md()
            date, cmd = header(text, "Date"), header(text, "Command")
            return (date.split()[0] if date else None), (cmd.strip("`") if cmd else None)
        return None, None


# ---------------------------------------------------------------------------------------
# The tables


def table(head, rows):
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(r) + " |" for r in rows]


def gen_scenario(run, scen):
    rows = run.scenario_rows(scen)
    conns = sorted({int(r["conns"]) for r in rows})
    servers = []
    for r in rows:
        if r["server"] not in servers:
            servers.append(r["server"])
    cell = {(r["server"], int(r["conns"])): r for r in rows}
    ours = [s for s in servers if s.startswith("m0serve")]
    threaded = "m0serve" if "m0serve" in ours else None
    inline = "m0serve:blocking-threads=0" if "m0serve:blocking-threads=0" in ours else None
    body = []
    for s in ours:
        body.append([NAMES.get(s, s)] + [cell[(s, c)]["req/s"] if (s, c) in cell else ""
                                         for c in conns])
    for s in servers:
        if s in ours:
            continue
        line = [s]
        for c in conns:
            r = cell.get((s, c))
            if not r:
                line.append("")
                continue
            ratios = [cell[(m, c)].get(f"vs {s}", "") for m in (threaded, inline)
                      if m and (m, c) in cell]
            line.append(r["req/s"] + (f" ({' / '.join(ratios)})" if any(ratios) else ""))
        body.append(line)
    return table([TITLES.get(scen, scen)] + [f"{c} conns" for c in conns], body)


def gen_p99(run):
    body = []
    for r in run.fixed_rate_rows():
        body.append([r["conns"], NAMES.get(r["server"], r["server"]), r["p50 ms"],
                     f"{r['p99 ms']} ({r['rounds']})", r["p99.9 ms"], r["outside"],
                     r["CPU µs/req"]])
    return table(["conns", "server", "p50 ms", "p99 ms (per round)", "p99.9 ms",
                  "p99 / p99.9 outside other processes", "CPU µs/req"], body)


def gen_64k_m0load(run):
    text = " ".join(run.md().split())
    rng = re.search(r"m0serve ([\d ]+-[\d ]+) req/s, Granian ([\d ]+-[\d ]+), FastWSGI ([\d ]+-[\d ]+)\.", text)
    gran = re.search(r"Against Granian per round: ([\d. ]+) \(\*\*([\d.]+)\*\*\)", text)
    fast = re.search(r"Against FastWSGI ([\d.]+) by the median", text)
    if not (rng and gran and fast):
        raise Problem(f"{run.rel}/bench.md: not the recorded sentences this table is read from")
    return table(["server", "req/s, lowest-highest round", "m0serve ÷ this server"],
                 [["m0serve", rng.group(1), ""],
                  ["Granian", rng.group(2), f"{gran.group(2)} (per round {gran.group(1).strip()})"],
                  ["FastWSGI", rng.group(3), f"{fast.group(1)} (median)"]])


def secs(x):
    if x is None:
        return "-"
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.1f} s"


def gen_overload(run):
    runs = run.json("overload.json")
    body = []
    for factor in sorted({r["factor"] for r in runs}):
        for r in [r for r in runs if r["factor"] == factor]:
            name = "gunicorn (gthread, 1 thread)" if r["server"] == "gunicorn" else display(r["server"])
            body.append([name, f"{factor:g}x ({r['rate']:.0f}/s)",
                         f"{r['goodput_share']:.2f} ({r['ok']}; {r['capacity']:.0f}/s)",
                         f"{secs(r['ok_p50'])} / {secs(r['ok_p99'])}",
                         f"{r['shed']}" + (f" / {secs(r['shed_p99'])}" if r["shed"] else ""),
                         str(r["gave_up"]),
                         f"{r['rss_kib_before'] / 1024:.0f} / {r['rss_kib_max'] / 1024:.0f} MiB"])
    return table(["server", "offered", "200s: share of capacity (count; capacity)",
                  "p50 / p99 of 200s", "503s / p99", "gave up (10 s)", "RSS before / most"], body)


def gen_memory(run):
    doc = run.json("memory.json")
    servers, workers = [], sorted({r["workers"] for r in doc["results"]})
    for r in doc["results"]:
        if r["server"] not in servers:
            servers.append(r["server"])
    cell = {(r["server"], r["workers"]): r for r in doc["results"]}
    body = []
    for s in servers:
        name = re.sub(r"^(\w+)", lambda m: display(m.group(1)), s).replace("--preload", "`--preload`")
        body.append([name] + [f"{cell[(s, w)]['pss_mib']:.1f} MiB, {cell[(s, w)]['ready_s']:.2f} s"
                              if (s, w) in cell else "" for w in workers])
    return table(["server"] + [f"{w} worker" + ("s" if w > 1 else "") for w in workers], body)


STATIC_FILES = {"4k": "4 KiB", "100k": "100 KiB", "304": "304"}
STATIC_NAMES = {"nginx": "nginx", "m0serve": "m0serve `--static-map`",
                "m0serve+whitenoise": "m0serve + WhiteNoise",
                "gunicorn+whitenoise": "gunicorn + WhiteNoise",
                "granian": "Granian `--static-path-mount`"}


def gen_static(run):
    doc = run.json("static_bench.json")
    summ = doc["summary"]
    cell = {(s["scenario"], s["connections"], s["server"]): s for s in summ}
    servers = [k for k in STATIC_NAMES if any(s["server"] == k for s in summ)]
    body = []
    for scen in [k for k in STATIC_FILES if any(s["scenario"] == k for s in summ)]:
        for conns in sorted({s["connections"] for s in summ if s["scenario"] == scen}):
            nginx = cell[(scen, conns, "nginx")]
            line = [STATIC_FILES[scen], str(conns)]
            for srv in servers:
                s = cell.get((scen, conns, srv))
                if not s:
                    line.append("no ETag" if scen == "304" else "")
                    continue
                line.append(f"{fmt_int(s['rps'])} ({s['rps_per_core'] / nginx['rps_per_core']:.2f})")
            body.append(line)
    return table(["file", "conns"] + [STATIC_NAMES[s] for s in servers], body)


def gen_static_p99(run):
    for _, rows in md_tables(run.md()):
        if rows and "app p99" in rows[0]:
            head = list(rows[0].keys())
            return table(head, [[r[h] for h in head] for r in rows])
    raise Problem(f"{run.rel}/bench.md: no table of the app's p99")


def generate(root, rel, kind):
    run = Run(root, rel)
    if kind in SCENARIOS:
        return gen_scenario(run, kind)
    gens = {"p99": gen_p99, "64k-m0load": gen_64k_m0load, "overload": gen_overload,
            "memory": gen_memory, "static": gen_static, "static-p99": gen_static_p99}
    if kind not in gens:
        raise Problem(f"unknown table kind {kind!r}")
    return gens[kind](run)


# ---------------------------------------------------------------------------------------
# The checks


def regions(lines):
    """[(start, end, run, kind)]: line indices of each marker and its end."""
    out, i = [], 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != END:
                if MARK.match(lines[j]):
                    raise Problem(f"line {i + 1}: a generated region with no {END} before line {j + 1}")
                j += 1
            if j == len(lines):
                raise Problem(f"line {i + 1}: a generated region with no {END}")
            out.append((i, j, m.group(1), m.group(2)))
            i = j
        i += 1
    return out


def slug(heading, seen):
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    n = seen.get(s, 0)
    seen[s] = n + 1
    return s if n == 0 else f"{s}-{n}"


def headings(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [m.group(1) for m in re.finditer(r"^#{1,6} (.+?)\s*#*$", text, re.M)]


def anchors(path):
    seen = {}
    return {slug(h, seen) for h in headings(path)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_links(root, rel, text, base, only=None):
    """Problems with the relative links of one markdown text (resolved against `base`, a
    directory under root); `only` keeps the links whose target starts with one of these."""
    problems = []
    for n, line in enumerate(text.split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(root, base, path)) if path else \
                os.path.join(root, rel)
            shown = os.path.relpath(full, root)
            if only and not shown.startswith(only):
                continue
            if not os.path.exists(full):
                problems.append(f"{rel}:{n}: link to {target}: no such file")
            elif frag and full.endswith(".md") and frag not in anchors(full):
                problems.append(f"{rel}:{n}: link to {target}: no heading with that anchor in {shown}")
    return problems


POINTER = re.compile(r"(benchmarks/decisions\.md|BENCHMARKS\.md)(?:,\s*|\s*\(\s*)\"([^\"]+)\"")
TEXT_FILES = (".rs", ".md", ".py", ".sh", ".toml", ".txt", ".yaml", ".yml", "")


def pointer_files(root):
    for top in ("src", "docs", "scripts"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in sorted(files):
                if os.path.splitext(f)[1] in TEXT_FILES:
                    yield os.path.join(d, f)
    yield os.path.join(root, "README.md")


def check_pointers(root, page):
    problems = []
    targets = {"benchmarks/decisions.md": os.path.join(root, "benchmarks", "decisions.md"),
               "BENCHMARKS.md": page}
    heads = {k: [h.lower() for h in headings(v)] if os.path.isfile(v) else []
             for k, v in targets.items()}
    me = os.path.abspath(__file__)
    for path in pointer_files(root):
        if os.path.abspath(path) == me:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        # A name may run over a line break, and on into the next line of a comment.
        flat = re.sub(r"[ \t]*\n[ \t]*(?:(?://[/!]?|#)[ \t]?)?", " ", text)
        for m in POINTER.finditer(flat):
            name = " ".join(m.group(2).split()).lower()
            if not any(name in h for h in heads[m.group(1)]):
                # The k-th mention of the file in the flattened text is its k-th in the text.
                k = flat.count(m.group(1), 0, m.start())
                pos = -1
                for _ in range(k + 1):
                    pos = text.find(m.group(1), pos + 1)
                line = text.count("\n", 0, pos) + 1
                problems.append(f"{os.path.relpath(path, root)}:{line}: {m.group(1)}, "
                                f"\"{m.group(2)}\": no heading of {m.group(1)} contains it")
    return problems


def check_charts(root, text, cited):
    """Each chart on the page must have been drawn from a run the page cites."""
    problems = []
    runs = {}
    for rel in cited:
        try:
            runs[rel] = Run(root, rel).date_command()
        except Problem:
            pass
    for n, line in enumerate(text.split("\n"), 1):
        for m in re.finditer(r"!\[[^\]]*\]\((docs/bench-[\w-]+\.svg)\)", line):
            p = os.path.join(root, m.group(1))
            if not os.path.isfile(p):
                continue  # the link check names it
            with open(p, encoding="utf-8") as f:
                svg = f.read()
            md = re.search(r'<metadata id="m0bench-data">(.*?)</metadata>', svg, re.S)
            if not md:
                problems.append(f"BENCHMARKS.md:{n}: {m.group(1)} has no m0bench-data metadata")
                continue
            meta = json.loads(md.group(1))["meta"]
            if (meta.get("date"), meta.get("command")) not in runs.values():
                problems.append(f"BENCHMARKS.md:{n}: {m.group(1)} was drawn from the run of "
                                f"{meta.get('date')} ({meta.get('command')}), which the page does not cite")
    return problems


def check(root, page, write):
    problems = []
    with open(page, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    try:
        regs = regions(lines)
    except Problem as e:
        return [f"BENCHMARKS.md: {e}"]
    out, last = [], 0
    for start, end, rel, kind in regs:
        out += lines[last:start + 1]
        try:
            new = generate(root, rel, kind)
        except Problem as e:
            problems.append(f"BENCHMARKS.md:{start + 1}: {e}")
            new = lines[start + 1:end]
        except (KeyError, ValueError, TypeError, json.JSONDecodeError) as e:
            problems.append(f"BENCHMARKS.md:{start + 1}: {rel} ({kind}): unreadable: {e!r}")
            new = lines[start + 1:end]
        old = lines[start + 1:end]
        if new != old and not write:
            diff = "\n".join(difflib.unified_diff(old, new, "on the page", f"from {rel}",
                                                  lineterm="", n=0))
            problems.append(f"BENCHMARKS.md:{start + 2}: the table generated from {rel} ({kind}) "
                            f"differs from the page:\n{diff}")
        out += new
        last = end
    out += lines[last:]
    if write and out != lines:
        with open(page, "w", encoding="utf-8") as f:
            f.write("\n".join(out))
        lines = out
        text = "\n".join(out)
    if not regs:
        problems.append("BENCHMARKS.md: no generated region")
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if n > MAX_LINES:
        problems.append(f"BENCHMARKS.md: {n} lines, more than {MAX_LINES}")
    cited = sorted(set(re.findall(r"benchmarks/runs/\d{4}-\d\d-\d\d-[\w.-]*[\w]", text)))
    for rel in cited:
        if not os.path.isdir(os.path.join(root, rel)):
            problems.append(f"BENCHMARKS.md: cites {rel}, which does not exist")
    problems += check_charts(root, text, cited)
    problems += check_links(root, "BENCHMARKS.md", text, "")
    bdir = os.path.join(root, "benchmarks")
    for rel in ["benchmarks/" + f for f in sorted(os.listdir(bdir)) if f.endswith(".md")] + \
            ["benchmarks/runs/README.md"] if os.path.isdir(bdir) else []:
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                problems += check_links(root, rel, f.read(), os.path.dirname(rel))
    # Links into the benchmarks from README.md and docs/.
    docs = os.path.join(root, "docs")
    others = ["README.md"] + (["docs/" + f for f in sorted(os.listdir(docs)) if f.endswith(".md")]
                              if os.path.isdir(docs) else [])
    for rel in others:
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                problems += check_links(root, rel, f.read(), os.path.dirname(rel),
                                        only=("BENCHMARKS.md", "benchmarks"))
    problems += check_pointers(root, page)
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 naming any difference (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite the generated regions")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="the repository (default: this file's)")
    ap.add_argument("--page", help="the page (default: ROOT/BENCHMARKS.md; its links are "
                    "resolved against ROOT wherever it is)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    page = os.path.abspath(args.page) if args.page else os.path.join(root, "BENCHMARKS.md")
    problems = check(root, page, args.write)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s); `python3 scripts/m0bench/page.py --write` "
              "regenerates the tables from the runs")
        return 1
    print(f"{os.path.relpath(page, root) if page.startswith(root) else page}: "
          "every table is its run's, and every link and pointer resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
