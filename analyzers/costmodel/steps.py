"""Attention of a serving-engine step: cost from the step's query/KV aggregates.

Engines' fused attention ops (vLLM ``unified_attention``, SGLang's and ATOM's) run every request
of a scheduler step in one call and do not record the KV lengths. When the step's aggregates are
known (:mod:`gpuscope.analyzers.iterations`: the engine's step label, or the user's
``--context``) the cost follows from them. Per query head, a request with ``sq`` new tokens and a
KV span of ``sk`` computes ``QKᵀ`` and ``PV`` over ``sq × sk`` scores; prefill requests are causal
within their new tokens, which skips half of the ``sq × sq`` block::

    flops          = 2 · H_q · (d_qk + d_v) · (c_sqsk + g_sqsk)
    flops_executed = flops − H_q · (d_qk + d_v) · c_sqsq
    bytes          = (c_sq + g_sq) · (H_q · (d_qk + d_v) + H_kv · (d_qk + d_v)) · bpe_q     Q read, O written, new K/V read
                   + ((c_sk − c_sq) + (g_sk − g_sq)) · H_kv · (d_qk + d_v) · bpe_kv          cached K/V read once

``flops_executed`` and ``bytes`` are AMD TraceLens's ``InferenceAttention`` formulas (the same
numbers on the same labels; ``tests/test_iterations.py`` checks its reference row for the shared
vLLM decode). A decode step reads the whole KV span of every sequence: that is why decode
attention is memory-bound.
"""
from __future__ import annotations

from typing import Any

from ._core import OpCost, _Call, _cost, _matrix_roof, _register, bytes_per_element

__all__ = ["STEP_OPS", "step_attention_cost"]


def step_attention_cost(call: _Call, step: Any, q_i: int, k_i: int, v_i: int, model: str,
                        kv_type: str | None = None) -> OpCost | None:
    """The cost of a fused attention call from its step's aggregates (``step``: an
    ``IterationShape``). ``q_i``/``k_i``/``v_i`` index the packed ``[tokens, heads, dim]`` query
    and the new keys/values; ``kv_type`` the KV cache's element type when the op records it (a
    quantized fp8 cache reads 1 byte per element), else the keys' type."""
    q, k, v = call.shape(q_i), call.shape(k_i), call.shape(v_i)
    if q is None or k is None or v is None or len(q) != 3 or len(k) != 3 or len(v) != 3:
        return None
    tokens, hq, dqk = q
    hkv, dv = k[1], v[2]
    if min(tokens, hq, dqk, hkv, dv) <= 0 or k[2] != dqk or v[1] != hkv or hq % hkv:
        return None
    q_tokens = step.q_tokens
    # A CUDA-graph batch may be padded past the step's real tokens; a call with fewer tokens
    # than the step is not the step's attention (a micro-batch), and is not costed from it.
    if q_tokens <= 0 or q_tokens > tokens:
        return None
    bpe_q = call.bpe(q_i)
    bpe_kv = bytes_per_element(kv_type) if kv_type else call.bpe(k_i)
    if not bpe_q or not bpe_kv:
        return None
    width = dqk + dv
    scores = step.c_sqsk + step.g_sqsk
    flops = 2.0 * hq * width * scores
    executed = flops - hq * width * step.c_sqsq
    cached = (step.c_sk - step.c_sq) + (step.g_sk - step.g_sq)
    nbytes = q_tokens * (hq + hkv) * width * bpe_q + cached * hkv * width * bpe_kv
    if cached < 0 or executed < 0:
        return None
    dtype = _matrix_roof([call.type(q_i)])
    name = f"{model} ({step.source})" if getattr(step, "source", "") else model
    return _cost(flops, nbytes, dtype, "attention", name, executed)


def _step_of(call: _Call, q_i: int) -> Any:
    """The step a call ran in: the trace's label, else the user's ``--context`` read as a decode
    step of one query token per sequence."""
    if call.iteration is not None:
        return call.iteration
    q = call.shape(q_i)
    if call.context_tokens and q:
        from ..iterations import decode_shape

        return decode_shape(q[0], int(call.context_tokens))
    return None


def _windowed(step: Any, model: Any) -> Any:
    """The step as a layer-mean when the model has sliding-window layers: a decode query of such
    a layer attends to at most ``window`` keys (gpt-oss: window 128 on every other layer). The
    op's calls are grouped over all layers (their layer name is not recorded), so the span is
    the mean over layers; with sums only, a windowed layer's span is ``min(g_sk, g_sq × window)``
    (exact when every context is on one side of the window, an upper bound otherwise). Prefill
    spans are left whole."""
    import dataclasses

    window = getattr(model, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0 or step.g_sq <= 0:
        return step
    capped = min(step.g_sk, step.g_sq * window)
    if capped >= step.g_sk:
        return step
    types = getattr(model, "layer_types", None)
    if isinstance(types, (list, tuple)) and types and all(isinstance(t, str) for t in types):
        windowed = sum(1 for t in types if "sliding" in t.lower())
        layers = len(types)
    else:
        windowed = layers = 1
    if windowed == 0:
        return step
    frac = windowed / layers
    g_sk = (1 - frac) * step.g_sk + frac * capped
    # decode queries are one token each, so sq·sk sums scale with the span
    g_sqsk = step.g_sqsk * g_sk / step.g_sk if step.g_sk else step.g_sqsk
    note = f"sliding window {window} on {windowed} of {layers} layers" if layers > 1 else f"sliding window {window}"
    return dataclasses.replace(step, g_sk=g_sk, g_sqsk=g_sqsk, source=f"{step.source}, {note}")


def _unified_attention(call: _Call) -> OpCost | None:
    # vllm::unified_attention_with_output(query [T,Hq,D], key [T,Hkv,D], value, output, layer_name,
    # ...): the KV cache is the layer's, not an argument. A query quantized to fp8 means an fp8
    # KV cache (vLLM quantizes the query only then); otherwise the cache is taken to have the
    # keys' dtype (an fp8 cache under a bf16 query would read half these bytes).
    step = _step_of(call, 0)
    if step is None:
        return None
    if call.model is not None:
        step = _windowed(step, call.model)
    kv_type = call.type(0) if 0 < call.bpe(0) < call.bpe(1) else None
    return step_attention_cost(call, step, 0, 1, 2, "unified_attention", kv_type)


#: Ops whose cost needs the step they ran in (the attribution looks their step labels up).
STEP_OPS: frozenset[str] = frozenset({"vllm::unified_attention_with_output", "vllm::unified_attention"})

_register(sorted(STEP_OPS), _unified_attention)
