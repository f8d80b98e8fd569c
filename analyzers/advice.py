"""Advice from an analysis document: short, concrete, only where the numbers make it clear.

Each rule looks at the finished ``gpuscope.analysis/1`` document (never at the store) and
returns items ``{kind, message, evidence}``. Thresholds are module constants so the docs and
tests can name them.
"""
from __future__ import annotations

from typing import Any

#: A finding must concern at least this share of the compute time to be worth saying.
MIN_SHARE = 0.05
#: Compute-bound GEMMs below this fraction of the roof are "far below" it.
GEMM_FAR_BELOW = 0.5
#: Memory-bound ops below this fraction of peak bandwidth are "far below" it.
MEMORY_FAR_BELOW = 0.3
#: Latency-bound kernels taking at least this share of compute time make a launch-bound run.
LATENCY_SHARE = 0.3
#: Idle time at least this share of the devices' span.
IDLE_SHARE = 0.3
#: Evidence a rule needs before it speaks: a launch-bound run has many short kernels, not one
#: (a trace of a single 1.8 µs kernel is not a decode loop to put in a graph) ...
LAUNCH_MIN_CALLS = 50
LAUNCH_MIN_US = 200.0
#: ... and an idle GPU is idle across many activities and a span worth looking at.
IDLE_MIN_ACTIVITIES = 20
IDLE_MIN_SPAN_US = 1000.0
#: Op kinds that fusing can speed up. Attention, GEMM and convolution ops are already fused
#: kernels (``_flash_attention_forward`` is one kernel), and copies are not fused away.
FUSABLE_KINDS = frozenset({"elementwise", "norm", "softmax", "reduction", "embedding"})
#: An op whose host<->device copies take at least this share of its GPU time is "dominated by
#: host copies": what helps it is about the copies (pinned memory, overlap, fewer transfers).
HOST_COPY_DOMINATED = 0.5
#: Pageable copies at least this share of the host<->device copy time make pinned memory a tip.
PAGEABLE_SHARE = 0.1


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _share(part_us: float, compute_us: float) -> str:
    """"6% of all compute time (1.20 ms of 20.3 ms)": a share that says of what."""
    return f"{_pct(part_us / compute_us)} of all compute time ({_ms(part_us)} of {_ms(compute_us)})"


def compact_dims(dims: Any) -> Any:
    """Input shapes without the trailing empty entries (scalars and None arguments) that make
    ``[[16,559,16,64], ..., [], [], [], []]`` unreadable."""
    if not isinstance(dims, list):
        return dims
    out = list(dims)
    while out and out[-1] in ([], None):
        out.pop()
    return out


def _host_copy_dominated(op: dict[str, Any]) -> bool:
    return (op.get("host_copy_us") or 0.0) >= HOST_COPY_DOMINATED * (op.get("kernel_us") or 0.0) > 0


def _host_copies(doc: dict[str, Any], compute: float) -> dict[str, Any] | None:
    """Host<->device copies that take a share of the GPU worth saying: judged against the host
    link, and advice about the copies themselves, never fusion."""
    copies = [k for k in doc.get("kernels", []) if k.get("link") == "host_link"]
    host_us = sum(float(k.get("total_us") or 0.0) for k in copies)
    if not copies or host_us < MIN_SHARE * compute:
        return None
    roofed = [k for k in copies if k.get("roof_us") is not None and k.get("pct_of_roof") is not None]
    roof_us = sum(k["roof_us"] for k in roofed)
    roofed_us = sum(float(k["total_us"]) for k in roofed)
    link = next((d.get("host_link") for d in doc.get("roofline", {}).get("devices", []) if d.get("host_link")), None)
    bw = next((d.get("host_link_bytes_per_s") for d in doc.get("roofline", {}).get("devices", [])
               if d.get("host_link_bytes_per_s")), None)
    where = f" ({link}, {bw / 1e9:.1f} GB/s per direction)" if link and bw else ""
    at = f" and reach {_pct(roof_us / roofed_us)} of the host link{where}" if roofed_us > 0 else ""
    tips = []
    pageable_us = sum(float(k.get("total_us") or 0.0) for k in copies if "pageable" in str(k.get("name")).lower())
    if pageable_us >= PAGEABLE_SHARE * host_us:
        tips.append("copy from pinned memory (tensor.pin_memory(), DataLoader(pin_memory=True)): pageable "
                    "memory is staged through a bounce buffer and cannot overlap")
    tips.append("issue copies with non_blocking=True on a side stream so that they overlap compute")
    tips.append("move fewer bytes (keep tensors on the GPU between steps, copy once, batch small transfers)")
    if roofed_us > 0 and roof_us / roofed_us < 0.5:
        tips.append("if large pinned copies stay far below the link, check the PCIe generation and width the GPU "
                    "negotiated (nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current; amd-smi "
                    "metric --pcie)")
    ops = [o for o in doc.get("ops", []) if _host_copy_dominated(o)]
    largest = ""
    if ops:
        worst = max(ops, key=lambda o: o.get("host_copy_us") or 0.0)
        pct = f" at {_pct(worst['pct_of_roof'])} of its roof" if worst.get("pct_of_roof") is not None else ""
        largest = (f" Largest: {worst['name']} {compact_dims(worst.get('input_dims'))}, "
                   f"{_ms(worst['host_copy_us'])} of copies{pct}.")
    return {
        "kind": "host_copies",
        "message": f"Host<->device copies take {_ms(host_us)} of GPU time, as long as {_pct(host_us / compute)} of "
                   f"all compute time ({_ms(compute)}){at}: " + "; ".join(tips) + "." + largest,
        "evidence": {"host_copy_us": host_us, "roof_us": roof_us if roofed_us else None,
                     "roofed_us": roofed_us, "copies": len(copies), "ops": len(ops)},
    }


