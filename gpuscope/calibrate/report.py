"""A calibration stored (one row per measurement in ``ceilings``, through the store's one
writer) and shown: the ``calibrate --json`` document and the text report."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..store.ceilings import METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ, _dtype_order

from .devices import spec_peak
from .kernels import _fmt_bw, _fmt_flops
from .results import METRICS, Calibration, Measurement

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

# --------------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------------


def _row_info(cal: Calibration, m: Measurement) -> str:
    doc = dict(cal.info)
    doc["device"] = cal.device.to_json()
    doc.update(m.info)
    return json.dumps(doc, default=str, sort_keys=True)


def write_calibration(con: duckdb.DuckDBPyConnection, cal: Calibration, *, host: str | None = None) -> int:
    """Store ``cal`` as one calibration (one id, one row per measurement) in one transaction;
    returns its id."""
    from ..store import ceilings

    return ceilings.insert_calibration(
        con, measured_ns=cal.measured_ns, host=host, device_name=cal.device.name, device_uuid=cal.device.uuid,
        spec_key=cal.spec_key, backend=cal.device.backend,
        rows=[(m.metric, m.dtype, float(m.value), m.unit, m.method, _row_info(cal, m)) for m in cal.measurements])


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def calibration_json(cal: Calibration, calibration_id: int | None, host: str | None) -> dict[str, Any]:
    """The ``calibrate --json`` document."""
    results = []
    for m in cal.measurements:
        r: dict[str, Any] = {"metric": m.metric, "dtype": m.dtype, "value": m.value, "unit": m.unit,
                             "method": m.method}
        if m.metric == METRIC_MATMUL and "best_shape" in m.info:
            r["best_shape"] = m.info["best_shape"]
        peak = spec_peak(cal.spec, m.metric, m.dtype)
        if peak:
            r["spec_value"] = peak
            r["pct_of_spec"] = round(100.0 * m.value / peak, 2)
            r["fraction_of_spec"] = m.value / peak
        results.append(r)
    device = cal.device.to_json()
    device["spec_key"] = cal.spec_key
    return {
        "calibration_id": calibration_id,
        "measured_ns": cal.measured_ns,
        "host": host,
        "device": device,
        "backend": cal.device.backend,
        "spec_key": cal.spec_key,
        "results": results,
        "skipped": [{"dtype": d, "reason": r} for d, r in cal.skipped],
        "info": cal.info,
    }


def render_calibration(doc: dict[str, Any], db_path: str | None = None) -> str:
    """The ``calibrate`` text report from :func:`calibration_json`'s document."""
    from ..render.table import table

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
    names = {METRIC_MATMUL: "matmul", METRIC_MEM_BW: "memory copy (r+w)", METRIC_MEM_READ: "memory read"}
    rows = []
    for r in sorted(doc["results"], key=lambda r: (METRICS.index(r["metric"]) if r["metric"] in METRICS else 9,
                                                   _dtype_order(r["dtype"]))):
        fmt = _fmt_flops if r["unit"] == "FLOP/s" else _fmt_bw
        shape = "x".join(str(x) for x in r["best_shape"]) if r.get("best_shape") else None
        rows.append([names.get(r["metric"], r["metric"]), r["dtype"], fmt(r["value"]),
                     fmt(r["spec_value"]) if r.get("spec_value") else None,
                     f"{r['pct_of_spec']:.1f}%" if r.get("pct_of_spec") is not None else None, shape])
    lines += ["", table(["metric", "dtype", "measured", "spec peak", "% of spec", "best shape"], rows, "llrrrl")]
    for s in doc["skipped"]:
        lines.append(f"skipped {s['dtype']}: {s['reason']}")
    if doc["backend"] == "cpu":
        lines.append("note: CPU numbers describe the host through torch, not a GPU roof")
    return "\n".join(lines)
