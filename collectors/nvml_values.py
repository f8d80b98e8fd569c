"""NVML's return codes with the reasons users read, and the small value helpers of the NVML
collector: field values, timestamps, memory queries (v1/v2), processes. Pure functions over
a pynvml-compatible module; nothing here imports pynvml."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import percent_to_ratio

_KIB = 1024

# NVML return codes (pynvml.NVML_ERROR_*), fixed by the C API.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_GPU_NOT_FOUND = 28
_LOST_CODES = frozenset({_GPU_IS_LOST, _RESET_REQUIRED, _GPU_NOT_FOUND})
#: codes that mean "this device will never give this value": drop the read from the plan
_PERMANENT_CODES = frozenset({_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND, 2})


def _code(exc: BaseException) -> int | None:
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


#: User-facing reasons for the NVML error codes a user meets.
_REASONS = {
    _LIBRARY_NOT_FOUND: "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver installed",
    _DRIVER_NOT_LOADED: "NVML: NVIDIA driver not loaded",
    _NO_PERMISSION: "no permission (NVML: Insufficient Permissions)",
    _LIB_RM_VERSION_MISMATCH:
        "NVML/driver version mismatch: the driver was upgraded without reloading the kernel module (reboot)",
    _NOT_SUPPORTED: "not supported by this GPU",
    _FUNCTION_NOT_FOUND: "not in this driver's NVML (function not found; nvidia-ml-py newer than the driver)",
    _GPU_IS_LOST: "GPU is lost (fell off the bus)",
    2: "not available on this device (invalid argument, e.g. in MIG mode)",
}


def nvml_error_reason(exc: BaseException) -> str:
    """A user-facing reason for an NVML error (init or a read)."""
    code = _code(exc)
    if code in _REASONS:
        return _REASONS[code]
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return "nvidia-ml-py newer than the driver's NVML (library mismatch)"
    name = type(exc).__name__
    return f"{name}: {exc}" if code is None else f"NVML error {code}: {exc}"


class _Err(Exception):
    """An NVML status from a field value or GPM metric, shaped like pynvml's NVMLError."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"status {self.value}"


def _s(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    return str(v)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _fv_value(fv: Any) -> float | int | None:
    attr = _VALUE_ATTR.get(int(fv.valueType))
    return getattr(fv.value, attr) if attr else None


def _pick_ts(vendor_ts: int, read_ns: int) -> int:
    # NVML field timestamps are CPU µs since the epoch; trust them when they are near the read
    if vendor_ts and read_ns - 10_000_000_000 < vendor_ts <= read_ns + 1_000_000_000:
        return vendor_ts
    return read_ns


def _util(mod: Any, h: Any) -> dict[str, float | None]:
    u = mod.nvmlDeviceGetUtilizationRates(h)
    return {"gpu_util": percent_to_ratio(u.gpu), "mem_util": percent_to_ratio(u.memory)}


def _mem(mod: Any, h: Any) -> dict[str, int]:
    m = mod.nvmlDeviceGetMemoryInfo(h)
    return {"mem_used_bytes": int(m.used), "mem_total_bytes": int(m.total)}


def _mem_v2(mod: Any, h: Any) -> dict[str, int]:
    m = mod.nvmlDeviceGetMemoryInfo(h, version=mod.nvmlMemory_v2)
    return {"mem_used_bytes": int(m.used), "mem_total_bytes": int(m.total), "mem_reserved_bytes": int(m.reserved)}


#: Errors of the v2 memory query that mean "this driver has no v2": NVML_ERROR_FUNCTION_NOT_FOUND
#: (no nvmlDeviceGetMemoryInfo_v2 symbol, drivers before R510), ARGUMENT_VERSION_MISMATCH (25),
#: NOT_SUPPORTED.
_NO_V2_CODES = frozenset({_FUNCTION_NOT_FOUND, 25, _NOT_SUPPORTED})
_V1_NOTE = "used memory includes what the driver reserves"


def _memory_query(mod: Any, h: Any) -> tuple[str, str | None]:
    """``("v2", None)`` when the v2 memory query answers, else ``("v1", why)``.

    v1 is chosen only where it answers itself: a v2 failure whose v1 fails too stays "v2", so
    that the read reports v2's error (GB10-class unified-memory GPUs answer v2 but not v1)."""
    if getattr(mod, "nvmlMemory_v2", None) is None:
        return "v1", f"this nvidia-ml-py has no v2 memory query: {_V1_NOTE}"
    try:
        mod.nvmlDeviceGetMemoryInfo(h, version=mod.nvmlMemory_v2)
    except Exception as exc:
        code = _code(exc)
        if code in _LOST_CODES:
            return "v2", None  # the probe of the read says the GPU is lost
        try:
            mod.nvmlDeviceGetMemoryInfo(h)
        except Exception:
            return "v2", None
        if code in _NO_V2_CODES or code is None:
            return "v1", f"the driver has no v2 memory query ({nvml_error_reason(exc)}): {_V1_NOTE}"
        # other errors of v2 alone (UNKNOWN under WSL) would fail every tick: v1 answers
        return "v1", f"the v2 memory query fails on this device ({nvml_error_reason(exc)}): {_V1_NOTE}"
    return "v2", None


def _throttle_fn(mod: Any) -> Callable[[Any], int]:
    fn = getattr(mod, "nvmlDeviceGetCurrentClocksEventReasons", None)
    return fn if fn is not None else mod.nvmlDeviceGetCurrentClocksThrottleReasons


def _pcie_throughput(mod: Any, h: Any) -> dict[str, float]:
    tx = mod.nvmlDeviceGetPcieThroughput(h, 0) * _KIB  # KB/s (KiB) -> B/s
    rx = mod.nvmlDeviceGetPcieThroughput(h, 1) * _KIB
    return {"pcie_tx_bytes_per_s": float(tx), "pcie_rx_bytes_per_s": float(rx), "pcie_bytes_per_s": float(tx + rx)}


def _running_processes(mod: Any, h: Any) -> list[Any]:
    procs = list(mod.nvmlDeviceGetComputeRunningProcesses(h))
    try:
        procs += list(mod.nvmlDeviceGetGraphicsRunningProcesses(h))
    except Exception:
        pass
    seen: dict[int, Any] = {}
    for p in procs:  # a process can be both compute and graphics: count it once
        seen.setdefault(int(p.pid), p)
    return list(seen.values())
