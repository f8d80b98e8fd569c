"""Side-by-side comparison of two analysed runs, op by op (e.g. H100 vs MI300X).

Pure function over two ``gpuscope.analysis/1`` documents (with their full op and kernel
lists); never prints. Ops are matched by (name, input shapes, input dtypes): the same model
run on two vendors issues the same ATen ops with the same shapes, so each match is the same
work on both sides. Ops found on one side only (vendor-specific kernels and custom ops, or
different shapes) are listed as such, and a per-op-name and a per-kernel-family summary show
where each side spends its time even when the ops differ.
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

SCHEMA = "gpuscope.compare/1"


def _key(o: dict[str, Any]) -> tuple[str, str, str]:
    return (o["name"], json.dumps(o.get("input_dims"), separators=(",", ":")),
            json.dumps(o.get("input_types"), separators=(",", ":")))


def _side(o: dict[str, Any] | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {k: o.get(k) for k in ("count", "kernel_us", "bound", "confidence", "pct_of_roof", "saved_us",
                                  "achieved_flops_per_s", "achieved_bytes_per_s", "model_error")}


def _ratio(b: float | None, a: float | None) -> float | None:
    if a is None or b is None or a <= 0:
        return None
    return b / a


def _run_summary(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": doc["run"]["id"],
        "name": doc["run"]["name"],
        "devices": [{"key": d["key"], "vendor": d.get("vendor"), "name": d.get("name"), "spec": d.get("spec")}
                    for d in doc["devices"]],
        "time_us": doc["time_us"],
        "roofline_us": doc["roofline_us"],
        "gpu_us": sum(doc["time_us"][c] for c in ("compute", "communication", "memory")),
        # the share of its GPU time judged against a roof, and its largest unjudged work
        "coverage": doc.get("coverage"),
    }


def compare_docs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The ``gpuscope.compare/1`` document for runs ``a`` and ``b`` (ratios are b / a)."""
    ops_a = {_key(o): o for o in a["ops"]}
    ops_b = {_key(o): o for o in b["ops"]}
    matched = []
    # in run A's op order (not a set's, which differs from process to process), so that ops with
    # the same difference keep one order: the sort below is stable
    for k in (k for k in ops_a if k in ops_b):
        oa, ob = ops_a[k], ops_b[k]
        matched.append({
            "name": oa["name"],
            "input_dims": oa.get("input_dims"),
            "input_types": oa.get("input_types"),
            "flops": oa.get("flops") if oa.get("flops") is not None else ob.get("flops"),
            "bytes": oa.get("bytes") if oa.get("bytes") is not None else ob.get("bytes"),
            "a": _side(oa),
            "b": _side(ob),
            "ratio": _ratio(ob["kernel_us"], oa["kernel_us"]),
            # per call, so a different number of steps on each side does not skew it
            "ratio_per_call": _ratio(ob["kernel_us"] / max(ob["count"], 1), oa["kernel_us"] / max(oa["count"], 1)),
            "delta_us": ob["kernel_us"] - oa["kernel_us"],
        })
    matched.sort(key=lambda m: -abs(m["delta_us"]))

    def only(src: dict[tuple[str, str, str], dict[str, Any]], other: dict[Any, Any]) -> list[dict[str, Any]]:
        rows = [{"name": o["name"], "input_dims": o.get("input_dims"), "input_types": o.get("input_types"),
                 "count": o["count"], "kernel_us": o["kernel_us"], "bound": o.get("bound")}
                for k, o in src.items() if k not in other]
        rows.sort(key=lambda r: -r["kernel_us"])
        return rows

    by_name: dict[str, dict[str, float]] = defaultdict(lambda: {"a_us": 0.0, "b_us": 0.0, "a_count": 0, "b_count": 0})
    for o in a["ops"]:
        by_name[o["name"]]["a_us"] += o["kernel_us"]
        by_name[o["name"]]["a_count"] += o["count"]
    for o in b["ops"]:
        by_name[o["name"]]["b_us"] += o["kernel_us"]
        by_name[o["name"]]["b_count"] += o["count"]
    names: list[dict[str, Any]] = [{"name": n, **v, "ratio": _ratio(v["b_us"], v["a_us"]), "delta_us": v["b_us"] - v["a_us"]}
             for n, v in by_name.items()]
    names.sort(key=lambda r: -abs(r["delta_us"]))

    fam: dict[str, dict[str, float]] = defaultdict(lambda: {"a_us": 0.0, "b_us": 0.0})
    for side, doc in (("a_us", a), ("b_us", b)):
        for k in doc["kernels"]:
            fam[k.get("family") or k.get("category") or "other"][side] += k["total_us"]
    families: list[dict[str, Any]] = [{"family": f, **v, "ratio": _ratio(v["b_us"], v["a_us"]), "delta_us": v["b_us"] - v["a_us"]}
                for f, v in fam.items()]
    families.sort(key=lambda r: -abs(r["delta_us"]))

    ra, rb = _run_summary(a), _run_summary(b)
    matched_a = sum(m["a"]["kernel_us"] for m in matched)
    matched_b = sum(m["b"]["kernel_us"] for m in matched)
    totals = {
        "gpu_us": {"a": ra["gpu_us"], "b": rb["gpu_us"], "ratio": _ratio(rb["gpu_us"], ra["gpu_us"])},
        **{c: {"a": a["time_us"][c], "b": b["time_us"][c], "ratio": _ratio(b["time_us"][c], a["time_us"][c])}
           for c in ("compute", "communication", "memory", "idle")},
        "matched_ops_us": {"a": matched_a, "b": matched_b, "ratio": _ratio(matched_b, matched_a)},
        "roofline_us": {"a": a["roofline_us"], "b": b["roofline_us"]},
        "coverage_share": {"a": (a.get("coverage") or {}).get("share"), "b": (b.get("coverage") or {}).get("share")},
    }
    return {
        "schema": SCHEMA,
        "a": ra,
        "b": rb,
        "totals": totals,
        "matched": matched,
        "only_a": only(ops_a, ops_b),
        "only_b": only(ops_b, ops_a),
        "by_op_name": names,
        "by_family": families,
    }
