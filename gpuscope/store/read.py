"""The read layer: typed functions through which the CLI, the TUI, ``monitor``, ``export``
and ``report`` read runs, devices, samples and calibrations, so that none of them spells SQL
against the store's tables (analyzers keep their own documented queries; ``gpuscope sql`` is
the user's own SQL).

Every function takes an open connection (``store.connect(path, read_only=True)`` for a
reader) and never writes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, RunNotFoundError
from ..redact import redact_command
from .ceilings import MeasuredCeilings, latest_ceilings, list_calibrations  # noqa: F401 - part of the read layer
from .runs import stale_runs

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


@dataclass(frozen=True)
class RunRef:
    """A resolved run: its id and name."""

    id: int
    name: str


def resolve_run(con: duckdb.DuckDBPyConnection, ref: str | int | None, db_path: Path | str | None = None) -> RunRef:
    """A ``RUN`` argument: a run id, or a run name (the newest run of that name), or None for
    the newest run. Raises :class:`InputError` when the store holds no run, and
    :class:`~gpuscope.errors.RunNotFoundError` (an :class:`InputError`) when nothing matches ``ref``."""
    if ref is None:
        row = con.execute("SELECT id, name FROM runs ORDER BY created_ns DESC, id DESC LIMIT 1").fetchone()
        if row is None:
            raise InputError(str(db_path or "store"), "the store holds no runs yet")
        return RunRef(int(row[0]), str(row[1]))
    text = str(ref).strip()
    if text.isdigit():
        row = con.execute("SELECT id, name FROM runs WHERE id = ?", [int(text)]).fetchone()
        if row is not None:
            return RunRef(int(row[0]), str(row[1]))
    row = con.execute(
        "SELECT id, name FROM runs WHERE name = ? ORDER BY created_ns DESC, id DESC LIMIT 1", [text]
    ).fetchone()
    if row is None:
        raise RunNotFoundError(text)  # "run 'TEXT': no such run id or name (see `gpuscope runs`)"
    return RunRef(int(row[0]), str(row[1]))




def list_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every run, newest first, with the row counts of its samples, kernels and ops."""
    rows = con.execute(
        """
        SELECT r.id, r.name, r.status, r.source, r.started_ns, r.ended_ns, r.command, r.exit_code,
               r.created_ns,
               coalesce(s.n, 0) AS samples, coalesce(k.n, 0) AS kernels, coalesce(o.n, 0) AS ops,
               coalesce(d.n, 0) AS devices
        FROM runs r
        LEFT JOIN (SELECT run_id, count(*) n FROM samples GROUP BY run_id) s ON s.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM kernels GROUP BY run_id) k ON k.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM ops GROUP BY run_id) o ON o.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM devices GROUP BY run_id) d ON d.run_id = r.id
        ORDER BY r.created_ns DESC, r.id DESC
        """
    ).fetchall()
    cols = ["id", "name", "status", "source", "started_ns", "ended_ns", "command", "exit_code",
            "created_ns", "samples", "kernels", "ops", "devices"]
    out = [dict(zip(cols, r)) for r in rows]
    for r in out:
        r["command"] = redact_command(r["command"])  # cached per text (gpuscope.redact)
    if any(r["status"] == "recording" for r in out):
        stale = set(stale_runs(con))
        for r in out:
            if r["id"] in stale:
                r["status"] = "incomplete"
    return out


def run_gpu_names(con: duckdb.DuckDBPyConnection) -> dict[int, list[str]]:
    """Every run's GPU names (else spec key, else device key) in device-id order, by run id: one
    query, for the TUI's runs screen, which tells two runs of one name apart by their GPUs."""
    rows = con.execute(
        "SELECT run_id, coalesce(name, spec_key, key) FROM devices "
        "WHERE kind IS NULL OR kind = 'gpu' ORDER BY run_id, device_id").fetchall()
    out: dict[int, list[str]] = {}
    for run_id, name in rows:
        out.setdefault(int(run_id), []).append(str(name))
    return out


def find_ingested_run(con: duckdb.DuckDBPyConnection, inputs_digest: str) -> RunRef | None:
    """The newest complete run ingested from trace files whose contents have ``inputs_digest``
    (what ``analyze PATH`` uses to reuse a run instead of ingesting the same files again)."""
    row = con.execute(
        "SELECT id, name FROM runs WHERE status = 'complete' AND source = 'ingest' "
        "AND json_extract_string(info, '$.inputs_digest') = ? ORDER BY created_ns DESC, id DESC LIMIT 1",
        [inputs_digest],
    ).fetchone()
    return RunRef(int(row[0]), str(row[1])) if row else None


