"""NVML's return codes with the reasons users read, and the small value helpers of the NVML
collector: field values, timestamps, memory queries (v1/v2), processes. Pure functions over
a pynvml-compatible module; nothing here imports pynvml."""
from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from .base import percent_to_ratio

__all__ = [
    "LOST_CODES",
    "NO_V2_CODES",
    "PCIE_UTIL_RX_BYTES",
    "PCIE_UTIL_TX_BYTES",
    "PERMANENT_CODES",
    "REASONS",
    "NvmlReturn",
    "NvmlStatusError",
    "error_code",
    "field_value",
    "memory_query",
    "nvml_error_reason",
    "nvml_text",
    "pick_ts_ns",
    "read_memory_v1",
    "read_memory_v2",
    "read_count",
    "read_pcie_throughput",
    "read_remapped_rows",
    "read_utilization",
    "running_processes",
    "throttle_reasons_fn",
    "try_or_none",
]

_KIB = 1024


class NvmlReturn(enum.IntEnum):
    """The NVML return codes gpuscope names (``nvmlReturn_t`` in nvml.h, ``pynvml.NVML_SUCCESS``
    and ``NVML_ERROR_*``), fixed by the C API. The one place these numbers are written: the
    reasons, the lost and permanent sets and the collector all name them from here. An
    ``IntEnum``, so a code is compared with the plain ints pynvml raises and returns."""

    SUCCESS = 0
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    NOT_FOUND = 6
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    LIBRARY_NOT_FOUND = 12
    FUNCTION_NOT_FOUND = 13
    GPU_IS_LOST = 15
    RESET_REQUIRED = 16
    LIB_RM_VERSION_MISMATCH = 18
    ARGUMENT_VERSION_MISMATCH = 25
    GPU_NOT_FOUND = 28


#: codes after which the GPU is taken as gone: marked lost, no more samples from it
LOST_CODES = frozenset({NvmlReturn.GPU_IS_LOST, NvmlReturn.RESET_REQUIRED, NvmlReturn.GPU_NOT_FOUND})
#: codes that mean "this device will never give this value": drop the read from the plan
PERMANENT_CODES = frozenset({NvmlReturn.NOT_SUPPORTED, NvmlReturn.NO_PERMISSION, NvmlReturn.FUNCTION_NOT_FOUND,
                             NvmlReturn.INVALID_ARGUMENT})


def error_code(exc: BaseException) -> int | None:
    """The NVML return code an exception carries (pynvml's ``NVMLError.value``, a
    :class:`NvmlStatusError`'s), None for any other exception."""
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


#: User-facing reasons for the NVML error codes a user meets.
REASONS: dict[int, str] = {
    NvmlReturn.LIBRARY_NOT_FOUND: "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver installed",
    NvmlReturn.DRIVER_NOT_LOADED: "NVML: NVIDIA driver not loaded",
    NvmlReturn.NO_PERMISSION: "no permission (NVML: Insufficient Permissions)",
    NvmlReturn.LIB_RM_VERSION_MISMATCH:
        "NVML/driver version mismatch: the driver was upgraded without reloading the kernel module (reboot)",
    NvmlReturn.NOT_SUPPORTED: "not supported by this GPU",
    NvmlReturn.FUNCTION_NOT_FOUND:
        "not in this driver's NVML (function not found; nvidia-ml-py newer than the driver)",
    NvmlReturn.GPU_IS_LOST: "GPU is lost (fell off the bus)",
    NvmlReturn.INVALID_ARGUMENT: "not available on this device (invalid argument, e.g. in MIG mode)",
}


def nvml_error_reason(exc: BaseException) -> str:
    """A user-facing reason for an NVML error (init or a read)."""
    code = error_code(exc)
    if code in REASONS:
        return REASONS[code]
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return "nvidia-ml-py newer than the driver's NVML (library mismatch)"
    name = type(exc).__name__
    return f"{name}: {exc}" if code is None else f"NVML error {code}: {exc}"


class NvmlStatusError(Exception):
    """An NVML status from a field value or GPM metric, shaped like pynvml's NVMLError (its
    code in ``value``), so that :func:`nvml_error_reason` words it the same way."""

    def __init__(self, value: int) -> None:
        super().__init__(int(value))
        self.value = int(value)

    def __str__(self) -> str:
        return f"status {self.value}"


def nvml_text(v: Any) -> str | None:
    """A string NVML gave (bytes in older bindings, NUL-padded), None for None."""
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    return str(v)


