"""Text reports fit the terminal: at 80 columns no line of `analyze`, `compare` or `runs` is
wider (tables drop or narrow columns in a stated order, prose wraps); numbers right-aligned;
`COLUMNS` is honoured; `sql --wide` shows values whole."""
from __future__ import annotations

import pytest

from conftest import run_cli, shared_trace


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_reports_fit_the_terminal(columns: int, db, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    a = shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz")
    b = shared_trace("tracelens/qwen1.5-0.5b-chat/mi300x.json.gz")
    big = shared_trace("hta/a100_sxm4_80gb_training_large.json.gz")
    for args in (("analyze", big), ("analyze", a), ("compare", a, b), ("runs",)):
        r = run_cli(*args)
        assert r.code == 0, r.err
        assert _widest(r.out) <= columns, (args, [ln for ln in r.out.splitlines() if len(ln) > columns][:3])
    wide = run_cli("analyze", big, "--wide").out
    assert _widest(wide) > columns  # --wide keeps names whole


def test_numbers_right_aligned_and_sql_wide(db, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    run_cli("ingest", shared_trace("hta/a100_sxm4_80gb_training_large.json.gz"), "-q")
    q = "SELECT name, count(*) AS n FROM kernels GROUP BY name ORDER BY n DESC, name LIMIT 5"
    text = run_cli("sql", q).out.splitlines()
    n_col = [ln.rstrip() for ln in text[2:]]
    assert len({len(ln) for ln in n_col}) == 1  # the count column ends at the same place: right-aligned
    assert any("…" in ln for ln in text)
    whole = run_cli("sql", q, "--wide").out
    assert "…" not in whole and max(len(ln) for ln in whole.splitlines()) > 62
