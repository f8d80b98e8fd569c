"""Roofline classification: is a kernel or op limited by compute, by memory bandwidth, or by
latency, and how far is it from the roof?

Pure functions; they never print. The rules, exactly (also in ``docs/roofline.md`` and in the
``roofline`` block of ``analyze --json``):

1. An op (or a kernel that inherits its op's cost) with a cost model has ``flops`` and
   ``bytes`` per call. Its time at the roof is
   ``roof_us = max(flops / peak_flops[dtype], bytes / peak_bw)`` (in µs), where ``dtype`` is
   the op's roof dtype and the peaks come from the device's spec (or its measured ceilings).
2. **latency-bound** when ``roof_us < LATENCY_WORK_US`` (2 µs): the work is so small that even
   at the roof it would take about as long as launching a kernel and filling the GPU, so the
   measured time is dominated by fixed costs (launch, ramp-up, synchronisation), not by
   FLOP/s or bandwidth.
3. Otherwise **compute-bound** when the arithmetic intensity ``flops / bytes`` is at or above
   the ridge point ``peak_flops[dtype] / peak_bw``, else **memory-bound**.
4. Kernels without a cost model: **latency-bound** when their mean duration per call is below
   ``LATENCY_KERNEL_US`` (5 µs); else placed by kernel-name family (GEMM: compute-bound,
   elementwise/norm/reduction/copy: memory-bound, ...) with ``confidence = "family"``; else
   **unknown** (with the reason).
5. **unknown** also when the GPU is not in the spec database (no roof), or the op's dtype has
   no peak on that GPU.
6. **Copies are judged against the link they cross.** A call whose GPU work includes
   host<->device copies (``Memcpy HtoD`` / ``DtoH``, AMD's ``CopyHostToDevice`` ...) has a third
   ceiling, ``host_bytes / host_link_bw``, where ``host_bytes`` is what its copies moved (the
   trace's ``bytes``) and ``host_link_bw`` the host link's bandwidth in one direction (PCIe
   generation x width, or NVLink-C2C, from the spec database; device memory on an APU whose
   host memory is its HBM). ``roof_us`` is the largest of the three; when it is the host link's,
   the work is memory-bound on the host link (``link = "host_link"``), else on device memory.
   Copy activities themselves (:func:`classify_copy`) are judged the same way: host<->device
   against the host link, device-to-device against device memory (each byte read and written,
   so ``2 x bytes``), memsets against device memory (``bytes`` written); a copy to another GPU
   (``PtoP``) is not judged (its link is not in the spec database).

1b. **The roof follows the math that ran**: an fp32 GEMM or convolution whose kernels are TF32
   (or AMD xf32 / bf16x3) tensor-core kernels is judged against the ``tf32`` roof, one on SIMT
   fp32 kernels against ``fp32`` (:func:`kernel_math`, :func:`roof_dtype_for_math`).
7. **cache_bound** (:func:`settle_over_roof`): work measured faster than its roof whose
   achieved bandwidth exceeds the HBM roof and whose working set fits a cache is judged against
   that cache (no roof time and no percent when its bandwidth is not published).
8. **model_error**: work still faster than every roof it could be judged against is flagged,
   with no roof time and no percent. No entry is ever shown above 100 % of its roof.

Achieved FLOP/s and bytes/s are ``flops / t`` and ``bytes / t`` over the measured GPU time
``t``; ``pct_of_roof = roof_us / t`` (1.0 = at the roof); ``saved_us = t - roof_us`` is the
time the work would save at the roof.
"""
from __future__ import annotations

import re as _re
from dataclasses import dataclass, field
from typing import Any

#: Work that would take less than this at the roof (µs) is latency-bound.
LATENCY_WORK_US = 2.0
#: Kernels without a cost model whose mean duration is below this (µs) are latency-bound.
LATENCY_KERNEL_US = 5.0

