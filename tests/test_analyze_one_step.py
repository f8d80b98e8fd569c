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
