"""The gap to the speed of light, explained (issue 28, point 7): a run's achieved decode tokens/s
beside the decode ceiling of its model on its GPU (:mod:`gpuscope.analyzers.ceiling`), and the
difference split into where the time went.

Two parts:

1. **The model's ceiling** (:func:`model_weights`, :func:`model_ceiling`): the bytes one decode
   step must read, from a Hugging Face config (:class:`~gpuscope.analyzers.modelspec.ModelSpec`):
   every dense weight once (attention, dense MLPs, the router, the ``lm_head``), for a mixture of
   experts the experts a batch of ``batch`` tokens is expected to touch
   (:func:`~gpuscope.analyzers.modelspec.expected_experts_touched`, uniform routing: an
   estimate), in the bits of the checkpoint's quantization; and the KV cache of every sequence
   (a sliding-window layer reads at most its window). ``gpuscope ceiling --model`` prints it.

2. **The gap** (:func:`decode_gap`): with ``T`` tokens generated in the analyzed window, ``B``
   sequences decoded together (``S = T / B`` steps) and the window's time ``W`` (the GPU span:
   first GPU activity to last, busy + idle, averaged over the ``N`` GPUs), the achieved step
   time is ``W / S`` and the ceiling's ``1 / ceiling tokens/s per sequence``. In GPU time summed
   over the devices (``N × W``), exactly::

       N × W = Σ_family (time − roof time of its judged work)     above the roof
             + GPU time without a roof                              coverage's unjudged, minus communication
             + idle                                                 gaps between GPU activity
             + communication                                        collectives (no link roof yet)
             − overlap                                              activity running concurrently on other streams
             + Σ_family roof time of the judged work

   so the gap ``N × W − N × S × ceiling step`` is the first five lines plus ``Σ roof time −
   N × S × ceiling step``: the work the judged ops need at their roofs beyond what the
   speed-of-light step counts (activations, KV-cache reads with ``--context 0``, weights read
   twice), negative when part of the ceiling's work runs in ops without a roof. Each part is
   shown per decode step (divided by ``N × S``) and as a share of the gap; the parts sum to the
   gap by construction, and the test checks each one against hand-computed numbers.

Judged work is read from the analysis's kernel table (every kernel name, not only the top ones):
a compute kernel or copy with a roof time and no ``model_error``; its time is ``roof_us +
saved_us`` and its family the kernel-name family (``gemm``, ``attention``, ``norm``, ``memory``
for copies, ...). That is the judged time of the ``coverage`` block.

Pure functions (the one store read, :func:`marks_in_window`, takes a connection like every
analyzer); they never print.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .ceiling import Claim, DecodeQuery, Decoding, KVCache, Model, bytes_per_param, decode_ceiling

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from ..specs import GpuSpec, SpecDB
    from .ceiling import CeilingResult
    from .modelspec import ModelSpec

__all__ = [
    "GAP_PARTS",
    "MarkTokens",
    "ModelWeights",
    "batch_from_marks",
    "batch_from_ops",
    "decode_gap",
    "gap_reason",
    "marks_in_window",
    "model_ceiling",
    "model_weights",
]

#: The kinds of part the gap splits into, in the order the table shows them.
GAP_PARTS = ("above_roof", "no_roof", "idle", "communication", "overlap", "roof_beyond_ceiling")

#: Bits per weight of the plain dtypes a config's ``torch_dtype`` names.
_PLAIN_BITS = {"bf16": 16.0, "fp16": 16.0, "fp32": 32.0}


# -- the model's bytes per decode step -------------------------------------------------------------


@dataclass(frozen=True)
class ModelWeights:
    """What one decode step of ``batch`` sequences reads of a model's weights, and its KV cache.

    Bytes are lower bounds: biases and norm weights (under 0.1 % of a transformer's) are left out.
    ``experts_touched`` is the expected number of distinct experts a MoE layer reads for the
    batch (an estimate under uniform routing); None for a dense model."""

    name: str | None
    batch: int
    #: dtype of the unquantized weights and of the compute (bf16 when the config does not say)
    plain_dtype: str
    attention_bytes: float
    dense_mlp_bytes: float
    router_bytes: float
    shared_expert_bytes: float
    expert_bytes: float
    lm_head_bytes: float
    #: parameters one token multiplies by (the routed top-k experts, not all touched): the compute bound
    params_per_token: float
    experts_touched: float | None
    moe_layers: int
    #: bytes of one expert's weights (gated MLP), None for a dense model
    one_expert_bytes: float | None
    kv_dtype: str
    #: KV-cache bytes one token adds in each layer (K and V; MLA: the compressed latent)
    kv_layer_bytes_per_token: float
    #: per layer: the sliding window (tokens) it reads at most, None for full attention
    kv_windows: tuple[int | None, ...]
    notes: tuple[str, ...] = ()

    @property
    def weight_bytes(self) -> float:
        """Weight bytes read per decode step."""
        return (self.attention_bytes + self.dense_mlp_bytes + self.router_bytes + self.shared_expert_bytes
                + self.expert_bytes + self.lm_head_bytes)

    def kv_bytes_per_sequence(self, context: int) -> float:
        """KV-cache bytes one sequence of ``context`` tokens reads per step (sliding-window layers
        read at most their window)."""
        return sum(self.kv_layer_bytes_per_token * (context if w is None else min(context, w))
                   for w in self.kv_windows)

    def to_json(self) -> dict[str, Any]:
        """The ``model`` block of ``ceiling --json --model`` (and of the gap)."""
        return {
            "name": self.name, "batch": self.batch, "dtype": self.plain_dtype,
            "weight_bytes": self.weight_bytes, "attention_bytes": self.attention_bytes,
            "dense_mlp_bytes": self.dense_mlp_bytes, "router_bytes": self.router_bytes,
            "shared_expert_bytes": self.shared_expert_bytes, "expert_bytes": self.expert_bytes,
            "lm_head_bytes": self.lm_head_bytes, "params_per_token": self.params_per_token,
            "moe_layers": self.moe_layers, "experts_touched_per_layer": self.experts_touched,
            "expert_bytes_each": self.one_expert_bytes, "kv_dtype": self.kv_dtype,
            "kv_bytes_per_token_per_layer": self.kv_layer_bytes_per_token,
            "sliding_window_layers": sum(1 for w in self.kv_windows if w is not None),
            "notes": list(self.notes),
        }


def _need(value: Any, what: str) -> Any:
    if value is None:
        raise InputError("model config", f"gives no {what}: the decode ceiling needs it")
    return value


def model_weights(spec: ModelSpec, batch: int, kv_dtype: str | None = None) -> ModelWeights:
    """The bytes one decode step of ``batch`` sequences reads of ``spec``'s weights (see the
    module docstring). ``kv_dtype`` overrides the KV cache's dtype (default: the model's dtype).

    Per layer: attention ``hidden × head_dim × (2 heads + 2 KV heads)`` (MLA: its low-rank
    projections), a dense gated MLP ``3 × hidden × intermediate`` or, in a MoE layer, the router
    ``hidden × experts``, the shared experts and the expected touched experts of
    ``3 × hidden × moe_intermediate`` each; then the ``lm_head`` ``vocab × hidden`` once (the
    input embedding is a gather of ``batch`` rows, not read whole). Quantized weights at the
    config's bits per weight (scales included); the router and ``lm_head`` stay in the model's
    dtype. Raises :class:`InputError` ("model config: ...") when the config lacks a size."""
    from .modelspec import expected_experts_touched

    if batch < 1:
        raise InputError("batch", f"{batch} is not a whole number of at least 1")
    notes: list[str] = []
    h = int(_need(spec.hidden_size, "hidden_size"))
    layers = int(_need(spec.num_layers, "num_hidden_layers"))
    heads = int(_need(spec.num_attention_heads, "num_attention_heads"))
    kv_heads = int(spec.num_kv_heads or heads)
    head_dim = int(_need(spec.head_dim, "head_dim"))
    vocab = int(_need(spec.vocab_size, "vocab_size"))
    plain = spec.weight_dtype if spec.weight_dtype in _PLAIN_BITS else "bf16"
    if spec.weight_dtype is None:
        notes.append("the config names no torch_dtype: unquantized weights taken as bf16")
    plain_bits = _PLAIN_BITS[plain]
    dense_bits = spec.dense_weight_bits or plain_bits
    if spec.quant_method and spec.dense_weight_bits is None:
        notes.append(f"the bits per weight of {spec.quant_method} are not modelled: weights taken as {plain}")

    # attention
    if spec.kv_lora_rank:
        # MLA (DeepSeek-V2/V3): q through an optional low rank, K/V from a compressed latent
        rope = int(spec.qk_rope_head_dim or 0)
        nope = int(spec.qk_nope_head_dim or head_dim - rope)
        v_dim = int(spec.v_head_dim or head_dim)
        q_params = (h * spec.q_lora_rank + spec.q_lora_rank * heads * (nope + rope)) if spec.q_lora_rank \
            else h * heads * (nope + rope)
        attn_params = (q_params + h * (spec.kv_lora_rank + rope) + spec.kv_lora_rank * heads * (nope + v_dim)
                       + heads * v_dim * h)
        kv_elems = float(spec.kv_lora_rank + rope)  # the latent and the shared rope key, per token and layer
    else:
        attn_params = h * head_dim * (2 * heads + 2 * kv_heads)
        kv_elems = 2.0 * kv_heads * head_dim
    attention = layers * attn_params * dense_bits / 8

    # MLPs
    dense_mlp = router = shared = experts = 0.0
    params_token = float(layers * attn_params)
    touched: float | None = None
    one_expert: float | None = None
    moe_layers = 0
    if spec.is_moe:
        e, k = int(spec.num_experts or 0), int(_need(spec.experts_per_token, "num_experts_per_tok"))
        moe_i = int(_need(spec.moe_intermediate_size, "moe_intermediate_size"))
        dense_layers = int(spec.first_dense_layers or 0)
        moe_layers = layers - dense_layers
        if dense_layers:
            inter = int(_need(spec.intermediate_size, "intermediate_size (of the first dense layers)"))
            dense_mlp = dense_layers * 3 * h * inter * dense_bits / 8
            params_token += dense_layers * 3 * h * inter
        expert_params = 3 * h * moe_i
        one_expert = expert_params * (spec.expert_weight_bits or dense_bits) / 8
        touched = expected_experts_touched(batch, e, k)
        n_shared = int(spec.num_shared_experts or 0)
        router = moe_layers * h * e * plain_bits / 8
        shared = moe_layers * n_shared * expert_params * dense_bits / 8
        experts = moe_layers * touched * one_expert
        params_token += moe_layers * (h * e + (k + n_shared) * expert_params)
        if touched < e:
            notes.append(f"experts touched per step: {touched:.3g} of {e} per layer expected for {batch} "
                         f"token{'s' if batch > 1 else ''} routed to top-{k} (uniform routing: an estimate; "
                         "real routers favour some experts and touch fewer)")
    else:
        inter = int(_need(spec.intermediate_size, "intermediate_size"))
        dense_mlp = layers * 3 * h * inter * dense_bits / 8
        params_token += layers * 3 * h * inter
    lm_head = vocab * h * plain_bits / 8
    params_token += vocab * h

    kd = kv_dtype or plain
    kd, kv_bytes = bytes_per_param(kd, "kv_dtype")
    windows: list[int | None] = []
    for i in range(layers):
        sliding = spec.sliding_window if (
            spec.sliding_window and (spec.layer_types is None or "sliding" in spec.layer_types[i])) else None
        windows.append(sliding)
    notes.append("a lower bound: biases and norm weights are left out, and the input embedding is a gather of "
                 "one row per sequence, not read whole")
    return ModelWeights(
        name=spec.name, batch=batch, plain_dtype=plain, attention_bytes=attention, dense_mlp_bytes=dense_mlp,
        router_bytes=router, shared_expert_bytes=shared, expert_bytes=experts, lm_head_bytes=lm_head,
        params_per_token=params_token, experts_touched=touched, moe_layers=moe_layers, one_expert_bytes=one_expert,
        kv_dtype=kd, kv_layer_bytes_per_token=kv_elems * kv_bytes, kv_windows=tuple(windows), notes=tuple(notes))


def _size(b: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:g} B"


def _weights_line(w: ModelWeights) -> str:
    parts = [f"attention {_size(w.attention_bytes)}"]
    if w.dense_mlp_bytes:
        parts.append(f"dense MLPs {_size(w.dense_mlp_bytes)}")
    if w.experts_touched is not None and w.one_expert_bytes is not None:
        parts.append(f"router {_size(w.router_bytes)}")
        if w.shared_expert_bytes:
            parts.append(f"shared experts {_size(w.shared_expert_bytes)}")
        parts.append(f"experts {w.moe_layers} layers × {w.experts_touched:.3g} touched × "
                     f"{_size(w.one_expert_bytes)} = {_size(w.expert_bytes)}")
    parts.append(f"lm_head {_size(w.lm_head_bytes)}")
    return f"{' + '.join(parts)} = {_size(w.weight_bytes)} read per step (from the model config)"


def model_ceiling(gpu: GpuSpec, spec: ModelSpec, decoding: Decoding, *, kv_dtype: str | None = None,
                  claim: Claim | None = None, db: SpecDB | None = None) -> tuple[CeilingResult, ModelWeights]:
    """The decode ceiling (:func:`~gpuscope.analyzers.ceiling.decode_ceiling`) of ``spec`` on
    ``gpu``: weight bytes per step from :func:`model_weights` for ``decoding.batch``, the compute
    bound from the parameters a token multiplies by, the KV cache from the config's layers, KV
    heads and head dim. The compute dtype is the quantization's where the GPU has a peak for it
    (fp8), else the model's dtype, unless ``decoding.compute_dtype`` says. Raises
    :class:`InputError` / :class:`~gpuscope.errors.ParameterError` as those functions do."""
    w = model_weights(spec, int(decoding.batch), kv_dtype)
    context = int(decoding.context)
    if decoding.compute_dtype is None:
        cdt = w.plain_dtype
        if spec.quant_method in ("fp8", "fbgemm_fp8") and gpu.peak_flops("fp8"):
            cdt = "fp8"
        if gpu.peak_flops(cdt):  # else decode_ceiling's default says there is no compute bound
            decoding = replace(decoding, compute_dtype=cdt)
    kv_seq = w.kv_bytes_per_sequence(context)
    kv = KVCache(bytes_per_token=kv_seq / context) if context > 0 else KVCache()
    query = DecodeQuery(Model(params=w.params_per_token, dtype=w.plain_dtype, model_bytes=w.weight_bytes),
                        decoding, kv, claim)
    result = decode_ceiling(gpu, query, db=db)
    lines: list[tuple[str, str]] = []
    for key, text in result.explanation:
        if key == "weights":
            text = _weights_line(w)
            lines.append((key, text))
            routed = " (the routed top-k experts, not every touched one)" if w.experts_touched is not None else ""
            lines.append(("params", f"{w.params_per_token / 1e9:.4g}e9 multiplied per token{routed}, for the "
                                    "compute bound"))
            continue
        if key == "KV cache" and context > 0:
            windowed = sum(1 for x in w.kv_windows if x is not None)
            per_layer = f"{w.kv_layer_bytes_per_token:,.0f} B per token per layer ({w.kv_dtype})"
            where = (f"; {windowed} of {len(w.kv_windows)} layers read at most their {max(x or 0 for x in w.kv_windows)}"
                     "-token window" if windowed else "")
            text = (f"{per_layer} × {len(w.kv_windows)} layers{where}: {_size(kv_seq)} per sequence × "
                    f"{decoding.batch} = {_size(result.kv_cache_bytes)}")
        lines.append((key, text))
    notes = list(w.notes) + [n for n in result.notes if "params taken as model bytes" not in n]
    return replace(result, explanation=lines, notes=notes, bytes_per_param=None), w


# -- tokens and batch of the run -----------------------------------------------------------------


@dataclass(frozen=True)
class MarkTokens:
    """Generated tokens the run's decode marks (``gpuscope.mark(..., tokens=N)``) carry inside the
    analyzed traces' time spans."""

    tokens: int
    steps: int
    #: tokens of each decode step (its batch), most common first
    per_step: tuple[int, ...]
    prefill_steps: int
    notes: tuple[str, ...] = ()


