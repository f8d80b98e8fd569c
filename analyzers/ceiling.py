"""Decode speed-of-light: the most tokens/s a GPU can produce for a model size, and whether a claim fits.

One decode step produces one token for every sequence of the batch, and it must read from device
memory at least the weights once plus the KV cache of every sequence::

    bytes_per_step          = weight_bytes + batch × context × kv_bytes_per_token
    kv_bytes_per_token      = 2 (K and V) × layers × kv_heads × head_dim × kv_dtype_bytes
    memory-bound tokens/s   = bandwidth / bytes_per_step                 (per sequence)
    compute-bound tokens/s  = peak_flops[dtype] / (2 × params × batch)   (per sequence)
    ceiling                 = min(memory-bound, compute-bound); aggregate = batch × ceiling

It is a speed-of-light bound: it ignores launch gaps, attention FLOPs, communication and everything else a
real step spends time on, so real decoding is slower. A claim above it needs something the arithmetic does
not model (speculative decoding emitting several tokens per step, a smaller model or dtype than stated, a
batch total reported as per-sequence speed).

Pure functions; they return data (including the arithmetic as text lines) and never print.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, ParameterError
from ..specs import DTYPES, GpuSpec, SpecDB, normalize_dtype

__all__ = [
    "BYTES_PER_PARAM",
    "PARAMETERS",
    "CeilingResult",
    "Claim",
    "DecodeQuery",
    "Decoding",
    "KVCache",
    "Model",
    "ParameterError",
    "bytes_per_param",
    "decode_ceiling",
    "default_compute_dtype",
    "kv_bytes_per_token",
    "parse_bytes",
    "parse_count",
]

#: Bytes per parameter (or per KV element) of the weight and KV-cache dtypes a query may name.
BYTES_PER_PARAM: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0,
                                     "int4": 0.5, "fp4": 0.5}

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_BYTE_UNITS = {"b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2.0**10, "mib": 2.0**20,
               "gib": 2.0**30, "tib": 2.0**40}
_NUM = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)"


def parse_count(text: str | float | int, what: str = "count") -> float:
    """A count such as ``70e9``, ``70B``, ``7.5M``, ``1.5T``, ``8k`` (k=1e3, M=1e6, B/G=1e9, T=1e12).

    Raises :class:`InputError` (source ``what``) for text that is not a count, or a negative or
    non-finite value.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().replace("_", "").replace(",", "")
        m = re.fullmatch(_NUM + r"\s*([kmbgt]?)", s, re.IGNORECASE)
        if not m:
            raise InputError(what, f"'{text}' is not a count (write e.g. 70e9, 70B, 7.5M or 1.5T)")
        value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]
    if not math.isfinite(value):
        raise InputError(what, f"'{text}' is not a finite number")
    if value < 0:
        raise InputError(what, f"'{text}' is negative")
    return value


def parse_bytes(text: str | float | int, what: str = "bytes") -> float:
    """A byte size: a count (``140e9``, ``140B`` = 140 billion) or a unit (``140GB``, ``130.4GiB``, ``1.5TB``)."""
    if isinstance(text, str):
        s = text.strip().replace("_", "").replace(",", "")
        m = re.fullmatch(_NUM + r"\s*([kmgt]i?b)", s, re.IGNORECASE)
        if m:
            value = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
            if not math.isfinite(value) or value < 0:
                raise InputError(what, f"'{text}' is not a positive size")
            return value
    return parse_count(text, what)


def bytes_per_param(dtype: str, parameter: str = "dtype") -> tuple[str, float]:
    """(canonical dtype, bytes per element) for fp32/fp16/bf16/fp8/int8/int4/fp4 and their usual spellings.

    Raises :class:`ParameterError` naming ``parameter`` for any other dtype."""
    d = str(dtype).strip().lower()
    canon = d if d in BYTES_PER_PARAM else {"uint4": "int4", "nf4": "int4", "q4": "int4", "w4a16": "int4"}.get(d)
    if canon is None:
        canon = normalize_dtype(d)
    if canon not in BYTES_PER_PARAM:
        raise ParameterError(parameter, "unknown dtype '{value}' (one of {known})",
                             {"value": dtype, "known": ", ".join(BYTES_PER_PARAM)})
    return canon, BYTES_PER_PARAM[canon]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, kv_dtype_bytes: float) -> float:
    """KV-cache bytes one token adds: 2 (K and V) × layers × kv_heads × head_dim × bytes per element."""
    return 2.0 * layers * kv_heads * head_dim * kv_dtype_bytes


