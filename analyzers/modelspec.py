"""A model's shape from its Hugging Face ``config.json``: what a trace does not record (issue 28,
point 3).

Fused mixture-of-experts ops (vLLM's ``moe_forward``, the fused MoE kernels of vLLM, SGLang and
aiter) take the hidden states and the router logits as inputs; the expert weights they read are
not op inputs, so a trace never records their size. ``gpuscope analyze --model CONFIG.json``
supplies them: :func:`model_spec` reads the config into a :class:`ModelSpec` (hidden size,
expert MLP size, experts, top-k, attention heads, the quantization of the weights) that the
cost models use (``analyzers/costmodel/moe.py``).

Pure: no I/O (the CLI reads the file), never prints. A config that is not a transformer
language model's, or whose numbers contradict each other, raises :class:`InputError` with one
line saying what is wrong.

Families read (their field names differ): Llama, Qwen2/Qwen3 (dense), Qwen3-MoE
(``num_experts``, ``moe_intermediate_size``, ``norm_topk_prob``), Mixtral
(``num_local_experts``; ``intermediate_size`` is the experts'), gpt-oss (``num_local_experts``,
``num_experts_per_tok``, MXFP4 experts), DeepSeek-V2/V3 (``n_routed_experts``,
``n_shared_experts``, ``first_k_dense_replace``, MLA's ``kv_lora_rank`` / ``q_lora_rank`` /
``qk_rope_head_dim`` / ``qk_nope_head_dim`` / ``v_head_dim``), and multimodal configs whose
language model sits in ``text_config`` (``llm_config``, ``language_config``).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..errors import InputError

#: ``torch_dtype`` (``dtype`` in transformers 5) as the roof dtype keys of the spec database.
_DTYPE_KEYS = {
    "bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "fp16": "fp16", "half": "fp16",
    "float32": "fp32", "fp32": "fp32", "float": "fp32",
}
_DTYPE_BITS = {"bf16": 16, "fp16": 16, "fp32": 32}

#: Largest dimension accepted: a config with a larger one is not a real model's (and products
#: of such numbers would stop meaning anything).
_MAX_DIM = 1 << 24
#: Largest count of experts, layers or heads accepted.
_MAX_COUNT = 1 << 16

#: Where multimodal configs keep their language model's config.
_NESTED_KEYS = ("text_config", "llm_config", "language_config")

#: MXFP4 (OCP microscaling): 4-bit E2M1 values, one 8-bit E8M0 scale per block of 32.
MXFP4_BITS = 4 + 8 / 32


@dataclass(frozen=True)
class ModelSpec:
    """What gpuscope knows of a model from its config: None where the config does not say.

    Sizes are element counts; ``*_bits`` are bits per weight including the quantization's
    scales and zero points (MXFP4: 4.25). ``intermediate_size`` is the dense MLP's (None when
    every layer is a mixture of experts, as in Mixtral and gpt-oss); ``moe_intermediate_size``
    the experts'. ``head_dim`` defaults to ``hidden_size / num_attention_heads`` (for MLA, the
    query/key head: ``qk_nope_head_dim + qk_rope_head_dim``).
    """

    name: str | None = None
    model_type: str | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    num_shared_experts: int | None = None
    first_dense_layers: int | None = None
    norm_topk_prob: bool | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool | None = None
    weight_dtype: str | None = None
    quant_method: str | None = None
    expert_weight_bits: float | None = None
    dense_weight_bits: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    #: Not from the config: the tensor-parallel degree the run used, when its trace shows it
    #: (:func:`infer_tensor_parallel`); each rank then holds 1/TP of every expert.
    tensor_parallel: int | None = None

    @property
    def is_moe(self) -> bool:
        """Whether the model routes tokens to experts."""
        return bool(self.num_experts)

    def expert_weight_bytes(self) -> float | None:
        """Bytes of one expert's weights: a gated MLP (gate and up projections hidden ->
        moe_intermediate, down projection back), ``3 x hidden x moe_intermediate x bits / 8``;
        None when the config does not give all three. Biases (gpt-oss has them: 0.1 % of the
        weights) are left out, so the bytes are a lower bound."""
        h, i, bits = self.hidden_size, self.moe_intermediate_size, self.expert_weight_bits
        if not (h and i and bits):
            return None
        return 3.0 * h * i * bits / 8.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (how the store keeps it)."""
        doc = dataclasses.asdict(self)
        if self.layer_types is not None:
            doc["layer_types"] = list(self.layer_types)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> ModelSpec:
        """The spec :meth:`to_json` wrote; a ValueError for anything else (unknown keys are
        ignored: a newer gpuscope may store more)."""
        if not isinstance(doc, dict):
            raise ValueError("a model spec is a JSON object")
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in doc or doc[f.name] is None:
                continue
            value = doc[f.name]
            if f.name == "layer_types":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError("layer_types is a list of strings")
                value = tuple(value)
            elif f.name in ("name", "model_type", "weight_dtype", "quant_method"):
                if not isinstance(value, str):
                    raise ValueError(f"{f.name} is a string")
            elif f.name in ("norm_topk_prob", "tie_word_embeddings"):
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} is true or false")
            elif f.name in ("expert_weight_bits", "dense_weight_bits"):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 64:
                    raise ValueError(f"{f.name} is a number of bits")
                value = float(value)
            elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_DIM:
                raise ValueError(f"{f.name} is a whole number")
            kwargs[f.name] = value
        return cls(**kwargs)


