"""The collector interface, the row types it returns and its typed errors.

A collector is one telemetry source (NVML, AMD SMI, the host, a recording). Its life is
``open()`` (discover the devices and probe, once, which metrics each supports), any number of
``sample()`` calls (one timestamped :class:`Sample` per device), then ``close()``. Collectors
return rows; they know nothing of the store, the TUI or OpenTelemetry (those are sinks, see
:mod:`gpuscope.sampling`).

Rules every collector keeps (design.md §4.3, §5):

- metric names and units come from :mod:`gpuscope.metrics`; ratios are 0..1, never percent;
- a metric the device does not support, or that could not be read this tick, is ``None``
  (never 0, never ``"N/A"``);
- timestamps are integer nanoseconds since the Unix epoch (the vendor's own timestamp where it
  gives one on that clock, else the host clock when the value was read);
- ``sample()`` never raises for an unsupported metric or a lost device: each problem is
  reported once as a :class:`Degradation` (see :meth:`Collector.take_degradations`);
- vendor modules are imported inside ``open()``, so importing a collector module is safe on
  any machine; a vendor that is not there raises :class:`CollectorUnavailable` from ``open()``
  with a reason a user can act on.
"""
from __future__ import annotations

import abc
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from gpuscope.device import DeviceIdentity
from gpuscope.errors import GpuscopeError
from gpuscope.metrics import GPU_METRIC_NAMES, HOST_METRIC_NAMES, METRIC_NAMES

__all__ = [
    "Collector",
    "CollectorError",
    "CollectorUnavailable",
    "Degradation",
    "DeviceInfo",
    "ProcessSample",
    "Sample",
    "VendorStatus",
    "WatchedProcesses",
    "GPU_METRIC_NAMES",
    "HOST_METRIC_NAMES",
    "METRIC_NAMES",
    "now_ns",
    "percent_to_ratio",
    "plausible_celsius",
]


class CollectorError(GpuscopeError):
    """A collector could not do what was asked (base class of the collector errors)."""


class CollectorUnavailable(CollectorError):
    """The source is not usable on this machine: no library, no driver, no device, no
    permission. ``vendor`` names the source (``nvidia``, ``amd``, ``host``, ``replay``) and
    ``reason`` says why in words a user can act on."""

    def __init__(self, vendor: str, reason: str) -> None:
        super().__init__(f"{vendor}: {reason}")
        self.vendor = vendor
        self.reason = reason


#: The order of a device's fields in recordings and ``devices --json`` (the identity's fields
#: sit among the others, where they always were).
_DEVICE_JSON_FIELDS = ("key", "vendor", "kind", "name", "index", "uuid", "pci_bus_id", "pci_device_id",
                       "memory_total_bytes", "compute_capability", "num_sms", "warp_size", "parent", "spec_key",
                       "spec_exact", "source", "supported", "unsupported", "properties", "lost")


@dataclass(kw_only=True)
class DeviceInfo(DeviceIdentity):
    """One device a collector samples: a GPU, a MIG instance, an AMD partition, or the host.

    Its identity (vendor, index, name, uuid, PCI bus id, spec key) is a
    :class:`gpuscope.device.DeviceIdentity`; the rest is what a sampler needs. ``key`` is unique
    within a sampler (``gpu0``, ``gpu0/mig1``, ``host``). ``supported`` lists the metric names
    this device gives; ``unsupported`` maps every other metric of its scope to the reason it is
    missing. ``properties`` holds vendor details (driver version, architecture, MIG / partition
    mode, ...), JSON-serialisable.
    """

    key: str
    vendor: str
    kind: str = "gpu"  # gpu | mig | partition | host
    pci_device_id: str | None = None  # "0x2330"
    memory_total_bytes: int | None = None
    compute_capability: str | None = None
    num_sms: int | None = None
    warp_size: int | None = None
    parent: str | None = None
    source: str = "telemetry"
    supported: tuple[str, ...] = ()
    unsupported: dict[str, str] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    lost: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the form recordings and ``devices --json`` use)."""
        d = asdict(self)
        d["supported"] = list(self.supported)
        return {k: d[k] for k in _DEVICE_JSON_FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceInfo:
        """The inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        kw["supported"] = tuple(kw.get("supported") or ())
        kw["unsupported"] = dict(kw.get("unsupported") or {})
        kw["properties"] = dict(kw.get("properties") or {})
        return cls(**kw)


