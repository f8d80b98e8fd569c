"""Which OpenTelemetry instrument each telemetry value becomes: names, instrument types, units,
value types and attributes. Pure functions over :class:`~gpuscope.collectors.base.DeviceInfo`
and sample values; no OpenTelemetry import (the SDK is wired in :mod:`gpuscope.otel.sink`).

Names follow the semantic conventions (:data:`SEMCONV_VERSION`; ``model/hardware/``, status
"development"): ``hw.gpu.utilization``, ``hw.gpu.memory.usage`` / ``.limit`` /
``.utilization``, ``hw.gpu.io``, ``hw.power``, ``hw.energy``, ``hw.errors``, ``hw.status``,
``hw.temperature``, ``hw.fan.speed_ratio``; the host's under the system conventions
(``system.cpu.utilization``, ``system.memory.usage`` / ``.limit``). What the conventions lack
is ``gpuscope.gpu.*``, named plainly with its unit. Values are integers where the conventions
generate integers (``metric_value_type: int``: bytes, errors, status).

Semantics that differ from a plain copy of the stored value, on purpose:

- ``hw.gpu.memory.utilization`` is the *fraction of memory used* (the convention's definition):
  ``mem_used_bytes / mem_total_bytes``. NVML's "memory utilization" (``mem_util``, the memory
  controller's busy time) is ``gpuscope.gpu.memory.busy``.
- ``hw.gpu.io`` (PCIe) and ``gpuscope.gpu.link.io`` (NVLink / XGMI) are byte *counters*: the
  collectors give rates, which the sink integrates over the time between samples.
- The vendor's own counters (energy, ECC errors, XID errors) are exported as what they counted
  *since monitor started* (:data:`COUNTERS`, summed step by step across resets by the sink), so
  a cumulative series only grows and its OTLP start time is monitor's start.
- A temperature sensor and a fan are hardware components of their own (the conventions' model):
  ``hw.id`` of their own, ``hw.parent`` the GPU's ``hw.id``, no ``hw.type`` on
  ``hw.temperature`` / ``hw.fan.speed_ratio``; ``hw.name`` stays the GPU's key (``gpu0``).
- ``hw.status`` is ``degraded`` while an NVIDIA GPU slows its clocks for a thermal or hardware
  reason (:data:`NVIDIA_DEGRADED_REASONS`); a power-cap slowdown is normal operation, not that.
- ``system.cpu.utilization`` has a point per ``cpu.mode`` (:data:`CPU_MODE_METRICS`, summing to
  1); the stored busy total (``host_cpu_util``) is exported, without ``cpu.mode``, only for a
  row that has no mode (recorded before schema 10), never beside them.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Attributes of a point: sorted (key, value) pairs, hashable (values are strings, except
#: ``process.pid``, an int as the conventions type it).
Attrs = tuple[tuple[str, Any], ...]

#: The semantic-conventions release whose definitions the names, units, value types and
#: attributes follow (checked against fixtures/semconv/ by tests/test_otel_conventions.py).
SEMCONV_VERSION = "1.44.0"
#: The schema URL of that release, on the resource and the meter.
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"


@dataclass(frozen=True)
class Instrument:
    """One OpenTelemetry instrument: ``kind`` is ``gauge``, ``counter`` (monotonic, cumulative)
    or ``updown`` (up-down counter, cumulative value observed as is); ``value_type`` ``int`` or
    ``double`` (the conventions' ``metric_value_type`` where they define the metric)."""

    name: str
    kind: str
    unit: str
    description: str
    value_type: str = "double"


INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("hw.gpu.utilization", "gauge", "1", "Fraction of time spent in a specific task"),
    Instrument("hw.gpu.memory.usage", "updown", "By", "GPU memory used", "int"),
    Instrument("hw.gpu.memory.limit", "updown", "By", "Size of the GPU memory", "int"),
    Instrument("hw.gpu.memory.utilization", "gauge", "1", "Fraction of GPU memory used"),
    Instrument("hw.gpu.io", "counter", "By", "Received and transmitted bytes by the GPU (PCIe)", "int"),
    Instrument("hw.power", "gauge", "W", "Instantaneous power consumed by the component"),
    Instrument("hw.energy", "counter", "J", "Energy consumed by the component since monitor started (the vendor's counter, summed across its resets)"),
    Instrument("hw.temperature", "gauge", "Cel", "Temperature in degrees Celsius"),
    Instrument("hw.errors", "counter", "{error}",
               "Number of errors encountered by the component since monitor started (memory ECC corrected / uncorrected, critical XID)",
               "int"),
    Instrument("hw.status", "updown", "1", "Operational status: 1 (true) or 0 (false) for each of the possible states", "int"),
    Instrument("gpuscope.gpu.memory.busy", "gauge", "1",
               "Fraction of the sample period in which device memory was read or written (NVML utilization.memory, AMD umc_activity)"),
    Instrument("gpuscope.gpu.memory.reserved", "updown", "By", "Device memory the driver reserves for itself", "int"),
    Instrument("gpuscope.gpu.clock.sm", "gauge", "Hz", "SM / graphics clock"),
    Instrument("gpuscope.gpu.clock.memory", "gauge", "Hz", "Memory clock"),
    Instrument("gpuscope.gpu.sm.active", "gauge", "1", "Fraction of time at least one warp was resident on an SM (NVML GPM)"),
    Instrument("gpuscope.gpu.sm.occupancy", "gauge", "1", "Resident warps over the maximum, averaged over SMs (NVML GPM)"),
    Instrument("gpuscope.gpu.tensor.active", "gauge", "1", "Fraction of cycles the tensor / matrix cores were busy"),
    Instrument("gpuscope.gpu.dram.bandwidth_utilization", "gauge", "1", "Fraction of peak DRAM bandwidth used (NVML GPM)"),
    Instrument("gpuscope.gpu.throttle_reasons", "gauge", "1", "Vendor bit mask of active clock throttle / event reasons (0: none)", "int"),
    Instrument("gpuscope.gpu.power.limit", "gauge", "W", "Enforced board / socket power limit"),
    Instrument("gpuscope.gpu.power.instant", "gauge", "W", "Instantaneous power draw where the vendor distinguishes it from hw.power's average"),
    Instrument("hw.fan.speed_ratio", "gauge", "1", "Fan speed expressed as a fraction of its maximum speed"),
    Instrument("gpuscope.gpu.pcie.io", "counter", "By", "PCIe bytes, both directions (AMD gives no split)", "int"),
    Instrument("gpuscope.gpu.link.io", "counter", "By", "Bytes over GPU-GPU links (NVLink / XGMI)", "int"),
    Instrument("gpuscope.gpu.process.memory.usage", "updown", "By",
               "GPU memory used by one process (--per-process: the top N by memory, the rest summed)", "int"),
    Instrument("gpuscope.gpu.process.utilization", "gauge", "1",
               "SM / gfx utilisation of one process where the vendor gives it (--per-process)"),
    Instrument("gpuscope.gpu.xid.last", "gauge", "1", "The code of the last critical XID error since monitor started (0: none)", "int"),
    Instrument("gpuscope.gpu.pcie.replays", "counter", "{replay}",
               "PCIe replays (link-level retransmissions) since monitor started (NVML PCIe replay counter)", "int"),
    Instrument("gpuscope.gpu.memory.remapped_rows", "updown", "{row}",
               "Memory rows remapped over the GPU's life, by the kind of error that caused it (NVML remapped rows)", "int"),
    # states (0 / 1) like hw.status: up-down counters, so that no Prometheus path calls them a ratio
    Instrument("gpuscope.gpu.memory.row_remap.pending", "updown", "1",
               "1 while a row remapping waits for the next GPU reset, else 0", "int"),
    Instrument("gpuscope.gpu.memory.row_remap.failed", "updown", "1",
               "1 once a row remapping has failed (the GPU needs service), else 0", "int"),
    Instrument("system.cpu.utilization", "gauge", "1",
               "Fraction of the host's CPU time spent in each cpu.mode since the previous sample, over all logical CPUs (the modes sum to 1)"),
    Instrument("system.memory.usage", "updown", "By", "Host memory in use (MemTotal - MemAvailable)", "int"),
    Instrument("system.memory.limit", "updown", "By", "Host memory size", "int"),
)
INSTRUMENTS_BY_NAME: dict[str, Instrument] = {i.name: i for i in INSTRUMENTS}