BOUNDS = ("compute_bound", "memory_bound", "cache_bound", "latency_bound", "unknown")
#: A percent of roof above 1 + this is "above the roof" (float noise at exactly 100 % is not).
OVER_ROOF_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Roof:
    """The ceilings one device is judged against."""

    #: Spec-database key, or None when the GPU is unknown.
    spec_key: str | None
    #: "spec" or "measured" (a calibration), or None when there is no roof.
    source: str | None
    #: Peak FLOP/s by roof dtype ("bf16", "fp8", ...); missing or None: not supported.
    peak_flops_per_s: dict[str, float | None] = field(default_factory=dict)
    #: Peak device-memory bandwidth in bytes/s.
    mem_bw_bytes_per_s: float | None = None
    #: Why there is no roof, or where it came from.
    note: str | None = None
    #: Bandwidth of one direction of a host<->device copy in bytes/s (the host link's, or device
    #: memory's on an APU), and the link's name ("PCIe Gen4 x16"); None when not known.
    host_bw_bytes_per_s: float | None = None
    host_link: str | None = None
    #: The on-chip caches work can be served from, smallest first: (name, size in bytes,
    #: bandwidth in bytes/s or None when not published). L2, then AMD's Infinity Cache (MALL).
    caches: tuple[tuple[str, float, float | None], ...] = ()
    #: The GPU-to-GPU link collectives are judged against (a
    #: :class:`gpuscope.analyzers.comm.PeerLink`), None when the spec database does not give one.
    peer: Any = None

    def cache_for(self, working_set_bytes: float) -> tuple[str, float, float | None] | None:
        """The smallest cache that holds ``working_set_bytes`` (None: none does)."""
        for cache in self.caches:
            if working_set_bytes <= cache[1]:
                return cache
        return None

    def peak(self, dtype: str | None) -> float | None:
        """Peak FLOP/s for ``dtype`` (None when unknown or unsupported)."""
        if dtype is None:
            return None
        value = self.peak_flops_per_s.get(dtype)
        if not value and dtype == "tf32":
            # GPUs without TF32 matrix units (MI250, RDNA) run "TF32" work at the FP32 rate
            value = self.peak_flops_per_s.get("fp32")
        return float(value) if value else None

    def ridge(self, dtype: str | None) -> float | None:
        """Ridge point in FLOP/byte for ``dtype``."""
        peak = self.peak(dtype)
        if peak is None or not self.mem_bw_bytes_per_s:
            return None
        return peak / self.mem_bw_bytes_per_s


NO_ROOF = Roof(None, None, {}, None, "GPU not identified")


@dataclass(frozen=True)
class Verdict:
    """Classification of some work (one op call, or a sum of calls) against a roof."""

    bound: str
    #: "model" (a cost model from shapes), "family" (kernel-name family), "duration"
    #: (latency by duration alone) or "none".
    confidence: str
    reason: str
    roof_us: float | None = None
    intensity_flop_per_byte: float | None = None
    ridge_flop_per_byte: float | None = None
    achieved_flops_per_s: float | None = None
    achieved_bytes_per_s: float | None = None
    pct_of_roof: float | None = None
    saved_us: float | None = None
    #: For memory-bound work, the link that bounds it: "device_memory" or "host_link".
    link: str | None = None


def roof_time_us(flops: float | None, nbytes: float | None, dtype: str | None, roof: Roof,
                 host_bytes: float | None = None) -> float | None:
    """Time in µs the work would take at the roof: the largest of compute time at the dtype's
    peak, memory time at peak bandwidth and, for ``host_bytes`` copied between host and device,
    their time over the host link (None if none can be computed)."""
    parts = []
    peak = roof.peak(dtype)
    if flops and peak:
        parts.append(flops / peak)
    if nbytes and roof.mem_bw_bytes_per_s:
        parts.append(nbytes / roof.mem_bw_bytes_per_s)
    if host_bytes and roof.host_bw_bytes_per_s:
        parts.append(host_bytes / roof.host_bw_bytes_per_s)
    if not parts:
        if flops == 0 and nbytes == 0 and not host_bytes:
            return 0.0
        return None
    return max(parts) * 1e6


