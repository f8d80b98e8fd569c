"""Which OpenTelemetry instrument each telemetry value becomes: names, instrument types, units
and attributes. Pure functions over :class:`~gpuscope.collectors.base.DeviceInfo` and sample
values; no OpenTelemetry import (the SDK is wired in :mod:`gpuscope.otel.sink`).

Names follow the semantic conventions for hardware (``model/hardware/``, status
"development"): ``hw.gpu.utilization``, ``hw.gpu.memory.usage`` / ``.limit`` /
``.utilization``, ``hw.gpu.io``, ``hw.power``, ``hw.energy``, ``hw.temperature``,
``hw.status``; the host's under the system conventions (``system.cpu.utilization``,
``system.memory.usage`` / ``.limit``). What the conventions lack is ``gpuscope.gpu.*``, named
plainly with its unit. No ``hw.gpu.*`` name is made up: the conventions have no GPU power,
temperature or clock metric of their own (power and temperature are the common ``hw.power`` /
``hw.temperature`` with ``hw.type=gpu``).

Semantics that differ from a plain copy of the stored value, on purpose:

- ``hw.gpu.memory.utilization`` is the *fraction of memory used* (the convention's definition):
  ``mem_used_bytes / mem_total_bytes``. NVML's "memory utilization" (``mem_util``, the memory
  controller's busy time) is ``gpuscope.gpu.memory.busy``.
- ``hw.gpu.io`` (PCIe) and ``gpuscope.gpu.link.io`` (NVLink / XGMI) are byte *counters*: the
  collectors give rates, which the sink integrates over the time between samples.
- ``hw.temperature`` carries ``hw.sensor_location`` = ``gpu`` (``temp_c``) or ``memory``
  (``mem_temp_c``).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Attributes of a point: sorted (key, value) pairs, hashable.
Attrs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Instrument:
    """One OpenTelemetry instrument: ``kind`` is ``gauge``, ``counter`` (monotonic, cumulative)
    or ``updown`` (up-down counter, cumulative value observed as is)."""

    name: str
    kind: str
    unit: str
    description: str


INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("hw.gpu.utilization", "gauge", "1", "Fraction of time spent in a specific task"),
    Instrument("hw.gpu.memory.usage", "updown", "By", "GPU memory used"),
    Instrument("hw.gpu.memory.limit", "updown", "By", "Size of the GPU memory"),
    Instrument("hw.gpu.memory.utilization", "gauge", "1", "Fraction of GPU memory used"),
    Instrument("hw.gpu.io", "counter", "By", "Received and transmitted bytes by the GPU (PCIe)"),
    Instrument("hw.power", "gauge", "W", "Instantaneous power consumed by the component"),
    Instrument("hw.energy", "counter", "J", "Energy consumed by the component (the vendor's counter)"),
    Instrument("hw.temperature", "gauge", "Cel", "Temperature in degrees Celsius"),
    Instrument("hw.errors", "counter", "{error}", "Number of errors encountered by the component (memory ECC, since the driver loaded)"),
    Instrument("hw.status", "updown", "1", "Operational status: 1 (true) or 0 (false) for each of the possible states"),
    Instrument("gpuscope.gpu.memory.busy", "gauge", "1",
               "Fraction of the sample period in which device memory was read or written (NVML utilization.memory, AMD umc_activity)"),
    Instrument("gpuscope.gpu.memory.reserved", "updown", "By", "Device memory the driver reserves for itself"),
    Instrument("gpuscope.gpu.clock.sm", "gauge", "MHz", "SM / graphics clock"),
    Instrument("gpuscope.gpu.clock.memory", "gauge", "MHz", "Memory clock"),
    Instrument("gpuscope.gpu.sm.active", "gauge", "1", "Fraction of time at least one warp was resident on an SM (NVML GPM)"),
    Instrument("gpuscope.gpu.sm.occupancy", "gauge", "1", "Resident warps over the maximum, averaged over SMs (NVML GPM)"),
    Instrument("gpuscope.gpu.tensor.active", "gauge", "1", "Fraction of cycles the tensor / matrix cores were busy"),
    Instrument("gpuscope.gpu.dram.bandwidth_utilization", "gauge", "1", "Fraction of peak DRAM bandwidth used (NVML GPM)"),
    Instrument("gpuscope.gpu.throttle_reasons", "gauge", "1", "Vendor bit mask of active clock throttle / event reasons (0: none)"),
    Instrument("gpuscope.gpu.power.limit", "gauge", "W", "Enforced board / socket power limit"),
    Instrument("gpuscope.gpu.power.instant", "gauge", "W", "Instantaneous power draw where the vendor distinguishes it from hw.power's average"),
    Instrument("gpuscope.gpu.fan.speed", "gauge", "1", "Fan speed as a fraction of maximum"),
    Instrument("gpuscope.gpu.pcie.io", "counter", "By", "PCIe bytes, both directions (AMD gives no split)"),
    Instrument("gpuscope.gpu.link.io", "counter", "By", "Bytes over GPU-GPU links (NVLink / XGMI)"),
    Instrument("gpuscope.gpu.process.memory.usage", "updown", "By",
               "GPU memory used by one process (--per-process: the top N by memory, the rest summed)"),
    Instrument("gpuscope.gpu.process.utilization", "gauge", "1",
               "SM / gfx utilisation of one process where the vendor gives it (--per-process)"),
    Instrument("gpuscope.gpu.xid.last", "gauge", "1", "The code of the last critical XID error since monitor started (0: none)"),
    Instrument("system.cpu.utilization", "gauge", "1", "Fraction of all host CPU time that was busy"),
    Instrument("system.memory.usage", "updown", "By", "Host memory in use"),
    Instrument("system.memory.limit", "updown", "By", "Host memory size"),
)
INSTRUMENTS_BY_NAME: dict[str, Instrument] = {i.name: i for i in INSTRUMENTS}

#: Stored metrics exported as they are (gauges, up-down counters, the energy counter), with the
#: attributes they add; the instrument is the metric's ``otel_name`` (gpuscope/metrics.py).
DIRECT: dict[str, Attrs] = {
    "gpu_util": (("hw.gpu.task", "general"),),
    "mem_used_bytes": (), "mem_total_bytes": (), "mem_reserved_bytes": (), "mem_util": (),
    "power_w": (), "power_instant_w": (), "energy_j": (), "power_limit_w": (),
    "temp_c": (("hw.sensor_location", "gpu"),),
    "mem_temp_c": (("hw.sensor_location", "memory"),),
    "sm_clock_mhz": (), "mem_clock_mhz": (), "sm_active": (), "sm_occupancy": (), "tensor_active": (),
    "dram_bw_util": (), "throttle_reasons": (), "fan_speed": (),
    "host_cpu_util": (), "host_mem_used_bytes": (), "host_mem_total_bytes": (),
    "ecc_corrected_errors": (("error.type", "corrected"),),
    "ecc_uncorrected_errors": (("error.type", "uncorrected"),),
    "xid_errors": (("error.type", "xid"),),
    "last_xid": (),
}
#: Byte rates integrated into byte counters: stored rate -> ``network.io.direction`` (None: the
#: vendor gives no split, AMD's PCIe total).
RATES: dict[str, str | None] = {
    "pcie_tx_bytes_per_s": "transmit", "pcie_rx_bytes_per_s": "receive",
    "xgmi_nvlink_tx_bytes_per_s": "transmit", "xgmi_nvlink_rx_bytes_per_s": "receive",
    "pcie_bytes_per_s": None,
}
#: Stored metrics monitor does not export, and why.
NOT_EXPORTED: dict[str, str] = {
    "proc_gpu_mem_bytes": "the watched tree's sum; --per-process exports each process instead",
    "proc_gpu_util": "the watched tree's sum; --per-process exports each process instead",
    "proc_cpu_cores": "monitor watches no process tree", "proc_rss_bytes": "monitor watches no process tree",
    "proc_count": "monitor watches no process tree",
}


def instrument_of(metric: str) -> str:
    """The instrument a stored metric is exported as."""
    return _NAMES[metric]


_VENDORS = {"nvidia": "NVIDIA", "amd": "AMD"}


def device_attributes(device: Any, driver_version: str | None = None) -> Attrs:
    """The attributes every point of ``device`` carries: ``hw.id`` (the UUID; AMD's too, else
    the PCI bus id, else the device key), ``hw.type`` (``gpu``; the host's rows carry none of
    these), ``hw.name`` (the key, ``gpu0``), ``hw.vendor``, ``hw.model`` and
    ``hw.driver_version`` where known. Nothing from a command line, a path or a user."""
    hw_id = device.uuid or device.pci_bus_id or device.key
    attrs = {"hw.id": str(hw_id), "hw.type": "gpu", "hw.name": str(device.key)}
    vendor = _VENDORS.get(str(device.vendor or "").lower(), device.vendor)
    if vendor:
        attrs["hw.vendor"] = str(vendor)
    if device.name:
        attrs["hw.model"] = str(device.name)
    driver = (device.properties or {}).get("driver_version") or driver_version
    if driver:
        attrs["hw.driver_version"] = str(driver)
    return tuple(sorted(attrs.items()))


def points(device_attrs: Attrs, values: dict[str, Any], lost: bool, host: bool) -> Iterator[tuple[str, float, Attrs]]:
    """The gauge and up-down points of one sample: (instrument, value, attributes). Counters
    integrated from rates are the sink's (they need the time between samples)."""
    base = () if host else device_attrs
    if not host:
        for state in ("ok", "failed"):
            yield "hw.status", float((state == "failed") == lost), _merge(base, (("hw.state", state),))
    if lost:
        return
    for metric, extra in DIRECT.items():
        v = values.get(metric)
        if v is None:
            continue
        name = _NAMES[metric]
        if host != name.startswith("system."):
            continue
        yield name, float(v), _merge(base, extra)
    used, total = values.get("mem_used_bytes"), values.get("mem_total_bytes")
    if not host and used is not None and total:
        yield "hw.gpu.memory.utilization", float(used) / float(total), base


