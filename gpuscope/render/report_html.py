"""``gpuscope report``: one run (and optionally a second to compare) as one self-contained HTML
page: styles inline, charts as inline SVG, no script and nothing fetched from the network, so it
opens from an e-mail, prints, and follows the reader's dark mode.

Pure: plain data in (the analysis document, the run's telemetry summary, its sample series,
windows and marks, a compare document), a string out. Every text from the run is escaped.
"""
from __future__ import annotations

import html
import math
from typing import Any

from .table import fmt_rate as _si
from .table import fmt_us as _us

BOUND_COLOURS = {"compute_bound": "#d9534f", "memory_bound": "#2b7bba", "cache_bound": "#3aa87a",
                 "latency_bound": "#e8a317", "unknown": "#8a8a8a"}
BREAKDOWN = (("compute", "#d9534f"), ("communication", "#8e44ad"), ("memory", "#2b7bba"), ("idle", "#c8c8c8"))
#: Ops drawn on the roofline and listed (the most time first).
TOP = 30

CSS = """
:root { --fg:#1d1d1f; --bg:#ffffff; --muted:#6b6b70; --grid:#e3e3e8; --card:#f6f6f8; }
@media (prefers-color-scheme: dark) { :root { --fg:#e8e8ea; --bg:#141416; --muted:#a0a0a8; --grid:#34343a; --card:#1e1e22; } }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg);
       max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid var(--grid); }
.muted { color: var(--muted); } code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; word-break: break-all; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--grid); vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.cards { display: flex; flex-wrap: wrap; gap: .6em; } .card { background: var(--card); padding: .5em .8em; border-radius: 6px; }
.card b { display: block; font-size: 1.2em; }
svg text { fill: var(--fg); font: 11px system-ui, sans-serif; } svg .axis { stroke: var(--muted); } svg .grid { stroke: var(--grid); }
.sw { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .3em; vertical-align: -1px; }
@media print { body { margin: 0; max-width: none; } h2 { break-after: avoid; } svg, table { break-inside: avoid; } }
"""


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _pct(frac: float | None) -> str:
    return "-" if frac is None else f"{100 * float(frac):.0f}%"


def _roof_pct(item: dict[str, Any]) -> str:
    """Percent of roof of an op or kernel; "model error" where the cost model overshoots every
    roof (the analysis withholds the percent rather than show it above 100 %)."""
    return "model error" if item.get("model_error") else _pct(item.get("pct_of_roof"))


def _dims(o: dict[str, Any]) -> str:
    dims = o.get("input_dims")
    if not dims:
        return ""
    return "[" + ", ".join("x".join(str(x) for x in d) if isinstance(d, list) else str(d) for d in dims if d != []) + "]"


# -- sections ---------------------------------------------------------------------------------

def _summary(data: dict[str, Any]) -> str:
    doc = data["analysis"]
    run = doc["run"]
    devs = ", ".join(f"{d.get('key')}: {d.get('name') or '?'}" for d in doc.get("devices") or []) or "none"
    dur = None
    if run.get("started_ns") and run.get("ended_ns"):
        dur = (run["ended_ns"] - run["started_ns"]) / 1e3
    cards = [("duration", _us(dur))]
    if doc.get("gpu_activity", True):
        cards += [("GPU busy", _us(sum(doc["time_us"][k] for k in ("compute", "communication", "memory")))),
                  ("GPU idle", _us(doc["time_us"]["idle"]))]
    else:
        # a CPU-only trace: "GPU busy 0.0 µs" would read as a GPU that sat idle
        cards.append(("GPU", "no GPU activity"))
    gen = ((data.get("telemetry") or {}).get("generation") or {})
    if gen.get("tokens_per_s") is not None:
        cards.append(("tokens/s", f"{gen['tokens_per_s']:,.1f}"))
    decode = gen.get("decode") or {}
    if decode.get("tokens_per_s") is not None:
        cards.append(("decode tokens/s", f"{decode['tokens_per_s']:,.1f}"))
    share = (doc.get("coverage") or {}).get("share")
    if share is not None:
        cards.append(("roofline coverage", f"{100 * share:.1f} % judged"))
    energy = (data.get("telemetry") or {}).get("energy_j")
    if energy is not None:
        cards.append(("GPU energy", f"{energy:,.1f} J"))
    out = [f"<p class='muted'>run {esc(run['id'])} · {esc(run.get('status'))} · {esc(run.get('source'))} · devices: {esc(devs)}</p>"]
    if data.get("command"):
        out.append(f"<p>command: <code>{esc(data['command'])}</code></p>")
    out.append("<div class='cards'>" + "".join(f"<div class='card'><span class='muted'>{esc(k)}</span><b>{esc(v)}</b></div>"
                                                for k, v in cards) + "</div>")
    return "\n".join(out)