@dataclass(frozen=True)
class ProcessSample:
    """One watched process on one device at one tick (NVML / amdsmi process queries)."""

    pid: int
    gpu_mem_bytes: int | None = None
    gpu_util: float | None = None
    name: str | None = None


class EveryPid(frozenset):
    """The pid set that holds every process, whether this process can see it or not: given to
    :meth:`Collector.set_pids`, the GPU collectors report every process the vendor lists
    (``gpuscope monitor --per-process``; in a container NVML lists the host's pids, which the
    container cannot see)."""

    def __contains__(self, pid: object) -> bool:
        return True

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EveryPid)

    def __ne__(self, other: object) -> bool:  # frozenset's own would call it equal to frozenset()
        return not isinstance(other, EveryPid)

    def __hash__(self) -> int:
        return hash("EveryPid")


EVERY_PID = EveryPid()


class WatchedProcesses(Protocol):
    """Which processes to watch: what the sampler asks each tick and hands to every collector's
    :meth:`Collector.set_pids` when it changed. Implemented by
    :class:`~gpuscope.collectors.host.ProcessTree` (a wrapped command and its descendants),
    :class:`EveryProcess` (every pid, seen or not) and the live screen's ``AllProcesses`` (every
    pid this process can list). ``pids()`` runs in the sampler's thread, once a tick: an
    implementation that lists processes paces itself."""

    def pids(self) -> frozenset[int]:
        """The pids to watch now (:data:`EVERY_PID` for all of them)."""
        ...


class EveryProcess(WatchedProcesses):
    """The processes to watch when every process is (:data:`EVERY_PID`): ``monitor --per-process``."""

    def pids(self) -> frozenset[int]:
        """:data:`EVERY_PID`, always."""
        return EVERY_PID


def watched(pids: set[int] | frozenset[int]) -> frozenset[int]:
    """``pids`` as the frozenset a collector keeps (:data:`EVERY_PID` stays what it is)."""
    return pids if isinstance(pids, frozenset) else frozenset(pids)


@dataclass
class Sample:
    """One row: one device at one tick. ``values`` maps metric names to values in the units
    their names carry; a missing name means None. ``lost`` marks the tick at which the device
    was found gone (its values are then all None and no further rows come for it)."""

    device: str
    ts_ns: int
    values: dict[str, float | int | None]
    lost: bool = False
    processes: tuple[ProcessSample, ...] = ()

    def get(self, metric: str) -> float | int | None:
        """The value of ``metric`` (None when unsupported or not read this tick)."""
        return self.values.get(metric)


@dataclass(frozen=True)
class Degradation:
    """Something that did not work, reported once: an unsupported metric found at probe time
    (``phase='probe'``), a read that started failing while sampling (``phase='sample'``), a
    device that was lost (``metric=None``, ``phase='lost'``), or a device whose own timestamps
    failed the collector's check, so that its rows use the host clock (``phase='clock'``; the
    sampler lists these in ``SamplerStats.clock_fallbacks``)."""

    source: str
    device: str | None
    metric: str | None
    reason: str
    phase: str = "sample"
    ts_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = "/".join(p for p in (self.device, self.metric) if p)
        return f"{self.source}: {where}: {self.reason}" if where else f"{self.source}: {self.reason}"


