"""Normalisations: layer, RMS, group and batch norm."""
from __future__ import annotations

from ._core import OpCost, _Call, _cost, _numel, _register, _to_int_list, _vector_roof


def _layer_norm_flops(n: int, c: int) -> int:
    # TraceLens Normalization (training=True: statistics computed): 5 per element + 6 per channel
    return 5 * n + 6 * c


def _rms_norm_flops(n: int, c: int, affine: bool) -> float:
    # TraceLens RMSNorm: rows * (2C + 2) for the rsqrt of the mean square, then 1 (2 with weight)
    rows = n / c if c else 0
    return rows * (2 * c + 2) + n * (2 if affine else 1)


def _norm_sizes(call: _Call) -> tuple[int, int] | None:
    """(elements, normalized size) of a norm's input from its normalized_shape argument (else
    the weight's shape, else the last dim); None when they do not divide."""
    s = call.shape(0)
    if s is None:
        return None
    ns = _to_int_list(call.c(1))
    c = _numel(ns) if ns else (_numel(call.shape(2) or ()) if call.is_tensor(2) else (s[-1] if s else 1))
    n = _numel(s)
    if c <= 0 or n % c:
        return None
    return n, c


def _layer_norm(call: _Call) -> OpCost | None:
    # layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable)
    sizes = _norm_sizes(call)
    if sizes is None:
        return None
    n, c = sizes
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(2) + call.nbytes(3)
    return _cost(_layer_norm_flops(n, c), nbytes, _vector_roof(call, [0]), "norm", "layer_norm")


def _rms_norm(call: _Call) -> OpCost | None:
    # rms_norm(input, normalized_shape, weight?, eps) ; _fused_rms_norm(input, shape, weight, eps)
    sizes = _norm_sizes(call)
    if sizes is None:
        return None
    n, c = sizes
    affine = call.nd_tensor(2)
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(2)
    return _cost(_rms_norm_flops(n, c, affine), nbytes, _vector_roof(call, [0]), "norm", "rms_norm")


def _group_norm(call: _Call) -> OpCost | None:
    # group_norm(input, num_groups, weight?, bias?, eps, cudnn) ;
    # native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
    s = call.shape(0)
    if s is None or len(s) < 2:
        return None
    w_i, b_i = (1, 2) if call.name == "aten::native_group_norm" else (2, 3)
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(w_i) + call.nbytes(b_i)
    return _cost(_layer_norm_flops(_numel(s), s[1]), nbytes, _vector_roof(call, [0]), "norm",
                 "group_norm")


def _batch_norm(call: _Call) -> OpCost | None:
    # batch_norm / native_batch_norm / _native_batch_norm_legit / cudnn_ / miopen_batch_norm:
    # (input, weight, bias, running_mean, running_var, training, ...);
    # _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, ...)
    s = call.shape(0)
    if s is None or len(s) < 2:
        return None
    training = False if call.name.endswith("no_training") else bool(call.c_bool(5, False))
    c = s[1]
    n = _numel(s)
    params = sum(call.nbytes(i) for i in range(1, 5))
    nbytes = call.nbytes(0) + call.written(0) + params
    if training:
        nbytes += call.nbytes(3) + call.nbytes(4)  # running statistics updated
    flops = (5 * n if training else 2 * n) + 6 * c
    return _cost(flops, nbytes, _vector_roof(call, [0]), "norm", "batch_norm")


_register(["aten::layer_norm", "aten::native_layer_norm"], _layer_norm)
_register(["aten::rms_norm", "aten::_fused_rms_norm"], _rms_norm)
_register(["aten::group_norm", "aten::native_group_norm"], _group_norm)
_register(["aten::batch_norm", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
           "aten::_native_batch_norm_legit_no_training", "aten::cudnn_batch_norm",
           "aten::miopen_batch_norm"], _batch_norm)