#: Stored metrics exported as they are (gauges, up-down counters), with the attributes they
#: add; the instrument is the metric's ``otel_name`` (gpuscope/metrics.py) unless
#: :data:`RENAMED` says otherwise.
DIRECT: dict[str, Attrs] = {
    "gpu_util": (("hw.gpu.task", "general"),),
    "enc_util": (("hw.gpu.task", "encoder"),),
    "dec_util": (("hw.gpu.task", "decoder"),),
    "remapped_rows_corrected": (("error.type", "corrected"),),
    "remapped_rows_uncorrected": (("error.type", "uncorrected"),),
    "row_remap_pending": (), "row_remap_failed": (),
    "mem_used_bytes": (), "mem_total_bytes": (), "mem_reserved_bytes": (), "mem_util": (),
    "power_w": (), "power_instant_w": (), "power_limit_w": (),
    "temp_c": (("hw.sensor_location", "gpu"),),
    "mem_temp_c": (("hw.sensor_location", "memory"),),
    "sm_clock_mhz": (), "mem_clock_mhz": (), "sm_active": (), "sm_occupancy": (), "tensor_active": (),
    "dram_bw_util": (), "throttle_reasons": (), "fan_speed": (),
    # the busy total only where a row has no mode (a recording made before schema 10): a point
    # without cpu.mode beside the modes' would be counted twice by any sum over the metric
    "host_cpu_util": (), "host_mem_total_bytes": (),
    # each cpu.mode's share of the host's CPU time (collectors/host.py CPU_MODE_COLUMNS)
    "host_cpu_user_util": (("cpu.mode", "user"),), "host_cpu_system_util": (("cpu.mode", "system"),),
    "host_cpu_nice_util": (("cpu.mode", "nice"),), "host_cpu_idle_util": (("cpu.mode", "idle"),),
    "host_cpu_iowait_util": (("cpu.mode", "iowait"),), "host_cpu_interrupt_util": (("cpu.mode", "interrupt"),),
    "host_cpu_steal_util": (("cpu.mode", "steal"),),
    # MemTotal - MemAvailable: exactly the conventions' `used` state
    "host_mem_used_bytes": (("system.memory.state", "used"),),
    "last_xid": (),
}
#: The stored columns of the host's CPU time by ``cpu.mode`` (``system.cpu.utilization``).
CPU_MODE_METRICS: tuple[str, ...] = tuple(m for m, extra in DIRECT.items() if dict(extra).get("cpu.mode"))

