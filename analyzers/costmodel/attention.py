"""Attention: SDPA variants, flash/efficient/cuDNN/aiter/FA3, causal masking (``flops_executed``)."""
from __future__ import annotations

from ._core import (
    Handler, OpCost, Shape, _Call, _broadcast, _cost, _matrix_roof, _numel, _register,
)


def _unmasked(lq: int, lk: int, align: str) -> int:
    """Score entries a causal mask keeps: ``top_left`` (torch SDPA ``is_causal``: query i sees
    keys 0..i) or ``bottom_right`` (flash-attn: query i sees keys 0..i+lk-lq)."""
    if lq <= 0 or lk <= 0:
        return 0
    if align == "bottom_right":
        if lk >= lq:
            return lq * (lk - lq) + lq * (lq + 1) // 2
        return lk * (lk + 1) // 2
    if lq <= lk:
        return lq * (lq + 1) // 2
    return lk * (lk + 1) // 2 + (lq - lk) * lk


def _attention_core(call: _Call, q: Shape, k: Shape, v: Shape, q_i: int, k_i: int, v_i: int,
                    mask_i: int | None, causal: bool, align: str, model: str,
                    nbytes_qkvo: float | None = None) -> OpCost | None:
    """Dense attention on [batch..., heads, L, E] shapes (GQA: fewer key/value heads)."""
    if len(q) < 3 or len(k) != len(q) or len(v) != len(q):
        return None
    lq, e = q[-2], q[-1]
    lk, ev = k[-2], v[-1]
    if k[-1] != e or v[-2] != lk:
        return None
    hq, hk, hv = q[-3], k[-3], v[-3]
    if hk != hv or hk == 0 or hq % hk != 0:
        return None
    if _broadcast([tuple(q[:-3]), tuple(k[:-3])]) != tuple(q[:-3]) or tuple(k[:-3]) != tuple(v[:-3]):
        return None
    bh = _numel(q[:-2])
    # torch.utils.flop_counter.sdpa_flop_count: Q@K^T plus P@V, causal masking not counted
    flops = 2 * bh * lq * lk * e + 2 * bh * lq * lk * ev
    executed: float = flops
    if causal and lq and lk:
        executed = flops * _unmasked(lq, lk, align) / (lq * lk)
    if nbytes_qkvo is None:
        out = _numel(q[:-1]) * ev * call.bpe(q_i)
        mask = call.nbytes(mask_i) if mask_i is not None else 0
        nbytes_qkvo = call.nbytes(q_i) + call.nbytes(k_i) + call.nbytes(v_i) + mask + out
    dtype = _matrix_roof([call.type(q_i), call.type(k_i), call.type(v_i)])
    full_model = model + (" causal" if causal else "") + (" gqa" if hq != hk else "")
    return _cost(flops, nbytes_qkvo, dtype, "attention", full_model, executed)


def _bhle(call: _Call, qkv: tuple[int, int, int], transpose: bool) -> tuple[Shape, Shape, Shape] | None:
    shapes = [call.shape(i) for i in qkv]
    if any(s is None or len(s) < 3 for s in shapes):
        return None
    out = []
    for s in shapes:
        assert s is not None
        out.append(tuple(s[:-3]) + (s[-2], s[-3], s[-1]) if transpose else tuple(s))
    return out[0], out[1], out[2]


def _sdpa_factory(causal_i: int | None, mask_i: int | None, model: str) -> Handler:
    """aten SDPA ops on [B, H, L, E] tensors: q, k, v are arguments 0, 1, 2."""

    def handler(call: _Call) -> OpCost | None:
        shapes = _bhle(call, (0, 1, 2), transpose=False)
        if shapes is None:
            return None
        causal = bool(call.c_bool(causal_i, False)) if causal_i is not None else False
        m_i = mask_i if mask_i is not None and call.is_tensor(mask_i) else None
        return _attention_core(call, *shapes, 0, 1, 2, m_i, causal, "top_left", model)

    return handler


