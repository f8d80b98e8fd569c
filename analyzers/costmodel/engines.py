"""Serving engines' custom ops (vLLM, AITER, SGLang): fused RMSNorm(+add, +quant), gated
activations and GELUs, rotary and fused QK-norm+rotary, KV-cache writes, fp8/int8 quantisation,
AITER's bf16 GEMM and the MoE routing ops of triton_kernels (``TopK``, ``SortTokens``).
Attention of the engines is in :mod:`.engine_attention` and :mod:`.steps`."""
from __future__ import annotations

from typing import Sequence

from ._core import (
    Handler, OpCost, _Call, _cost, _matrix_roof, _numel, _register, _type_from_code, _vector_roof,
    bytes_per_element,
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


# vLLM _C::rms_norm(out, input, weight, eps); SGLang's (out, input, weight, eps, enable_pdl), and
# its Gemma variants (weight + 1: one more add per element, not counted)
_register(["_C::rms_norm", "aiter::rmsnorm", "sgl_kernel::rmsnorm", "sgl_kernel::gemma_rmsnorm"],
          _custom_rms(1, 2, [1, 2], [(0, 1)], False, "rms_norm"))
# vLLM _C::fused_add_rms_norm(input, residual, weight, eps): both updated in place
_register(["_C::fused_add_rms_norm", "sgl_kernel::fused_add_rmsnorm",
           "sgl_kernel::gemma_fused_add_rmsnorm"],
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


def _unary_out_in(flops_per: int, model: str) -> Handler:
    """vLLM's out-of-place activations ``op(out, input)``: one read, one write per element."""

    def handler(call: _Call) -> OpCost | None:
        out, x = call.shape(0), call.shape(1)
        if out is None or x is None or _numel(out) != _numel(x):
            return None
        return _cost(flops_per * _numel(x), call.nbytes(1) + call.written(0), _vector_roof(call, [1]),
                     "elementwise", model)

    return handler


# FLOPs per element: tanh GELU 0.5x(1 + tanh(c(x + 0.044715x^3))) ~ 9 (tanh as one),
# quick GELU x * sigmoid(1.702x) ~ 5 (as torch's silu-like ops are counted in TraceLens)
_register(["_C::gelu_new"], _unary_out_in(9, "gelu_new"))
_register(["_C::gelu_fast"], _unary_out_in(9, "gelu_fast"))
_register(["_C::gelu_quick"], _unary_out_in(5, "gelu_quick"))
# fatrelu_and_mul(out, input, threshold): out = (x1 > t ? x1 : 0) * x2: compare + mul
_register(["_C::fatrelu_and_mul"], _act_and_mul(2, "fatrelu_and_mul"))
# swigluoai_and_mul(out, input, alpha, limit) (gpt-oss): clamp both halves (3), gate *
# sigmoid(alpha * gate) (5), (up + 1) * glu (2)
_register(["_C::swigluoai_and_mul"], _act_and_mul(10, "swigluoai_and_mul"))


def _fused_qk_norm_rope(call: _Call) -> OpCost | None:
    # fused_qk_norm_rope(qkv [T, (Hq + Hk + Hv) x D], num_heads_q, num_heads_k, num_heads_v,
    #     head_dim, eps, q_weight [D], k_weight [D], cos_sin_cache [P, rot], is_neox,
    #     position_ids [T]): RMSNorm over each q and k head, then rotary on them, in place
    qkv, cache, pos = call.shape(0), call.shape(8), call.shape(10)
    hq, hk, hv, d = (call.c_int(i) for i in (1, 2, 3, 4))
    if qkv is None or cache is None or pos is None or len(cache) != 2 or not qkv \
            or None in (hq, hk, hv, d):
        return None
    assert hq is not None and hk is not None and hv is not None and d is not None
    tokens = _numel(pos)
    if min(hq, hk, hv) < 0 or d <= 0 or tokens <= 0 or cache[1] > d \
            or _numel(qkv) != tokens * (hq + hk + hv) * d:
        return None
    normed = tokens * (hq + hk) * d
    rotated = tokens * (hq + hk) * cache[1]
    # q and k are read and written once; v is untouched; the weights, the positions and the
    # cache rows the positions select are read
    nbytes = 2 * normed * call.bpe(0) + call.nbytes(6) + call.nbytes(7) + call.nbytes(10) \
        + tokens * cache[1] * call.bpe(8)
    flops = _rms_norm_flops(normed, d, True) + 3 * rotated
    return _cost(flops, nbytes, _vector_roof(call, [0]), "norm", "fused_qk_norm_rope")


_register(["_C::fused_qk_norm_rope"], _fused_qk_norm_rope)


def _gemm_a16w16(call: _Call) -> OpCost | None:
    # aiter gemm_a16w16(A [..., K], B [N, K], bias?, otype?, scale_a?, scale_b?, scale_c?): a
    # bf16/fp16 GEMM, out = A @ B^T (+ bias), [..., N] in otype (else A's dtype)
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or not a or len(b) != 2 or a[-1] != b[1]:
        return None
    m, (n, k) = _numel(a[:-1]), b
    out_t = _type_from_code(call.c(3)) or call.type(0)
    out_bpe = bytes_per_element(out_t)
    if not out_bpe:
        return None
    bias = call.nbytes(2) if call.nd_tensor(2) else 0
    if call.nd_tensor(2) and _numel(call.shape(2) or ()) != n:
        return None
    scales = sum(call.nbytes(i) for i in (4, 5, 6))
    nbytes = call.nbytes(0) + call.nbytes(1) + bias + scales + m * n * out_bpe
    return _cost(2 * m * n * k, nbytes, _matrix_roof([call.type(0), call.type(1)]), "gemm",
                 "gemm_a16w16" + ("+bias" if bias else ""))


_register(["aiter::gemm_a16w16"], _gemm_a16w16)


def _triton_topk(call: _Call) -> OpCost | None:
    # triton_kernels TopK (gpt-oss MoE routing in vLLM; an autograd.Function, recorded by its
    # class name): TopK(x [T, E], k, apply_softmax, dim, [return_bitmatrix,] y_indx?, n_rows?)
    # reads the router logits once and writes the top-k values [T, k] (x's dtype), their
    # expert indices [T, k] (int16) and a bitmatrix of the chosen experts [T, ceil(E / 32)]
    # (uint32) unless return_bitmatrix is False
    x, k = call.shape(0), call.c_int(1)
    if x is None or len(x) != 2 or k is None or not 0 < k <= x[1]:
        return None
    dim = call.c_int(3)
    if dim is not None and dim not in (1, -1):
        return None
    t, e = x
    bitmatrix = 0 if call.c_bool(4) is False else t * -(-e // 32) * 4
    nbytes = call.nbytes(0) + t * k * (call.bpe(0) + 2) + bitmatrix
    # selection: one compare per logit; softmax over the k chosen (max, sub, exp, sum, div)
    flops = t * e + (5 * t * k if call.c_bool(2, True) else 0)
    return _cost(flops, nbytes, _vector_roof(call, [0]), "reduction", "TopK routing (estimate)")


def _sort_tokens(call: _Call) -> OpCost | None:
    # triton_kernels SortTokens(expt_scal [T, k], expt_indx [T, k], n_expts_tot, bitmatrix):
    # counts tokens per expert from the bitmatrix, then writes the gates sorted by expert: the
    # gate scales [T x k] (expt_scal's dtype), the gather and scatter indices [2 x T x k]
    # (int32) and the histogram [E] (int32). The offsets and block maps it also writes are
    # left out, so the bytes are a lower bound
    s, i = call.shape(0), call.shape(1)
    e = call.c_int(2) or _model_experts(call)
    if s is None or i is None or len(s) != 2 or s != i or not e or e <= 0:
        return None
    t, k = s
    gates = t * k
    nbytes = call.nbytes(0) + call.nbytes(1) + t * -(-e // 32) * 4 \
        + gates * call.bpe(0) + 2 * gates * 4 + e * 4
    return _cost(2 * gates, nbytes, "fp32", "reduction", "SortTokens routing (estimate)")


def _model_experts(call: _Call) -> int | None:
    e = getattr(call.model, "num_experts", None) if call.model is not None else None
    return e if isinstance(e, int) and not isinstance(e, bool) and e > 0 else None


_register(["TopK"], _triton_topk)
_register(["SortTokens"], _sort_tokens)


def _topk_softmax(call: _Call) -> OpCost | None:
    # vLLM _moe_C::topk_softmax(topk_weights! [T, k], topk_indices! [T, k],
    #     token_expert_indices! [T, k], gating_output [T, E], renormalize, ...); SGLang's
    # sgl_kernel::topk_softmax has no token_expert_indices (gating is argument 2). Reads the
    # router logits once, writes the [T, k] outputs
    w = call.shape(0)
    if w is None or len(w) != 2:
        return None
    g_i = 3 if call.shape(2) == w else 2
    g = call.shape(g_i)
    if g is None or len(g) != 2 or g[0] != w[0] or not 0 < w[1] <= g[1]:
        return None
    t, e = g
    writes = sum(call.written(i) for i in range(g_i) if call.shape(i) == w)
    # softmax over the experts (max, sub, exp, sum, div: 5 per logit), one compare per logit
    # per selection round is not counted: an estimate
    return _cost(5 * t * e, call.nbytes(g_i) + writes, _vector_roof(call, [g_i]), "reduction",
                 "topk_softmax routing (estimate)")


_register(["_moe_C::topk_softmax", "sgl_kernel::topk_softmax", "vllm::rocm_aiter_topk_softmax",
           "aiter::topk_softmax"], _topk_softmax)


def _moe_align(call: _Call) -> OpCost | None:
    # moe_align_block_size(topk_ids [T, k], num_experts, block_size, sorted_token_ids!,
    #     experts_ids!, num_tokens_post_pad!, ...) (vLLM _moe_C and sgl_kernel): counts tokens
    # per expert and writes each (token, expert) pair's slot. Lower bound: topk_ids read, one
    # sorted id per pair and the per-expert counts written (the padding slots the kernel also
    # fills depend on the routing)
    ids, e = call.shape(0), call.c_int(1)
    sorted_ids = call.shape(3)
    if ids is None or not ids or e is None or e <= 0 or sorted_ids is None:
        return None
    pairs = _numel(ids)
    if _numel(sorted_ids) < pairs:
        return None
    nbytes = call.nbytes(0) + pairs * call.bpe(3) + e * 4
    return _cost(pairs, nbytes, "fp32", "reduction", "moe_align_block_size (estimate, lower bound)")


_register(["_moe_C::moe_align_block_size", "sgl_kernel::moe_align_block_size"], _moe_align)


def _rope_pos_ids(call: _Call) -> OpCost | None:
    # sgl_kernel::apply_rope_pos_ids_cos_sin_cache(q [T, Hq, D], k [T, Hk, D], q_rope!, k_rope!,
    #     cos_sin_cache [P, rot], pos_ids [T], interleave, enable_pdl, cuda_stream, v?,
    #     k_buffer!?, v_buffer!?, kv_cache_loc?): q and k read, their rotated copies written;
    # with k_buffer the rotated k and v are also written to the KV cache at kv_cache_loc
    q, k, cache, pos = call.shape(0), call.shape(1), call.shape(4), call.shape(5)
    if q is None or k is None or cache is None or pos is None or len(q) < 2 or len(k) < 2 \
            or len(cache) != 2:
        return None
    tokens, rot = _numel(pos), cache[1]
    head = q[-1]
    if tokens <= 0 or head <= 0 or rot > head or k[-1] != head \
            or _numel(q) % (tokens * head) or _numel(k) % (tokens * head):
        return None
    heads = (_numel(q) + _numel(k)) // (tokens * head)
    nbytes = call.nbytes(0) + call.nbytes(1) + call.written(2) + call.written(3) + call.nbytes(5) \
        + tokens * rot * call.bpe(4)
    if call.nd_tensor(10):
        # fused KV-cache write: v read, k (rotated) and v written at the cache's dtype
        nbytes += call.nbytes(9) + _numel(k) * call.bpe(10) \
            + _numel(call.shape(9) or ()) * (call.bpe(11) or call.bpe(9)) + call.nbytes(12)
    return _cost(3 * tokens * heads * rot, nbytes, _vector_roof(call, [0]), "elementwise",
                 "apply_rope_pos_ids_cos_sin_cache")


_register(["sgl_kernel::apply_rope_pos_ids_cos_sin_cache"], _rope_pos_ids)