def _host_link_words(roof: Roof) -> str:
    bw = roof.host_bw_bytes_per_s or 0.0
    return f"{roof.host_link or 'host link'}, {bw / 1e9:.1f} GB/s per direction"


def classify_cost(flops: float | None, nbytes: float | None, dtype: str | None, time_us: float,
                  roof: Roof, calls: int = 1, host_bytes: float | None = 0.0) -> Verdict:
    """Classify work with a cost model: ``flops`` and ``nbytes`` per call, ``calls`` calls that
    took ``time_us`` of GPU time in total. ``host_bytes`` is what each call copied between host
    and device (0: nothing; None: copies of unknown size), judged against the host link."""
    if roof.source is None:
        return Verdict("unknown", "none", roof.note or "no roof for this GPU")
    calls = max(calls, 1)
    if host_bytes is None:
        return Verdict("unknown", "none", "host<->device copies of unknown size (the trace records no bytes)")
    if host_bytes and not roof.host_bw_bytes_per_s:
        return Verdict("unknown", "none", "host<->device copies, and the spec database has no host link for this GPU")
    per_call_roof = roof_time_us(flops, nbytes, dtype, roof, host_bytes)
    if per_call_roof is None:
        why = f"no {dtype} peak for this GPU" if dtype and flops and not roof.peak(dtype) else "no cost to judge"
        return Verdict("unknown", "none", why)
    total_roof = per_call_roof * calls
    total_flops = (flops or 0.0) * calls
    total_bytes = (nbytes or 0.0) * calls
    t_s = time_us / 1e6 if time_us > 0 else None
    intensity = (flops / nbytes) if flops and nbytes else None
    ridge = roof.ridge(dtype)
    common: dict[str, Any] = dict(
        roof_us=total_roof,
        intensity_flop_per_byte=intensity,
        ridge_flop_per_byte=ridge,
        achieved_flops_per_s=(total_flops / t_s) if t_s and flops is not None else None,
        achieved_bytes_per_s=(total_bytes / t_s) if t_s and nbytes is not None else None,
        pct_of_roof=(total_roof / time_us) if time_us > 0 else None,
        saved_us=max(time_us - total_roof, 0.0),
    )
    if per_call_roof < LATENCY_WORK_US:
        return Verdict("latency_bound", "model",
                       f"{per_call_roof:.2f} µs per call at the roof (< {LATENCY_WORK_US:g} µs)", **common)
    if host_bytes and roof.host_bw_bytes_per_s and host_bytes / roof.host_bw_bytes_per_s * 1e6 >= per_call_roof:
        # bound by the host link: the rate over that link is what to compare with its roof
        common["achieved_bytes_per_s"] = host_bytes * calls / t_s if t_s else None
        return Verdict("memory_bound", "model",
                       f"host<->device copies of {_bytes_words(host_bytes)} per call, bound by the host link "
                       f"({_host_link_words(roof)})", link="host_link", **common)
    if ridge is None or not flops:
        return Verdict("memory_bound", "model", "moves data, no arithmetic to speak of", link="device_memory", **common)
    if not nbytes:
        return Verdict("compute_bound", "model", "arithmetic without memory traffic", **common)
    if intensity is not None and intensity >= ridge:
        return Verdict("compute_bound", "model",
                       f"intensity {intensity:.0f} FLOP/B ≥ ridge {ridge:.0f} FLOP/B ({dtype})", **common)
    return Verdict("memory_bound", "model",
                   f"intensity {intensity:.1f} FLOP/B < ridge {ridge:.0f} FLOP/B ({dtype})", link="device_memory",
                   **common)


def _bytes_words(n: float) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


#: The link a copy crosses -> (how many times each byte crosses it, what the report calls it).
COPY_TRAFFIC = {"host_link": 1, "device_memory": 2}


