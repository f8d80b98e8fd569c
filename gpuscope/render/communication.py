"""The "Communication" section of the ``gpuscope analyze`` text report: the collectives judged
against their link (analyzers/comm.py), exposed communication (analyzers/overlap.py) and, with
several ranks, the stragglers (analyzers/stragglers.py)."""
from __future__ import annotations

from typing import Any

from ..textsafe import visible
from .table import fmt_rate, fmt_us, prose, shorten, table, whole

#: Rows of the exposed-collective and worst-instance tables.
ROWS = 5


#: Short labels of the collectives' classes (analyzers/comm.py).
_BOUND = {"communication_bound": "link", "latency_bound": "latency", "unknown": "unknown", None: "-"}


def _pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}%"


def _size(b: float | None) -> str:
    return fmt_rate(b, "B")


def _rank(r: dict[str, Any]) -> str:
    return f"rank {r['rank']}" if r.get("rank") is not None else str(r.get("key"))


def communication_lines(doc: dict[str, Any], width: int, wide: bool = False, top: int = ROWS) -> list[str]:
    """The section's lines (empty when the document has no ``communication`` block)."""
    c = doc.get("communication")
    if not isinstance(c, dict):
        return []
    cut = whole if wide else shorten
    rows_n = min(top, ROWS)
    out = ["", "Communication (collectives against their GPU-to-GPU link; docs/roofline.md, \"Collectives\")"]
    by = c.get("by_collective") or {}
    if by:
        out.append(table(
            ["collective", "calls", "bytes", "time", "busbw", "link", "of roof", "bound"],
            [(name, b["count"], _size(b.get("bytes")), fmt_us(b["kernel_us"]), fmt_rate(b.get("busbw_bytes_per_s"), "B/s"),
              b.get("link") or "-", "-" if b.get("pct_of_roof") is None else f"{100 * b['pct_of_roof']:.1f}%",
              _BOUND.get(b.get("bound"), str(b.get("bound")))) for name, b in by.items()],
            "lrrrrlrl", width=None if wide else width, drop=("link", "bytes", "calls", "busbw"), flex="link", flex_min=10,
        ))
    ex = c.get("exposed")
    if isinstance(ex, dict):
        out.append("")
        out.append(prose(
            f"Exposed communication: {fmt_us(ex['exposed_us'])} of {fmt_us(ex['communication_us'])} of collective time "
            f"runs with no compute kernel on another stream of its device (overlap {_pct(ex.get('overlap_pct'), 2)}, "
            f"Holistic Trace Analysis's comm/comp overlap); perfect overlap would save at most "
            f"{fmt_us(ex['saving_upper_bound_us'])}", width, "", "  "))
        devs = ex.get("per_device") or []
        if len(devs) > 1:
            out.append(table(["device", "communication", "overlapped", "exposed", "overlap"],
                             [(visible(str(d["key"])), fmt_us(d["communication_us"]), fmt_us(d["overlapped_us"]),
                               fmt_us(d["exposed_us"]), _pct(d.get("overlap_pct"), 2)) for d in devs], "lrrrr"))
        tops = (ex.get("top") or [])[:rows_n]
        if tops:
            out.append(f"  most exposed collectives (top {len(tops)}):")
            out.append(table(
                ["kernel", "op", "collective", "size", "calls", "exposed", "of its time"],
                [(whole(t["kernel"], 0), cut(t.get("op") or "-", 28), t.get("collective") or "-", _size(t.get("bytes")),
                  t["count"], fmt_us(t["exposed_us"]), _pct(t.get("exposed_pct"))) for t in tops],
                "lllrrrr", width=None if wide else width, drop=("op", "calls", "size"), flex="kernel", flex_min=20,
            ))
    st = c.get("stragglers")
    if isinstance(st, dict):
        out.append("")
        out.append(prose(
            f"Stragglers: {len(st['ranks'])} ranks, {st['instances']} collective instances matched by kernel, "
            f"collective, size and order ({st['unmatched']} unmatched); the ranks waited "
            f"{fmt_us(st['total_wait_us'])} in all for the last rank to arrive", width, "", "  "))
        s = st.get("straggler")
        if s:
            out.append(prose(
                f"straggler: {_rank(s)} ({visible(str(s['key']))}) started last at {s['latest_count']:g} of "
                f"{next((r['instances'] for r in st['ranks'] if r['device_id'] == s['device_id']), 0)} instances "
                f"({_pct(s.get('latest_pct'))}), {fmt_us(s.get('mean_delay_us'))} after the others' median start on "
                f"average; the others waited {fmt_us(s['caused_wait_us'])} for it", width, "  ", "    "))
        else:
            out.append("  no straggler: every matched collective started at the same time on every rank")
        out.append(table(
            ["rank", "host", "waited", "latest", "caused", "mean delay", "clock offset"],
            [(_rank(r), visible(str(r.get("host") or "-")), fmt_us(r["wait_us"]), f"{r['latest_count']:g}",
              fmt_us(r["caused_wait_us"]), fmt_us(r.get("mean_delay_us")), fmt_us(r.get("clock_offset_us")))
             for r in st["ranks"]],
            "llrrrrr", width=None if wide else width, drop=("clock offset", "host"),
        ))
        clock = st.get("clock") or {}
        out.append(prose(f"clocks: {visible(str(clock.get('method', '')))}", width, "  ", "    "))
        worst = (st.get("worst") or [])[:rows_n]
        if worst:
            out.append(f"  worst instances (top {len(worst)}):")
            out.append(table(
                ["kernel", "collective", "size", "#", "skew", "wait", "latest"],
                [(whole(w["kernel"], 0), w.get("collective") or "-", _size(w.get("bytes")), w["index"],
                  fmt_us(w["skew_us"]), fmt_us(w["wait_us"]), w["latest"]) for w in worst],
                "llrrrrl", width=None if wide else width, drop=("size", "#"), flex="kernel", flex_min=20,
            ))
    return out
