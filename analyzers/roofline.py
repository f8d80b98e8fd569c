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
    #: Bandwidth of one direction of a host<->device copy in bytes/s (the host link's, or device
    #: memory's on an APU), and the link's name ("PCIe Gen4 x16"); None when not known.
    host_bw_bytes_per_s: float | None = None
    host_link: str | None = None

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
    if host_bytes and host_bytes / roof.host_bw_bytes_per_s * 1e6 >= per_call_roof:
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
    common = dict(
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
        "device-to-device against device memory (2 x bytes), memsets against device memory."
    ),
}
