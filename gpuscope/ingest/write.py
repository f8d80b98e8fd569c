"""Write a staged run into the store in one transaction: the run itself only through the run
lifecycle (:func:`gpuscope.store.runs.add_ingested` for a new run,
:func:`~gpuscope.store.runs.merge_info` when the traces join a recorded one), then its
``traces``, ``devices``, ``kernels``, ``ops``, ``graph_launches`` and ``annotations`` rows
from the staging tables through :mod:`gpuscope.store.trace_rows`. A failure leaves the store
exactly as it was.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError, InputError
from ..render import json as strict_json
from ..textsafe import visible
from .exported import GRAPH_EVENTS_KEY
from .progress import Progress
from .stage import STAGING_TABLES, StagingConnection, TraceInfo

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from ..store.run_info import RunInfo



def write_run(
    staging: StagingConnection, db_path: Path | str, *, name: str, files: Sequence[Path],
    span: tuple[int | None, int | None], info_doc: RunInfo, notes: list[str], infos: list[TraceInfo],
    devices: list[dict[str, Any]], all_ops: bool, into_run: int | None, keep_open: bool, progress: Progress,
) -> tuple[int, str, StagingConnection | None]:
    """Attach the store at ``db_path`` to the staging connection and write the run.

    Returns (run id, run name, the connection handed over): with ``keep_open`` that is
    ``staging``, its current database the store and its staging tables dropped (its spill
    folder goes with it); otherwise None, and the store is detached again (the caller closes
    ``staging`` either way unless it is handed over). With
    ``into_run`` the traces join that run, their trace, device and op ids after its own.
    ``info_doc``: the new run's ``runs.info``; joining a run, only its ``ingest`` counts and
    ``notes`` are added to that run's.
    """
    from .. import store
    from .._db import duckdb
    from ..store import read, runs, trace_rows
    from ..store.run_info import RunInfo

    con = staging.con
    handed_over: StagingConnection | None = None
    run_name = name
    progress(f"writing run to {db_path}")
    store.open_attached(con, db_path)
    # Checkpoint at commit: the run is written once, compressed, into the file's blocks,
    # instead of into the WAL first and the blocks again at DETACH (bench/README.md).
    con.execute("SET checkpoint_threshold = '0KB'")
    try:
        con.execute("USE store")
        store.migrate(con, str(db_path))
        # as every writer does on opening the store (store.connect): runs whose recorder died
        # (a `gpuscope run` killed with SIGKILL) are finished as incomplete
        runs.recover_stale_runs(con)
        with store.transaction(con):
            offsets = (0, 0, 0)
            if into_run is None:
                run_id = runs.add_ingested(con, name=run_name, started_ns=span[0], ended_ns=span[1],
                                           command=["gpuscope", "ingest", *(str(f) for f in files)], info=info_doc)
            else:
                found = read.run_name(con, into_run)
                if found is None:
                    raise InputError(f"run {into_run}", "no such run")
                run_name = found
                run_id = into_run
                # joining a recorded run: its own digest, owner and notes stay; ingest's counts and notes are added
                runs.merge_info(con, run_id, RunInfo(ingest=info_doc.ingest), append_notes=notes)
                offsets = trace_rows.next_ids(con, run_id)
                taken = trace_rows.device_keys(con, run_id)
                for d in devices:  # e.g. telemetry's gpu0 and the trace's gpu0: keep keys unique
                    if d["key"] in taken:
                        d["key"] = f"trace{d['trace_id'] + offsets[0]}/{d['key']}"
            exports = [(i.trace_id + offsets[0], i.export) for i in infos if i.export is not None]
            if exports:
                # the run's telemetry devices keep their keys (gpu0); trace devices that share one
                # are named as when the traces joined the recorded run (trace0/gpu0)
                taken = {d.get("key") for _, b in exports for d in b["devices"]} | \
                    (trace_rows.device_keys(con, run_id) if into_run is not None else set())
                for d in devices:
                    if d["key"] in taken:
                        d["key"] = f"trace{d['trace_id'] + offsets[0]}/{d['key']}"
            _write_rows(con, run_id, infos, devices, all_ops, *offsets)
            if exports:
                from ..store.export_rows import write_extras

                write_extras(con, run_id, exports, devices, offsets[1], new_run=into_run is None)
        if keep_open:
            # By name: listing the catalog costs more than the drops (bench/README.md); a test
            # checks that none is left.
            con.execute("".join(f"DROP TABLE IF EXISTS temp.{t};" for t in STAGING_TABLES))
            handed_over = staging
    except duckdb.Error as exc:
        # the disk is full or the store's device failed: DuckDB says so as an I/O error, or as
        # a commit whose checkpoint failed (the transaction is rolled back either way)
        if not isinstance(exc, duckdb.IOException) and "Could not write file" not in str(exc):
            raise
        raise GpuscopeError(f"{visible(str(db_path))}: cannot write the run ({_io_reason(exc)}); the store is as it was") from None
    finally:
        if handed_over is None:
            try:
                con.execute("USE memory")
                con.execute("DETACH store")
            except duckdb.Error:  # a store DuckDB gave up on after a failed write: nothing to detach
                pass
    return run_id, run_name, handed_over


def _io_reason(exc: Exception) -> str:
    """DuckDB's I/O error as a user reads it."""
    text = str(exc)
    if "No space left" in text:
        return "no space left on the device"
    return text.splitlines()[0].removeprefix("IO Error: ")


def stored_json(doc: Any) -> str:
    """``doc`` as JSON the store's readers can parse: strict (a header's NaN or infinity written
    null), and a lone surrogate (JSON may escape one, ``"\\ud800"``; UTF-8 cannot hold it and
    DuckDB's JSON functions refuse it) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", strict_json.dumps(doc))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _write_rows(
    con: duckdb.DuckDBPyConnection, run_id: int, infos: list[TraceInfo], devices: list[dict[str, Any]], all_ops: bool,
    t0: int = 0, d0: int = 0, o0: int = 0,
) -> None:
    """The staged rows through the store's trace writer, each trace's header (and the graph
    events analyzers/scope.py needs) kept as its metadata."""
    from ..store import trace_rows

    traces = []
    for i in infos:
        meta = {k: v for k, v in i.header.items() if k != "traceEvents"}
        if i.graph_events:
            meta[GRAPH_EVENTS_KEY] = i.graph_events
        traces.append((i.trace_id, i.path, i.rank, i.base_time_ns, i.ts_relative, i.events, i.size_bytes,
                       stored_json(meta)))
    trace_rows.write_staged_rows(con, run_id, traces, devices, all_ops, t0, d0, o0)
