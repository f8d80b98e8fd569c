"""Communication side by side (issue 31, point 5): for ``gpuscope compare`` and the HTML report,
where each of two runs loses time in its collectives: per run the collective time, the share of it
judged against a link roof, the exposed time, and per collective kind (``all_reduce`` ...) the
time, bus bandwidth, link roof and percent of it. Pure: analysis documents in, a dict out."""
from __future__ import annotations

from typing import Any


def _ratio(b: float | None, a: float | None) -> float | None:
    if a is None or b is None or a <= 0:
        return None
    return b / a


def communication_timing(con: Any, run_id: int, doc: dict[str, Any]) -> None:
    """Add ``exposed`` and ``stragglers`` to ``doc``'s ``communication`` block as ``analyze``
    does, with the tensor-parallel degree of the model stored with the run (none: the
    collectives' own group sizes)."""
    from .stragglers import add_communication_timing

    spec = (doc.get("model") or {}).get("spec")
    tp = None
    if spec:
        from .modelspec import ModelSpec

        tp = getattr(ModelSpec.from_json(spec), "tensor_parallel", None)
    add_communication_timing(con, run_id, doc, tensor_parallel=tp)


def communication_side(doc: dict[str, Any]) -> dict[str, Any] | None:
    """One run's communication summary (None: the run has no collective).

    ``{collective_us, judged_us, judged_share, exposed_us, overlap_pct, links, link_bytes_per_s,
    by_collective}`` (``link_bytes_per_s``: the distinct link roofs, one direction, of its judged
    calls);
    ``by_collective`` maps a collective kind to ``{count, bytes, kernel_us, judged_us,
    unjudged_us, busbw_bytes_per_s, link, link_bytes_per_s, roof_us, pct_of_roof,
    above_roof_us, bound}`` where ``above_roof_us`` = judged time - its time at the link roof
    (what a collective running at its roof would save; None when nothing is judged).
    ``exposed_us`` is None when the document carries no exposed-communication figure."""
    c = doc.get("communication")
    if not isinstance(c, dict):
        return None
    total = float(c.get("total_us") or 0.0)
    judged = float(c.get("judged_us") or 0.0)
    ex = c.get("exposed") if isinstance(c.get("exposed"), dict) else None
    by: dict[str, Any] = {}
    for kind, b in (c.get("by_collective") or {}).items():
        roof = b.get("roof_us")
        by[kind] = {
            "count": b.get("count"), "bytes": b.get("bytes"), "kernel_us": b.get("kernel_us"),
            "judged_us": b.get("judged_us"), "unjudged_us": b.get("unjudged_us"),
            "busbw_bytes_per_s": b.get("busbw_bytes_per_s"), "link": b.get("link"),
            "link_bytes_per_s": b.get("link_bytes_per_s"), "roof_us": roof, "pct_of_roof": b.get("pct_of_roof"),
            "above_roof_us": (float(b.get("judged_us") or 0.0) - float(roof)) if roof is not None else None,
            "bound": b.get("bound"),
        }
    return {
        "collective_us": total,
        "judged_us": judged,
        "judged_share": judged / total if total > 0 else None,
        "exposed_us": ex.get("exposed_us") if ex else None,
        "overlap_pct": ex.get("overlap_pct") if ex else None,
        "links": sorted({str(e["link"]) for e in c.get("entries") or [] if e.get("link")}),
        # the roofs the judged calls met (a group of n on a mesh gets n-1 of its links)
        "link_bytes_per_s": sorted({float(e["link_bytes_per_s"]) for e in c.get("entries") or []
                                    if e.get("link_bytes_per_s")}),
        "by_collective": by,
    }


def compare_communication(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """The ``communication`` block of ``compare --json`` (None when neither run has a
    collective): ``a`` and ``b`` (:func:`communication_side`, None for a run without
    collectives), ``totals`` (``collective_us``, ``judged_us``, ``exposed_us``, each
    ``{a, b, ratio}``, ratio = b / a) and ``by_collective``: one row per collective kind found in
    either run, ``{collective, a, b, ratio, delta_us}`` (``a``/``b`` that kind's figures or
    None), the largest time on either side first."""
    sa, sb = communication_side(a), communication_side(b)
    if sa is None and sb is None:
        return None

    def val(s: dict[str, Any] | None, k: str) -> float | None:
        return None if s is None else s.get(k)

    totals = {k: {"a": val(sa, k), "b": val(sb, k), "ratio": _ratio(val(sb, k), val(sa, k))}
              for k in ("collective_us", "judged_us", "exposed_us")}
    kinds = list((sa or {}).get("by_collective") or {}) + [
        k for k in (sb or {}).get("by_collective") or {} if k not in ((sa or {}).get("by_collective") or {})]
    rows = []
    for k in kinds:
        xa = ((sa or {}).get("by_collective") or {}).get(k)
        xb = ((sb or {}).get("by_collective") or {}).get(k)
        ua = float(xa["kernel_us"] or 0.0) if xa else 0.0
        ub = float(xb["kernel_us"] or 0.0) if xb else 0.0
        rows.append({"collective": k, "a": xa, "b": xb, "ratio": _ratio(ub if xb else None, ua if xa else None),
                     "delta_us": ub - ua})
    rows.sort(key=lambda r: -max(float((r["a"] or {}).get("kernel_us") or 0.0), float((r["b"] or {}).get("kernel_us") or 0.0)))
    return {"a": sa, "b": sb, "totals": totals, "by_collective": rows}
