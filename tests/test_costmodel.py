"""Op cost models (gpuscope.analyzers.costmodel).

FLOPs are checked against torch.utils.flop_counter.FlopCounterMode on rows recorded by the real
profiler (the exact rows gpuscope ingests: Input Dims / Input type / Concrete Inputs as JSON
text); bytes against hand-computed values; coverage and TraceLens's conventions on the shared
real traces.
"""
from __future__ import annotations

import functools
import gzip
import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import pytest

from gpuscope.analyzers.costmodel import (
    OpCost,
    bytes_per_element,
    covered_op_names,
    dtype_key,
    op_cost,
)
from conftest import FIXTURES, shared_trace

Row = tuple[str, Any, Any, Any]


def _cost(name: str, dims: Any, types: Any, conc: Any = None) -> OpCost:
    c = op_cost(name, dims, types, conc)
    assert c is not None, (name, dims, types, conc)
    return c


# --------------------------------------------------------------------------------------------
# FlopCounterMode agreement, through the profiler
# --------------------------------------------------------------------------------------------

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the FlopCounterMode checks need torch; everything else does not
    torch = None  # type: ignore[assignment]

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _t(*shape: int, dtype: Any = None, device: str = "cpu") -> Any:
    dtype = dtype or torch.float32
    if device == "meta":
        return torch.empty(*shape, dtype=dtype, device="meta")
    return torch.randn(*shape).to(dtype)


def _sdpa(b: int, hq: int, hk: int, lq: int, lk: int, e: int, dtype: Any, **kw: Any) -> Callable[[], Any]:
    q = _t(b, hq, lq, e, dtype=dtype, device="meta")
    k = _t(b, hk, lk, e, dtype=dtype, device="meta")
    v = _t(b, hk, lk, e, dtype=dtype, device="meta")
    mask = kw.pop("mask", None)
    if mask is not None:
        mask = torch.empty(*mask, dtype=torch.bool, device="meta")
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def _flash(causal: bool, hk: int = 8) -> Callable[[], Any]:
    bf = torch.bfloat16
    q, k = _t(2, 8, 16, 64, dtype=bf, device="meta"), _t(2, hk, 32, 64, dtype=bf, device="meta")
    return lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, k, k, 0.0, causal)


def _efficient(causal: bool) -> Callable[[], Any]:
    bf = torch.bfloat16
    q, k = _t(2, 8, 16, 64, dtype=bf, device="meta"), _t(2, 8, 24, 64, dtype=bf, device="meta")
    bias = _t(2, 8, 16, 24, dtype=bf, device="meta")
    return lambda: torch.ops.aten._scaled_dot_product_efficient_attention(q, k, k, bias, False, 0.0, causal)


def _cudnn(causal: bool) -> Callable[[], Any]:
    bf = torch.bfloat16
    q, k = _t(1, 4, 32, 128, dtype=bf, device="meta"), _t(1, 4, 32, 128, dtype=bf, device="meta")
    return lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, k, None, False, 0.0, causal)


def _scaled_mm(bias: bool) -> Callable[[], Any]:
    fp8, bf = torch.float8_e4m3fn, torch.bfloat16
    a = _t(32, 64, dtype=fp8, device="meta")
    b = _t(48, 64, dtype=fp8, device="meta").t()
    s = torch.empty((), device="meta")
    bb = _t(48, dtype=bf, device="meta") if bias else None
    return lambda: torch._scaled_mm(a, b, s, s, bias=bb, out_dtype=bf)