def run_name(con: duckdb.DuckDBPyConnection, run_id: int) -> str | None:
    """The run's name, None when there is no such run."""
    row = con.execute("SELECT name FROM runs WHERE id = ?", [run_id]).fetchone()
    return None if row is None else str(row[0])


def run_model(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[dict[str, Any], str | None] | None:
    """The model spec stored with the run (``--model`` on ingest / run) as its JSON document
    and its source, or None (none stored, or a row that is not a JSON object)."""
    row = con.execute("SELECT spec_json, source FROM run_models WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    try:
        spec = json.loads(row[0])
    except (TypeError, ValueError):
        return None
    return (spec, row[1]) if isinstance(spec, dict) else None


# --------------------------------------------------------------------------------------------
# devices, samples, kernels and ops of a run: what the TUI, `monitor`, `export` and `report`
# show without an analysis. Column lists are spelled here, once.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRow:
    """One device of a run, as the store holds it (``source``: ``telemetry`` or ``trace``)."""

    device_id: int
    key: str
    source: str
    vendor: str | None
    kind: str | None
    name: str | None
    spec_key: str | None
    device_index: int | None
    memory_total_bytes: int | None
    uuid: str | None
    pci_bus_id: str | None
    properties: dict[str, Any]


def devices(con: duckdb.DuckDBPyConnection, run_id: int) -> list[DeviceRow]:
    """The run's devices in device-id order."""
    rows = con.execute(
        "SELECT device_id, key, source, vendor, kind, name, spec_key, device_index, memory_total_bytes, uuid, "
        "pci_bus_id, properties FROM devices WHERE run_id = ? ORDER BY device_id", [run_id]).fetchall()
    out = []
    for r in rows:
        try:
            props = json.loads(r[11]) if r[11] else {}
        except ValueError:
            props = {}
        out.append(DeviceRow(int(r[0]), str(r[1]), str(r[2]), r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                             props if isinstance(props, dict) else {}))
    return out


@dataclass(frozen=True)
class SampleSeries:
    """One device's samples over time: ``ts_ns`` and, per metric, the values at those times
    (None where the device could not report the metric at that tick)."""

    device_id: int
    ts_ns: list[int]
    values: dict[str, list[Any]]


def samples(con: duckdb.DuckDBPyConnection, run_id: int, metrics: list[str] | None = None, *,
            device_id: int | None = None, since_ns: int | None = None,
            until_ns: int | None = None) -> list[SampleSeries]:
    """The run's samples, one series per device in device-id order. ``metrics`` names columns
    of ``gpuscope.metrics.METRICS`` (default: all); an unknown name is an :class:`InputError`.
    ``since_ns`` / ``until_ns`` bound the time (inclusive)."""
    from ..metrics import METRICS

    known = [m.name for m in METRICS]
    wanted = known if metrics is None else list(metrics)
    unknown = [m for m in wanted if m not in known]
    if unknown:
        raise InputError(f"metric {unknown[0]!r}", f"not a sample column (known: {', '.join(known)})")
    where, params = ["run_id = ?"], [run_id]
    for clause, value in (("device_id = ?", device_id), ("ts_ns >= ?", since_ns), ("ts_ns <= ?", until_ns)):
        if value is not None:
            where.append(clause)
            params.append(value)
    cols = ", ".join(["device_id", "ts_ns", *wanted])  # names checked against METRICS above
    rows = con.execute(f"SELECT {cols} FROM samples WHERE {' AND '.join(where)} ORDER BY device_id, ts_ns",
                       params).fetchall()
    out: list[SampleSeries] = []
    for r in rows:
        if not out or out[-1].device_id != r[0]:
            out.append(SampleSeries(int(r[0]), [], {m: [] for m in wanted}))
        series = out[-1]
        series.ts_ns.append(int(r[1]))
        for m, v in zip(wanted, r[2:]):
            series.values[m].append(v)
    return out


@dataclass(frozen=True)
class KernelTotal:
    """GPU activities of one name (and kind) in a run: how many, how long in all, on how many
    devices; ``category`` from the one definition in ``gpuscope.kernel_names``."""

    name: str
    kind: str
    category: str
    count: int
    total_ns: int
    mean_ns: float
    max_ns: int
    devices: int


def kernel_totals(con: duckdb.DuckDBPyConnection, run_id: int, limit: int | None = None) -> list[KernelTotal]:
    """The run's GPU activities grouped by name and kind, longest total first (every activity
    of the run, before any scoping an analysis applies)."""
    from ..kernel_names import category_sql

    rows = con.execute(
        f"SELECT name, kind, {category_sql()} AS category, count(*), sum(dur_ns), avg(dur_ns), max(dur_ns), "
        "count(DISTINCT device_id) FROM kernels WHERE run_id = ? GROUP BY name, kind "
        "ORDER BY sum(dur_ns) DESC, name" + (" LIMIT ?" if limit is not None else ""),
        [run_id] + ([int(limit)] if limit is not None else [])).fetchall()
    return [KernelTotal(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), float(r[5]), int(r[6]), int(r[7]))
            for r in rows]


@dataclass(frozen=True)
class OpTotal:
    """CPU ops of one name in a run: how many and their CPU time (inclusive of their children)."""

    name: str
    count: int
    total_ns: int


def op_totals(con: duckdb.DuckDBPyConnection, run_id: int, limit: int | None = None) -> list[OpTotal]:
    """The run's stored CPU ops grouped by name, longest total first."""
    rows = con.execute(
        "SELECT name, count(*), sum(dur_ns) FROM ops WHERE run_id = ? GROUP BY name ORDER BY sum(dur_ns) DESC, name"
        + (" LIMIT ?" if limit is not None else ""),
        [run_id] + ([int(limit)] if limit is not None else [])).fetchall()
    return [OpTotal(str(r[0]), int(r[1]), int(r[2] or 0)) for r in rows]


@dataclass(frozen=True)
class AnnotationRow:
    """One annotation of a run (``kind``: ``profiler_step``, ``user_annotation``,
    ``gpu_user_annotation``, ``profiler_window``, ``mark``, ``device_lost``; ``value`` parsed
    from its JSON, None when empty). The writer takes the same rows
    (:func:`gpuscope.store.telemetry.insert_annotations`: ``value`` written as JSON)."""

    kind: str
    name: str | None
    ts_ns: int
    dur_ns: int | None
    device_id: int | None
    pid: str | None
    value: Any


def annotation_rows(con: duckdb.DuckDBPyConnection, run_id: int, kinds: list[str] | None = None) -> list[AnnotationRow]:
    """The run's annotations in time order, only those of ``kinds`` when given."""
    where = "run_id = ?"
    params: list[Any] = [run_id]
    if kinds is not None:
        if not kinds:
            return []
        where += " AND kind IN (" + ", ".join("?" for _ in kinds) + ")"
        params += list(kinds)
    rows = con.execute(f"SELECT kind, name, ts_ns, dur_ns, device_id, pid, value FROM annotations WHERE {where} "
                       "ORDER BY ts_ns, kind, name", params).fetchall()
    out = []
    for r in rows:
        try:
            value = json.loads(r[6]) if r[6] else None
        except ValueError:
            value = r[6]
        out.append(AnnotationRow(str(r[0]), r[1], int(r[2]), None if r[3] is None else int(r[3]),
                                 None if r[4] is None else int(r[4]), r[5], value))
    return out


#: The tables that hold a run's rows, in the order an export writes them, with the column that
#: names the run and the order the rows are written in.
RUN_TABLES: dict[str, tuple[str, str]] = {
    "runs": ("id", "id"),
    "traces": ("run_id", "trace_id"),
    "devices": ("run_id", "device_id"),
    "samples": ("run_id", "device_id, ts_ns"),
    "kernels": ("run_id", "device_id, ts_ns, stream"),
    "ops": ("run_id", "op_id"),
    "annotations": ("run_id", "ts_ns, kind, name"),
    "graph_launches": ("run_id", "ts_ns"),
    "sampler_stats": ("run_id", "started_ns"),
    "run_models": ("run_id", "run_id"),
}


def run_rows_sql(table: str) -> str:
    """A SELECT of one run's rows of ``table`` (one parameter: the run id), in a fixed order:
    what ``gpuscope export`` copies out."""
    key, order = RUN_TABLES[table]
    return f"SELECT * FROM {table} WHERE {key} = ? ORDER BY {order}"
