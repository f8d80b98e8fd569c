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

Achieved FLOP/s and bytes/s are ``flops / t`` and ``bytes / t`` over the measured GPU time
``t``; ``pct_of_roof = roof_us / t`` (1.0 = at the roof); ``saved_us = t - roof_us`` is the
time the work would save at the roof.
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: Work that would take less than this at the roof (µs) is latency-bound.
LATENCY_WORK_US = 2.0
#: Kernels without a cost model whose mean duration is below this (µs) are latency-bound.
LATENCY_KERNEL_US = 5.0

BOUNDS = ("compute_bound", "memory_bound", "latency_bound", "unknown")


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


def roof_time_us(flops: float | None, nbytes: float | None, dtype: str | None, roof: Roof) -> float | None:
    """Time in µs the work would take at the roof: the larger of compute time at the dtype's
    peak and memory time at peak bandwidth (None if neither can be computed)."""
    parts = []
    peak = roof.peak(dtype)
    if flops and peak:
        parts.append(flops / peak)
    if nbytes and roof.mem_bw_bytes_per_s:
        parts.append(nbytes / roof.mem_bw_bytes_per_s)
    if not parts:
        if flops == 0 and nbytes == 0:
            return 0.0
        return None
    return max(parts) * 1e6


def classify_cost(flops: float | None, nbytes: float | None, dtype: str | None, time_us: float,
                  roof: Roof, calls: int = 1) -> Verdict:
    """Classify work with a cost model: ``flops`` and ``nbytes`` per call, ``calls`` calls that
    took ``time_us`` of GPU time in total."""
    if roof.source is None:
        return Verdict("unknown", "none", roof.note or "no roof for this GPU")
    calls = max(calls, 1)
    per_call_roof = roof_time_us(flops, nbytes, dtype, roof)
    if per_call_roof is None:
        why = f"no {dtype} peak for this GPU" if dtype and flops and not roof.peak(dtype) else "no cost to judge"
        return Verdict("unknown", "none", why)
    total_roof = per_call_roof * calls
    total_flops = (flops or 0.0) * calls
    total_bytes = (nbytes or 0.0) * calls
    t_s = time_us / 1e6 if time_us > 0 else None
    intensity = (flops / nbytes) if flops and nbytes else None
    ridge = roof.ridge(dtype)
    common = dict(
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
    if ridge is None or not flops:
        return Verdict("memory_bound", "model", "moves data, no arithmetic to speak of", **common)
    if not nbytes:
        return Verdict("compute_bound", "model", "arithmetic without memory traffic", **common)
    if intensity is not None and intensity >= ridge:
        return Verdict("compute_bound", "model",
                       f"intensity {intensity:.0f} FLOP/B ≥ ridge {ridge:.0f} FLOP/B ({dtype})", **common)
    return Verdict("memory_bound", "model",
                   f"intensity {intensity:.1f} FLOP/B < ridge {ridge:.0f} FLOP/B ({dtype})", **common)


def classify_by_name(mean_us: float, family: str, bound_hint: str | None, family_reason: str) -> Verdict:
    """Classify a kernel that has no cost model: by its duration, else by its name family."""
    if mean_us < LATENCY_KERNEL_US:
        return Verdict("latency_bound", "duration",
                       f"no cost model; {mean_us:.2f} µs per call (< {LATENCY_KERNEL_US:g} µs)")
    if bound_hint is not None:
        return Verdict(bound_hint, "family", f"no cost model; {family} kernel ({family_reason})")
    return Verdict("unknown", "none", f"no cost model and no bound for the {family} family ({family_reason})")
