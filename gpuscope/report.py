"""Text rendering of analyzer results for the CLI. Plain strings; no terminal library."""
from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from .redact import redact_command

#: The ingest note on malformed events, which both reports already show as a line of their own.
_MALFORMED_NOTE = re.compile(r"skipped \d+ malformed events")


def fmt_us(us: float | None) -> str:
    """A duration in microseconds as a short human string with its unit."""
    if us is None:
        return "-"
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.3f} s"
    if a >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} µs"


def fmt_pct(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` ("-" when whole is 0)."""
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


#: Epoch nanoseconds below this (one year) cannot be a wall-clock time.
RELATIVE_NS_LIMIT = 365 * 86400 * 10**9


def fmt_ns_time(ns: int | None) -> str:
    """Epoch nanoseconds as local ``YYYY-MM-DD HH:MM:SS``; ``(relative)`` for times from a trace
    with relative timestamps and no ``baseTimeNanoseconds`` (they count from the profiler's start,
    so they fall in the first days of 1970)."""
    if ns is None:
        return "-"
    if abs(ns) < RELATIVE_NS_LIMIT:
        return "(relative)"
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: str | None, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    if text is None:
        return "-"
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _whole(text: str | None, width: int) -> str:
    """``text`` on one line, whole (``--wide``)."""
    return "-" if text is None else " ".join(str(text).split())


def _distinct_names(names: list[str], width: int) -> list[str]:
    """Kernel names narrowed for a table and still told apart (render.names)."""
    from .render.names import distinct_names

    return distinct_names(names, width)


def _wrap_prose(lines: list[str], width: int | None) -> str:
    """The report's lines, with any line still wider than the terminal (prose: notes, titles;
    tables are fitted already) wrapped, keeping its indent."""
    if width is None:
        return "\n".join(lines)
    out = []
    for block in lines:
        for line in block.split("\n"):
            if len(line) <= width:
                out.append(line)
            else:
                indent = line[: len(line) - len(line.lstrip())]
                out.append(_prose(line.strip(), width, indent, indent + "  "))
    return "\n".join(out)


def _prose(text: str, width: int, first: str = "", rest: str = "") -> str:
    """A paragraph wrapped to the terminal."""
    import textwrap

    return textwrap.fill(text, width=max(40, width), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None, *,
          width: int | None = None, drop: Sequence[str] = (), flex: str | None = None,
          flex_fit: Callable[[list[str], int], list[str]] | None = None, flex_min: int = 30) -> str:
    """A plain-text table. ``align`` holds one of ``l``/``r`` per column (numbers right).

    With ``width``, the table fits in it: the columns named in ``drop`` go first, in that order,
    until it fits, the ``flex`` column (names, commands) narrowed to ``flex_min`` before any goes
    and further after the last, by ``flex_fit(values, width)`` or else by keeping the head and
    tail of each value."""
    from .render.names import fit

    headers = [str(h) for h in headers]
    body = [["-" if c is None else " ".join(str(c).split()) for c in r] for r in rows]
    align = align or "l" * len(headers)

    def total(cols: list[int]) -> int:
        return sum(max(len(headers[i]), *(len(r[i]) for r in body)) if body else len(headers[i]) for i in cols) \
            + 2 * (len(cols) - 1)

    cols = list(range(len(headers)))
    fi = headers.index(flex) if flex in headers else None
    full = [r[fi] for r in body] if fi is not None else []

    def narrow(floor: int) -> None:
        # the flex column takes what the others leave, down to `floor`
        if fi is None or not body or total(cols) <= width:
            return
        others = total([c for c in cols if c != fi]) + 2
        room = max(len(headers[fi]), floor, width - others)
        fitted = flex_fit(full, room) if flex_fit else [fit(v, room) for v in full]
        for r, v in zip(body, fitted):
            r[fi] = v

    if width is not None:
        narrow(flex_min)
        for name in drop:
            if total(cols) <= width:
                break
            if name in headers and headers.index(name) in cols:
                cols.remove(headers.index(name))
                narrow(flex_min)
        narrow(8)
    cells = [[headers[i] for i in cols]] + [[r[i] for i in cols] for r in body]
    aligns = [align[i] for i in cols]
    widths = [max(len(r[k]) for r in cells) for k in range(len(cols))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, aligns)]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _width() -> int:
    """The terminal's width ($COLUMNS first), at least 60 columns."""
    return max(60, shutil.get_terminal_size((120, 24)).columns)


BOUND_LABEL = {"compute_bound": "compute", "memory_bound": "memory", "latency_bound": "latency",
               "unknown": "unknown", None: "-"}


def fmt_rate(value: float | None, unit: str) -> str:
    """A rate (FLOP/s, B/s) with an SI prefix."""
    if value is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _bound(item: dict[str, Any]) -> str:
    label = BOUND_LABEL.get(item.get("bound"), str(item.get("bound")))
    if item.get("bound") == "memory_bound" and item.get("link") == "host_link":
        label = "host link"  # a host<->device copy, judged against PCIe / NVLink-C2C, not HBM
    conf = item.get("confidence")
    if conf == "family":
        label += " (name)"
    elif conf == "duration":
        label += " (short)"
    elif conf == "graph_capture":
        label += " (graph)"
    return label


def _roof_pct(item: dict[str, Any]) -> str:
    p = item.get("pct_of_roof")
    return "-" if p is None else f"{100 * p:.0f}%"


def _dims(d: Any) -> str:
    """Shapes or dtypes for a table: trailing empty entries (scalar and None arguments) dropped,
    dtypes short (``bf16``, not ``c10::BFloat16``), as ``--json`` does."""
    from .analyzers.advice import compact_dims

    if d is None:
        return ""
    d = compact_dims(d)
    if isinstance(d, list) and all(isinstance(x, str) for x in d):
        return "[" + ",".join(_short_dtype(x) for x in d) + "]"
    return json.dumps(d, separators=(",", ":"))


_DTYPE_SHORT = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64", "long int": "int64",
                "int": "int32", "bool": "bool", "c10::Float8_e4m3fn": "fp8e4m3", "c10::Float8_e5m2": "fp8e5m2",
                "c10::Float8_e4m3fnuz": "fp8e4m3fnuz", "unsigned char": "uint8", "signed char": "int8",
                "short int": "int16", "Scalar": "scalar", "ScalarList": "scalars", "TensorList": "tensors"}


def _short_dtype(t: str) -> str:
    return _DTYPE_SHORT.get(t, t) if t else "-"


def render_analysis(doc: dict[str, Any], top: int = 10, wide: bool = False) -> str:
    """The ``gpuscope analyze`` text report of an analysis document; ``wide`` shows names and
    shapes whole instead of shortened to the terminal."""
    cut = _whole if wide else shorten
    w = _width()
    run = doc["run"]
    out = [f"run {run['id']} '{run['name']}' ({run['source']}, {run['status']})"]
    devs = doc["devices"]
    if devs:
        for d in devs:
            if d.get("kind") not in (None, "gpu"):
                out.append(f"  device {d['key']}: {d.get('name') or 'unnamed'} [{d.get('kind')}]")
                continue
            spec = d.get("spec") or "spec unknown"
            out.append(f"  device {d['key']}: {d.get('name') or 'unnamed'} [{d.get('vendor')}, {spec}]")
    for e in doc.get("excluded_traces") or ():
        out.append(f"  not counted: trace {e['trace_id']} ({e['path'].rsplit('/', 1)[-1]}): it only captures "
                   "CUDA/HIP graphs, which the run's other traces replay; it maps their kernels to ops")
    t = doc["time_us"]
    if not doc["gpu_activity"]:
        out.append("")
        out.append("No GPU activity in this run: the trace is CPU-only. Ops below carry their CPU time.")
    else:
        busy = t["compute"] + t["communication"] + t["memory"]
        total = busy + t["idle"]
        out.append("")
        out.append("GPU time breakdown (summed over devices; shares of busy + idle)")
        rows = [
            ("compute", fmt_us(t["compute"]), fmt_pct(t["compute"], total)),
            ("communication", fmt_us(t["communication"]), fmt_pct(t["communication"], total)),
            ("memory (memcpy/memset)", fmt_us(t["memory"]), fmt_pct(t["memory"], total)),
            ("idle", fmt_us(t["idle"]), fmt_pct(t["idle"], total)),
        ]
        out.append(table(["category", "time", "share"], rows, "lrr"))
        r = doc.get("roofline_us") or {}
        if t["compute"] > 0:
            out.append("")
            out.append("Compute time by bound (roofline)")
            out.append(table(
                ["bound", "time", "share of compute"],
                [(label, fmt_us(r.get(b, 0.0)), fmt_pct(r.get(b, 0.0), t["compute"]))
                 for b, label in (("compute_bound", "compute-bound"), ("memory_bound", "memory-bound"),
                                  ("latency_bound", "latency-bound"), ("unknown", "unknown"))],
                "lrr",
            ))
            host_copies = any(k.get("link") == "host_link" for k in doc.get("kernels", []))
            for d in (doc.get("roofline") or {}).get("devices", []):
                if d.get("spec") is None:
                    out.append(f"  {d['key']}: no roof ({d.get('note') or 'GPU not identified'})")
                else:
                    src = d.get("roof_source")
                    via = d.get("identified_via")
                    extra = "" if d.get("exact", True) else f"; inferred: {d.get('note')}"
                    if (doc.get("roofline") or {}).get("roof") == "measured" and src != "measured":
                        # asked for the measured roof and fell back: say so, not silently
                        extra += f"; --roof measured: {d.get('note') or 'no calibration of this GPU'}"
                    bw = fmt_rate(d.get("mem_bw_bytes_per_s"), "B/s")
                    out.append(f"  {d['key']}: judged against {d['spec']} ({src} roof, {bw}; identified by {via}{extra})")
                    if host_copies and d.get("host_link_bytes_per_s"):
                        out.append(f"  {d['key']}: host<->device copies judged against {d.get('host_link') or 'the host link'}"
                                   f" ({fmt_rate(d['host_link_bytes_per_s'], 'B/s')} per direction)")
        if len(doc["per_device"]) > 1:
            out.append("")
            out.append(table(
                ["device", "compute", "communication", "memory", "idle", "span"],
                [(d["key"], fmt_us(d["compute_us"]), fmt_us(d["communication_us"]), fmt_us(d["memory_us"]),
                  fmt_us(d["idle_us"]), fmt_us(d["span_us"])) for d in doc["per_device"]],
                "lrrrrr",
            ))
        ks = doc["kernels"][:top]
        if ks:
            gpu_total = busy or 1.0
            out.append("")
            out.append(_prose(f"Top {len(ks)} of {len(doc['kernels'])} kernels by GPU time (bound: (name) = from the "
                              "kernel-name family, (short) = by duration, (graph) = via graph capture)", w))
            out.append(table(
                ["kernel", "family", "bound", "calls", "total", "mean", "share", "of roof", "headroom"],
                [(_whole(k["name"], 0), k.get("family") or k["category"], _bound(k), k["count"],
                  fmt_us(k["total_us"]), fmt_us(k["mean_us"]), fmt_pct(k["total_us"], gpu_total), _roof_pct(k),
                  fmt_us(k.get("saved_us"))) for k in ks],
                "lllrrrrrr", width=None if wide else w, drop=("mean", "headroom", "family", "calls"),
                flex="kernel", flex_fit=_distinct_names,
            ))
    ops = doc["ops"][:top]
    if ops:
        key = "GPU time" if doc["gpu_activity"] else "CPU time"
        out.append("")
        out.append(f"Top {len(ops)} of {len(doc['ops'])} ops by {key} (op, input shapes, dtypes)")
        name_w = 30
        if doc["gpu_activity"]:
            out.append(table(
                ["op", "input shapes", "dtypes", "calls", key.lower(), "bound", "FLOP/s", "B/s", "of roof", "headroom"],
                [(cut(o["name"], name_w), _dims(o["input_dims"]),
                  cut(_dims(o["input_types"]), 18), o["count"], fmt_us(o["kernel_us"]), _bound(o),
                  fmt_rate(o.get("achieved_flops_per_s"), "FLOP/s") if o.get("flops") else "-",
                  fmt_rate(o.get("achieved_bytes_per_s"), "B/s"), _roof_pct(o), fmt_us(o.get("saved_us")))
                 for o in ops],
                "lllrrlrrrr", width=None if wide else w, drop=("FLOP/s", "B/s", "headroom", "dtypes", "calls"),
                flex="input shapes", flex_min=20,
            ))
        else:
            out.append(table(
                ["op", "input shapes", "dtypes", "calls", key.lower(), "FLOPs/call"],
                [(cut(o["name"], name_w), _dims(o["input_dims"]),
                  cut(_dims(o["input_types"]), 24), o["count"], fmt_us(o["kernel_us"]),
                  "-" if o.get("flops") is None else f"{o['flops']:.3g}") for o in ops],
                "lllrrr", width=None if wide else w, drop=("dtypes", "FLOPs/call"), flex="input shapes", flex_min=20,
            ))
    advice = doc.get("advice") or []
    if advice:
        out.append("")
        out.append("Advice")
        for a in advice:
            out.append(_prose(a["message"], w, "  - ", "    "))
    c = doc["counts"]
    if doc["gpu_activity"] and c["gpu_activities_without_op"]:
        out.append("")
        out.append(
            f"{c['gpu_activities_without_op']} of {c['gpu_activities']} GPU activities "
            f"({fmt_us(c['gpu_us_without_op'])}) have no CPU op in the trace (graph replays, "
            "traces without a CPU side, or launches outside any op); their bound comes from duration and name."
        )
    if c.get("graph_replayed_kernels"):
        out.append(
            f"{c['graph_kernels_mapped_to_ops']} of {c['graph_replayed_kernels']} kernels replayed from CUDA/HIP "
            "graphs were mapped to the ops that captured them"
            + ("." if c['graph_kernels_mapped_to_ops'] else
               " (no graph-capture trace in this run: ingest it together with the replay trace).")
        )
    skipped = doc.get("skipped") or {}
    if skipped:
        out.append("")
        out.append("Skipped malformed events: " + ", ".join(f"{n} {r}" for r, n in skipped.items()))
    # The ingest notes on skipped events, a CPU-only trace and graph replays repeat what is said above.
    notes = [n for n in doc.get("notes", [])
             if not _MALFORMED_NOTE.match(n) and not n.startswith("no GPU activity")
             and "kernels replayed from CUDA/HIP graphs" not in n]
    for n in notes:
        out.append(f"note: {n}")
    return _wrap_prose(out, None if wide else w)


def render_runs(runs: list[dict[str, Any]]) -> str:
    """The ``gpuscope runs`` table."""
    if not runs:
        return "no runs yet (gpuscope ingest TRACE... or gpuscope run -- CMD)"
    w = _width()
    rows = []
    for r in runs:
        dur = (r["ended_ns"] - r["started_ns"]) / 1e3 if r["ended_ns"] and r["started_ns"] else None
        rows.append((r["id"], shorten(r["name"], 28 if w >= 100 else 20), r["status"], r["source"],
                     fmt_ns_time(r["started_ns"]), fmt_us(dur), r["samples"], r["kernels"], r["ops"],
                     "-" if r["exit_code"] is None else r["exit_code"], redact_command(r["command"])))
    # what identifies a run stays; counts go first when the terminal is narrow; the command
    # keeps its head and tail (the program and the file), cut in the middle
    return table(["id", "name", "status", "source", "started", "duration", "samples", "kernels", "ops", "exit",
                  "command"], rows, "rllllrrrrrl", width=w, drop=("samples", "ops", "kernels", "source", "exit", "duration"),
                 flex="command")


def render_ingest(doc: dict[str, Any]) -> str:
    """The ``gpuscope ingest`` summary."""
    ld = doc["loaded"]
    lines = [
        f"ingested {len(doc['files'])} file(s), {doc['events']} events, as run {doc['run_id']} '{doc['name']}'",
        f"  loaded: {ld['kernels']} kernels, {ld['memcpy']} memcpy, {ld['memset']} memset, {ld['ops']} ops, "
        f"{ld['annotations']} annotations, {ld['devices']} devices",
    ]
    lk = doc["linked"]
    total = lk["kernels_with_op"] + lk["kernels_without_op"]
    if total:
        lines.append(f"  linked: {lk['kernels_with_op']} of {total} GPU activities to a CPU op")
    sk = doc["skipped"]
    if sk["malformed"]:
        lines.append("  skipped: " + ", ".join(f"{n} {r}" for r, n in sk["reasons"].items()))
    for n in doc.get("notes", []):
        if not _MALFORMED_NOTE.match(n):  # said on the "skipped:" line
            lines.append(f"  note: {n}")
    lines.append(f"next: gpuscope analyze {doc['run_id']}")
    return "\n".join(lines)


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int | None = 60) -> str:
    """A SQL result as a text table: numbers right-aligned, NULL as ``-``, values cut at
    ``max_width`` characters (None: whole, ``sql --wide``)."""
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
               and any(r[i] is not None for r in rows) for i in range(len(columns))]
    cut = _whole if max_width is None else shorten
    return table(list(columns), [[cut(str(c), max_width or 0) if c is not None else None for c in r] for r in rows],
                 "".join("r" if n else "l" for n in numeric))


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def render_compare(doc: dict[str, Any], top: int = 15, wide: bool = False) -> str:
    """The ``gpuscope compare`` text report."""
    cut = _whole if wide else shorten
    w = _width()
    a, b = doc["a"], doc["b"]

    def label(r: dict[str, Any]) -> str:
        devs = ", ".join(sorted({d.get("spec") or d.get("name") or d["key"] for d in r["devices"]})) or "no GPU"
        return f"run {r['id']} '{r['name']}' [{devs}]"

    out = [f"A: {label(a)}", f"B: {label(b)}", "", "Totals (ratio = B / A; above 1: B takes longer)"]
    t = doc["totals"]
    rows = [(k, fmt_us(t[k]["a"]), fmt_us(t[k]["b"]), _ratio(t[k]["ratio"]))
            for k in ("gpu_us", "compute", "communication", "memory", "idle", "matched_ops_us")]
    rows[0] = ("GPU busy",) + rows[0][1:]
    rows[-1] = ("matched ops",) + rows[-1][1:]
    out.append(table(["", "A", "B", "B/A"], rows, "lrrr"))
    ra, rb = t["roofline_us"]["a"], t["roofline_us"]["b"]
    out.append(table(["compute by bound", "A", "B"],
                     [(BOUND_LABEL[k], fmt_us(ra.get(k)), fmt_us(rb.get(k))) for k in
                      ("compute_bound", "memory_bound", "latency_bound", "unknown")], "lrr"))
    m = doc["matched"][:top]
    if m:
        out.append("")
        out.append(f"Matched ops, largest differences first ({len(doc['matched'])} matched by name, shapes and dtypes)")
        name_w = 28
        out.append(table(
            ["op", "input shapes", "A time", "A bound", "A roof", "B time", "B bound", "B roof", "B/A", "B-A"],
            [(cut(x["name"], name_w), _dims(x["input_dims"]),
              fmt_us(x["a"]["kernel_us"]), _bound(x["a"]), _roof_pct(x["a"]),
              fmt_us(x["b"]["kernel_us"]), _bound(x["b"]), _roof_pct(x["b"]),
              _ratio(x["ratio"]), fmt_us(x["delta_us"])) for x in m],
            "llrlrrlrrr", width=None if wide else w, drop=("A roof", "B roof", "B-A", "A bound", "B bound"),
            flex="input shapes", flex_min=16,
        ))
    for side, key in (("A", "only_a"), ("B", "only_b")):
        rows_only = doc[key][:top]
        if rows_only:
            total = sum(r["kernel_us"] for r in doc[key])
            out.append("")
            n = len(doc[key])
            out.append(f"Only in {side}: {n} op signature{'' if n == 1 else 's'}, {fmt_us(total)}")
            out.append(table(["op", "input shapes", "calls", "time", "bound"],
                             [(cut(r["name"], 36), _dims(r["input_dims"]), r["count"],
                               fmt_us(r["kernel_us"]), BOUND_LABEL.get(r.get("bound"), "-")) for r in rows_only],
                             "llrrl", width=None if wide else w, drop=("calls",), flex="input shapes", flex_min=16))
    fam = doc["by_family"][:top]
    if fam:
        out.append("")
        out.append("GPU time by kernel family (where each side spends its time)")
        out.append(table(["family", "A", "B", "B/A", "B-A"],
                         [(f["family"], fmt_us(f["a_us"]), fmt_us(f["b_us"]), _ratio(f["ratio"]), fmt_us(f["delta_us"]))
                          for f in fam], "lrrrr"))
    return _wrap_prose(out, None if wide else w)


def _telemetry_stats(st: dict[str, Any]) -> str:
    """Sample count, utilisation, power, SM clock and temperature from ``{metric}_mean`` /
    ``{metric}_max`` keys (each shown only when present)."""
    bits = [f"{st['samples']} samples"]
    for metric, label, scale, unit in (("gpu_util", "util", 100, "%"), ("power_w", "power", 1, " W"),
                                       ("sm_clock_mhz", "SM clock", 1, " MHz")):
        mean, peak = st.get(f"{metric}_mean"), st.get(f"{metric}_max")
        if mean is not None:
            text = f"{label} {scale * mean:.0f}{unit}"
            if peak is not None:
                text += f" (max {scale * peak:.0f}{unit})"
            bits.append(text)
    if st.get("temp_c_max") is not None:
        bits.append(f"{st['temp_c_max']:.0f} °C max")
    return ", ".join(bits)


def _token_lines(tele: dict[str, Any]) -> list[str]:
    """Generated tokens, their rate and energy; decode and prefill apart; warm-up left out."""
    gen = tele.get("generation") or {}
    out = []
    n = gen.get("generated_tokens")
    if n:
        line = f"  tokens: {n:,} generated ({gen.get('source')})"
        if gen.get("prompt_tokens"):
            line += f", {gen['prompt_tokens']:,} prompt"
        rate, jpt = gen.get("tokens_per_s"), gen.get("energy_per_token_j")
        if rate is not None:
            line += f": {rate:,.1f} generated tokens/s"
            if jpt is not None:
                line += f", {jpt:.4g} J per generated token"
            where = ("prefill and decode steps" if gen.get("basis") == "steps" else "the whole run")
            line += f" (over {gen['seconds']:.2f} s of {where})"
        elif tele.get("energy_j") is None:
            line += "; no energy counter or power on this machine"
        out.append(line)
    parts = []
    for name, label, key in (("decode", "decode", "tokens"), ("prefill", "prefill", "prompt_tokens")):
        ph = gen.get(name)
        if not ph or ph.get("tokens_per_s") is None:
            continue
        unit = "tokens" if key == "tokens" else "prompt tokens"
        text = f"{label} {ph[key]:,} {unit} in {ph['seconds']:.3f} s, {ph['tokens_per_s']:,.1f} {unit}/s"
        if ph.get("energy_per_token_j") is not None:
            text += f", {ph['energy_per_token_j']:.4g} J per {unit[:-1]}"
        parts.append(text)
    if parts:
        out.append("    " + "; ".join(parts))
    warm = gen.get("warmup")
    if warm:
        out.append(f"    warm-up left out: {warm['marks']} marks, {warm['generated_tokens']:,} generated and "
                   f"{warm['prompt_tokens']:,} prompt tokens")
    return out


def render_run_summary(summary: dict[str, Any], top: int = 10) -> str:
    """The summary ``gpuscope run`` prints at the end."""
    out = [f"gpuscope run {summary['run_id']}: exit code {summary['exit_code']}  (run dir {summary['run_dir']})"]
    windows = summary.get("windows") or []
    traces = summary.get("traces") or []
    out.append(f"  profiler windows: {len(windows)}, traces: {len(traces)}, marks: {summary.get('marks', 0)}")
    if summary.get("ingest_error"):
        out.append(f"  traces not ingested: {summary['ingest_error']}")
    for note in (summary.get("profiler") or {}).get("notes") or ():
        out.append(f"  profiler: {note}")
    tele = summary.get("telemetry") or {}
    for g in tele.get("gpus", []):
        out.append(f"  {g['key']} ({g.get('name') or '?'}): {_telemetry_stats(g['run'])}")
        for w in g.get("windows", []):
            if w["samples"]:
                out.append(f"    during window (pid {w['pid']}): {_telemetry_stats(w)}")
    by_class = tele.get("by_kernel_class") or {}
    if by_class:
        parts = [f"{cls.replace('_bound', '-bound')}: {_telemetry_stats(by_class[cls])}"
                 for cls in ("compute_bound", "memory_bound", "latency_bound", "unknown", "communication", "memory",
                             "idle") if by_class.get(cls)]
        out.append("  telemetry by what the GPU was running (samples inside the traced windows): " + "; ".join(parts))
    if tele.get("energy_j") is not None:
        line = f"  energy over the run: {tele['energy_j']:.1f} J ({tele['energy_source']})"
        if tele.get("energy_integrated_j") is not None and tele.get("energy_source") != "integrated power":
            line += f"; integrated power {tele['energy_integrated_j']:.1f} J"
        out.append(line)
    for note in tele.get("energy_notes") or ():
        out.append(f"    {note}")
    out.extend(_token_lines(tele))
    if not tele.get("gpus"):
        if summary.get("replay"):
            out.append(f"  no GPU telemetry (the recording {summary['replay']} has no GPU)")
        else:
            out.append("  no GPU telemetry (no NVIDIA or AMD GPU found: see `gpuscope devices`)")
    doc = summary.get("analysis")
    if doc and summary.get("traces"):  # without a trace there is nothing to break down (the profiler line says why)
        out.append("")
        out.append(render_analysis(doc, top=top))
    return "\n".join(out)
