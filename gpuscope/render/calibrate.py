"""The ``gpuscope calibrate --list`` table, from the read layer's calibrations."""
from __future__ import annotations

from typing import Any

from .table import fmt_ns_time, table


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
