"""Where ``gpuscope monitor``'s metrics go: OTLP (HTTP or gRPC, the SDK's exporters) behind a
bounded queue, and the dcgm-exporter names for the Prometheus ``/metrics`` endpoint (the
endpoint itself is :mod:`gpuscope.otel.endpoint`; :class:`MetricsEndpoint` is re-exported here).

An OTLP endpoint that is down must not stop the monitor or flood its log: a failed export is
queued (at most :data:`QUEUE_EXPORTS` exports; past that the oldest is dropped and counted in
``gpuscope.monitor.export.dropped``), retried before the next one, and the failure is logged
at most once per :data:`LOG_EVERY_S`. The SDK's exporters log each retry and each failure
themselves ("Transient error ... retrying", "Failed to export metrics batch"): gpuscope owns
those loggers (:func:`own_sdk_logging`), keeps the first such message for its own line and
prints none of them.
"""
from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections import deque
from typing import Any

from ..textsafe import visible
from .endpoint import MetricsEndpoint

__all__ = ["DcgmNames", "MetricsEndpoint", "QueueingExporter", "otlp_exporter"]

#: Failed exports kept for a retry (each is one export interval of every point).
QUEUE_EXPORTS = 60
#: At most one log line about a failing endpoint per this many seconds.
LOG_EVERY_S = 60.0


#: The SDK's loggers gpuscope speaks for: the OTLP exporters' (HTTP, gRPC, and their common
#: retry loop), for metrics and spans alike.
SDK_LOGGERS = ("opentelemetry.exporter.otlp",)


