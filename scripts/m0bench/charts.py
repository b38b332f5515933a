"""The SVG charts: requests/s by connections per scenario (`--svg`), drawn again from the
figures they carry (`--redraw-svg`), and `--check-svg`, which fails a chart whose series
share a colour, a marker or a dash pattern (tests/charts.rs)."""

import json
import math
import re
import xml.etree.ElementTree as ET

from .config import MIB, SCENARIOS
from .report import client_name, display, fmt_int, summarise


# Each series' look: (colour, marker, dash pattern), all three distinct between the series of
# a run, so that a chart reads in greyscale and to a colour-blind reader as well. The colours
# are Okabe and Ito's colour-blind-safe palette (its yellow, faint as a line on white, last
# of all), then grey and three of Paul Tol's. A server named here has the same look in every
# chart; another server of a kind named here takes that kind's look when no series of the run
# has it, and any other series the first colour, marker and dash no series of the run has
# (in the run's order, so each keeps its look across that run's charts).
STYLES = {
    "m0serve": ("#D55E00", "circle", ""),
    "m0serve:blocking-threads=0": ("#CC79A7", "square-open", "10 3"),
    "m0serve:static-response": ("#000000", "diamond", "2 3"),
    "fastwsgi": ("#0072B2", "triangle", "14 4 3 4"),
    "bjoern": ("#009E73", "triangle-down", "14 3 3 3 3 3"),
    "granian": ("#56B4E9", "cross", "5 5"),
    "gunicorn": ("#E69F00", "plus", "1 5"),
    "uwsgi": ("#999999", "star", "20 4 8 4"),
}
COLOR_POOL = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000",
              "#999999", "#882255", "#44AA99", "#999933", "#F0E442"]
MARKER_POOL = ["circle", "square-open", "diamond", "triangle", "triangle-down", "cross", "plus",
               "star", "square", "circle-open", "triangle-open", "diamond-open"]
DASH_POOL = ["", "10 3", "2 3", "14 4 3 4", "14 3 3 3 3 3", "5 5", "1 5", "20 4 8 4",
             "6 2 1 2", "3 7", "14 3 5 3", "2 2 8 2"]


def series_styles(servers):
    """{spec: (colour, marker, dash)} for a run's servers (see STYLES)."""
    out = {s: STYLES[s] for s in servers if s in STYLES}
    for s in servers:
        kind = s.partition(":")[0].partition("@")[0]
        if s not in out and kind in STYLES and STYLES[kind] not in out.values():
            out[s] = STYLES[kind]
    for s in servers:
        if s not in out:
            out[s] = tuple(next((v for v in pool if v not in {st[i] for st in out.values()}),
                                pool[len(out) % len(pool)])
                           for i, pool in enumerate((COLOR_POOL, MARKER_POOL, DASH_POOL)))
    return out


STAR = [((6 if i % 2 == 0 else 2.6) * math.sin(i * math.pi / 5),
         -(6 if i % 2 == 0 else 2.6) * math.cos(i * math.pi / 5)) for i in range(10)]
# A marker's outline about its centre; cross and plus are strokes, not outlines.
POLYGONS = {"square": [(-4, -4), (4, -4), (4, 4), (-4, 4)],
            "triangle": [(0, -5.5), (5, 3.5), (-5, 3.5)],
            "triangle-down": [(0, 5.5), (5, -3.5), (-5, -3.5)],
            "diamond": [(0, -5.5), (5, 0), (0, 5.5), (-5, 0)],
            "star": STAR}
STROKES = {"cross": [((-4, -4), (4, 4)), ((-4, 4), (4, -4))],
           "plus": [((-5, 0), (5, 0)), ((0, -5), (0, 5))]}


