"""Exposed communication (analyzers/overlap.py, issue 31 point 3): interval arithmetic, the
other-stream rule, memcpy not compute, HTA's comm/comp overlap on the shared A100 NCCL trace."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analyzers.overlap import (CommKernel, DeviceKernels, covered, device_overlap, exposed_block, intersect,
                                        measure, union)

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace


def test_interval_arithmetic() -> None:
    assert union([(5, 7), (1, 3), (2, 4), (7, 9), (10, 10)]) == [(1, 4), (5, 9)]
    assert measure([(1, 4), (5, 9)]) == 7
    assert intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert covered(3, 22, [(0, 5), (10, 12), (20, 30)]) == 2 + 2 + 2
    assert covered(6, 9, [(0, 5), (10, 12)]) == 0


def _comm(stream: int, s_us: int, e_us: int, name: str = "ncclDevKernel_AllReduce", size: float | None = 1e6
          ) -> CommKernel:
    return CommKernel(0, stream, s_us * 1000, e_us * 1000, name, "all_reduce", size, 8, "c10d::allreduce_")


def test_exposed_time_by_hand() -> None:
    # comm stream 20: [100, 200) and [300, 400); comm stream 21: [350, 450)
    # compute stream 7: [50, 150), [180, 320); compute on stream 20 itself [120, 160): one
    # stream never runs two kernels at once, so it hides nothing of stream 20's collectives
    dev = DeviceKernels(0, "gpu0", [(7, 50_000, 150_000), (7, 180_000, 320_000), (20, 120_000, 160_000)],
                        [_comm(20, 100, 200), _comm(20, 300, 400), _comm(21, 350, 450, "ncclDevKernel_AllGather", 2e6)])
    o = device_overlap(dev)
    # union of comm: [100, 200) + [300, 450) = 250 µs
    assert o.communication_us == pytest.approx(250.0)
    # stream 20 under stream-7 compute: [100,150) 50 + [180,200) 20 + [300,320) 20 = 90; stream 21: none
    assert o.overlapped_us == pytest.approx(90.0)
    assert o.exposed_us == pytest.approx(160.0)
    assert o.overlap_pct == pytest.approx(36.0)
    per = {(k.stream, k.start_ns // 1000): ns / 1000 for k, ns in o.per_kernel}
    assert per == {(20, 100): 30.0, (20, 300): 80.0, (21, 350): 100.0}
    block = exposed_block([o])
    assert block["saving_upper_bound_us"] == pytest.approx(160.0)
    # the all-gather (100 µs exposed) before the all-reduces (30 + 80 = 110 over 200 µs)
    assert [(t["kernel"], t["exposed_us"], t["count"]) for t in block["top"]] == [
        ("ncclDevKernel_AllReduce", pytest.approx(110.0), 2), ("ncclDevKernel_AllGather", pytest.approx(100.0), 1)]
    assert block["top"][0]["exposed_pct"] == pytest.approx(55.0)
    assert block["top"][1]["bytes"] == 2e6


def test_analyze_reports_exposed_communication(tmp_path: Path, db: Path) -> None:
    # one device: a GEMM on stream 7 over [0, 100), a memcpy on stream 8 over [100, 160), an
    # all-reduce on stream 20 over [50, 150): the GEMM hides [50, 100), the copy is not compute
    ev: list[dict[str, Any]] = [
        cpu_op("aten::mm", 0, 5, ext=1, dims=[[64, 64], [64, 64]], types=["float", "float"]),
        runtime("cudaLaunchKernel", 1, 1, corr=11, ext=1),
        kernel("gemm_kernel", 0, 100, corr=11, stream=7),
        kernel("Memcpy DtoD (Device -> Device)", 100, 60, stream=8, cat="gpu_memcpy"),
        cpu_op("c10d::allreduce_", 10, 5, ext=2, dims=[[1024]], types=["float"]),
        runtime("cudaLaunchKernel", 11, 1, corr=12, ext=2),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 50, 100, corr=12, stream=20),
    ]
    trace = write_trace(tmp_path / "t.json", ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    r = run_cli("analyze", str(trace), "--json")
    assert r.code == 0, r.err
    ex = json.loads(r.out)["communication"]["exposed"]
    assert ex["communication_us"] == pytest.approx(100.0)
    assert ex["overlapped_us"] == pytest.approx(50.0)
    assert ex["exposed_us"] == pytest.approx(50.0)
    assert ex["overlap_pct"] == pytest.approx(50.0)
    assert ex["top"][0]["op"] == "c10d::allreduce_" and ex["top"][0]["bytes"] == 4096.0
    assert json.loads(r.out)["communication"]["stragglers"] is None  # one rank
    text = run_cli("analyze").out
    assert "Exposed communication: 50.0 µs of 100.0 µs" in text and "overlap 50.00%" in text
    assert "Stragglers" not in text


_HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
                              r"|(^runFunction)|(^hip)|(^hccl)")


def _hta_overlap_pct(events: list[dict[str, Any]]) -> float:
    """HTA's definition (hta/analyzers/communication_analysis.py), written out independently:
    |union(comm) ∩ union(compute)| / |union(comm)| over the GPU events, by HTA's name patterns."""
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu if _HTA_COMM.match(e["name"]))
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu
                  if not _HTA_COMM.match(e["name"]) and not _HTA_NOT_COMPUTE.match(e["name"]))

    def merge(iv: list[tuple[float, float]]) -> list[list[float]]:
        out: list[list[float]] = []
        for s, e in iv:
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    c, p = merge(comm), merge(comp)
    both = sum(max(0.0, min(a[1], b[1]) - max(a[0], b[0])) for a in c for b in p if b[0] < a[1] and a[0] < b[1])
    return 100.0 * both / sum(e - s for s, e in c)


