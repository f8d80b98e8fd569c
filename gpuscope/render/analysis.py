"""The ``gpuscope analyze`` text report, from an analysis document (analyzers.breakdown), and
the cells the compare report shares with it (bound labels, percent of roof, shapes and dtypes)."""
from __future__ import annotations

import json
from typing import Any

from ..analyzers.coverage import coverage_line
from ..analyzers.modelspec import model_line
from ..textsafe import visible
from .communication import communication_lines
from .gap import gap_lines
from .ingest import MALFORMED_NOTE
from .table import DEFAULT_WIDTH, fmt_pct, fmt_rate, fmt_us, prose, shorten, table, whole, wrap_prose


BOUND_LABEL = {"compute_bound": "compute", "memory_bound": "memory", "cache_bound": "cache",
               "latency_bound": "latency", "unknown": "unknown", None: "-"}


def bound_label(item: dict[str, Any]) -> str:
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


def roof_pct(item: dict[str, Any]) -> str:
    p = item.get("pct_of_roof")
    if item.get("model_error"):
        return "model err"  # the cost model overshoots every roof: no percent (see the notes)
    return "-" if p is None else f"{100 * p:.0f}%"


def dims(d: Any) -> str:
    """Shapes or dtypes for a table: trailing empty entries (scalar and None arguments) dropped,
    dtypes short (``bf16``, not ``c10::BFloat16``), as ``--json`` does."""
    from ..analyzers.advice import compact_dims

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


def _distinct_names(names: list[str], width: int) -> list[str]:
    """Kernel names narrowed for a table and still told apart (render.names)."""
    from .names import distinct_names

    return distinct_names(names, width)


