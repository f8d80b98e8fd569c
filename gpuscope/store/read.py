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

from ..errors import InputError
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
    the newest run. Raises :class:`InputError` when nothing matches."""
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
        raise InputError(f"run {text!r}", "no such run id or name (see `gpuscope runs`)")
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
        r["command"] = redact_command(r["command"])
    if any(r["status"] == "recording" for r in out):
        stale = set(stale_runs(con))
        for r in out:
            if r["id"] in stale:
                r["status"] = "incomplete"
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


def run_info(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any] | None:
    """The run's ``info`` document ({} when empty), None when there is no such run."""
    row = con.execute("SELECT info FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row[0]) if row[0] else {}
    except ValueError:
        return {}


def run_name(con: duckdb.DuckDBPyConnection, run_id: int) -> str | None:
    """The run's name, None when there is no such run."""
    row = con.execute("SELECT name FROM runs WHERE id = ?", [run_id]).fetchone()
    return None if row is None else str(row[0])