_register(["aten::scaled_dot_product_attention"], _sdpa_factory(5, 3, "sdpa"))
_register(["aten::_scaled_dot_product_attention_math"], _sdpa_factory(5, 3, "sdpa math"))
_register(["aten::_scaled_dot_product_flash_attention"], _sdpa_factory(4, None, "sdpa flash"))
_register(["aten::_scaled_dot_product_flash_attention_for_cpu"],
          _sdpa_factory(4, 5, "sdpa flash cpu"))
_register(["aten::_scaled_dot_product_efficient_attention"],
          _sdpa_factory(6, 3, "sdpa efficient"))
_register(["aten::_scaled_dot_product_cudnn_attention"], _sdpa_factory(6, 3, "sdpa cudnn"))
_register(["aten::_scaled_dot_product_fused_attention_overrideable"],
          _sdpa_factory(5, 3, "sdpa overrideable"))


def _varlen_pairs(total_q: int, total_k: int, nseq: int, max_q: int | None,
                  max_k: int | None) -> list[tuple[float, float, float]]:
    """(count, Lq, Lk) groups for packed sequences whose individual lengths are not recorded:
    one sequence at the recorded maximum, the rest sharing the remainder evenly (TraceLens's
    estimate); all equal when no maximum is recorded."""
    if nseq <= 1:
        return [(1, total_q, total_k)]
    if max_q is None or max_k is None or max_q > total_q or max_k > total_k:
        return [(nseq, total_q / nseq, total_k / nseq)]
    rest = nseq - 1
    return [(1, max_q, max_k), (rest, (total_q - max_q) / rest, (total_k - max_k) / rest)]


def _flash_blhe_factory(qkv: tuple[int, int, int], causal_i: int | None, align: str, model: str,
                        cu_i: tuple[int, int] | None = None, max_i: tuple[int, int] | None = None,
                        mask_type_i: int | None = None, bias_i: int | None = None) -> Handler:
    """Flash/efficient-style kernels on [B, L, H, E] tensors (packed [T, H, E] when varlen)."""

    def handler(call: _Call) -> OpCost | None:
        q_i, k_i, v_i = qkv
        causal = bool(call.c_bool(causal_i, False)) if causal_i is not None else False
        al = align
        if mask_type_i is not None:
            mt = call.c_int(mask_type_i) or 0
            causal = mt in (1, 2)
            al = "bottom_right" if mt == 2 else "top_left"
        cu_q = call.shape(cu_i[0]) if cu_i else None
        cu_k = call.shape(cu_i[1]) if cu_i else None
        q, k, v = call.shape(q_i), call.shape(k_i), call.shape(v_i)
        if q is None or k is None or v is None:
            return None
        if cu_i is not None and cu_q is not None and cu_k is not None and len(cu_q) == 1 and cu_q == cu_k:
            # varlen: packed [T, H, E] (efficient attention: [1, T, H, E])
            q3, k3, v3 = (tuple(s[-3:]) for s in (q, k, v))
            if any(len(s) < 3 for s in (q, k, v)):
                return None
            if k3[-1] != q3[-1] or v3[0] != k3[0] or k3[1] != v3[1] or k3[1] == 0 \
                    or q3[1] % k3[1] != 0:
                return None
            nseq = max(cu_q[0] - 1, 1)
            mq = call.c_int(max_i[0]) if max_i else None
            mk = call.c_int(max_i[1]) if max_i else None
            hq, e, ev = q3[1], q3[2], v3[2]
            flops = executed = 0.0
            for count, lq, lk in _varlen_pairs(q3[0], k3[0], nseq, mq, mk):
                f = count * (2 * hq * lq * lk * e + 2 * hq * lq * lk * ev)
                flops += f
                if causal and lq > 0 and lk > 0:
                    executed += f * _unmasked(round(lq), round(lk), al) / (round(lq) * round(lk) or 1)
                else:
                    executed += f
            out = _numel(q[:-1]) * ev * call.bpe(q_i)
            nbytes = (call.nbytes(q_i) + call.nbytes(k_i) + call.nbytes(v_i) + out
                      + call.nbytes(cu_i[0]) + call.nbytes(cu_i[1]))
            dtype = _matrix_roof([call.type(q_i), call.type(k_i), call.type(v_i)])
            return _cost(flops, nbytes, dtype, "attention",
                         model + " varlen" + (" causal" if causal else "")
                         + (" gqa" if hq != k3[1] else "") + " (estimated lengths)", executed)
        shapes = _bhle(call, qkv, transpose=True)
        if shapes is None or len(q) != 4:
            return None
        b_i = bias_i if bias_i is not None and call.is_tensor(bias_i) else None
        return _attention_core(call, *shapes, q_i, k_i, v_i, b_i, causal, al, model)

    return handler


