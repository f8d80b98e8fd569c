"""The sampler's rows as OpenTelemetry metrics (the SDK), for ``gpuscope monitor`` and ``run --otlp``.

:class:`TelemetryState` is a :class:`~gpuscope.sinks.base.Sink`: it keeps the newest value of
every point (instrument + attributes, :mod:`gpuscope.otel.names`) and integrates byte rates into
counters. :func:`meter_provider` registers one observable instrument per name whose callback
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
from .names import INSTRUMENTS, RATES, Attrs, device_attributes, instrument_of, points, process_points

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
        self._counters: dict[tuple[str, Attrs], float] = {}
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
        # (gpuscope.metrics.HOLD_S); the byte counters below integrate only this tick's rates
        now = self._held.setdefault(device, HeldReadings()).update(ts_ns, values, lost)
        self._values[device] = {(name, a): v for name, v, a in points(attrs, now, lost, host)}
        self._latest[device] = (now, lost)
        self.rows += 1
        prev = self._last_ts.get(device)
        self._last_ts[device] = ts_ns
        if lost or host:
            return
        for metric, key in self._rate_keys[device].items():
            rate = values.get(metric)
            if metric == "pcie_bytes_per_s" and (values.get("pcie_tx_bytes_per_s") is not None
                                                 or values.get("pcie_rx_bytes_per_s") is not None):
                continue  # NVIDIA's total is tx + rx, already in hw.gpu.io
            if rate is None and key not in self._counters:
                continue  # a counter this device never reports
            total = self._counters.setdefault(key, 0.0)  # the series starts at 0 with its first reading
            if rate is None or prev is None:
                continue
            dt = (ts_ns - prev) / 1e9
            if 0 < dt <= MAX_RATE_GAP_S:
                self._counters[key] = total + float(rate) * dt

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
        """The current points of one instrument: (value, attributes)."""
        with self._lock:
            out = [(v, a) for pts in self._values.values() for (n, a), v in pts.items() if n == name]
            out += [(v, a) for pts in self._procs.values() for (n, a), v in pts.items() if n == name]
            out += [(v, a) for (n, a), v in self._counters.items() if n == name]
        return out

    def latest(self) -> dict[str, tuple[dict[str, Any], bool]]:
        """Each device's newest values (a metric not read at the newest tick: its reading of the
        last :data:`~gpuscope.metrics.HOLD_S`), and whether it is lost."""
        with self._lock:
            return dict(self._latest)

    def snapshot(self) -> dict[tuple[str, Attrs], float]:
        """Every current point (tests, the dcgm-named endpoint)."""
        with self._lock:
            out = {k: v for pts in [*self._values.values(), *self._procs.values()] for k, v in pts.items()}
            out.update(self._counters)
        return out


def meter_provider(state: TelemetryState, readers: Sequence[Any], resource_attrs: dict[str, str],
                   extra: Iterable[tuple[str, str, str, str, Any]] = ()) -> Any:
    """A MeterProvider with ``readers`` and one observable instrument per
    :data:`~gpuscope.otel.names.INSTRUMENTS` entry reading ``state``. ``extra``: more
    observable instruments as (name, kind, unit, description, callback returning (value,
    attrs) pairs), the monitor's own metrics."""
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create(resource_attrs)
    provider = MeterProvider(metric_readers=list(readers), resource=resource)
    meter = provider.get_meter("gpuscope")

    def make(fn: Any) -> Any:
        def callback(options: CallbackOptions) -> list[Any]:
            return [Observation(v, dict(a)) for v, a in fn()]
        return callback

    specs = [(i.name, i.kind, i.unit, i.description, (lambda n=i.name: state.observe(n))) for i in INSTRUMENTS]
    for name, kind, unit, description, fn in [*specs, *extra]:
        create = {"gauge": meter.create_observable_gauge, "counter": meter.create_observable_counter,
                  "updown": meter.create_observable_up_down_counter}[kind]
        create(name, callbacks=[make(fn)], unit=unit, description=description)
    return provider