def test_hta_a100_nccl_overlap_matches_hta_definition(tmp_path: Path, db: Path) -> None:
    path = shared_trace("hta/a100_sxm4_80gb_training_large.json.gz")
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    expected = _hta_overlap_pct(events)
    r = run_cli("analyze", str(path), "--json")
    assert r.code == 0, r.err
    ex = json.loads(r.out)["communication"]["exposed"]
    assert ex["overlap_pct"] == pytest.approx(expected, rel=1e-9)
    assert 1.0 < ex["overlap_pct"] < 2.0  # 1.36 %: this FSDP step hides almost none of its NCCL time
    assert ex["exposed_us"] == pytest.approx(ex["communication_us"] * (1 - expected / 100), rel=1e-9)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_overlap_agrees_with_hta_itself(tmp_path: Path) -> None:
    """HTA (optional, not a dependency) on its own event selection (complete profiler steps) and
    this module on the same kernels give the same overlap."""
    pytest.importorskip("hta.trace_analysis")
    pytest.importorskip("pandas")
    path = shared_trace("hta/a100_sxm4_80gb_training_large.json.gz")
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import get_kernel_type

    d = tmp_path / "hta"
    d.mkdir()
    (d / "rank-0.json.gz").symlink_to(path)
    a = TraceAnalysis(trace_dir=str(d))
    hta_pct = float(a.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0])
    df = a.t.get_trace(0)
    sym = a.t.symbol_table.get_sym_table()
    g = df[df["stream"].ne(-1)]
    comp: list[tuple[int | None, int, int]] = []
    comm: list[CommKernel] = []
    for name, stream, ts, dur in zip(g["name"], g["stream"], g["ts"], g["dur"]):
        kind = get_kernel_type(sym[name])
        if kind == "COMPUTATION":
            comp.append((int(stream), int(ts) * 1000, int(ts + dur) * 1000))
        elif kind == "COMMUNICATION":
            comm.append(CommKernel(0, int(stream), int(ts) * 1000, int(ts + dur) * 1000, sym[name], None, None, None,
                                   None))
    mine = device_overlap(DeviceKernels(0, "gpu0", comp, comm)).overlap_pct
    assert mine is not None and round(mine, 2) == pytest.approx(hta_pct)