def try_or_none(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when it raises (an identity query a GPU or driver may not answer)."""
    try:
        return fn()
    except Exception:
        return None


# nvmlValueType_t -> the member of nvmlValue_t that holds the value
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(fv: Any) -> float | int | None:
    """The value of one ``nvmlFieldValue_t`` (in the member its ``valueType`` names)."""
    attr = _VALUE_ATTR.get(int(fv.valueType))
    return getattr(fv.value, attr) if attr else None


def pick_ts_ns(vendor_ts_ns: int, read_ns: int) -> int:
    """A row's timestamp: the newest field timestamp NVML gave, where it is near the read
    (NVML field timestamps are CPU µs since the epoch), else the host clock at the read."""
    if vendor_ts_ns and read_ns - 10_000_000_000 < vendor_ts_ns <= read_ns + 1_000_000_000:
        return vendor_ts_ns
    return read_ns


def read_utilization(mod: Any, h: Any) -> dict[str, float | None]:
    """``gpu_util`` and ``mem_util`` (0..1) of one device."""
    u = mod.nvmlDeviceGetUtilizationRates(h)
    return {"gpu_util": percent_to_ratio(u.gpu), "mem_util": percent_to_ratio(u.memory)}


def read_memory_v1(mod: Any, h: Any) -> dict[str, int]:
    """Memory used and total through the v1 query (its "used" counts the driver's reservation)."""
    m = mod.nvmlDeviceGetMemoryInfo(h)
    return {"mem_used_bytes": int(m.used), "mem_total_bytes": int(m.total)}


def read_memory_v2(mod: Any, h: Any) -> dict[str, int]:
    """Memory used, total and reserved by the driver through the v2 query (nvidia-smi's "used")."""
    m = mod.nvmlDeviceGetMemoryInfo(h, version=mod.nvmlMemory_v2)
    return {"mem_used_bytes": int(m.used), "mem_total_bytes": int(m.total), "mem_reserved_bytes": int(m.reserved)}


#: Errors of the v2 memory query that mean "this driver has no v2": FUNCTION_NOT_FOUND (no
#: nvmlDeviceGetMemoryInfo_v2 symbol, drivers before R510), ARGUMENT_VERSION_MISMATCH,
#: NOT_SUPPORTED.
NO_V2_CODES = frozenset({NvmlReturn.FUNCTION_NOT_FOUND, NvmlReturn.ARGUMENT_VERSION_MISMATCH,
                         NvmlReturn.NOT_SUPPORTED})
_V1_NOTE = "used memory includes what the driver reserves"


def memory_query(mod: Any, h: Any) -> tuple[str, str | None]:
    """``("v2", None)`` when the v2 memory query answers, else ``("v1", why)``.

    v1 is chosen only where it answers itself: a v2 failure whose v1 fails too stays "v2", so
    that the read reports v2's error (GB10-class unified-memory GPUs answer v2 but not v1)."""
    if getattr(mod, "nvmlMemory_v2", None) is None:
        return "v1", f"this nvidia-ml-py has no v2 memory query: {_V1_NOTE}"
    try:
        mod.nvmlDeviceGetMemoryInfo(h, version=mod.nvmlMemory_v2)
    except Exception as exc:
        code = error_code(exc)
        if code in LOST_CODES:
            return "v2", None  # the probe of the read says the GPU is lost
        try:
            mod.nvmlDeviceGetMemoryInfo(h)
        except Exception:
            return "v2", None
        if code in NO_V2_CODES or code is None:
            return "v1", f"the driver has no v2 memory query ({nvml_error_reason(exc)}): {_V1_NOTE}"
        # other errors of v2 alone (UNKNOWN under WSL) would fail every tick: v1 answers
        return "v1", f"the v2 memory query fails on this device ({nvml_error_reason(exc)}): {_V1_NOTE}"
    return "v2", None


def throttle_reasons_fn(mod: Any) -> Callable[[Any], int]:
    """The throttle-reasons getter of this binding (renamed "clocks event reasons" in newer ones)."""
    fn = getattr(mod, "nvmlDeviceGetCurrentClocksEventReasons", None)
    return fn if fn is not None else mod.nvmlDeviceGetCurrentClocksThrottleReasons


#: nvmlPcieUtilCounter_t: the direction nvmlDeviceGetPcieThroughput measures
PCIE_UTIL_TX_BYTES = 0
PCIE_UTIL_RX_BYTES = 1


def read_pcie_throughput(mod: Any, h: Any) -> dict[str, float]:
    """PCIe tx, rx and their sum in bytes/s (NVML samples ~20 ms per direction: call it seldom)."""
    tx = mod.nvmlDeviceGetPcieThroughput(h, PCIE_UTIL_TX_BYTES) * _KIB  # KB/s (KiB) -> B/s
    rx = mod.nvmlDeviceGetPcieThroughput(h, PCIE_UTIL_RX_BYTES) * _KIB
    return {"pcie_tx_bytes_per_s": float(tx), "pcie_rx_bytes_per_s": float(rx), "pcie_bytes_per_s": float(tx + rx)}


def read_count(v: Any) -> int | None:
    """A count NVML gave (an unsigned int): None for a non-number or a sentinel (0xFFFFFFFF)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 0xFFFFFFFF:
        return None
    return v


def read_remapped_rows(mod: Any, h: Any) -> dict[str, int | None]:
    """``nvmlDeviceGetRemappedRows``: rows remapped for correctable and uncorrectable errors
    (over the GPU's life, kept in the InfoROM), and whether a remapping is pending (until the
    next GPU reset) or has failed, as 0 / 1 (nvidia-smi -q's "Remapped Rows" section)."""
    corrected, uncorrected, pending, failed = mod.nvmlDeviceGetRemappedRows(h)
    flag = {0: 0, 1: 1}
    return {"remapped_rows_corrected": read_count(corrected), "remapped_rows_uncorrected": read_count(uncorrected),
            "row_remap_pending": flag.get(pending), "row_remap_failed": flag.get(failed)}


def running_processes(mod: Any, h: Any) -> list[Any]:
    """The compute and graphics processes on one device, each pid once."""
    procs = list(mod.nvmlDeviceGetComputeRunningProcesses(h))
    try:
        procs += list(mod.nvmlDeviceGetGraphicsRunningProcesses(h))
    except Exception:
        pass
    seen: dict[int, Any] = {}
    for p in procs:  # a process can be both compute and graphics: count it once
        seen.setdefault(int(p.pid), p)
    return list(seen.values())
