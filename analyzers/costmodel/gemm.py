"""GEMM family: mm, addmm, bmm, baddbmm, matmul, linear, scaled/int/cutlass mm, vLLM's GEMM."""
from __future__ import annotations

from typing import Sequence

from ._core import (
    OpCost, Shape, _Call, _broadcast, _cost, _matrix_roof, _numel, _register, _result_type,
    _type_from_code, bytes_per_element,
)


def _gemm(flops: float, nbytes: float, types: Sequence[str], model: str) -> OpCost:
    return _cost(flops, nbytes, _matrix_roof(types), "gemm", model)


def _mm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    out = m * n * call.bpe(0)
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + out,
                 [call.type(0), call.type(1)], "mm")


def _addmm(call: _Call) -> OpCost | None:
    c, a, b = call.shape(0), call.shape(1), call.shape(2)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    if c is not None and _broadcast([c, (m, n)]) != (m, n):
        return None
    name = call.name.split("::")[-1].rstrip("_")
    out_t = call.type(1)
    out = m * n * (bytes_per_element(out_t) or 0)
    # FlopCounterMode counts addmm as its mm (the bias add is not counted); the bias is read.
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], name)


def _bmm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    bt, m, k, n = a[0], a[1], a[2], b[2]
    out = bt * m * n * call.bpe(0)
    return _gemm(2 * bt * m * n * k, call.nbytes(0) + call.nbytes(1) + out,
                 [call.type(0), call.type(1)], "bmm")


def _baddbmm(call: _Call) -> OpCost | None:
    c, a, b = call.shape(0), call.shape(1), call.shape(2)
    if a is None or b is None or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    bt, m, k, n = a[0], a[1], a[2], b[2]
    if c is not None and _broadcast([c, (bt, m, n)]) != (bt, m, n):
        return None
    out = bt * m * n * call.bpe(1)
    return _gemm(2 * bt * m * n * k, call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], "baddbmm")


def _matmul_shapes(a: Shape, b: Shape) -> tuple[float, Shape] | None:
    """FLOPs and output shape of torch.matmul semantics (1-D, 2-D, batched, broadcast)."""
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return (2 * a[0], ()) if a[0] == b[0] else None
    if len(a) == 2 and len(b) == 1:
        return (2 * a[0] * a[1], (a[0],)) if a[1] == b[0] else None
    if len(a) == 1:
        k, n = b[-2], b[-1]
        if a[0] != k:
            return None
        return 2 * _numel(b[:-2]) * k * n, tuple(b[:-2]) + (n,)
    if len(b) == 1:
        if a[-1] != b[0]:
            return None
        return 2 * _numel(a[:-1]) * a[-1], tuple(a[:-1])
    m, k = a[-2], a[-1]
    k2, n = b[-2], b[-1]
    if k != k2:
        return None
    batch = _broadcast([tuple(a[:-2]), tuple(b[:-2])])
    if batch is None:
        return None
    return 2 * _numel(batch) * m * n * k, batch + (m, n)


def _matmul(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None:
        return None
    res = _matmul_shapes(a, b)
    if res is None:
        return None
    flops, out = res
    out_t = _result_type(call, [0, 1]) or call.type(0)
    nbytes = call.nbytes(0) + call.nbytes(1) + _numel(out) * (bytes_per_element(out_t) or 0)
    model = {"aten::dot": "dot", "aten::vdot": "dot", "aten::mv": "mv"}.get(call.name, "matmul")
    return _gemm(flops, nbytes, [call.type(0), call.type(1)], model)


def _addmv(call: _Call) -> OpCost | None:
    c, a, x = call.shape(0), call.shape(1), call.shape(2)
    if a is None or x is None or len(a) != 2 or len(x) != 1 or a[1] != x[0]:
        return None
    if c is not None and _broadcast([c, (a[0],)]) != (a[0],):
        return None
    out = a[0] * call.bpe(1)
    return _gemm(2 * a[0] * a[1], call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], "addmv")


def _linear_like(call: _Call, x_i: int, w_i: int, b_i: int | None, model: str,
                 out_type: str | None = None) -> OpCost | None:
    """y = x @ w.T (+ b) with w of shape [N, K] and x of shape [..., K]."""
    x, w = call.shape(x_i), call.shape(w_i)
    if x is None or w is None or len(x) < 1 or len(w) != 2 or x[-1] != w[1]:
        return None
    n, k = w
    m = _numel(x[:-1])
    out_t = out_type or call.type(x_i)
    out = m * n * (bytes_per_element(out_t) or 0)
    bias = call.nbytes(b_i) if b_i is not None else 0
    if b_i is not None and call.is_tensor(b_i):
        bshape = call.shape(b_i) or ()
        if _broadcast([bshape, tuple(x[:-1]) + (n,)]) is None:
            return None
    return _gemm(2 * m * n * k, call.nbytes(x_i) + call.nbytes(w_i) + bias + out,
                 [call.type(x_i), call.type(w_i)], model)


def _linear(call: _Call) -> OpCost | None:
    has_bias = call.nd_tensor(2)
    return _linear_like(call, 0, 1, 2 if has_bias else None,
                        "linear+bias" if has_bias else "linear")


def _scaled_mm(call: _Call) -> OpCost | None:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    if _matrix_roof([call.type(0)]) == "fp4":  # Float4_e2m1fn_x2 packs 2 values: K is 2x the dim
        k *= 2
    out_t = _type_from_code(call.c(6)) or call.type(0)
    reads = sum(call.nbytes(i) for i in range(min(call.n, 6)))
    out = m * n * (bytes_per_element(out_t) or 0)
    return _gemm(2 * m * n * k, reads + out, [call.type(0), call.type(1)], "_scaled_mm")


def _int_mm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + m * n * 4,
                 [call.type(0), call.type(1)], "_int_mm")


def _cutlass_scaled_mm(call: _Call) -> OpCost | None:
    # vLLM _C::cutlass_scaled_mm(out[M,N], a[M,K], b[K,N], a_scales, b_scales, bias?)
    out, a, b = call.shape(0), call.shape(1), call.shape(2)
    if out is None or a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    reads = sum(call.nbytes(i) for i in range(1, call.n))
    return _gemm(2 * m * n * k, reads + m * n * call.bpe(0), [call.type(1), call.type(2)],
                 "cutlass_scaled_mm")


_register(["aten::mm"], _mm)
_register(["aten::addmm", "aten::addmm_", "aten::_addmm_activation"], _addmm)
_register(["aten::bmm"], _bmm)
_register(["aten::baddbmm", "aten::baddbmm_"], _baddbmm)
_register(["aten::matmul", "aten::dot", "aten::vdot", "aten::mv"], _matmul)
_register(["aten::addmv", "aten::addmv_"], _addmv)
_register(["aten::linear"], _linear)
_register(["aten::_scaled_mm"], _scaled_mm)
_register(["aten::_int_mm"], _int_mm)
_register(["_C::cutlass_scaled_mm"], _cutlass_scaled_mm)
_register(["vllm::rocm_unquantized_gemm"],
          lambda c: _linear_like(c, 0, 1, 2 if c.nd_tensor(2) else None, "rocm_unquantized_gemm"))
