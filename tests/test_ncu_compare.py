"""bench/ncu_compare.py: gpuscope's roofline class beside Nsight Compute's SpeedOfLight verdict.

A Kineto trace built here (H100, six kernels whose durations are chosen) is ingested into a
fresh store; fixtures/ncu/sol_raw.csv and sol_details.csv are the same made-up ncu export in
the raw and details pages (fixtures/ncu/make_fixtures.py). The expected table is worked out by
hand from those durations and percentages and ncu's SOLBottleneck thresholds (60 %).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import FIXTURES, REPO, cpu_op, kernel, runtime, write_trace

H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
BF16 = "c10::BFloat16"
NCU = FIXTURES / "ncu"
SCRIPT = REPO / "bench" / "ncu_compare.py"

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
# CUPTI's spelling ('> >', 'char*'); the ncu fixture spells the same kernels '>>', 'char *'
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
GEMV = "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false>(float, float)"
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
       "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
       "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
MYST = "mystery_kernel"
UNPROFILED = "void unprofiled_copy_kernel<float>(float*, float const*, int)"

# Kineto durations (µs): these, not ncu's replayed durations, give the time shares
GEMM_US, ADD_US, GEMV_US, MUL_US, MYST_US, UNPROF_US = 200.0, 150.0, 100.0, 40.0, 30.0, 10.0
TOTAL_US = 2 * GEMM_US + ADD_US + GEMV_US + MUL_US + MYST_US + UNPROF_US  # 730


def _ncu_compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ncu_compare", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ncu_compare"] = mod
    spec.loader.exec_module(mod)
    return mod


nc = _ncu_compare()


def _trace(path: Path) -> Path:
    ev: list[dict[str, Any]] = []
    ext = 0

    def launch(op: str, kname: str, dur: float, dims: Any = None, types: Any = None) -> None:
        nonlocal ext
        ext += 1
        ts = ext * 1000.0
        ev.append(cpu_op(op, ts, 5, ext, dims, types))
        ev.append(runtime("cudaLaunchKernel", ts + 1, 2, ext, ext))
        ev.append(kernel(kname, ts + 10, dur, ext))

    n = 4096
    # 2 x a bf16 4096^3 GEMM: 1.37e11 FLOPs, 139 µs at 989 TFLOP/s: compute-bound at ~69 %
    launch("aten::mm", GEMM, GEMM_US, [[n, n], [n, n]], [BF16, BF16])
    launch("aten::mm", GEMM, GEMM_US, [[n, n], [n, n]], [BF16, BF16])
    # bf16 add of two 8192^2 tensors: 402.7 MB, memory-bound
    launch("aten::add", ADD, ADD_US, [[8192, 8192], [8192, 8192]], [BF16, BF16])
    # decode GEMV [8,2048]x[2048,5504]: 22.7 MB in 100 µs, memory-bound far under its roof
    launch("aten::mm", GEMV, GEMV_US, [[8, 2048], [2048, 5504]], [BF16, BF16])
    # bf16 mul of two 4096^2 tensors: 100.7 MB in 40 µs, memory-bound near its roof
    launch("aten::mul", MUL, MUL_US, [[n, n], [n, n]], [BF16, BF16])
    # an op no cost model covers: gpuscope does not judge it
    launch("myext::mystery_op", MYST, MYST_US, [[1024, 1024]], [BF16])
    # a kernel ncu did not profile (its --launch-count ran out)
    launch("aten::copy_", UNPROFILED, UNPROF_US, [[1024, 1024], [1024, 1024]], ["float", "float"])
    return write_trace(path, ev, deviceProperties=H100_PROPS)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ncu")
    db = tmp / "store.duckdb"
    p = subprocess.run([sys.executable, "-m", "gpuscope", "ingest", "--db", str(db), "--name", "decode", "-q",
                        str(_trace(tmp / "decode.pt.trace.json"))], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return db


@pytest.mark.parametrize("page", ["sol_raw.csv", "sol_details.csv"])
def test_table_and_agreement_computed_by_hand(store: Path, page: str) -> None:
    p = _run(str(NCU / page), "--db", str(store), "--run", "decode", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    rows = {r["kernel"]: r for r in doc["rows"]}
    assert set(rows) == {GEMM, ADD, GEMV, MUL, MYST, UNPROFILED}
    assert doc["kernel_time_us"] == pytest.approx(TOTAL_US)
    for name, us in ((GEMM, 2 * GEMM_US), (ADD, ADD_US), (GEMV, GEMV_US), (MUL, MUL_US), (MYST, MYST_US)):
        assert rows[name]["time_share"] == pytest.approx(us / TOTAL_US)
    g = rows[GEMM]
    # two launches weighted by ncu's durations 100 and 300 µs: (30*1 + 34*3)/4, (70*1 + 80*3)/4
    assert g["ncu_launches"] == 2 and g["ncu_mem_pct"] == pytest.approx(33.0) and g["ncu_sm_pct"] == pytest.approx(77.5)
    assert g["ncu_duration_us"] == pytest.approx(400.0)
    assert (g["gpuscope_bound"], g["ncu_class"], g["agrees"]) == ("compute_bound", "compute", True)
    assert g["ncu_pct_same_unit"] == pytest.approx(77.5)  # SM %, the unit gpuscope says bounds it
    # matched across the two spellings of the name; 88 % memory: memory-bound in both
    a = rows[ADD]
    assert a["matched_by"] == "name" and (a["gpuscope_bound"], a["ncu_class"], a["agrees"]) == \
        ("memory_bound", "memory", True) and a["ncu_pct_same_unit"] == pytest.approx(88.0)
    # 45 % / 15 %: neither unit at 60 %, latency; gpuscope: memory-bound under 60 % of its roof
    v = rows[GEMV]
    assert (v["gpuscope_bound"], v["ncu_class"]) == ("memory_bound", "latency")
    assert v["gpuscope_pct_of_roof"] < 0.6 and v["agrees"] is True
    # 40 % memory, 70 % SM: ncu says compute, gpuscope memory: the disagreement
    m = rows[MUL]
    assert (m["gpuscope_bound"], m["ncu_class"], m["agrees"]) == ("memory_bound", "compute", False)
    # not judged by gpuscope, not profiled by ncu: out of the agreement
    assert rows[MYST]["agrees"] is None and rows[MYST]["ncu_class"] == "memory"
    assert rows[UNPROFILED]["ncu_class"] is None and rows[UNPROFILED]["note"] == "not profiled by ncu"
    compared = 2 * GEMM_US + ADD_US + GEMV_US + MUL_US  # 690
    assert doc["agree_share"] == pytest.approx((compared - MUL_US) / compared)  # 650 / 690 = 94.2 %
    assert doc["compared_share"] == pytest.approx(compared / TOTAL_US)
    assert doc["profiled_share"] == pytest.approx((TOTAL_US - UNPROF_US) / TOTAL_US)
    assert doc["disagreements"] == [MUL] and doc["kernels_compared"] == 4
    assert doc["ncu_launches"] == 7 and doc["ncu_kernels_unmatched"] == ["void ncu_only_kernel<float>(float *, int)"]


def test_text_table_prints_every_kernel_and_the_agreement_line(store: Path) -> None:
    p = _run(str(NCU / "sol_raw.csv"), "--db", str(store), "--run", "decode")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == ("ncu agrees on 94.2 % of the compared GPU time (4 of 6 kernels, 94.5 % of kernel time; "
                         "1 disagree; 7 ncu launches, 1 ncu kernels unmatched)")
    gemm = next(ln for ln in lines if ln.startswith("sm90_xmma"))
    assert "54.8%" in gemm and "33%/78%" in gemm and gemm.rstrip().endswith("yes")
    assert sum(ln.rstrip().endswith("NO") for ln in lines) == 1


def test_classes_follow_ncus_thresholds() -> None:
    assert nc.ncu_class(59.9, 59.9) == "latency"
    assert nc.ncu_class(60.0, 10.0) == "memory" and nc.ncu_class(61.0, 62.0) == "compute"
    assert nc.agrees("cache_bound", 0.9, "memory") is True
    assert nc.agrees("compute_bound", 0.9, "memory") is False
    assert nc.agrees("memory_bound", 0.7, "latency") is False  # gpuscope near its roof, ncu sees no unit busy
    assert nc.agrees("latency_bound", None, "latency") is True
    assert nc.agrees("unknown", None, "compute") is None and nc.agrees(None, None, "memory") is None


def test_names_match_across_spacing_and_by_function_name() -> None:
    assert nc.name_key("void f<a, b<c> >(int*, float)") == nc.name_key("f<a, b<c>>(int *, float)")
    assert nc.name_key("k<f()::{lambda(float)#1}>(int)") == nc.name_key("void k<f()::[lambda(float) (instance 1)]>(int)")
    assert nc.short_name("void at::native::(anonymous namespace)::k<c10::Half>(int, float*)") == "k<Half>"
    assert nc.base_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<int, 4>(int*)") == \
        "CatArrayBatchedCopy"
    la = [nc.NcuLaunch("0", "void ns::my_kernel<128, true>(float *)", 70.0, 20.0, None, 5.0)]
    doc = nc.compare({"kernels": [{"name": "void ns::my_kernel<128, 1>(float*)", "kind": "kernel", "total_us": 5.0,
                                   "bound": "memory_bound", "pct_of_roof": 0.8}]}, la)
    assert doc["rows"][0]["matched_by"] == "function name" and doc["agree_share"] == 1.0


def test_analyze_json_file_gives_the_same_result(store: Path, tmp_path: Path) -> None:
    a = subprocess.run([sys.executable, "-m", "gpuscope", "analyze", "--db", str(store), "--json", "decode"],
                       capture_output=True, text=True, timeout=120)
    (tmp_path / "a.json").write_text(a.stdout)
    p = _run(str(NCU / "sol_raw.csv"), "--analyze-json", str(tmp_path / "a.json"), "--json")
    q = _run(str(NCU / "sol_raw.csv"), "--db", str(store), "--run", "decode", "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == json.loads(q.stdout)


def _bad(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("make, fragment", [
    (lambda t: t / "missing.csv", "cannot read"),
    (lambda t: _bad(t, "empty.csv", ""), "no ncu CSV header"),
    (lambda t: _bad(t, "prof_only.csv", "==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM\n"),
     "no ncu CSV header"),
    (lambda t: _bad(t, "no_sm.csv", '"ID","Kernel Name","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_'
                    'elapsed"\n"","","%"\n"0","k","50"\n'), "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    (lambda t: _bad(t, "na.csv", '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                    '"0","k","GPU Speed Of Light Throughput","Memory Throughput","%","n/a"\n'), "no launch with both"),
])
def test_bad_csv_exits_2_with_one_line(tmp_path: Path, store: Path, make: Any, fragment: str) -> None:
    path = make(tmp_path)
    p = _run(str(path), "--db", str(store), "--run", "decode")
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and str(path) in p.stderr and fragment in p.stderr, p.stderr


def test_bad_store_or_run_exits_2_with_one_line(tmp_path: Path, store: Path) -> None:
    for args, fragment in (((("--db", str(tmp_path / "none.duckdb"), "--run", "x")), "no such store"),
                           (("--db", str(store), "--run", "no-such-run"), "gpuscope analyze failed"),
                           (("--analyze-json", str(_bad(tmp_path, "x.json", "{not json"))), "not JSON"),
                           ((), "need --db STORE and --run NAME")):
        p = _run(str(NCU / "sol_raw.csv"), *args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and fragment in p.stderr, p.stderr