def _names() -> dict[str, str]:
    from ..metrics import METRICS_BY_NAME

    return {m: METRICS_BY_NAME[m].otel_name for m in [*DIRECT, *RATES]}


_NAMES = _names()


def _merge(a: Attrs, b: Attrs) -> Attrs:
    return tuple(sorted(a + b)) if b else a


def process_points(device_attrs: Attrs, processes: Any, top: int, name_of: Any) -> Iterator[tuple[str, float, Attrs]]:
    """Per-process points of one GPU: the ``top`` processes by GPU memory, each labelled by
    ``process.pid`` and ``process.executable.name`` only (``name_of(pid)``), and the rest summed
    into one point named ``(N other processes)`` without a pid: the series stay bounded."""
    procs = sorted(processes, key=lambda p: (-(p.gpu_mem_bytes or 0), p.pid))
    for p in procs[:top]:
        attrs = _merge(device_attrs, (("process.executable.name", p.name or name_of(p.pid)), ("process.pid", str(p.pid))))
        if p.gpu_mem_bytes is not None:
            yield "gpuscope.gpu.process.memory.usage", float(p.gpu_mem_bytes), attrs
        if p.gpu_util is not None:
            yield "gpuscope.gpu.process.utilization", float(p.gpu_util), attrs
    rest = procs[top:]
    if rest:
        attrs = _merge(device_attrs, (("process.executable.name", f"({len(rest)} other processes)"),))
        mems = [p.gpu_mem_bytes for p in rest if p.gpu_mem_bytes is not None]
        if mems:
            yield "gpuscope.gpu.process.memory.usage", float(sum(mems)), attrs
