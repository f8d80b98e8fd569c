"""The one OpenTelemetry metrics setup of gpuscope: the resource every export names, and the
MeterProvider over a :class:`~gpuscope.otel.sink.TelemetryState` with its readers (OTLP behind
the bounded queue of :mod:`gpuscope.otel.export`, the Prometheus reader of a ``/metrics``
endpoint). ``gpuscope monitor`` (:mod:`gpuscope.monitor.loop`) and ``gpuscope run --otlp``
(:mod:`gpuscope.run.wrapper`) both build theirs here, so the resource, the temporality and the
export timeout are the same for both. The SDK is imported inside the functions.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..machine import hostname

if TYPE_CHECKING:
    from .export import QueueingExporter
    from .otlp import OtlpTarget
    from .sink import TelemetryState

#: Seconds the SDK may take at shutdown for the readers' last collection and export.
SHUTDOWN_TIMEOUT_S = 10.0
#: An OTLP export gives up after this long (or the export interval, when shorter).
EXPORT_TIMEOUT_S = 5.0


def resource_attributes(service: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The resource of ``gpuscope <service>``'s exports: ``host.name`` always, ``extra``, and
    ``service.name`` ``gpuscope-<service>`` unless ``OTEL_SERVICE_NAME`` is set (the SDK's
    ``Resource.create`` then takes it, with ``OTEL_RESOURCE_ATTRIBUTES``)."""
    attrs = {"host.name": hostname(), **(extra or {})}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = f"gpuscope-{service}"
    return attrs


@dataclass
class MetricsExport:
    """A running metrics export: the state its instruments read, the SDK's MeterProvider, the
    resource it names, and the OTLP queue (None without OTLP) whose counts say how it went."""

    state: TelemetryState
    provider: Any
    resource: dict[str, str]
    queue: QueueingExporter | None = None

    def shutdown(self) -> None:
        """The readers' last collection and export (what the state holds goes out), then stop."""
        self.provider.shutdown(timeout_millis=SHUTDOWN_TIMEOUT_S * 1000)


def metrics_export(state: TelemetryState, resource: dict[str, str], *, otlp: OtlpTarget | None = None,
                   prometheus_registry: Any = None, count_exports: bool = False,
                   log: Callable[[str], None] | None = None) -> MetricsExport:
    """Start exporting ``state``: to ``prometheus_registry`` (a prometheus_client registry the
    ``/metrics`` endpoint serves) and/or over OTLP to ``otlp`` every ``otlp.export_interval_s``,
    through a :class:`~gpuscope.otel.export.QueueingExporter` that logs a failing endpoint to
    ``log`` (default stderr). ``count_exports``: also export the queue's dropped and failed
    exports as ``gpuscope.monitor.export.*`` counters."""
    from .export import QueueingExporter, otlp_exporter
    from .sink import meter_provider

    readers: list[Any] = []
    if prometheus_registry is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        readers.append(PrometheusMetricReader(registry=prometheus_registry))
    queue = None
    if otlp is not None:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        inner = otlp_exporter(otlp.endpoint, otlp.protocol, timeout_s=min(EXPORT_TIMEOUT_S, otlp.export_interval_s))
        queue = QueueingExporter(inner, otlp.shown(), log=log)
        readers.append(PeriodicExportingMetricReader(queue.exporter,
                                                     export_interval_millis=otlp.export_interval_s * 1000))
    own: list[tuple[str, str, str, str, Any]] = []
    if queue is not None and count_exports:
        q = queue
        own += [("gpuscope.monitor.export.dropped", "counter", "{export}",
                 "OTLP exports dropped because the endpoint was down and the queue was full",
                 lambda: [(float(q.dropped), ())]),
                ("gpuscope.monitor.export.failures", "counter", "{export}", "OTLP exports that failed",
                 lambda: [(float(q.failures), ())])]
    return MetricsExport(state, meter_provider(state, readers, resource, own), resource, queue)