def expected_experts_touched(tokens: float, experts: int, top_k: int) -> float:
    """How many of ``experts`` a batch of ``tokens`` tokens is expected to route to, each token
    to ``top_k`` distinct experts: ``E x (1 - (1 - k/E)^T)``.

    This is an **estimate under uniform routing** (each token's experts drawn uniformly and
    independently of the other tokens'): real routers favour some experts, which touches fewer
    of them. It is at most ``experts`` and at least ``top_k`` (for one token or more)."""
    if experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    if top_k >= experts:
        return float(experts)
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def infer_tensor_parallel(spec: ModelSpec, attention_dims: Any) -> int | None:
    """The tensor-parallel degree of a run from its attention ops' query shapes: a rank of a
    TP-``n`` run holds ``heads / n`` query heads, so a query ``[T, h, head_dim]`` of the
    model's head size gives ``n = heads / h``. ``attention_dims`` are the recorded input dims
    (lists, the query first) of the run's attention calls. None when they do not say (no such
    op, other head sizes, shapes that disagree with each other)."""
    heads, head_dim = spec.num_attention_heads, spec.head_dim
    if not heads or not head_dim:
        return None
    found: set[int] = set()
    for dims in attention_dims or ():
        if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
            continue
        q = dims[0]
        if len(q) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in q):
            continue
        local, dim = q[1], q[2]
        if dim != head_dim or local <= 0 or heads % local:
            continue
        found.add(heads // local)
    return found.pop() if len(found) == 1 else None


def _bad(message: str) -> InputError:
    return InputError("model config", message)


def _int(cfg: dict[str, Any], *keys: str, least: int = 1, most: int = _MAX_DIM) -> int | None:
    """The first of ``keys`` the config sets (not null), as a whole number in range."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        # JSON has one number type: 4096.0 is 4096, but true is not 1 and 4096.5 is no size
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(f"{key} is {json.dumps(value)[:40]}, not a whole number")
        if not least <= value <= most:
            raise _bad(f"{key} is {value}: out of range ({least} to {most})")
        return value
    return None


def _bool(cfg: dict[str, Any], key: str) -> bool | None:
    value = cfg.get(key)
    return value if isinstance(value, bool) else None


def _language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of ``config``: a nested ``text_config`` (multimodal) with the
    top level's quantization and dtype where it has none of its own."""
    for key in _NESTED_KEYS:
        inner = config.get(key)
        if isinstance(inner, dict) and ("hidden_size" in inner or "num_hidden_layers" in inner):
            merged = dict(inner)
            for outer_key in ("quantization_config", "torch_dtype", "dtype", "_name_or_path", "architectures"):
                if outer_key in config and outer_key not in merged:
                    merged[outer_key] = config[outer_key]
            return merged
    return config


def _weight_dtype(cfg: dict[str, Any]) -> str | None:
    for key in ("torch_dtype", "dtype"):
        value = cfg.get(key)
        if isinstance(value, str):
            found = _DTYPE_KEYS.get(value.lower().removeprefix("torch."))
            if found:
                return found
    return None


def _quant_bits(quant: dict[str, Any], weight_dtype: str | None) -> tuple[str | None, float | None, float | None]:
    """(quant_method, expert bits, dense bits) per weight, scales and zero points included."""
    method_raw = quant.get("quant_method")
    if not isinstance(method_raw, str) or not method_raw:
        raise _bad("quantization_config has no quant_method")
    method = method_raw.lower()
    # modules the quantization leaves alone keep the model's dtype (bf16 when it does not say:
    # the dtype every quantized checkpoint of these families keeps them in)
    plain_bits = float(_DTYPE_BITS.get(weight_dtype or "bf16", 16))
    if method == "mxfp4":
        # gpt-oss: only the experts are MXFP4; attention, router, embeddings and lm_head are
        # listed in modules_to_not_convert and stay in the model dtype
        return method, MXFP4_BITS, plain_bits
    if method in ("fp8", "fbgemm_fp8"):
        bits = 8.0
        block = quant.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                                               for b in block):
            bits += 32.0 / (block[0] * block[1])  # one fp32 scale per block (DeepSeek-V3: 128 x 128)
        return method, bits, bits
    if method in ("awq", "gptq"):
        wbits = quant.get("bits", quant.get("w_bit", 4))
        group = quant.get("group_size", quant.get("q_group_size", 128))
        if isinstance(wbits, bool) or not isinstance(wbits, int) or not 2 <= wbits <= 8:
            raise _bad(f"quantization_config bits is {json.dumps(wbits)[:20]}: not 2 to 8")
        if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or 1 <= group <= _MAX_DIM):
            raise _bad(f"quantization_config group_size is {json.dumps(group)[:20]}: not a group size")
        bits = float(wbits)
        if group > 0:
            # an fp16 scale per group, and a packed zero point of `bits` per group: GPTQ's format
            # always stores qzeros, AWQ unless zero_point is false
            zeros = wbits if (method == "gptq" or quant.get("zero_point", True)) else 0
            bits += (16 + zeros) / group
        return method, bits, bits
    # bitsandbytes, compressed-tensors, ...: their bits per weight are not modelled here
    return method, None, None


