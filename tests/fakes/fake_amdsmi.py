"""A fake ``amdsmi`` module (the AMD SMI Python API) driven by a table of values.

Shapes follow amdsmi 7.0.2 (``amdsmi_interface.py``): dicts with ``"N/A"`` for what the GPU
does not report, ``AmdSmiLibraryException`` with ``err_code`` for failed calls. A value in the
table may be ``{"error": 2}`` to make that call raise with that status code. Tick ``k`` is
``base`` merged with ``ticks[k]``; :meth:`FakeAmdSmi.step` moves every GPU on.
"""
from __future__ import annotations

import copy
import json
from enum import IntEnum
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parent / "tables"


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    _INFO = {2: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported", 10: "AMDSMI_STATUS_NO_PERM - Permission Denied",
             34: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded", 52: "AMDSMI_STATUS_FILE_NOT_FOUND - File not found"}

    def __init__(self, err_code: int) -> None:
        self.err_code = abs(err_code)
        self.err_info = self._INFO.get(self.err_code, f"AMDSMI_STATUS_{self.err_code}")
        super().__init__(f"Error code:\n\t{self.err_code} | {self.err_info}")

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_GPUS = 2


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and "error" not in v:
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _check(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"error"}:
        raise AmdSmiLibraryException(int(v["error"]))
    return v


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeAmdSmi:
    """An object that looks like the ``amdsmi`` module, answering from ``table``."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType

    def __init__(self, table: dict[str, Any] | str) -> None:
        if isinstance(table, str):
            table = json.loads((TABLES / table).read_text())
        self.table = table
        self.tick = 0
        self.calls: list[str] = []
        self.initialised = False

    def step(self, n: int = 1) -> None:
        self.tick += n

    def _dev(self, h: _Handle) -> dict[str, Any]:
        return self.table["devices"][h.index]

    def _now(self, h: _Handle) -> dict[str, Any]:
        d = self._dev(h)
        ticks = d.get("ticks") or [{}]
        return _merge(d.get("base", {}), ticks[min(self.tick, len(ticks) - 1)])

    def _get(self, h: _Handle, key: str) -> Any:
        self.calls.append(key)
        if not self.initialised:
            raise AmdSmiLibraryException(32)
        t = self._now(h)
        if key not in t:
            raise AmdSmiLibraryException(2)
        return copy.deepcopy(_check(t[key]))

    def _static(self, h: _Handle, key: str) -> Any:
        d = self._dev(h)
        if key not in d:
            raise AmdSmiLibraryException(2)
        return copy.deepcopy(_check(d[key]))

    # lifecycle
    def amdsmi_init(self, flag: int = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls.append("amdsmi_init")
        if self.table.get("init_error"):
            raise AmdSmiLibraryException(int(self.table["init_error"]))
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self.calls.append("amdsmi_shut_down")
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[_Handle]:
        return [_Handle(i) for i in range(len(self.table.get("devices", [])))]

    # static facts
    def amdsmi_get_gpu_asic_info(self, h: _Handle) -> dict[str, Any]:
        return self._static(h, "asic")

    def amdsmi_get_gpu_vbios_info(self, h: _Handle) -> dict[str, Any]:
        """``{"name", "build_date", "part_number", "version"}`` (the table's ``vbios``)."""
        return self._static(h, "vbios")

    def amdsmi_get_gpu_device_bdf(self, h: _Handle) -> str:
        return self._static(h, "bdf")

    def amdsmi_get_gpu_device_uuid(self, h: _Handle) -> str:
        return self._static(h, "uuid")

    def amdsmi_get_gpu_memory_total(self, h: _Handle, mem_type: int) -> int:
        assert mem_type == AmdSmiMemoryType.VRAM
        return self._static(h, "vram_total")

    def amdsmi_get_gpu_compute_partition(self, h: _Handle) -> str:
        return self._static(h, "compute_partition")

    def amdsmi_get_gpu_memory_partition(self, h: _Handle) -> str:
        return self._static(h, "memory_partition")

    def amdsmi_get_energy_count(self, h: _Handle) -> dict[str, Any]:
        return {"energy_accumulator": 0, "counter_resolution": self._static(h, "energy_resolution"), "timestamp": 0}

    def amdsmi_get_power_cap_info(self, h: _Handle) -> dict[str, Any]:
        return {"power_cap": self._static(h, "power_cap"), "default_power_cap": self._static(h, "power_cap"),
                "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": self._static(h, "power_cap")}

    # per tick
    def amdsmi_get_gpu_metrics_info(self, h: _Handle) -> dict[str, Any]:
        return self._get(h, "gpu_metrics")

    def amdsmi_get_gpu_memory_usage(self, h: _Handle, mem_type: int) -> int:
        return self._get(h, "vram_used")

    def amdsmi_get_gpu_process_list(self, h: _Handle) -> list[dict[str, Any]]:
        return self._get(h, "processes")

    def amdsmi_get_gpu_total_ecc_count(self, h: _Handle) -> dict[str, Any]:
        return self._get(h, "ecc")  # {"correctable_count", "uncorrectable_count", "deferred_count"}


class FakeAmdSmiCli:
    """A runner for :class:`AmdSmiCliCollector`: returns recorded ``amd-smi`` JSON output.

    ``table`` maps ``"metric"`` to a list of outputs (one per call; the last repeats) and
    ``"static"`` to one output."""

    def __init__(self, table: dict[str, Any] | str) -> None:
        if isinstance(table, str):
            table = json.loads((TABLES / table).read_text())
        self.table = table
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(list(args))
        if args[0] == "metric":
            outs = self.table["metric"]
            n = sum(1 for c in self.calls if c[0] == "metric")
            return json.dumps(outs[min(n - 1, len(outs) - 1)])
        if args[0] == "static" and "static" in self.table:
            return json.dumps(self.table["static"])
        raise RuntimeError(f"amd-smi {' '.join(args)} exited 2: unknown command")
