"""The run lifecycle: the only code that writes the ``runs`` table.

A run is created ``recording`` by whoever starts to record it (the sampler of ``gpuscope run``
or ``gpuscope record``) and finished once: ``complete``, ``incomplete`` (its owner is gone or
it was interrupted) or ``failed`` (the wrapped command failed). An ingested trace is a run that
is created ``complete`` at once. Nothing moves a finished run back::

    recording ──finish──▶ complete | incomplete | failed
    (ingest) ───────────▶ complete
    recording ──owner gone (recover_stale_runs)──▶ incomplete

It is the one home of a run's lifecycle: create (:func:`begin_recording`, :func:`add_ingested`),
add to its info (:func:`merge_info`, typed by :class:`~gpuscope.store.run_info.RunInfo`), finish
(:func:`finish`, with the notes that go in with the run's end). Each is called by one
orchestrator: ``gpuscope run``'s wrapper, the monitor, ingest (and, for a sampler used on its
own, the store sink that was given no run to write under). Sinks given a run id write samples
and nothing else.

Every function works on a connection whose default catalog is the store (``connect``, or an
attached store after ``USE``), inside the caller's transaction: the caller decides what else
belongs to the same all-or-nothing write. Commands are redacted here, whatever the caller
passes, so no secret typed on a command line reaches the store.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..redact import redact_command
from ..machine import hostname, now_ns
from .run_info import OwnerProcess, RunInfo
from .tx import transaction

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

RECORDING = "recording"
COMPLETE = "complete"
INCOMPLETE = "incomplete"
FAILED = "failed"
RUN_STATUSES = (RECORDING, COMPLETE, INCOMPLETE, FAILED)
FINAL_STATUSES = (COMPLETE, INCOMPLETE, FAILED)


def _typed(info: RunInfo | Mapping[str, Any] | None) -> RunInfo | None:
    """``info`` as the typed document (a plain mapping, as older callers and tests pass, is
    read like a stored one)."""
    if info is None or isinstance(info, RunInfo):
        return info
    return RunInfo.from_dict(dict(info))


def _new(con: duckdb.DuckDBPyConnection, *, name: str, status: str, source: str, started_ns: int | None,
         ended_ns: int | None, command: Any, info: RunInfo | Mapping[str, Any] | None) -> int:
    typed = _typed(info)
    row = con.execute("SELECT nextval('run_id_seq')").fetchone()
    if row is None:  # (a sequence always answers; mypy cannot know)
        raise StoreError("the store's run id sequence gave no value")
    run_id = int(row[0])
    con.execute(
        "INSERT INTO runs (id, name, status, source, started_ns, ended_ns, created_ns, command, exit_code, host, info) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
        [run_id, name, status, source, started_ns, ended_ns, now_ns(), redact_command(command), hostname(),
         typed.to_json() if typed is not None else None])
    return run_id


def begin_recording(con: duckdb.DuckDBPyConnection, *, name: str, source: str, started_ns: int | None,
                    command: Any, info: RunInfo | Mapping[str, Any] | None = None) -> int:
    """A new run in state ``recording``; its id. ``info`` should name the recording process
    (``RunInfo(sampler=SamplerProcess(pid=...))`` or ``RunInfo(owner=OwnerProcess(pid=...,
    host=...))``) so that a run whose recorder died can be recognized and finished as
    ``incomplete``."""
    return _new(con, name=name, status=RECORDING, source=source, started_ns=started_ns, ended_ns=None,
                command=command, info=info)


def add_ingested(con: duckdb.DuckDBPyConnection, *, name: str, started_ns: int | None, ended_ns: int | None,
                 command: Any, info: RunInfo | Mapping[str, Any] | None = None) -> int:
    """A new run made from trace files, ``complete`` at once; its id."""
    return _new(con, name=name, status=COMPLETE, source="ingest", started_ns=started_ns, ended_ns=ended_ns,
                command=command, info=info)


def _status(con: duckdb.DuckDBPyConnection, run_id: int) -> str:
    row = con.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        raise StoreError(f"run {run_id}: no such run")
    return str(row[0])


def read_info(con: duckdb.DuckDBPyConnection, run_id: int) -> RunInfo:
    """The run's ``info`` document (an empty one for NULL or text that is not a JSON object)."""
    row = con.execute("SELECT info FROM runs WHERE id = ?", [run_id]).fetchone()
    if row is None:
        raise StoreError(f"run {run_id}: no such run")
    return RunInfo.from_json(row[0])