# aten::_flash_attention_forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
#   is_causal, return_debug_mask, scale, window_size_left, window_size_right, seqused_k, ...)
_register(["aten::_flash_attention_forward"],
          _flash_blhe_factory((0, 1, 2), 8, "bottom_right", "flash_attention_forward",
                              cu_i=(3, 4), max_i=(5, 6)))
# aten::_efficient_attention_forward(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#   max_seqlen_k, dropout_p, custom_mask_type, compute_log_sumexp, scale, seqlen_k, ...)
_register(["aten::_efficient_attention_forward"],
          _flash_blhe_factory((0, 1, 2), None, "top_left", "efficient_attention_forward",
                              cu_i=(4, 5), max_i=(6, 7), mask_type_i=9, bias_i=3))
# aten::_cudnn_attention_forward(q, k, v, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
#   compute_log_sumexp, dropout_p, is_causal, return_debug_mask, *, scale): cuDNN SDPA's own op
# (under _scaled_dot_product_cudnn_attention, and alone in torch 2.11's traces). Batched inputs
# are head-major [B, H, L, E] like SDPA's; packed ones (cum_seq_q given) are [T, H, E] like the
# flash varlen contract. Causal masking is SDPA's (top-left).
_CUDNN_BATCHED = _sdpa_factory(10, 3, "cudnn_attention_forward")
_CUDNN_PACKED = _flash_blhe_factory((0, 1, 2), 10, "top_left", "cudnn_attention_forward", cu_i=(4, 5), max_i=(6, 7))


def _cudnn_attention_forward(call: _Call) -> OpCost | None:
    q, cu_q = call.shape(0), call.shape(4)
    if q is not None and len(q) == 3 and cu_q is not None and len(cu_q) == 1:
        return _CUDNN_PACKED(call)
    return _CUDNN_BATCHED(call)


_register(["aten::_cudnn_attention_forward"], _cudnn_attention_forward)
# flash-attn (Dao-AILab) and AITER python ops: (q, k, v, dropout_p, softmax_scale, causal, ...)
_register(["flash_attn::_flash_attn_forward", "aiter::_flash_attn_forward", "aiter::mha_fwd",
           "aiter::fmha_v3_fwd"],
          _flash_blhe_factory((0, 1, 2), 5, "bottom_right", "flash_attn"))
# flash_attn::_flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#   max_seqlen_k, dropout_p, softmax_scale, causal, ...)
_register(["flash_attn::_flash_attn_varlen_forward"],
          _flash_blhe_factory((0, 1, 2), 9, "bottom_right", "flash_attn",
                              cu_i=(3, 4), max_i=(5, 6)))
# aiter::wrapper_fmha_v3_fwd(out?, q, k, v, dropout_p, softmax_scale, is_causal, ...) (TraceLens)
_register(["aiter::wrapper_fmha_v3_fwd"],
          _flash_blhe_factory((1, 2, 3), 6, "bottom_right", "fmha_v3"))
# flash_attn_3::fwd: q, k, v first, is_causal at 24 (TraceLens flash_attn_v3_forward)
_register(["flash_attn_3::fwd"], _flash_blhe_factory((0, 1, 2), 24, "bottom_right", "flash_attn_3"))
