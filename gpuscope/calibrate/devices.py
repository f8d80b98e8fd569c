"""The device a calibration runs on: its identity (from torch's properties), its spec entry
(through :func:`gpuscope.device.match_spec`), and its clocks and limits (through ``collectors/``)."""
from __future__ import annotations

import math
import os
import platform
from typing import Any

from ..device import match_spec
from ..errors import GpuscopeError
from ..ceiling_metrics import METRIC_L2_BW, METRIC_L2_READ, METRIC_MATMUL
from .results import CalibrationDevice


# --------------------------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------------------------


def cpu_model_name() -> str:
    """The host CPU's name: /proc/cpuinfo "model name", else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_device(torch: Any) -> CalibrationDevice:
    mem_total = None
    try:
        import psutil

        mem_total = int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unreadable: the size is only informative
        pass
    return CalibrationDevice(
        backend="cpu", name=cpu_model_name(), index=None, uuid=None, arch=platform.machine() or None,
        memory_total_bytes=mem_total, compute_units=os.cpu_count(),
        extra={"torch_threads": torch.get_num_threads()},
    )


def _gpu_device(torch: Any, index: int) -> CalibrationDevice:
    props = torch.cuda.get_device_properties(index)
    backend = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    uuid = getattr(props, "uuid", None)
    uuid_text = str(uuid) if uuid is not None else None
    if backend == "cuda" and uuid_text and not uuid_text.startswith("GPU-"):
        uuid_text = "GPU-" + uuid_text  # the form NVML and nvidia-smi print
    gcn = getattr(props, "gcnArchName", None) or None
    cc = f"{props.major}.{props.minor}"
    extra: dict[str, Any] = {"compute_capability": cc}
    if gcn:
        extra["gcn_arch_name"] = gcn
    for attr in ("pci_bus_id", "pci_device_id", "pci_domain_id", "L2_cache_size", "warp_size"):
        v = getattr(props, attr, None)
        if v is not None:
            extra[attr.lower()] = v
    bus, slot, domain = (getattr(props, a, None) for a in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    bdf = f"{domain or 0:04x}:{bus:02x}:{slot:02x}" if isinstance(bus, int) and isinstance(slot, int) else None
    return CalibrationDevice(
        backend=backend, name=str(props.name), index=index, uuid=uuid_text, pci_bus_id=bdf,
        arch=(gcn.split(":")[0] if gcn else cc), memory_total_bytes=int(props.total_memory),
        compute_units=int(getattr(props, "multi_processor_count", 0)) or None, extra=extra,
    )


def identify_spec(device: CalibrationDevice) -> tuple[Any | None, str | None]:
    """(the spec-database entry of a GPU, a note on how or why not); (None, ...) for CPUs,
    unknown GPUs, or when the spec database (``gpuscope.specs``) is not available."""
    if device.backend == "cpu" or not device.name:
        return None, None
    try:
        hints: dict[str, Any] = {"memory_bytes": device.memory_total_bytes, "compute_units": device.compute_units}
        if device.backend == "rocm":
            hints.update(vendor="amd", arch_target=device.arch, warp_size=device.extra.get("warp_size"))
        else:
            hints.update(vendor="nvidia", compute_capability=device.extra.get("compute_capability"))
        match = match_spec(device.name, **hints)
    except (ImportError, AttributeError):
        return None, "no spec database in this gpuscope"
    except GpuscopeError as exc:  # e.g. an ambiguous name: leave the calibration unidentified
        return None, str(exc)
    except Exception as exc:  # the measurement matters more than the spec lookup
        return None, f"spec lookup failed: {type(exc).__name__}: {exc}"
    spec = getattr(match, "spec", None) if match is not None else None
    note = getattr(match, "note", None) if match is not None else None
    via = getattr(match, "via", None) if match is not None else None
    if spec is None:
        return None, note or f"{device.name!r} is not in the spec database"
    return spec, note or (f"identified by {via}" if via else None)


def _spec_key(spec: Any) -> str | None:
    key = getattr(spec, "key", None) if spec is not None else None
    return str(key) if key else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def spec_peak(spec: Any, metric: str, dtype: str | None) -> float | None:
    """The spec's peak for a calibration metric (FLOP/s or B/s), None when unknown.

    The spec entry comes from ``gpuscope.specs``; this reads it defensively (a method
    ``peak_flops_per_s(dtype)`` or a mapping ``flops_per_s`` / ``peak_flops_per_s`` by dtype;
    ``mem_bw_bytes_per_s`` / ``memory_bandwidth_bytes_per_s`` for bandwidth; ``l2_bw_bytes_per_s``
    for the L2 streams)."""
    if spec is None:
        return None
    if metric == METRIC_MATMUL:
        if dtype is None:
            return None
        for name in ("peak_flops_per_s", "dense_flops_per_s", "flops_per_s", "peak_flops"):
            v = getattr(spec, name, None)
            if v is None:
                continue
            try:
                got = v(dtype) if callable(v) else (v.get(dtype) if hasattr(v, "get") else None)
            except (KeyError, ValueError, TypeError, GpuscopeError):
                got = None
            if _num(got) is not None:
                return _num(got)
        return None
    if metric in (METRIC_L2_BW, METRIC_L2_READ):
        # the L2 streams against the L2's peak, never device memory's
        return _num(getattr(spec, "l2_bw_bytes_per_s", None))
    for name in ("mem_bw_bytes_per_s", "memory_bandwidth_bytes_per_s", "peak_mem_bw_bytes_per_s",
                 "mem_bandwidth_bytes_per_s"):
        v = _num(getattr(spec, name, None))
        if v is not None:
            return v
    return None


def gpu_clocks(device: CalibrationDevice) -> tuple[dict[str, Any], dict[str, Any]]:
    """(limits, telemetry) of a calibrated GPU through ``collectors/``: its max SM clock and
    enforced power limit (NVIDIA; {} elsewhere), and its clocks, power and temperature right now
    (``sm_clock_mhz``, ``power_w``, ``temperature_c``); a value the vendor library does not give
    is left out."""
    if device.backend == "cuda":
        from ..collectors.nvml import device_clocks

        now = device_clocks(device.uuid, device.index if device.uuid is None else None)
        limits: dict[str, Any] = {k: now[k] for k in ("max_sm_clock_mhz", "power_limit_w") if k in now}
    elif device.backend == "rocm":
        from ..collectors.amd import device_clocks as amd_device_clocks

        now = amd_device_clocks(device.pci_bus_id, device.index)
        limits = {}
    else:
        return {}, {}
    return limits, {k: now[k] for k in ("sm_clock_mhz", "power_w", "temperature_c") if k in now}
