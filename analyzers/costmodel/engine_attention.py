"""Serving engines' paged attention (vLLM, AITER) and AITER's batch prefill.

Paged attention reads the KV cache through block tables and per-sequence lengths that live on
the GPU: the trace records the query's shape and the number of sequences, not how many KV
tokens each one attends to. vLLM's ``unified_attention*`` is costed by :mod:`.steps` (from the
trace's step labels or ``--context``); the ops here need the user's:

- ``--context C`` (``call.context_tokens``): the KV tokens each sequence attends to, the new
  token included. The ops are decode kernels: ``S`` sequences (recorded: ``seq_lens`` or the
  ragged index's length) with ``T`` query tokens in all (``T = S`` for plain decode), each
  sequence reading its whole KV span once:
  ``FLOPs = 2 x T x Hq x span x (D_qk + D_v)`` and
  ``bytes = q + out + S x span x Hkv x (D_qk + D_v) x kv_bytes (+ seq_lens)``, AMD TraceLens's
  ``InferenceAttention`` formulas for generation requests (``g_sq = S``, ``g_sk = S x C``) with
  the whole span read from the cache's dtype. Every sequence is taken at ``C`` tokens: the
  model name says "decode estimate".
- ``--model`` (``call.model``): a config with sliding-window layers (gpt-oss alternates
  windowed and full layers) attends to ``min(C, window)`` tokens on its windowed layers; the
  calls of every layer share one signature, so the span is the mean over the model's layers
  (exact for their sum, which is what a signature's row adds up).

Without ``--context`` they give ``None`` (:data:`NEEDS_CONTEXT_OPS`: the coverage reason
``needs_context``). vLLM's paged attention records ``max_seq_len``, but that is the longest
sequence's length: costing every sequence at it over-counts bytes and could show the op above
its roof, so it is not used. AITER's ``mha_batch_prefill`` records its batch (``cu_seqlens_q``)
and longest key length: one sequence is costed exactly, a batch by a lower bound.
"""
from __future__ import annotations

from typing import Any

from ._core import Handler, OpCost, _Call, _cost, _matrix_roof, _numel, _register

#: Engine attention ops that need ``--context`` (the KV tokens per sequence) to be costed.
#: (vLLM's unified attention, costed by :mod:`.steps`, also needs it, or the trace's step labels.)
NEEDS_CONTEXT_OPS: frozenset[str] = frozenset({
    "vllm::unified_attention", "vllm::unified_attention_with_output",
    "_C::paged_attention_v1", "_C::paged_attention_v2", "_rocm_C::paged_attention",
    "aiter::paged_attention_ragged", "aiter::paged_attention_rocm", "aiter::paged_attention_v1",
    "vllm::rocm_aiter_mla_decode_fwd",
    "sgl_kernel::cutlass_mla_decode", "_C::sm100_cutlass_mla_decode",
})

#: fp8 KV-cache spellings of vLLM's ``kv_cache_dtype`` argument (the cache tensor is uint8).
_FP8_CACHE_NAMES = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")


def _model_int(model: Any, field: str) -> int | None:
    """A positive whole-number field of the run's model spec, or None."""
    value = getattr(model, field, None) if model is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _kv_span(call: _Call, context: int) -> tuple[float, str]:
    """Mean KV tokens a query attends to over the model's layers, and the words saying how.

    Windowed layers attend to ``min(context, window)``; ``layer_types`` says which layers are
    windowed (gpt-oss: every other one); a window without ``layer_types`` (Mistral) is on every
    layer."""
    model = call.model
    window = _model_int(model, "sliding_window")
    if window is None or window >= context:
        return float(context), ""
    types = getattr(model, "layer_types", None)
    if isinstance(types, (list, tuple)) and types and all(isinstance(t, str) for t in types):
        windowed = sum(1 for t in types if "sliding" in t.lower())
        if windowed == 0:
            return float(context), ""
        span = (windowed * window + (len(types) - windowed) * context) / len(types)
        return span, f", sliding window {window} on {windowed} of {len(types)} layers"
    return float(window), f", sliding window {window}"


def _context(call: _Call) -> int | None:
    c = call.context_tokens
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        return None
    return c