#: The vendor's own cumulative counters, exported as the increase since monitor started
#: (summed step by step across resets by :class:`~gpuscope.otel.sink.TelemetryState`): stored
#: metric -> the attributes it adds. ECC counts run since the driver loaded, XIDs since the
#: collector opened the GPU, energy since the driver loaded: one start (monitor's) for all.
COUNTERS: dict[str, Attrs] = {
    "energy_j": (),
    "ecc_corrected_errors": (("error.type", "corrected"),),
    "ecc_uncorrected_errors": (("error.type", "uncorrected"),),
    "xid_errors": (("error.type", "xid"),),
    "pcie_replays": (),
}
#: Where the instrument is not the stored metric's ``otel_name`` (none today: the fan's
#: ``hw.fan.speed_ratio`` is metrics.py's own name now).
RENAMED: dict[str, str] = {}
#: Stored metric -> (the instrument's unit, the factor from the stored unit). Clocks are stored
#: in MHz and exported in Hz: ``MHz`` is no unit the Prometheus translators know (the SDK's
#: reader and the Collector's would write ``..._MHz``), ``Hz`` becomes ``_hertz`` on both.
SCALED: dict[str, tuple[str, float]] = {"sm_clock_mhz": ("Hz", 1e6), "mem_clock_mhz": ("Hz", 1e6)}
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
#: NVIDIA clock-event reasons (``nvmlClocksEventReasons``) that make ``hw.status`` ``degraded``:
#: the GPU slows itself for a thermal or hardware reason (HW slowdown 0x8, SW thermal 0x20,
#: HW thermal 0x40, HW power brake 0x80). Not SW power cap (0x4): a loaded H100 sits at its cap
#: on every tick (fixtures/recordings/h100_sxm_bf16_matmul), which is normal operation; not
#: idle, application clocks, sync boost or display clocks. AMD's bits are not mapped: never
#: degraded there.
NVIDIA_DEGRADED_REASONS = 0x8 | 0x20 | 0x40 | 0x80
#: The ``hw.state`` values a GPU reports, one point each (1 for the current state, else 0).
GPU_STATES = ("ok", "degraded", "failed")


def instrument_of(metric: str) -> str:
    """The instrument a stored metric is exported as."""
    return _NAMES[metric]


_VENDORS = {"nvidia": "NVIDIA", "amd": "AMD"}


def device_attributes(device: Any, driver_version: str | None = None) -> Attrs:
    """The attributes every point of ``device`` carries: ``hw.id`` (the UUID; AMD's too, else
    the PCI bus id, else the device key), ``hw.type`` (``gpu``; the host's rows carry none of
    these), ``hw.name`` (the key, ``gpu0``), ``hw.vendor``, ``hw.model``, and
    ``hw.driver_version``, ``hw.serial_number``, ``hw.firmware_version`` (the VBIOS) where the
    collector put them in the device's properties (``driver_version``, ``serial_number``,
    ``vbios_version``). Nothing from a command line, a path or a user."""
    hw_id = device.uuid or device.pci_bus_id or device.key
    attrs = {"hw.id": str(hw_id), "hw.type": "gpu", "hw.name": str(device.key)}
    vendor = _VENDORS.get(str(device.vendor or "").lower(), device.vendor)
    if vendor:
        attrs["hw.vendor"] = str(vendor)
    if device.name:
        attrs["hw.model"] = str(device.name)
    props = device.properties or {}
    driver = props.get("driver_version") or driver_version
    if driver:
        attrs["hw.driver_version"] = str(driver)
    for prop, attr in (("serial_number", "hw.serial_number"), ("vbios_version", "hw.firmware_version")):
        if props.get(prop):
            attrs[attr] = str(props[prop])
    return tuple(sorted(attrs.items()))