def marks_in_window(con: duckdb.DuckDBPyConnection, run_id: int, excluded_traces: list[int] | tuple[int, ...] = ()
                    ) -> MarkTokens | None:
    """The decode marks of ``run_id`` whose time falls inside the span (CPU and GPU events) of one
    of the run's traces with absolute times (``baseTimeNanoseconds``), capture-only traces
    (``excluded_traces``) left out; None when no decode mark with tokens falls inside one."""
    from ..store.read import annotation_rows
    from .energy import mark_phase

    skip = [int(t) for t in excluded_traces] or [-1]
    spans = con.execute(
        """
        WITH ev AS (
            SELECT trace_id, ts_ns, ts_ns + dur_ns AS end_ns FROM kernels WHERE run_id = $1
            UNION ALL SELECT trace_id, ts_ns, ts_ns + dur_ns FROM ops WHERE run_id = $1
        )
        SELECT min(ev.ts_ns), max(ev.end_ns) FROM ev JOIN traces t ON t.run_id = $1 AND t.trace_id = ev.trace_id
        WHERE (NOT coalesce(t.ts_relative, false) OR coalesce(t.base_time_ns, 0) <> 0)
          AND NOT list_contains($2, ev.trace_id)
        GROUP BY ev.trace_id ORDER BY 1
        """, [run_id, skip]).fetchall()
    spans = [(int(a), int(b)) for a, b in spans if a is not None and b is not None]
    if not spans:
        return None
    tokens = steps = prefill = 0
    per_step: Counter[int] = Counter()
    for a in annotation_rows(con, run_id, ["mark"]):
        if not any(lo <= a.ts_ns <= hi for lo, hi in spans):
            continue
        value = a.value if isinstance(a.value, dict) else {}
        phase = mark_phase(value)
        if phase == "prefill":
            prefill += 1
        if phase != "decode":
            continue
        try:
            n = int(value["tokens"])
        except (KeyError, TypeError, ValueError):
            continue
        if n > 0:
            tokens += n
            steps += 1
            per_step[n] += 1
    if not tokens:
        return None
    notes = []
    if prefill:
        notes.append(f"{prefill} prefill step(s) fall in the window too: their GPU time counts in the achieved time")
    return MarkTokens(tokens, steps, tuple(n for n, _ in per_step.most_common()), prefill, tuple(notes))


