"""What a calibration is: its arguments (dtypes, time budget) and its results (the device, one
measurement per ceiling, the dtypes skipped and why)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..device import DeviceIdentity
from ..errors import ParameterError
from ..ceiling_metrics import ROOF_DTYPES


#: What a GPU calibration measures unless told otherwise (fp8 is skipped where unsupported).
DEFAULT_GPU_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32", "tf32", "fp8")
#: What a CPU calibration measures unless told otherwise.
DEFAULT_CPU_DTYPES: tuple[str, ...] = ("fp32", "bf16")


BACKENDS = ("cuda", "rocm", "cpu")

_DTYPE_ALIASES = {
    "fp64": "fp64", "float64": "fp64", "double": "fp64", "f64": "fp64",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
    "int8": "int8", "i8": "int8",
}

#: Overall time budgets in seconds (``--seconds`` overrides): (gpu, cpu) x (full, quick).
DEFAULT_SECONDS = {("gpu", False): 60.0, ("gpu", True): 12.0, ("cpu", False): 20.0, ("cpu", True): 2.0}


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------


#: The vendor of each backend, as :class:`gpuscope.device.DeviceIdentity` names it.
_BACKEND_VENDOR = {"cuda": "nvidia", "rocm": "amd", "cpu": "host"}


@dataclass(kw_only=True)
class CalibrationDevice(DeviceIdentity):
    """The device a calibration ran on: its identity (vendor from the backend; ``pci_bus_id``
    as ``domain:bus:device`` from torch's properties) and what torch says of it."""

    backend: str  # "cuda", "rocm" or "cpu"
    #: "9.0" (NVIDIA compute capability), the gfx name on ROCm ("gfx942"), the CPU architecture.
    arch: str | None = None
    memory_total_bytes: int | None = None
    #: SMs (NVIDIA), CUs (AMD) or logical CPUs.
    compute_units: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vendor is None:
            self.vendor = _BACKEND_VENDOR.get(self.backend)

    def to_json(self) -> dict[str, Any]:
        doc = {"backend": self.backend, "name": self.name, "index": self.index, "uuid": self.uuid,
               "arch": self.arch, "memory_total_bytes": self.memory_total_bytes,
               "compute_units": self.compute_units}
        doc.update(self.extra)
        return doc


@dataclass(frozen=True)
class Measurement:
    """One measured ceiling: one row of the ``ceilings`` table."""

    metric: str
    dtype: str | None
    value: float
    unit: str
    method: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """What :func:`measure` found; :func:`write_calibration` stores it."""

    device: CalibrationDevice
    measurements: list[Measurement]
    #: (dtype, reason) for every requested dtype that was not measured.
    skipped: list[tuple[str, str]]
    measured_ns: int
    spec_key: str | None = None
    #: The spec-database entry (whatever ``gpuscope.specs`` returns), None when unidentified.
    spec: Any = None
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------------


def parse_dtypes(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"bf16,fp16"`` (or a list) as roof dtype keys, in the order given, without repeats.

    Aliases such as ``bfloat16``, ``half`` and ``float32`` are accepted. Raises
    :class:`InputError` on an unknown or empty list."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in parts:
        word = str(raw).strip().lower()
        if not word:
            continue
        key = _DTYPE_ALIASES.get(word)
        if key is None:
            raise ParameterError("dtypes", "unknown dtype {word} (choose from {choices})",
                                 {"word": repr(word), "choices": ", ".join(ROOF_DTYPES)})
        if key not in out:
            out.append(key)
    if not out:
        raise ParameterError("dtypes", "no dtype given (choose from {choices})", {"choices": ", ".join(ROOF_DTYPES)})
    return tuple(out)


def check_seconds(seconds: float | None) -> float | None:
    """``--seconds``: None, or a finite positive number (else :class:`InputError`)."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ParameterError("seconds", "must be a positive number of seconds, not {value}", {"value": f"{seconds:g}"})
    return float(seconds)


# --------------------------------------------------------------------------------------------
