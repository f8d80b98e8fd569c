"""Inductor/Triton kernels (issue 28, point 2): a ``triton_*`` op is costed from its launch's
recorded arguments (``analyzers/costmodel/triton.py``).

Hand-computed cases (the argument layouts are those ``torch/_inductor`` passes: tensors, then
the ``ks`` sizes and the numels as ``Scalar`` arguments), odd input, the coverage reason of a
Triton kernel whose name says "moe", and the shared traces: every Triton launch they record.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_TRACES, run_cli
from gpuscope.analyzers.costmodel import OpCost, has_cost_model, op_cost
from gpuscope.analyzers.costmodel.triton import fused_op_names
from gpuscope.analyzers.coverage import reason_for_op

BF16, F32, F64, I64 = "c10::BFloat16", "float", "double", "long int"


def _cost(name: str, args: list[tuple[Any, str, Any, str]]) -> OpCost | None:
    """``args``: (dims, type, strides, concrete value) per launch argument."""
    return op_cost(name, [a[0] for a in args], [a[1] for a in args], [a[3] for a in args],
                   [a[2] for a in args])


def _t(shape: list[int], dtype: str, strides: list[int] | None = None) -> tuple[Any, str, Any, str]:
    if strides is None:
        strides = []
        acc = 1
        for d in reversed(shape):
            strides.insert(0, acc)
            acc *= d
    return (shape, dtype, strides, "")


def _s(value: int | str) -> tuple[Any, str, Any, str]:
    return ([], "Scalar", [], str(value))


def _check(c: OpCost | None, flops: float, nbytes: float, dtype: str) -> None:
    assert c is not None
    assert (c.flops, c.bytes, c.dtype, c.kind) == (flops, nbytes, dtype, "triton")
    assert c.flops_executed == flops
    assert "estimate" in c.model


def test_kernel_names_are_split_into_aten_ops() -> None:
    assert fused_op_names("triton_poi_fused_add_cos_sin_0") == ["add", "cos", "sin"]
    # names with underscores: sorted and joined by Inductor, recognised whole
    assert fused_op_names("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0") == [
        "add", "bitwise_and", "bitwise_not", "bitwise_or", "ge", "lt", "mul", "sub"]
    assert fused_op_names("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_3") == [
        "_to_copy", "add", "mean", "mul", "pow", "rsqrt"]
    assert fused_op_names("triton_poi_fused_constant_pad_nd_moe_forward_0") == ["constant_pad_nd", "moe_forward"]
    assert fused_op_names("triton_poi_fused_0") == []
    assert fused_op_names("triton_tem_fused_addmm_relu_12") == ["addmm", "relu"]
    # an AOTInductor build prefixes the model's name
    assert fused_op_names("mymodel_triton_red_fused_sum_4") == ["sum"]
    for other in ("aten::add", "triton_unk_fused_0", "my_triton_kernel", "_fwd_kernel", "triton_poi_fused_add"):
        assert fused_op_names(other) is None
    assert has_cost_model("triton_red_fused_sum_4") and has_cost_model("add")
    assert not has_cost_model("triton_unk_fused_0") and not has_cost_model("_fwd_kernel")


def test_pointwise_from_the_hta_trace() -> None:
    # HTA's A100 trace: sin(x) + cos(y) on 10x10 fp32; in_ptr0, in_ptr1, out_ptr0, xnumel
    c = _cost("triton_poi_fused_add_cos_sin_0", [_t([10, 10], F32), _t([10, 10], F32), _t([10, 10], F32), _s(100)])
    # 3 named ops x 100 elements; three 400-byte buffers
    _check(c, 300, 1200, "fp32")


def test_pointwise_broadcast_input_counts_its_storage() -> None:
    # x [64,128] bf16 + a [128] bias expanded to [64,128] (stride 0), times a scalar: out [64,128]
    c = _cost("triton_poi_fused_add_mul_7", [
        _t([64, 128], BF16), _t([64, 128], BF16, [0, 1]), _t([64, 128], BF16), _s(8192)])
    # bytes: 8192*2 read + 128*2 bias (once) + 8192*2 written; FLOPs: add + mul per element
    _check(c, 2 * 8192, (8192 + 128 + 8192) * 2, "fp32")


def test_gather_from_a_large_table_is_capped_at_the_iteration_space() -> None:
    # embedding: 32 int64 ids into a [50000, 256] fp32 table, out [32, 256]; xnumel = 8192
    c = _cost("triton_poi_fused_embedding_0", [
        _t([32], I64), _t([50000, 256], F32), _t([32, 256], F32), _s(8192)])
    # the table counts the 8192 elements a launch can touch, not its 12.8M: 256 + 32768 + 32768
    _check(c, 0, 32 * 8 + 8192 * 4 + 8192 * 4, "fp32")


def test_tiled_pointwise_and_size_arguments() -> None:
    # a transpose, tiled (ynumel=128, xnumel=512): no tensor has 512 elements, both 65536
    c = _cost("triton_poi_fused_clone_2", [_t([512, 128], BF16), _t([128, 512], BF16), _s(128), _s(512)])
    _check(c, 0, 2 * 65536 * 2, "fp32")
    # a symbolic size ks0 = 7 before xnumel = 512: 512 elements of x read, 512 written
    c = _cost("triton_poi_fused_mul_0", [_t([7, 512], F32), _t([512], F32), _s(7), _s(512)])
    _check(c, 512, 512 * 4 + 512 * 4, "fp32")


def test_double_arguments_take_the_fp64_roof() -> None:
    c = _cost("triton_poi_fused_sqrt_1", [_t([1000], F64), _t([1000], F64), _s(1000)])
    _check(c, 1000, 16000, "fp64")


def test_reduction_and_persistent_reduction() -> None:
    # row sums of [1024, 4096] fp32: xnumel 1024, rnumel 4096
    c = _cost("triton_red_fused_sum_0", [_t([1024, 4096], F32), _t([1024], F32), _s(1024), _s(4096)])
    _check(c, 1024 * 4096, (1024 * 4096 + 1024) * 4, "fp32")
    # an RMS norm, persistent: in_out_ptr0 [32,1] fp32 (rstd), x [32,2048], weight [2048], out
    c = _cost("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", [
        _t([32, 1], F32), _t([32, 2048], BF16), _t([2048], BF16), _t([32, 2048], BF16), _s(32), _s(2048)])
    # add, mean, mul, pow, rsqrt: 5 per element of the 32x2048 space; _to_copy moves data
    _check(c, 5 * 32 * 2048, 32 * 4 + 65536 * 2 + 2048 * 2 + 65536 * 2, "fp32")
    # a reduction whose name names no arithmetic still reads every element once
    c = _cost("triton_red_fused_0", [_t([64, 100], F32), _t([64], F32), _s(64), _s(100)])
    _check(c, 6400, (6400 + 64) * 4, "fp32")


def test_gemm_templates() -> None:
    # FlopCounterMode's formula for mm, addmm (bias add not counted) and bmm: 2·B·M·N·K
    mm_flops = 2 * 128 * 512 * 256
    c = _cost("triton_tem_fused_mm_0", [_t([128, 256], BF16), _t([256, 512], BF16), _t([128, 512], BF16)])
    _check(c, mm_flops, (128 * 256 + 256 * 512 + 128 * 512) * 2, "bf16")
    # addmm with an epilogue: the bias (prefix argument) expanded to [128, 512] with stride 0
    c = _cost("triton_tem_fused_addmm_relu_3", [
        _t([128, 512], BF16, [0, 1]), _t([128, 256], BF16), _t([256, 512], BF16), _t([128, 512], BF16)])
    _check(c, mm_flops, (512 + 128 * 256 + 256 * 512 + 128 * 512) * 2, "bf16")
    # fp32: judged against TF32 (the trace does not say whether the template ran TF32)
    c = _cost("triton_tem_fused_mm_1", [_t([128, 256], F32), _t([256, 512], F32), _t([128, 512], F32)])
    _check(c, mm_flops, (128 * 256 + 256 * 512 + 128 * 512) * 4, "tf32")
    c = _cost("triton_tem_fused_bmm_2", [_t([4, 64, 32], BF16), _t([4, 32, 16], BF16), _t([4, 64, 16], BF16)])
    _check(c, 2 * 4 * 64 * 16 * 32, (4 * 64 * 32 + 4 * 32 * 16 + 4 * 64 * 16) * 2, "bf16")


def test_odd_launches_give_none() -> None:
    # vLLM's combo kernel: sizes hard-coded, no numel recorded: the embedding table it gathers
    # from would count 1.16 GB; not modelled
    assert _cost("triton_poi_fused_0", [_t([32], "int"), _t([201088, 2880], BF16), _t([131072, 64], F32),
                                        _t([32, 2880], BF16), _t([131072, 64], BF16)]) is None
    # the numel's value not recorded (a trace without Concrete Inputs)
    assert _cost("triton_poi_fused_add_0", [_t([10], F32), _t([10], F32), ([], "Scalar", [], "")]) is None
    # a reduction with one trailing scalar, a zero numel, no tensors
    assert _cost("triton_red_fused_sum_0", [_t([10, 10], F32), _t([10], F32), _s(10)]) is None
    assert _cost("triton_poi_fused_add_0", [_t([0], F32), _t([0], F32), _s(0)]) is None
    assert _cost("triton_poi_fused_add_0", [_s(10)]) is None
    # a dimensioned argument of an unknown dtype cannot be counted
    assert _cost("triton_poi_fused_add_0", [_t([10], "mystery"), _t([10], F32), _s(10)]) is None
    # templates: not a GEMM, a GEMM whose shapes do not chain, two products that fit
    assert _cost("triton_tem_fused_convolution_0", [_t([1, 3, 8, 8], F32), _t([4, 3, 3, 3], F32),
                                                    _t([1, 4, 6, 6], F32)]) is None
    assert _cost("triton_tem_fused_mm_0", [_t([128, 256], BF16), _t([128, 512], BF16), _t([128, 512], BF16)]) is None
    assert _cost("triton_tem_fused_mm_0", [_t([2, 3], BF16), _t([3, 2], BF16), _t([2, 2], BF16),
                                           _t([2, 2], BF16), _t([2, 2], BF16)]) is None
    # malformed input never raises
    rng = random.Random(28)
    junk: list[Any] = [None, "", "[", "[[1,2]]", [[-1]], [["a"]], [[1.5]], [None], [[10**30]], 5, {"a": 1}]
    names = ["triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused_mean_2",
             "triton_tem_fused_mm_3", "triton_for_fused_4", "triton_spl_fused_cumsum_5"]
    for _ in range(600):
        got = op_cost(rng.choice(names), rng.choice(junk), rng.choice(junk + [["float", "Scalar"]]),
                      rng.choice(junk + [["", "7"]]), rng.choice(junk))
        assert got is None or (got.bytes is None or got.bytes >= 0)


def test_moe_named_triton_kernel_is_judged_not_needs_model() -> None:
    # vLLM's pad of the MoE input: its name says moe, but it is a pointwise kernel with shapes
    args = [_t([32, 2880], BF16), _t([32, 3072], BF16), _s(98304)]
    _check(_cost("triton_poi_fused_constant_pad_nd_moe_forward_0", args), 0, (32 * 2880 + 32 * 3072) * 2, "fp32")
    assert has_cost_model("triton_poi_fused_constant_pad_nd_moe_forward_0")
    # when its shapes fall outside the model, the reason says so (not "needs --model")
    assert reason_for_op("triton_poi_fused_constant_pad_nd_moe_forward_0", "[[32,2880]]", "") == "shapes_not_modelled"
    assert reason_for_op("vllm::moe_forward", "[[8,2880]]", "") == "needs_model"


def _triton_launches(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("triton_")]


def test_every_triton_launch_of_the_shared_traces() -> None:
    cap = SHARED_TRACES / "tracelens/vllm_decode_cudagraph/graph_capture_rank_0.pt.trace.json.gz"
    b200 = SHARED_TRACES / "tracelens/b200_eager.json.gz"
    if not cap.exists() or not b200.exists():
        pytest.skip("shared traces not available (../shared/data/traces is absent)")
    got: dict[str, tuple[float | None, float | None] | None] = {}
    for e in _triton_launches(cap) + _triton_launches(b200):
        a = e["args"]
        c = op_cost(e["name"], a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs"),
                    a.get("Input Strides"))
        got[e["name"]] = None if c is None else (c.flops, c.bytes)
    assert got == {
        # fp32 [131072, 64] -> bf16: 6 bytes per element
        "triton_poi_fused__to_copy_1": (0.0, 131072 * 64 * 6),
        "triton_poi_fused_constant_pad_nd_moe_forward_0": (0.0, (32 * 2880 + 32 * 3072) * 2),
        # the combo kernel with hard-coded sizes
        "triton_poi_fused_0": None,
        # 8 named ops on 888 elements of int32, int64 and bool
        "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0": (8 * 888, 888 * (4 + 8 + 1)),
    }


def test_hta_triton_trace_is_fully_judged_and_under_its_roof(tmp_path: Path, db: Path) -> None:
    path = SHARED_TRACES / "hta/a100_triton_kernel.json.gz"
    if not path.exists():
        pytest.skip("shared trace hta/a100_triton_kernel.json.gz not available")
    assert run_cli("ingest", str(path)).code == 0
    doc = run_cli("analyze", "--json").json()
    cov = doc["coverage"]
    assert cov["share"] == 1.0 and cov["unjudged"] == []
    rows = [r for r in doc["ops"] + doc["kernels"] if r["name"] == "triton_poi_fused_add_cos_sin_0"]
    assert len(rows) == 2
    for r in rows:
        assert r["pct_of_roof"] is not None and r["pct_of_roof"] <= 1.0
        assert not r.get("model_error")
