"""Roofline classification, kernel-name families, graph-replay mapping and the roofline
picture of `analyze` (synthetic traces with known answers, and the shared real traces)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpuscope.analyzers.families import kernel_family
from gpuscope.analyzers.roofline import (
    BOUNDS,
    LATENCY_KERNEL_US,
    LATENCY_WORK_US,
    NO_ROOF,
    Roof,
    classify_by_name,
    classify_cost,
)
from gpuscope.ingest.link import _align

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

H100ISH = Roof("test", "spec", {"bf16": 1e15, "fp32": 6e13}, 3e12)


def test_bound_classes_have_one_definition() -> None:
    """The bound classes live in roofline.py: the families' hints are among them, and the
    analysis splits its compute time into exactly them."""
    from gpuscope.analyzers import breakdown, families

    assert BOUNDS == ("compute_bound", "memory_bound", "cache_bound", "latency_bound", "unknown")
    assert {hint for _, hint, _ in families._RULES if hint is not None} <= set(BOUNDS)
    assert breakdown.BOUNDS is BOUNDS


def test_gemm_above_ridge_is_compute_bound_with_exact_roof_numbers() -> None:
    n = 4096
    flops, nbytes = 2.0 * n**3, 3.0 * n * n * 2
    v = classify_cost(flops, nbytes, "bf16", time_us=200.0, roof=H100ISH)
    assert v.bound == "compute_bound" and v.confidence == "model"
    assert v.ridge_flop_per_byte == pytest.approx(1e15 / 3e12)
    assert v.intensity_flop_per_byte == pytest.approx(flops / nbytes)
    assert v.roof_us == pytest.approx(flops / 1e15 * 1e6)
    assert v.pct_of_roof == pytest.approx(v.roof_us / 200.0)
    assert v.saved_us == pytest.approx(200.0 - v.roof_us)
    assert v.achieved_flops_per_s == pytest.approx(flops / 200e-6)


def test_elementwise_is_memory_bound_and_roof_time_is_bandwidth_time() -> None:
    nbytes = 3 * 4 * 2**24  # read two fp32 inputs, write one output
    v = classify_cost(2**24, nbytes, "fp32", time_us=100.0, roof=H100ISH)
    assert v.bound == "memory_bound"
    assert v.roof_us == pytest.approx(nbytes / 3e12 * 1e6)


def test_small_work_is_latency_bound_and_the_threshold_is_the_roof_time() -> None:
    # just below and just above LATENCY_WORK_US at the roof
    below = LATENCY_WORK_US * 0.99e-6 * 3e12
    above = LATENCY_WORK_US * 1.01e-6 * 3e12
    assert classify_cost(below / 10, below, "bf16", 10.0, H100ISH).bound == "latency_bound"
    assert classify_cost(above / 10, above, "bf16", 10.0, H100ISH).bound == "memory_bound"
    # per call: 100 calls of small work stay latency-bound
    assert classify_cost(below / 10, below, "bf16", 1000.0, H100ISH, calls=100).bound == "latency_bound"


def test_no_roof_or_no_peak_for_the_dtype_is_unknown() -> None:
    assert classify_cost(1e12, 1e9, "bf16", 100.0, NO_ROOF).bound == "unknown"
    v = classify_cost(1e12, None, "fp8", 100.0, H100ISH)
    assert v.bound == "unknown" and "fp8" in v.reason


def test_kernels_without_cost_by_duration_then_family() -> None:
    assert classify_by_name(LATENCY_KERNEL_US * 0.5, "gemm", "compute_bound", "x").bound == "latency_bound"
    v = classify_by_name(50.0, "gemm", "compute_bound", "x")
    assert v.bound == "compute_bound" and v.confidence == "family"
    assert classify_by_name(50.0, "other", None, "x").bound == "unknown"


@pytest.mark.parametrize("name,family", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNT", "gemm"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1", "gemm"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>", "gemm"),
    ("wvSplitK_hf_sml_", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", "attention"),
    ("kernel_unified_attention_2d", "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>", "elementwise"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    ("triton_red_fused_sum_1", "reduction"),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", "norm"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax"),
    ("ncclDevKernel_AllGather_RING_LL", "communication"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
    ("some_custom_thing", "other"),
])
def test_kernel_families_of_both_vendors(name: str, family: str) -> None:
    assert kernel_family(name).family == family


def test_align_is_in_order_and_skips_missing() -> None:
    assert _align(["a", "b", "c"], ["a", "b", "c"]) == [0, 1, 2]
    assert _align(["a", "c"], ["a", "b", "c"]) == [0, 2]
    assert _align(["a", "x", "b"], ["a", "b"]) == [0, None, 1]
    assert _align(["b", "a"], ["a", "b"]) == [1, None]


# --------------------------------------------------------------------------------------------
# graph capture + replay, hand-written


def _graph_traces(tmp: Path) -> tuple[Path, Path]:
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
              "computeMinor": 0, "numSms": 132, "warpSize": 32}]
    cap_events = [
        cpu_op("aten::mm", 100, 50, ext=1, dims=[[64, 4096], [4096, 4096]], types=["c10::BFloat16", "c10::BFloat16"]),
        cpu_op("aten::add", 160, 20, ext=2, dims=[[64, 4096], [64, 4096]], types=["c10::BFloat16", "c10::BFloat16"]),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "pid": 100, "tid": 100, "ts": 90, "dur": 1,
         "args": {"correlation": 10}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 110, "dur": 5,
         "args": {"correlation": 11, "External id": 1, "kernel": "sm90_xmma_gemm_bf16"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 165, "dur": 5,
         "args": {"correlation": 12, "External id": 2, "kernel": "vectorized_elementwise_kernel_add"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "pid": 100, "tid": 100, "ts": 200, "dur": 1,
         "args": {"correlation": 13}},
    ]
    cap = write_trace(tmp / "capture.json", cap_events, deviceProperties=props)
    rep_events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100, "ts": 1000, "dur": 10,
         "args": {"correlation": 50}},
        cpu_op("python_step", 990, 100, ext=9),
        kernel("sm90_xmma_gemm_bf16", 1020, 30, corr=50),
        kernel("vectorized_elementwise_kernel_add", 1060, 3, corr=50),
    ]
    rep = write_trace(tmp / "replay.json", rep_events, deviceProperties=props)
    return cap, rep


def test_graph_replay_kernels_map_to_capturing_ops(tmp_path: Path, db: Path) -> None:
    cap, rep = _graph_traces(tmp_path)
    r = run_cli("ingest", cap, rep, "--json")
    assert r.code == 0, r.err
    rows = run_cli("sql", "SELECT k.name, k.attribution, o.name AS op FROM kernels k LEFT JOIN ops o "
                   "ON o.run_id = k.run_id AND o.op_id = k.op_id ORDER BY k.ts_ns", "--json").json()
    assert [(x["attribution"], x["op"]) for x in rows] == [("graph_capture", "aten::mm"), ("graph_capture", "aten::add")]
    gl = run_cli("sql", "SELECT seq, kernel_name FROM graph_launches ORDER BY seq", "--json").json()
    assert [g["kernel_name"] for g in gl] == ["sm90_xmma_gemm_bf16", "vectorized_elementwise_kernel_add"]


def test_graph_replay_without_capture_never_collapses_into_the_launching_op(tmp_path: Path, db: Path) -> None:
    _, rep = _graph_traces(tmp_path)
    assert run_cli("ingest", rep).code == 0
    rows = run_cli("sql", "SELECT attribution, op_id FROM kernels", "--json").json()
    assert all(x["attribution"] == "graph_replay" and x["op_id"] is None for x in rows)
    doc = run_cli("analyze", "--json").json()
    assert doc["ops"] == []  # not one "python_step" row holding every replayed kernel
    fams = {k["name"]: (k["family"], k["confidence"]) for k in doc["kernels"]}
    assert fams["sm90_xmma_gemm_bf16"] == ("gemm", "family")
    assert doc["counts"]["graph_replayed_kernels"] == 2 and doc["counts"]["graph_kernels_mapped_to_ops"] == 0
    text = run_cli("analyze").out
    assert text.count("kernels replayed from CUDA/HIP graphs") == 1  # said once, not again as an ingest note


def test_shared_vllm_graph_pair_maps_every_replayed_kernel(db: Path) -> None:
    folder = shared_trace("tracelens/vllm_decode_cudagraph")
    r = run_cli("ingest", folder, "--json")
    assert r.code == 0, r.err
    doc = run_cli("analyze", "--json").json()
    c = doc["counts"]
    assert c["graph_replayed_kernels"] == 421 and c["graph_kernels_mapped_to_ops"] == 421
    names = {o["name"] for o in doc["ops"]}
    assert {"aten::addmm", "vllm::unified_attention_with_output", "vllm::moe_forward"} <= names
    assert any("not traces" in n and "execution_details.json" in n for n in doc["notes"])
    assert math.isclose(sum(doc["roofline_us"].values()), doc["time_us"]["compute"], rel_tol=1e-9)


# --------------------------------------------------------------------------------------------
# analyze: the roofline picture end to end


H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]


def _roofline_trace(tmp: Path) -> Path:
    bf16 = "c10::BFloat16"
    events = [
        cpu_op("aten::mm", 100, 50, ext=1, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 110, 5, corr=1, ext=1),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 200, 1500, corr=1),
        cpu_op("aten::add", 300, 20, ext=2, dims=[[4], [4], []], types=[bf16, bf16, "Scalar"]),
        runtime("cudaLaunchKernel", 305, 5, corr=2, ext=2),
        kernel("vectorized_elementwise_kernel_add", 1800, 2, corr=2),
        kernel("mystery_kernel", 1900, 50, corr=99),
    ]
    return write_trace(tmp / "roof.json", events, deviceProperties=H100_PROPS)


def test_analyze_classifies_against_the_h100_roof(tmp_path: Path, db: Path) -> None:
    doc = run_cli("analyze", _roofline_trace(tmp_path), "--json").json()
    assert doc["devices"][0]["spec"] == "h100-sxm"
    ops = {o["name"]: o for o in doc["ops"]}
    mm = ops["aten::mm"]
    flops = 2 * 8192**3
    assert mm["flops"] == flops and mm["bound"] == "compute_bound" and mm["confidence"] == "model"
    roof = doc["roofline"]["devices"][0]
    peak = roof["peak_flops_per_s"]["bf16"]
    assert peak == pytest.approx(989.4e12)
    assert mm["roof_us"] == pytest.approx(flops / peak * 1e6)
    assert mm["pct_of_roof"] == pytest.approx(mm["roof_us"] / 1500)
    assert ops["aten::add"]["bound"] == "latency_bound"
    r = doc["roofline_us"]
    assert r == pytest.approx({"compute_bound": 1500.0, "memory_bound": 0.0, "cache_bound": 0.0,
                               "latency_bound": 2.0, "unknown": 50.0})
    assert sum(r.values()) == pytest.approx(doc["time_us"]["compute"])
    kern = {k["name"]: k for k in doc["kernels"]}
    assert kern["sm90_xmma_gemm_bf16bf16_bf16f32"]["flops"] == pytest.approx(flops)
    assert kern["mystery_kernel"]["bound"] == "unknown" and kern["mystery_kernel"]["family"] == "other"
    assert doc["roofline"]["rules"]["latency_work_us"] == 2.0


def test_analyze_gpu_override_and_unknown_gpu(tmp_path: Path, db: Path) -> None:
    path = _roofline_trace(tmp_path)
    doc = run_cli("analyze", path, "--gpu", "mi300x", "--json").json()
    assert doc["roofline"]["devices"][0]["spec"] == "mi300x"
    assert doc["roofline"]["devices"][0]["identified_via"] == "--gpu"
    before = db.read_bytes()
    r = run_cli("analyze", "--gpu", "nosuchgpu9000")
    assert r.code == 2 and "nosuchgpu9000" in r.err and len(r.err.strip().splitlines()) == 1
    assert db.read_bytes() == before


def test_unknown_gpu_has_no_roof_and_says_how_to_add_it(tmp_path: Path, db: Path) -> None:
    props = [{"id": 0, "name": "Acme Turbo 9000", "totalGlobalMem": 1 << 34, "warpSize": 32}]
    events = [cpu_op("aten::mm", 100, 50, ext=1, dims=[[512, 512], [512, 512]], types=["float", "float"]),
              runtime("cudaLaunchKernel", 110, 5, corr=1, ext=1), kernel("gemm_kernel", 200, 100, corr=1)]
    doc = run_cli("analyze", write_trace(tmp_path / "acme.json", events, deviceProperties=props), "--json").json()
    assert doc["devices"][0]["spec"] is None
    assert doc["roofline_us"]["unknown"] == pytest.approx(100.0)
    assert any(a["kind"] == "unknown_gpu" for a in doc["advice"])
    text = run_cli("analyze").out
    assert "no roof" in text


def test_cpu_only_fixture_ops_carry_flops(db: Path) -> None:
    from conftest import FIXTURES

    doc = run_cli("analyze", FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz", "--json").json()
    assert not doc["gpu_activity"]
    mms = [o for o in doc["ops"] if o["name"] in ("aten::mm", "aten::addmm", "aten::bmm") and o["flops"]]
    assert mms and all(o["bound"] == "unknown" for o in mms)


def test_compare_h100_vs_mi300x_qwen(db: Path) -> None:
    a = shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz")
    b = shared_trace("tracelens/qwen1.5-0.5b-chat/mi300x.json.gz")
    assert run_cli("ingest", a, "--name", "h100").code == 0
    assert run_cli("ingest", b, "--name", "mi300x").code == 0
    doc = run_cli("compare", "h100", "mi300x", "--json").json()
    assert doc["schema"] == "gpuscope.compare/1"
    assert [d["spec"] for d in doc["a"]["devices"]] == ["h100-sxm"]
    assert [d["spec"] for d in doc["b"]["devices"]] == ["mi300x"]
    assert len(doc["matched"]) >= 30
    mm = next(m for m in doc["matched"] if m["name"] == "aten::mm" and m["input_dims"] == [[8944, 1024], [1024, 2816]])
    assert mm["a"]["bound"] == mm["b"]["bound"] == "compute_bound"
    assert mm["ratio"] == pytest.approx(mm["b"]["kernel_us"] / mm["a"]["kernel_us"])
    assert mm["flops"] == 2 * 8944 * 1024 * 2816
    for side in ("a", "b"):
        rl = doc["totals"]["roofline_us"][side]
        assert sum(rl.values()) == pytest.approx(doc["totals"]["compute"][side])
    fams = {f["family"] for f in doc["by_family"]}
    assert {"gemm", "attention", "elementwise"} <= fams
    text = run_cli("compare", "h100", "mi300x")
    assert text.code == 0 and "Matched ops" in text.out
    assert run_cli("compare", "h100", "nosuchrun").code == 2


def test_each_graph_replay_is_one_call_of_the_capturing_op(tmp_path: Path, db: Path) -> None:
    """Replays of one captured graph share the capturing ops' rows; each replay (one graph launch,
    one correlation id) is one call. Two replays of the same duration must be judged exactly as
    one: the same percent of roof and twice the time at the roof (counting them as one call with
    twice its time would halve the percent)."""
    cap, rep = _graph_traces(tmp_path)
    assert run_cli("ingest", cap, rep, "--name", "one").code == 0
    two_events = json.loads(Path(rep).read_text())["traceEvents"] + [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100, "ts": 2000, "dur": 10,
         "args": {"correlation": 60}},
        kernel("sm90_xmma_gemm_bf16", 2020, 30, corr=60),
        kernel("vectorized_elementwise_kernel_add", 2060, 3, corr=60),
    ]
    props = json.loads(Path(rep).read_text())["deviceProperties"]
    rep2 = write_trace(tmp_path / "replay2.json", two_events, deviceProperties=props)
    assert run_cli("ingest", cap, rep2, "--name", "two").code == 0
    one = {o["name"]: o for o in run_cli("analyze", "one", "--json").json()["ops"]}
    two = {o["name"]: o for o in run_cli("analyze", "two", "--json").json()["ops"]}
    for name in ("aten::mm", "aten::add"):
        assert (one[name]["count"], two[name]["count"]) == (1, 2)
        assert two[name]["pct_of_roof"] == pytest.approx(one[name]["pct_of_roof"], rel=1e-9)
        assert two[name]["roof_us"] == pytest.approx(2 * one[name]["roof_us"], rel=1e-9)
    # by hand: the mm moves (64·4096 + 4096·4096 + 64·4096) bf16 elements and does 2·64·4096² FLOPs
    assert one["aten::mm"]["bytes"] == (64 * 4096 * 2 + 4096 * 4096) * 2
    assert one["aten::mm"]["flops"] == 2 * 64 * 4096 * 4096
