"""`gpuscope monitor`: sample every GPU and the host and export them as OpenTelemetry metrics
(OTLP, a Prometheus endpoint) until stopped."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlsplit

from ..errors import InputError
from .common import positive_float, positive_int

HELP = "export GPU and host telemetry over OpenTelemetry (OTLP) and Prometheus until stopped"
DESCRIPTION = (
    "Sample every GPU (NVML, AMD SMI) and the host every --interval seconds and export the values "
    "as OpenTelemetry metrics under the semantic conventions for hardware (hw.gpu.utilization, "
    "hw.power, hw.energy, ...; gpuscope.gpu.* for what they lack): over OTLP (--otlp; endpoint, "
    "headers, resource attributes and export interval also from the OTEL_EXPORTER_OTLP_*, "
    "OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME and OTEL_METRIC_EXPORT_INTERVAL variables) and "
    "on a Prometheus /metrics endpoint (--prometheus PORT binds 127.0.0.1; name an interface to "
    "bind another, e.g. 0.0.0.0:9464). Runs until SIGTERM or Ctrl-C (or --seconds), then exports "
    "what it holds and exits 0 (1 when samples could not be written to the --db store: its disk full, "
    "said on stderr at the time). docs/otel.md lists every name."
)
NEEDS_DB = False
REPORTS = False

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_EXPORT_INTERVAL_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--interval", type=positive_float, default=1.0, metavar="S",
                        help="seconds between samples (default 1; 0.01 to 3600)")
    parser.add_argument("--otlp", nargs="?", const="", default=None, metavar="URL",
                        help="export over OTLP, to URL (default: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT / "
                             "OTEL_EXPORTER_OTLP_ENDPOINT, else localhost: 4318 for http/protobuf, 4317 for grpc)")
    parser.add_argument("--otlp-protocol", choices=None, default=None, metavar="PROTOCOL",
                        help="grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL / "
                             "OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
    parser.add_argument("--prometheus", default=None, metavar="[HOST:]PORT",
                        help="serve /metrics on PORT (127.0.0.1 unless HOST is given: an IPv4 address, "
                             "[IPV6] in brackets or a host name, e.g. 0.0.0.0:9464, [::1]:9464)")
    parser.add_argument("--prometheus-names", choices=("otel", "dcgm"), default="otel",
                        help="names on /metrics: otel (the OpenTelemetry names as the SDK's Prometheus reader "
                             "writes them, default) or dcgm (dcgm-exporter's names and labels, for NVIDIA and AMD "
                             "GPUs, for dashboards built for dcgm-exporter)")
    parser.add_argument("--per-process", nargs="?", const=5, default=0, type=positive_int, metavar="N",
                        help="also export each process's GPU memory (and utilization where the vendor gives it) "
                             "on each GPU, labelled by pid and executable name only: the N largest by memory "
                             "(default 5), the rest summed into one series")
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="also keep the samples in this store, as one run (source monitor) per monitor session")
    parser.add_argument("--retention", type=positive_float, default=None, metavar="DAYS",
                        help="with --db: delete monitor samples older than DAYS (at start, then hourly); "
                             "runs of other sources are never touched")
    parser.add_argument("--replay", default=None, metavar="FILE",
                        help="play a recording (gpuscope record) as the GPUs instead of this machine's")
    parser.add_argument("--seconds", type=positive_float, default=None, metavar="N", help="stop after N seconds")


def parse_listen(text: str) -> Any:
    """``--prometheus``: ``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` -> a
    :class:`gpuscope.otel.endpoint.Listen`, loopback unless a host is named; parsed strictly
    (:func:`gpuscope.otel.endpoint.parse_listen`), anything else an InputError naming the flag."""
    from ..otel.endpoint import parse_listen as parse

    try:
        return parse(text)
    except InputError as exc:
        raise InputError("--prometheus", exc.message) from None


def check_endpoint(url: str) -> str:
    """An OTLP endpoint as given, checked: an http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise InputError("--otlp", f"malformed endpoint URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("--otlp", "expected an http:// or https:// URL with a host, e.g. http://localhost:4318")
    return url


def shown_endpoint(url: str) -> str:
    """The endpoint without credentials or query (what the start-up line may print)."""
    p = urlsplit(url)
    netloc = p.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if p.port:
        netloc += f":{p.port}"
    return f"{p.scheme}://{netloc}{p.path}"


def resolve_protocol(flag: str | None, signal: str = "METRICS") -> str:
    """The OTLP protocol: the flag, else ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http/protobuf; an unknown one is an InputError."""
    proto = flag or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") \
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if proto not in PROTOCOLS:
        where = "--otlp-protocol" if flag else "OTEL_EXPORTER_OTLP_PROTOCOL"
        raise InputError(where, f"unknown OTLP protocol {proto!r} (grpc or http/protobuf)")
    return proto


def export_interval_s() -> float:
    """The OTLP export interval: ``OTEL_METRIC_EXPORT_INTERVAL`` (ms) when set, else 10 s."""
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


def check_installed(protocol: str | None, prometheus: bool) -> None:
    import importlib.util

    need = [("opentelemetry.sdk.metrics", "opentelemetry-sdk")]
    if protocol == "grpc":
        need.append(("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry-exporter-otlp-proto-grpc (pip install 'gpuscope[grpc]')"))
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
            raise InputError("monitor", f"{module} is not installed: pip install {package}")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    # -- everything that can be wrong is found before anything starts -----------------------
    if not 0.01 <= args.interval <= 3600:
        raise InputError("--interval", f"must be between 0.01 and 3600 seconds, not {args.interval}")
    if args.seconds is not None and not args.seconds > 0:
        raise InputError("--seconds", f"must be a positive number of seconds, not {args.seconds}")
    if args.otlp is None and args.prometheus is None and args.db is None:
        raise InputError("monitor", "nothing to export to: give --otlp [URL], --prometheus [HOST:]PORT and/or --db PATH")
    if args.retention is not None:
        if args.db is None:
            raise InputError("--retention", "given without --db")
        if not args.retention > 0:
            raise InputError("--retention", f"must be a positive number of days, not {args.retention}")
    listen = parse_listen(args.prometheus) if args.prometheus is not None else None
    protocol = endpoint = None
    export_s = DEFAULT_EXPORT_INTERVAL_S
    if args.otlp is not None:
        protocol = resolve_protocol(args.otlp_protocol)
        endpoint = check_endpoint(args.otlp) if args.otlp else None
        export_s = export_interval_s()
    elif args.otlp_protocol is not None:
        raise InputError("--otlp-protocol", "given without --otlp")
    replay = None
    if args.replay is not None:
        from ..collectors.replay import gpus_only

        replay = gpus_only(args.replay)  # InputError (exit 2) for a file that is not a recording
    check_installed(protocol, listen is not None)
    # the store is opened (made, migrated) only once every other input is known good: a bad
    # --replay or --prometheus must leave it as it was
    if args.db is not None:
        from .. import store
        from .._db import duckdb

        store.check_store_path(args.db)
        con = store.connect(args.db, retry_s=5.0)  # a store that cannot be opened, made or written fails here, not later
        try:
            con.close()
        except duckdb.Error:  # its checkpoint on a full disk: nothing was written; the sink says so at its first write
            pass

    endpoint_server = None
    if listen is not None:
        from prometheus_client import CollectorRegistry

        from ..otel.export import MetricsEndpoint

        registry = CollectorRegistry()
        try:
            endpoint_server = MetricsEndpoint(listen, registry)
        except OSError as exc:
            raise InputError("--prometheus", f"cannot listen on {listen.shown()} ({exc.strerror or exc})") from None
    try:
        return _monitor(args, replay, protocol, endpoint, export_s, endpoint_server)
    finally:
        if endpoint_server is not None:
            endpoint_server.stop()


def _monitor(args: argparse.Namespace, replay: Any, protocol: str | None, endpoint: str | None, export_s: float,
             endpoint_server: Any) -> int:
    from ..collectors import HostCollector, ReplayCollector, default_collectors
    from ..collectors.base import EveryProcess
    from ..machine import hostname
    from ..otel.export import QueueingExporter, otlp_exporter
    from ..otel.sink import TelemetryState, meter_provider
    from ..sampling import Sampler

    readers: list[Any] = []
    queue = None
    names, pid_note = process_namer()
    state = TelemetryState(per_process_top=args.per_process, name_of=names)
    if endpoint_server is not None and args.prometheus_names == "dcgm":
        from ..otel.export import DcgmNames

        endpoint_server.render = DcgmNames(state, hostname()).render
    elif endpoint_server is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        # a registry of the endpoint's own: no process or platform collectors, nothing else
        readers.append(PrometheusMetricReader(registry=endpoint_server.registry))
    if protocol is not None:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        inner = otlp_exporter(endpoint, protocol, timeout_s=min(5.0, export_s))
        shown = shown_endpoint(endpoint) if endpoint else f"the OTEL_EXPORTER_OTLP_* endpoint ({protocol})"
        queue = QueueingExporter(inner, shown)
        readers.append(PeriodicExportingMetricReader(queue.exporter, export_interval_millis=export_s * 1000))

    own: list[tuple[str, str, str, str, Any]] = []
    if queue is not None:
        own += [("gpuscope.monitor.export.dropped", "counter", "{export}",
                 "OTLP exports dropped because the endpoint was down and the queue was full",
                 lambda: [(float(queue.dropped), ())]),
                ("gpuscope.monitor.export.failures", "counter", "{export}", "OTLP exports that failed",
                 lambda: [(float(queue.failures), ())])]
    resource = {"host.name": hostname()}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        resource["service.name"] = "gpuscope-monitor"
    provider = meter_provider(state, readers, resource, own)

    if replay is not None:
        collectors = [ReplayCollector(replay, loop=True), HostCollector()]
    else:
        collectors = default_collectors(None)
    # --per-process: every process the vendor lists on a GPU, seen from here or not
    tree = EveryProcess() if args.per_process else None
    sinks: list[Any] = [state]
    store_sink = None
    if args.db is not None:
        from ..sinks import StoreSink

        # A store that refuses writes later (its disk full) never stops the monitor: the sink
        # holds the samples (bounded), says so once on stderr and retries at every flush.
        store_sink = StoreSink(args.db, name=f"monitor {hostname()}", source="monitor", final_status="complete",
                               flush_s=max(1.0, args.interval),
                               retention_s=args.retention * 86400 if args.retention is not None else None)
        sinks.append(store_sink)
    sampler = Sampler(collectors, sinks, interval_s=args.interval, batch_s=min(1.0, args.interval), tree=tree)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sampler.start()
        gpus = [d for d in sampler.devices if d.kind != "host"]
        where = []
        if endpoint_server is not None:
            where.append(f"Prometheus on http://{_host_for_url(endpoint_server.host)}:{endpoint_server.port}/metrics"
                         + (" (dcgm-exporter names)" if args.prometheus_names == "dcgm" else ""))
        if queue is not None:
            where.append(f"OTLP {protocol} to {queue.what} every {export_s:g} s")
        if args.db is not None:
            where.append(f"the store {args.db}" + (f" (keeping {args.retention:g} days)" if args.retention else ""))
        from ..textsafe import visible

        # device names from a replayed recording are somebody's text: control characters shown
        what = visible(", ".join(f"{d.key} ({d.name or d.vendor})" for d in gpus) or "no GPU")
        print(f"gpuscope monitor: {what} and the host every {args.interval:g} s; " + "; ".join(where),
              file=sys.stderr, flush=True)
        if args.per_process:
            print(f"gpuscope monitor: per process: the {args.per_process} largest by GPU memory on each GPU; "
                  + (pid_note or "names from /proc"), file=sys.stderr, flush=True)
        if not gpus:
            for v in sampler.unavailable:
                print(f"gpuscope monitor: {v.vendor}: {v.reason}", file=sys.stderr, flush=True)
        if endpoint_server is not None:
            endpoint_server.start()
        stop.wait(args.seconds)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sampler.stop()
        provider.shutdown(timeout_millis=10_000)  # the readers' last collection and export: what it holds goes out
    # samples that never reached the store (it said how many and why): a failure while working
    return 1 if store_sink is not None and store_sink.rows_not_stored else 0


def process_namer(proc: str = "/proc") -> tuple[Any, str | None]:
    """``(name_of(pid), note)``: a process's executable name (``/proc/PID/comm``), and a note
    when names cannot be trusted here. NVML and AMD SMI list the host's pids; a monitor in a
    container (a PID namespace of its own, ``NSpid`` with more than one entry) either cannot
    see them or sees other processes under the same numbers, so it names none ("?")."""
    try:
        with open(f"{proc}/self/status", encoding="utf-8") as f:
            nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
    except OSError:
        nspid = []
    if len(nspid) > 1:
        return (lambda pid: "?"), ("this monitor runs in a PID namespace of its own (a container): the GPU's pids "
                                   "are the host's, so they are exported as the vendor gives them and not named")

    def name_of(pid: int) -> str:
        try:
            with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as f:
                return f.read().strip() or "?"
        except OSError:
            return "?"  # gone, or not visible from here
    return name_of, None


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host