def marker_svg(shape, cx, cy, color, title=None):
    """A marker centred on (cx, cy), its shape named in data-marker (for --check-svg): filled
    ones outlined in white, so that two that overlap stay apart; the `-open` ones hollow and
    a little larger, so that a point under one still shows."""
    hollow = shape.endswith("-open")
    base = shape.removesuffix("-open")
    k = 1.25 if hollow else 1
    if base in STROKES:
        paint = f'fill="none" stroke="{color}" stroke-width="2.2"'
    elif hollow:
        paint = f'fill="none" stroke="{color}" stroke-width="2"'
    else:
        paint = f'fill="{color}" stroke="#ffffff" stroke-width="0.8"'
    if base == "circle":
        tag, geo = "circle", f'cx="{cx:.1f}" cy="{cy:.1f}" r="{4.5 * k:g}"'
    elif base in STROKES:
        tag, geo = "path", 'd="' + "".join(
            f"M{cx + a:.1f},{cy + b:.1f}L{cx + c:.1f},{cy + d:.1f}"
            for (a, b), (c, d) in STROKES[base]) + '"'
    else:
        tag, geo = "path", 'd="M' + "L".join(
            f"{cx + k * a:.1f},{cy + k * b:.1f}" for a, b in POLYGONS[base]) + 'Z"'
    el = f'<{tag} {geo} data-marker="{shape}" {paint}'
    return el + (f"><title>{esc(title)}</title></{tag}>" if title else "/>")


def nice_step(span, ticks=5):
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for f in (1, 2, 2.5, 5, 10):
        if raw <= f * mag:
            return f * mag
    return 10 * mag


def esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def svg_chart(doc, scen):
    """Requests/s (median, with the min–max of the rounds) against connections, one line
    per server; hand-written SVG."""
    meta = doc["meta"]
    summary = summarise(doc["results"])
    servers = [s for s in meta["servers"] if any(k[0] == scen and k[1] == s for k in summary)]
    conns = sorted({k[2] for k in summary if k[0] == scen})
    if not servers or not conns:
        return None
    labels = [display(s) for s in servers]
    W, H = 576 + max(120, int(60 + 7.5 * max(map(len, labels)))), 440
    L, T, B = 80, 72, 60
    pw = 480
    pad = 24  # keeps the first and last points off the axes
    ph = H - T - B
    ymax = max(max(x["rps"] for x in e["runs"]) for k, e in summary.items() if k[0] == scen)
    step = nice_step(ymax * 1.08)
    top = step * math.ceil(ymax * 1.08 / step)
    lo, hi = math.log2(conns[0]), math.log2(conns[-1])

    def x(c):
        return L + (pw / 2 if hi == lo else pad + (math.log2(c) - lo) / (hi - lo) * (pw - 2 * pad))

    def y(v):
        return T + ph - v / top * ph

    title = SCENARIOS.get(scen, {}).get("title", scen)
    mach = meta.get("machine", {})
    sub = (f"median of {meta['rounds']} alternating rounds of {meta['duration']} s "
           f"(bars: min–max), --workers {meta['workers']} --blocking-threads "
           f"{meta['blocking_threads']}",
           f"{mach.get('cpus')} CPUs ({mach.get('cpu')}), {client_name(meta).split()[0]} on "
           f"the same host; "
           f"{meta.get('date', '')[:10]}")
    ylabel = "requests/s" + (" = MiB/s each way" if SCENARIOS.get(scen, {}).get(
        "post_bytes") == MIB else "")
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" '
         'font-size="12">',
         chart_data(doc, scen),
         f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
         f'<text x="{L}" y="22" font-size="15" font-weight="bold">{esc(scen)}: '
         f'{esc(title)} — requests/s by connections</text>',
         f'<text x="{L}" y="40" fill="#555" font-size="11">{esc(sub[0])}</text>',
         f'<text x="{L}" y="55" fill="#555" font-size="11">{esc(sub[1])}</text>']
    v = 0.0
    while v <= top + step / 2:
        yy = y(v)
        o.append(f'<line x1="{L}" y1="{yy:.1f}" x2="{L + pw}" y2="{yy:.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{L - 8}" y="{yy + 4:.1f}" text-anchor="end">{fmt_int(v)}</text>')
        v += step
    for c in conns:
        xx = x(c)
        o.append(f'<line x1="{xx:.1f}" y1="{T + ph}" x2="{xx:.1f}" y2="{T + ph + 5}" '
                 'stroke="#333"/>')
        o.append(f'<text x="{xx:.1f}" y="{T + ph + 20}" text-anchor="middle">{c}</text>')
    o.append(f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<text x="{L + pw / 2:.1f}" y="{H - 15}" text-anchor="middle">connections '
             f'({esc(client_name(meta))}, log scale)</text>')
    o.append(f'<text transform="translate(18 {T + ph / 2:.1f}) rotate(-90)" '
             f'text-anchor="middle">{esc(ylabel)}</text>')
    styles = series_styles(meta["servers"])
    # The lines and bars first, then every marker, so that no line hides a point.
    for s in servers:
        color, _, dash = styles[s]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        pts = [(c, summary[(scen, s, c)]) for c in conns if (scen, s, c) in summary]
        if len(pts) > 1:
            path = " ".join(f"{'M' if j == 0 else 'L'}{x(c):.1f},{y(e['rps_median']):.1f}"
                            for j, (c, e) in enumerate(pts))
            o.append(f'<path d="{path}" data-series="{esc(display(s))}" fill="none" '
                     f'stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        for c, e in pts:
            rs = [r["rps"] for r in e["runs"]]
            xx = x(c)
            if len(rs) > 1:
                o.append(f'<line x1="{xx:.1f}" y1="{y(min(rs)):.1f}" x2="{xx:.1f}" '
                         f'y2="{y(max(rs)):.1f}" stroke="{color}" stroke-width="1.2"/>')
                for b in (min(rs), max(rs)):
                    o.append(f'<line x1="{xx - 4:.1f}" y1="{y(b):.1f}" x2="{xx + 4:.1f}" '
                             f'y2="{y(b):.1f}" stroke="{color}" stroke-width="1.2"/>')
    for s in servers:
        color, marker, _ = styles[s]
        for c in conns:
            if (scen, s, c) in summary:
                e = summary[(scen, s, c)]
                o.append(marker_svg(marker, x(c), y(e["rps_median"]), color,
                                    f'{display(s)}, {c} connections: '
                                    f'{fmt_int(e["rps_median"])} req/s'))
    # The legend: each series' colour, dash pattern and marker, as --check-svg reads them.
    for i, s in enumerate(servers):
        color, marker, dash = styles[s]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        ly = T + 10 + i * 22
        o.append(f'<g class="legend-entry" data-series="{esc(labels[i])}">')
        o.append(f'<line x1="{L + pw + 12}" y1="{ly}" x2="{L + pw + 60}" y2="{ly}" '
                 f'stroke="{color}" stroke-width="2.5"{dash_attr}/>')
        o.append(marker_svg(marker, L + pw + 36, ly, color))
        o.append(f'<text x="{L + pw + 66}" y="{ly + 4}">{esc(labels[i])}</text>')
        o.append("</g>")
    o.append("</svg>")
    return "\n".join(o) + "\n"


DATA_ID = "m0bench-data"
SVG_NS = "http://www.w3.org/2000/svg"


def chart_data(doc, scen):
    """The figures a chart is drawn from, as JSON in its <metadata>, so that
    `--redraw-svg` can draw it again (another style) without the run's JSON."""
    keys = ("date", "command", "servers", "rounds", "duration", "workers", "blocking_threads",
            "client", "clients")
    meta = {k: doc["meta"][k] for k in keys if k in doc["meta"]}
    mach = doc["meta"].get("machine", {})
    meta["machine"] = {k: mach[k] for k in ("cpu", "cpus") if k in mach}
    runs = [{k: r[k] for k in ("server", "connections", "round", "rps")}
            for r in doc["results"] if r["scenario"] == scen and "error" not in r]
    text = ('{"scenario": ' + json.dumps(scen) + ',\n"meta": ' + json.dumps(meta)
            + ',\n"results": [\n' + ",\n".join(json.dumps(r) for r in runs) + "]}")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<metadata id="{DATA_ID}">\n{text}\n</metadata>'


def redraw_svg(path):
    """Draws a chart again from the figures embedded in it (chart_data)."""
    root = ET.parse(path).getroot()
    el = root.find(f".//{{{SVG_NS}}}metadata[@id='{DATA_ID}']")
    if el is None:
        raise SystemExit(f"{path}: no embedded figures (<metadata id=\"{DATA_ID}\">); "
                         "draw it from the run's JSON with --report JSON --svg")
    data = json.loads(el.text)
    scen = data["scenario"]
    results = [dict(r, scenario=scen) for r in data["results"]]
    svg = svg_chart({"meta": data["meta"], "results": results}, scen)
    with open(path, "w") as f:
        f.write(svg)
    print(f"chart: {path}")


def check_svg(path):
    """What makes a chart's series hard to tell apart: a colour, marker or dash pattern that
    two series share, in the points (each marker's <title> names its series) or in the
    legend, or a legend entry that does not match its series' points and line. [] if none."""
    ns = f"{{{SVG_NS}}}"
    root = ET.parse(path).getroot()

    def colour(el):
        fill = el.get("fill")
        return el.get("stroke") if fill in (None, "none", "#fff", "#ffffff", "white") else fill

    def marker(el):
        return el.get("data-marker") or el.tag.replace(ns, "")

    def dups(what, looks):
        by = {}
        for series, look in looks.items():
            by.setdefault(look, []).append(series)
        return [f"{what} {look or 'solid'} shared by {', '.join(ss)}"
                for look, ss in by.items() if len(ss) > 1]

    points = {}
    for el in root.iter():
        t = el.find(ns + "title")
        m = re.match(r"(.+), \d+ connections: ", (t.text or "") if t is not None else "")
        if m:
            points.setdefault(m.group(1), set()).add((colour(el), marker(el)))
    lines = {el.get("data-series"): el.get("stroke-dasharray") or ""
             for el in root.iter(ns + "path") if el.get("data-series")}
    legend = {}
    for g in root.iter(ns + "g"):
        if g.get("class") == "legend-entry":
            ln, mk = g.find(ns + "line"), g.find("*[@data-marker]")
            legend[g.get("data-series")] = (
                None if ln is None else ln.get("stroke"),
                None if mk is None else mk.get("data-marker"),
                None if ln is None else ln.get("stroke-dasharray") or "")
    problems = []
    if not points:
        problems.append("no points (elements with a <title> 'SERIES, N connections: ...')")
    for series, looks in points.items():
        if len(looks) > 1:
            problems.append(f"{series}: its points differ: {sorted(looks, key=str)}")
    one = {s: min(looks, key=str) for s, looks in points.items()}
    problems += dups("colour", {s: c for s, (c, _) in one.items()})
    problems += dups("marker", {s: m for s, (_, m) in one.items()})
    problems += dups("dash pattern", {s: d for s, d in lines.items()})
    if set(legend) != set(points):
        problems.append(f"legend entries (<g class=\"legend-entry\">) {sorted(legend)} are "
                        f"not the series {sorted(points)}")
    problems += dups("legend colour", {s: c for s, (c, _, _) in legend.items()})
    problems += dups("legend marker", {s: m for s, (_, m, _) in legend.items()})
    problems += dups("legend dash pattern", {s: d for s, (_, _, d) in legend.items()})
    for s, (c, m, d) in legend.items():
        if s in one and (c, m) != one[s]:
            problems.append(f"{s}: legend shows {c} {m}, its points {one[s][0]} {one[s][1]}")
        if s in lines and d != lines[s]:
            problems.append(f"{s}: legend dash pattern {d or 'solid'}, its line's "
                            f"{lines[s] or 'solid'}")
    return problems