def classify_copy(link: str | None, direction: str | None, payload_bytes: float | None, time_us: float,
                  roof: Roof, calls: int = 1) -> Verdict:
    """Classify ``calls`` copy (or fill) activities of ``payload_bytes`` each that took
    ``time_us`` in total, against the link they cross (rule 6 above).

    ``link`` is "host_link" (HtoD / DtoH: each byte crosses once), "device_memory" (DtoD: each
    byte read and written, 2 x bytes; a memset: ``direction`` "fill", bytes written once),
    "peer" (another GPU) or None (unknown): the last two are not judged.
    """
    what = {"HtoD": "host-to-device copy", "DtoH": "device-to-host copy", "DtoD": "device-to-device copy",
            "PtoP": "peer-to-peer copy", "fill": "memset"}.get(direction or "", "copy")
    if link not in COPY_TRAFFIC:
        why = ("its link to the other GPU (NVLink, xGMI, PCIe) is not in the spec database" if link == "peer"
               else "the name does not say which link it crosses")
        return Verdict("memory_bound", "none", f"{what}: not judged, {why}")
    if roof.source is None:
        return Verdict("memory_bound", "none", f"{what}: {roof.note or 'no roof for this GPU'}", link=link)
    bw = roof.host_bw_bytes_per_s if link == "host_link" else roof.mem_bw_bytes_per_s
    if not bw:
        return Verdict("memory_bound", "none", f"{what}: the spec database has no host link for this GPU", link=link)
    if payload_bytes is None:
        return Verdict("memory_bound", "none", f"{what}: not judged, the trace records no byte count", link=link)
    calls = max(calls, 1)
    traffic = payload_bytes * (1 if direction == "fill" else COPY_TRAFFIC[link])
    per_call_roof = traffic / bw * 1e6
    total_roof = per_call_roof * calls
    t_s = time_us / 1e6 if time_us > 0 else None
    common: dict[str, Any] = dict(
        roof_us=total_roof,
        achieved_bytes_per_s=(payload_bytes * calls / t_s) if t_s else None,
        pct_of_roof=(total_roof / time_us) if time_us > 0 else None,
        saved_us=max(time_us - total_roof, 0.0),
        link=link,
    )
    over = (f"the host link ({_host_link_words(roof)})" if link == "host_link"
            else f"device memory ({bw / 1e12:.2f} TB/s{', read and written' if traffic > payload_bytes else ''})")
    if per_call_roof < LATENCY_WORK_US:
        return Verdict("latency_bound", "model", f"{what} of {_bytes_words(payload_bytes)}: {per_call_roof:.2f} µs "
                       f"per call over {over} (< {LATENCY_WORK_US:g} µs)", **common)
    return Verdict("memory_bound", "model", f"{what} of {_bytes_words(payload_bytes)} per call over {over}", **common)


def classify_by_name(mean_us: float, family: str, bound_hint: str | None, family_reason: str) -> Verdict:
    """Classify a kernel that has no cost model: by its duration, else by its name family."""
    if mean_us < LATENCY_KERNEL_US:
        return Verdict("latency_bound", "duration",
                       f"no cost model; {mean_us:.2f} µs per call (< {LATENCY_KERNEL_US:g} µs)")
    if bound_hint is not None:
        return Verdict(bound_hint, "family", f"no cost model; {family} kernel ({family_reason})")
    return Verdict("unknown", "none", f"no cost model and no bound for the {family} family ({family_reason})")


# --------------------------------------------------------------------------------------------
# The math that ran: TF32 / xf32 tensor-core kernels of fp32 matrix ops
# --------------------------------------------------------------------------------------------