def merge_info(con: duckdb.DuckDBPyConnection, run_id: int, extra: RunInfo | Mapping[str, Any],
               append_notes: Sequence[str] | None = None) -> RunInfo:
    """Merge ``extra`` into the run's ``info`` document (the fields it sets replace the stored
    ones: :meth:`RunInfo.merged`) and append ``append_notes`` to its ``notes``; returns the new
    document."""
    info = read_info(con, run_id).merged(_typed(extra) or RunInfo(),
                                         list(append_notes) if append_notes is not None else None)
    con.execute("UPDATE runs SET info = ? WHERE id = ?", [info.to_json(), run_id])
    return info


def set_model(con: duckdb.DuckDBPyConnection, run_id: int, spec: dict[str, Any], source: str | None) -> None:
    """Store the model a run served (``--model``): ``spec`` is the parsed
    :class:`~gpuscope.analyzers.modelspec.ModelSpec` as JSON (never the user's file), ``source``
    where it came from (the config's path as given). Replaces an earlier one."""
    _status(con, run_id)  # a StoreError for a run that does not exist
    con.execute("INSERT OR REPLACE INTO run_models (run_id, spec_json, source) VALUES (?, ?, ?)",
                [run_id, json.dumps(spec, sort_keys=True), source])


def set_started(con: duckdb.DuckDBPyConnection, run_id: int, started_ns: int) -> None:
    """Record when a run's recording started (its sampler's start), for a run its orchestrator
    created before the sampler ran; a start already recorded is kept."""
    con.execute("UPDATE runs SET started_ns = coalesce(started_ns, ?) WHERE id = ?", [started_ns, run_id])


def set_ended(con: duckdb.DuckDBPyConnection, run_id: int, ended_ns: int) -> None:
    """Record when a run's recording stopped, leaving its state to whoever finishes it (the
    wrapper of ``gpuscope run`` still has traces to add)."""
    con.execute("UPDATE runs SET ended_ns = ? WHERE id = ?", [ended_ns, run_id])


def finish(con: duckdb.DuckDBPyConnection, run_id: int, status: str, ended_ns: int | None,
           exit_code: int | None = None, started_ns: int | None = None, notes: Sequence[str] = ()) -> None:
    """Move a ``recording`` run to its final ``status`` (with the wrapped command's exit code;
    ``started_ns`` fills a start that was never recorded), ``notes`` appended to its info in the
    same write: a run never reads finished without saying what it lacks. A run already finished
    is an error: two owners would be finishing the same run."""
    if status not in FINAL_STATUSES:
        raise ValueError(f"not a final run status: {status!r}")
    current = _status(con, run_id)
    if current != RECORDING:
        raise StoreError(f"run {run_id}: already {current}, cannot become {status}")
    if notes:
        merge_info(con, run_id, RunInfo(), append_notes=list(notes))
    con.execute("UPDATE runs SET status = ?, exit_code = ?, ended_ns = coalesce(?, ended_ns), "
                "started_ns = coalesce(started_ns, ?) WHERE id = ?",
                [status, exit_code, ended_ns, started_ns, run_id])


def _owner_alive(info_text: str | None) -> bool:
    """Whether the process recording a run (``runs.info`` owner or sampler pid) still runs.
    A run recorded on another host is assumed alive (nothing here can tell)."""
    owner = RunInfo.from_json(info_text).recorder
    pid = owner.pid if owner is not None else None
    host = owner.host if isinstance(owner, OwnerProcess) else None
    if pid is None:
        return False
    if host and host != hostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_runs(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Runs still marked ``recording`` whose recording process is gone (e.g. killed with
    SIGKILL): they hold everything written up to their last flush and are ``incomplete``."""
    rows = con.execute("SELECT id, info FROM runs WHERE status = 'recording'").fetchall()
    return [int(r[0]) for r in rows if not _owner_alive(r[1])]


def recover_stale_runs(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Finish :func:`stale_runs` as ``incomplete`` (with ``ended_ns`` at their last sample),
    in a transaction of its own; called when a writer opens the store."""
    if not (con.execute("SELECT count(*) FROM runs WHERE status = 'recording'").fetchone() or (0,))[0]:
        return []
    with transaction(con):
        ids = stale_runs(con)
        for run_id in ids:
            con.execute(
                "UPDATE runs SET status = 'incomplete', ended_ns = coalesce(ended_ns, "
                "(SELECT max(ts_ns) FROM samples WHERE run_id = $1)) WHERE id = $1", [run_id])
    return ids