def _decode_cost(call: _Call, tokens: int, seqs: int, hq: int, hkv: int, d_qk: int, d_v: int,
                 qo_bytes: float, kv_bpe: int, extra_bytes: float, roof_types: list[str],
                 name: str, note: str = "", kv_row: int | None = None,
                 window: int | None = None) -> OpCost | None:
    """Decode attention: ``tokens`` query tokens of ``seqs`` sequences, each attending to the
    ``--context`` span. ``kv_row``: cache elements per token when K and V are not separate
    ``Hkv x D`` rows (MLA's latent row serves as both); MLA has no sliding window. ``window``:
    a sliding window the op itself records (it wins over the model's)."""
    context = _context(call)
    if context is None or tokens <= 0 or seqs <= 0 or hkv <= 0 or hq % hkv or d_qk <= 0 \
            or d_v <= 0 or kv_bpe <= 0 or (kv_row is not None and kv_row <= 0):
        return None
    if window is not None and 0 < window < context:
        span, window_note = float(window), f", sliding window {window} recorded"
    elif kv_row is not None:
        span, window_note = float(context), ""
    else:
        span, window_note = _kv_span(call, context)
    flops = 2.0 * tokens * hq * span * (d_qk + d_v)
    row = kv_row if kv_row is not None else hkv * (d_qk + d_v)
    kv_bytes = seqs * span * row * kv_bpe
    dtype = _matrix_roof(roof_types)
    model = f"{name} decode estimate (--context {context}{window_note}{note})"
    return _cost(flops, qo_bytes + kv_bytes + extra_bytes, dtype, "attention", model)


def _cache_bpe(call: _Call, cache_i: int, dtype_i: int) -> int:
    """Bytes per element of a paged KV cache: its tensor's dtype; an fp8 ``kv_cache_dtype``
    argument means one byte (vLLM stores fp8 caches as uint8)."""
    if call.c(dtype_i).strip().lower() in _FP8_CACHE_NAMES:
        return 1
    return call.bpe(cache_i)


def _paged(q_i: int, kc_i: int, vc_i: int, hkv_i: int, seq_lens_i: int, block_i: int,
           dtype_i: int, qsl_i: int | None, name: str) -> Handler:
    """vLLM paged attention: ``out`` (argument 0) and ``query`` [T, Hq, D]; the caches
    [blocks, Hkv, ...] hold ``block_size`` tokens per block (read from the cache's size, which
    fits every layout); ``seq_lens`` [S] counts the sequences."""

    def handler(call: _Call) -> OpCost | None:
        q, out, kc, vc, sl = (call.shape(i) for i in (q_i, 0, kc_i, vc_i, seq_lens_i))
        hkv, block = call.c_int(hkv_i), call.c_int(block_i)
        if q is None or out is None or kc is None or vc is None or sl is None or len(q) != 3 \
                or len(sl) != 1 or not kc or not hkv or not block or hkv <= 0 or block <= 0:
            return None
        t, hq, d = q
        if _numel(out) != t * hq * d or kc[0] <= 0:
            return None
        # every layout stores Hkv x D elements per token per cache
        if _numel(kc) != kc[0] * block * hkv * d or _numel(vc) != _numel(kc):
            return None
        seqs = sl[0]
        if qsl_i is not None and call.nd_tensor(qsl_i):
            qsl = call.shape(qsl_i) or ()
            seqs = qsl[0] - 1 if len(qsl) == 1 and qsl[0] > 1 else 0
        bpe = _cache_bpe(call, kc_i, dtype_i)
        extra = call.nbytes(seq_lens_i)
        kv_type = "fp8" if bpe == 1 and call.bpe(kc_i) == 1 else call.type(kc_i)
        return _decode_cost(call, t, seqs, hq, hkv, d, d, call.nbytes(q_i) + call.written(0), bpe, extra,
                            [call.type(q_i), kv_type], name)

    return handler


# paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables,
#                    seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, ...)
_register(["_C::paged_attention_v1"], _paged(1, 2, 3, 4, 7, 8, 11, None, "paged_attention_v1"))
# paged_attention_v2(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache,
#                    num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len, ...)
_register(["_C::paged_attention_v2"], _paged(4, 5, 6, 7, 10, 11, 14, None, "paged_attention_v2"))
# _rocm_C::paged_attention(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache,
#     num_kv_heads, scale, block_tables, seq_lens, query_start_loc?, block_size, max_seq_len,
#     alibi_slopes, kv_cache_dtype, ...)
_register(["_rocm_C::paged_attention"],
          _paged(4, 5, 6, 7, 10, 12, 15, 11, "rocm paged_attention"))