class _SdkMessages(logging.Handler):
    """Keeps the first message the SDK's exporters logged since it was last asked (it names the
    cause; the last one of an attempt only says the retries ran out) and prints nothing."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.first: str | None = None
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.first is None:
            try:
                self.first = record.getMessage()
            except Exception:  # a malformed record: keep the format string
                self.first = str(record.msg)

    def take(self) -> str | None:
        """The first message since the last take, then forget it."""
        first, self.first = self.first, None
        return first


_SDK_MESSAGES = _SdkMessages()


def own_sdk_logging() -> _SdkMessages:
    """Route the SDK exporters' log records (:data:`SDK_LOGGERS`) to gpuscope instead of stderr:
    they do not propagate to the root logger (whose last-resort handler prints every warning),
    and the first of each failed export is kept for :class:`QueueingExporter`'s one line a minute.
    Idempotent."""
    for name in SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _SDK_MESSAGES not in logger.handlers:
            logger.addHandler(_SDK_MESSAGES)
        logger.propagate = False
    return _SDK_MESSAGES


def otlp_exporter(endpoint: str | None, protocol: str, timeout_s: float) -> Any:
    """The SDK's OTLP metric exporter for ``protocol`` (``grpc`` or ``http/protobuf``);
    ``endpoint`` None leaves it to the ``OTEL_EXPORTER_OTLP_*`` variables and their defaults.
    Cumulative temporality for every instrument (what Prometheus-style backends expect)."""
    from opentelemetry.sdk.metrics import Counter, ObservableCounter, ObservableGauge, ObservableUpDownCounter, UpDownCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    from .otlp import signal_url

    temporality = {k: AggregationTemporality.CUMULATIVE
                   for k in (Counter, UpDownCounter, ObservableCounter, ObservableUpDownCounter, ObservableGauge)}
    kw: dict[str, Any] = {"preferred_temporality": temporality, "timeout": timeout_s}
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

        if endpoint:
            kw["endpoint"] = endpoint
            kw["insecure"] = endpoint.startswith("http://")
        return Grpc(**kw)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    if endpoint:
        # --otlp URL is a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT (docs/otel.md); without it the
        # SDK applies the same rule to that variable and takes OTEL_EXPORTER_OTLP_METRICS_ENDPOINT as is
        kw["endpoint"] = signal_url(endpoint, "metrics")
    return Http(**kw)


class QueueingExporter:
    """Wraps a MetricExporter: failed exports wait in a bounded queue and go out, oldest
    first, before the next one; drops and failures are counted."""

    def __init__(self, inner: Any, what: str, max_queue: int = QUEUE_EXPORTS, log: Any = None) -> None:
        from opentelemetry.sdk.metrics.export import MetricExporter

        # subclassing at run time keeps `import gpuscope.otel.export` free of the SDK
        class _Exporter(MetricExporter):
            def __init__(inner_self) -> None:  # noqa: N805
                super().__init__(preferred_temporality=inner._preferred_temporality,
                                 preferred_aggregation=inner._preferred_aggregation)

            def export(inner_self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:  # noqa: N805
                return self._export(metrics_data)

            def force_flush(inner_self, timeout_millis: float = 10_000) -> bool:  # noqa: N805
                return True

            def shutdown(inner_self, timeout_millis: float = 30_000, **kw: Any) -> None:  # noqa: N805
                inner.shutdown()

        self.inner = inner
        self.what = what
        self.exporter = _Exporter()
        self.queue: deque[Any] = deque()
        self.max_queue = max_queue
        self.dropped = 0
        self.failures = 0
        self.sent = 0
        self._last_log = -1e18
        self._lock = threading.Lock()
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._sdk = own_sdk_logging()

    def _export(self, metrics_data: Any) -> Any:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        with self._lock:
            self.queue.append(metrics_data)
            while len(self.queue) > self.max_queue:
                self.queue.popleft()
                self.dropped += 1
            while self.queue:
                self._sdk.take()  # a message from before this attempt is not its reason
                try:
                    result = self.inner.export(self.queue[0])
                except Exception as exc:  # an exporter must not take the monitor down
                    result, why = MetricExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
                else:
                    why = "the endpoint refused or did not answer"
                    said = self._sdk.take()  # the SDK's own reason: its log line, not printed
                    if said:
                        why += f"; the exporter said: {_without_secrets(visible(said))[:300]}"
                if result != MetricExportResult.SUCCESS:
                    self.failures += 1
                    now = time.monotonic()
                    if now - self._last_log >= LOG_EVERY_S:
                        self._last_log = now
                        self._log(f"gpuscope monitor: OTLP export to {self.what} failed ({why}); "
                                  f"{len(self.queue)} export(s) queued, {self.dropped} dropped so far; "
                                  f"next message about this in {LOG_EVERY_S:.0f} s at the earliest")
                    return MetricExportResult.FAILURE
                self.queue.popleft()
                self.sent += 1
            return MetricExportResult.SUCCESS


def _without_secrets(text: str) -> str:
    """An exporter's message as gpuscope may print it: URL credentials and query strings (a
    token can ride in either) left out, as :func:`gpuscope.otel.otlp.shown_endpoint` does."""
    text = re.sub(r"//[^/@\s'\"]+@", "//", text)
    return re.sub(r"\?[^\s'\")]*", "?...", text)


class DcgmNames:
    """The state's newest GPU values under dcgm-exporter's names and labels
    (:mod:`gpuscope.otel.dcgm`) in Prometheus' text format 0.0.4, written here rather than by
    prometheus_client, which would add ``_total`` to the energy counter's name where
    dcgm-exporter has none. A lost GPU has no samples."""

    def __init__(self, state: Any, host: str) -> None:
        self.state = state
        self.host = host

    def render(self) -> bytes:
        from .dcgm import labels, samples

        families: dict[str, tuple[str, str, list[str]]] = {}
        for key, (values, lost) in sorted(self.state.latest().items()):
            device = self.state.devices.get(key)
            if device is None or device.kind == "host" or lost:
                continue
            lab = labels(device, self.host, self.state.driver_version)
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in lab.items())
            for name, kind, help_text, value in samples(lab, values):
                families.setdefault(name, (kind, help_text, []))[2].append(f"{name}{{{text}}} {value!r}")
        out = []
        for name, (kind, help_text, lines) in families.items():
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]
        return ("\n".join(out) + "\n").encode() if out else b""


def _escape(value: str) -> str:
    """A label value in the text format: control characters (a recording's device names are
    other people's text) as visible escapes, then the format's own backslash, newline (already
    an escape by then) and quote."""
    return visible(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