def _breakdown(doc: dict[str, Any]) -> str:
    t = doc["time_us"]
    total = sum(float(t.get(k) or 0) for k, _ in BREAKDOWN)
    if total <= 0:
        return "<p class='muted'>No GPU activity in this run (a CPU-only trace).</p>"
    x, parts, legend = 0.0, [], []
    for k, colour in BREAKDOWN:
        w = 1000 * float(t.get(k) or 0) / total
        parts.append(f"<rect x='{x:.2f}' y='0' width='{w:.2f}' height='28' fill='{colour}'>"
                     f"<title>{esc(k)}: {esc(_us(t.get(k)))} ({100 * float(t.get(k) or 0) / total:.1f}%)</title></rect>")
        legend.append(f"<span><span class='sw' style='background:{colour}'></span>{esc(k)} {esc(_us(t.get(k)))} "
                      f"({100 * float(t.get(k) or 0) / total:.1f}%)</span>")
        x += w
    return (f"<svg class='breakdown' viewBox='0 0 1000 28' width='100%' height='28' role='img' "
            f"aria-label='time breakdown'>{''.join(parts)}</svg><p>{' · '.join(legend)}</p>")


def _log_axis(lo: float, hi: float) -> tuple[float, float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return float(a), float(max(b, a + 1))


def roofline_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ops the roofline chart draws: the top :data:`TOP` by time with an intensity and an
    achieved FLOP rate above 0."""
    return [o for o in (doc.get("ops") or [])[:TOP]
            if (o.get("intensity_flop_per_byte") or 0) > 0 and (o.get("achieved_flops_per_s") or 0) > 0]


def _roofline(doc: dict[str, Any]) -> str:
    pts = roofline_points(doc)
    dev = next((d for d in (doc.get("roofline") or {}).get("devices") or [] if d.get("mem_bw_bytes_per_s")), None)
    if not pts:
        return "<p class='muted'>No op with a known arithmetic intensity and FLOP rate to place on the roofline.</p>"
    bw = float(dev["mem_bw_bytes_per_s"]) if dev else None
    dtypes = sorted({o["dtype"] for o in pts if o.get("dtype")})
    peaks = {dt: float(dev["peak_flops_per_s"][dt]) for dt in dtypes if dev and dt in (dev.get("peak_flops_per_s") or {})}
    xs = [float(o["intensity_flop_per_byte"]) for o in pts]
    ys = [float(o["achieved_flops_per_s"]) for o in pts] + list(peaks.values())
    if bw and peaks:
        xs += [p / bw for p in peaks.values()]
    x0, x1 = _log_axis(min(xs) / 2, max(xs) * 2)
    y0, y1 = _log_axis(min(ys) / 2, max(ys) * 2)
    W, H, L, B = 680, 420, 60, 40  # noqa: N806  (chart geometry)

    def px(x: float) -> float:
        return L + (math.log10(x) - x0) / (x1 - x0) * (W - L - 10)

    def py(y: float) -> float:
        return H - B - (math.log10(y) - y0) / (y1 - y0) * (H - B - 10)

    g = [f"<svg class='roofline' viewBox='0 0 {W} {H}' width='100%' role='img' aria-label='roofline'>"]
    for e in range(int(x0), int(x1) + 1):
        g.append(f"<line class='grid' x1='{px(10**e):.1f}' y1='10' x2='{px(10**e):.1f}' y2='{H - B}'/>"
                 f"<text x='{px(10**e):.1f}' y='{H - B + 14}' text-anchor='middle'>1e{e}</text>")
    for e in range(int(y0), int(y1) + 1):
        g.append(f"<line class='grid' x1='{L}' y1='{py(10**e):.1f}' x2='{W - 10}' y2='{py(10**e):.1f}'/>"
                 f"<text x='{L - 4}' y='{py(10**e) + 4:.1f}' text-anchor='end'>1e{e}</text>")
    g.append(f"<text x='{(W + L) / 2}' y='{H - 6}' text-anchor='middle'>arithmetic intensity (FLOP/byte)</text>"
             f"<text x='14' y='{(H - B) / 2}' transform='rotate(-90 14 {(H - B) / 2})' text-anchor='middle'>FLOP/s</text>")
    if bw:
        # equal roofs (an A100's fp64 and fp32 are both 19.5 TFLOP/s) are one line with one label:
        # two labels at one height draw over each other
        same: dict[float, list[str]] = {}
        for dt, peak in peaks.items():
            same.setdefault(peak, []).append(dt)
        for peak, names in sorted(same.items()):
            dt = " = ".join(sorted(names))
            ridge = peak / bw
            xa = max(10**x0, 10 ** y0 / bw)
            g.append(f"<polyline fill='none' stroke='var(--muted)' stroke-width='1.5' points='"
                     f"{px(xa):.1f},{py(bw * xa):.1f} {px(ridge):.1f},{py(peak):.1f} {px(10**x1):.1f},{py(peak):.1f}'>"
                     f"<title>{esc(dt)} roof: {esc(_si(peak, 'FLOP/s'))}, memory {esc(_si(bw, 'B/s'))}, ridge "
                     f"{ridge:,.1f} FLOP/B</title></polyline>"
                     f"<text x='{W - 12}' y='{py(peak) - 4:.1f}' text-anchor='end'>{esc(dt)} {esc(_si(peak, 'FLOP/s'))}</text>")
    total = sum(float(o.get("kernel_us") or 0) for o in pts) or 1.0
    for i, o in enumerate(pts):
        r = 3 + 12 * math.sqrt(float(o.get("kernel_us") or 0) / total)
        colour = BOUND_COLOURS.get(o.get("bound") or "unknown", BOUND_COLOURS["unknown"])
        title = (f"{o['name']} {_dims(o)} — {o.get('bound')}, {_roof_pct(o)} of roof, "
                 f"{_us(o.get('kernel_us'))}, {_si(o.get('achieved_flops_per_s'), 'FLOP/s')} at "
                 f"{float(o['intensity_flop_per_byte']):,.2f} FLOP/B")
        g.append(f"<circle class='pt' data-op='{i}' cx='{px(float(o['intensity_flop_per_byte'])):.1f}' "
                 f"cy='{py(float(o['achieved_flops_per_s'])):.1f}' r='{r:.1f}' fill='{colour}' fill-opacity='.75' "
                 f"stroke='{colour}'><title>{esc(title)}</title></circle>")
    g.append("</svg>")
    legend = " · ".join(f"<span><span class='sw' style='background:{c}'></span>{esc(b)}</span>" for b, c in BOUND_COLOURS.items())
    where = (f"roofs of {esc(dev.get('spec') or dev.get('key'))} ({esc(dev.get('roof_source') or 'spec')})"
             if dev else "no roof: the GPU was not identified")
    return "".join(g) + f"<p class='muted'>{legend} · point area ∝ GPU time · {where}</p>"


def _coverage(doc: dict[str, Any]) -> str:
    """The share of GPU time judged against a roof, and the largest unjudged work with why."""
    from ..analyzers.coverage import REASONS

    cov = doc.get("coverage") or {}
    if cov.get("share") is None:
        return ""
    head = (f"<p>Roofline coverage: <b>{100 * cov['share']:.1f} %</b> of GPU time judged against a roof "
            f"({esc(_us(cov.get('judged_us')))} of {esc(_us(cov.get('total_us')))}).</p>")
    rows = cov.get("unjudged") or []
    if not rows:
        return head
    shown = _unjudged_names(rows)
    body = "".join(f"<tr><td title='{esc(u.get('name'))}'>{name}</td><td>{esc(u.get('kind'))}</td><td class='n'>"
                   f"{esc(_us(u.get('kernel_us')))}</td><td class='n'>{esc(_pct(u.get('share')))}</td>"
                   f"<td>{esc(REASONS.get(str(u.get('reason')), u.get('reason')))}</td></tr>" for u, name in zip(rows, shown))
    return (head + "<table class='unjudged'><caption>Largest unjudged work</caption><tr><th>op or kernel</th>"
            "<th>kind</th><th class='n'>GPU time</th><th class='n'>share</th><th>why not judged</th></tr>" + body
            + "</table>")


def _unjudged_names(rows: list[dict[str, Any]]) -> list[str]:
    """The unjudged table's name cells: kernels, copies and collectives by the short, distinct
    names ``analyze`` and the kernels table show (a demangled template runs to ten lines), the
    full name folding out below; ops (``aten::mm``) by their name, as the ops table has them."""
    from .names import distinct_names

    kernels = [i for i, u in enumerate(rows) if u.get("kind") != "op"]
    shorts = dict(zip(kernels, distinct_names([str(rows[i].get("name")) for i in kernels], KERNEL_NAME_CHARS)))
    out = []
    for i, u in enumerate(rows):
        full = str(u.get("name"))
        short = shorts.get(i, full)
        out.append(f"<code>{esc(full)}</code>" if short == full else
                   f"<details><summary><code>{esc(short)}</code></summary><code>{esc(full)}</code></details>")
    return out


def _ops_table(doc: dict[str, Any]) -> str:
    busy = sum(doc["time_us"][k] for k in ("compute", "communication", "memory")) or None
    rows = []
    for o in (doc.get("ops") or [])[:TOP]:
        share = _pct(float(o.get("kernel_us") or 0) / busy) if busy else "-"
        rows.append(f"<tr><td><code>{esc(o['name'])}</code> <span class='muted'>{esc(_dims(o))}</span></td>"
                    f"<td class='n'>{o.get('count', 0):,}</td><td class='n'>{esc(_us(o.get('kernel_us')))}</td>"
                    f"<td class='n'>{share}</td><td>{esc(o.get('bound'))}</td><td class='n'>{_roof_pct(o)}</td>"
                    f"<td class='n'>{esc(_us(o.get('saved_us')))}</td></tr>")
    # a CPU-only trace: the analysis puts the ops' CPU time where GPU time would be (as `analyze` says)
    key = "GPU time" if doc.get("gpu_activity", True) else "CPU time"
    return (f"<table><tr><th>op [shapes]</th><th class='n'>calls</th><th class='n'>{key}</th><th class='n'>share</th>"
            "<th>bound</th><th class='n'>of roof</th><th class='n'>saved at roof</th></tr>" + "".join(rows) + "</table>")


#: Characters of a kernel's short name in the kernels table (its full name folds out below it).
KERNEL_NAME_CHARS = 60


def _kernels_table(doc: dict[str, Any]) -> str:
    """The top kernels by the short, distinct names ``analyze`` shows (demangled templates run to
    ten lines a row); the full name in the cell's title and in a collapsible detail."""
    from .names import distinct_names

    ks = (doc.get("kernels") or [])[:TOP]
    shorts = distinct_names([str(k["name"]) for k in ks], KERNEL_NAME_CHARS)
    rows = [f"<tr><td title='{esc(k['name'])}'><details><summary><code>{esc(short)}</code></summary>"
            f"<code>{esc(k['name'])}</code></details></td><td>{esc(k.get('category'))}</td><td class='n'>{k.get('count', 0):,}</td>"
            f"<td class='n'>{esc(_us(k.get('total_us')))}</td><td>{esc(k.get('bound'))}</td>"
            f"<td class='n'>{_roof_pct(k)}</td></tr>" for k, short in zip(ks, shorts)]
    return ("<table><tr><th>kernel</th><th>category</th><th class='n'>count</th><th class='n'>time</th><th>bound</th>"
            "<th class='n'>of roof</th></tr>" + "".join(rows) + "</table>")


def _time_decimals(span_ns: int) -> int:
    """Decimals of the time axis' seconds: enough that its three ticks differ."""
    return max(0, min(6, 1 - math.floor(math.log10(max(span_ns / 1e9, 1e-9)))))


#: Telemetry chart geometry: width, height, left and bottom margins (the margins hold the axes).
TELE_W, TELE_H, TELE_L, TELE_B = 680, 130, 56, 22
#: The link utilization chart's lines: (direction, attribute of the series, colour).
LINK_LINES = (("TX", "tx", "#8e44ad"), ("RX", "rx", "#3aa87a"))


def _telemetry(data: dict[str, Any]) -> str:
    series = data.get("series") or []
    links = data.get("links") or []
    stamps = [t for s in series for t in s["ts_ns"]] + [t for ln in links for t in ln.ts_ns]
    if not stamps:
        return "<p class='muted'>No telemetry samples in this run.</p>"
    t0, t1 = min(stamps), max(stamps)
    span = max(t1 - t0, 1)
    W, H, L, B = TELE_W, TELE_H, TELE_L, TELE_B  # noqa: N806

    def px(t: int) -> float:
        return L + (t - t0) / span * (W - L - 10)

    def frame(py: Any, lo: str, hi: str, lo_v: float, hi_v: float) -> str:
        """The profiler windows shaded, the axes: the lowest and highest value on the value
        axis, seconds from the first sample on the time axis (a line without them cannot be read)."""
        shade = "".join(
            f"<rect x='{px(max(a, t0)):.1f}' y='20' width='{max((min(b, t1) - max(a, t0)) / span * (W - L - 10), 1):.1f}' "
            f"height='{H - B - 20}' fill='var(--grid)'><title>profiler window</title></rect>"
            for a, b in data.get("windows") or [] if b >= t0 and a <= t1)
        return (shade + f"<line class='axis' x1='{L}' y1='20' x2='{L}' y2='{H - B}'/>"
                f"<line class='axis' x1='{L}' y1='{H - B}' x2='{W - 10}' y2='{H - B}'/>"
                f"<text class='ymax' x='{L - 4}' y='{py(hi_v) + 4:.1f}' text-anchor='end'>{esc(hi)}</text>"
                f"<text class='ymin' x='{L - 4}' y='{py(lo_v) + 4:.1f}' text-anchor='end'>{esc(lo)}</text>"
                + "".join(f"<text class='tick' x='{px(t0 + f * span):.1f}' y='{H - 6}' text-anchor='{anchor}'>"
                          f"{f * span / 1e9:,.{_time_decimals(span)}f} s</text>"
                          for f, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end"))))

    out = []
    for s in series:
        for metric, unit, top in (("power_w", "W", None), ("gpu_util", "", 1.0)):
            pts = [(t, v) for t, v in zip(s["ts_ns"], s.get(metric) or []) if v is not None]
            if len(pts) < 2:
                continue
            vmax = top or max(v for _, v in pts) * 1.1 or 1.0

            def py(v: float, vmax: float = vmax) -> float:
                return H - B - v / vmax * (H - B - 20)

            def val(v: float, unit: str = unit) -> str:
                return f"{v:,.1f} {unit}" if unit else _pct(v)

            coords = " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in pts)
            label = f"{s['key']} {'power' if metric == 'power_w' else 'utilization'}"
            lo, peak = min(v for _, v in pts), max(v for _, v in pts)
            out.append(f"<figure><svg class='telemetry' viewBox='0 0 {W} {H}' width='100%' role='img' aria-label='{esc(label)}'>"
                       f"{frame(py, val(lo), val(peak), lo, peak)}<polyline fill='none' stroke='#2b7bba' stroke-width='1.5' points='{coords}'/>"
                       f"<text x='{L + 4}' y='14'>{esc(label)} (max {peak:,.1f}{esc(unit) if unit else ''}"
                       f"{'' if unit else ' = ' + _pct(peak)})</text></svg></figure>")
    out += [_link_chart(ln, px, frame) for ln in links if ln.link_bytes_per_s]
    if links:
        out.append(_link_table(links))
    out.append(f"<p class='muted'>{(t1 - t0) / 1e9:,.{_time_decimals(span)}f} s of samples; shaded: profiler windows.</p>")
    return "".join(out)


def _link_chart(ln: Any, px: Any, frame: Any) -> str:
    """One GPU's NVLink / XGMI utilization, TX and RX, in percent of the spec's link bandwidth
    in one direction (the figure the timeline export's ``link_tx/rx_util_pct`` tracks carry)."""
    from .links import peak

    H, B = TELE_H, TELE_B  # noqa: N806
    lines = [(name, colour, [(t, v) for t, v in zip(ln.ts_ns, getattr(ln, f"{attr}_pct")) if v is not None])
             for name, attr, colour in LINK_LINES]
    top = max((v for _, _, pts in lines for _, v in pts), default=0.0)
    # the highest reading with a tenth of room above it, as the power chart; an idle link still
    # gets an axis (1 %) rather than a division by zero
    vmax = top * 1.1 or 1.0

    def py(v: float) -> float:
        return H - B - v / vmax * (H - B - 20)

    drawn = "".join(f"<polyline class='link-{name.lower()}' fill='none' stroke='{colour}' stroke-width='1.5' "
                    f"points='{' '.join(f'{px(t):.1f},{py(v):.1f}' for t, v in pts)}'>"
                    f"<title>{esc(ln.key)} link {name}, % of {esc(_si(ln.link_bytes_per_s, 'B/s'))}</title></polyline>"
                    for name, colour, pts in lines if pts)
    peaks = " · ".join(f"<tspan fill='{colour}'>{name}</tspan> max {_fixed(peak(getattr(ln, f'{attr}_pct')), ' %')}"
                       for name, attr, colour in LINK_LINES)
    label = f"{ln.key} link utilization"
    return (f"<figure><svg class='telemetry link' data-device='{esc(ln.key)}' data-vmax-pct='{vmax:.6g}' "
            f"data-link-bytes-per-s='{ln.link_bytes_per_s:.6g}' viewBox='0 0 {TELE_W} {H}' width='100%' role='img' "
            f"aria-label='{esc(label)}'>{frame(py, '0 %', f'{top:,.1f} %', 0.0, top)}{drawn}"
            f"<text x='{TELE_L + 4}' y='14'>{esc(label)}: % of {esc(_si(ln.link_bytes_per_s, 'B/s'))} per direction "
            f"({esc(ln.spec)}) · {peaks}</text></svg></figure>")


def _link_table(links: list[Any]) -> str:
    """Per GPU with link rates: the spec's bandwidth and the peak and mean TX / RX, bytes/s and
    percent of it ("-" where the spec gives no NVLink / Infinity Fabric bandwidth)."""
    from .links import mean, peak

    def cells(bps: list[Any], pct: list[Any]) -> str:
        return "".join(f"<td class='n'>{esc(_si(f(bps), 'B/s'))}</td><td class='n'>{_fixed(f(pct), ' %')}</td>"
                       for f in (peak, mean))

    rows = "".join(
        f"<tr data-device='{esc(ln.key)}'><td>{esc(ln.key)}</td><td>{esc(ln.spec or '-')}</td>"
        f"<td class='n'>{esc(_si(ln.link_bytes_per_s, 'B/s')) if ln.link_bytes_per_s else 'unknown'}</td>"
        f"{cells(ln.tx_bytes_per_s, ln.tx_pct)}{cells(ln.rx_bytes_per_s, ln.rx_pct)}</tr>" for ln in links)
    return ("<table class='links'><caption>GPU-GPU links (NVLink / XGMI, every link together, one direction)</caption>"
            "<tr><th>GPU</th><th>spec</th><th class='n'>link bandwidth</th><th class='n'>TX peak</th><th class='n'>%</th>"
            "<th class='n'>TX mean</th><th class='n'>%</th><th class='n'>RX peak</th><th class='n'>%</th>"
            "<th class='n'>RX mean</th><th class='n'>%</th></tr>" + rows + "</table>")


def _advice(doc: dict[str, Any]) -> str:
    items = doc.get("advice") or []
    if not items:
        return "<p class='muted'>No advice: nothing stood out.</p>"
    return "<ul>" + "".join(f"<li>{esc(a.get('message'))}</li>" for a in items) + "</ul>"


def _compare(cmp: dict[str, Any]) -> str:
    a, b = cmp["a"], cmp["b"]
    head = (f"<p>A: run {esc(a['id'])} '{esc(a['name'])}' · B: run {esc(b['id'])} '{esc(b['name'])}' · GPU time "
            f"{esc(_us(a['gpu_us']))} → {esc(_us(b['gpu_us']))}</p>")
    rows = []
    for m in (cmp.get("matched") or [])[:TOP]:
        ratio = m.get("ratio")
        rows.append(f"<tr><td><code>{esc(m['name'])}</code> <span class='muted'>{esc(_dims(m))}</span></td>"
                    f"<td class='n'>{esc(_us((m.get('a') or {}).get('kernel_us')))}</td>"
                    f"<td class='n'>{esc(_us((m.get('b') or {}).get('kernel_us')))}</td>"
                    f"<td class='n'>{'-' if ratio is None else f'{ratio:.2f}x'}</td>"
                    f"<td>{esc((m.get('a') or {}).get('bound'))} → {esc((m.get('b') or {}).get('bound'))}</td></tr>")
    only = []
    for side, key in (("A", "only_a"), ("B", "only_b")):
        ops = cmp.get(key) or []
        if ops:
            only.append(f"<p>Only in {side}: " + ", ".join(f"<code>{esc(o['name'])}</code> ({esc(_us(o['kernel_us']))})"
                                                          for o in ops[:10]) + (" …" if len(ops) > 10 else "") + "</p>")
    return (head + "<table><tr><th>op [shapes]</th><th class='n'>A</th><th class='n'>B</th><th class='n'>B/A</th>"
            "<th>bound A → B</th></tr>" + "".join(rows) + "</table>" + "".join(only)
            + _compare_communication(cmp.get("communication")))


# -- communication (issue 31) -----------------------------------------------------------------

COMM_BOUND_COLOURS = {"communication_bound": "#8e44ad", "latency_bound": "#e8a317"}
#: Chart geometry of the bus-bandwidth chart: width, height, left and bottom margins (px).
COMM_W, COMM_H, COMM_L, COMM_B = 680, 380, 70, 40


def comm_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The collective signatures the bus-bandwidth chart draws: every entry of the
    ``communication`` block judged against a link roof (those without one, or flagged
    ``model_error``, have no honest place under a roof) with a size and a bus bandwidth."""
    c = doc.get("communication") or {}
    return [e for e in c.get("entries") or [] if e.get("roof_us") is not None and (e.get("bytes") or 0) > 0
            and (e.get("busbw_bytes_per_s") or 0) > 0 and (e.get("link_bytes_per_s") or 0) > 0]


def _fixed(v: Any, unit: str, digits: int = 1) -> str:
    return "-" if v is None else f"{float(v):.{digits}f}{esc(unit)}"


def _bytes_tick(e: int) -> str:
    return _si(10.0 ** e, "B")


def _comm_chart(doc: dict[str, Any]) -> str:
    """Bus bandwidth against message size, log-log, one point per judged collective signature,
    each link's roof a horizontal line (as nccl-tests' curves are read)."""
    pts = comm_points(doc)
    if not pts:
        return "<p class='muted'>No collective judged against a link roof to chart.</p>"
    roofs = sorted({(str(e.get("link") or "link"), float(e["link_bytes_per_s"])) for e in pts}, key=lambda r: r[1])
    # an algorithm that moves less than the bus factor over the link (NVLS, one-shot) has its
    # ceiling, in bus-bandwidth terms, above the link's: busbw at 100 % of its roof
    ceilings = [float(e["busbw_bytes_per_s"]) / float(e["pct_of_roof"]) for e in pts]
    xs = [float(e["bytes"]) for e in pts]
    ys = [float(e["busbw_bytes_per_s"]) for e in pts] + [r[1] for r in roofs] + ceilings
    x0, x1 = _log_axis(min(xs) / 2, max(xs) * 2)
    y0, y1 = _log_axis(min(ys) / 2, max(ys) * 2)
    W, H, L, B = COMM_W, COMM_H, COMM_L, COMM_B  # noqa: N806

    def px(x: float) -> float:
        return L + (math.log10(x) - x0) / (x1 - x0) * (W - L - 10)

    def py(y: float) -> float:
        return H - B - (math.log10(y) - y0) / (y1 - y0) * (H - B - 10)

    g = [f"<svg class='busbw' viewBox='0 0 {W} {H}' width='100%' role='img' aria-label='bus bandwidth against message size'>"]
    for e in range(int(x0), int(x1) + 1):
        g.append(f"<line class='grid xtick' data-decade='{e}' x1='{px(10**e):.2f}' y1='10' x2='{px(10**e):.2f}' y2='{H - B}'/>"
                 f"<text x='{px(10**e):.1f}' y='{H - B + 14}' text-anchor='middle'>{esc(_bytes_tick(e))}</text>")
    for e in range(int(y0), int(y1) + 1):
        g.append(f"<line class='grid ytick' data-decade='{e}' x1='{L}' y1='{py(10**e):.2f}' x2='{W - 10}' y2='{py(10**e):.2f}'/>"
                 f"<text x='{L - 4}' y='{py(10**e) + 4:.1f}' text-anchor='end'>{esc(_si(10.0 ** e, 'B/s'))}</text>")
    g.append(f"<text x='{(W + L) / 2}' y='{H - 6}' text-anchor='middle'>message size (bytes)</text>"
             f"<text x='14' y='{(H - B) / 2}' transform='rotate(-90 14 {(H - B) / 2})' text-anchor='middle'>"
             "bus bandwidth (bytes/s)</text>")
    for label, bw in roofs:
        text = f"{label} {bw / 1e9:,.4g} GB/s"
        g.append(f"<line class='roof' data-bytes-per-s='{bw:.6g}' x1='{L}' y1='{py(bw):.2f}' x2='{W - 10}' y2='{py(bw):.2f}' "
                 f"stroke='var(--muted)' stroke-width='1.5'><title>{esc(text)}: the link roof, one direction</title></line>"
                 f"<text class='roof-label' x='{W - 12}' y='{py(bw) - 4:.1f}' text-anchor='end'>{esc(text)}</text>")
    total = sum(float(ent.get("kernel_us") or 0) for ent in pts) or 1.0
    for i, (ent, ceil) in enumerate(zip(pts, ceilings)):
        x, y = px(float(ent["bytes"])), py(float(ent["busbw_bytes_per_s"]))
        if abs(ceil - float(ent["link_bytes_per_s"])) > 0.01 * float(ent["link_bytes_per_s"]):
            g.append(f"<line class='ceiling' x1='{x - 8:.2f}' y1='{py(ceil):.2f}' x2='{x + 8:.2f}' y2='{py(ceil):.2f}' "
                     f"stroke='var(--muted)' stroke-dasharray='3 2'><title>{esc(ent.get('algorithm'))} "
                     f"{esc(ent.get('collective'))} of {esc(ent.get('group_size'))}: its roof in bus bandwidth, "
                     f"{esc(_si(ceil, 'B/s'))} (it moves a different share of the message over the link)</title></line>")
        r = 3 + 12 * math.sqrt(float(ent.get("kernel_us") or 0) / total)
        colour = COMM_BOUND_COLOURS.get(ent.get("bound") or "", BOUND_COLOURS["unknown"])
        title = (f"{ent.get('kernel')} — {ent.get('algorithm')} {ent.get('collective')} of {ent.get('group_size')}, "
                 f"{_si(ent.get('bytes'), 'B')} x {ent.get('count')} calls, {_us(ent.get('kernel_us'))}, busbw "
                 f"{_si(ent.get('busbw_bytes_per_s'), 'B/s')}, {_roof_pct(ent)} of the {ent.get('link')} roof, {ent.get('bound')}")
        g.append(f"<circle class='cpt' data-entry='{i}' cx='{x:.2f}' cy='{y:.2f}' r='{r:.1f}' fill='{colour}' "
                 f"fill-opacity='.75' stroke='{colour}'><title>{esc(title)}</title></circle>")
    g.append("</svg>")
    legend = " · ".join(f"<span><span class='sw' style='background:{c}'></span>{esc(b)}</span>"
                        for b, c in COMM_BOUND_COLOURS.items())
    return ("".join(g) + f"<p class='muted'>{legend} · one point per collective signature (kernel, size, group), "
            "area ∝ GPU time · bus bandwidth as nccl-tests defines it · dashed: an algorithm's own roof in bus "
            "bandwidth where it differs from the link's</p>")


def _communication(doc: dict[str, Any]) -> str:
    """The collectives judged against their link, the chart, exposed communication and, with
    several ranks, the stragglers (the ``communication`` block of ``analyze --json``)."""
    c = doc.get("communication")
    if not isinstance(c, dict):
        return ""
    total, judged = float(c.get("total_us") or 0), float(c.get("judged_us") or 0)
    out = [f"<p>{esc(_us(total))} of collectives, {esc(_pct(judged / total) if total > 0 else '-')} of it judged "
           "against a GPU-to-GPU link roof (docs/roofline.md, \"Collectives\").</p>"]
    rows = "".join(
        f"<tr><td>{esc(name)}</td><td class='n'>{esc(b.get('count'))}</td><td class='n'>{esc(_si(b.get('bytes'), 'B'))}</td>"
        f"<td class='n'>{esc(_us(b.get('kernel_us')))}</td><td class='n'>{esc(_si(b.get('busbw_bytes_per_s'), 'B/s'))}</td>"
        f"<td>{esc(b.get('link') or '-')}</td><td class='n'>{esc(_si(b.get('link_bytes_per_s'), 'B/s'))}</td>"
        f"<td class='n'>{esc(_pct(b.get('pct_of_roof')))}</td><td>{esc(b.get('bound'))}</td></tr>"
        for name, b in (c.get("by_collective") or {}).items())
    out.append("<table class='collectives'><tr><th>collective</th><th class='n'>calls</th><th class='n'>bytes</th>"
               "<th class='n'>time</th><th class='n'>bus bandwidth</th><th>link</th><th class='n'>link roof</th>"
               "<th class='n'>of roof</th><th>bound</th></tr>" + rows + "</table>")
    out.append(_comm_chart(doc))
    ex = c.get("exposed")
    if isinstance(ex, dict):
        pct = ex.get("overlap_pct")
        out.append(f"<h3>Exposed communication</h3><p>{esc(_us(ex.get('exposed_us')))} of "
                   f"{esc(_us(ex.get('communication_us')))} of collective time runs with no compute kernel on another "
                   f"stream of its device (overlap {'-' if pct is None else f'{pct:.2f}'} %); perfect overlap would "
                   f"save at most {esc(_us(ex.get('saving_upper_bound_us')))}.</p>")
        tops = (ex.get("top") or [])[:10]
        if tops:
            out.append("<table class='exposed'><tr><th>kernel</th><th>op</th><th>collective</th><th class='n'>size</th>"
                       "<th class='n'>calls</th><th class='n'>exposed</th><th class='n'>of its time</th></tr>" + "".join(
                           f"<tr><td><code>{esc(t.get('kernel'))}</code></td><td><code>{esc(t.get('op') or '-')}</code></td>"
                           f"<td>{esc(t.get('collective') or '-')}</td><td class='n'>{esc(_si(t.get('bytes'), 'B'))}</td>"
                           f"<td class='n'>{esc(t.get('count'))}</td><td class='n'>{esc(_us(t.get('exposed_us')))}</td>"
                           f"<td class='n'>{_fixed(t.get('exposed_pct'), ' %')}</td></tr>"
                           for t in tops) + "</table>")
    st = c.get("stragglers")
    if isinstance(st, dict):
        s = st.get("straggler")

        def rank(r: dict[str, Any]) -> str:
            return f"rank {r['rank']}" if r.get("rank") is not None else str(r.get("key"))

        out.append(f"<h3>Stragglers</h3><p>{esc(len(st.get('ranks') or []))} ranks, {esc(st.get('instances'))} collective "
                   f"instances matched ({esc(st.get('unmatched'))} unmatched); the ranks waited "
                   f"{esc(_us(st.get('total_wait_us')))} in all for the last to arrive. "
                   + (f"Straggler: <b>{esc(rank(s))}</b> ({esc(s.get('key'))}), {esc(_us(s.get('mean_delay_us')))} after "
                      f"the others' median start on average; the others waited {esc(_us(s.get('caused_wait_us')))} for it."
                      if s else "No straggler: every matched collective started together.")
                   + f" Clocks: {esc((st.get('clock') or {}).get('method'))}</p>")
        out.append("<table class='stragglers'><tr><th>rank</th><th>host</th><th class='n'>waited</th><th class='n'>latest</th>"
                   "<th class='n'>caused</th><th class='n'>mean delay</th><th class='n'>clock offset</th></tr>" + "".join(
                       f"<tr><td>{esc(rank(r))}</td><td>{esc(r.get('host') or '-')}</td><td class='n'>{esc(_us(r.get('wait_us')))}</td>"
                       f"<td class='n'>{esc(r.get('latest_count'))}</td><td class='n'>{esc(_us(r.get('caused_wait_us')))}</td>"
                       f"<td class='n'>{esc(_us(r.get('mean_delay_us')))}</td><td class='n'>{esc(_us(r.get('clock_offset_us')))}</td></tr>"
                       for r in st.get("ranks") or []) + "</table>")
    return "\n".join(out)


def _compare_communication(c: dict[str, Any] | None) -> str:
    """Per collective kind, each run's time and percent of link roof side by side (issue 31)."""
    if not isinstance(c, dict):
        return ""
    sa, sb = c.get("a") or {}, c.get("b") or {}

    def cell(x: dict[str, Any] | None) -> str:
        if not x:
            return "<td class='n'>-</td><td class='n'>-</td><td class='n'>-</td>"
        return (f"<td class='n'>{esc(_us(x.get('kernel_us')))}</td><td class='n'>{esc(_si(x.get('busbw_bytes_per_s'), 'B/s'))}</td>"
                f"<td class='n'>{esc(_pct(x.get('pct_of_roof')))}</td>")

    head = (f"<h3>Communication</h3><p>collective time {esc(_us(sa.get('collective_us')))} → {esc(_us(sb.get('collective_us')))}"
            f" · exposed {esc(_us(sa.get('exposed_us')))} → {esc(_us(sb.get('exposed_us')))} · links: "
            f"{esc(', '.join(sa.get('links') or []) or '-')} → {esc(', '.join(sb.get('links') or []) or '-')}</p>")
    rows = "".join(f"<tr><td>{esc(r['collective'])}</td>{cell(r.get('a'))}{cell(r.get('b'))}"
                   f"<td class='n'>{_fixed(r.get('ratio'), 'x', 2)}</td></tr>"
                   for r in c.get("by_collective") or [])
    return (head + "<table class='comm-compare'><tr><th>collective</th><th class='n'>A time</th><th class='n'>A busbw</th>"
            "<th class='n'>A of roof</th><th class='n'>B time</th><th class='n'>B busbw</th><th class='n'>B of roof</th>"
            "<th class='n'>B/A</th></tr>" + rows + "</table>")


def render_report(data: dict[str, Any]) -> str:
    """The page. ``data``: ``analysis`` (``analyze --json``'s document), optional ``telemetry``
    (the run's telemetry summary), ``series`` ([{key, ts_ns, power_w, gpu_util}]), ``windows``
    ([(start_ns, end_ns)]), ``command`` (redacted), ``compare`` (``compare --json``'s
    document), ``generated`` (a timestamp text)."""
    doc = data["analysis"]
    run = doc["run"]
    title = f"gpuscope report: run {run['id']} {run['name']}"
    parts = [
        "<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<meta name='color-scheme' content='light dark'>",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(run['name'])}</h1>", _summary(data),
        "<h2>Where the GPU time went</h2>", _breakdown(doc),
        "<h2>Roofline</h2>", _roofline(doc), _coverage(doc),
        "<h2>Top ops</h2>", _ops_table(doc),
        *(("<h2>Top kernels</h2>", _kernels_table(doc)) if doc.get("kernels") else ()),
        # the collectives against their link (issue 31): only for a run that has some
        *(("<h2>Communication</h2>", _communication(doc)) if isinstance(doc.get("communication"), dict) else ()),
        "<h2>Telemetry</h2>", _telemetry(data),
        "<h2>Advice</h2>", _advice(doc),
    ]
    if data.get("compare"):
        parts += ["<h2>Compared with another run</h2>", _compare(data["compare"])]
    parts.append(f"<p class='muted'>Made by gpuscope report{' on ' + esc(data['generated']) if data.get('generated') else ''}. "
                 "Numbers as `gpuscope analyze` computes them (docs/analysis.md, docs/roofline.md).</p></body></html>")
    return "\n".join(parts) + "\n"