def model_spec(config: Any, name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` (already parsed into a dict).

    ``name`` names the model (default: the config's ``_name_or_path``, else its first
    architecture). Raises :class:`InputError` ("model config: ...") on a config that is not a
    transformer language model's (no hidden size, layers or heads) or whose numbers disagree
    (heads not divisible by KV heads, top-k above the experts, a ``layer_types`` list of
    another length than the layers, ...)."""
    if not isinstance(config, dict):
        raise _bad("not a JSON object (a Hugging Face config.json is one)")
    cfg = _language_config(config)
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers", most=_MAX_COUNT)
    heads = _int(cfg, "num_attention_heads", "n_head", "num_heads", most=_MAX_COUNT)
    missing = [k for k, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                              ("num_attention_heads", heads)) if v is None]
    if missing:
        raise _bad(f"not a transformer language model's config: no {', '.join(missing)}")
    assert hidden is not None and layers is not None and heads is not None
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", most=_MAX_COUNT)
    if kv_heads is None:
        kv_heads = heads  # multi-head attention: as many KV heads as query heads
    if kv_heads > heads or heads % kv_heads:
        raise _bad(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")

    kv_lora = _int(cfg, "kv_lora_rank")
    q_lora = _int(cfg, "q_lora_rank")
    rope_dim = _int(cfg, "qk_rope_head_dim")
    nope_dim = _int(cfg, "qk_nope_head_dim")
    v_dim = _int(cfg, "v_head_dim")
    head_dim = _int(cfg, "head_dim", most=1 << 16)
    if head_dim is None:
        if rope_dim is not None and nope_dim is not None:
            head_dim = rope_dim + nope_dim  # MLA: the query/key head (DeepSeek-V3: 128 + 64)
        elif hidden % heads:
            raise _bad(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} and no head_dim is given")
        else:
            head_dim = hidden // heads

    experts = _int(cfg, "num_local_experts", "num_experts", "n_routed_experts", least=0, most=_MAX_COUNT) or None
    top_k = _int(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", least=0, most=_MAX_COUNT) or None
    if experts is not None and experts > 1:
        if top_k is None:
            raise _bad(f"{experts} experts but no num_experts_per_tok (the experts each token is routed to)")
        if top_k > experts:
            raise _bad(f"num_experts_per_tok {top_k} is more than the {experts} experts")
    elif experts is not None:
        experts = None  # one "expert" is a dense MLP
    if experts is None:
        top_k = None
    intermediate = _int(cfg, "intermediate_size", "n_inner", "ffn_dim")
    moe_intermediate = _int(cfg, "moe_intermediate_size")
    if experts is not None and moe_intermediate is None:
        # Mixtral, gpt-oss: intermediate_size is each expert's; no layer has a dense MLP
        moe_intermediate, intermediate = intermediate, None
        if moe_intermediate is None:
            raise _bad(f"{experts} experts but no intermediate_size or moe_intermediate_size")
    shared = _int(cfg, "n_shared_experts", "num_shared_experts", least=0, most=_MAX_COUNT)
    first_dense = _int(cfg, "first_k_dense_replace", least=0, most=_MAX_COUNT)
    if first_dense is not None and first_dense > layers:
        raise _bad(f"first_k_dense_replace {first_dense} is more than the {layers} layers")

    layer_types_raw = cfg.get("layer_types")
    layer_types: tuple[str, ...] | None = None
    if layer_types_raw is not None:
        if not isinstance(layer_types_raw, list) or not all(isinstance(t, str) for t in layer_types_raw):
            raise _bad("layer_types is not a list of strings")
        if len(layer_types_raw) != layers:
            raise _bad(f"layer_types has {len(layer_types_raw)} entries for {layers} layers")
        layer_types = tuple(str(t)[:40] for t in layer_types_raw)

    weight_dtype = _weight_dtype(cfg)
    quant = cfg.get("quantization_config")
    quant_method: str | None = None
    if isinstance(quant, dict) and quant:
        quant_method, expert_bits, dense_bits = _quant_bits(quant, weight_dtype)
    elif quant is not None and not isinstance(quant, dict):
        raise _bad("quantization_config is not a JSON object")
    else:
        plain = _DTYPE_BITS.get(weight_dtype) if weight_dtype else None
        expert_bits = dense_bits = float(plain) if plain else None

    if name is None:
        path = cfg.get("_name_or_path")
        arch = cfg.get("architectures")
        if isinstance(path, str) and path:
            name = path
        elif isinstance(arch, list) and arch and isinstance(arch[0], str):
            name = arch[0]
    model_type = cfg.get("model_type")
    sliding = cfg.get("sliding_window")
    use_sliding = cfg.get("use_sliding_window")
    return ModelSpec(
        name=name[:200] if isinstance(name, str) else None,
        model_type=model_type[:60] if isinstance(model_type, str) else None,
        hidden_size=hidden, intermediate_size=intermediate, moe_intermediate_size=moe_intermediate,
        num_layers=layers, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        num_experts=experts, experts_per_token=top_k, num_shared_experts=shared, first_dense_layers=first_dense,
        norm_topk_prob=_bool(cfg, "norm_topk_prob"),
        vocab_size=_int(cfg, "vocab_size", "n_vocab", most=1 << 26),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings"),
        weight_dtype=weight_dtype, quant_method=quant_method,
        expert_weight_bits=expert_bits if experts is not None else None, dense_weight_bits=dense_bits,
        # Qwen2/3 write a sliding_window they do not use (use_sliding_window false)
        sliding_window=(_int(cfg, "sliding_window") if isinstance(sliding, int) and use_sliding is not False
                        else None),
        layer_types=layer_types,
        kv_lora_rank=kv_lora, q_lora_rank=q_lora, qk_rope_head_dim=rope_dim, qk_nope_head_dim=nope_dim,
        v_head_dim=v_dim,
    )


def describe(spec: ModelSpec) -> str:
    """One line naming the model for text output ("gpt-oss-20b: gpt_oss, 24 layers, 32 experts
    top-4, mxfp4 experts")."""
    parts = [spec.model_type or "model", f"{spec.num_layers} layers"]
    if spec.is_moe:
        parts.append(f"{spec.num_experts} experts top-{spec.experts_per_token}")
    if spec.quant_method:
        parts.append(f"{spec.quant_method} weights" if spec.quant_method != "mxfp4" else "mxfp4 experts")
    elif spec.weight_dtype:
        parts.append(spec.weight_dtype)
    return f"{spec.name or 'unnamed'}: {', '.join(parts)}"



def model_line(block: Any) -> str | None:
    """The one line text reports print for an analysis' ``model`` block: the model, where it came
    from, and the ops it filled in (None without a block)."""
    if not isinstance(block, dict):
        return None
    spec = block["spec"] if isinstance(block.get("spec"), dict) else {}
    name = spec.get("name") or spec.get("model_type") or "no model"
    source = block.get("source")
    head = f"model: {name}" + (f" ({source})" if source else "")
    filled = block.get("filled_ops") or []
    if filled:
        ops = ", ".join(f"{f['name']} ({f['count']} call{'s' if f['count'] != 1 else ''}, {f['kernel_us'] / 1e3:.3g} ms)" for f in filled[:5])
        more = f" and {len(filled) - 5} more" if len(filled) > 5 else ""
        head += f": filled in {ops}{more}"
    elif spec:
        head += ": filled in no op (no op of this run needs it, or its experts are not the model's)"
    if block.get("context_tokens"):
        head += f"; --context {block['context_tokens']} tokens"
    return head