def advise(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Advice items for an analysis document (empty when nothing is clear)."""
    out: list[dict[str, Any]] = []
    compute = float(doc["time_us"].get("compute") or 0.0)
    if not doc.get("gpu_activity") or compute <= 0:
        return out
    vendors = {d.get("vendor") for d in doc.get("devices", [])}
    roofs = doc.get("roofline", {}).get("devices", [])

    unknown = [r["key"] for r in roofs if r.get("spec") is None]
    if unknown and len(unknown) == len(roofs):
        out.append({
            "kind": "unknown_gpu",
            "message": "The GPU is not in the spec database, so nothing is judged against a roof: pass "
                       "--gpu KEY (see `gpuscope specs`) or add the GPU in a specs file ($GPUSCOPE_SPECS).",
            "evidence": {"devices": unknown},
        })

    gemm_slow = [o for o in doc.get("ops", []) if o.get("kind") == "gemm" and o.get("bound") == "compute_bound"
                 and o.get("pct_of_roof") is not None and o["pct_of_roof"] < GEMM_FAR_BELOW]
    gemm_us = sum(o["kernel_us"] for o in gemm_slow)
    if gemm_slow and gemm_us >= MIN_SHARE * compute:
        worst = max(gemm_slow, key=lambda o: o.get("saved_us") or 0.0)
        tip = "set PYTORCH_TUNABLEOP_ENABLED=1 (TunableOp picks the fastest GEMM per shape, on both vendors)"
        if "amd" in vendors:
            tip += "; on ROCm also tune hipBLASLt for these shapes (TunableOp with PYTORCH_TUNABLEOP_TUNING=1, " \
                   "or hipblaslt-bench)"
        out.append({
            "kind": "gemm_below_roof",
            "message": f"Compute-bound GEMMs run at {_pct(sum(o.get('roof_us') or 0 for o in gemm_slow) / gemm_us)} "
                       f"of the roof and take {_share(gemm_us, compute)}: {tip}. Largest: "
                       f"{worst['name']} {compact_dims(worst.get('input_dims'))} at {_pct(worst['pct_of_roof'])} of roof.",
            "evidence": {"ops": len(gemm_slow), "kernel_us": gemm_us,
                         "saved_us_at_roof": sum(o.get("saved_us") or 0.0 for o in gemm_slow)},
        })

    mem_slow = [o for o in doc.get("ops", []) if o.get("bound") == "memory_bound" and o.get("kind") in FUSABLE_KINDS
                and o.get("pct_of_roof") is not None and o["pct_of_roof"] < MEMORY_FAR_BELOW
                and not _host_copy_dominated(o)]
    mem_us = sum(o["kernel_us"] for o in mem_slow)
    if mem_slow and mem_us >= MIN_SHARE * compute:
        worst = max(mem_slow, key=lambda o: o.get("saved_us") or 0.0)
        out.append({
            "kind": "memory_below_bandwidth",
            "message": f"Elementwise, norm and reduction ops reach under {_pct(MEMORY_FAR_BELOW)} of peak "
                       f"bandwidth and take {_share(mem_us, compute)}: fuse chains of them "
                       f"(torch.compile, fused kernels), avoid dtype round trips and non-contiguous copies. "
                       f"Largest: {worst['name']} {compact_dims(worst.get('input_dims'))} at "
                       f"{_pct(worst['pct_of_roof'])} of roof.",
            "evidence": {"ops": len(mem_slow), "kernel_us": mem_us,
                         "saved_us_at_roof": sum(o.get("saved_us") or 0.0 for o in mem_slow)},
        })

    host = _host_copies(doc, compute)
    if host is not None:
        out.append(host)

    lat = float(doc.get("roofline_us", {}).get("latency_bound") or 0.0)
    lat_calls = sum(int(k.get("count") or 0) for k in doc.get("kernels", []) if k.get("bound") == "latency_bound")
    if lat >= LATENCY_SHARE * compute and lat >= LAUNCH_MIN_US and lat_calls >= LAUNCH_MIN_CALLS:
        graphs = doc.get("counts", {}).get("graph_replayed_kernels", 0)
        tip = ("capture the decode step in a CUDA/HIP graph (torch.compile mode='reduce-overhead', or vLLM's "
               "default graph capture) and use larger batches so each kernel has more work")
        if graphs:
            tip = "kernels are already replayed from graphs: larger batches (more work per kernel) or fewer, fused kernels"
        out.append({
            "kind": "launch_bound",
            "message": f"Latency-bound kernels ({lat_calls} calls with too little work each to load the GPU) "
                       f"take {_share(lat, compute)}: {tip}.",
            "evidence": {"latency_bound_us": lat, "latency_bound_calls": lat_calls, "compute_us": compute},
        })

    span = sum(d.get("span_us") or 0.0 for d in doc.get("per_device", []))
    idle = float(doc["time_us"].get("idle") or 0.0)
    activities = sum(int(d.get("activities") or 0) for d in doc.get("per_device", []))
    if span >= IDLE_MIN_SPAN_US and activities >= IDLE_MIN_ACTIVITIES and idle >= IDLE_SHARE * span:
        out.append({
            "kind": "gpu_idle",
            "message": f"The GPU is idle {_pct(idle / span)} of the time between its first and last activity "
                       f"({_ms(idle)} of {_ms(span)}): "
                       "the CPU side (Python, launches, synchronisation, data loading) is not keeping it busy. "
                       "Look for host syncs (.item(), .cpu()), and use CUDA/HIP graphs or async input pipelines.",
            "evidence": {"idle_us": idle, "span_us": span},
        })
    return out
