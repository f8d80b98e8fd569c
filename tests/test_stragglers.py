"""Stragglers (analyzers/stragglers.py, issue 31 point 4): the wait per rank by hand, matching,
clock alignment across hosts, and a planted straggler in a rank set made by
bench/scale_trace.py --ranks --straggler."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analyzers.overlap import CommKernel, DeviceKernels
from gpuscope.analyzers.stragglers import RankUnit, stragglers

from conftest import REPO, cpu_op, kernel, run_cli, runtime, write_trace

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"


def _dev(dev: int, spans_us: list[tuple[float, float]], name: str = AR, size: float = 4096.0) -> DeviceKernels:
    return DeviceKernels(dev, f"rank{dev}/gpu{dev}", [],
                         [CommKernel(dev, 20, int(s * 1000), int(e * 1000), name, "all_reduce", size, 3, "c10d::allreduce_")
                          for s, e in spans_us])


def test_wait_and_straggler_by_hand() -> None:
    # instance 0 starts at 10 / 30 / 20 (rank 1 last), instance 1 at 100 / 100 / 160 (rank 2 last);
    # all end together (50, 200)
    devs = [_dev(0, [(10, 50), (100, 200)]), _dev(1, [(30, 50), (100, 200)]), _dev(2, [(20, 50), (160, 200)])]
    units = {d: RankUnit(d, f"rank{d}/gpu{d}", d, None) for d in range(3)}
    s = stragglers(devs, units, "distributedInfo.rank")
    assert s is not None and s["instances"] == 2 and s["unmatched"] == 0
    by = {r["rank"]: r for r in s["ranks"]}
    # skews: instance 0: 20, 0, 10; instance 1: 60, 60, 0
    assert [by[r]["wait_us"] for r in range(3)] == [pytest.approx(80.0), pytest.approx(60.0), pytest.approx(10.0)]
    assert by[1]["caused_wait_us"] == pytest.approx(30.0) and by[2]["caused_wait_us"] == pytest.approx(120.0)
    assert s["straggler"]["rank"] == 2 and s["straggler"]["latest_count"] == 1
    # rank 2's start minus the others' median: 20 - 20 = 0, 160 - 100 = 60 -> mean 30
    assert s["straggler"]["mean_delay_us"] == pytest.approx(30.0)
    assert by[0]["worst"][0] == {"kernel": AR, "collective": "all_reduce", "bytes": 4096.0, "index": 1,
                                 "wait_us": pytest.approx(60.0), "waited_for": "rank 2"}
    assert s["total_wait_us"] == pytest.approx(150.0)
    assert s["clock"]["aligned"] is False


def test_matching_by_kernel_size_and_order() -> None:
    # rank 0 has one more all-gather than rank 1: unmatched; the all-reduces of another size are
    # their own instances
    devs = [
        DeviceKernels(0, "a", [], [_dev(0, [(0, 10)]).comm[0], _dev(0, [(20, 30), (40, 50)], "ncclAllGather")
                                   .comm[0], _dev(0, [(40, 50)], "ncclAllGather").comm[0]]),
        DeviceKernels(1, "b", [], [_dev(1, [(5, 10)]).comm[0], _dev(1, [(25, 30)], "ncclAllGather").comm[0]]),
    ]
    s = stragglers(devs, {0: RankUnit(0, "a", 0, None), 1: RankUnit(1, "b", 1, None)})
    assert s is not None and s["instances"] == 2 and s["unmatched"] == 1
    assert {r["rank"]: r["wait_us"] for r in s["ranks"]} == {0: pytest.approx(10.0), 1: 0.0}
    assert stragglers(devs[:1], {0: RankUnit(0, "a", 0, None)}) is None  # one rank: nothing to match


def test_clocks_aligned_by_collective_ends_across_hosts() -> None:
    # rank 1's host clock runs 1000 µs ahead; the collectives end together; rank 1 starts 5 µs late
    devs = [_dev(0, [(10, 50), (100, 150)]), _dev(1, [(1015, 1050), (1105, 1150)])]
    hosts = {0: RankUnit(0, "rank0/gpu0", 0, "nodeA"), 1: RankUnit(1, "rank1/gpu1", 1, "nodeB")}
    s = stragglers(devs, hosts)
    assert s is not None and s["clock"]["aligned"] is True and s["clock"]["hosts"] == ["nodeA", "nodeB"]
    by = {r["rank"]: r for r in s["ranks"]}
    assert by[1]["clock_offset_us"] == pytest.approx(-1000.0)
    assert s["straggler"]["rank"] == 1 and s["straggler"]["mean_delay_us"] == pytest.approx(5.0)
    assert by[0]["wait_us"] == pytest.approx(10.0)
    # one host: its clock is shared, not aligned: rank 0 would seem to wait 1005 µs each time
    same = stragglers(devs, {0: RankUnit(0, "a", 0, "n"), 1: RankUnit(1, "b", 1, "n")})
    assert same is not None and same["clock"]["aligned"] is False
    assert {r["rank"]: r["wait_us"] for r in same["ranks"]}[0] == pytest.approx(2010.0)


def _one_rank_trace(path: Path) -> Path:
    """A rank's step, 4 times: a GEMM (stream 7) then an all-reduce (stream 20), each launched by its op."""
    ev: list[dict[str, Any]] = []
    t = 0.0
    for i in range(4):
        e = 10 * i + 1
        ev += [cpu_op("aten::mm", t, 10, ext=e, dims=[[64, 64], [64, 64]], types=["float", "float"]),
               runtime("cudaLaunchKernel", t + 2, 2, corr=1000 + e, ext=e),
               kernel("gemm_kernel", t + 20, 100, corr=1000 + e, stream=7),
               cpu_op("c10d::allreduce_", t + 12, 10, ext=e + 1, dims=[[1024]], types=["float"]),
               runtime("cudaLaunchKernel", t + 14, 2, corr=1001 + e, ext=e + 1),
               kernel(AR, t + 130, 50, corr=1001 + e, stream=20)]
        t += 300
    return write_trace(path, ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


def _scale(src: Path, out: Path, *args: str) -> str:
    p = subprocess.run([sys.executable, str(REPO / "bench" / "scale_trace.py"), str(src), str(out), *args],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stderr


@pytest.mark.parametrize("hosts", [[], ["--hosts", "2", "--host-skew-us", "3000"]])
def test_planted_straggler_is_named_with_its_delay(tmp_path: Path, db: Path, hosts: list[str]) -> None:
    src = _one_rank_trace(tmp_path / "one.json")
    out = tmp_path / "ranks"
    msg = _scale(src, out, "--ranks", "4", "--copies", "2", "--straggler", "2:150", *hosts)
    assert "rank 2 150 µs late at 4 collectives" in msg
    r = run_cli("analyze", str(out), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [d["key"] for d in doc["devices"]] == ["rank0/gpu0", "rank1/gpu1", "rank2/gpu2", "rank3/gpu3"]
    s = doc["communication"]["stragglers"]
    assert s["rank_source"] == "distributedInfo.rank"
    assert s["instances"] == 8 and s["unmatched"] == 0  # 4 all-reduces x 2 copies, matched on all 4 ranks
    assert s["straggler"]["rank"] == 2 and s["straggler"]["key"] == "rank2/gpu2"
    assert s["straggler"]["mean_delay_us"] == pytest.approx(150.0, rel=0.01)
    assert s["straggler"]["latest_count"] == 8
    by = {x["rank"]: x for x in s["ranks"]}
    for rank in (0, 1, 3):  # each waited 150 µs at each of the 8 collectives
        assert by[rank]["wait_us"] == pytest.approx(8 * 150.0, rel=0.01)
        assert by[rank]["worst"][0]["waited_for"] == "rank 2"
    assert by[2]["wait_us"] == 0.0
    assert s["straggler"]["caused_wait_us"] == pytest.approx(3 * 8 * 150.0, rel=0.01)
    assert s["clock"]["aligned"] is bool(hosts)
    if hosts:
        assert by[2]["clock_offset_us"] == pytest.approx(-3000.0) and by[1]["clock_offset_us"] == 0.0
    # the straggler's collectives are shorter by the wait: less exposed time on its device
    ex = {d["key"]: d for d in doc["communication"]["exposed"]["per_device"]}
    assert ex["rank0/gpu0"]["communication_us"] - ex["rank2/gpu2"]["communication_us"] == pytest.approx(8 * 150.0)
    text = run_cli("analyze").out
    assert "straggler: rank 2 (rank2/gpu2) started last at 8 of 8 instances" in text
    assert ("ranks span hosts" in text) is bool(hosts)


def test_devices_of_one_trace_stand_for_ranks(tmp_path: Path, db: Path) -> None:
    # one process, two GPUs, no distributedInfo: the devices are the units, the later one waits 0
    ev = [kernel(AR, 100, 50, device=0, stream=20), kernel(AR, 120, 30, device=1, stream=20),
          kernel("gemm_kernel", 0, 90, device=0), kernel("gemm_kernel", 0, 110, device=1)]
    trace = write_trace(tmp_path / "t.json", ev)
    r = run_cli("analyze", str(trace), "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out)["communication"]["stragglers"]
    assert s["rank_source"] == "device (no rank in the trace)"
    assert [(x["key"], x["rank"], x["wait_us"]) for x in s["ranks"]] == [("gpu0", None, 20.0), ("gpu1", None, 0.0)]
    assert s["straggler"]["key"] == "gpu1" and s["straggler"]["mean_delay_us"] == pytest.approx(20.0)
