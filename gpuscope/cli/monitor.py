"""`gpuscope monitor`: sample every GPU and the host and export them as OpenTelemetry metrics
(OTLP, a Prometheus endpoint) until stopped."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..errors import InputError
from .common import check_otel_installed, otlp_target, positive_float, positive_int

if TYPE_CHECKING:
    from ..otel.endpoint import Listen

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--interval", type=positive_float, default=1.0, metavar="S",
                        help="seconds between samples (default 1; 0.01 to 3600)")
    parser.add_argument("--otlp", nargs="?", const="", default=None, metavar="URL",
                        help="export over OTLP, to URL: a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT (over HTTP "
                             "/v1/metrics is appended to its path: http://host:4318/my posts to /my/v1/metrics). "
                             "Default: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (used as is) / OTEL_EXPORTER_OTLP_ENDPOINT "
                             "(a base URL), else localhost: 4318 for http/protobuf, 4317 for grpc")
    parser.add_argument("--otlp-protocol", choices=None, default=None, metavar="PROTOCOL",
                        help="grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL / "
                             "OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
    parser.add_argument("--prometheus", default=None, metavar="[HOST:]PORT",
                        help="serve /metrics on PORT (127.0.0.1 unless HOST is given: an IPv4 address, "
                             "[IPV6] in brackets or a host name, e.g. 0.0.0.0:9464, [::1]:9464)")
    parser.add_argument("--prometheus-names", choices=("otel", "dcgm", "amd"), default="otel",
                        help="names on /metrics: otel (the OpenTelemetry names as the SDK's Prometheus reader "
                             "writes them, default), dcgm (dcgm-exporter's names and labels) or amd (AMD "
                             "device-metrics-exporter's), each for NVIDIA and AMD GPUs alike, for dashboards "
                             "built for those exporters")
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


def parse_listen(text: str) -> Listen:
    """``--prometheus``: ``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` -> a
    :class:`gpuscope.otel.endpoint.Listen`, loopback unless a host is named; parsed strictly
    (:func:`gpuscope.otel.endpoint.parse_listen`), anything else an InputError naming the flag."""
    from ..otel.endpoint import parse_listen as parse

    try:
        return parse(text)
    except InputError as exc:
        raise InputError("--prometheus", exc.message) from None


def run(args: argparse.Namespace) -> int:
    """Check every argument, then run the monitor (:func:`gpuscope.monitor.loop.run_monitor`);
    returns the exit code."""
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
    otlp = None
    if args.otlp is not None:
        otlp = otlp_target(args.otlp, args.otlp_protocol)
    elif args.otlp_protocol is not None:
        raise InputError("--otlp-protocol", "given without --otlp")
    replay = None
    if args.replay is not None:
        from ..pipeline import load_replay

        replay = load_replay(args.replay)  # InputError (exit 2) for a file that is not a recording
    check_otel_installed(otlp.protocol if otlp is not None else None, listen is not None)
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

    from ..monitor.loop import MonitorConfig, run_monitor

    config = MonitorConfig(interval_s=args.interval, seconds=args.seconds, otlp=otlp,
                           prometheus_names=args.prometheus_names, per_process=args.per_process, db=args.db,
                           retention_days=args.retention, replay=replay)
    endpoint_server = None
    if listen is not None:
        from prometheus_client import CollectorRegistry

        from ..otel.endpoint import MetricsEndpoint

        registry = CollectorRegistry()
        try:
            endpoint_server = MetricsEndpoint(listen, registry)
        except OSError as exc:
            raise InputError("--prometheus", f"cannot listen on {listen.shown()} ({exc.strerror or exc})") from None
    try:
        return run_monitor(config, endpoint_server)
    finally:
        if endpoint_server is not None:
            endpoint_server.stop()
