"""`gpuscope export RUN --format parquet|csv`: the files equal the store (row counts and a sum
per numeric column, per table), the README names every column, the directory appears whole and
owner-only, and bad input exits 2 without touching anything."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

BASE_NS = 1_767_225_600_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132}]
NUMERIC = ("BIGINT", "INTEGER", "DOUBLE", "FLOAT", "HUGEINT", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER")


@pytest.fixture
def run_db(tmp_path: Path) -> tuple[Path, int]:
    """A store with one ingested run (GEMM, elementwise, a copy) and telemetry samples in it."""
    bf16 = "c10::BFloat16"
    events = [cpu_op("aten::mm", 0, 20, ext=1, dims=[[4096, 4096], [4096, 4096]], types=[bf16, bf16]),
              runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1), kernel("sm90_xmma_gemm_bf16", 100, 900, corr=1),
              cpu_op("aten::add", 30, 10, ext=2, dims=[[4096, 4096], [4096, 4096]], types=[bf16, bf16]),
              runtime("cudaLaunchKernel", 32, 5, corr=2, ext=2),
              kernel("vectorized_elementwise_kernel", 1100, 120, corr=2),
              cpu_op("aten::copy_", 50, 10, ext=3, dims=[[4096, 4096], [4096, 4096]], types=[bf16, bf16]),
              runtime("cudaMemcpyAsync", 52, 5, corr=3, ext=3),
              kernel("Memcpy DtoD (Device -> Device)", 1300, 60, corr=3, cat="gpu_memcpy")]
    db = tmp_path / "s.duckdb"
    trace = write_trace(tmp_path / "t.json", events, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)
    r = run_cli("ingest", "--db", str(db), "--name", "exp", "-q", str(trace))
    assert r.code == 0, r.err
    from gpuscope import store

    con = store.connect(db)
    with store.transaction(con):
        rid = int(con.execute("SELECT max(id) FROM runs").fetchone()[0])
        con.execute("INSERT INTO devices (run_id, device_id, key, source, vendor, kind, name) "
                    "VALUES (?, 7, 'gpu0', 'telemetry', 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3')", [rid])
        for i in range(25):
            con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w, gpu_util, mem_used_bytes) "
                        "VALUES (?, 7, ?, ?, ?, ?)", [rid, BASE_NS + i * 10**8, 300.0 + i, i / 25, 2**30 + i])
    con.close()
    return db, rid


def _columns(con, sql: str, params: list) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {sql}", params).fetchall()]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_files_equal_the_store(run_db: tuple[Path, int], tmp_path: Path, fmt: str) -> None:
    import duckdb

    from gpuscope.store.read import RUN_TABLES, run_rows_sql

    db, rid = run_db
    out = tmp_path / "out"
    r = run_cli("export", str(rid), "--db", str(db), "--format", fmt, "--out", str(out), "--json")
    assert r.code == 0, r.err
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in RUN_TABLES:
            sql = run_rows_sql(table)
            path = str(out / f"{table}.{fmt}")
            reader = f"read_parquet('{path}')" if fmt == "parquet" else f"read_csv_auto('{path}', header=true)"
            n_store = con.execute(f"SELECT count(*) FROM ({sql})", [rid]).fetchone()[0]
            n_file = con.execute(f"SELECT count(*) FROM {reader}").fetchone()[0]
            assert n_store == n_file, (table, n_store, n_file)
            if fmt != "parquet" or not n_store:
                continue
            for col, typ in _columns(con, sql, [rid]):
                if typ.split("(")[0] in NUMERIC:
                    a = con.execute(f"SELECT sum({col}) FROM ({sql})", [rid]).fetchone()[0]
                    b = con.execute(f"SELECT sum({col}) FROM {reader}").fetchone()[0]
                    assert a == b, (table, col, a, b)
        assert con.execute(f"SELECT count(*) FROM ({run_rows_sql('samples')})", [rid]).fetchone()[0] == 25
        # the analysis tables: one row per op / kernel as `analyze --json` has them
        doc = __import__("json").loads(run_cli("analyze", str(rid), "--db", str(db), "--json").out)
        reader = (lambda t: f"read_parquet('{out / (t + '.parquet')}')") if fmt == "parquet" else \
            (lambda t: f"read_csv_auto('{out / (t + '.csv')}', header=true)")
        assert con.execute(f"SELECT count(*) FROM {reader('op_analysis')}").fetchone()[0] == len(doc["ops"])
        assert con.execute(f"SELECT count(*) FROM {reader('kernel_analysis')}").fetchone()[0] == len(doc["kernels"])
        bounds = dict(con.execute(f"SELECT name, bound FROM {reader('op_analysis')}").fetchall())
        assert bounds == {o["name"]: o["bound"] for o in doc["ops"]}
    finally:
        con.close()
    readme = (out / "README.md").read_text()
    for table in [*RUN_TABLES, "op_analysis", "kernel_analysis"]:
        assert f"`{table}.{fmt}`" in readme and f"## {table}.{fmt}" in readme
    assert "| `power_w` | DOUBLE | W:" in readme and "| `pct_of_roof` | DOUBLE | fraction of the roof reached at this intensity, 0-1" in readme


def test_owner_only_whole_and_not_overwritten_without_force(run_db: tuple[Path, int], tmp_path: Path) -> None:
    db, rid = run_db
    out = tmp_path / "out"
    old_umask = os.umask(0o022)
    try:
        assert run_cli("export", "--db", str(db), "--format", "parquet", "--out", str(out)).code == 0
    finally:
        os.umask(old_umask)
    assert out.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in out.iterdir())
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r = run_cli("export", "--db", str(db), "--format", "parquet", "--out", str(out))
    assert r.code == 2 and "already exists" in r.err and "--force" in r.err and len(r.err.strip().splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    r = run_cli("export", "--db", str(db), "--format", "csv", "--out", str(out), "--force")
    assert r.code == 0, r.err
    assert (out / "kernels.csv").exists() and not (out / "kernels.parquet").exists()  # replaced, not merged


@pytest.mark.parametrize("args, names", [
    (["no-such-run", "--format", "parquet"], "no-such-run"),
    (["--format", "perfetto-ish"], "--format"),
])
def test_bad_input_exits_2_and_writes_nothing(run_db: tuple[Path, int], tmp_path: Path, args: list[str],
                                             names: str) -> None:
    db, _ = run_db
    out = tmp_path / "out"
    r = run_cli("export", *args, "--db", str(db), "--out", str(out))
    assert r.code == 2 and names in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_missing_parent_or_store_exits_2(run_db: tuple[Path, int], tmp_path: Path) -> None:
    db, _ = run_db
    r = run_cli("export", "--db", str(db), "--format", "csv", "--out", str(tmp_path / "nope" / "out"))
    assert r.code == 2 and "no such directory" in r.err
    r = run_cli("export", "--db", str(tmp_path / "none.duckdb"), "--format", "csv", "--out", str(tmp_path / "o"))
    assert r.code == 2 and "no store" in r.err