def _cases() -> dict[str, tuple[Callable[[], Any], list[str]]]:
    """name -> (the call, op names that must appear in its profile with FlopCounterMode's FLOPs).
    CPU tensors where the op runs on CPU, meta tensors for the GPU-only kernels."""
    bf, fp32 = torch.bfloat16, torch.float32
    t = _t
    return {
        "mm fp32": ((lambda a=t(64, 32), b=t(32, 48): torch.mm(a, b)), ["aten::mm"]),
        "mm bf16": ((lambda a=t(33, 17, dtype=bf), b=t(17, 9, dtype=bf): a @ b), ["aten::matmul", "aten::mm"]),
        "addmm bias1d bf16": ((lambda c=t(48, dtype=bf), a=t(16, 32, dtype=bf), b=t(32, 48, dtype=bf):
                               torch.addmm(c, a, b)), ["aten::addmm"]),
        "addmm bias2d fp32": ((lambda c=t(16, 48), a=t(16, 32), b=t(32, 48):
                               torch.addmm(c, a, b, beta=0.5, alpha=2.0)), ["aten::addmm"]),
        "bmm bf16": ((lambda a=t(4, 16, 8, dtype=bf), b=t(4, 8, 12, dtype=bf): torch.bmm(a, b)), ["aten::bmm"]),
        "baddbmm fp32": ((lambda c=t(4, 16, 12), a=t(4, 16, 8), b=t(4, 8, 12): torch.baddbmm(c, a, b)),
                         ["aten::baddbmm"]),
        "matmul 3d x 2d": ((lambda a=t(2, 5, 8), b=t(8, 3): torch.matmul(a, b)), ["aten::matmul", "aten::mm"]),
        "matmul 2d x 3d": ((lambda a=t(5, 8), b=t(2, 8, 3): torch.matmul(a, b)), ["aten::matmul", "aten::bmm"]),
        "matmul broadcast 4d": ((lambda a=t(2, 1, 5, 8), b=t(1, 3, 8, 4): torch.matmul(a, b)),
                                ["aten::matmul", "aten::bmm"]),
        "matmul 1d x 2d": ((lambda a=t(8), b=t(8, 3): torch.matmul(a, b)), ["aten::matmul", "aten::mm"]),
        "linear 3d bias bf16": ((lambda x=t(2, 7, 32, dtype=bf), w=t(24, 32, dtype=bf), b=t(24, dtype=bf):
                                 F.linear(x, w, b)), ["aten::linear", "aten::addmm"]),
        "linear no bias fp32": ((lambda x=t(3, 5, 16), w=t(12, 16): F.linear(x, w)),
                                ["aten::linear", "aten::matmul", "aten::mm"]),
        "linear 1d input": ((lambda x=t(16), w=t(12, 16), b=t(12): F.linear(x, w, b)), ["aten::linear"]),
        "conv1d": ((lambda x=t(2, 4, 33), w=t(6, 4, 5): F.conv1d(x, w, stride=2, padding=1)),
                   ["aten::conv1d", "aten::convolution", "aten::_convolution"]),
        "conv2d groups dilation bias": ((lambda x=t(2, 4, 17, 15), w=t(8, 2, 3, 3), b=t(8):
                                         F.conv2d(x, w, b, stride=(2, 1), padding=(2, 1), dilation=2, groups=2)),
                                        ["aten::conv2d", "aten::convolution", "aten::_convolution"]),
        "conv2d bf16": ((lambda x=t(1, 3, 16, 16, dtype=bf), w=t(8, 3, 3, 3, dtype=bf): F.conv2d(x, w, padding=1)),
                        ["aten::conv2d", "aten::convolution"]),
        "conv3d": ((lambda x=t(1, 2, 6, 7, 8), w=t(4, 2, 3, 3, 3): F.conv3d(x, w, padding=1)),
                   ["aten::conv3d", "aten::convolution"]),
        "conv_transpose2d": ((lambda x=t(2, 4, 7, 7), w=t(4, 3, 3, 3): F.conv_transpose2d(
            x, w, stride=2, padding=1, output_padding=1, groups=2)),
            ["aten::conv_transpose2d", "aten::convolution", "aten::_convolution"]),
        "sdpa bf16": (_sdpa(2, 8, 8, 16, 24, 64, bf), ["aten::scaled_dot_product_attention"]),
        "sdpa causal fp32": (_sdpa(2, 4, 4, 32, 32, 32, fp32, is_causal=True),
                             ["aten::scaled_dot_product_attention"]),
        "sdpa gqa causal bf16": (_sdpa(1, 8, 2, 16, 16, 64, bf, is_causal=True, enable_gqa=True),
                                 ["aten::scaled_dot_product_attention"]),
        "sdpa mask": (_sdpa(2, 4, 4, 8, 12, 16, fp32, mask=(2, 1, 8, 12)), ["aten::scaled_dot_product_attention"]),
        "flash": (_flash(False), ["aten::_scaled_dot_product_flash_attention"]),
        "flash causal gqa": (_flash(True, hk=2), ["aten::_scaled_dot_product_flash_attention"]),
        "efficient bias": (_efficient(False), ["aten::_scaled_dot_product_efficient_attention"]),
        "efficient causal": (_efficient(True), ["aten::_scaled_dot_product_efficient_attention"]),
        "cudnn causal": (_cudnn(True), ["aten::_scaled_dot_product_cudnn_attention"]),
        "_scaled_mm fp8": (_scaled_mm(False), ["aten::_scaled_mm"]),
        "_scaled_mm fp8 bias": (_scaled_mm(True), ["aten::_scaled_mm"]),
    }


CASE_NAMES = [
    "mm fp32", "mm bf16", "addmm bias1d bf16", "addmm bias2d fp32", "bmm bf16", "baddbmm fp32",
    "matmul 3d x 2d", "matmul 2d x 3d", "matmul broadcast 4d", "matmul 1d x 2d", "linear 3d bias bf16",
    "linear no bias fp32", "linear 1d input", "conv1d", "conv2d groups dilation bias", "conv2d bf16",
    "conv3d", "conv_transpose2d", "sdpa bf16", "sdpa causal fp32", "sdpa gqa causal bf16", "sdpa mask",
    "flash", "flash causal gqa", "efficient bias", "efficient causal", "cudnn causal", "_scaled_mm fp8",
    "_scaled_mm fp8 bias",
]


def _rows_of(events: list[dict[str, Any]], start: float, end: float) -> list[Row]:
    rows = []
    for e in events:
        if e.get("cat") != "cpu_op" or not (start <= e.get("ts", -1) <= end):
            continue
        a = e.get("args", {})
        # as the store keeps them: JSON text
        rows.append((e["name"], json.dumps(a.get("Input Dims")), json.dumps(a.get("Input type")),
                     json.dumps(a.get("Concrete Inputs"))))
    return rows


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, list[Row], list[str]]]:
    """Every case run once under FlopCounterMode and once under the profiler (one session)."""
    if torch is None:
        pytest.skip("torch is not installed")
    from torch.profiler import ProfilerActivity, profile, record_function
    from torch.utils.flop_counter import FlopCounterMode

    CASES = _cases()
    assert sorted(CASES) == sorted(CASE_NAMES)
    flops: dict[str, int] = {}
    for name, (fn, _) in CASES.items():
        with FlopCounterMode(display=False) as counter:
            fn()
        flops[name] = counter.get_total_flops()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for name, (fn, _) in CASES.items():
            with record_function(f"case::{name}"):
                fn()
    path = tmp_path_factory.mktemp("prof") / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    out: dict[str, tuple[int, list[Row], list[str]]] = {}
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].startswith("case::"):
            name = e["name"][len("case::"):]
            out[name] = (flops[name], _rows_of(events, e["ts"], e["ts"] + e["dur"]), CASES[name][1])
    return out


