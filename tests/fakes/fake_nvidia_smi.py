#!/usr/bin/env python3
"""A fake ``nvidia-smi`` for machines without a GPU: it answers ``-L``, ``--help-query-gpu``
and ``--query-gpu=... --format=csv[,noheader][,nounits]`` from a fake NVML table
(``tests/fakes/tables``), read through :class:`fakes.fake_pynvml.FakeNvml` the way the real
nvidia-smi reads the driver through NVML, and prints them in nvidia-smi's own csv shapes:
``[N/A]`` for what the GPU does not report, units in the header and after each value unless
``nounits``, clock-event reasons as a 64-bit hex mask, an unknown field refused with
``Field "x" is not a valid field to query.`` and exit status 2.

It reads NVML independently of gpuscope's collector (its own calls, its own unit conversion),
so that comparing the two checks the collector instead of repeating it.

Environment: ``FAKE_NVML_TABLE`` (a table file name, default ``nvml_h100x8_nvsmi_dump.json``);
``FAKE_NVIDIA_SMI_MISSING`` (comma-separated fields this "driver" does not know, as an older
nvidia-smi lacks ``memory.reserved`` or ``power.draw.average``).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes.fake_pynvml import FakeNvml  # noqa: E402

# NVML field ids as nvidia-ml-py defines them (NVML_FI_DEV_*)
_FI_MEMORY_TEMP = 82
_FI_POWER_AVERAGE = 185
_FI_POWER_INSTANT = 186
_MIB = 2**20

Getter = Callable[[Any, Any, int], Any]


def _field(fid: int) -> Getter:
    def get(nv: Any, h: Any, i: int) -> Any:
        (fv,) = nv.nvmlDeviceGetFieldValues(h, [fid])
        return None if fv.nvmlReturn != 0 else fv.value.dVal if fv.valueType == 0 else fv.value.ullVal
    return get


def _memory(part: str) -> Getter:
    def get(nv: Any, h: Any, i: int) -> Any:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        except nv.NVMLError:
            if part == "reserved":
                return None
            m = nv.nvmlDeviceGetMemoryInfo(h)
        return getattr(m, part) // _MIB
    return get


def _mw(fn: Getter) -> Getter:
    def get(nv: Any, h: Any, i: int) -> Any:
        v = fn(nv, h, i)
        return None if v is None else f"{v / 1000:.2f}"
    return get


def _event_reasons(nv: Any, h: Any, i: int) -> str:
    return f"0x{int(nv.nvmlDeviceGetCurrentClocksEventReasons(h)):016x}"


# field -> (getter, unit for the header and the value, other names nvidia-smi accepts)
_FIELDS: dict[str, tuple[Getter, str, tuple[str, ...]]] = {
    "index": (lambda nv, h, i: i, "", ()),
    "name": (lambda nv, h, i: nv.nvmlDeviceGetName(h), "", ("gpu_name",)),
    "uuid": (lambda nv, h, i: nv.nvmlDeviceGetUUID(h), "", ("gpu_uuid",)),
    "driver_version": (lambda nv, h, i: nv.nvmlSystemGetDriverVersion(), "", ()),
    "pci.bus_id": (lambda nv, h, i: nv.nvmlDeviceGetPciInfo(h).busId.decode(), "", ("gpu_bus_id",)),
    "memory.total": (_memory("total"), "MiB", ()),
    "memory.reserved": (_memory("reserved"), "MiB", ()),
    "memory.used": (_memory("used"), "MiB", ()),
    "memory.free": (_memory("free"), "MiB", ()),
    "utilization.gpu": (lambda nv, h, i: nv.nvmlDeviceGetUtilizationRates(h).gpu, "%", ()),
    "utilization.memory": (lambda nv, h, i: nv.nvmlDeviceGetUtilizationRates(h).memory, "%", ()),
    "temperature.gpu": (lambda nv, h, i: nv.nvmlDeviceGetTemperature(h, 0), "", ()),
    "temperature.memory": (_field(_FI_MEMORY_TEMP), "", ()),
    "power.draw": (_mw(lambda nv, h, i: nv.nvmlDeviceGetPowerUsage(h)), "W", ()),
    "power.draw.average": (_mw(_field(_FI_POWER_AVERAGE)), "W", ()),
    "power.draw.instant": (_mw(_field(_FI_POWER_INSTANT)), "W", ()),
    "power.limit": (_mw(lambda nv, h, i: nv.nvmlDeviceGetEnforcedPowerLimit(h)), "W", ()),
    "enforced.power.limit": (_mw(lambda nv, h, i: nv.nvmlDeviceGetEnforcedPowerLimit(h)), "W", ()),
    "clocks.current.sm": (lambda nv, h, i: nv.nvmlDeviceGetClockInfo(h, 1), "MHz", ("clocks.sm",)),
    "clocks.current.memory": (lambda nv, h, i: nv.nvmlDeviceGetClockInfo(h, 2), "MHz", ("clocks.mem",)),
    "fan.speed": (lambda nv, h, i: nv.nvmlDeviceGetFanSpeed(h), "%", ()),
    "clocks_event_reasons.active": (_event_reasons, "", ("clocks_throttle_reasons.active",)),
}


def _known() -> dict[str, str]:
    """Every accepted name -> its canonical field, less the ones this 'driver' lacks."""
    missing = {f.strip() for f in os.environ.get("FAKE_NVIDIA_SMI_MISSING", "").split(",") if f.strip()}
    out: dict[str, str] = {}
    for name, (_, _, aliases) in _FIELDS.items():
        for n in (name, *aliases):
            if n not in missing:
                out[n] = name
    return out


def _help() -> str:
    lines = ['List of valid properties to query for the switch "--query-gpu=":', ""]
    known = _known()
    for name, (_, _, aliases) in _FIELDS.items():
        names = [n for n in (name, *aliases) if n in known]
        if names:
            lines += [" or ".join(f'"{n}"' for n in names), f"The {name} of the GPU (fake).", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    nv = FakeNvml(os.environ.get("FAKE_NVML_TABLE", "nvml_h100x8_nvsmi_dump.json"))
    nv.nvmlInit()
    if "--help-query-gpu" in argv:
        print(_help())
        return 0
    if "-L" in argv:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            print(f"GPU {i}: {nv.nvmlDeviceGetName(h)} (UUID: {nv.nvmlDeviceGetUUID(h)})")
        return 0
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if query is None or not fmt.startswith("csv"):
        print("fake nvidia-smi: only -L, --help-query-gpu and --query-gpu=... --format=csv[,noheader][,nounits]",
              file=sys.stderr)
        return 2
    known = _known()
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for f in fields:
        if f not in known:
            print(f'Field "{f}" is not a valid field to query.\n')
            return 2
    opts = set(fmt.split(",")[1:])
    units = [_FIELDS[known[f]][1] for f in fields]
    if "noheader" not in opts:
        print(", ".join(f"{f} [{u}]" if u and "nounits" not in opts else f for f, u in zip(fields, units)))
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        cells = []
        for f, unit in zip(fields, units):
            try:
                v = _FIELDS[known[f]][0](nv, h, i)
            except nv.NVMLError:
                v = None
            if v is None:
                cells.append("[N/A]")
            else:
                cells.append(f"{v} {unit}" if unit and "nounits" not in opts else str(v))
        print(", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