#: Kernel names that do fp32 matrix work on tensor cores with reduced-precision inputs (judged
#: against the ``tf32`` roof). NVIDIA: cuBLAS/cuDNN ``sm80_xmma_gemm_f32f32_tf32f32_*``,
#: ``*_tf32_*`` (cuBLASLt), CUTLASS ``cutlass_80_tensorop_s1688gemm_*`` (an ``s`` = fp32 GEMM on
#: tensor ops, which for fp32 data is TF32); AMD: ``xf32`` (MI300's TF32-like mode, hipBLASLt
#: ``_XF32_``) and ``bf16x3`` (fp32 emulated with three bf16 products on MI355).
TF32_KERNEL_RE = _re.compile(r"tf32|xf32|bf16x3|tensorop_s\d|s1688gemm", _re.I)
#: Kernel names of fp32 GEMMs and convolutions on the SIMT (CUDA) cores: ``ampere_sgemm_*``,
#: ``volta_sgemm_*``, cuDNN's ``*scudnn*`` and ``implicit_convolve_sgemm``, ``gcgemm`` (complex
#: fp32), cuBLAS's ``gemmSN`` / ``gemv`` (matrix-vector) kernels.
SIMT_FP32_KERNEL_RE = _re.compile(r"sgemm|scudnn|gcgemm|gemmsn|gemv", _re.I)


def kernel_math(name: str | None) -> str | None:
    """The math an fp32 matrix kernel ran, read from its name: ``"tf32"`` (tensor cores with
    TF32/xf32/bf16x3 inputs), ``"fp32"`` (SIMT fp32) or None (the name does not say)."""
    if not name:
        return None
    if TF32_KERNEL_RE.search(name):
        return "tf32"
    if SIMT_FP32_KERNEL_RE.search(name):
        return "fp32"
    return None


#: Cost-model kinds whose fp32 work may run on tensor cores (the rest run on vector units).
MATRIX_KINDS = frozenset({"gemm", "conv"})


def roof_dtype_for_math(dtype: str | None, kind: str | None, math: str | None) -> str | None:
    """The roof of an op whose kernels ran ``math`` (see :func:`kernel_math`): an fp32 GEMM or
    convolution (cost-model roof ``fp32``, or ``tf32`` for cuDNN's default) follows its
    kernels; any other op, or a kernel name that says nothing, keeps ``dtype``."""
    if math is None or kind not in MATRIX_KINDS or dtype not in ("fp32", "tf32"):
        return dtype
    return math


# --------------------------------------------------------------------------------------------
# Never above the roof: caches, and model errors
# --------------------------------------------------------------------------------------------

def _mb_words(n: float) -> str:
    return f"{n / 1e6:.3g} MB"