def default_compute_dtype(weight_dtype: str, spec: GpuSpec) -> tuple[str, str | None]:
    """The dtype whose peak bounds the matmuls for weights of ``weight_dtype``, and a note when it differs.

    fp16/bf16/fp32 compute in their own dtype; fp8/int8/fp4 use their own units where the GPU has them,
    else (weight-only quantisation) they are dequantised and computed in fp16; int4 is weight-only
    (AWQ/GPTQ style) and computes in fp16.
    """
    if weight_dtype in ("fp16", "bf16", "fp32"):
        return weight_dtype, None
    if weight_dtype == "int4":
        return "fp16", "int4 weights are weight-only quantisation: the matmuls run in fp16"
    if spec.peak_flops(weight_dtype):
        return weight_dtype, None
    return "fp16", (f"{spec.key} has no {weight_dtype} peak: weights are dequantised and the matmuls run in fp16")


@dataclass(frozen=True)
class CeilingResult:
    """The decode ceiling of a model on a GPU; ``to_json()`` is the ``ceiling --json`` document."""

    gpu: str
    gpu_name: str
    num_gpus: int
    params: float | None
    dtype: str | None
    bytes_per_param: float | None
    weight_bytes: float
    batch: int
    context: int
    kv_bytes_per_token: float
    kv_cache_bytes: float
    bytes_per_step: float
    spec_bandwidth_bytes_per_s: float
    bandwidth_fraction: float
    bandwidth_bytes_per_s: float
    memory_bound_tokens_per_s: float
    flops_per_step: float | None
    compute_dtype: str | None
    compute_peak_flops_per_s: float | None
    compute_bound_tokens_per_s: float | None
    ceiling_tokens_per_s: float
    aggregate_ceiling_tokens_per_s: float
    binding: str
    memory_capacity_bytes: float | None
    fits_in_memory: bool | None
    realistic: dict[str, Any]
    claimed_tokens_per_s: float | None = None
    claim_basis: str | None = None
    verdict: str | None = None
    claim_ratio: float | None = None
    explanation: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "gpu": self.gpu, "gpu_name": self.gpu_name, "num_gpus": self.num_gpus,
            "params": self.params, "dtype": self.dtype, "bytes_per_param": self.bytes_per_param,
            "weight_bytes": self.weight_bytes, "batch": self.batch, "context": self.context,
            "kv_bytes_per_token": self.kv_bytes_per_token, "kv_cache_bytes": self.kv_cache_bytes,
            "bytes_per_step": self.bytes_per_step,
            "spec_bandwidth_bytes_per_s": self.spec_bandwidth_bytes_per_s,
            "bandwidth_fraction": self.bandwidth_fraction, "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "memory_bound_tokens_per_s": self.memory_bound_tokens_per_s,
            "flops_per_step": self.flops_per_step, "compute_dtype": self.compute_dtype,
            "compute_peak_flops_per_s": self.compute_peak_flops_per_s,
            "compute_bound_tokens_per_s": self.compute_bound_tokens_per_s,
            "ceiling_tokens_per_s": self.ceiling_tokens_per_s,
            "aggregate_ceiling_tokens_per_s": self.aggregate_ceiling_tokens_per_s,
            "binding": self.binding,
            "memory_capacity_bytes": self.memory_capacity_bytes, "fits_in_memory": self.fits_in_memory,
            "realistic": self.realistic,
        }
        if self.claimed_tokens_per_s is not None:
            doc.update({"claimed_tokens_per_s": self.claimed_tokens_per_s, "claim_basis": self.claim_basis,
                        "verdict": self.verdict, "claim_ratio": self.claim_ratio})
        doc["explanation"] = [f"{k}: {v}" for k, v in self.explanation]
        doc["notes"] = list(self.notes)
        return doc