def batch_from_marks(marks: MarkTokens | None) -> tuple[int, str] | None:
    """The batch (tokens of the most common decode step) and how it was found, or None."""
    if marks is None or not marks.per_step:
        return None
    return marks.per_step[0], f"marks: {marks.per_step[0]} tokens per decode step"


def batch_from_ops(ops: list[dict[str, Any]], hidden_size: int | None) -> tuple[int, str] | None:
    """The batch a decode step ran, from the trace: the rows (the product of all dims but the
    last) of op inputs whose last dim is the model's hidden size, the value most calls had (a
    decode step's linear layers and norms take one row per sequence; prefill calls, fewer, take
    one per prompt token). None without such an op or a hidden size."""
    if not hidden_size:
        return None
    calls: Counter[int] = Counter()
    example: dict[int, str] = {}
    for o in ops:
        dims = o.get("input_dims")
        first = dims[0] if isinstance(dims, list) and dims else None
        if not (isinstance(first, list) and len(first) >= 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                    and x > 0 for x in first)):
            continue
        if first[-1] != hidden_size:
            continue
        rows = math.prod(first[:-1])
        calls[rows] += int(o.get("count") or 0)
        example.setdefault(rows, f"{o.get('name')} {list(first)}")
    if not calls:
        return None
    rows = min(calls, key=lambda r: (-calls[r], r))
    return rows, f"trace: {calls[rows]} calls take {rows} rows of the hidden size {hidden_size} (e.g. {example[rows]})"


