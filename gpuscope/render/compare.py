"""The ``gpuscope compare`` text report, from a comparison document (analyzers.compare)."""
from __future__ import annotations

from typing import Any

from ..analyzers.coverage import coverage_line
from .analysis import BOUND_LABEL, bound_label, dims, roof_pct
from ..textsafe import visible
from .table import DEFAULT_WIDTH, fmt_rate, fmt_us, prose, shorten, table, whole, wrap_prose


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def render_compare(doc: dict[str, Any], top: int = 15, wide: bool = False, width: int = DEFAULT_WIDTH) -> str:
    """The ``gpuscope compare`` text report, fitted to ``width`` columns; ``wide`` shows names and shapes whole."""
    cut = whole if wide else shorten
    a, b = doc["a"], doc["b"]

    def label(r: dict[str, Any]) -> str:
        devs = ", ".join(sorted({d.get("spec") or d.get("name") or d["key"] for d in r["devices"]})) or "no GPU"
        return f"run {r['id']} '{visible(str(r['name']))}' [{visible(devs)}]"

    out = [f"A: {label(a)}", f"B: {label(b)}", "", "Totals (ratio = B / A; above 1: B takes longer)"]
    t = doc["totals"]
    rows = [(k, fmt_us(t[k]["a"]), fmt_us(t[k]["b"]), _ratio(t[k]["ratio"]))
            for k in ("gpu_us", "compute", "communication", "memory", "idle", "matched_ops_us")]
    rows[0] = ("GPU busy",) + rows[0][1:]
    rows[-1] = ("matched ops",) + rows[-1][1:]
    out.append(table(["", "A", "B", "B/A"], rows, "lrrr"))
    ra, rb = t["roofline_us"]["a"], t["roofline_us"]["b"]
    # set off from the totals and named as bound classes (as `analyze` names them): the rows
    # `compute/memory/latency` under the totals read like the totals' own categories
    out.append("")
    out.append(table(["compute by bound", "A", "B"],
                     [(k.replace("_", "-"), fmt_us(ra.get(k)), fmt_us(rb.get(k))) for k in
                      ("compute_bound", "memory_bound", "cache_bound", "latency_bound", "unknown")
                      if k != "cache_bound" or ra.get(k) or rb.get(k)], "lrr"))
    for side, r in (("A", a), ("B", b)):
        line = coverage_line(r.get("coverage"), top=2, name_width=None if wide else 40)
        if line:
            out.append(f"{side} {line}" if wide else prose(f"{side} {line}", width, "", "  "))
    m = doc["matched"][:top]
    if m:
        out.append("")
        out.append(f"Matched ops, largest differences first ({len(doc['matched'])} matched by name, shapes and dtypes)")
        name_w = 28
        out.append(table(
            ["op", "input shapes", "A time", "A bound", "A roof", "B time", "B bound", "B roof", "B/A", "B-A"],
            [(cut(x["name"], name_w), dims(x["input_dims"]),
              fmt_us(x["a"]["kernel_us"]), bound_label(x["a"]), roof_pct(x["a"]),
              fmt_us(x["b"]["kernel_us"]), bound_label(x["b"]), roof_pct(x["b"]),
              _ratio(x["ratio"]), fmt_us(x["delta_us"])) for x in m],
            "llrlrrlrrr", width=None if wide else width, drop=("A roof", "B roof", "B-A", "A bound", "B bound"),
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
                             [(cut(r["name"], 36), dims(r["input_dims"]), r["count"],
                               fmt_us(r["kernel_us"]), BOUND_LABEL.get(r.get("bound"), "-")) for r in rows_only],
                             "llrrl", width=None if wide else width, drop=("calls",), flex="input shapes", flex_min=16))
    fam = doc["by_family"][:top]
    if fam:
        out.append("")
        out.append("GPU time by kernel family (where each side spends its time)")
        out.append(table(["family", "A", "B", "B/A", "B-A"],
                         [(f["family"], fmt_us(f["a_us"]), fmt_us(f["b_us"]), _ratio(f["ratio"]), fmt_us(f["delta_us"]))
                          for f in fam], "lrrrr"))
    out.extend(_communication(doc.get("communication"), wide, width))
    return wrap_prose(out, None if wide else width)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _communication(c: dict[str, Any] | None, wide: bool, width: int) -> list[str]:
    """The communication comparison (issue 31): where each run loses time in its collectives."""
    if not isinstance(c, dict):
        return []
    out = ["", "Communication (collectives against their GPU-to-GPU link; ratio = B / A)"]
    t = c["totals"]
    sides = {"A": c.get("a") or {}, "B": c.get("b") or {}}
    out.append(table(
        ["", "A", "B", "B/A"],
        [("collective time", fmt_us(t["collective_us"]["a"]), fmt_us(t["collective_us"]["b"]),
          _ratio(t["collective_us"]["ratio"])),
         ("judged share", _pct(sides["A"].get("judged_share")), _pct(sides["B"].get("judged_share")), ""),
         ("exposed", fmt_us(t["exposed_us"]["a"]), fmt_us(t["exposed_us"]["b"]), _ratio(t["exposed_us"]["ratio"])),
         ("link", visible(", ".join(sides["A"].get("links") or []) or "-"),
          visible(", ".join(sides["B"].get("links") or []) or "-"), ""),
         ("link roof", ", ".join(fmt_rate(v, "B/s") for v in sides["A"].get("link_bytes_per_s") or []) or "-",
          ", ".join(fmt_rate(v, "B/s") for v in sides["B"].get("link_bytes_per_s") or []) or "-", "")],
        "lrrr"))
    rows = []
    for r in c["by_collective"]:
        a, b = r["a"] or {}, r["b"] or {}
        rows.append((r["collective"], fmt_us(a.get("kernel_us")), fmt_rate(a.get("busbw_bytes_per_s"), "B/s"),
                     _pct(a.get("pct_of_roof")), fmt_us(a.get("above_roof_us")),
                     fmt_us(b.get("kernel_us")), fmt_rate(b.get("busbw_bytes_per_s"), "B/s"),
                     _pct(b.get("pct_of_roof")), fmt_us(b.get("above_roof_us")), _ratio(r["ratio"])))
    if rows:
        out.append("")
        out.append(table(
            ["collective", "A time", "A busbw", "A roof", "A above roof", "B time", "B busbw", "B roof",
             "B above roof", "B/A"],
            rows, "lrrrrrrrrr", width=None if wide else width,
            drop=("A above roof", "B above roof", "A busbw", "B busbw")))
        out.append("  roof: percent of the link roof (judged calls); above roof: judged time beyond the time at the roof")
    return out
