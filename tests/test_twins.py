"""Issue 28, point 1: kernels no recorded op launched (they ran before the profiler's CPU window
began, or were replayed from a graph without its capture trace) borrow the per-instance cost of
identical twins an op did launch: same kernel name, grid and block (the name alone where the
op-less kernel records neither), when every costed twin gives the same cost.

Synthetic Kineto traces whose costs are known by hand: ``aten::add`` of two bf16 vectors of
``N`` elements reads 2 x 2N bytes and writes 2N (6N bytes, N FLOPs); of a vector and a
one-element tensor it reads 2N + 2 and writes 2N (4N + 2 bytes).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
BF16 = "c10::BFloat16"
N = 1 << 24  # elements: 6N bytes = 100.7 MB, 30 µs at the H100's 3.35 TB/s (memory-bound, above L2)
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >"
GRID, BLOCK = [65536, 1, 1], [128, 1, 1]
TWIN_US, ORPHAN_US = 50.0, 60.0


def _add(ev: list[dict[str, Any]], ext: int, ts: float, dur: float, other: list[int], grid: list[int] = GRID,
         kname: str = ADD, extra_us: float | None = None) -> None:
    """One ``aten::add`` call of [N] and ``other`` launching ``kname`` (and a second kernel of
    ``extra_us`` when given: the call's time is then shared between its two kernels)."""
    ev.append(cpu_op("aten::add", ts, 5, ext, [[N], other, []], [BF16, BF16, "Scalar"]))
    ev.append(runtime("cudaLaunchKernel", ts + 1, 2, ext, ext))
    ev.append(kernel(kname, ts + 10, dur, ext, grid=grid, block=BLOCK))
    if extra_us is not None:
        ev.append(runtime("cudaLaunchKernel", ts + 3, 2, ext + 1000, ext))
        ev.append(kernel("side_kernel", ts + 20 + dur, extra_us, ext + 1000, grid=[1, 1, 1], block=[32, 1, 1]))


def _orphan(ev: list[dict[str, Any]], ts: float, dur: float, grid: list[int] | None = GRID,
            block: list[int] | None = BLOCK) -> None:
    """A kernel no op launched (no correlation to a launch), as before the CPU window began."""
    args: dict[str, Any] = {} if grid is None else {"grid": grid, "block": block}
    ev.append(kernel(ADD, ts, dur, **args))


def _analyze(tmp_path: Path, ev: list[dict[str, Any]]) -> dict[str, Any]:
    res = run_cli("analyze", str(write_trace(tmp_path / "t.json", ev, deviceProperties=H100_PROPS)), "--json")
    assert res.code == 0, res.err
    return res.json()


def _hbm_bw(doc: dict[str, Any]) -> float:
    return float(doc["roofline"]["devices"][0]["mem_bw_bytes_per_s"])


def test_orphan_with_agreeing_twins_is_judged_as_an_estimate(tmp_path: Path, db: Path) -> None:
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, ORPHAN_US)
    _add(ev, 1, 1000, TWIN_US, [N])
    _add(ev, 2, 2000, TWIN_US, [N])
    doc = _analyze(tmp_path, ev)
    cov = doc["coverage"]
    assert cov["judged_us"] == pytest.approx(2 * TWIN_US + ORPHAN_US)
    assert cov["share"] == pytest.approx(1.0)
    assert cov["unjudged"] == []
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    # three instances of the same work: 6N bytes and N FLOPs each, the orphan's borrowed
    assert k["bytes"] == pytest.approx(3 * 6 * N)
    assert k["flops"] == pytest.approx(3 * N)
    roof_us = 3 * 6 * N / _hbm_bw(doc) * 1e6
    assert k["roof_us"] == pytest.approx(roof_us)
    assert k["pct_of_roof"] == pytest.approx(roof_us / (2 * TWIN_US + ORPHAN_US))
    assert k["bound"] == "memory_bound"
    # the op-launched instances outweigh the orphan: the entry's confidence is theirs, and its
    # twin key says which part was borrowed
    assert k["confidence"] == "model"
    assert k["twin"]["us"] == pytest.approx(ORPHAN_US) and k["twin"]["count"] == 1
    assert k["twin"]["reason"].startswith("launched by no recorded op: cost taken from 2 identical launches "
                                          "(same name, grid and block) of aten::add; ")
    # the op table is unchanged: the orphan has no op
    (op,) = [o for o in doc["ops"] if o["name"] == "aten::add"]
    assert op["count"] == 2 and op["kernel_us"] == pytest.approx(2 * TWIN_US)


