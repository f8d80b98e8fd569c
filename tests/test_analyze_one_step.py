"""`gpuscope analyze TRACE` (ingest and analyze in one process) against the two-step form."""
from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.mark.parametrize("which", ["fixture", "shared"])
def test_analyze_of_a_path_equals_ingest_then_analyze(which, tmp_path, db) -> None:
    """`analyze TRACE` reads the run on the connection that wrote it; the report must be the
    one a separate `ingest` + `analyze` gives, to the last digit (stable order, stable sums)."""
    from conftest import FIXTURES, shared_trace

    path = (FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz" if which == "fixture"
            else shared_trace("hta/a100_sxm4_80gb_training_large.json.gz"))
    one = run_cli("analyze", str(path), "--json")
    assert one.code == 0, one.err
    ing = run_cli("ingest", str(path), "--json")
    assert ing.code == 0, ing.err
    two = run_cli("analyze", str(ing.json()["run_id"]), "--json")
    a, b = one.json(), two.json()
    assert a["run"]["id"] != b["run"]["id"]
    a.pop("run"), b.pop("run")
    assert a == b


def test_the_handed_over_connection_holds_no_staging_table(tmp_path) -> None:
    """`ingest(keep_open=True)` drops its staging tables by name (STAGING_TABLES): every
    temporary table the ingest made must be in that list, or it would stay in memory."""
    import re
    from pathlib import Path

    from conftest import FIXTURES, REPO
    from gpuscope import ingest

    # (a batch's tables, ``gpu_{k}``, are dropped by parse.Batches as the batches are merged)
    made = {t for f in (REPO / "gpuscope" / "ingest").glob("*.py")
            for t in re.findall(r"CREATE TEMP TABLE (\w+)", f.read_text()) if not t.endswith("_")}
    assert {"ev", "kernel_stage", "dev_map"} <= made  # the scan sees every room
    assert made <= set(ingest.STAGING_TABLES)
    r = ingest.ingest(tmp_path / "s.duckdb", [FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz"], keep_open=True)
    try:
        left = r.connection.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'").fetchall()
        assert left == []
        assert r.connection.execute("SELECT count(*) FROM ops").fetchone()[0] > 0  # the store is current
    finally:
        r.connection.close()
    assert Path(tmp_path / "s.duckdb").exists()
