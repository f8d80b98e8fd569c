"""Arguments out of range are refused by the parser (exit 2, one line), never taken: `runs
--limit -1` used to drop the oldest run, `--limit 0` printed nothing, `analyze --top -3` printed
"Top 25 of 28"."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import file_digest, kernel, run_cli, write_trace

BAD = [
    ("runs", "--limit", "-1"), ("runs", "--limit", "0"), ("runs", "--limit", "x"),
    ("analyze", "--top", "-3"), ("analyze", "--top", "0"), ("compare", "1", "1", "--top", "-1"),
    ("run", "--top", "0", "--", "true"), ("run", "--profile-windows", "0", "--", "true"),
    ("run", "--tokens", "-5", "--", "true"), ("record", "--seconds", "1", "--out", "x.jsonl", "--pid", "-4"),
    ("calibrate", "--device", "-1"), ("ingest", "t.json", "--max-inflate-ratio", "0"),
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a) for a in BAD])
def test_out_of_range_is_refused(args: tuple[str, ...], tmp_path: Path, db: Path) -> None:
    trace = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])
    assert run_cli("ingest", trace, "-q").code == 0
    before = file_digest(db)
    r = run_cli(*args)
    assert r.code == 2, (r.out, r.err)
    (line,) = r.err.strip().splitlines()
    assert "out of range" in line or "not a" in line or "greater than 0" in line
    assert r.out == "" and file_digest(db) == before


def test_limit_keeps_the_newest(tmp_path: Path, db: Path) -> None:
    for name in ("a", "b", "c"):
        assert run_cli("ingest", write_trace(tmp_path / f"{name}.json", [kernel("k", 0.0, 1.0)]), "-q").code == 0
    assert [r["name"] for r in run_cli("runs", "--limit", "2", "--json").json()] == ["c", "b"]
