"""The sampler's rows as OpenTelemetry metrics (the SDK), for ``gpuscope monitor`` and ``run --otlp``.

:class:`TelemetryState` is a :class:`~gpuscope.sinks.base.Sink`: it keeps the newest value of
every point (instrument + attributes, :mod:`gpuscope.otel.names`), integrates byte rates into
counters and sums the vendor's own counters (energy, ECC, XID) step by step from monitor's start,
across their resets (a driver reload, a replay starting over), so every exported counter only
grows. :func:`meter_provider` registers one observable instrument per name whose callback
reads that state, so every reader (OTLP's periodic exporter, the Prometheus reader) sees the
same newest values; :func:`gpuscope.otel.setup.metrics_export` builds it with its readers.
OpenTelemetry is imported only inside functions.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ..metrics import HeldReadings
from ..sinks.base import SampleBatch, SamplerInfo, Sink
from .names import (COUNTERS, INSTRUMENTS, INSTRUMENTS_BY_NAME, RATES, SCHEMA_URL, Attrs, device_attributes,
                    instrument_of, points, process_points)

#: A gap between two samples of a device longer than this is not integrated into the byte
#: counters (the rate of one tick says nothing about minutes without samples).
MAX_RATE_GAP_S = 60.0


class TelemetryState(Sink):
    """The newest value of every point and the integrated byte counters; thread-safe (the
    sampler writes from its dispatch thread, exporters read from theirs)."""

    def __init__(self, per_process_top: int = 0, name_of: Any = None) -> None:
        #: >0: export the processes on each GPU, this many by memory (the rest summed)
        self.per_process_top = per_process_top
        self._name_of = name_of or (lambda pid: "?")
        self._procs: dict[str, dict[tuple[str, Attrs], float]] = {}
        self._lock = threading.Lock()
        self._attrs: dict[str, Attrs] = {}
        self._host: set[str] = set()
        self._values: dict[str, dict[tuple[str, Attrs], float]] = {}  # device -> point -> value
        self._counters: dict[str, dict[tuple[str, Attrs], float]] = {}  # device -> counter point -> total
        self._since: dict[tuple[str, str], _Since] = {}  # (device, stored counter) -> its reading so far
        self._max_power_w: dict[str, float] = {}
        self._lost: set[str] = set()
        self._last_ts: dict[str, int] = {}
        self._rate_keys: dict[str, dict[str, tuple[str, Attrs]]] = {}  # device -> rate metric -> counter point
        self._latest: dict[str, tuple[dict[str, Any], bool]] = {}  # device -> (values, lost)
        self._held: dict[str, HeldReadings] = {}  # device -> readings of metrics not read every tick
        self.devices: dict[str, Any] = {}
        self.driver_version: str | None = None
        self.rows = 0

    # -- the sink -----------------------------------------------------------------------------
    def start(self, info: SamplerInfo) -> None:
        driver = next((v.details.get("driver_version") for v in info.vendors
                       if getattr(v, "details", None) and v.details.get("driver_version")), None)
        with self._lock:
            self.driver_version = driver
            for d in info.devices:
                self.devices[d.key] = d
                if d.kind == "host":
                    self._host.add(d.key)
                    self._attrs[d.key] = ()
                else:
                    attrs = self._attrs[d.key] = device_attributes(d, driver)
                    self._rate_keys[d.key] = {
                        m: (instrument_of(m), tuple(sorted(attrs + ((("network.io.direction", dr),) if dr else ()))))
                        for m, dr in RATES.items()}

    def write(self, batch: SampleBatch) -> None:
        with self._lock:
            for _, rows in batch.ticks:
                for s in rows:
                    self._add(s.device, s.ts_ns, s.values, s.lost)
                    if self.per_process_top:
                        self._add_processes(s)

    def _add(self, device: str, ts_ns: int, values: dict[str, Any], lost: bool) -> None:
        attrs = self._attrs.get(device)
        if attrs is None:  # a device the sampler did not announce: nothing to name it by
            return
        host = device in self._host
        # a gauge keeps its last reading while a paced read (energy, GPM) skips ticks
        # (gpuscope.metrics.HOLD_S); the counters below step only on this tick's own readings
        now = self._held.setdefault(device, HeldReadings()).update(ts_ns, values, lost)
        self._values[device] = {(name, a): v for name, v, a in points(attrs, now, lost, host)}
        self._latest[device] = (now, lost)
        self.rows += 1
        prev = self._last_ts.get(device)
        self._last_ts[device] = ts_ns
        if lost:
            self._lost.add(device)  # its counters stay (a GPU that comes back goes on) but are not exported
        else:
            self._lost.discard(device)
        if lost or host:
            return
        counters = self._counters.setdefault(device, {})
        for metric, key in self._rate_keys[device].items():
            rate = values.get(metric)
            if metric == "pcie_bytes_per_s" and (values.get("pcie_tx_bytes_per_s") is not None
                                                 or values.get("pcie_rx_bytes_per_s") is not None):
                continue  # NVIDIA's total is tx + rx, already in hw.gpu.io
            if rate is None and key not in counters:
                continue  # a counter this device never reports
            total = counters.setdefault(key, 0.0)  # the series starts at 0 with its first reading
            if rate is None or prev is None:
                continue
            dt = (ts_ns - prev) / 1e9
            if 0 < dt <= MAX_RATE_GAP_S:
                counters[key] = total + float(rate) * dt
        for p in ("power_limit_w", "power_w", "power_instant_w"):
            if now.get(p) is not None and float(now[p]) > self._max_power_w.get(device, 0.0):
                self._max_power_w[device] = float(now[p])
        for metric, extra in COUNTERS.items():
            v = values.get(metric)  # this tick's reading only: a held one is no new step
            if v is None:
                continue
            since = self._since.get((device, metric))
            if since is None:
                since = self._since[(device, metric)] = _Since(ts_ns, float(v))
            elif metric == "energy_j":
                since.energy_step(ts_ns, float(v), now.get("power_w"), self._max_power_w.get(device))
            else:
                since.count_step(ts_ns, float(v))
            counters[(instrument_of(metric), _merge(attrs, extra))] = since.total

    def _add_processes(self, s: Any) -> None:
        attrs = self._attrs.get(s.device)
        if attrs is None or s.device in self._host:
            return
        if s.lost:
            self._procs.pop(s.device, None)
        elif s.processes or s.values.get("proc_gpu_mem_bytes") is not None:  # a process query was made
            self._procs[s.device] = {(n, a): v for n, v, a in
                                     process_points(attrs, s.processes, self.per_process_top, self._name_of)}

    # -- reading ------------------------------------------------------------------------------
    def observe(self, name: str) -> list[tuple[float, Attrs]]:
        """The current points of one instrument: (value, attributes). A lost GPU's counters are
        left out (it keeps only ``hw.status``)."""
        with self._lock:
            out = [(v, a) for pts in self._values.values() for (n, a), v in pts.items() if n == name]
            out += [(v, a) for pts in self._procs.values() for (n, a), v in pts.items() if n == name]
            out += [(v, a) for d, pts in self._counters.items() if d not in self._lost
                    for (n, a), v in pts.items() if n == name]
        return out

    def latest(self) -> dict[str, tuple[dict[str, Any], bool]]:
        """Each device's newest values (a metric not read at the newest tick: its reading of the
        last :data:`~gpuscope.metrics.HOLD_S`), and whether it is lost. ``energy_j`` is the
        energy since monitor started, summed across the counter's resets, as ``hw.energy``
        exports it, so that an energy counter under any set of names only grows (dcgm-exporter's
        ``TOTAL_ENERGY_CONSUMPTION`` too); the ECC counts stay the vendor's (since the driver
        loaded), as dcgm-exporter gives them."""
        with self._lock:
            out = {}
            for device, (values, lost) in self._latest.items():
                since = self._since.get((device, "energy_j"))
                out[device] = ({**values, "energy_j": since.total} if since is not None and not lost else values, lost)
            return out

    def snapshot(self) -> dict[tuple[str, Attrs], float]:
        """Every current point (tests, the dcgm-named endpoint)."""
        with self._lock:
            out = {k: v for pts in [*self._values.values(), *self._procs.values()] for k, v in pts.items()}
            for d, pts in self._counters.items():
                if d not in self._lost:
                    out.update(pts)
        return out


class _Since:
    """One vendor counter of one device read step by step since monitor started: ``total`` is
    what it counted since its first reading, only ever growing.

    Energy is read as :func:`gpuscope.analyzers.energy.counter_steps` reads a run's counter (the
    way ``gpuscope run`` sums energy): a plausible step counts as it is, a 32-bit wrap is
    counted across, a restart from 0 (a driver reload) counts the new value, and a step it
    cannot tell (a replay starting over, an implausible jump) counts the power reading over the
    step instead (nothing without one). An error count that goes back restarted from 0."""

    __slots__ = ("ts_ns", "value", "anchor_ns", "total")

    def __init__(self, ts_ns: int, value: float) -> None:
        self.ts_ns = ts_ns
        self.value = value
        self.anchor_ns = ts_ns  # the reading before the counter last moved (a coarse counter moves in lumps)
        self.total = 0.0

    def energy_step(self, ts_ns: int, value: float, power_w: Any, max_power_w: float | None) -> None:
        from ..analyzers.energy import DEFAULT_MAX_POWER_W, counter_steps

        if ts_ns <= self.ts_ns:
            return
        # three readings so that counter_steps bounds the step by the time since the counter
        # last moved (the first two are equal: no step of their own)
        steps = counter_steps([self.anchor_ns, self.ts_ns, ts_ns], [self.value, self.value, value],
                              max_power_w or DEFAULT_MAX_POWER_W)
        joules = steps.joules[-1]
        if joules is None:
            joules = float(power_w) * (ts_ns - self.ts_ns) / 1e9 if power_w is not None else 0.0
        self.total += max(joules, 0.0)
        if value != self.value:
            self.anchor_ns = self.ts_ns
        self.ts_ns, self.value = ts_ns, value

    def count_step(self, ts_ns: int, value: float) -> None:
        step = value - self.value
        self.total += step if step >= 0 else max(value, 0.0)
        self.ts_ns, self.value = ts_ns, value


def meter_provider(state: TelemetryState, readers: Sequence[Any], resource_attrs: dict[str, str],
                   extra: Iterable[tuple[str, str, str, str, Any]] = ()) -> Any:
    """A MeterProvider with ``readers`` and one observable instrument per
    :data:`~gpuscope.otel.names.INSTRUMENTS` entry reading ``state``. ``extra``: more
    observable instruments as (name, kind, unit, description, callback returning (value,
    attrs) pairs), the monitor's own metrics."""
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    from .. import __version__

    # the schema URL says which conventions' release the names follow (a backend can translate)
    resource = Resource.create(resource_attrs, schema_url=SCHEMA_URL)
    provider = MeterProvider(metric_readers=list(readers), resource=resource)
    meter = provider.get_meter("gpuscope", __version__, schema_url=SCHEMA_URL)

    def make(fn: Any, integer: bool) -> Any:
        def callback(options: CallbackOptions) -> list[Any]:
            # integers where the conventions generate integers (bytes, errors, status): an int
            # observation is an as_int point in OTLP
            return [Observation(int(round(v)) if integer else float(v), dict(a)) for v, a in fn()]
        return callback

    specs = [(i.name, i.kind, i.unit, i.description, (lambda n=i.name: state.observe(n))) for i in INSTRUMENTS]
    for name, kind, unit, description, fn in [*specs, *extra]:
        create = {"gauge": meter.create_observable_gauge, "counter": meter.create_observable_counter,
                  "updown": meter.create_observable_up_down_counter}[kind]
        inst = INSTRUMENTS_BY_NAME.get(name)
        integer = inst.value_type == "int" if inst is not None else kind != "gauge"
        create(name, callbacks=[make(fn, integer)], unit=unit, description=description)
    return provider


def _merge(a: Attrs, b: Attrs) -> Attrs:
    return tuple(sorted(a + b)) if b else a
