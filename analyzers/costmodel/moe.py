"""Mixture-of-experts layers: vLLM's ``moe_forward`` (costed from the user's ``--model``
config, its expert weights not being op inputs) and the fused-experts ops of vLLM, SGLang and
aiter (whose weights are op inputs).

Every model here is an **estimate**: which experts a batch routes to is not in the trace, so the
expert weights read are those of the experts a batch is expected to touch under uniform routing
(:func:`gpuscope.analyzers.modelspec.expected_experts_touched`: ``E x (1 - (1 - k/E)^T)``, at most
all of them). Real routers favour some experts and touch fewer: the bytes, and so the roof time,
are then overstated, never the percent of roof beyond what uniform routing would allow.

FLOPs, per token and chosen expert, of a gated MLP (gate and up fused as ``w1`` [2I, H], down
``w2`` [H, I]): ``2 x H x 2I + 2 x I x H`` (a multiply-add is 2). The activation between the two
GEMMs, the routing softmax/top-k and the weighted sum are left out (vector work, < 1 %).

Roof: weight-only quantization (MXFP4 w4a16, AWQ/GPTQ int4, ...) dequantizes to the activations'
dtype and multiplies there, so the roof is the activations' (gpt-oss: bf16); fp8 weights run fp8
GEMMs (w8a8), int8 weights int8 ones: the roof of the weights.
"""
from __future__ import annotations

from ..modelspec import ModelSpec, expected_experts_touched
from ._core import Handler, OpCost, _Call, _cost, _matrix_roof, _register, dtype_key

#: Ops that cannot be costed without the user's ``--model`` (their expert weights are not op
#: inputs): the coverage reason of an uncosted call is then ``needs_model``.
MODEL_OPS = frozenset({"vllm::moe_forward", "vllm::moe_forward_shared"})


def _gated_flops(tokens: int, top_k: int, hidden: int, inter: int) -> float:
    """FLOPs of ``tokens x top_k`` gated expert MLPs: up+gate [2I, H], down [H, I]."""
    return float(tokens) * top_k * 2.0 * (hidden * 2 * inter + inter * hidden)


def _roof_for(act_type: str, weight_roof: str | None) -> str | None:
    """The roof of a fused MoE: the weights' when they are fp8 or int8 (w8a8 GEMMs), else the
    activations' (weight-only quantization dequantizes to them)."""
    if weight_roof in ("fp8", "int8"):
        return weight_roof
    return _matrix_roof([act_type])


def _moe_forward(call: _Call) -> OpCost | None:
    """vLLM ``moe_forward(hidden_states [T, H'], router_logits [T, E], ..., layer_name)``.

    The op records the tokens and the experts; hidden size, expert MLP size, top-k and the bits
    of the expert weights come from ``call.model`` (the user's config). ``H'`` may be padded
    (gpt-oss: 2880 -> 3072 for the MXFP4 kernels): the activations are read and written at
    ``H'``, the weights and FLOPs use the config's hidden size. None without a model, or when the
    op's experts are not the model's (another model's config)."""
    spec = call.model
    if not isinstance(spec, ModelSpec) or not spec.is_moe:
        return None
    hs, logits = call.shape(0), call.shape(1)
    if hs is None or logits is None or len(hs) != 2 or len(logits) != 2 or hs[0] != logits[0]:
        return None
    tokens, hidden_op = hs
    experts = logits[1]
    hidden, inter, top_k = spec.hidden_size, spec.moe_intermediate_size, spec.experts_per_token
    expert_bytes = spec.expert_weight_bytes()
    if experts != spec.num_experts or not (hidden and inter and top_k and expert_bytes):
        return None
    if hidden_op < hidden or tokens <= 0:
        return None  # the op's hidden states are narrower than the model's: not this model
    # tensor parallelism (vLLM's default for MoE) gives each rank 1/TP of every expert's
    # intermediate dimension: its share of the weights and of the FLOPs
    tp = spec.tensor_parallel or 1
    touched = expected_experts_touched(tokens, experts, top_k)
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(1) + touched * expert_bytes / tp
    weight_roof = "fp8" if spec.quant_method in ("fp8", "fbgemm_fp8") else None
    roof = _roof_for(call.type(0), weight_roof)
    if roof is None:
        return None
    model = f"moe_forward estimate (uniform routing, {spec.name or 'model'} top-{top_k} of {experts}"
    if hidden_op != hidden:
        model += f", hidden padded {hidden}->{hidden_op}"
    if tp > 1:
        model += f", TP {tp} from the attention heads"
    model += ")"
    return _cost(_gated_flops(tokens, top_k, hidden, inter) / tp, nbytes, roof, "moe", model)


