"""The benchmark's helper that makes larger traces (bench/scale_trace.py) keeps copies apart."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, cpu_op, kernel, run_cli, runtime, write_trace


def test_scale_trace_writes_copies_that_do_not_link_to_each_other(tmp_path, db) -> None:
    events = [
        cpu_op("aten::mm", 0.0, 50.0, ext=1, dims=[[4, 8], [8, 16]], types=["float", "float"]),
        runtime("cudaLaunchKernel", 10.0, 5.0, corr=11, ext=1),
        kernel("gemm_kernel", 20.0, 30.0, corr=11, **{"External id": 1}),
        cpu_op("aten::add", 60.0, 20.0, ext=2, dims=[[16], [16]], types=["float", "float"]),
        runtime("cudaLaunchKernel", 65.0, 5.0, corr=12, ext=2),
        kernel("add_kernel", 75.0, 10.0, corr=12, **{"External id": 2}),
    ]
    src = write_trace(tmp_path / "one.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    out = tmp_path / "three.json.gz"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "scale_trace.py"), str(src), str(out), "--copies", "3"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "18 events (3 copies of 6)" in p.stderr

    one = run_cli("analyze", str(src), "--json").json()
    three = run_cli("analyze", str(out), "--json").json()
    assert three["time_us"]["compute"] == pytest.approx(3 * one["time_us"]["compute"])
    # copies follow each other in time, 1 ms apart at least: idle grows by the gaps between them
    assert three["time_us"]["idle"] > 3 * one["time_us"]["idle"]
    # each copy's kernels link to that copy's ops only: the same ops, three times the calls
    by_op = {o["name"]: o for o in three["ops"]}
    assert by_op["aten::mm"]["count"] == 3 and by_op["aten::add"]["count"] == 3
    assert by_op["aten::mm"]["kernel_us"] == pytest.approx(3 * 30.0)
    assert three["counts"]["gpu_activities_without_op"] == 0



def _bound(path) -> dict:
    p = subprocess.run([sys.executable, str(REPO / "bench" / "_bound_child.py"), str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import json

    return json.loads(p.stdout)


def test_bound_process_parses_every_event_of_the_trace(tmp_path) -> None:
    """The benchmark's lower bound (bench/_bound_child.py) really reads the whole trace: its
    event count is the trace's, through the typed reader when the events fit it."""
    events = [cpu_op(f"aten::op{i}", 10.0 * i, 5.0, ext=i) for i in range(40)]
    events += [kernel(f"k{i}", 10.0 * i + 1, 2.0, corr=100 + i) for i in range(25)]
    doc = _bound(write_trace(tmp_path / "t.json", events))
    assert doc["events"] == 65 and doc["reader"] == "typed" and doc["threads"] == 1
    assert all(doc[k] >= 0 for k in ("import_connect_s", "gunzip_spool_s", "parse_s"))


def test_bound_process_counts_events_the_typed_reader_cannot_take(tmp_path) -> None:
    # a string ts does not fit the typed reader's DOUBLE: the bound still parses every event
    events = [kernel("k0", 1.0, 2.0, corr=1), {"ph": "X", "cat": "kernel", "name": "k1", "ts": "not a time",
                                                 "dur": 1, "pid": 0, "tid": 7}]
    doc = _bound(write_trace(tmp_path / "t.json", events))
    assert doc["events"] == 2 and doc["reader"] == "objects"