# -- formatting of the arithmetic ----------------------------------------------------------------


def _sci(x: float) -> str:
    """70e9, 5.3e12, 1.307e15, 140e9; plain below 1000."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    exp = int(math.floor(math.log10(abs(x))))
    if exp < 3:
        return f"{x:.4g}"
    e3 = exp - exp % 3
    mant = x / 10**e3
    text = f"{mant:.4g}"
    if "e" in text:  # rounding pushed it to the next power
        return _sci(float(text) * 10**e3)
    return f"{text}e{e3}"


def _size(b: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:g} B"


def _bw(b: float) -> str:
    return f"{b / 1e12:.4g} TB/s"


def _tps(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _short(spec: GpuSpec) -> str:
    """A short display name for the arithmetic lines: the model token of the name (MI300X, H100)."""
    return spec.key.upper() if len(spec.key) <= 8 else spec.name


# -- the computation ---------------------------------------------------------------------------


def _realistic(spec: GpuSpec, db: SpecDB | None, bytes_per_step: float, num_gpus: int,
               compute_bound: float | None) -> dict[str, Any]:
    ms = [(spec.key, m) for m in spec.bandwidth_measurements()]
    # published measurements of this model (the spec data), not of the machine gpuscope runs on
    basis = f"{spec.key} (published measurements)"
    if not ms and db is not None:
        ms = [(s.key, m) for s in db.all() if s.vendor == spec.vendor for m in s.bandwidth_measurements()]
        vendor = {"amd": "AMD", "nvidia": "NVIDIA"}.get(spec.vendor, spec.vendor)
        basis = f"other {vendor} GPUs (none for {spec.key})"
        if not ms:
            ms = [(s.key, m) for s in db.all() for m in s.bandwidth_measurements()]
            basis = f"other GPUs (none for {spec.key})"
    if not ms:
        return {"basis": None, "note": "no measured bandwidth in the spec data"}
    fr = sorted(m.fraction_of_spec for _, m in ms if m.fraction_of_spec is not None)
    low, high, med = fr[0], fr[-1], statistics.median(fr)
    bw = (spec.mem_bw_bytes_per_s or 0.0) * num_gpus

    def tps(f: float) -> float:
        t = bw * f / bytes_per_step
        return min(t, compute_bound) if compute_bound is not None else t

    return {
        "basis": basis,
        "bandwidth_fraction_low": low, "bandwidth_fraction_high": high, "bandwidth_fraction_median": med,
        "ceiling_tokens_per_s": tps(med),
        "ceiling_tokens_per_s_range": [tps(low), tps(high)],
        "measurements": [{"gpu": k, "metric": m.metric, "fraction_of_spec": m.fraction_of_spec,
                          "method": m.method, "source": m.source} for k, m in ms],
    }


# -- the question -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """The model's size: ``params`` with ``dtype``, or ``model_bytes`` (``params`` then only feeds
    the compute bound; with ``model_bytes`` and ``dtype`` alone, params = model_bytes / bytes per param)."""

    params: float | None = None
    #: weight dtype (fp32, fp16, bf16, fp8, int8, int4, fp4 and their usual spellings)
    dtype: str | None = None
    model_bytes: float | None = None


@dataclass(frozen=True)
class Decoding:
    """How the model is decoded: ``batch`` sequences of ``context`` tokens each on ``num_gpus``
    GPUs sharing the model (tensor parallel: bandwidth, compute and capacity add up,
    communication is ignored), at ``bandwidth_fraction`` of the spec bandwidth, the compute bound
    at the peak of ``compute_dtype`` (None: from the weight dtype)."""

    batch: int = 1
    context: int = 0
    num_gpus: int = 1
    bandwidth_fraction: float = 1.0
    compute_dtype: str | None = None


@dataclass(frozen=True)
class KVCache:
    """KV-cache bytes per token: ``bytes_per_token``, or ``layers`` × ``kv_heads`` × ``head_dim`` in
    ``dtype`` (default: the weight dtype). Required when the context is not empty."""

    bytes_per_token: float | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class Claim:
    """A claimed decode speed to judge: per sequence, or the total over the batch (``aggregate``)."""

    tokens_per_s: float
    aggregate: bool = False


@dataclass(frozen=True)
class DecodeQuery:
    """Everything :func:`decode_ceiling` needs besides the GPU. Errors name these fields (see
    :data:`PARAMETERS`), never how a front end spells them."""

    model: Model
    decoding: Decoding = field(default_factory=Decoding)
    kv: KVCache = field(default_factory=KVCache)
    claim: Claim | None = None


#: The quantities a :class:`ParameterError` of :func:`decode_ceiling` can name, and the field of
#: :class:`DecodeQuery` each one is ("model_size" is the model as a whole).
PARAMETERS = {
    "model_size": "model", "params": "model.params", "dtype": "model.dtype", "model_bytes": "model.model_bytes",
    "batch": "decoding.batch", "context": "decoding.context", "num_gpus": "decoding.num_gpus",
    "bandwidth_fraction": "decoding.bandwidth_fraction", "compute_dtype": "decoding.compute_dtype",
    "kv_bytes_per_token": "kv.bytes_per_token", "layers": "kv.layers", "kv_heads": "kv.kv_heads",
    "head_dim": "kv.head_dim", "kv_dtype": "kv.dtype",
    "claimed_tokens_per_s": "claim.tokens_per_s", "claim_aggregate": "claim.aggregate",
}


# -- the computation, step by step --------------------------------------------------------------


def _whole(value: float, parameter: str, least: int) -> None:
    if value < least or int(value) != value:
        raise ParameterError(parameter, f"must be a whole number >= {least}, not {{value:g}}", {"value": value})


def _check(spec: GpuSpec, q: DecodeQuery) -> tuple[str | None, float | None]:
    """Reject missing or inconsistent model and decoding inputs; the weight dtype and its bytes
    per parameter (None, None without a dtype)."""
    m, d = q.model, q.decoding
    if m.params is None and m.model_bytes is None:
        raise ParameterError("model_size", "pass {params} N with {dtype}, or {model_bytes}")
    if m.params is not None and m.params <= 0:
        raise ParameterError("params", "must be positive")
    if m.model_bytes is not None and m.model_bytes <= 0:
        raise ParameterError("model_bytes", "must be positive")
    canon, bpp = (None, None)
    if m.dtype is not None:
        canon, bpp = bytes_per_param(m.dtype, "dtype")
    if m.params is not None and m.model_bytes is None and canon is None:
        raise ParameterError("params", "needs {dtype} (fp32, fp16, bf16, fp8, int8, int4 or fp4) to know the bytes "
                                       "per parameter")
    _whole(d.batch, "batch", 1)
    _whole(d.context, "context", 0)
    _whole(d.num_gpus, "num_gpus", 1)
    if not (0 < d.bandwidth_fraction <= 1):
        raise ParameterError("bandwidth_fraction", "must be in (0, 1], not {value:g}", {"value": d.bandwidth_fraction})
    if q.claim is not None and q.claim.tokens_per_s <= 0:
        raise ParameterError("claimed_tokens_per_s", "must be positive")
    if not spec.mem_bw_bytes_per_s:
        raise InputError(spec.key, "the spec entry has no memory bandwidth")
    return canon, bpp


def _weights(m: Model, canon: str | None, bpp: float | None,
             lines: list[tuple[str, str]], notes: list[str]) -> tuple[float, float | None]:
    """Weight bytes read each step, and the parameter count for the compute bound (None: unknown)."""
    params = m.params
    if m.model_bytes is not None:
        weight_bytes = float(m.model_bytes)
        lines.append(("weights", f"{_size(weight_bytes)} ({_sci(weight_bytes)} B, --model-bytes)"))
        if params is None and bpp:
            params = weight_bytes / bpp
            notes.append(f"params taken as model bytes / {bpp:g} B ({canon}) = {_sci(params)} for the compute bound")
    else:
        assert params is not None and bpp is not None
        weight_bytes = params * bpp
        lines.append(("weights", f"{_sci(params)} params × {bpp:g} B ({canon}) = {_size(weight_bytes)}"))
    return weight_bytes, params


def _kv_per_token(kv: KVCache, canon: str | None, context: int) -> tuple[float, str]:
    """KV-cache bytes per token and how they were found."""
    layer_args = {"layers": kv.layers, "kv_heads": kv.kv_heads, "head_dim": kv.head_dim}
    given = [k for k, v in layer_args.items() if v is not None]
    if kv.bytes_per_token is not None and given:
        raise ParameterError("kv_bytes_per_token", "give it or {layers}, {kv_heads}, {head_dim}, not both")
    if given and len(given) < 3:
        missing = [k for k in layer_args if layer_args[k] is None]
        raise ParameterError(given[0], "the KV cache size also needs " + " and ".join(f"{{{k}}}" for k in missing))
    for k, v in layer_args.items():
        if v is not None:
            _whole(v, k, 1)
    if kv.bytes_per_token is not None:
        kv_tok = float(kv.bytes_per_token)
        return kv_tok, f"{kv_tok:,.0f} B per token (--kv-bytes-per-token)"
    if given:
        kd = kv.dtype or canon
        if kd is None:
            raise ParameterError("kv_dtype", "needed with {layers}/{kv_heads}/{head_dim} when {dtype} is not given")
        kd, kbytes = bytes_per_param(kd, "kv_dtype")
        assert kv.layers is not None and kv.kv_heads is not None and kv.head_dim is not None
        layers, heads, dim = int(kv.layers), int(kv.kv_heads), int(kv.head_dim)
        kv_tok = kv_bytes_per_token(layers, heads, dim, kbytes)
        return kv_tok, (f"2 × {layers} layers × {heads} KV heads × {dim} head dim × {kbytes:g} B ({kd}) "
                        f"= {kv_tok:,.0f} B per token")
    if context > 0:
        raise ParameterError("context", "a context needs the KV cache size: pass {kv_bytes_per_token}, "
                                        "or {layers}, {kv_heads} and {head_dim} (and {kv_dtype} if it differs from {dtype})")
    return 0.0, ""


def _compute_bound(spec: GpuSpec, params: float, canon: str | None, d: Decoding, batch: int, num_gpus: int,
                   lines: list[tuple[str, str]], notes: list[str]
                   ) -> tuple[str, float | None, float | None, float | None]:
    """(compute dtype, FLOPs per step, peak FLOP/s of all GPUs, tokens/s per sequence); the last
    three None when the GPU has no peak for that dtype."""
    if d.compute_dtype is not None:
        cdt = normalize_dtype(d.compute_dtype)
        if cdt is None:
            raise ParameterError("compute_dtype", "unknown dtype '{value}' (one of {known})",
                                 {"value": d.compute_dtype, "known": ", ".join(DTYPES)})
        if not spec.peak_flops(cdt):
            raise ParameterError("compute_dtype", "{gpu_key} has no {peak_dtype} peak in the spec database",
                                 {"gpu_key": spec.key, "peak_dtype": cdt})
    else:
        cdt, why = default_compute_dtype(canon or "fp16", spec)
        if why:
            notes.append(why)
        if canon is None:
            notes.append("no --dtype: the compute bound uses the fp16 peak")
    peak = spec.peak_flops(cdt)
    if not peak:
        notes.append(f"{spec.key} has no {cdt} peak: no compute bound")
        return cdt, None, None, None
    flops_step = 2.0 * params * batch
    comp_peak = float(peak) * num_gpus
    comp_tps = comp_peak / flops_step
    peak_text = f"{cdt} peak {'%d × ' % num_gpus if num_gpus > 1 else ''}{peak / 1e12:.5g} TFLOP/s"
    lines.append(("compute bound", f"2 × {_sci(params)} params × batch {batch} = {_sci(flops_step)} FLOP per step; "
                                   f"{peak_text} ⇒ {_sci(comp_peak)} / {_sci(flops_step)} = {_tps(comp_tps)} "
                                   "tokens/s per sequence"))
    return cdt, flops_step, comp_peak, comp_tps


def _realistic_line(spec: GpuSpec, realistic: dict[str, Any]) -> tuple[str, str]:
    srcs = sorted({f"{m['metric']} {m['source']}" for m in realistic["measurements"] if m["gpu"] == spec.key})
    srcs_txt = f" ({', '.join(srcs)})" if srcs else ""
    lo, hi = realistic["ceiling_tokens_per_s_range"]
    return ("realistic", f"measured memory bandwidth on {realistic['basis']} reaches "
                         f"{realistic['bandwidth_fraction_low'] * 100:.1f}–{realistic['bandwidth_fraction_high'] * 100:.1f}% "
                         f"of spec{srcs_txt} ⇒ about {_tps(realistic['ceiling_tokens_per_s'])} tokens/s per sequence "
                         f"({_tps(lo)}–{_tps(hi)})")


def _capacity_notes(spec: GpuSpec, bytes_per_step: float, num_gpus: int,
                    notes: list[str]) -> tuple[float | None, bool | None]:
    """Device memory of all GPUs and whether one step's bytes fit in it (None: unknown)."""
    capacity = float(spec.memory_bytes) * num_gpus if spec.memory_bytes else None
    fits = None if capacity is None else bytes_per_step <= capacity
    if fits is False:
        where = (f"the {_size(spec.memory_bytes or 0)} of one {spec.key}" if num_gpus == 1 else
                 f"{num_gpus} × {_size(spec.memory_bytes or 0)} of {spec.key} memory")
        notes.append(f"{_size(bytes_per_step)} does not fit in {where}: the ceiling is for a GPU that could hold "
                     "it; pass --gpus N for N GPUs sharing the model (tensor parallel)")
    if spec.visible_as:
        notes.append(f"{spec.key} is a package of {spec.devices_per_package} devices ({spec.visible_as}); "
                     "its bandwidth is the sum over them")
    if num_gpus > 1:
        notes.append(f"{num_gpus} GPUs: bandwidth, compute and capacity add up; communication between them is ignored")
    return capacity, fits