def _fused_experts(x_i: int, w1_i: int, w2_i: int, topk_i: int | None, k_conc: int | None,
                   gated: bool, name: str) -> Handler:
    """A fused-experts op whose weights are inputs: hidden ``x`` [T, H], ``w1`` [E, N1, H(packed)],
    ``w2`` [E, H, I(packed)]; top-k from ``topk_ids`` [T, k] (argument ``topk_i``) or from the
    concrete int ``k_conc``. ``gated``: ``N1 = 2I`` (gate and up fused), else ``N1 = I``."""

    def handler(call: _Call) -> OpCost | None:
        x, w1, w2 = call.shape(x_i), call.shape(w1_i), call.shape(w2_i)
        if x is None or w1 is None or w2 is None or len(x) != 2 or len(w1) != 3 or len(w2) != 3:
            return None
        tokens, hidden = x
        experts, n1 = w1[0], w1[1]
        if experts <= 0 or w2[0] != experts or w2[1] != hidden or tokens <= 0:
            return None
        top_k: int | None
        if topk_i is not None:
            ids = call.shape(topk_i)
            if ids is None or len(ids) != 2 or ids[0] != tokens:
                return None
            top_k = ids[1]
        else:
            top_k = call.c_int(k_conc) if k_conc is not None else None
        if not top_k or top_k <= 0 or top_k > experts:
            return None
        if gated and n1 % 2:
            return None
        inter = n1 // 2 if gated else n1
        spec = call.model
        if isinstance(spec, ModelSpec) and spec.is_moe and spec.num_experts not in (None, experts):
            # expert parallelism keeps a share of the experts per GPU: fewer is fine, more is not
            if experts > (spec.num_experts or 0):
                return None
        # one expert's weights as stored (packed int4 shapes count bytes; scales left out: a
        # lower bound of the bytes, so never a percent above what the op could reach)
        expert_bytes = (call.nbytes(w1_i) + call.nbytes(w2_i)) / experts
        touched = expected_experts_touched(tokens, experts, top_k)
        out_bytes = call.written(x_i)
        # the routing weights and ids ([T, k] each) sit just before/at topk_i when recorded
        ids_bytes = call.nbytes(topk_i) + call.nbytes(topk_i - 1) if topk_i is not None else 0
        nbytes = call.nbytes(x_i) + out_bytes + ids_bytes + touched * expert_bytes
        w_type = call.type(w1_i).lower()
        # uint8 weights are packed int4 (two per byte, w4a16: bf16 math); int8 ones run int8 GEMMs
        packed = "unsigned" in w_type or "uint8" in w_type or "byte" in w_type
        roof = _roof_for(call.type(x_i), None if packed else dtype_key(call.type(w1_i)))
        if roof is None:
            return None
        return _cost(_gated_flops(tokens, top_k, hidden, inter) if gated
                     else float(tokens) * top_k * 2.0 * (hidden * inter + inter * hidden),
                     nbytes, roof, "moe", f"{name} estimate (uniform routing, top-{top_k} of {experts})")

    return handler


_register(sorted(MODEL_OPS), _moe_forward)
# vLLM / SGLang fused_moe: (hidden_states, w1, w2, topk_weights, topk_ids, ...), returns or
# writes hidden_states' shape
_register(["vllm::outplace_fused_experts", "vllm::inplace_fused_experts",
           "sglang::outplace_fused_experts", "sglang::inplace_fused_experts"],
          _fused_experts(0, 1, 2, 4, None, True, "fused_experts"))
# aiter asm MoE: (out, input, gate, down, sorted_token_ids, sorted_weights, sorted_expert_ids,
# num_valid_ids, topk, ...): g1u1 fuses gate and up in `gate` [E, 2I, H]; g1u0 has gate only
_register(["aiter::fmoe_g1u1", "aiter::fmoe_g1u1_tkw1"], _fused_experts(1, 2, 3, None, 8, True, "fmoe_g1u1"))
_register(["aiter::fmoe", "aiter::fmoe_int8_g1u0", "aiter::fmoe_int8_g1u0_a16"],
          _fused_experts(1, 2, 3, None, 8, False, "fmoe"))