def test_orphan_alone_says_estimate_and_where_its_cost_came_from(tmp_path: Path, db: Path) -> None:
    # the orphan's instances outweigh the twin's: the kernel's confidence and reason are the orphan's
    ev: list[dict[str, Any]] = []
    for i in range(3):
        _orphan(ev, i * 200, ORPHAN_US)
    _add(ev, 1, 1000, TWIN_US, [N])
    doc = _analyze(tmp_path, ev)
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["confidence"] == "estimate"
    assert k["reason"].startswith("launched by no recorded op: cost taken from 1 identical launches "
                                  "(same name, grid and block) of aten::add")
    assert doc["coverage"]["judged_us"] == pytest.approx(TWIN_US + 3 * ORPHAN_US)


def test_orphan_borrows_the_per_instance_share_of_its_call(tmp_path: Path, db: Path) -> None:
    # each twin call ran the add kernel 30 µs and a side kernel 10 µs: the add kernel carries 3/4
    # of the call's cost, and so does its orphan twin
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, 30.0)
    _add(ev, 1, 1000, 30.0, [N], extra_us=10.0)
    _add(ev, 2, 2000, 30.0, [N], extra_us=10.0)
    doc = _analyze(tmp_path, ev)
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(3 * 0.75 * 6 * N)
    assert k["flops"] == pytest.approx(3 * 0.75 * N)


def test_orphan_whose_twins_did_different_work_is_judged_on_the_least(tmp_path: Path, db: Path) -> None:
    # the same kernel, grid and block launched for [N]+[N] (6N bytes) and for [N]+[1] (4N+2 bytes):
    # both memory-bound, so the orphan is memory-bound and did at least 4N+2 bytes of work
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, ORPHAN_US)
    _add(ev, 1, 1000, TWIN_US, [N])
    _add(ev, 2, 2000, TWIN_US, [1])
    doc = _analyze(tmp_path, ev)
    cov = doc["coverage"]
    assert cov["judged_us"] == pytest.approx(2 * TWIN_US + ORPHAN_US)
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(6 * N + 2 * (4 * N + 2))  # the twins' own plus the least, borrowed
    assert k["twin"]["us"] == pytest.approx(ORPHAN_US)
    assert "lower bound" in k["twin"]["reason"]
    # the orphan's time at the roof is that of the least work: a lower bound of its own
    hbm = _hbm_bw(doc)
    assert k["roof_us"] == pytest.approx((6 * N + 2 * (4 * N + 2)) / hbm * 1e6, rel=1e-6)


def test_orphan_whose_twins_would_class_it_differently_is_twin_ambiguous(tmp_path: Path, db: Path) -> None:
    # [N]+[N] is memory-bound (30 µs at the roof); [16]+[16] latency-bound (nanoseconds at the roof)
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, ORPHAN_US)
    _add(ev, 1, 1000, TWIN_US, [N])
    ev.append(cpu_op("aten::add", 2000, 5, 2, [[16], [16], []], [BF16, BF16, "Scalar"]))
    ev.append(runtime("cudaLaunchKernel", 2001, 2, 2, 2))
    ev.append(kernel(ADD, 2010, 3.0, 2, grid=GRID, block=BLOCK))
    doc = _analyze(tmp_path, ev)
    cov = doc["coverage"]
    assert cov["judged_us"] == pytest.approx(TWIN_US + 3.0)
    assert [(u["name"], u["kind"], u["reason"], u["kernel_us"]) for u in cov["unjudged"]] == [
        (ADD, "kernel", "twin_ambiguous", pytest.approx(ORPHAN_US))]
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["twin"] is None  # every kernel has the key: null when no instance borrowed a cost