# -- the gap -------------------------------------------------------------------------------------


def gap_reason(code: str, message: str) -> dict[str, str]:
    """The ``gap_reason`` of an analysis without a gap: a code (``not_asked``, ``no_model``,
    ``no_tokens``, ``no_gpu_activity``, ``no_gpu_spec``, ``bad_model``) and one line."""
    return {"code": code, "message": message}


@dataclass
class _Family:
    time_us: float = 0.0
    roof_us: float = 0.0
    kernels: int = 0
    names: list[tuple[float, str]] = field(default_factory=list)


def _judged_by_family(kernels: list[dict[str, Any]]) -> dict[str, _Family]:
    """Judged work per kernel family: time (roof + headroom) and roof time, GPU µs summed over devices."""
    fams: dict[str, _Family] = defaultdict(_Family)
    for k in kernels:
        if k.get("category") not in ("compute", "memory") or k.get("model_error"):
            continue
        roof = k.get("roof_us")
        if roof is None:
            continue
        fam = "memory" if k.get("category") == "memory" else str(k.get("family") or "other")
        f = fams[fam]
        f.roof_us += float(roof)
        f.time_us += float(roof) + float(k.get("saved_us") or 0.0)
        f.kernels += 1
        f.names.append((float(k.get("saved_us") or 0.0), str(k.get("name"))))
    return fams