def _paged_ragged(call: _Call) -> OpCost | None:
    # aiter paged_attention_ragged(out, workspace_buffer, query, key_cache, value_cache, scale,
    #     kv_indptr, kv_page_indices, kv_last_page_lens, block_size, max_num_partitions,
    #     alibi_slopes, kv_cache_dtype, kv_cache_layout, logits_soft_cap, k_scale, v_scale, ...)
    q, out, kc, vc, last = (call.shape(i) for i in (2, 0, 3, 4, 8))
    block = call.c_int(9)
    if q is None or out is None or kc is None or vc is None or last is None or len(q) != 3 \
            or len(last) != 1 or not kc or not block or block <= 0 or kc[0] <= 0:
        return None
    t, hq, d = q
    per_token = _numel(kc) / (kc[0] * block)
    if _numel(out) != t * hq * d or per_token % d or _numel(vc) != _numel(kc):
        return None
    hkv = int(per_token // d)
    bpe = _cache_bpe(call, 3, 12)
    kv_type = "fp8" if bpe == 1 and call.bpe(3) == 1 else call.type(3)
    return _decode_cost(call, t, last[0], hq, hkv, d, d, call.nbytes(2) + call.written(0), bpe,
                        call.nbytes(8), [call.type(2), kv_type], "paged_attention_ragged")


_register(["aiter::paged_attention_ragged"], _paged_ragged)
# aiter paged_attention_rocm: vLLM v2's layout (out, exp_sums, max_logits, tmp_out, query,
# key_cache, value_cache, num_kv_heads, scale, block_tables, context_lens, block_size, ...)
_register(["aiter::paged_attention_rocm"],
          _paged(4, 5, 6, 7, 10, 11, 14, None, "aiter paged_attention_rocm"))


def _aiter_paged_v1(call: _Call) -> OpCost | None:
    # aiter paged_attention_v1(out, workspace_buffer, query [T, Hq, D], key_cache, value_cache,
    #     scale, block_tables, cu_query_lens?, context_lens [S], max_context_len, alibi_slopes,
    #     kv_cache_dtype, kv_cache_layout, logits_soft_cap, k_scale, v_scale, fp8_out_scale,
    #     partition_size, mtp, sliding_window): the block size is in the cache's layout
    #     (NHD [blocks, block, Hkv, D], HND [blocks, Hkv, block, D], 5-D [blocks, Hkv, D/x, block, x])
    q, out, kc, vc, cl = (call.shape(i) for i in (2, 0, 3, 4, 8))
    if q is None or out is None or kc is None or vc is None or cl is None or len(q) != 3 \
            or len(cl) != 1:
        return None
    layout = call.c(12).strip().upper()
    if len(kc) == 5:
        block = kc[3]
    elif len(kc) == 4 and layout in ("NHD", "HND"):
        block = kc[1] if layout == "NHD" else kc[2]
    else:
        return None
    t, hq, d = q
    if block <= 0 or kc[0] <= 0 or _numel(out) != t * hq * d or _numel(vc) != _numel(kc):
        return None
    per_token = _numel(kc) / (kc[0] * block)
    if per_token % d:
        return None
    bpe = _cache_bpe(call, 3, 11)
    kv_type = "fp8" if bpe == 1 and call.bpe(3) == 1 else call.type(3)
    # the op applies its sliding_window itself: each sequence reads its last `window` tokens
    return _decode_cost(call, t, cl[0], hq, int(per_token // d), d, d,
                        call.nbytes(2) + call.written(0), bpe, call.nbytes(8),
                        [call.type(2), kv_type], "aiter paged_attention_v1", window=call.c_int(19))


_register(["aiter::paged_attention_v1"], _aiter_paged_v1)


def _batch_prefill(call: _Call) -> OpCost | None:
    # aiter mha_batch_prefill(q [Tq, Hq, D], k, v (paged: [pages, page, Hkv, D], [pool, Hkv, D]
    #     or 5-D vectorized [pages, Hkv, D/x, page, x]), cu_seqlens_q [B+1], kv_indptr,
    #     kv_page_indices, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
    #     logits_soft_cap, zero_tensors, is_causal, ...)
    q, k, v, cu = (call.shape(i) for i in (0, 1, 2, 3))
    max_k = call.c_int(7)
    if q is None or k is None or v is None or cu is None or len(q) != 3 or len(cu) != 1 \
            or cu[0] < 2 or not max_k or max_k <= 0:
        return None
    tq, hq, d = q
    if len(k) in (3, 4) and len(v) == len(k):
        hkv, d_k, d_v = k[-2], k[-1], v[-1]
    elif len(k) == 5 and len(v) == 5:
        hkv, d_k, d_v = k[1], k[2] * k[4], v[-2]
    else:
        return None
    if d_k != d or tq <= 0 or hkv <= 0 or hq % hkv or d_v <= 0:
        return None
    b = cu[0] - 1
    causal = bool(call.c_bool(12, False))
    if b == 1:
        # one sequence: its query and key lengths are recorded exactly
        q_k, q_q, kv_tokens = float(tq) * max_k, float(tq) * tq, float(max_k)
        how = "mha_batch_prefill"
    else:
        # a batch: sum(q_i k_i), sum(q_i^2) and sum(k_i) are not recorded. Each sequence's keys
        # include its queries (k_i >= q_i), so sum(q_i k_i) >= sum(q_i^2) >= Tq^2 / B, and one
        # sequence has max_k keys: lower bounds, so the op is never shown above its roof
        q_q = float(tq) * tq / b
        q_k = max(q_q, float(tq))
        kv_tokens = float(max(tq, max_k))
        how = f"mha_batch_prefill lower bound ({b} sequences)"
    if causal and max_k < tq and b == 1:
        return None  # more queries than keys in one causal sequence: not a prefill we know
    flops = 2.0 * hq * (d + d_v) * q_k
    executed = flops
    if causal:
        # bottom-right causal mask: a sequence's query i sees its prefix and the keys up to
        # itself, q k - (q^2 - q) / 2 scores (exact for one sequence)
        kept = q_k - (q_q - tq) / 2.0
        if b > 1:
            # per sequence q k - (q^2 - q) / 2 >= q k / 2 and >= (q^2 + q) / 2 (as k >= q)
            kept = max(q_k / 2.0, (q_q + tq) / 2.0)
        executed = min(2.0 * hq * (d + d_v) * kept, flops)
    nbytes = call.nbytes(0) + tq * hq * d_v * call.bpe(0) \
        + kv_tokens * hkv * (d * call.bpe(1) + d_v * call.bpe(2))
    dtype = _matrix_roof([call.type(0), call.type(1), call.type(2)])
    return _cost(flops, nbytes, dtype, "attention", how + (" causal" if causal else ""), executed)


_register(["aiter::mha_batch_prefill"], _batch_prefill)


def _mla_decode(q_is: tuple[int, ...], out_i: int, cache_i: int, seqs_i: int, seqs_offset: int,
                name: str) -> Handler:
    """MLA decode (DeepSeek): the query's heads [T, Hq, kv_lora + rope] (or its no-rope and rope
    parts ``q_is``) attend to a latent cache row [..., kv_lora + rope] per token that serves as
    both key and value; the output is [T, Hq, kv_lora]. ``seqs_i``: a tensor whose length less
    ``seqs_offset`` is the number of sequences (``qo_indptr`` [S+1] or ``seq_lens`` [S])."""

    def handler(call: _Call) -> OpCost | None:
        qs = [q for q in (call.shape(i) for i in q_is) if q is not None and len(q) == 3]
        out, cache, sq = call.shape(out_i), call.shape(cache_i), call.shape(seqs_i)
        if len(qs) != len(q_is) or out is None or len(out) != 3 or cache is None \
                or len(cache) < 2 or sq is None or len(sq) != 1:
            return None
        t, hq = qs[0][0], qs[0][1]
        if any(q[:2] != (t, hq) for q in qs) or out[:2] != (t, hq):
            return None
        d_qk = sum(q[2] for q in qs)
        row = cache[-1]
        hkv = cache[-2] if len(cache) == 4 else 1
        if row != d_qk or out[2] > row:
            return None
        qo_bytes = sum(call.nbytes(i) for i in q_is) + call.written(out_i)
        kv_type = "fp8" if call.bpe(cache_i) == 1 else call.type(cache_i)
        return _decode_cost(call, t, sq[0] - seqs_offset, hq, hkv, d_qk, out[2], qo_bytes,
                            call.bpe(cache_i), call.nbytes(seqs_i), [call.type(q_is[0]), kv_type],
                            name, kv_row=hkv * row)

    return handler


# vLLM ROCm: rocm_aiter_mla_decode_fwd(q, kv_buffer [pages, page, 1, 576], o, qo_indptr [S+1],
#     max_seqlen_qo, kv_indptr, kv_indices, kv_last_page_lens, sm_scale, ...)
_register(["vllm::rocm_aiter_mla_decode_fwd"],
          _mla_decode((0,), 2, 1, 3, 1, "rocm_aiter_mla_decode_fwd"))
# SGLang cutlass_mla_decode(out, q_nope, q_pe, kv_c_and_k_pe_cache [pages, page, 576],
#     seq_lens [S], page_table, workspace, sm_scale, num_kv_splits)
_register(["sgl_kernel::cutlass_mla_decode"], _mla_decode((1, 2), 0, 3, 4, 0, "cutlass_mla_decode"))
# vLLM sm100_cutlass_mla_decode(out, lse, q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, ...)
_register(["_C::sm100_cutlass_mla_decode"],
          _mla_decode((2, 3), 0, 4, 5, 0, "sm100_cutlass_mla_decode"))
