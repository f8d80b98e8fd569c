"""The one assembly of a sampler (gpuscope/pipeline.py) and the one OpenTelemetry setup
(gpuscope/otel/otlp.py, gpuscope/otel/setup.py) that monitor, run and the TUI's live screen share."""
from __future__ import annotations

import os
import time
import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from gpuscope.collectors import AmdCollector, HostCollector, NvmlCollector, ProcessTree, ReplayCollector
from gpuscope.collectors.base import EveryProcess
from gpuscope.errors import InputError
from gpuscope.machine import hostname
from gpuscope.pipeline import build_sampler, collectors_for, load_replay
from gpuscope.sinks import MemorySink

SYNTHETIC = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
#: host_mem_total_bytes in every host row of the synthetic recording (512 GiB)
RECORDED_HOST_MEM_BYTES = 549_755_813_888


def test_a_replay_pipeline_plays_the_recordings_gpus_beside_this_host() -> None:
    tree = ProcessTree([os.getpid()])
    sink = MemorySink()
    sampler = build_sampler([sink], interval_s=0.05, replay=SYNTHETIC, watch=tree, host_tree=tree)
    assert [type(c) for c in sampler.collectors] == [ReplayCollector, HostCollector]
    replay, host = sampler.collectors
    assert isinstance(replay, ReplayCollector) and isinstance(host, HostCollector)
    assert replay.loop and host.tree is tree and sampler.tree is tree and sampler.sinks == [sink]
    # sample until every device has given a row (an event, not a fixed time: the machine may be loaded)
    sampler.start()
    try:
        deadline = time.monotonic() + 60
        while not all(sink.rows(k) for k in ("gpu0", "gpu1", "host")) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sampler.stop()
    assert sorted(d.key for d in sampler.devices) == ["gpu0", "gpu1", "host"]
    rows = sink.rows("host")
    assert rows
    # the host row is this machine's (the recording's says 512 GiB and 3 processes), measuring
    # the tree it was given: this process alone
    assert all(r.values.get("host_mem_total_bytes") != RECORDED_HOST_MEM_BYTES for r in rows)
    import psutil

    assert rows[-1].values.get("host_mem_total_bytes") == psutil.virtual_memory().total
    # the tree measured is this process and whatever children it has at that moment (a test run
    # may hold some): at least this one
    assert rows[-1].values.get("proc_count", 0) >= 1
    assert sink.rows("gpu0") and sink.rows("gpu1")


def test_a_recording_loaded_first_is_its_gpus_only() -> None:
    rec = load_replay(SYNTHETIC)
    assert [d.key for d in rec.devices] == ["gpu0", "gpu1"]
    assert all(r.get("device") != "host" for tick in rec.ticks for r in tick)
    with pytest.raises(InputError):
        load_replay(FIXTURES / "recordings" / "no-such-recording.jsonl")


def test_this_machines_pipeline_is_every_vendor_and_the_host() -> None:
    tree = ProcessTree([os.getpid()])
    cols = collectors_for(None, host_tree=tree)
    assert [type(c) for c in cols] == [NvmlCollector, AmdCollector, HostCollector]
    assert isinstance(cols[2], HostCollector) and cols[2].tree is tree
    alone = collectors_for(None)
    assert isinstance(alone[2], HostCollector) and alone[2].tree is None
    watch = EveryProcess()
    sampler = build_sampler([], interval_s=1.0, batch_s=1.0, watch=watch)
    assert sampler.tree is watch and sampler.batch_s == 1.0
    assert build_sampler([], interval_s=0.2).batch_s == 0.5  # the sampler's own default


# -- where OTLP goes ---------------------------------------------------------------------------


