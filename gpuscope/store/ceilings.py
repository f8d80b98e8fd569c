"""The ``ceilings`` table: measured ("achievable") ceilings, one calibration per id, one row
per metric. ``gpuscope calibrate`` writes through :func:`insert_calibration` (the only writer);
the roofline reads :func:`latest_ceilings` and ``calibrate --list`` :func:`list_calibrations`
(both re-exported by the read layer).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..machine import hostname
from ..ceiling_metrics import (METRIC_L2_BW, METRIC_L2_READ, METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ,
                               dtype_order)
from .tx import transaction

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

@dataclass(frozen=True)
class MeasuredCeilings:
    """The newest stored calibration of a device, as the roofline analysis needs it."""

    calibration_id: int
    measured_ns: int
    host: str | None
    device_name: str | None
    spec_key: str | None
    backend: str
    #: Achieved matmul FLOP/s by roof dtype key ("bf16", "fp32", ...).
    flops_per_s: dict[str, float]
    #: Device-memory copy bandwidth (bytes read + written per second).
    mem_bw_bytes_per_s: float | None
    #: Read-only bandwidth (bytes read per second), when measured.
    mem_read_bytes_per_s: float | None = None
    device_uuid: str | None = None
    #: L2 copy (bytes read + written per second) and read-only streams, when measured.
    l2_bw_bytes_per_s: float | None = None
    l2_read_bytes_per_s: float | None = None


def insert_calibration(con: duckdb.DuckDBPyConnection, *, measured_ns: int, host: str | None,
                       device_name: str | None, device_uuid: str | None, spec_key: str | None, backend: str,
                       rows: Sequence[tuple[str, str | None, float, str, str, str]]) -> int:
    """Store one calibration in one transaction: ``rows`` are (metric, dtype, value, unit,
    method, info JSON). Returns its id. ``host`` defaults to this machine."""
    host = host if host is not None else hostname()
    with transaction(con):
        row = con.execute("SELECT coalesce(max(id), 0) + 1 FROM ceilings").fetchone()
        assert row is not None  # an aggregate without GROUP BY gives one row
        cid = int(row[0])
        con.executemany(
            "INSERT INTO ceilings (id, measured_ns, host, device_name, device_uuid, spec_key, backend, metric, "
            "dtype, value, unit, method, info) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[cid, measured_ns, host, device_name, device_uuid, spec_key, backend, *r] for r in rows],
        )
    return cid


def _ceilings_from_rows(rows: list[tuple[Any, ...]]) -> MeasuredCeilings:
    first = rows[0]
    flops: dict[str, float] = {}
    bw = read = l2_bw = l2_read = None
    for r in rows:
        metric, dtype, value = r[7], r[8], float(r[9])
        if metric == METRIC_MATMUL and dtype:
            flops[str(dtype)] = value
        elif metric == METRIC_MEM_BW:
            bw = value
        elif metric == METRIC_MEM_READ:
            read = value
        elif metric == METRIC_L2_BW:
            l2_bw = value
        elif metric == METRIC_L2_READ:
            l2_read = value
    return MeasuredCeilings(
        calibration_id=int(first[0]), measured_ns=int(first[1]), host=first[2], device_name=first[3],
        spec_key=first[5], backend=str(first[6]), flops_per_s=flops, mem_bw_bytes_per_s=bw,
        mem_read_bytes_per_s=read, device_uuid=first[4], l2_bw_bytes_per_s=l2_bw,
        l2_read_bytes_per_s=l2_read,
    )


_COLUMNS = "id, measured_ns, host, device_name, device_uuid, spec_key, backend, metric, dtype, value, unit, method, info"


def _newest(con: duckdb.DuckDBPyConnection, where: str, params: list[Any]) -> MeasuredCeilings | None:
    row = con.execute(
        f"SELECT id FROM ceilings WHERE {where} ORDER BY measured_ns DESC, id DESC LIMIT 1", params
    ).fetchone()
    if row is None:
        return None
    rows = con.execute(f"SELECT {_COLUMNS} FROM ceilings WHERE id = ? ORDER BY metric, dtype", [row[0]]).fetchall()
    return _ceilings_from_rows(rows)


def latest_ceilings(con: duckdb.DuckDBPyConnection, *, spec_key: str | None = None,
                    device_name: str | None = None, host: str | None = None) -> MeasuredCeilings | None:
    """The newest stored calibration that matches, or None.

    With ``spec_key``: the newest calibration of that spec key (case-insensitive); when there is
    none and ``device_name`` is given, the newest of that device name (case-insensitive, spaces
    trimmed). With neither: the newest calibration of any device. ``host`` narrows every
    lookup to calibrations made on that host."""
    host_sql, host_params = (" AND host = ?", [host]) if host is not None else ("", [])
    if spec_key is not None:
        found = _newest(con, "lower(spec_key) = lower(?)" + host_sql, [spec_key.strip(), *host_params])
        if found is not None or device_name is None:
            return found
    if device_name is not None:
        return _newest(con, "lower(trim(device_name)) = lower(trim(?))" + host_sql, [device_name, *host_params])
    return _newest(con, "true" + host_sql, host_params)


def list_calibrations(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every stored calibration, newest first: id, measured_ns, host, device_name, device_uuid,
    spec_key, backend, ``flops_per_s`` by dtype, ``mem_bw_bytes_per_s``, ``mem_read_bytes_per_s``,
    ``l2_bw_bytes_per_s``, ``l2_read_bytes_per_s``."""
    rows = con.execute(f"SELECT {_COLUMNS} FROM ceilings ORDER BY measured_ns DESC, id DESC, metric, dtype").fetchall()
    by_id: dict[int, list[tuple[Any, ...]]] = {}
    for r in rows:
        by_id.setdefault(int(r[0]), []).append(r)
    out = []
    for group in by_id.values():
        c = _ceilings_from_rows(group)
        out.append({
            "id": c.calibration_id, "measured_ns": c.measured_ns, "host": c.host, "device_name": c.device_name,
            "device_uuid": c.device_uuid, "spec_key": c.spec_key, "backend": c.backend,
            "flops_per_s": dict(sorted(c.flops_per_s.items(), key=lambda kv: dtype_order(kv[0]))),
            "mem_bw_bytes_per_s": c.mem_bw_bytes_per_s, "mem_read_bytes_per_s": c.mem_read_bytes_per_s,
            "l2_bw_bytes_per_s": c.l2_bw_bytes_per_s, "l2_read_bytes_per_s": c.l2_read_bytes_per_s,
        })
    return out
