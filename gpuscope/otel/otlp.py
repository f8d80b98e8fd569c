"""Where OTLP goes, checked before anything starts: the endpoint URL, the protocol, the export
interval and the exporter packages, for every command that exports over OTLP (``gpuscope
monitor --otlp``, ``gpuscope run --otlp``).

Only the standard library: a command checks its inputs here without importing the SDK (which
:mod:`gpuscope.otel.setup` imports when the exporters are built). Errors name the input, not a
flag (``InputError("OTLP endpoint", ...)``): the CLI names its own flags
(:func:`gpuscope.cli.common.otlp_target`).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InputError

#: The OTLP protocols gpuscope exports with.
PROTOCOLS = ("grpc", "http/protobuf")
#: Seconds between two OTLP exports when ``OTEL_METRIC_EXPORT_INTERVAL`` is not set (the SDK's default).
DEFAULT_EXPORT_INTERVAL_S = 10.0
#: What :func:`resolve_protocol` calls a protocol given by the caller (the CLI maps it to its flag).
PROTOCOL_INPUT = "OTLP protocol"
#: What :func:`check_endpoint` calls the endpoint (the CLI maps it to its flag).
ENDPOINT_INPUT = "OTLP endpoint"


@dataclass(frozen=True)
class OtlpTarget:
    """Where and how often OTLP exports go: ``endpoint`` None leaves the URL to the
    ``OTEL_EXPORTER_OTLP_*`` variables and their defaults."""

    endpoint: str | None
    protocol: str
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S

    def shown(self) -> str:
        """The endpoint as a log line may print it: without credentials or query, or which
        variables decide it."""
        return shown_endpoint(self.endpoint) if self.endpoint \
            else f"the OTEL_EXPORTER_OTLP_* endpoint ({self.protocol})"


#: The signal paths the OTLP exporter specification appends to a base URL.
SIGNAL_PATHS = {"metrics": "v1/metrics", "traces": "v1/traces"}


def check_endpoint(url: str) -> str:
    """An OTLP endpoint as given, checked: an http(s) URL with a host. It is a *base* URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is (:func:`signal_url` appends each signal's path), so a
    path that already ends in a signal's path is refused: it would post to
    ``.../v1/metrics/v1/metrics``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise InputError(ENDPOINT_INPUT, f"malformed endpoint URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(ENDPOINT_INPUT, "expected an http:// or https:// URL with a host, e.g. http://localhost:4318")
    path = parts.path.rstrip("/")
    for signal in SIGNAL_PATHS.values():
        if path.endswith("/" + signal):
            raise InputError(ENDPOINT_INPUT, f"a base URL is expected (/{SIGNAL_PATHS['metrics']} and "
                             f"/{SIGNAL_PATHS['traces']} are appended, as to OTEL_EXPORTER_OTLP_ENDPOINT), not one "
                             f"ending in /{signal}: give {parts.scheme}://{parts.netloc}{path[: -len(signal) - 1]}, "
                             "or set OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (used as is) and give no URL")
    return url


def signal_url(base: str, signal: str) -> str:
    """The URL one signal goes to over OTLP/HTTP from a base URL, by the OTLP exporter
    specification's rule for ``OTEL_EXPORTER_OTLP_ENDPOINT``: the signal's path (``v1/metrics``,
    ``v1/traces``) appended to the base's path, with one ``/`` between
    (``http://h:4318`` -> ``http://h:4318/v1/metrics``; ``http://h:4318/my`` and
    ``http://h:4318/my/`` -> ``http://h:4318/my/v1/metrics``). Query and fragment are kept off
    the path."""
    parts = urlsplit(base)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return parts._replace(path=path + SIGNAL_PATHS[signal]).geturl()


def shown_endpoint(url: str) -> str:
    """The endpoint without credentials or query (what a start-up line may print)."""
    p = urlsplit(url)
    netloc = p.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if p.port:
        netloc += f":{p.port}"
    return f"{p.scheme}://{netloc}{p.path}"


def resolve_protocol(given: str | None, signal: str = "METRICS") -> str:
    """The OTLP protocol: ``given``, else ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http/protobuf; an unknown one is an InputError naming
    :data:`PROTOCOL_INPUT` (given) or the variable."""
    proto = given or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") \
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if proto not in PROTOCOLS:
        where = PROTOCOL_INPUT if given else "OTEL_EXPORTER_OTLP_PROTOCOL"
        raise InputError(where, f"unknown OTLP protocol {proto!r} (grpc or http/protobuf)")
    return proto


def export_interval_s() -> float:
    """The OTLP export interval: ``OTEL_METRIC_EXPORT_INTERVAL`` (ms) when set, else
    :data:`DEFAULT_EXPORT_INTERVAL_S`."""
    raw = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL")
    if raw is None or raw == "":
        return DEFAULT_EXPORT_INTERVAL_S
    try:
        ms = float(raw)
    except ValueError:
        raise InputError("OTEL_METRIC_EXPORT_INTERVAL", f"expected milliseconds, not {raw!r}") from None
    if not ms > 0:
        raise InputError("OTEL_METRIC_EXPORT_INTERVAL", f"must be a positive number of milliseconds, not {raw!r}")
    return ms / 1000.0


def missing_package(protocol: str | None, prometheus: bool) -> str | None:
    """What the exports need and is not installed, as the sentence to show (``None`` when
    everything is there): the SDK, the OTLP exporter of ``protocol`` (None: no OTLP) and, with
    ``prometheus``, the Prometheus reader. Looked up without importing them."""
    need = [("opentelemetry.sdk.metrics", "opentelemetry-sdk")]
    if protocol == "grpc":
        need.append(("opentelemetry.exporter.otlp.proto.grpc",
                     "opentelemetry-exporter-otlp-proto-grpc (pip install 'gpuscope[grpc]')"))
    elif protocol is not None:
        need.append(("opentelemetry.exporter.otlp.proto.http", "opentelemetry-exporter-otlp-proto-http"))
    if prometheus:
        need.append(("opentelemetry.exporter.prometheus", "opentelemetry-exporter-prometheus"))
    for module, package in need:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a parent package missing
            found = False
        if not found:
            return f"{module} is not installed: pip install {package}"
    return None
