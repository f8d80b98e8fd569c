"""``gpuscope calibrate``: the report of a new calibration, and the ``--list`` table of the
read layer's calibrations."""
from __future__ import annotations

from typing import Any

from ..ceiling_metrics import (METRIC_L2_BW, METRIC_L2_READ, METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ, METRICS,
                               dtype_order)
from ..textsafe import visible
from .table import fmt_bw, fmt_flops, fmt_ns_time, table


def _short_flops(v: float) -> str:
    return f"{v / 1e12:.4g}T" if v >= 1e12 else f"{v / 1e9:.3g}G"


def render_calibrations(cals: list[dict[str, Any]]) -> str:
    """One line per stored calibration: when, where, which device, matmul FLOP/s per dtype and
    copy bandwidth."""
    if not cals:
        return "no calibrations stored yet (run `gpuscope calibrate`)"
    rows = []
    for c in cals:
        flops = ", ".join(f"{d} {_short_flops(v)}" for d, v in c["flops_per_s"].items())
        bw = f"{c['mem_bw_bytes_per_s'] / 1e9:,.1f}" if c["mem_bw_bytes_per_s"] else None
        rows.append([c["id"], fmt_ns_time(c["measured_ns"]), c["host"], c["device_name"], c["spec_key"],
                     c["backend"], flops, bw])
    return table(["id", "measured", "host", "device", "spec", "backend", "matmul FLOP/s", "copy GB/s"], rows,
                 "rlllllll")


def render_calibration(doc: dict[str, Any], db_path: str | None = None) -> str:
    """The ``calibrate`` text report from ``gpuscope.calibrate.calibration_json``'s document."""
    dev = doc["device"]
    bits = [doc["backend"]]
    if dev.get("backend") == "cpu":
        if dev.get("torch_threads"):
            bits.append(f"{dev['torch_threads']} torch threads")
    else:
        if dev.get("index") is not None:
            bits.append(f"GPU {dev['index']}")
        if dev.get("gcn_arch_name"):
            bits.append(str(dev["gcn_arch_name"]).split(":")[0])
        elif dev.get("compute_capability"):
            bits.append(f"cc {dev['compute_capability']}")
        if doc.get("spec_key"):
            bits.append(f"spec {doc['spec_key']}")
    where = f" in {db_path}" if db_path else ""
    lines = [f"calibration {doc['calibration_id']} stored{where}",
             f"device: {dev.get('name')} ({', '.join(bits)}) on {doc.get('host')}"]
    if dev.get("uuid"):
        lines.append(f"uuid:   {dev['uuid']}")
    names = {METRIC_MATMUL: "matmul", METRIC_MEM_BW: "memory copy (r+w)", METRIC_MEM_READ: "memory read",
             METRIC_L2_BW: "L2 copy (r+w)", METRIC_L2_READ: "L2 read"}
    rows = []
    for r in sorted(doc["results"], key=lambda r: (METRICS.index(r["metric"]) if r["metric"] in METRICS else 9,
                                                   dtype_order(r["dtype"]))):
        fmt = fmt_flops if r["unit"] == "FLOP/s" else fmt_bw
        shape = "x".join(str(x) for x in r["best_shape"]) if r.get("best_shape") else None
        rows.append([names.get(r["metric"], r["metric"]), r["dtype"], fmt(r["value"]),
                     fmt(r["spec_value"]) if r.get("spec_value") else None,
                     f"{r['pct_of_spec']:.1f}%" if r.get("pct_of_spec") is not None else None, shape])
    lines += ["", table(["metric", "dtype", "measured", "spec peak", "% of spec", "best shape"], rows, "llrrrl")]
    for s in doc["skipped"]:
        lines.append(f"skipped {s['dtype']}: {s['reason']}")
    if doc["backend"] == "cpu":
        lines.append("note: CPU numbers describe the host through torch, not a GPU roof")
    return "\n".join(visible(line, layout=True) for line in lines)  # device and host names: control characters shown
