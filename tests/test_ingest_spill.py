"""Issue 30, point 2: an ingest whose staging spilled to disk writes its run, and leaves no
spill folder behind (the folder lives exactly as long as the staging connection)."""
from __future__ import annotations

import gzip
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

#: CPU ops in the generated trace: enough for staging to spill under the memory limit below.
N_OPS = 200_000
NAMES = ("aten::empty", "aten::normal_", "aten::copy_")


def _init_trace(path: Path, n: int = N_OPS) -> None:
    """A CPU-only trace as a model's initialisation writes it: ``aten::empty``/``normal_``/
    ``copy_`` in turn, each with input shapes, 3 µs apart."""
    base_us = 1_700_000_000_000_000
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        f.write(",".join(
            f'{{"ph": "X", "cat": "cpu_op", "name": "{NAMES[i % 3]}", "pid": 1, "tid": 1, "ts": {base_us + 3 * i}, '
            f'"dur": 2, "args": {{"External id": {i + 1}, "Input Dims": [[4096, {i % 512 + 1}]], '
            f'"Input type": ["float"]}}}}'
            for i in range(n)))
        f.write("]}")


@pytest.fixture
def spilling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Staging under a memory limit small enough to spill this trace (but large enough not to
    run out of memory), with several threads, in a temporary folder of the test's own; records
    how many temporary files DuckDB held when the write began, and the spill folder."""
    import gpuscope.ingest as ingest_pkg
    from gpuscope.ingest import stage

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(stage, "STAGING_MEMORY_LIMIT", "100MB")
    monkeypatch.setattr(stage, "LARGE_STAGING_MEMORY_LIMIT", "100MB")
    monkeypatch.setattr(stage, "PARALLEL_JSON_BYTES", 1)  # the threads of a large input
    seen: dict[str, Any] = {"tmp": tmp}
    real = ingest_pkg.write_run

    def write_run(staging: Any, *args: Any, **kwargs: Any) -> Any:
        seen["temp_files"] = staging.con.execute("SELECT count(*) FROM duckdb_temporary_files()").fetchone()[0]
        seen["spill_dir"] = staging.spill_dir
        return real(staging, *args, **kwargs)

    monkeypatch.setattr(ingest_pkg, "write_run", write_run)
    return seen


def test_spilled_staging_is_written(tmp_path: Path, spilling: dict[str, Any]) -> None:
    trace = tmp_path / "init.pt.trace.json.gz"
    _init_trace(trace)
    db = tmp_path / "s.duckdb"
    r = run_cli("ingest", "--db", db, "--all-ops", "--threads", "2", "--json", trace)
    assert r.code == 0, r.err
    assert spilling["temp_files"] > 0  # the staging did spill: the case this test is about
    assert r.json()["loaded"]["ops"] == N_OPS
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        by_name = dict(con.execute("SELECT name, count(*) FROM ops GROUP BY name").fetchall())
    finally:
        con.close()
    # every third op has each name, starting with aten::empty
    assert by_name == {"aten::empty": (N_OPS + 2) // 3, "aten::normal_": (N_OPS + 1) // 3, "aten::copy_": N_OPS // 3}
    assert not spilling["spill_dir"].exists()
    assert list(spilling["tmp"].iterdir()) == []  # neither spools nor spill folder left


def test_no_spill_folder_left_after_a_failed_write(tmp_path: Path, spilling: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.errors import GpuscopeError
    from gpuscope.store import runs

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise GpuscopeError("the write failed (test)")

    monkeypatch.setattr(runs, "add_ingested", refuse)
    trace = tmp_path / "init.pt.trace.json.gz"
    _init_trace(trace)
    r = run_cli("ingest", "--db", tmp_path / "s.duckdb", "--all-ops", "--threads", "2", trace)
    assert r.code == 1 and "the write failed (test)" in r.err
    assert spilling["temp_files"] > 0
    assert list(spilling["tmp"].iterdir()) == []


def test_handed_over_connection_removes_its_spill_folder(tmp_path: Path, spilling: dict[str, Any]) -> None:
    """``analyze TRACE`` keeps the connection that wrote the run: closing it removes the folder."""
    from gpuscope import ingest

    trace = tmp_path / "init.pt.trace.json.gz"
    _init_trace(trace)
    r = ingest.ingest(tmp_path / "s.duckdb", [trace], all_ops=True, threads=2, keep_open=True)
    try:
        assert spilling["temp_files"] > 0
        assert spilling["spill_dir"].is_dir()  # alive with its connection
        assert r.connection.execute("SELECT count(*) FROM ops").fetchone()[0] == N_OPS
    finally:
        r.connection.close()
    assert list(spilling["tmp"].iterdir()) == []
