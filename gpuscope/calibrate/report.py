"""A calibration stored (one row per measurement in ``ceilings``, through the store's one
writer) and shown: the ``calibrate --json`` document and the text report."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..ceiling_metrics import METRIC_MATMUL
from .devices import spec_peak
from .results import Calibration, Measurement

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
