"""`gpuscope sql` reads the store and nothing else: no file outside it is read or written, no
extension is installed or loaded, no setting can be turned back on, the store is not changed."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import file_digest, kernel, run_cli, write_trace


@pytest.fixture
def store_with_run(tmp_path: Path, db: Path) -> Path:
    path = write_trace(tmp_path / "t.json", [kernel("gemm", 0.0, 5.0), kernel("gemm", 10.0, 5.0)])
    assert run_cli("ingest", path, "--name", "r", "-q").code == 0
    return db


def _secret_file(tmp_path: Path) -> Path:
    f = tmp_path / "other_users_file.csv"
    f.write_text("secret_col\nhunter2\n")
    return f


REFUSED = [
    # (statement template, what must not appear afterwards)
    ("COPY (SELECT * FROM runs) TO '{out}/copy.csv'", "copy.csv"),
    ("COPY runs TO '{out}/copy2.parquet' (FORMAT parquet)", "copy2.parquet"),
    ("COPY runs FROM '{secret}'", None),
    ("EXPORT DATABASE '{out}/export'", "export"),
    ("IMPORT DATABASE '{out}'", None),
    ("SELECT * FROM read_csv('{secret}')", None),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", None),
    ("SELECT * FROM read_json('{secret}')", None),
    ("SELECT * FROM read_parquet('{out}/*.parquet')", None),
    ("SELECT * FROM read_text('{secret}')", None),
    ("SELECT * FROM glob('{out}/*')", None),
    ("SELECT * FROM '{secret}'", None),
    ("ATTACH '{out}/other.duckdb' AS other", "other.duckdb"),
    ("INSTALL httpfs", None),
    ("LOAD httpfs", None),
    ("SET enable_external_access = true", None),
    ("SET lock_configuration = false", None),
    ("SET temp_directory = '{out}/spill'", None),
    ("CREATE TABLE stolen AS SELECT 1", None),
    ("INSERT INTO runs (id) VALUES ('x')", None),
    ("DELETE FROM kernels", None),
]


@pytest.mark.parametrize("template,artifact", REFUSED, ids=[t for t, _ in REFUSED])
def test_refused_statement(tmp_path: Path, store_with_run: Path, template: str, artifact: str | None) -> None:
    out = tmp_path / "out"
    out.mkdir()
    secret = _secret_file(tmp_path)
    before = file_digest(store_with_run)
    r = run_cli("sql", template.format(out=out, secret=secret))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    assert r.err.startswith("gpuscope sql: query: ")
    assert "hunter2" not in r.out + r.err and "root:" not in r.out
    assert list(out.iterdir()) == [], f"{template} wrote {list(out.iterdir())}"
    assert file_digest(store_with_run) == before


def test_file_access_refusal_says_why(tmp_path: Path, store_with_run: Path) -> None:
    r = run_cli("sql", f"COPY runs TO '{tmp_path}/x.csv'")
    assert "refused: gpuscope sql reads the store and nothing else" in r.err
    r = run_cli("sql", "SET enable_external_access = true")
    assert "refused" in r.err and "settings" in r.err


def test_every_table_still_readable(store_with_run: Path) -> None:
    for table in ("runs", "traces", "devices", "kernels", "ops", "annotations", "samples", "graph_launches",
                  "ceilings", "sampler_stats", "meta"):
        r = run_cli("sql", f"SELECT count(*) AS n FROM {table}", "--json")
        assert r.code == 0, (table, r.err)
        assert isinstance(r.json()[0]["n"], int)
    r = run_cli("sql", "SELECT name, count(*) AS calls, sum(dur_ns) AS ns FROM kernels GROUP BY name")
    assert r.code == 0 and "gemm" in r.out
