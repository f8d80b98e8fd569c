"""The contract between the sampler (:mod:`gpuscope.sampling`) and its sinks: what a sink is
told at start (:class:`SamplerInfo`), the batches of rows it gets (:class:`SampleBatch`) and the
sampler's own figures at close (:class:`SamplerStats`).

A sink is anything that takes rows: the store (:class:`~gpuscope.sinks.store.StoreSink`), a
recording file, the live buffer a viewer reads, later an OpenTelemetry exporter. Sinks import
the collectors' row types and nothing of the command line; collectors know nothing of sinks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..collectors.base import Degradation, DeviceInfo, Sample, VendorStatus

__all__ = ["SampleBatch", "SamplerInfo", "SamplerStats", "Sink"]


@dataclass
class SampleBatch:
    """Rows handed to sinks together: ``ticks`` is a list of (tick index, rows of that tick).
    Tick indexes count schedule slots from 0, so a skipped tick leaves a gap."""

    ticks: list[tuple[int, list[Sample]]]
    degradations: list[Degradation] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(r) for _, r in self.ticks)


@dataclass
class SamplerInfo:
    """What sinks learn at start: the cadence, the sources and when it began."""

    interval_s: float
    started_ns: int
    vendors: list[VendorStatus]
    devices: list[DeviceInfo]


@dataclass
class SamplerStats:
    """The sampler's cadence and its own cost over a session."""

    interval_s: float
    started_ns: int = 0
    ended_ns: int = 0
    ticks: int = 0
    missed_ticks: int = 0
    rows: int = 0
    devices: int = 0
    #: means and maxima are over the whole session; p50/p99 over its newest
    #: :data:`PERCENTILE_WINDOW` ticks (an hour at 10 Hz), so a long run holds bounded memory
    tick_cpu_ns_mean: float | None = None
    tick_cpu_ns_p99: float | None = None
    tick_cpu_ns_max: float | None = None
    tick_wall_ns_mean: float | None = None
    tick_wall_ns_p99: float | None = None
    tick_wall_ns_max: float | None = None
    #: the sampling thread's CPU time per tick, divided by the devices sampled
    cpu_ns_per_tick_per_device: float | None = None
    lateness_ns_p50: float | None = None
    lateness_ns_p99: float | None = None
    lateness_ns_max: float | None = None
    #: how late the last tick started against its slot (no cumulative drift: stays small)
    drift_ns: int = 0
    #: CPU time the sinks spent (the dispatch thread), whole session
    sink_cpu_ns: int = 0
    sink_errors: int = 0
    degradations: list[Degradation] = field(default_factory=list)
    #: devices whose own timestamps failed their collector's check (not monotonic, or far from
    #: the host clock) and whose rows use the host clock instead: ``"source/device"`` -> why
    clock_fallbacks: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["degradations"] = [g.to_dict() for g in self.degradations]
        return d


class Sink:
    """Where batches go. The sampler calls :meth:`start` (in the caller's thread, so errors
    reach the caller), then :meth:`write` from its dispatch thread, then :meth:`close` (caller's
    thread, after the last write). Sinks need not be thread-safe towards the sampler."""

    def start(self, info: SamplerInfo) -> None:
        """Called once before the first batch."""

    def write(self, batch: SampleBatch) -> None:
        """One batch of rows."""

    def close(self, stats: SamplerStats) -> None:
        """Called once after the last batch."""
