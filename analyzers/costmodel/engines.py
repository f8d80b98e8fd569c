"""Serving engines' custom ops (vLLM, AITER, SGLang): fused RMSNorm(+add, +quant), gated
activations, rotary, KV-cache writes, fp8/int8 quantisation."""
from __future__ import annotations

from typing import Sequence

from ._core import (
    Handler, OpCost, _Call, _cost, _numel, _register, _vector_roof, bytes_per_element,
)
from .norms import _rms_norm_flops


def _custom_rms(x_i: int, w_i: int, reads: Sequence[int], writes: Sequence[tuple[int, int | None]],
                add: bool, model: str, out_type: str | None = None) -> Handler:
    """A fused RMSNorm: ``reads`` are argument indices read; ``writes`` are (argument or -1 for
    a returned tensor, index of the argument whose shape and dtype it has)."""

    def handler(call: _Call) -> OpCost | None:
        x, w = call.shape(x_i), call.shape(w_i)
        if x is None or w is None or len(w) != 1 or not x or x[-1] != w[0]:
            return None
        n, c = _numel(x), w[0]
        nbytes = sum(call.nbytes(i) for i in reads)
        for arg, like in writes:
            if arg >= 0 and call.is_tensor(arg):
                nbytes += call.written(arg)
            elif like is not None:
                t = out_type or call.type(like)
                nbytes += _numel(call.shape(like) or ()) * (bytes_per_element(t) or 0)
        flops = _rms_norm_flops(n, c, True) + (n if add else 0)
        return _cost(flops, nbytes, _vector_roof(call, [x_i]), "norm", model)

    return handler


# vLLM _C::rms_norm(out, input, weight, eps)
_register(["_C::rms_norm", "aiter::rmsnorm", "sgl_kernel::rmsnorm"],
          _custom_rms(1, 2, [1, 2], [(0, 1)], False, "rms_norm"))
# vLLM _C::fused_add_rms_norm(input, residual, weight, eps): both updated in place
_register(["_C::fused_add_rms_norm", "sgl_kernel::fused_add_rmsnorm"],
          _custom_rms(0, 2, [0, 1, 2], [(0, 0), (1, 1)], True, "fused_add_rms_norm"))
# vLLM ROCm wrappers: rocm_aiter_rms_norm(x, weight, eps) -> out
_register(["vllm::rocm_aiter_rms_norm", "aiter::rms_norm", "aiter::rmsnorm2d_fwd",
           "aiter::rmsnorm2d_fwd_ck"],
          _custom_rms(0, 1, [0, 1], [(-1, 0)], False, "rms_norm"))
# rocm_aiter_rmsnorm2d_fwd_with_add(x, residual, weight, eps) -> (out, residual_out)
_register(["vllm::rocm_aiter_rmsnorm2d_fwd_with_add"],
          _custom_rms(0, 2, [0, 1, 2], [(-1, 0), (-1, 1)], True, "fused_add_rms_norm"))
# aiter::rmsnorm2d_fwd_with_add_ck(out, input, residual_in, residual_out, weight, eps, ...)
_register(["aiter::rmsnorm2d_fwd_with_add_ck", "aiter::rmsnorm2d_fwd_with_add",
           "aiter::add_rmsnorm"],
          _custom_rms(1, 4, [1, 2, 4], [(0, 1), (3, 2)], True, "fused_add_rms_norm"))
# _C::rms_norm_static_fp8_quant(out, input, weight, scale, eps)
_register(["_C::rms_norm_static_fp8_quant", "_C::rms_norm_dynamic_per_token_quant"],
          _custom_rms(1, 2, [1, 2, 3], [(0, 1)], False, "rms_norm+quant"))
# _C::fused_add_rms_norm_static_fp8_quant(out, input, residual, weight, scale, eps)
_register(["_C::fused_add_rms_norm_static_fp8_quant"],
          _custom_rms(1, 3, [1, 2, 3, 4], [(0, 1), (2, 2)], True, "fused_add_rms_norm+quant"))