@needs_torch
@pytest.mark.parametrize("case", CASE_NAMES)
def test_flops_agree_with_flop_counter_mode(case: str, profiled: dict[str, tuple[int, list[Row], list[str]]]) -> None:
    expected, rows, must_have = profiled[case]
    assert expected > 0
    names = {r[0] for r in rows}
    for must in must_have:
        assert must in names, f"{must} not profiled; got {sorted(names)}"
    checked = 0
    for name, dims, types, conc in rows:
        if name not in must_have and not name.startswith(("aten::_conv", "aten::mkldnn_conv",
                                                                  "aten::_slow_conv", "aten::slow_conv")):
            continue
        c = _cost(name, dims, types, conc)
        assert c.flops == expected, (name, dims, c, expected)
        assert c.bytes is not None and c.bytes > 0
        checked += 1
    assert checked >= len(must_have)


@needs_torch
def test_causal_attention_flops_are_not_halved_but_executed_flops_are(
        profiled: dict[str, tuple[int, list[Row], list[str]]]) -> None:
    # FlopCounterMode ignores causal masking; flops_executed counts the unmasked part only.
    expected, rows, _ = profiled["sdpa causal fp32"]
    row = next(r for r in rows if r[0] == "aten::scaled_dot_product_attention")
    c = _cost(*row)
    assert c.flops == expected and "causal" in c.model
    assert c.flops_executed == pytest.approx(expected * (32 * 33 / 2) / (32 * 32))
    _, rows, _ = profiled["sdpa bf16"]
    c = _cost(*next(r for r in rows if r[0] == "aten::scaled_dot_product_attention"))
    assert c.flops_executed == c.flops and "causal" not in c.model


def _meta_rows(fn: Callable[[], Any], tmp_path: Path) -> list[Row]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    return _rows_of(json.loads(path.read_text())["traceEvents"], -math.inf, math.inf)


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
def test_flash_and_efficient_forward_bshd_layout(tmp_path: Path, causal: bool) -> None:
    """aten::_flash_attention_forward / _efficient_attention_forward take [B, L, H, E].
    FlopCounterMode (torch 2.13) reads them as [B, H, L, E] (pytorch/pytorch#178064, PRs
    #184348/#196132), so we check against the formula of the same attention in BHLE layout."""
    from torch.utils.flop_counter import FlopCounterMode

    q = _t(2, 16, 8, 64, dtype=torch.bfloat16, device="meta")  # B, L, H, E
    k = _t(2, 40, 2, 64, dtype=torch.bfloat16, device="meta")  # GQA: 2 kv heads
    with FlopCounterMode(display=False) as counter:
        torch.ops.aten._scaled_dot_product_flash_attention(
            q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), 0.0, False)
    expected = counter.get_total_flops()
    rows = _meta_rows(lambda: (
        torch.ops.aten._flash_attention_forward(q, k, k, None, None, 16, 40, 0.0, causal, False),
        torch.ops.aten._efficient_attention_forward(q, k, k, None, None, None, None, None, 0.0,
                                                    1 if causal else 0)), tmp_path)
    seen = set()
    for row in rows:
        if row[0] in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward"):
            c = _cost(*row)
            assert c.flops == expected, (row, c)
            assert ("causal" in c.model) == causal
            assert c.bytes == (2 * 16 * 8 * 64 * 2 + 2 * (2 * 40 * 2 * 64)) * 2
            seen.add(row[0])
    assert len(seen) == 2


# --------------------------------------------------------------------------------------------
# hand-computed bytes (and FLOPs where FlopCounterMode has no formula)
# --------------------------------------------------------------------------------------------

def test_gemm_bytes() -> None:
    m, k, n = 8944, 1024, 1024
    c = _cost("aten::addmm", f"[[{n}],[{m},{k}],[{k},{n}],[],[]]",
              '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]', '["","","","1","1"]')
    assert c.flops == 2 * m * n * k
    assert c.bytes == (n + m * k + k * n + m * n) * 2
    assert (c.dtype, c.kind) == ("bf16", "gemm")
    lin = _cost("aten::linear", [[16, 559, k], [n, k], [n]], ["c10::BFloat16"] * 3)
    assert (lin.flops, lin.bytes) == (c.flops, c.bytes)
    mm = _cost("aten::mm", [[m, k], [k, n]], ["float", "float"])
    assert mm.bytes == (m * k + k * n + m * n) * 4 and mm.dtype == "fp32"
    bmm = _cost("aten::bmm", [[4, 16, 8], [4, 8, 12]], ["c10::Half", "c10::Half"])
    assert (bmm.flops, bmm.bytes, bmm.dtype) == (2 * 4 * 16 * 8 * 12, 4 * (16 * 8 + 8 * 12 + 16 * 12) * 2, "fp16")
    # matmul broadcasting: the shared operand is read once
    mt = _cost("aten::matmul", [[5, 8], [2, 8, 3]], ["float", "float"])
    assert mt.bytes == (5 * 8 + 2 * 8 * 3 + 2 * 5 * 3) * 4