def _judge_claim(claim: Claim, ceiling: float, aggregate: float, lines: list[tuple[str, str]],
                 notes: list[str]) -> tuple[str, str, float]:
    """(basis, verdict, claim / ceiling) of a claimed speed."""
    basis = "aggregate" if claim.aggregate else "per_sequence"
    bound = aggregate if claim.aggregate else ceiling
    ratio = claim.tokens_per_s / bound
    verdict = "impossible" if claim.tokens_per_s > bound * (1 + 1e-9) else "possible"
    what = "aggregate" if claim.aggregate else "per sequence"
    cmp_ = ">" if verdict == "impossible" else "≤"
    tail = (f"{ratio:.3g}× the ceiling" if verdict == "impossible" else f"{ratio * 100:.0f}% of the ceiling")
    lines.append(("claim", f"{claim.tokens_per_s:g} tokens/s {what} {cmp_} {_tps(bound)} ⇒ {verdict} ({tail})"))
    if not claim.aggregate:
        notes.append("the claim is judged per sequence (one stream's tokens/s); pass --claim-aggregate to judge "
                     "it against the total over the batch")
    return basis, verdict, ratio


def decode_ceiling(spec: GpuSpec, query: DecodeQuery, db: SpecDB | None = None) -> CeilingResult:
    """The decode ceiling of ``query``'s model on ``spec`` (see the module docstring for the arithmetic).

    ``db`` supplies measured bandwidth of other GPUs for the "realistic" figure when ``spec`` has none.
    Raises :class:`ParameterError` (naming a key of :data:`PARAMETERS`) for missing or inconsistent
    inputs, :class:`InputError` for a spec entry without memory bandwidth.
    """
    canon, bpp = _check(spec, query)
    d = query.decoding
    batch, context, num_gpus = int(d.batch), int(d.context), int(d.num_gpus)
    gpu = _short(spec)
    lines: list[tuple[str, str]] = []
    notes: list[str] = []

    weight_bytes, params = _weights(query.model, canon, bpp, lines, notes)

    kv_tok, kv_how = _kv_per_token(query.kv, canon, context)
    kv_cache = kv_tok * context * batch
    if context > 0:
        lines.append(("KV cache", f"{kv_how}; × {context} tokens × {batch} sequence{'s' if batch > 1 else ''} "
                                  f"= {_size(kv_cache)}"))
    else:
        lines.append(("KV cache", "none: context 0 (pass --context to count the KV cache read each step)"))
    bytes_per_step = weight_bytes + kv_cache
    sum_text = f"{_size(weight_bytes)} + {_size(kv_cache)} = " if kv_cache else ""
    lines.append(("per step", f"{sum_text}{_size(bytes_per_step)} read from device memory per decode step "
                              "(the weights once + the KV cache of every sequence)"))

    # memory bound
    assert spec.mem_bw_bytes_per_s is not None  # _check refused an entry without it
    spec_bw = float(spec.mem_bw_bytes_per_s) * num_gpus
    bw = spec_bw * d.bandwidth_fraction
    mem_tps = bw / bytes_per_step
    bw_text = f"{gpu} {_bw(spec.mem_bw_bytes_per_s)}"
    if num_gpus > 1:
        bw_text = f"{num_gpus} × {bw_text} = {_bw(spec_bw)}"
    if d.bandwidth_fraction != 1.0:
        bw_text += f" × {d.bandwidth_fraction:g} = {_bw(bw)}"
    lines.append(("memory bound", f"{bw_text} ⇒ {_sci(bw)} / {_sci(bytes_per_step)} = {_tps(mem_tps)} tokens/s "
                                  f"per sequence ({_tps(mem_tps * batch)} aggregate over batch {batch})"))

    flops_step = comp_peak = comp_tps = None
    cdt = None
    if params is not None:
        cdt, flops_step, comp_peak, comp_tps = _compute_bound(spec, params, canon, d, batch, num_gpus, lines, notes)
    else:
        lines.append(("compute bound", "not computed: pass --params (or --dtype with --model-bytes)"))

    if comp_tps is not None and comp_tps < mem_tps:
        ceiling, binding = comp_tps, "compute"
        why = f"compute binds (memory bandwidth alone would allow {_tps(mem_tps)})"
    else:
        ceiling, binding = mem_tps, "memory bandwidth"
        why = ("memory bandwidth binds" + (f" (compute would allow {comp_tps / mem_tps:.3g}× more)" if comp_tps else ""))
    aggregate = ceiling * batch
    lines.append(("ceiling", f"{_tps(ceiling)} tokens/s per sequence, {_tps(aggregate)} tokens/s aggregate: {why}"))

    realistic = _realistic(spec, db, bytes_per_step, num_gpus, comp_tps)
    if realistic.get("basis"):
        lines.append(_realistic_line(spec, realistic))

    capacity, fits = _capacity_notes(spec, bytes_per_step, num_gpus, notes)

    verdict = ratio = basis = None
    if query.claim is not None:
        basis, verdict, ratio = _judge_claim(query.claim, ceiling, aggregate, lines, notes)
    notes.append("a speed-of-light bound: every weight byte crosses the memory bus once per step and the "
                 "compute bound counts only 2 × params FLOPs per token; launch gaps, attention FLOPs and "
                 "communication are ignored, so real decoding is slower")

    return CeilingResult(
        gpu=spec.key, gpu_name=spec.name, num_gpus=num_gpus, params=params, dtype=canon, bytes_per_param=bpp,
        weight_bytes=weight_bytes, batch=batch, context=context, kv_bytes_per_token=kv_tok, kv_cache_bytes=kv_cache,
        bytes_per_step=bytes_per_step, spec_bandwidth_bytes_per_s=spec_bw, bandwidth_fraction=d.bandwidth_fraction,
        bandwidth_bytes_per_s=bw, memory_bound_tokens_per_s=mem_tps, flops_per_step=flops_step,
        compute_dtype=cdt if flops_step else None, compute_peak_flops_per_s=comp_peak,
        compute_bound_tokens_per_s=comp_tps, ceiling_tokens_per_s=ceiling, aggregate_ceiling_tokens_per_s=aggregate,
        binding=binding, memory_capacity_bytes=capacity, fits_in_memory=fits, realistic=realistic,
        claimed_tokens_per_s=query.claim.tokens_per_s if query.claim is not None else None,
        claim_basis=basis, verdict=verdict, claim_ratio=ratio,
        explanation=lines, notes=notes,
    )
