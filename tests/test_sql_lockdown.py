"""`gpuscope sql` reads the store and nothing else: no file outside it is read or written, no
extension is installed or loaded, no setting can be turned back on, the store is not changed.
Every refusal is one line naming the statement, exit 2."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import file_digest, ingested_template, kernel, run_cli
from gpuscope import store


@pytest.fixture(scope="module")
def _store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run "r", ingested once for the module; each test gets its own copy."""
    return ingested_template(tmp_path_factory, [kernel("gemm", 0.0, 5.0), kernel("gemm", 10.0, 5.0)])


@pytest.fixture
def store_with_run(_store_template: Path, db: Path) -> Path:
    """The test's own store (GPUSCOPE_DB) with the run "r": a copy of the template."""
    shutil.copyfile(_store_template, db)
    return db


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Places a refused statement could write to, each watched: an output folder, the
    temporary folder (TMPDIR), the home folder (DuckDB keeps extensions and secrets there);
    and files a statement could read: a CSV, a JSON and a Parquet file, an exported database."""
    import duckdb

    out = tmp_path / "out"
    tmp = tmp_path / "tmp"
    home = tmp_path / "home"
    for d in (out, tmp, home):
        d.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("HOME", str(home))
    files = tmp_path / "files"
    files.mkdir()
    (files / "secret.csv").write_text("secret_col\nhunter2\n")
    (files / "secret.json").write_text('{"secret_col": "hunter2"}\n')
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 'hunter2' AS secret_col) TO '{files / 'secret.parquet'}' (FORMAT parquet)")
    con.execute("CREATE TABLE stolen AS SELECT 'hunter2' AS secret_col")
    con.execute(f"EXPORT DATABASE '{files / 'export'}'")
    con.close()
    return {"out": out, "tmp": tmp, "home": home, "files": files}


REFUSED = [
    # (statement, what the refusal must name)
    ("COPY (SELECT * FROM runs) TO '{out}/copy.csv'", "COPY ... TO"),
    ("COPY runs TO '{out}/copy2.parquet' (FORMAT parquet)", "COPY ... TO"),
    ("COPY runs FROM '{files}/secret.csv'", "COPY ... FROM"),
    ("COPY FROM DATABASE store TO memory", "COPY FROM DATABASE"),
    ("EXPORT DATABASE '{out}/export'", "EXPORT DATABASE"),
    ("IMPORT DATABASE '{files}/export'", "IMPORT DATABASE"),
    ("SELECT * FROM read_csv('{files}/secret.csv')", "read_csv()"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", "read_csv_auto()"),
    ("SELECT * FROM read_json('{files}/secret.json')", "read_json()"),
    ("SELECT * FROM read_parquet('{files}/*.parquet')", "read_parquet()"),
    ("SELECT * FROM read_text('{files}/secret.csv')", "read_text()"),
    ("SELECT * FROM read_blob('{files}/secret.csv')", "read_blob()"),
    ("SELECT * FROM glob('{files}/*')", "glob()"),
    ("SELECT * FROM '{files}/secret.csv'", ""),
    ("ATTACH '{out}/other.duckdb' AS other", "ATTACH"),
    ("INSTALL httpfs", "INSTALL"),
    ("FORCE INSTALL httpfs", "FORCE INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("SET enable_external_access = true", "SET enable_external_access"),
    ("SET lock_configuration = false", "SET lock_configuration"),
    ("RESET enable_external_access", "RESET enable_external_access"),
    ("SET temp_directory = '{out}/spill'", "SET temp_directory"),
    ("PRAGMA enable_profiling = 'json'", "PRAGMA enable_profiling"),
    ("PRAGMA profiling_output = '{out}/profile.json'", "PRAGMA profiling_output"),
    ("PRAGMA enable_profiling", "PRAGMA enable_profiling"),
    ("CALL enable_logging(storage = 'file', storage_path = '{out}/logs')", "CALL enable_logging"),
    ("CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "CREATE"),
    ("CREATE TABLE stolen AS SELECT 1", "CREATE"),
    ("CREATE TEMP TABLE scratch AS SELECT 1", "CREATE"),
    ("INSERT INTO runs (id) VALUES (99)", "INSERT"),
    ("UPDATE runs SET name = 'x'", "UPDATE"),
    ("DELETE FROM kernels", "DELETE"),
    ("DROP TABLE kernels", "DROP"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("VACUUM", "VACUUM"),
    ("DETACH store", "DETACH"),
    ("PREPARE p AS SELECT 1", "PREPARE"),
    # hidden behind a reading statement, a comment or EXPLAIN ANALYZE (which runs what it explains)
    ("SELECT 1; COPY runs TO '{out}/second.csv'", "COPY ... TO"),
    ("-- just a comment\nCOPY runs TO '{out}/commented.csv'", "COPY ... TO"),
    ("EXPLAIN ANALYZE COPY runs TO '{out}/explained.csv'", "EXPLAIN COPY ... TO"),
    ("EXPLAIN (FORMAT json) COPY runs TO '{out}/explained.json'", "EXPLAIN COPY ... TO"),
    ("PRAGMA import_database('{files}/export')", "PRAGMA import_database"),
    ("CALL read_csv('{files}/secret.csv')", "CALL read_csv"),
]


@pytest.mark.parametrize("template,kind", REFUSED, ids=[t for t, _ in REFUSED])
def test_refused_statement(store_with_run: Path, sandbox: dict[str, Path], template: str, kind: str) -> None:
    before = file_digest(store_with_run)
    r = run_cli("sql", template.format(out=sandbox["out"], files=sandbox["files"]))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    assert r.err.startswith("gpuscope sql: query: ")
    if kind:
        assert f"query: {kind} is refused: gpuscope sql reads the store only" in r.err or (
            f"query: {kind} is refused: gpuscope sql cannot change settings" in r.err), r.err
    assert r.out == "" and "hunter2" not in r.err and "root:" not in r.err
    for place in ("out", "tmp", "home"):
        assert list(sandbox[place].rglob("*")) == [], f"{template} wrote {list(sandbox[place].rglob('*'))}"
    assert not Path(f"{store_with_run}.tmp").exists()
    assert file_digest(store_with_run) == before


def test_the_stores_own_temp_folder_is_not_writable(store_with_run: Path, sandbox: dict[str, Path]) -> None:
    """DuckDB's lockdown always allows its temporary directory; by default that is
    ``<store>.tmp``, which a spill leaves behind. A query must not write there either."""
    spill = Path(f"{store_with_run}.tmp")
    spill.mkdir()
    for statement in (f"COPY runs TO '{spill}/x.csv'", f"SELECT * FROM glob('{spill}/*')"):
        r = run_cli("sql", statement)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert list(spill.iterdir()) == []


def test_a_query_reading_its_temp_folder_finds_it_gone_afterwards(store_with_run: Path, sandbox: dict[str, Path]) -> None:
    r = run_cli("sql", "SELECT current_setting('temp_directory') AS d", "--json")
    assert r.code == 0, r.err
    temp_dir = Path(r.json()[0]["d"])
    assert temp_dir.parent == sandbox["tmp"] and temp_dir.name.startswith("gpuscope-sql-")
    assert list(sandbox["tmp"].iterdir()) == []


def test_large_queries_still_spill(store_with_run: Path, sandbox: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """External access off still lets DuckDB spill to the query's temporary folder: with a
    memory limit the aggregation below does not fit in, it completes only by spilling."""
    import duckdb

    query = ("SELECT count(*) AS n FROM (SELECT md5(i::VARCHAR) || repeat('x', 200) AS s, count(*) AS c "
             "FROM range(300000) t(i) GROUP BY s)")
    real_connect = store.connect

    def small_connect(path: Path | str, read_only: bool = False, retry_s: float = 2.0) -> duckdb.DuckDBPyConnection:
        con = real_connect(path, read_only=read_only, retry_s=retry_s)
        con.execute("SET memory_limit = '32MB'")
        con.execute("SET threads = 1")
        return con

    # the same limit without a temporary folder: the query cannot run, so it must spill
    con = duckdb.connect(config={"memory_limit": "32MB", "threads": 1, "temp_directory": ""})
    with pytest.raises(duckdb.OutOfMemoryException):
        con.execute(query).fetchall()
    con.close()

    monkeypatch.setattr(store.connection, "connect", small_connect)
    r = run_cli("sql", query, "--json")
    assert r.code == 0, r.err
    assert r.json() == [{"n": 300000}]
    assert list(sandbox["tmp"].iterdir()) == []


def test_every_table_still_readable(store_with_run: Path) -> None:
    import duckdb

    con = duckdb.connect(str(store_with_run), read_only=True)
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()]
    con.close()
    assert {"runs", "traces", "devices", "kernels", "ops", "annotations", "samples", "meta"} <= set(tables)
    for table in tables:
        r = run_cli("sql", f"SELECT count(*) AS n FROM {table}", "--json")
        assert r.code == 0, (table, r.err)
        assert isinstance(r.json()[0]["n"], int)
        r = run_cli("sql", f"SELECT * FROM {table} LIMIT 3")
        assert r.code == 0 and r.err == "", (table, r.err)
        assert r.out.strip(), table
    r = run_cli("sql", "SELECT name, count(*) AS calls, sum(dur_ns) AS ns FROM kernels GROUP BY name")
    assert r.code == 0 and "gemm" in r.out and "10000" in r.out
    r = run_cli("sql", "SELECT name, count(*) AS calls FROM kernels GROUP BY name", "--json")
    assert r.json() == [{"name": "gemm", "calls": 2}]


@pytest.mark.parametrize("query", [
    "FROM runs", "SHOW TABLES", "DESCRIBE kernels", "SUMMARIZE kernels", "PRAGMA table_info('kernels')",
    "PRAGMA show_tables", "CALL pragma_version()", "EXPLAIN SELECT * FROM kernels",
    "EXPLAIN ANALYZE SELECT count(*) FROM kernels", "PIVOT kernels ON kind USING count(*) GROUP BY run_id",
    "WITH k AS (SELECT * FROM kernels) SELECT count(*) FROM k", "SELECT 1 AS a; SELECT 'COPY runs TO x' AS b",
])
def test_reading_statements_pass(store_with_run: Path, query: str) -> None:
    r = run_cli("sql", query, "--json")
    assert r.code == 0, r.err
    assert isinstance(r.json(), list)


@pytest.mark.parametrize("query,expect", [
    ("SELEC 1", "syntax error"), ("SELECT * FROM nope", "nope"), ("", "no SQL statement"), (" ; ", "no SQL statement"),
])
def test_bad_sql_is_one_line(store_with_run: Path, query: str, expect: str) -> None:
    r = run_cli("sql", query)
    assert r.code == 2 and r.err.startswith("gpuscope sql: query: ") and expect in r.err
    assert len(r.err.strip().splitlines()) == 1
