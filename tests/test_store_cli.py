"""The store (schema, migrations, atomic ingest) and the runs / sql / analyze commands."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace
from gpuscope import store
from gpuscope.errors import StoreError


def _ingest(tmp_path: Path, name: str, n: int = 2) -> dict:
    path = write_trace(tmp_path / f"{name}.json", [kernel("k", float(10 * i), 1.0) for i in range(n)])
    r = run_cli("ingest", path, "--name", name, "--json", "-q")
    assert r.code == 0, r.err
    return r.json()


def test_default_store_location(tmp_path, monkeypatch) -> None:
    from gpuscope.paths import default_db_path

    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "env.duckdb"))
    assert default_db_path() == tmp_path / "env.duckdb"
    monkeypatch.delenv("GPUSCOPE_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("sys.platform", "linux")
    assert default_db_path() == tmp_path / "xdg" / "gpuscope" / "gpuscope.duckdb"


def test_db_flag_beats_environment(tmp_path, db) -> None:
    other = tmp_path / "other.duckdb"
    path = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])
    assert run_cli("ingest", path, "--db", other, "-q").code == 0
    assert other.exists() and not db.exists()


def test_schema_has_contract_tables_and_version(tmp_path, db) -> None:
    _ingest(tmp_path, "a")
    con = duckdb.connect(str(db), read_only=True)
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"runs", "devices", "samples", "kernels", "ops", "annotations", "traces", "meta"} <= tables
    assert store.schema_version(con) == store.SCHEMA_VERSION
    sample_cols = {r[0] for r in con.execute("DESCRIBE samples").fetchall()}
    assert {"power_w", "energy_j", "mem_used_bytes", "sm_clock_mhz", "gpu_util"} <= sample_cols
    con.close()


def test_newer_schema_is_refused(tmp_path, db) -> None:
    _ingest(tmp_path, "a")
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    r = run_cli("runs")
    assert r.code == 2 and "newer" in r.err
    with pytest.raises(StoreError):
        store.connect(db)


def test_migration_from_an_empty_database(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    duckdb.connect(str(path)).close()  # a DuckDB file from before any gpuscope schema
    con = store.connect(path)
    assert store.schema_version(con) == store.SCHEMA_VERSION
    con.close()


def test_failed_write_rolls_back(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.write as write

    _ingest(tmp_path, "first")
    path = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(write, "_write_rows", boom)
    r = run_cli("ingest", path)
    assert r.code == 1 and "disk full" in r.err
    runs = run_cli("runs", "--json").json()
    assert [x["name"] for x in runs] == ["first"]  # the half-written run was rolled back
    assert run_cli("sql", "SELECT count(*) AS n FROM kernels", "--json").json() == [{"n": 2}]


def test_runs_json_contract(tmp_path, db) -> None:
    _ingest(tmp_path, "older", n=3)
    _ingest(tmp_path, "newer", n=5)
    runs = run_cli("runs", "--json").json()
    assert [r["name"] for r in runs] == ["newer", "older"]
    for r in runs:
        assert {"id", "name", "status", "started_ns", "ended_ns", "command", "exit_code", "samples", "kernels",
                "ops"} <= set(r)
        assert r["status"] == "complete" and r["exit_code"] is None
    assert runs[0]["kernels"] == 5 and runs[1]["kernels"] == 3
    assert runs[0]["ended_ns"] - runs[0]["started_ns"] == 41_000
    text = run_cli("runs").out
    assert "newer" in text and "older" in text
    # relative timestamps without baseTimeNanoseconds: no wall-clock start to show, not 1970
    assert "(relative)" in text and "1970-" not in text
    based = write_trace(tmp_path / "based.json", [kernel("k", 10.0, 1.0)], baseTimeNanoseconds=1_763_800_000_000_000_000)
    assert run_cli("ingest", based, "-q").code == 0
    assert "2025-11-2" in run_cli("runs").out


def test_runs_on_a_missing_store_is_empty(db) -> None:
    r = run_cli("runs", "--json")
    assert r.code == 0 and r.json() == []
    assert "no runs yet" in run_cli("runs").out


def test_run_reference_by_id_and_newest_name(tmp_path, db) -> None:
    a = _ingest(tmp_path, "same", n=2)
    b = _ingest(tmp_path, "same", n=4)
    assert run_cli("analyze", "same", "--json").json()["run"]["id"] == b["run_id"]
    assert run_cli("analyze", str(a["run_id"]), "--json").json()["run"]["id"] == a["run_id"]
    assert run_cli("analyze", "--json").json()["run"]["id"] == b["run_id"]


def test_sql_json_and_text(tmp_path, db) -> None:
    _ingest(tmp_path, "a", n=3)
    r = run_cli("sql", "SELECT name, count(*) AS n, sum(dur_ns) AS ns FROM kernels GROUP BY name", "--json")
    assert r.code == 0 and r.json() == [{"name": "k", "n": 3, "ns": 3000}]
    assert "ns" in run_cli("sql", "SELECT 1 AS ns").out


def test_analyze_json_is_one_document_and_text_has_units(tmp_path, db) -> None:
    events = [cpu_op("aten::mm", 0.0, 30.0, ext=1, dims=[[8, 8], [8, 8]], types=["float", "float"]),
              runtime("cudaLaunchKernel", 2.0, 3.0, corr=5, ext=1), kernel("sgemm", 40.0, 2500.0, corr=5)]
    path = write_trace(tmp_path / "t.json", events)
    r = run_cli("analyze", path, "--json")
    assert r.code == 0 and r.err == ""
    doc = json.loads(r.out)
    assert {"schema", "run", "devices", "time_us", "roofline_us", "ops", "kernels"} <= set(doc)
    assert doc["kernels"][0] == doc["kernels"][0] | {"name": "sgemm", "count": 1, "total_us": 2500.0, "bound": "unknown"}
    op = doc["ops"][0]
    assert {k: op[k] for k in ("name", "input_dims", "input_types", "count", "kernel_us")} == {
        "name": "aten::mm", "input_dims": [[8, 8], [8, 8]], "input_types": ["float", "float"], "count": 1,
        "kernel_us": 2500.0}
    text = run_cli("analyze").out
    assert "2.500 ms" in text and "aten::mm" in text and "sgemm" in text and "compute" in text