def test_the_otlp_target_names_the_flag_or_variable_that_was_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.cli.common import otlp_target
    from gpuscope.otel.otlp import OtlpTarget

    for var in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_METRIC_EXPORT_INTERVAL"):
        monkeypatch.delenv(var, raising=False)
    assert otlp_target("", None) == OtlpTarget(None, "http/protobuf", 10.0)
    with pytest.raises(InputError) as bad_url:
        otlp_target("ftp://collector:4318", None)
    assert bad_url.value.source == "--otlp" and "http:// or https://" in bad_url.value.message
    with pytest.raises(InputError) as bad_port:
        otlp_target("http://collector:99999", None)
    assert bad_port.value.source == "--otlp" and "malformed endpoint URL" in bad_port.value.message
    with pytest.raises(InputError) as bad_flag:
        otlp_target("", "http/json")
    assert bad_flag.value.source == "--otlp-protocol"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(InputError) as bad_var:
        otlp_target("", None)
    assert bad_var.value.source == "OTEL_EXPORTER_OTLP_PROTOCOL"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")  # milliseconds
    assert otlp_target("http://collector:4317", None) == OtlpTarget("http://collector:4317", "grpc", 0.5)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "-1")
    with pytest.raises(InputError) as bad_interval:
        otlp_target("", None)
    assert bad_interval.value.source == "OTEL_METRIC_EXPORT_INTERVAL"


def test_a_target_is_shown_without_credentials_or_query() -> None:
    from gpuscope.otel.otlp import OtlpTarget

    assert OtlpTarget("https://user:secret@collector:4318/otlp?token=t", "http/protobuf").shown() \
        == "https://collector:4318/otlp"
    assert OtlpTarget("http://[::1]:4317", "grpc").shown() == "http://[::1]:4317"
    assert OtlpTarget(None, "grpc").shown() == "the OTEL_EXPORTER_OTLP_* endpoint (grpc)"


def test_the_resource_names_the_host_the_command_and_yields_to_otel_service_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.otel.setup import resource_attributes

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    attrs = resource_attributes("run", {"gpuscope.run.name": "train"})
    assert list(attrs.items()) == [("host.name", hostname()), ("gpuscope.run.name", "train"),
                                   ("service.name", "gpuscope-run")]
    assert resource_attributes("monitor") == {"host.name": hostname(), "service.name": "gpuscope-monitor"}
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mine")
    assert resource_attributes("monitor") == {"host.name": hostname()}  # the SDK reads the variable itself


def test_one_metrics_setup_serves_prometheus_and_counts_failed_otlp_exports(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuscope.otel.otlp import OtlpTarget
    from gpuscope.otel.setup import metrics_export, resource_attributes
    from gpuscope.otel.sink import TelemetryState

    registry = CollectorRegistry()
    logged: list[str] = []
    # port 1 on loopback: nothing listens, every export fails (connection refused); a short
    # interval keeps the exporter's retries short (its timeout is the interval when shorter)
    target = OtlpTarget("http://127.0.0.1:1", "http/protobuf", 0.3)
    export = metrics_export(TelemetryState(), resource_attributes("monitor"), otlp=target,
                            prometheus_registry=registry, count_exports=True, log=logged.append)
    try:
        assert export.queue is not None and export.queue.what == "http://127.0.0.1:1"
        text = generate_latest(registry).decode()
        for name in ("gpuscope_monitor_export_dropped_total", "gpuscope_monitor_export_failures_total"):
            assert re.search(rf"^{name}{{[^}}]*}} \d", text, re.M), text
    finally:
        export.shutdown()  # its last export fails too
    assert export.queue.failures >= 1 and export.queue.sent == 0
    # one line however many failed (at most one a minute)
    assert len(logged) == 1 and "OTLP export to http://127.0.0.1:1 failed" in logged[0]
    # without count_exports (gpuscope run --otlp, whose summary reports the counts): no such metrics
    other = CollectorRegistry()
    quiet = metrics_export(TelemetryState(), resource_attributes("run"), otlp=target, prometheus_registry=other,
                           log=logged.append)
    try:
        assert quiet.queue is not None and "gpuscope_monitor_export" not in generate_latest(other).decode()
    finally:
        quiet.shutdown()