def render_analysis(doc: dict[str, Any], top: int = 10, wide: bool = False, width: int = DEFAULT_WIDTH) -> str:
    """The ``gpuscope analyze`` text report of an analysis document, fitted to ``width`` columns;
    ``wide`` shows names and shapes whole instead of shortened."""
    cut = whole if wide else shorten
    run = doc["run"]
    # names from the trace and its file (run, device, path, notes) are shown with their control
    # characters visible (textsafe); table cells are made so by table()
    out = [f"run {run['id']} '{visible(str(run['name']))}' ({run['source']}, {run['status']})"]
    devs = doc["devices"]
    if devs:
        for d in devs:
            if d.get("kind") not in (None, "gpu"):
                out.append(f"  device {visible(str(d['key']))}: {visible(str(d.get('name') or 'unnamed'))} "
                           f"[{visible(str(d.get('kind')))}]")
                continue
            spec = d.get("spec") or "spec unknown"
            out.append(f"  device {visible(str(d['key']))}: {visible(str(d.get('name') or 'unnamed'))} "
                       f"[{visible(str(d.get('vendor')))}, {visible(str(spec))}]")
    for e in doc.get("excluded_traces") or ():
        out.append(f"  not counted: trace {e['trace_id']} ({visible(e['path'].rsplit('/', 1)[-1])}): it only captures "
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
                                  ("cache_bound", "cache-bound"), ("latency_bound", "latency-bound"),
                                  ("unknown", "unknown"))
                 if b != "cache_bound" or r.get(b)],  # the cache row only when some work is served from cache
                "lrr",
            ))
            host_copies = any(k.get("link") == "host_link" for k in doc.get("kernels", []))
            for d in (doc.get("roofline") or {}).get("devices", []):
                if d.get("spec") is None:
                    out.append(f"  {visible(str(d['key']))}: no roof ({visible(str(d.get('note') or 'GPU not identified'))})")
                else:
                    src = d.get("roof_source")
                    via = d.get("identified_via")
                    extra = "" if d.get("exact", True) else f"; inferred: {visible(str(d.get('note')))}"
                    if (doc.get("roofline") or {}).get("roof") == "measured" and src != "measured":
                        # asked for the measured roof and fell back: say so, not silently
                        extra += f"; --roof measured: {visible(str(d.get('note') or 'no calibration of this GPU'))}"
                    bw = fmt_rate(d.get("mem_bw_bytes_per_s"), "B/s")
                    out.append(f"  {d['key']}: judged against {d['spec']} ({src} roof, {bw}; identified by {via}{extra})")
                    if host_copies and d.get("host_link_bytes_per_s"):
                        out.append(f"  {d['key']}: host<->device copies judged against {d.get('host_link') or 'the host link'}"
                                   f" ({fmt_rate(d['host_link_bytes_per_s'], 'B/s')} per direction)")
        cov_line = coverage_line(doc.get("coverage"), name_width=None if wide else 48)
        if cov_line:
            out.append(cov_line if wide else prose(cov_line, width, "", "  "))
        m_line = model_line(doc.get("model"))
        if m_line:
            out.append(visible(m_line) if wide else prose(visible(m_line), width, "", "  "))
        out.extend(gap_lines(doc, width))  # the gap to the decode speed of light (render/gap.py)
        if len(doc["per_device"]) > 1:
            out.append("")
            out.append(table(
                ["device", "compute", "communication", "memory", "idle", "span"],
                [(d["key"], fmt_us(d["compute_us"]), fmt_us(d["communication_us"]), fmt_us(d["memory_us"]),
                  fmt_us(d["idle_us"]), fmt_us(d["span_us"])) for d in doc["per_device"]],
                "lrrrrr",
            ))
        out.extend(communication_lines(doc, width, wide, top))  # collectives, exposed time, stragglers
        ks = doc["kernels"][:top]
        if ks:
            gpu_total = busy or 1.0
            out.append("")
            out.append(prose(f"Top {len(ks)} of {len(doc['kernels'])} kernels by GPU time (bound: (name) = from the "
                              "kernel-name family, (short) = by duration, (graph) = via graph capture)", width))
            out.append(table(
                ["kernel", "family", "bound", "calls", "total", "mean", "share", "of roof", "headroom"],
                [(whole(k["name"], 0), k.get("family") or k["category"], bound_label(k), k["count"],
                  fmt_us(k["total_us"]), fmt_us(k["mean_us"]), fmt_pct(k["total_us"], gpu_total), roof_pct(k),
                  fmt_us(k.get("saved_us"))) for k in ks],
                "lllrrrrrr", width=None if wide else width, drop=("mean", "headroom", "family", "calls"),
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
                [(cut(o["name"], name_w), dims(o["input_dims"]),
                  cut(dims(o["input_types"]), 18), o["count"], fmt_us(o["kernel_us"]), bound_label(o),
                  fmt_rate(o.get("achieved_flops_per_s"), "FLOP/s") if o.get("flops") else "-",
                  fmt_rate(o.get("achieved_bytes_per_s"), "B/s"), roof_pct(o), fmt_us(o.get("saved_us")))
                 for o in ops],
                "lllrrlrrrr", width=None if wide else width, drop=("FLOP/s", "B/s", "headroom", "dtypes", "calls"),
                flex="input shapes", flex_min=20,
            ))
        else:
            out.append(table(
                ["op", "input shapes", "dtypes", "calls", key.lower(), "FLOPs/call"],
                [(cut(o["name"], name_w), dims(o["input_dims"]),
                  cut(dims(o["input_types"]), 24), o["count"], fmt_us(o["kernel_us"]),
                  "-" if o.get("flops") is None else f"{o['flops']:.3g}") for o in ops],
                "lllrrr", width=None if wide else width, drop=("dtypes", "FLOPs/call"), flex="input shapes", flex_min=20,
            ))
    advice = doc.get("advice") or []
    if advice:
        out.append("")
        out.append("Advice")
        for a in advice:
            out.append(prose(visible(str(a["message"])), width, "  - ", "    "))
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
        out.append("Skipped malformed events: " + ", ".join(f"{n} {visible(str(r))}" for r, n in skipped.items()))
    # The ingest notes on skipped events, a CPU-only trace and graph replays repeat what is said above.
    notes = [n for n in doc.get("notes", [])
             if not MALFORMED_NOTE.match(n) and not n.startswith("no GPU activity")
             and "kernels replayed from CUDA/HIP graphs" not in n]
    for n in notes:
        out.append(f"note: {visible(str(n))}")
    return wrap_prose(out, None if wide else width)
