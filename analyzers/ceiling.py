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

from ..errors import InputError
from ..specs import DTYPES, GpuSpec, SpecDB, normalize_dtype

__all__ = [
    "BYTES_PER_PARAM",
    "CeilingResult",
    "bytes_per_param",
    "decode_ceiling",
    "default_compute_dtype",
    "kv_bytes_per_token",
    "parse_bytes",
    "parse_count",
]

#: Bytes per parameter (or per KV element) of the dtypes ``--dtype`` / ``--kv-dtype`` accept.
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


def bytes_per_param(dtype: str, what: str = "--dtype") -> tuple[str, float]:
    """(canonical dtype, bytes per element) for fp32/fp16/bf16/fp8/int8/int4/fp4 and their usual spellings."""
    d = str(dtype).strip().lower()
    canon = d if d in BYTES_PER_PARAM else {"uint4": "int4", "nf4": "int4", "q4": "int4", "w4a16": "int4"}.get(d)
    if canon is None:
        canon = normalize_dtype(d)
    if canon not in BYTES_PER_PARAM:
        raise InputError(what, f"unknown dtype '{dtype}' (one of {', '.join(BYTES_PER_PARAM)})")
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


def decode_ceiling(
    spec: GpuSpec,
    *,
    params: float | None = None,
    dtype: str | None = None,
    model_bytes: float | None = None,
    batch: int = 1,
    context: int = 0,
    kv_bytes_per_token_given: float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    kv_dtype: str | None = None,
    bandwidth_fraction: float = 1.0,
    compute_dtype: str | None = None,
    num_gpus: int = 1,
    claimed_tokens_per_s: float | None = None,
    claim_aggregate: bool = False,
    db: SpecDB | None = None,
) -> CeilingResult:
    """The decode ceiling of a model on ``spec`` (see the module docstring for the arithmetic).

    The model size is ``params`` with ``dtype``, or ``model_bytes`` (``params`` then only feeds the
    compute bound; with ``model_bytes`` and ``dtype`` alone, params = model_bytes / bytes per param).
    The KV cache per token is ``kv_bytes_per_token_given``, or ``layers`` × ``kv_heads`` × ``head_dim`` in
    ``kv_dtype`` (default: ``dtype``); it is required when ``context`` > 0. ``num_gpus`` GPUs share the
    model (tensor parallel): bandwidth, compute and capacity add up, communication is ignored.
    ``db`` supplies measured bandwidth of other GPUs for the "realistic" figure when ``spec`` has none.
    Raises :class:`InputError` for missing or inconsistent inputs.
    """
    if params is None and model_bytes is None:
        raise InputError("model size", "pass --params N with --dtype, or --model-bytes")
    if params is not None and params <= 0:
        raise InputError("--params", "must be positive")
    if model_bytes is not None and model_bytes <= 0:
        raise InputError("--model-bytes", "must be positive")
    canon, bpp = (None, None)
    if dtype is not None:
        canon, bpp = bytes_per_param(dtype, "--dtype")
    if params is not None and model_bytes is None and canon is None:
        raise InputError("--params", "needs --dtype (fp32, fp16, bf16, fp8, int8, int4 or fp4) to know the bytes per parameter")
    if batch < 1 or int(batch) != batch:
        raise InputError("--batch", f"must be a whole number >= 1, not {batch:g}")
    if context < 0 or int(context) != context:
        raise InputError("--context", f"must be a whole number >= 0, not {context:g}")
    if num_gpus < 1 or int(num_gpus) != num_gpus:
        raise InputError("--gpus", f"must be a whole number >= 1, not {num_gpus:g}")
    if not (0 < bandwidth_fraction <= 1):
        raise InputError("--bandwidth-fraction", f"must be in (0, 1], not {bandwidth_fraction:g}")
    if claimed_tokens_per_s is not None and claimed_tokens_per_s <= 0:
        raise InputError("--claimed-tps", "must be positive")
    if not spec.mem_bw_bytes_per_s:
        raise InputError(spec.key, "the spec entry has no memory bandwidth")
    batch, context, num_gpus = int(batch), int(context), int(num_gpus)
    gpu = _short(spec)
    lines: list[tuple[str, str]] = []
    notes: list[str] = []

    # weights
    if model_bytes is not None:
        weight_bytes = float(model_bytes)
        lines.append(("weights", f"{_size(weight_bytes)} ({_sci(weight_bytes)} B, --model-bytes)"))
        if params is None and bpp:
            params = weight_bytes / bpp
            notes.append(f"params taken as model bytes / {bpp:g} B ({canon}) = {_sci(params)} for the compute bound")
    else:
        assert params is not None and bpp is not None
        weight_bytes = params * bpp
        lines.append(("weights", f"{_sci(params)} params × {bpp:g} B ({canon}) = {_size(weight_bytes)}"))

    # KV cache
    layer_args = {"--layers": layers, "--kv-heads": kv_heads, "--head-dim": head_dim}
    given_layer_args = [k for k, v in layer_args.items() if v is not None]
    if kv_bytes_per_token_given is not None and given_layer_args:
        raise InputError("--kv-bytes-per-token", f"give it or {', '.join(layer_args)}, not both")
    if given_layer_args and len(given_layer_args) < 3:
        missing = [k for k in layer_args if layer_args[k] is None]
        raise InputError(given_layer_args[0], f"the KV cache size also needs {' and '.join(missing)}")
    for k, v in layer_args.items():
        if v is not None and (v < 1 or int(v) != v):
            raise InputError(k, f"must be a whole number >= 1, not {v:g}")
    if kv_bytes_per_token_given is not None:
        kv_tok = float(kv_bytes_per_token_given)
        kv_how = f"{kv_tok:,.0f} B per token (--kv-bytes-per-token)"
    elif given_layer_args:
        kd = kv_dtype or canon
        if kd is None:
            raise InputError("--kv-dtype", "needed with --layers/--kv-heads/--head-dim when --dtype is not given")
        kd, kbytes = bytes_per_param(kd, "--kv-dtype")
        assert layers is not None and kv_heads is not None and head_dim is not None
        kv_tok = kv_bytes_per_token(int(layers), int(kv_heads), int(head_dim), kbytes)
        kv_how = (f"2 × {int(layers)} layers × {int(kv_heads)} KV heads × {int(head_dim)} head dim × {kbytes:g} B ({kd}) "
                  f"= {kv_tok:,.0f} B per token")
    else:
        kv_tok = 0.0
        kv_how = ""
        if context > 0:
            raise InputError("--context", "a context needs the KV cache size: pass --kv-bytes-per-token, "
                                          "or --layers, --kv-heads and --head-dim (and --kv-dtype if it differs from --dtype)")
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
    spec_bw = float(spec.mem_bw_bytes_per_s) * num_gpus
    bw = spec_bw * bandwidth_fraction
    mem_tps = bw / bytes_per_step
    bw_text = f"{gpu} {_bw(spec.mem_bw_bytes_per_s)}"
    if num_gpus > 1:
        bw_text = f"{num_gpus} × {bw_text} = {_bw(spec_bw)}"
    if bandwidth_fraction != 1.0:
        bw_text += f" × {bandwidth_fraction:g} = {_bw(bw)}"
    lines.append(("memory bound", f"{bw_text} ⇒ {_sci(bw)} / {_sci(bytes_per_step)} = {_tps(mem_tps)} tokens/s "
                                  f"per sequence ({_tps(mem_tps * batch)} aggregate over batch {batch})"))

    # compute bound
    flops_step = comp_peak = comp_tps = None
    cdt = None
    if params is not None:
        if compute_dtype is not None:
            cdt = normalize_dtype(compute_dtype)
            if cdt is None:
                raise InputError("--compute-dtype", f"unknown dtype '{compute_dtype}' (one of {', '.join(DTYPES)})")
            if not spec.peak_flops(cdt):
                raise InputError("--compute-dtype", f"{spec.key} has no {cdt} peak in the spec database")
        else:
            wd = canon or "fp16"
            cdt, why = default_compute_dtype(wd, spec)
            if why:
                notes.append(why)
            if canon is None:
                notes.append("no --dtype: the compute bound uses the fp16 peak")
        peak = spec.peak_flops(cdt)
        if peak:
            flops_step = 2.0 * params * batch
            comp_peak = float(peak) * num_gpus
            comp_tps = comp_peak / flops_step
            peak_text = f"{cdt} peak {'%d × ' % num_gpus if num_gpus > 1 else ''}{peak / 1e12:.5g} TFLOP/s"
            lines.append(("compute bound", f"2 × {_sci(params)} params × batch {batch} = {_sci(flops_step)} FLOP per step; "
                                           f"{peak_text} ⇒ {_sci(comp_peak)} / {_sci(flops_step)} = {_tps(comp_tps)} "
                                           "tokens/s per sequence"))
        else:
            notes.append(f"{spec.key} has no {cdt} peak: no compute bound")
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
        srcs = sorted({f"{m['metric']} {m['source']}" for m in realistic["measurements"] if m["gpu"] == spec.key})
        srcs_txt = f" ({', '.join(srcs)})" if srcs else ""
        lo, hi = realistic["ceiling_tokens_per_s_range"]
        lines.append(("realistic", f"measured memory bandwidth on {realistic['basis']} reaches "
                                   f"{realistic['bandwidth_fraction_low'] * 100:.1f}–{realistic['bandwidth_fraction_high'] * 100:.1f}% "
                                   f"of spec{srcs_txt} ⇒ about {_tps(realistic['ceiling_tokens_per_s'])} tokens/s per sequence "
                                   f"({_tps(lo)}–{_tps(hi)})"))

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

    verdict = ratio = basis = None
    if claimed_tokens_per_s is not None:
        basis = "aggregate" if claim_aggregate else "per_sequence"
        bound = aggregate if claim_aggregate else ceiling
        ratio = claimed_tokens_per_s / bound
        verdict = "impossible" if claimed_tokens_per_s > bound * (1 + 1e-9) else "possible"
        what = "aggregate" if claim_aggregate else "per sequence"
        cmp_ = ">" if verdict == "impossible" else "≤"
        tail = (f"{ratio:.3g}× the ceiling" if verdict == "impossible" else f"{ratio * 100:.0f}% of the ceiling")
        lines.append(("claim", f"{claimed_tokens_per_s:g} tokens/s {what} {cmp_} {_tps(bound)} ⇒ {verdict} ({tail})"))
        if not claim_aggregate:
            notes.append("the claim is judged per sequence (one stream's tokens/s); pass --claim-aggregate to judge "
                         "it against the total over the batch")
    notes.append("a speed-of-light bound: every weight byte crosses the memory bus once per step and the "
                 "compute bound counts only 2 × params FLOPs per token; launch gaps, attention FLOPs and "
                 "communication are ignored, so real decoding is slower")

    return CeilingResult(
        gpu=spec.key, gpu_name=spec.name, num_gpus=num_gpus, params=params, dtype=canon, bytes_per_param=bpp,
        weight_bytes=weight_bytes, batch=batch, context=context, kv_bytes_per_token=kv_tok, kv_cache_bytes=kv_cache,
        bytes_per_step=bytes_per_step, spec_bandwidth_bytes_per_s=spec_bw, bandwidth_fraction=bandwidth_fraction,
        bandwidth_bytes_per_s=bw, memory_bound_tokens_per_s=mem_tps, flops_per_step=flops_step,
        compute_dtype=cdt if flops_step else None, compute_peak_flops_per_s=comp_peak,
        compute_bound_tokens_per_s=comp_tps, ceiling_tokens_per_s=ceiling, aggregate_ceiling_tokens_per_s=aggregate,
        binding=binding, memory_capacity_bytes=capacity, fits_in_memory=fits, realistic=realistic,
        claimed_tokens_per_s=claimed_tokens_per_s, claim_basis=basis, verdict=verdict, claim_ratio=ratio,
        explanation=lines, notes=notes,
    )
