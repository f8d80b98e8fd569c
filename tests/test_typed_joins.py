"""The typed joins of issue 29 on the store side: one SQL-literal helper (``gpuscope._db``),
the store's errors in ``gpuscope.errors``, annotations written as the read layer's
``AnnotationRow``, and ingest's counts as one dataclass."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("text", [
    "plain", "", "it's", "''", "a\\b\\n", "C:\\temp\\o'k\\", "ünïcødé ✓ 名前 🚀", "tab\there", "new\nline",
    "E'x\\'y'",
])
def test_sql_literal_reads_back_as_written(text: str) -> None:
    from gpuscope._db import duckdb, sql_literal

    con = duckdb.connect(":memory:")
    try:
        assert con.execute(f"SELECT {sql_literal(text)}").fetchone()[0] == text
    finally:
        con.close()


def test_sql_literal_spelling_and_nul() -> None:
    from gpuscope._db import sql_literal

    assert sql_literal("it's") == "'it''s'"
    assert sql_literal("a\\b") == "'a\\b'"  # a backslash is an ordinary character in '...'
    assert sql_literal("名前") == "'名前'"
    with pytest.raises(ValueError, match="NUL"):
        sql_literal("store\x00.duckdb")


def test_a_store_path_with_quotes_attaches(tmp_path: Path) -> None:
    """``attach_sql`` goes through the helper: the file named, not another, is the store. (No
    backslash here: DuckDB's file system reads one in a path as a folder separator.)"""
    from gpuscope import store
    from gpuscope._db import duckdb

    path = tmp_path / "o'brien ünï.duckdb"
    con = duckdb.connect(":memory:")
    try:
        con.execute(store.attach_sql(path, "s"))
        con.execute("CREATE TABLE s.t AS SELECT 42 AS x")
        con.execute("DETACH s")
    finally:
        con.close()
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == [path.name]
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("SELECT x FROM t").fetchone()[0] == 42
    finally:
        con.close()


def test_store_errors_live_in_gpuscope_errors(tmp_path: Path) -> None:
    from gpuscope import errors, store

    full = store.write_error(tmp_path / "s.duckdb", OSError(errno.ENOSPC, "No space left on device"))
    assert type(full) is errors.StoreWriteError and full.reason == "no space left on the device"
    assert str(full) == f"{tmp_path / 's.duckdb'}: cannot write to the store (no space left on the device); " \
                        "the store is as it was"
    ro = store.write_error(tmp_path / "s.duckdb", OSError(errno.EROFS, "Read-only file system"))
    assert type(ro) is errors.StoreReadOnlyError and isinstance(ro, errors.StoreError)
    # the one busy error, which the TUI catches as it is
    from gpuscope.tui import data

    assert data.StoreBusy is errors.StoreBusyError


def test_analyzing_a_missing_run_is_run_not_found(tmp_path: Path) -> None:
    from gpuscope import store
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.errors import InputError, RunNotFoundError

    db = tmp_path / "s.duckdb"
    with store.writing(db):
        pass
    con = store.connect(db, read_only=True)
    try:
        with pytest.raises(RunNotFoundError) as caught:
            analyze_run(con, 99)
        with pytest.raises(RunNotFoundError) as named:
            store.resolve_run(con, "nightly")
    finally:
        con.close()
    assert isinstance(caught.value, InputError) and caught.value.run == 99
    assert str(caught.value) == "run 99: no such run id or name (see `gpuscope runs`)"
    assert str(named.value) == "run 'nightly': no such run id or name (see `gpuscope runs`)"


def test_annotation_rows_written_and_read_back(tmp_path: Path) -> None:
    from gpuscope import store
    from gpuscope.store import read
    from gpuscope.store.read import AnnotationRow
    from gpuscope.store.telemetry import insert_annotations

    db = tmp_path / "s.duckdb"
    rows = [AnnotationRow(kind="profiler_window", name="window", ts_ns=1_000, dur_ns=500, device_id=None,
                          pid="12", value={"path": "t.json", "open_ns": 990}),
            AnnotationRow(kind="mark", name="step", ts_ns=2_000, dur_ns=None, device_id=None, pid="12",
                          value={"phase": "decode", "tokens": 8}),
            AnnotationRow(kind="mark", name="bare", ts_ns=3_000, dur_ns=None, device_id=None, pid=None, value=None)]
    with store.writing(db) as con:
        insert_annotations(con, 7, rows)
    con = store.connect(db, read_only=True)
    try:
        assert read.annotation_rows(con, 7) == rows
        raw = con.execute("SELECT trace_id, tid, value FROM annotations WHERE run_id = 7 ORDER BY ts_ns").fetchall()
    finally:
        con.close()
    # what the wrapper's tuples held: no trace, no thread, the value as json.dumps writes it
    assert raw == [(None, None, json.dumps({"path": "t.json", "open_ns": 990})),
                   (None, None, json.dumps({"phase": "decode", "tokens": 8})), (None, None, None)]


def test_ingest_counts_are_one_dataclass(tmp_path: Path) -> None:
    from gpuscope.ingest import stage_traces
    from gpuscope.ingest.parse import IngestCounts

    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5, "pid": 0, "tid": 7, "args": {"device": 0}},
        {"ph": "X", "cat": "kernel", "name": "bad", "ts": 20, "dur": -1, "pid": 0, "tid": 7},  # negative dur
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 9, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 30, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "mtia_op", "name": "m", "ts": 2, "dur": 1, "pid": 1, "tid": 1},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    con, infos, counts = stage_traces([trace])
    con.close()
    assert counts == IngestCounts(skipped={"negative dur": 1}, ignored={"mtia_op": 1, "python_function": 1},
                                  accelerators={"MTIA": 1}, runtime_hip=0, runtime_cuda=2, not_traces=[],
                                  graph_replayed_kernels=0, graph_mapped_kernels=0)