def settle_over_roof(time_us: float, roof_us: float | None, flops: float | None, nbytes: float | None,
                     working_set_bytes: float | None, dtype: str | None, roof: Roof,
                     link: str | None = None, compute_us: float | None = None) -> dict[str, Any] | None:
    """Re-judge work measured faster than its roof (``roof_us > time_us``): None when it is not.

    ``flops`` and ``nbytes`` are the work's totals over the measured ``time_us``;
    ``working_set_bytes`` the bytes one call touches; ``compute_us`` (instead of ``flops`` and
    ``dtype``) the compute part's time at the peak, for work summed over several dtypes.
    Device-memory work whose achieved
    bandwidth exceeds the HBM roof, whose compute fits the time and whose working set fits a
    cache of the GPU (:attr:`Roof.caches`) is judged against that cache: ``cache_bound``, its
    ``roof_us`` the time at the cache's bandwidth (``None``, with no percent, when the spec
    database has no bandwidth for that cache). When that still does not hold (the cache roof is
    overshot too, the compute part alone is faster than the peak, or host-link copies beat the
    link) the cost model overstates the work: ``model_error``, no roof time and no percent.

    Returns the fields to update on the entry: ``bound`` (None: unchanged), ``roof_us``,
    ``pct_of_roof``, ``saved_us``, ``model_error``, ``cache`` and ``reason``.
    """
    if roof_us is None or time_us <= 0 or roof_us <= time_us * (1 + OVER_ROOF_TOLERANCE):
        return None
    t_s = time_us / 1e6
    pct = 100 * roof_us / time_us
    if compute_us is None:
        peak = roof.peak(dtype)
        compute_us = flops / peak * 1e6 if flops and peak else 0.0
    bw = roof.mem_bw_bytes_per_s
    if (link != "host_link" and nbytes and bw and nbytes / t_s > bw and working_set_bytes
            and compute_us <= time_us * (1 + OVER_ROOF_TOLERANCE)):
        cache = roof.cache_for(working_set_bytes)
        if cache is not None:
            cname, csize, cbw = cache
            seen = (f"{nbytes / t_s / 1e12:.2f} TB/s achieved, above the {bw / 1e12:.2f} TB/s HBM roof; "
                    f"working set {_mb_words(working_set_bytes)} fits the {_mb_words(csize)} {cname}")
            if cbw is None:
                return {"bound": "cache_bound", "roof_us": None, "pct_of_roof": None, "saved_us": None,
                        "model_error": False, "cache": cname,
                        "reason": f"{seen}; its bandwidth is not in the spec database: no percent of roof"}
            cache_us = max(compute_us, nbytes / cbw * 1e6)
            if cache_us <= time_us * (1 + OVER_ROOF_TOLERANCE):
                return {"bound": "cache_bound", "roof_us": cache_us, "pct_of_roof": cache_us / time_us,
                        "saved_us": max(time_us - cache_us, 0.0), "model_error": False, "cache": cname,
                        "reason": f"{seen}: judged against its {cbw / 1e12:.2f} TB/s"}
    what = ("host link" if link == "host_link" else
            f"{dtype or 'peak'} compute" if compute_us > time_us * (1 + OVER_ROOF_TOLERANCE) else "memory")
    return {"bound": None, "roof_us": None, "pct_of_roof": None, "saved_us": None, "model_error": True,
            "cache": None,
            "reason": f"model_error: the cost model puts this at {pct:.0f}% of the {what} roof "
                      f"({roof_us:.1f} µs at the roof, {time_us:.1f} µs measured): it overstates the work"}


#: The rules above as data, for the ``roofline.rules`` block of ``analyze --json``.
ROOFLINE_RULES = {
    "latency_work_us": LATENCY_WORK_US,
    "latency_kernel_us": LATENCY_KERNEL_US,
    "text": (
        "With a cost model (FLOPs and bytes from the op's shapes): roof_us = max(flops / peak_flops[dtype], "
        "bytes / peak_bw); latency_bound if roof_us per call < latency_work_us; else compute_bound if "
        "flops/bytes >= ridge (peak_flops[dtype] / peak_bw), else memory_bound. Without a cost model: "
        "latency_bound if the kernel's mean duration < latency_kernel_us; else the bound its name family "
        "suggests (confidence 'family'); else unknown. unknown also when the GPU has no roof. "
        "pct_of_roof = roof_us / measured time; saved_us = measured time - roof_us. "
        "Copies are judged against the link they cross: a call's host<->device copies add "
        "host_bytes / host_link_bw (one direction of the PCIe or NVLink-C2C link) to the max, and "
        "make it memory-bound on the host link (link 'host_link') when that term is the largest; "
        "memcpy activities are judged on their own: host<->device against the host link, "
        "device-to-device against device memory (2 x bytes), memsets against device memory. "
        "The roof of an fp32 GEMM or convolution follows the math its kernels ran (tf32 for TF32/xf32 "
        "tensor-core kernel names, fp32 for SIMT ones). Work measured faster than its roof is re-judged: "
        "cache_bound against the smallest cache (L2, Infinity Cache) that holds its working set when its "
        "achieved bandwidth exceeds the HBM roof (roof and percent null when the cache's bandwidth is not "
        "published); otherwise model_error (the cost model overstates the work; roof and percent null). "
        "No entry is ever shown above 100 % of its roof."
    ),
}