def component_attributes(device_attrs: Attrs, component: str, extra: Attrs = ()) -> Attrs:
    """The attributes of a component of a GPU (a temperature sensor, a fan): its own ``hw.id``
    (the GPU's, ``/`` and ``component``), ``hw.parent`` the GPU's ``hw.id``, ``hw.name`` the
    GPU's key, no ``hw.type`` (the conventions put none on ``hw.temperature`` or
    ``hw.fan.speed_ratio``) and none of the GPU's own descriptions (vendor, model, ...)."""
    gpu = dict(device_attrs)
    return tuple(sorted((("hw.id", f"{gpu['hw.id']}/{component}"), ("hw.name", gpu["hw.name"]),
                         ("hw.parent", gpu["hw.id"]), *extra)))


#: Stored metrics whose points belong to a component of the GPU, not the GPU: metric -> the
#: component's name in its ``hw.id``.
COMPONENTS: dict[str, str] = {"temp_c": "temperature/gpu", "mem_temp_c": "temperature/memory", "fan_speed": "fan"}


def gpu_state(device_attrs: Attrs, values: dict[str, Any], lost: bool) -> str:
    """``failed`` (lost), ``degraded`` (an NVIDIA GPU slowing itself for a thermal or hardware
    reason, :data:`NVIDIA_DEGRADED_REASONS`) or ``ok``."""
    if lost:
        return "failed"
    reasons = values.get("throttle_reasons")
    if dict(device_attrs).get("hw.vendor") == "NVIDIA" and reasons is not None \
            and int(reasons) & NVIDIA_DEGRADED_REASONS:
        return "degraded"
    return "ok"


def points(device_attrs: Attrs, values: dict[str, Any], lost: bool, host: bool) -> Iterator[tuple[str, float, Attrs]]:
    """The gauge and up-down points of one sample: (instrument, value, attributes). Counters
    (integrated from rates, or the vendor's counted since monitor started) are the sink's: they
    need the samples before. A lost GPU has its ``hw.status`` points and nothing else."""
    base = () if host else device_attrs
    if not host:
        state = gpu_state(device_attrs, values, lost)
        for s in GPU_STATES:
            yield "hw.status", float(s == state), _merge(base, (("hw.state", s),))
    if lost:
        return
    by_mode = host and any(values.get(m) is not None for m in CPU_MODE_METRICS)
    for metric, extra in DIRECT.items():
        v = values.get(metric)
        if v is None or (by_mode and metric == "host_cpu_util"):
            continue
        name = _NAMES[metric]
        if host != name.startswith("system."):
            continue
        if metric in COMPONENTS:
            yield name, float(v), component_attributes(base, COMPONENTS[metric], extra)
        else:
            yield name, float(v) * SCALED.get(metric, ("", 1.0))[1], _merge(base, extra)
    used, total = values.get("mem_used_bytes"), values.get("mem_total_bytes")
    if not host and used is not None and total:
        yield "hw.gpu.memory.utilization", float(used) / float(total), base


def _names() -> dict[str, str]:
    from ..metrics import METRICS_BY_NAME

    return {m: RENAMED.get(m) or METRICS_BY_NAME[m].otel_name for m in [*DIRECT, *COUNTERS, *RATES]}


_NAMES = _names()


def _merge(a: Attrs, b: Attrs) -> Attrs:
    return tuple(sorted(a + b)) if b else a


def process_points(device_attrs: Attrs, processes: Any, top: int, name_of: Any) -> Iterator[tuple[str, float, Attrs]]:
    """Per-process points of one GPU: the ``top`` processes by GPU memory, each labelled by
    ``process.pid`` and ``process.executable.name`` only (``name_of(pid)``), and the rest summed
    into one point named ``(N other processes)`` without a pid: the series stay bounded."""
    procs = sorted(processes, key=lambda p: (-(p.gpu_mem_bytes or 0), p.pid))
    for p in procs[:top]:
        attrs = _merge(device_attrs, (("process.executable.name", p.name or name_of(p.pid)), ("process.pid", int(p.pid))))
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