def test_scaled_mm_bytes_and_dtype() -> None:
    m, k, n = 32, 64, 48
    c = _cost("aten::_scaled_mm", [[m, k], [k, n], [], [], [n], [], [], []],
              ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "c10::BFloat16", "", "Scalar",
               "Scalar"], ["", "", "", "", "", "", "15", "False"])
    assert c.flops == 2 * m * n * k
    assert c.bytes == m * k + k * n + 4 + 4 + n * 2 + m * n * 2  # A, B, scales, bias, bf16 out
    assert c.dtype == "fp8"
    no_out_dtype = _cost("aten::_scaled_mm", [[m, k], [k, n], [], []],
                         ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"])
    assert no_out_dtype.bytes == m * k + k * n + 8 + m * n  # output defaults to the input dtype


def test_sdpa_bytes_gqa_and_causal() -> None:
    b, hq, hk, lq, lk, e = 2, 8, 2, 16, 32, 64
    dims = [[b, hq, lq, e], [b, hk, lk, e], [b, hk, lk, e], [], [], [], [], []]
    types = ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    c = _cost("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "True", "", "True"])
    assert c.flops == 4 * b * hq * lq * lk * e
    assert c.bytes == (2 * b * hq * lq * e + 2 * b * hk * lk * e) * 2  # Q, K, V read, O written
    assert c.flops_executed == c.flops * (lq * (lq + 1) / 2) / (lq * lk)  # top-left causal mask
    assert c.model == "sdpa causal gqa" and c.dtype == "bf16" and c.kind == "attention"
    # flash-attn (Dao) layout [B, L, H, E] with bottom-right causal alignment
    fa = _cost("flash_attn::_flash_attn_forward", [[b, lq, hq, e], [b, lk, hk, e], [b, lk, hk, e], [], [], []],
               ["c10::Half"] * 3 + ["Scalar"] * 3, ["", "", "", "0.", "0.125", "True"])
    assert fa.flops == c.flops and fa.bytes == c.bytes and fa.dtype == "fp16"
    assert fa.flops_executed == c.flops * (lq * (lk - lq) + lq * (lq + 1) / 2) / (lq * lk)
    # a mask is read with its own shape
    masked = _cost("aten::scaled_dot_product_attention",
                   [[b, hq, lq, e], [b, hq, lk, e], [b, hq, lk, e], [b, 1, lq, lk]],
                   ["float", "float", "float", "bool"])
    assert masked.bytes == (2 * b * hq * lq * e + 2 * b * hq * lk * e) * 4 + b * lq * lk
    assert masked.dtype == "fp32"


def test_elementwise_bytes_with_broadcasting() -> None:
    n = 16 * 559 * 1024
    c = _cost("aten::mul", [[16, 559, 1024], [16, 559, 1]], ["float", "float"])
    assert (c.flops, c.bytes) == (n, (n + 16 * 559 + n) * 4)
    assert (c.kind, c.dtype) == ("elementwise", "fp32")
    # a wrapped Python scalar is a 0-dim double: read once, does not widen the result
    s = _cost("aten::add", [[16, 559, 1024], [], []], ["float", "double", "Scalar"], ["", "", "1"])
    assert s.bytes == n * 4 + 8 + n * 4 and s.dtype == "fp32"
    # a Scalar argument is not memory traffic
    p = _cost("aten::pow", [[16, 559, 1024], []], ["c10::BFloat16", "Scalar"], ["", "2"])
    assert p.bytes == 2 * n * 2 and p.dtype == "fp32"  # bf16 vector math runs in fp32
    # in place: the result has self's shape and dtype
    ip = _cost("aten::add_", [[4, 8], [8], []], ["c10::BFloat16", "float", "Scalar"])
    assert ip.bytes == 32 * 2 + 8 * 4 + 32 * 2
    cmp_ = _cost("aten::lt", [[3, 4], [4]], ["float", "float"])
    assert cmp_.bytes == (12 + 4) * 4 + 12  # bool result
    w = _cost("aten::where", [[4, 8], [4, 8], []], ["bool", "c10::BFloat16", "Scalar"], ["", "", "0."])
    assert w.bytes == 32 + 32 * 2 + 32 * 2
    dbl = _cost("aten::exp", [[10]], ["double"])
    assert dbl.dtype == "fp64"
    assert op_cost("aten::mul", [[4], [5]], ["float", "float"]) is None  # not broadcastable


def test_norm_bytes() -> None:
    x = [4, 8]
    ln = _cost("aten::layer_norm", [x, [], [8], [8], [], []],
               ["float", "ScalarList", "float", "float", "Scalar", "Scalar"], ["", "[8]", "", "", "1e-05", "True"])
    assert ln.bytes == 2 * 32 * 4 + 2 * 8 * 4
    assert ln.flops == 5 * 32 + 6 * 8 and ln.kind == "norm"
    nln = _cost("aten::native_layer_norm", [x, [], [8], [8], []],
                ["float", "ScalarList", "float", "float", "Scalar"], ["", "[8]", "", "", "1e-05"])
    assert (nln.flops, nln.bytes) == (ln.flops, ln.bytes)
    rms = _cost("aten::rms_norm", [[888, 2880], [], [2880], []], ["c10::BFloat16", "ScalarList", "c10::BFloat16", ""],
                ["", "[2880]", "", ""])
    n = 888 * 2880
    assert rms.bytes == 2 * n * 2 + 2880 * 2
    assert rms.flops == 888 * (2 * 2880 + 2) + 2 * n
    vllm = _cost("_C::rms_norm", [[888, 2880], [888, 2880], [2880], []], ["c10::BFloat16"] * 3 + ["Scalar"])
    assert (vllm.flops, vllm.bytes) == (rms.flops, rms.bytes)
    fused = _cost("_C::fused_add_rms_norm", [[888, 2880], [888, 2880], [2880], []], ["c10::BFloat16"] * 3 + ["Scalar"])
    assert fused.bytes == 4 * n * 2 + 2880 * 2 and fused.flops == rms.flops + n
    aiter = _cost("aiter::rmsnorm2d_fwd_with_add_ck", [[32, 2880]] * 4 + [[2880], [], []],
                  ["c10::BFloat16"] * 5 + ["Scalar", "Scalar"])
    assert aiter.bytes == 4 * 32 * 2880 * 2 + 2880 * 2
    gn = _cost("aten::group_norm", [[2, 6, 4, 4], [], [6], [6], [], []],
               ["float", "Scalar", "float", "float", "Scalar", "Scalar"], ["", "3", "", "", "1e-05", "True"])
    assert gn.bytes == 2 * 192 * 4 + 2 * 6 * 4


def test_embedding_and_indexing_bytes() -> None:
    e = _cost("aten::embedding", [[151936, 1024], [16, 559], [], [], []],
              ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "-1", "False", "False"])
    # the indices and the selected rows, not the whole table
    assert e.bytes == 16 * 559 * 8 + 2 * 16 * 559 * 1024 * 2
    assert (e.flops, e.kind) == (0, "embedding")
    isel = _cost("aten::index_select", [[151936, 1024], [], [8944]], ["c10::BFloat16", "Scalar", "long int"],
                 ["", "0", ""])
    assert isel.bytes == e.bytes
    g = _cost("aten::gather", [[100, 7], [], [100, 3], []], ["float", "Scalar", "long int", "Scalar"],
              ["", "1", "", "False"])
    assert g.bytes == 300 * 8 + 2 * 300 * 4
    ip = _cost("aten::index_put_", [[4, 8], [], [3, 8], []], ["float", "", "float", "Scalar"], ["", "", "", "False"])
    assert ip.bytes == 2 * 24 * 4
    assert op_cost("aten::index", [[888, 2880], []], ["c10::BFloat16", ""]) is None  # indices not recorded


def test_copy_and_conversion_bytes() -> None:
    n = 16 * 559 * 1024
    c = _cost("aten::_to_copy", [[16, 559, 1024], [], [], [], [], [], []],
              ["float", "Scalar", "", "", "", "Scalar", ""], ["", "15", "", "", "", "False", ""])
    assert c.bytes == n * 4 + n * 2 and c.kind == "copy" and c.flops == 0
    to = _cost("aten::to", [[16, 559, 1024], [], [], [], []], ["float", "Scalar", "Scalar", "Scalar", ""],
               ["", "15", "False", "False", ""])
    assert to.bytes == c.bytes
    noop = _cost("aten::to", [[1, 32, 1], [], [], [], []], ["float", "Scalar", "Scalar", "Scalar", ""],
                 ["", "6", "False", "False", ""])
    assert (noop.flops, noop.bytes, noop.kind) == (0, 0, "view")
    cp = _cost("aten::copy_", [[1, 1, 559], [1, 1, 559], []], ["float", "long int", "Scalar"], ["", "", "False"])
    assert cp.bytes == 559 * 4 + 559 * 8
    cl = _cost("aten::contiguous", [[16, 16, 559, 64], []], ["c10::BFloat16", "Scalar"], ["", "0"])
    assert cl.bytes == 2 * 16 * 16 * 559 * 64 * 2
    pad = _cost("aten::constant_pad_nd", [[888, 2880], [], []], ["c10::BFloat16", "ScalarList", "Scalar"],
                ["", "[0, 192]", "0."])
    assert pad.bytes == (888 * 2880 + 888 * 3072) * 2
    cat = _cost("aten::cat", [[[1, 559, 32], [1, 559, 32]], []], ["TensorList", "Scalar"], ["", "-1"])
    assert cat.bytes is None and cat.flops == 0  # TensorList element dtypes are not recorded
    kv = _cost("_C_cache_ops::reshape_and_cache_flash",
               [[888, 1, 64], [888, 1, 64], [4213816, 16, 1, 64], [4213816, 16, 1, 64], [888], [], [], []],
               ["c10::BFloat16", "c10::BFloat16", "unsigned char", "unsigned char", "long int", "", "float",
                "float"])
    assert kv.bytes == 2 * 888 * 64 * 2 + 888 * 8 + 2 * 888 * 64 * 1  # fp8 cache writes


def test_reduction_softmax_and_custom_bytes() -> None:
    m = _cost("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""],
              ["", "[-1]", "True", ""])
    assert m.bytes == (16 * 559 * 1024 + 16 * 559) * 4 and m.kind == "reduction"
    am = _cost("aten::argmax", [[2, 512], [], []], ["float", "Scalar", "Scalar"], ["", "-1", "True"])
    assert am.bytes == 1024 * 4 + 2 * 8
    full = _cost("aten::sum", [[4, 8]], ["float"])
    assert full.bytes == 32 * 4 + 4
    mx = _cost("aten::max", [[4, 8], [], []], ["c10::BFloat16", "Scalar", "Scalar"], ["", "1", "False"])
    assert mx.bytes == 32 * 2 + 4 * (2 + 8)  # values and int64 indices
    sm = _cost("aten::_softmax", [[4, 8], [], []], ["c10::BFloat16", "Scalar", "Scalar"], ["", "-1", "True"])
    assert sm.bytes == 32 * 2 + 32 * 4 and sm.flops == 3 * 32 and sm.kind == "softmax"
    silu = _cost("_C::silu_and_mul", [[888, 1024], [888, 2048]], ["c10::BFloat16", "c10::BFloat16"])
    assert silu.bytes == 888 * 3072 * 2 and silu.flops == 5 * 888 * 1024
    rope = _cost("_C::rotary_embedding", [[888], [888, 512], [888, 64], [], [131072, 64], []],
                 ["long int", "c10::BFloat16", "c10::BFloat16", "Scalar", "c10::BFloat16", "Scalar"],
                 ["", "", "", "64", "", "True"])
    rotated = 888 * (8 + 1) * 64
    assert rope.flops == 3 * rotated and rope.bytes == 2 * rotated * 2 + 888 * 8 + 888 * 64 * 2


def test_conv_bytes_and_roof() -> None:
    c = _cost("aten::convolution", [[2, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], [], [], []],
              ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
              ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    out = 2 * 4 * 4 * 4
    assert c.bytes == (2 * 3 * 64 + 4 * 27 + 4 + out) * 4
    assert c.flops == 2 * out * 27
    assert c.dtype == "tf32"  # cuDNN runs fp32 convolutions in TF32 by default
    # without Concrete Inputs the stride and padding are unknown
    assert op_cost("aten::convolution", [[2, 3, 8, 8], [4, 3, 3, 3], [4]], ["float"] * 3) is None


def test_views_and_allocations_move_nothing() -> None:
    for name, dims, types in [
        ("aten::view", [[16, 559], []], ["long int", "ScalarList"]),
        ("aten::reshape", [[16, 559], []], ["long int", "ScalarList"]),
        ("aten::transpose", [[1, 32, 559], [], []], ["float", "Scalar", "Scalar"]),
        ("aten::t", [[1024, 1024]], ["c10::BFloat16"]),
        ("aten::permute", [[2, 3], []], ["float", "ScalarList"]),
        ("aten::expand", [[1, 32, 1], [], []], ["float", "ScalarList", "Scalar"]),
        ("aten::slice", [[1, 32], [], [], [], []], ["float"] + ["Scalar"] * 4),
        ("aten::select", [[1], [], []], ["int", "Scalar", "Scalar"]),
        ("aten::as_strided", [[559], [], [], []], ["long int", "ScalarList", "ScalarList", ""]),
        ("aten::unsqueeze", [[559], []], ["long int", "Scalar"]),
        ("aten::split_with_sizes", [[888, 640], [], []], ["c10::BFloat16", "ScalarList", "Scalar"]),
        ("detach", [[4096, 2798]], ["float"]),
    ]:
        c = _cost(name, dims, types)
        assert (c.flops, c.bytes, c.kind, c.dtype) == (0, 0, "view", None), name
    for name in ("aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resize_"):
        c = _cost(name, "[[], [], []]", None)
        assert (c.flops, c.bytes, c.kind) == (0, 0, "alloc")


def test_dtype_keys_and_sizes() -> None:
    table = {
        "c10::BFloat16": ("bf16", 2), "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2),
        "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
        "c10::Float8_e5m2fnuz": ("fp8", 1), "signed char": ("int8", 1), "int8": ("int8", 1),
        "unsigned char": ("int8", 1), "c10::Float4_e2m1fn_x2": ("fp4", 1), "long int": (None, 8),
        "int": (None, 4), "bool": (None, 1), "c10::complex<float>": ("fp32", 8), "long": (None, 8),
        "bf16": ("bf16", 2), "torch.float16": ("fp16", 2),
    }
    for t, (key, size) in table.items():
        assert dtype_key(t) == key, t
        assert bytes_per_element(t) == size, t
    for t in ("Scalar", "ScalarList", "TensorList", "", "GenericList", "nonsense"):
        assert dtype_key(t) is None and bytes_per_element(t) is None
    assert dtype_key(None) is None and bytes_per_element(42) is None  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# odd input
# --------------------------------------------------------------------------------------------

ODD_INPUTS: list[tuple[Any, Any, Any]] = [
    (None, None, None), ("", "", ""), ("[]", "[]", "[]"), ("[[", "[", "{"), ("null", "null", "null"),
    ("{}", "{}", "{}"), ("[[-1, 4], [4, 2]]", '["float", "float"]', None),
    ('[["a", 4], [4, 2]]', '["float", "float"]', None), ("[[4, 4], [5, 2]]", '["float", "float"]', None),
    ("[[], []]", '["Scalar", "Scalar"]', '["1", "2"]'), ("[[[4, 4], [4, 4]], []]", '["TensorList", "Scalar"]', None),
    ("[[4, 4], [4, 2]]", None, None), ("[[4, 4], [4, 2]]", '["float"]', None),
    ("[[4, 4], [4, 2]]", '["weird", "type"]', '[1, 2]'), ("[[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []]",
                                                        '["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]',
                                                        '["", "", "", "[0]", "[a]", "[1, 1, 1]", "0"]'),
    ([[1e30, 2]], ["float"], [None]), ([[True, 2]], ["float"], [True]), (b"[[4, 4]]", b'["float"]', b"[]"),
    ([[4, 4], [4, 4], [4, 4], [4, 4]], ["float"] * 4, ["", "", "", "", "", "", "x"]),
    ([[0, 4], [4, 0]], ["float", "float"], None), ([[2, 8, 0, 64]] * 3, ["c10::BFloat16"] * 3, ["", "", "", "", "0.", "True"]),
    (42, 42, 42), ([[4, 4]], [[["nested"]]], [[1]]),
]


def test_odd_input_gives_none_never_an_exception() -> None:
    rng = random.Random(7)
    names = sorted(covered_op_names())
    for name in names:
        for dims, types, conc in ODD_INPUTS:
            c = op_cost(name, dims, types, conc)
            assert c is None or isinstance(c, OpCost)
            if c is not None:
                for v in (c.flops, c.bytes, c.flops_executed):
                    assert v is None or (math.isfinite(v) and v >= 0)
    # random shapes and types against every model
    pool_types = ["float", "c10::BFloat16", "long int", "bool", "Scalar", "", "TensorList", "double"]
    for _ in range(3000):
        name = rng.choice(names)
        n = rng.randint(0, 9)
        dims = [[rng.randint(0, 6) for _ in range(rng.randint(0, 4))] for _ in range(n)]
        types = [rng.choice(pool_types) for _ in range(rng.randint(0, n))]
        conc = [rng.choice(["", "1", "-1", "True", "[0, 1]", "[]", "15", "x"]) for _ in range(n)]
        c = op_cost(name, json.dumps(dims), json.dumps(types), json.dumps(conc))
        assert c is None or isinstance(c, OpCost)
    assert op_cost(None, [[4, 4], [4, 4]], ["float", "float"]) is None  # type: ignore[arg-type]
    assert op_cost("aten::not_a_real_op", [[4, 4]], ["float"]) is None
    assert op_cost("aten::mm", "[[4, 4], [5, 4]]", '["float", "float"]') is None  # K mismatch
    assert op_cost("aten::mm", "[[4, 4]]", '["float"]') is None  # missing operand
    assert op_cost("aten::addmm", "[[], [], [], [], []]", '["", "", "", "Scalar", "Scalar"]') is None
    assert op_cost("vllm::unified_attention_with_output",
                   [[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64], [], [], []],
                   ["c10::BFloat16"] * 4 + ["", "", ""]) is None  # context lengths not in the trace
    # the name may come without the aten:: namespace
    assert op_cost("mm", [[2, 3], [3, 4]], ["float", "float"]) == op_cost("aten::mm", [[2, 3], [3, 4]], ["float", "float"])


# --------------------------------------------------------------------------------------------
# real traces: coverage, invariants, TraceLens conventions
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _trace_rows(path: Path) -> list[tuple[str, Any, Any, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:  # type: ignore[operator]
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    rows = []
    for e in events:
        if str(e.get("cat", "")).lower() not in ("cpu_op", "operator"):
            continue
        a = e.get("args") or {}
        if not a.get("Input Dims"):
            continue
        rows.append((e["name"], a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs")))
    return rows


GEMM_AND_ATTENTION = {"aten::mm", "aten::addmm", "aten::linear", "aten::bmm", "aten::matmul",
                      "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                      "aten::_flash_attention_forward"}


@pytest.mark.parametrize("rel", ["tracelens/qwen1.5-0.5b-chat/h100.json.gz",
                                 "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz"])
def test_coverage_on_qwen_traces(rel: str) -> None:
    rows = _trace_rows(shared_trace(rel))
    counts = Counter(r[0] for r in rows)
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, dims, types, conc in rows:
        c = op_cost(name, json.dumps(dims), json.dumps(types), json.dumps(conc))
        if name in GEMM_AND_ATTENTION:
            assert c is not None and c.flops and c.flops > 0 and c.bytes and c.bytes > 0, (name, dims)
            assert c.dtype in ("bf16", "fp32")
            sums[name][0] += c.flops
            sums[name][1] += c.bytes
    # the 20 most frequent ops with shapes all have a model (views included, at zero cost)
    for name, _ in counts.most_common(20):
        row = next(r for r in rows if r[0] == name)
        assert op_cost(*row) is not None, name
    # every linear is one GEMM: the wrappers and their GEMM children carry the same totals
    assert sums["aten::linear"] == pytest.approx([sums["aten::mm"][0] + sums["aten::addmm"][0],
                                                  sums["aten::mm"][1] + sums["aten::addmm"][1]])
    assert sums["aten::scaled_dot_product_attention"] == sums["aten::_scaled_dot_product_flash_attention"] \
        == sums["aten::_flash_attention_forward"]


def _tracelens_gemm(m: int, n: int, k: int, bias: bool, bpe: int) -> tuple[int, int]:
    """TraceLens PerfModel/perf_model.py GEMM.flops_func / bytes_func (bias read as 1xN)."""
    return 2 * m * n * k + (m * n if bias else 0), (m * k + k * n + m * n + (n if bias else 0)) * bpe


@pytest.mark.parametrize("rel", ["tracelens/qwen1.5-0.5b-chat/h100.json.gz",
                                 "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz",
                                 "tracelens/b200_eager.json.gz"])
def test_tracelens_conventions_on_real_traces(rel: str) -> None:
    """GEMM FLOPs within 0.5% and bytes within 10% of TraceLens's formulas; SDPA bytes equal and
    its causal FLOPs (halved) within 0.5% of flops_executed; elementwise bytes within 10%."""
    rows = _trace_rows(shared_trace(rel))
    checked = Counter()
    for name, dims, types, conc in rows:
        c = op_cost(name, dims, types, conc)
        if name in ("aten::mm", "aten::addmm"):
            a, b = (dims[0], dims[1]) if name == "aten::mm" else (dims[1], dims[2])
            tl_flops, tl_bytes = _tracelens_gemm(a[0], b[1], a[1], name == "aten::addmm",
                                                 bytes_per_element(types[0 if name == "aten::mm" else 1]) or 0)
            assert c is not None and c.flops is not None and c.bytes is not None
            assert abs(c.flops - tl_flops) <= 0.005 * tl_flops, (name, dims)
            assert abs(c.bytes - tl_bytes) <= 0.10 * tl_bytes, (name, dims)
            checked["gemm"] += 1
        elif name == "aten::_scaled_dot_product_flash_attention":
            bsz, h, lq, e = dims[0]
            _, hk, lk, _ = dims[1]
            tl_flops = 4 * bsz * h * lq * lk * e / (2 if conc[4] == "True" else 1)
            tl_bytes = (2 * bsz * h * lq * e + 2 * bsz * hk * lk * e) * 2
            assert c is not None and c.bytes == tl_bytes
            assert c.flops_executed is not None and abs(c.flops_executed - tl_flops) <= 0.005 * tl_flops
            checked["sdpa"] += 1
        elif name in ("aten::mul", "aten::add", "aten::silu", "aten::neg", "aten::rsqrt") and c is not None:
            # TraceLens BinaryElementwise/UnaryElementwise: inputs (a scalar as 1 element) + output
            shapes = [tuple(d) for d, t in zip(dims[:2], types[:2]) if bytes_per_element(t)]
            sizes = [math.prod(s) * (bytes_per_element(t) or 4) for s, t in zip(shapes, types)]
            out = max(math.prod(s) for s in shapes) * (bytes_per_element(types[0]) or 4)
            tl_bytes = sum(sizes) + out
            assert c.bytes is not None and abs(c.bytes - tl_bytes) <= 0.10 * tl_bytes, (name, dims, types)
            checked["elementwise"] += 1
    assert checked["gemm"] > 0


def test_cpu_fixture_trace_is_covered() -> None:
    path = FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("fixture trace absent")
    rows = _trace_rows(path)
    missing = {r[0] for r in rows if op_cost(*r) is None}
    # everything an LLM forward pass records is modelled (cat has bytes=None, not a None cost)
    assert missing <= {"aten::arange"}, missing


# --------------------------------------------------------------------------------------------
# aten::_cudnn_attention_forward: torch 2.11's op for cuDNN SDPA (the default attention on Hopper)
# --------------------------------------------------------------------------------------------

def _cudnn_row(q: list[int], k: list[int], causal: bool, cu: int | None = None, max_len: int = 0,
               dtype: str = "c10::BFloat16") -> tuple[list, list, list]:
    """The trace row of one call (schema of torch 2.13: query, key, value, attn_bias, cum_seq_q,
    cum_seq_k, max_q, max_k, compute_log_sumexp, dropout_p, is_causal, return_debug_mask)."""
    cum = [cu] if cu is not None else []
    dims = [q, k, k, [], cum, cum, [], [], [], [], [], []]
    types = [dtype] * 3 + ["", "int" if cu else "", "int" if cu else "", "Scalar", "Scalar", "Scalar", "Scalar",
                           "Scalar", "Scalar"]
    conc = ["", "", "", "", "", "", str(max_len), str(max_len), "True", "0.0", str(causal), "False"]
    return dims, types, conc


@pytest.mark.parametrize("q,k", [([2, 8, 128, 64], [2, 8, 512, 64]), ([4, 32, 1, 128], [4, 8, 700, 128]),
                                 ([1, 16, 333, 80], [1, 16, 333, 80])])
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_attention_forward_counts_as_sdpa(q: list[int], k: list[int], causal: bool) -> None:
    """Batched [B, H, L, E]: FlopCounterMode counts its parent _scaled_dot_product_cudnn_attention
    with sdpa_flop_count; the op itself must agree (GQA: key heads fewer than query heads)."""
    from torch.utils.flop_counter import sdpa_flop_count

    kv_expanded = [k[0], q[1], k[2], k[3]]  # the formula of torch takes key/value with query's heads
    expected = sdpa_flop_count(q, kv_expanded, kv_expanded)
    c = _cost("aten::_cudnn_attention_forward", *_cudnn_row(q, k, causal))
    assert c.flops == expected and c.kind == "attention" and c.dtype == "bf16"
    assert ("causal" in c.model) == causal
    if causal and q[2] > 1:
        assert c.flops_executed < c.flops  # masked half not executed
    # q, k, v read and the output written, in bf16
    b, h, lq, e = q
    assert c.bytes == 2 * (b * h * lq * e + 2 * math.prod(k) + b * h * lq * e)


def test_cudnn_attention_forward_packed_varlen() -> None:
    """Packed [T, H, E] with cum_seq_q/k of 4 entries (3 sequences) and max 120: one sequence at
    the maximum, the other two sharing the rest (the estimate the flash varlen model uses)."""
    c = _cost("aten::_cudnn_attention_forward", *_cudnn_row([300, 8, 64], [300, 2, 64], False, cu=4, max_len=120))
    pairs = [(1, 120, 120), (2, 90, 90)]
    assert c.flops == sum(n * 4 * 8 * lq * lk * 64 for n, lq, lk in pairs)
    assert "varlen" in c.model and "gqa" in c.model