@dataclass(frozen=True)
class VendorStatus:
    """Whether a source is usable here and why not (for ``gpuscope devices``)."""

    vendor: str
    available: bool
    backend: str | None = None  # "nvml", "amdsmi", "amdsmi (ROCm /opt/rocm-6.3.0)", "amd-smi cli", "psutil"
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Collector(abc.ABC):
    """One telemetry source. Subclasses implement :meth:`_open`, :meth:`sample` and
    :meth:`_close`; they report problems through :meth:`degrade`.

    Not thread-safe: one thread (the sampler's) drives a collector.
    """

    #: the source's name, also the ``vendor`` of its devices (``nvidia``, ``amd``, ``host``, ``replay``)
    source: str = "collector"
    #: the shortest sensible interval between two samples, in seconds (the sampler warns below it)
    min_interval_s: float = 0.0

    def __init__(self) -> None:
        self.devices: list[DeviceInfo] = []
        self.status: VendorStatus | None = None
        self._pending: list[Degradation] = []
        self._reported: set[tuple[str | None, str | None, str]] = set()
        self._opened = False

    # -- lifecycle -------------------------------------------------------------------------
    def open(self) -> list[DeviceInfo]:
        """Discover the devices and probe which metrics each supports (once).

        Raises :class:`CollectorUnavailable` when the source cannot be used here."""
        if not self._opened:
            try:
                self.devices = self._open()
            except BaseException:
                try:  # e.g. the vendor library was initialised before the failure
                    self._close()
                except Exception:
                    pass
                raise
            self._opened = True
            for d in self.devices:
                for metric, reason in d.unsupported.items():
                    self.degrade(d.key, metric, reason, phase="probe")
        return self.devices

    @abc.abstractmethod
    def _open(self) -> list[DeviceInfo]:
        ...

    @abc.abstractmethod
    def sample(self) -> list[Sample]:
        """One row per (not lost) device, read now. Never raises for unsupported metrics or a
        lost device."""

    def close(self) -> None:
        """Release the vendor library. Safe to call twice, and after a failed open."""
        if self._opened:
            self._opened = False
            self._close()

    def _close(self) -> None:  # noqa: B027 - optional: a source with nothing to release keeps it
        pass

    def __enter__(self) -> Collector:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- watched processes ------------------------------------------------------------------
    def set_pids(self, pids: set[int] | frozenset[int]) -> None:  # noqa: B027 - optional, see below
        """The processes whose GPU memory and utilisation to report (the wrapped command's
        process tree). Collectors without per-process data ignore it."""

    # -- degradations --------------------------------------------------------------------
    def degrade(self, device: str | None, metric: str | None, reason: str, phase: str = "sample") -> bool:
        """Report a problem once per (device, metric, reason); True when it was new. Called by
        the collector itself, and by the sampler for what it finds about a collector (a
        ``sample()`` that raised, a cadence faster than the source refreshes)."""
        k = (device, metric, reason)
        if k in self._reported:
            return False
        self._reported.add(k)
        self._pending.append(Degradation(self.source, device, metric, reason, phase, now_ns()))
        return True

    def take_degradations(self) -> list[Degradation]:
        """The problems reported since the last call (each problem appears once, ever)."""
        out, self._pending = self._pending, []
        return out

    def relay_degradations(self, inner: Collector, *, remember: bool = False) -> None:
        """Take the problems ``inner`` reported since it was last asked as this collector's own
        (a facade such as :class:`~gpuscope.collectors.amd.AmdCollector` over the backend it
        chose). ``remember``: also count what ``inner`` has ever said as said here, so that
        this collector does not say it again."""
        self._pending.extend(inner.take_degradations())
        if remember:
            self._reported |= inner._reported


# ------------------------------------------------------------------------------------------
# unit helpers shared by the vendor collectors
# ------------------------------------------------------------------------------------------


#: "no value" sentinels vendors put in unsigned fields (amdsmi maps most of them to "N/A" itself)
_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


def now_ns() -> int:
    """Wall-clock nanoseconds since the Unix epoch."""
    return time.time_ns()


def percent_to_ratio(v: Any) -> float | None:
    """A vendor percentage (0..100) as a 0..1 ratio; None for non-numbers and out-of-range."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if v < 0 or v > 100.5:
        return None
    return min(float(v) / 100.0, 1.0)


def plausible_celsius(v: Any) -> float | None:
    """A temperature in °C from a value that may be in °C, centi-°C or milli-°C.

    AMD has reported temperatures in all three (gpu_metrics before v1.4 in centi-degrees,
    amdsmi's docs in millidegrees, its C code in degrees). A GPU runs between about -40 and
    150 °C, so the scale follows from the magnitude: up to 150 is °C, up to 15 000 centi-°C,
    up to 150 000 milli-°C; anything else (and a sentinel such as 0xFFFF) is None.
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if v in _SENTINELS:
        return None
    v = float(v)
    if -40.0 <= v <= 150.0:
        return v
    if 150.0 < v <= 15_000.0:
        return v / 100.0
    if 15_000.0 < v <= 150_000.0:
        return v / 1000.0
    return None
