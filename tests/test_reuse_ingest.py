"""`analyze PATH` and `compare PATH PATH` reuse the run already ingested from the same content
(four calls used to make six runs), say so, and `compare` warns when both sides are one run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import kernel, run_cli, write_trace


def test_analyze_and_compare_reuse_runs_of_the_same_content(tmp_path: Path, db: Path) -> None:
    a = write_trace(tmp_path / "a.json", [kernel("gemm", 0.0, 5.0), kernel("gemm", 9.0, 5.0)])
    b = write_trace(tmp_path / "b.json", [kernel("gemm", 0.0, 7.0)])
    copy = tmp_path / "elsewhere" / "a_copy.json"
    copy.parent.mkdir()
    shutil.copyfile(a, copy)

    first = run_cli("analyze", a, "--json")
    assert first.code == 0 and "already ingested" not in first.err
    again = run_cli("analyze", a, "--json")
    assert again.code == 0 and f"{a}: already ingested as run 1" in again.err
    json.loads(again.out)  # stdout stays one JSON document
    assert run_cli("analyze", copy, "--json").code == 0  # same content under another name
    r = run_cli("compare", a, b, "--json")
    assert r.code == 0 and "same run" not in r.err
    runs = run_cli("runs", "--json").json()
    assert sorted(x["name"] for x in runs) == ["a", "b"]  # two runs for five calls

    same = run_cli("compare", a, copy)
    assert same.code == 0 and "RUN_A and RUN_B are the same run (1 'a')" in same.err

    # new content is a new run; `ingest` always makes one
    write_trace(a, [kernel("gemm", 0.0, 6.0)])
    assert run_cli("analyze", a, "--json").code == 0
    assert run_cli("ingest", b, "-q").code == 0
    assert len(run_cli("runs", "--json").json()) == 4