def test_orphan_whose_grid_differs_is_not_judged(tmp_path: Path, db: Path) -> None:
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, ORPHAN_US, grid=[32768, 1, 1])
    _add(ev, 1, 1000, TWIN_US, [N])
    doc = _analyze(tmp_path, ev)
    cov = doc["coverage"]
    assert cov["judged_us"] == pytest.approx(TWIN_US)
    assert cov["by_reason"] == {"no_op": pytest.approx(ORPHAN_US)}
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(6 * N)
    assert k["twin"] is None


def test_orphan_without_grid_matches_by_name_only_when_all_twins_agree(tmp_path: Path, db: Path) -> None:
    # ROCm traces record no grid or block for kernels outside the CPU window: the name alone
    # matches, over twins of every grid, and only when all of them agree
    ev: list[dict[str, Any]] = []
    _orphan(ev, 0, ORPHAN_US, grid=None)
    _add(ev, 1, 1000, TWIN_US, [N])
    _add(ev, 2, 2000, TWIN_US, [N], grid=[1024, 1, 1])
    doc = _analyze(tmp_path, ev)
    assert doc["coverage"]["judged_us"] == pytest.approx(2 * TWIN_US + ORPHAN_US)
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(3 * 6 * N)
    assert "(same name; the trace records no grid or block for it) of aten::add" in k["twin"]["reason"]

    ev = []
    _orphan(ev, 0, ORPHAN_US, grid=None)
    _add(ev, 1, 1000, TWIN_US, [N])
    _add(ev, 2, 2000, TWIN_US, [1], grid=[1024, 1, 1])  # another grid, another cost: the least is taken
    doc = _analyze(tmp_path, ev)
    assert doc["coverage"]["by_reason"] == {}
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(6 * N + 2 * (4 * N + 2))
    assert "lower bound" in k["twin"]["reason"]


def test_twins_lift_the_shared_qwen_h100_coverage(tmp_path: Path, db: Path) -> None:
    path = shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz")
    doc = run_cli("analyze", str(path), "--json").json()
    cov = doc["coverage"]
    # without twins 65.6 %: 30 % of the GPU time ran before the CPU window (no op)
    assert cov["share"] > 0.95
    by_reason = cov["by_reason"]
    # what stays op-less and unjudged is only what no costed twin vouches for (the kernels whose
    # twins would class them differently)
    assert by_reason.get("no_op", 0) < 0.02 * cov["total_us"]
    assert by_reason.get("twin_ambiguous", 0) < 0.15 * cov["total_us"]
    over = [e["name"] for e in doc["kernels"] + doc["ops"] if (e.get("pct_of_roof") or 0) > 1.0 + 1e-9]
    assert over == []


def test_a_calls_compute_kernels_carry_all_of_its_cost(tmp_path: Path, db: Path) -> None:
    """A memset the call also ran (cuBLAS's workspace memset beside a GEMM) is judged on its own,
    against device memory; the call's compute kernel carries the whole cost of the call, so the
    kernel table sums back to the op's cost (and its twins agree whatever the memset took)."""
    ev: list[dict[str, Any]] = []
    for ext, ts, memset_us in ((1, 1000, 10.0), (2, 2000, 2.0)):
        _add(ev, ext, ts, TWIN_US, [N])
        ev.append(runtime("cudaMemsetAsync", ts + 3, 2, ext + 1000, ext))
        ev.append(kernel("Memset (Device)", ts + 20 + TWIN_US, memset_us, ext + 1000, cat="gpu_memset"))
    _orphan(ev, 0, ORPHAN_US)
    doc = _analyze(tmp_path, ev)
    (k,) = [k for k in doc["kernels"] if k["name"] == ADD]
    assert k["bytes"] == pytest.approx(3 * 6 * N)  # two calls' worth, and the orphan's borrowed one
    (op,) = [o for o in doc["ops"] if o["name"] == "aten::add"]
    assert op["bytes"] * op["count"] == pytest.approx(2 * 6 * N)