def decode_gap(doc: dict[str, Any], spec: ModelSpec, gpu: GpuSpec, *, tokens: int, token_source: str,
               batch: int, batch_source: str, context: int = 0, context_source: str = "default",
               db: SpecDB | None = None) -> dict[str, Any]:
    """The ``gap`` block of an analysis document ``doc`` (from
    :func:`~gpuscope.analyzers.breakdown.analyze_run` with every kernel listed: ``top=None``).

    ``tokens`` were generated in the analyzed window by ``batch`` sequences decoded together;
    ``context`` is each sequence's KV tokens; ``gpu`` is the spec the analysis judged against.
    Times are GPU µs summed over the run's ``N`` devices, shown per step after dividing by
    ``N × steps``. Raises :class:`InputError` for a model the ceiling cannot size."""
    per_device = doc.get("per_device") or []
    n_gpus = max(len(per_device), 1)
    notes: list[str] = []
    if n_gpus > 1:
        notes.append(f"{n_gpus} GPUs: taken as one model shared by tensor parallelism (the ceiling's bandwidth "
                     "adds up); times are summed over them and divided by {n} per step".format(n=n_gpus))
    roof_bw = None
    for d in (doc.get("roofline") or {}).get("devices") or []:
        if d.get("spec") == gpu.key and d.get("mem_bw_bytes_per_s"):
            roof_bw = float(d["mem_bw_bytes_per_s"])
            break
    fraction = 1.0
    if roof_bw and gpu.mem_bw_bytes_per_s and roof_bw != gpu.mem_bw_bytes_per_s:
        # the ops were judged against a measured roof: the ceiling uses the same bandwidth
        fraction = min(roof_bw / float(gpu.mem_bw_bytes_per_s), 1.0)
        notes.append(f"the ceiling uses the bandwidth the ops were judged against ({roof_bw / 1e12:.3g} TB/s, "
                     f"{fraction * 100:.1f} % of the spec's)")
    ceiling, weights = model_ceiling(gpu, spec, Decoding(batch=batch, context=context, num_gpus=n_gpus,
                                                         bandwidth_fraction=fraction), db=db)
    if context == 0:
        notes.append("context 0: the ceiling reads no KV cache (pass --context TOKENS, the KV tokens per sequence)")
    if tokens < batch:
        # fewer tokens than one step of the batch: not a decode window, or the batch is not one
        notes.append(f"{tokens} tokens are less than one step of batch {batch}: the window may not be a decode "
                     "(a prefill takes one row per prompt token), or pass --batch")

    t = doc["time_us"]
    span_us = sum(float(d.get("span_us") or 0.0) for d in per_device)
    busy_us = sum(float(d.get("busy_us") or 0.0) for d in per_device)
    activity_us = float(t["compute"]) + float(t["communication"]) + float(t["memory"])
    wall_us = span_us / n_gpus
    steps = tokens / batch
    ceiling_step_us = 1e6 / ceiling.ceiling_tokens_per_s
    ceiling_us = n_gpus * steps * ceiling_step_us  # GPU µs the ceiling allows, all devices
    gap_us = span_us - ceiling_us

    fams = _judged_by_family(doc.get("kernels") or [])
    judged_us = sum(f.time_us for f in fams.values())
    roof_us = sum(f.roof_us for f in fams.values())
    no_roof_us = float(t["compute"]) + float(t["memory"]) - judged_us
    overlap_us = activity_us - busy_us
    per_step = n_gpus * steps

    def part(kind: str, label: str, us: float, **extra: Any) -> dict[str, Any]:
        return {"part": kind, "label": label, "gpu_us": us, "step_us": us / per_step,
                "share_of_gap": us / gap_us if gap_us else None, **extra}

    parts = []
    for fam, f in sorted(fams.items(), key=lambda kv: (-(kv[1].time_us - kv[1].roof_us), kv[0])):
        top = [n for _, n in sorted(f.names, reverse=True)[:3]]
        parts.append(part("above_roof", f"{fam} above its roof", f.time_us - f.roof_us, family=fam,
                          time_us=f.time_us, roof_us=f.roof_us, kernels=f.kernels, largest=top))
    parts.append(part("no_roof", "GPU time without a roof (unjudged)", no_roof_us))
    parts.append(part("idle", "idle / launch gaps", float(t["idle"])))
    parts.append(part("communication", "communication", float(t["communication"])))
    parts.append(part("overlap", "streams overlapping (counted twice above)", -overlap_us if overlap_us else 0.0))
    parts.append(part("roof_beyond_ceiling", "roof time of the judged work beyond the ceiling", roof_us - ceiling_us,
                      roof_us=roof_us, ceiling_us=ceiling_us))
    parts_sum = sum(p["gpu_us"] for p in parts)

    achieved_seq = steps / (wall_us / 1e6) if wall_us > 0 else None
    cov = doc.get("coverage") or {}
    if cov.get("share") is not None and cov["share"] < 0.95:
        notes.append(f"{cov['share'] * 100:.0f} % of the GPU time is judged against a roof: the rest is the one "
                     "'without a roof' line (the coverage line names its largest parts), whose share of the "
                     "ceiling's work is unknown")
    # the ceiling's own "speed-of-light bound" note is what the parts spell out: left out here
    notes.extend(n for n in ceiling.notes if not n.startswith("a speed-of-light bound"))
    return {
        "model": spec.name, "gpu": gpu.key, "num_gpus": n_gpus,
        "tokens": tokens, "token_source": token_source,
        "batch": batch, "batch_source": batch_source,
        "context": context, "context_source": context_source,
        "steps": steps,
        "time_basis": "gpu_span: first to last GPU activity of the window (busy + idle), averaged over the GPUs",
        "time_us": wall_us,
        "achieved_tokens_per_s": tokens / (wall_us / 1e6) if wall_us > 0 else None,
        "achieved_tokens_per_s_per_sequence": achieved_seq,
        "ceiling_tokens_per_s": ceiling.aggregate_ceiling_tokens_per_s,
        "ceiling_tokens_per_s_per_sequence": ceiling.ceiling_tokens_per_s,
        "fraction_of_ceiling": (achieved_seq / ceiling.ceiling_tokens_per_s) if achieved_seq is not None else None,
        "binding": ceiling.binding,
        "bytes_per_step": ceiling.bytes_per_step,
        "bandwidth_bytes_per_s": ceiling.bandwidth_bytes_per_s,
        "ceiling_step_us": ceiling_step_us,
        "achieved_step_us": wall_us / steps if steps else None,
        "gap_step_us": gap_us / per_step,
        "gap_gpu_us": gap_us,
        "judged_us": judged_us,
        "parts": parts,
        "parts_sum_gpu_us": parts_sum,
        "weights": weights.to_json(),
        "ceiling": ceiling.to_json(),
        "notes": notes,
    }