def _act_and_mul(flops_per: int, model: str) -> Handler:
    """vLLM/AITER/SGLang gated activations: (out[..., d], input[..., 2d])."""

    def handler(call: _Call) -> OpCost | None:
        out, x = call.shape(0), call.shape(1)
        if out is None or x is None or not out or not x or x[-1] != 2 * out[-1] \
                or tuple(x[:-1]) != tuple(out[:-1]):
            return None
        n = _numel(out)
        return _cost(flops_per * n, call.nbytes(1) + call.written(0), _vector_roof(call, [1]),
                     "elementwise", model)

    return handler


# FLOPs per output element as in TraceLens (aiter_silu_and_mul 5, gelu 8, gelu_tanh 10)
_register(["_C::silu_and_mul", "_C::mul_and_silu", "aiter::silu_and_mul",
           "sgl_kernel::silu_and_mul"], _act_and_mul(5, "silu_and_mul"))
_register(["_C::gelu_and_mul", "aiter::gelu_and_mul", "sgl_kernel::gelu_and_mul"],
          _act_and_mul(8, "gelu_and_mul"))
_register(["_C::gelu_tanh_and_mul", "aiter::gelu_tanh_and_mul",
           "sgl_kernel::gelu_tanh_and_mul"], _act_and_mul(10, "gelu_tanh_and_mul"))


def _rotary(call: _Call) -> OpCost | None:
    # rotary_embedding(positions, query, key?, head_size, cos_sin_cache, is_neox, ...)
    pos, q, cache = call.shape(0), call.shape(1), call.shape(4)
    head = call.c_int(3)
    if pos is None or q is None or cache is None or not q or len(cache) != 2:
        return None
    tokens = _numel(pos)
    head = head or q[-1]
    rot = cache[1]
    if tokens <= 0 or head <= 0 or rot > head:
        return None
    k = call.shape(2)
    heads = _numel(q) / (tokens * head)
    if k is not None:
        heads += _numel(k) / (tokens * head)
    if heads != int(heads):
        return None
    rotated = tokens * int(heads) * rot
    # the rotated slice of q and k is read and written in place; positions and the cache rows
    # they select are read once
    nbytes = 2 * rotated * call.bpe(1) + call.nbytes(0) + tokens * rot * call.bpe(4)
    return _cost(3 * rotated, nbytes, _vector_roof(call, [1]), "elementwise", "rotary_embedding")


_register(["_C::rotary_embedding", "_C::batched_rotary_embedding", "sgl_kernel::rotary_embedding"],
          _rotary)


def _kv_cache_write(call: _Call) -> OpCost | None:
    # reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, dtype, k_scale, v_scale)
    k, v = call.shape(0), call.shape(1)
    if k is None or v is None:
        return None
    kc_bpe = call.bpe(2) if call.is_tensor(2) else call.bpe(0)
    vc_bpe = call.bpe(3) if call.is_tensor(3) else call.bpe(1)
    nbytes = call.nbytes(0) + call.nbytes(1) + call.nbytes(4) \
        + _numel(k) * kc_bpe + _numel(v) * vc_bpe
    model = call.name.split("::")[-1]
    if not call.is_tensor(2):
        model += " (cache dtype taken as key dtype)"
    return _cost(0, nbytes, "fp32", "copy", model)


_register(["_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache",
           "vllm::unified_kv_cache_update"], _kv_cache_write)


def _quant(out_i: int, in_i: int, model: str) -> Handler:
    """vLLM fp8 quantisation: (out, input, scale, ...): reads input and scales, writes out."""

    def handler(call: _Call) -> OpCost | None:
        out, x = call.shape(out_i), call.shape(in_i)
        if out is None or x is None or _numel(out) != _numel(x):
            return None
        n = _numel(x)
        extra = sum(call.nbytes(i) for i in range(call.n) if i not in (out_i, in_i))
        return _cost(2 * n, call.nbytes(in_i) + call.written(out_i) + extra,
                     _vector_roof(call, [in_i]), "elementwise", model)

    return handler


_register(["_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
           "_C::dynamic_per_token_scaled_fp8_quant", "_C::static_scaled_int8_quant",
           "_C::dynamic_scaled_int8_quant"], _quant(0, 1, "quant"))
