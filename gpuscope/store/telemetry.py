"""The writer of telemetry: a run's telemetry ``devices``, ``samples``, ``sampler_stats``, and
``annotations`` of the kinds a recording produces (``device_lost``; the profiler windows and
marks ``gpuscope run`` collects from its child). The store sink (``gpuscope/sinks/store.py``)
and the run wrapper call these inside their own transactions; the run row itself goes through
:mod:`gpuscope.store.runs`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from .read import AnnotationRow

#: ``sampler_stats`` columns after ``run_id``, in the order :func:`insert_sampler_stats` takes them.
SAMPLER_STATS_COLUMNS = (
    "started_ns", "ended_ns", "interval_ns", "ticks", "missed_ticks", "rows", "devices", "tick_cpu_ns_mean",
    "tick_cpu_ns_p99", "tick_cpu_ns_max", "tick_wall_ns_mean", "tick_wall_ns_p99", "tick_wall_ns_max",
    "cpu_ns_per_tick_per_device", "lateness_ns_p50", "lateness_ns_p99", "lateness_ns_max", "drift_ns",
    "sink_cpu_ns", "degradations", "info",
)


def next_device_id(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    """The first free device id of a run."""
    from .._db import one_row

    return int(one_row(con.execute("SELECT coalesce(max(device_id) + 1, 0) FROM devices WHERE run_id = ?",
                                   [run_id]).fetchone())[0])


def insert_device(con: duckdb.DuckDBPyConnection, run_id: int, device_id: int, *, key: str, index: int | None,
                  vendor: str | None, kind: str | None, name: str | None, spec_key: str | None,
                  memory_total_bytes: int | None, compute_capability: str | None, num_sms: int | None,
                  warp_size: int | None, uuid: str | None, pci_bus_id: str | None,
                  properties: dict[str, Any]) -> None:
    """One telemetry device of a run."""
    con.execute(
        "INSERT INTO devices (run_id, device_id, key, source, trace_id, device_index, vendor, kind, "
        "name, spec_key, memory_total_bytes, compute_capability, num_sms, warp_size, uuid, "
        "pci_bus_id, properties) VALUES (?, ?, ?, 'telemetry', NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, device_id, key, index, vendor, kind, name, spec_key, memory_total_bytes, compute_capability,
         num_sms, warp_size, uuid, pci_bus_id, json.dumps(properties, default=str)])


def append_samples(con: duckdb.DuckDBPyConnection, table: Any, columns: Sequence[str]) -> None:
    """Append an Arrow table of samples (``columns``: run_id, device_id, ts_ns and metric
    columns) in one statement: DuckDB scans the Arrow buffers, no Python per value."""
    names = ", ".join(columns)
    con.register("_gpuscope_samples", table)
    try:
        con.execute(f"INSERT INTO samples ({names}) SELECT {names} FROM _gpuscope_samples")
    finally:
        con.unregister("_gpuscope_samples")


def insert_device_lost(con: duckdb.DuckDBPyConnection, run_id: int, device_key: str, ts_ns: int,
                       device_id: int | None) -> None:
    """A ``device_lost`` annotation: the device stopped answering while sampling."""
    con.execute(
        "INSERT INTO annotations (run_id, trace_id, kind, name, ts_ns, dur_ns, device_id, pid, tid, "
        "value) VALUES (?, NULL, 'device_lost', ?, ?, NULL, ?, NULL, NULL, ?)",
        [run_id, device_key, int(ts_ns), device_id, json.dumps({"reason": "device lost while sampling"})])


def insert_annotations(con: duckdb.DuckDBPyConnection, run_id: int, rows: Sequence[AnnotationRow]) -> None:
    """A run's annotations that come from no trace (``trace_id`` and ``tid`` NULL): the profiler
    windows and marks ``gpuscope run`` collects from its child. Each row is the read layer's
    :class:`~gpuscope.store.read.AnnotationRow`; its ``value`` is stored as JSON (NULL when None)."""
    con.executemany(
        "INSERT INTO annotations (run_id, trace_id, kind, name, ts_ns, dur_ns, device_id, pid, tid, value) "
        "VALUES (?, NULL, ?, ?, ?, ?, ?, ?, NULL, ?)",
        [[run_id, r.kind, r.name, r.ts_ns, r.dur_ns, r.device_id, r.pid,
          None if r.value is None else json.dumps(r.value)] for r in rows])


def insert_sampler_stats(con: duckdb.DuckDBPyConnection, run_id: int, values: Sequence[Any]) -> None:
    """The sampler's cadence and its own cost for a run: ``values`` in
    :data:`SAMPLER_STATS_COLUMNS` order."""
    if len(values) != len(SAMPLER_STATS_COLUMNS):
        raise ValueError(f"sampler_stats takes {len(SAMPLER_STATS_COLUMNS)} values, got {len(values)}")
    con.execute(
        f"INSERT INTO sampler_stats (run_id, {', '.join(SAMPLER_STATS_COLUMNS)}) "
        f"VALUES ({', '.join('?' * (len(SAMPLER_STATS_COLUMNS) + 1))})",
        [run_id, *values])


def prune_samples(con: duckdb.DuckDBPyConnection, source: str, before_ns: int) -> int:
    """Delete the samples older than ``before_ns`` of the runs from ``source`` (``monitor``'s
    ``--retention``; never a run of another source); the number deleted."""
    from .._db import one_row

    n = one_row(con.execute(
        "SELECT count(*) FROM samples WHERE ts_ns < ? AND run_id IN (SELECT id FROM runs WHERE source = ?)",
        [int(before_ns), source]).fetchone())[0]
    if n:
        con.execute("DELETE FROM samples WHERE ts_ns < ? AND run_id IN (SELECT id FROM runs WHERE source = ?)",
                    [int(before_ns), source])
    return int(n)