def add_gap(con: duckdb.DuckDBPyConnection, run_id: int, doc: dict[str, Any], spec: ModelSpec | None, *,
            tokens: int | None = None, batch: int | None = None, context: int | None = None,
            specs_path: str | None = None) -> None:
    """Set ``doc["gap"]`` (:func:`decode_gap`) and ``doc["gap_reason"]`` (None, or why there is no
    gap: :func:`gap_reason`) on the analysis ``doc`` of ``run_id``.

    ``tokens`` (``--tokens``) defaults to the tokens of the decode marks inside the analyzed
    traces; ``batch`` (``--batch``) to the marks' tokens per decode step, else the rows the
    trace's decode ops took (:func:`batch_from_ops`), else 1; ``context`` (``--context``) to 0.
    A model the ceiling cannot size gives no gap (``bad_model``), never an error."""
    from ..specs import load_specs

    doc["gap"] = None
    asked = spec is not None or tokens is not None or batch is not None
    if not doc.get("gpu_activity"):
        doc["gap_reason"] = gap_reason("no_gpu_activity" if asked else "not_asked",
                                       "the run has no GPU activity: no decode to set beside a ceiling")
        return
    excluded = [int(e["trace_id"]) for e in doc.get("excluded_traces") or () if e.get("trace_id") is not None]
    marks = marks_in_window(con, run_id, excluded) if tokens is None or batch is None else None
    if tokens is not None:
        token_source = "--tokens"
    elif marks is not None:
        tokens = marks.tokens
        token_source = f"marks: {marks.steps} decode steps inside the traced window"
    if spec is None:
        doc["gap_reason"] = gap_reason(
            "no_model" if asked else "not_asked",
            "no model: pass --model CONFIG.json (the Hugging Face config of the model that ran) to set the run's "
            "decode tokens/s beside its ceiling")
        return
    if tokens is None:
        doc["gap_reason"] = gap_reason(
            "no_tokens", "no tokens: pass --tokens N (tokens generated in the analyzed window, all sequences), "
                         "or record with gpuscope run and gpuscope.mark(..., tokens=N)")
        return
    keys = sorted({str(d["spec"]) for d in (doc.get("roofline") or {}).get("devices") or [] if d.get("spec")})
    if len(keys) != 1:
        doc["gap_reason"] = gap_reason(
            "no_gpu_spec", "the run's GPU is not in the spec database: pass --gpu KEY" if not keys else
            f"the run's devices are different GPUs ({', '.join(keys)}): the ceiling is for one kind")
        return
    db = load_specs(specs_path)
    gpu = db.get(keys[0])
    if gpu is None or not gpu.mem_bw_bytes_per_s:
        doc["gap_reason"] = gap_reason("no_gpu_spec", f"{keys[0]} has no memory bandwidth in the spec database")
        return
    if batch is not None:
        batch_source = "--batch"
    else:
        found = batch_from_marks(marks) or batch_from_ops(doc.get("ops") or [], spec.hidden_size)
        batch, batch_source = found if found is not None else (1, "default (no --batch, no marks, no decode op "
                                                                  "of the hidden size in the trace)")
    try:
        gap = decode_gap(doc, spec, gpu, tokens=int(tokens), token_source=token_source, batch=int(batch),
                         batch_source=batch_source, context=int(context or 0),
                         context_source="--context" if context is not None else "default", db=db)
    except InputError as exc:  # a config the ceiling cannot size: said, not raised
        doc["gap_reason"] = gap_reason("bad_model", str(exc))
        return
    if marks is not None and token_source.startswith("marks"):
        gap["notes"] = list(marks.notes) + gap["notes"]
    doc["gap"] = gap
    doc["gap_reason"] = None
