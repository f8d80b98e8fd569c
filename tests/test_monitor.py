"""`gpuscope monitor`: the Prometheus endpoint and OTLP (HTTP and gRPC) carry the replayed
recording's values under the semantic-convention names; bad flags exit 2 before anything starts;
an OTLP endpoint that is down neither stops the monitor nor floods its log; SIGTERM flushes and
exits 0. Receivers here are real servers decoding the real protobuf messages."""
from __future__ import annotations

import gzip
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, run_cli

pytest.importorskip("opentelemetry.sdk.metrics")
pytest.importorskip("opentelemetry.exporter.prometheus")

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
REPO = Path(__file__).resolve().parents[1]
H100_UUID = "GPU-00000000-0000-4000-8000-5e1a7c2b0001"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _recorded(key: str, metric: str) -> set[float]:
    from gpuscope.collectors.replay import load_recording

    rec = load_recording(RECORDING)
    return {float(r["values"][metric]) for tick in rec.ticks for r in tick
            if r["device"] == key and metric in r["values"]}


def _energy_increases(key: str) -> set[float]:
    """What ``hw.energy`` may read within the recording's first loop: the counter's increase
    since monitor's first reading (monitor exports energy counted since it started)."""
    from gpuscope.collectors.replay import load_recording

    rec = load_recording(RECORDING)
    e = [float(r["values"]["energy_j"]) for tick in rec.ticks for r in tick
         if r["device"] == key and "energy_j" in r["values"]]
    return {round(v - e[0], 3) for v in e}


def _monitor(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "gpuscope", "monitor", "--replay", str(RECORDING), *args],
                            cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def _series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric in Prometheus text format: (labels, value)."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels_text, _, value = line[len(name) + 1:].rpartition("} ")
        labels = dict(part.split("=", 1) for part in labels_text.split('",') if "=" in part)
        out.append(({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return out


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, names", [
    ([], "nothing to export"),
    (["--prometheus", "99999"], "--prometheus"),
    (["--prometheus", "localhost:http"], "--prometheus"),
    (["--otlp", "localhost:4318"], "--otlp"),
    (["--otlp", "http://"], "--otlp"),
    (["--otlp", "http://h:99999999"], "--otlp"),
    (["--otlp", "--otlp-protocol", "thrift"], "--otlp-protocol"),
    (["--prometheus", "9464", "--otlp-protocol", "grpc"], "--otlp-protocol"),
    (["--prometheus", "9464", "--interval", "0"], "--interval"),
    (["--prometheus", "9464", "--replay", "/nonexistent/recording.jsonl"], "recording.jsonl"),
])
def test_bad_flags_exit_2_with_one_line(args: list[str], names: str) -> None:
    r = run_cli("monitor", *args)
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in r.err, r.err


def test_a_port_in_use_exits_2_before_anything_starts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_cli("monitor", "--replay", str(RECORDING), "--prometheus", str(port), "--seconds", "30")
    assert r.code == 2 and f"127.0.0.1:{port}" in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_an_unknown_protocol_from_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    r = run_cli("monitor", "--otlp")
    assert r.code == 2 and "OTEL_EXPORTER_OTLP_PROTOCOL" in r.err and "http/json" in r.err


# -- Prometheus ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_prometheus_endpoint_serves_the_replay_on_loopback_and_sigterm_exits_0() -> None:
    port = _free_port()
    p = _monitor("--prometheus", str(port), "--interval", "0.2")
    try:
        text = ""
        for _ in range(100):
            try:
                text = _scrape(port)
                if "hw_power_watts{" in text and "hw_gpu_io_bytes_total{" in text:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        power = {labels["hw_name"]: v for labels, v in _series(text, "hw_power_watts")}
        assert power["gpu0"] in _recorded("gpu0", "power_w")
        limit = {labels["hw_name"]: (labels, v) for labels, v in _series(text, "hw_gpu_memory_limit_bytes")}
        labels, v = limit["gpu0"]
        assert v in _recorded("gpu0", "mem_total_bytes")
        assert labels["hw_id"] == H100_UUID and labels["hw_type"] == "gpu" and labels["hw_vendor"] == "NVIDIA"
        assert labels["hw_model"] == "NVIDIA H100 80GB HBM3"
        util = _series(text, "hw_gpu_utilization")
        assert all(lab["hw_gpu_task"] == "general" for lab, _ in util)
        assert {lab["hw_name"]: val for lab, val in util}["gpu0"] in _recorded("gpu0", "gpu_util")
        temps = {lab["hw_sensor_location"] for lab, _ in _series(text, "hw_temperature_celsius")
                 if lab["hw_name"] == "gpu0"}
        assert temps == {"gpu", "memory"}
        assert {lab["network_io_direction"] for lab, _ in _series(text, "hw_gpu_io_bytes_total")} == {"transmit", "receive"}
        energy = {lab["hw_name"]: val for lab, val in _series(text, "hw_energy_joules_total")}
        assert round(energy["gpu0"], 3) in _energy_increases("gpu0")
        # no command line, path or user in any label
        assert "synthetic_h100_a100" not in text and str(REPO) not in text
        with pytest.raises(urllib.error.HTTPError) as exc:
            _scrape(port, "/")
        assert exc.value.code == 404
        # loopback only: another address of this machine is refused
        other = _non_loopback_address()
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=2).close()
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert f"Prometheus on http://127.0.0.1:{port}/metrics" in err and "Traceback" not in err


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


# -- OTLP ----------------------------------------------------------------------------------------

class _HttpReceiver:
    """An OTLP/HTTP receiver: decodes every POST to /v1/metrics as ExportMetricsServiceRequest."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest, ExportMetricsServiceResponse)

        self.requests: list[Any] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportMetricsServiceRequest()
                req.ParseFromString(body)
                received.paths.append(self.path)
                received.requests.append(req)
                data = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _metrics(requests: list[Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """name -> the newest Metric message; and the resources' attributes."""
    out: dict[str, Any] = {}
    resources = []
    for req in requests:
        for rm in req.resource_metrics:
            resources.append({kv.key: kv.value.string_value for kv in rm.resource.attributes})
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out[m.name] = m
    return out, resources


def _points(metric: Any) -> list[tuple[dict[str, str], float]]:
    data = getattr(metric, metric.WhichOneof("data"))
    return [({kv.key: kv.value.string_value for kv in p.attributes}, p.as_double if p.HasField("as_double") else p.as_int)
            for p in data.data_points]


def _check_otlp(requests: list[Any]) -> None:
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

    metrics, resources = _metrics(requests)
    assert resources and all(r.get("host.name") and r.get("service.name") == "gpuscope-monitor" for r in resources)
    units = {name: metrics[name].unit for name in ("hw.power", "hw.energy", "hw.gpu.memory.usage", "hw.gpu.utilization",
                                                  "hw.temperature", "hw.gpu.io")}
    assert units == {"hw.power": "W", "hw.energy": "J", "hw.gpu.memory.usage": "By", "hw.gpu.utilization": "1",
                     "hw.temperature": "Cel", "hw.gpu.io": "By"}
    assert metrics["hw.power"].WhichOneof("data") == "gauge"
    energy = metrics["hw.energy"]
    assert energy.WhichOneof("data") == "sum" and energy.sum.is_monotonic
    assert energy.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    usage = metrics["hw.gpu.memory.usage"]
    assert usage.WhichOneof("data") == "sum" and not usage.sum.is_monotonic
    power = {a["hw.name"]: (a, v) for a, v in _points(metrics["hw.power"])}
    attrs, value = power["gpu0"]
    assert value in _recorded("gpu0", "power_w")
    assert attrs["hw.id"] == H100_UUID and attrs["hw.type"] == "gpu" and attrs["hw.model"] == "NVIDIA H100 80GB HBM3"
    assert round({a["hw.name"]: v for a, v in _points(energy)}["gpu0"], 3) in _energy_increases("gpu0")


@pytest.mark.slow
def test_otlp_http_carries_the_replay_with_units_attributes_and_values() -> None:
    rx = _HttpReceiver()
    try:
        p = _monitor("--otlp", f"http://127.0.0.1:{rx.port}", "--interval", "0.2", "--seconds", "2.5",
                     env={"OTEL_METRIC_EXPORT_INTERVAL": "500"})
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert rx.requests and set(rx.paths) == {"/v1/metrics"}
        _check_otlp(rx.requests)
    finally:
        rx.close()


@pytest.mark.slow
def test_otlp_grpc_carries_the_replay() -> None:
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    from concurrent import futures

    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc

    requests: list[Any] = []

    class Service(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            requests.append(request)
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        p = _monitor("--otlp", f"http://127.0.0.1:{port}", "--otlp-protocol", "grpc", "--interval", "0.2",
                     "--seconds", "2.5", env={"OTEL_METRIC_EXPORT_INTERVAL": "500"})
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert requests
        _check_otlp(requests)
    finally:
        server.stop(0)


@pytest.mark.slow
def test_otlp_endpoint_down_keeps_sampling_and_serving_and_logs_once() -> None:
    dead = _free_port()  # nothing listens there
    port = _free_port()
    p = _monitor("--otlp", f"http://127.0.0.1:{dead}", "--prometheus", str(port), "--interval", "0.2",
                 env={"OTEL_METRIC_EXPORT_INTERVAL": "300"})
    try:
        text = ""
        for _ in range(80):
            time.sleep(0.1)
            try:
                text = _scrape(port)
            except (urllib.error.URLError, ConnectionError):
                continue
            failures = _series(text, "gpuscope_monitor_export_failures_total")
            if failures and failures[0][1] >= 3:
                break
        assert _series(text, "gpuscope_monitor_export_failures_total")[0][1] >= 3, text[-2000:]
        assert _series(text, "hw_power_watts")  # still sampling and serving
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert err.count("OTLP export to") == 1, err  # once per minute, not once per export


def test_the_queue_keeps_failed_exports_drops_the_oldest_and_counts() -> None:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    from gpuscope.otel.export import QueueingExporter

    class Endpoint(MetricExporter):
        """Answers from a table: down for the first ``down`` exports, then up."""

        def __init__(self, down: int) -> None:
            super().__init__()
            self.down = down
            self.received: list[Any] = []

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> MetricExportResult:
            if self.down > 0:
                self.down -= 1
                return MetricExportResult.FAILURE
            self.received.append(metrics_data)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
            pass

    logged: list[str] = []
    ep = Endpoint(down=5)
    q = QueueingExporter(ep, "test", max_queue=3, log=logged.append)
    results = [q.exporter.export(f"batch{i}") for i in range(6)]
    assert results[:5] == [MetricExportResult.FAILURE] * 5 and results[5] == MetricExportResult.SUCCESS
    # room for three: each export past the third pushes the oldest out (batch0, 1, 2), the
    # endpoint comes back at the sixth and the three queued go out, oldest first
    assert q.dropped == 3 and ep.received == ["batch3", "batch4", "batch5"], (q.dropped, ep.received)
    assert q.failures == 5 and q.sent == 3 and not q.queue
    assert len(logged) == 1 and "OTLP export to test failed" in logged[0]  # once a minute at most


# -- names ---------------------------------------------------------------------------------------

#: The GPU metrics the semantic conventions define (model/hardware/gpu.yaml), and the common
#: hardware metrics a GPU uses with hw.type=gpu.
SEMCONV_HW = {"hw.gpu.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization",
              "hw.gpu.io", "hw.errors", "hw.status", "hw.power", "hw.energy", "hw.temperature", "hw.fan.speed_ratio"}


def test_every_stored_metric_is_exported_or_says_why_and_no_hw_name_is_invented() -> None:
    from gpuscope.metrics import METRICS
    from gpuscope.otel.names import COUNTERS, DIRECT, INSTRUMENTS_BY_NAME, NOT_EXPORTED, RATES, SCALED, instrument_of

    for m in METRICS:
        assert (m.name in DIRECT) + (m.name in COUNTERS) + (m.name in RATES) + (m.name in NOT_EXPORTED) == 1, m.name
        if m.name in NOT_EXPORTED:
            continue
        inst = INSTRUMENTS_BY_NAME[instrument_of(m.name)]
        # a rate (By/s) becomes a byte counter; a clock is exported in Hz (names.SCALED); the rest keep their unit
        assert inst.unit == ("By" if m.otel_unit == "By/s" else SCALED[m.name][0] if m.name in SCALED
                             else m.otel_unit), m.name
        assert inst.kind == "counter" if m.name in RATES or m.kind == "counter" else inst.kind in ("gauge", "updown")
    for name in INSTRUMENTS_BY_NAME:
        assert name in SEMCONV_HW or name.startswith(("gpuscope.", "system.")), name
        assert not (name.startswith("hw.") and name not in SEMCONV_HW), name


def test_docs_name_every_instrument_and_its_prometheus_name() -> None:
    from gpuscope.otel.names import INSTRUMENTS

    text = (REPO / "docs" / "otel.md").read_text()
    for inst in INSTRUMENTS:
        assert f"`{inst.name}`" in text, inst.name


def test_memory_utilization_is_the_fraction_used_not_the_controller_busy_time() -> None:
    from gpuscope.otel.names import device_attributes, points
    from gpuscope.collectors.base import DeviceInfo

    d = DeviceInfo(key="gpu0", vendor="amd", name="AMD Instinct MI300X", uuid=None, pci_bus_id="0000:0c:00.0")
    attrs = device_attributes(d)
    assert dict(attrs) == {"hw.id": "0000:0c:00.0", "hw.type": "gpu", "hw.name": "gpu0", "hw.vendor": "AMD",
                           "hw.model": "AMD Instinct MI300X"}
    pts = {(n, a): v for n, v, a in points(attrs, {"mem_util": 0.9, "mem_used_bytes": 48, "mem_total_bytes": 192},
                                           lost=False, host=False)}
    assert pts[("hw.gpu.memory.utilization", attrs)] == 0.25
    assert pts[("gpuscope.gpu.memory.busy", attrs)] == 0.9
    assert pts[("hw.status", tuple(sorted(attrs + (("hw.state", "ok"),))))] == 1.0
    lost = {(n, a): v for n, v, a in points(attrs, {}, lost=True, host=False)}
    assert lost == {("hw.status", tuple(sorted(attrs + (("hw.state", "ok"),)))): 0.0,
                    ("hw.status", tuple(sorted(attrs + (("hw.state", "degraded"),)))): 0.0,
                    ("hw.status", tuple(sorted(attrs + (("hw.state", "failed"),)))): 1.0}


# -- dcgm-exporter names -------------------------------------------------------------------------

def test_dcgm_names_convert_units_and_label_amd_gpus_too() -> None:
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.otel.dcgm import labels, samples

    mi300 = DeviceInfo(key="gpu3", vendor="amd", index=3, name="AMD Instinct MI300X", uuid="5f00-ab",
                       pci_bus_id="0000:0c:00.0", properties={"driver_version": "6.8.5"})
    lab = labels(mi300, "node7", None)
    assert lab == {"gpu": "3", "UUID": "5f00-ab", "pci_bus_id": "0000:0c:00.0", "device": "amd3",
                   "modelName": "AMD Instinct MI300X", "Hostname": "node7", "DCGM_FI_DRIVER_VERSION": "6.8.5"}
    got = {name: value for name, _, _, value in samples(lab, {
        "gpu_util": 0.5, "mem_used_bytes": 3 * 2**30, "mem_total_bytes": 192 * 2**30, "energy_j": 12.5,
        "power_w": 600.0, "tensor_active": 0.25})}
    assert got["DCGM_FI_DEV_GPU_UTIL"] == 50.0 and got["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.5
    assert got["DCGM_FI_DEV_FB_USED"] == 3072.0 and got["DCGM_FI_DEV_FB_FREE"] == 189 * 1024.0
    assert got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 12500.0  # mJ
    assert got["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == 0.25 and got["DCGM_FI_DEV_POWER_USAGE"] == 600.0
    assert "DCGM_FI_DEV_GPU_TEMP" not in got  # not reported: no sample, never 0


@pytest.mark.slow
def test_dcgm_names_on_the_endpoint_parse_and_carry_the_replay() -> None:
    port = _free_port()
    p = _monitor("--prometheus", str(port), "--prometheus-names", "dcgm", "--interval", "0.2")
    try:
        text = ""
        for _ in range(100):
            time.sleep(0.1)
            try:
                text = _scrape(port)
            except (urllib.error.URLError, ConnectionError):
                continue
            if "DCGM_FI_DEV_POWER_USAGE{" in text:
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    assert p.returncode == 0
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text)}
    power = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_POWER_USAGE"].samples}
    assert power["0"].value in _recorded("gpu0", "power_w")
    assert power["0"].labels["UUID"] == H100_UUID and power["0"].labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert power["0"].labels["device"] == "nvidia0" and power["0"].labels["pci_bus_id"] == "00000000:18:00.0"
    used = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    assert used["0"] in {v / 2**20 for v in _recorded("gpu0", "mem_used_bytes")}
    assert "hw_power_watts" not in text  # one set of names at a time


# -- per process ---------------------------------------------------------------------------------

def test_per_process_exports_the_top_n_by_memory_and_sums_the_rest() -> None:
    """The NVML collector over the fake pynvml table (two processes on the H100, 2 GiB and
    1 GiB) watching every pid, as `monitor --per-process 1` does."""
    from fakes.fake_pynvml import FakeNvml

    from gpuscope.collectors import NvmlCollector
    from gpuscope.collectors.base import EveryProcess
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    fake = FakeNvml("nvml_h100_a100.json")
    state = TelemetryState(per_process_top=1, name_of=lambda pid: {4242: "vllm"}.get(pid, "?"))
    collector = NvmlCollector(nvml=fake, process_interval_s=0.0, gpm_min_interval_s=0.0)
    devices = collector.open()
    collector.set_pids(EveryProcess().pids())  # what the sampler hands on from monitor's tree
    state.start(SamplerInfo(interval_s=1.0, started_ns=0, vendors=[], devices=devices))
    state.write(SampleBatch([(0, collector.sample())]))
    collector.close()
    mem = {dict(a).get("process.executable.name"): (dict(a), v) for v, a in state.observe("gpuscope.gpu.process.memory.usage")
           if dict(a)["hw.name"] == "gpu0"}
    top, top_value = mem["vllm"]
    assert top["process.pid"] == 4242 and top_value == 2 * 2**30 and top["hw.id"].startswith("GPU-")
    rest, rest_value = mem["(1 other processes)"]
    assert "process.pid" not in rest and rest_value == 2**30
    assert set(mem) == {"vllm", "(1 other processes)"}  # bounded: N + 1 series per GPU
    util = {dict(a).get("process.pid"): v for v, a in state.observe("gpuscope.gpu.process.utilization")
            if dict(a)["hw.name"] == "gpu0"}
    assert util == {4242: 0.55}


def test_process_names_are_not_guessed_inside_a_pid_namespace(tmp_path: Path) -> None:
    from gpuscope.monitor.loop import process_namer

    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "77").mkdir()
    (proc / "77" / "comm").write_text("python3\n")
    (proc / "self" / "status").write_text("Name:\tgpuscope\nNSpid:\t4321\n")
    name_of, note = process_namer(str(proc))
    assert note is None and name_of(77) == "python3" and name_of(78) == "?"
    (proc / "self" / "status").write_text("Name:\tgpuscope\nNSpid:\t4321\t12\n")  # a container's
    name_of, note = process_namer(str(proc))
    assert name_of(77) == "?" and "PID namespace" in note


# -- into the store ------------------------------------------------------------------------------

@pytest.mark.slow
def test_db_keeps_the_samples_as_a_monitor_run_and_retention_prunes_only_monitor_runs(tmp_path: Path) -> None:
    import duckdb

    from gpuscope import store
    from gpuscope.store import runs as store_runs

    db = tmp_path / "s.duckdb"
    con = store.connect(db)
    with store.transaction(con):  # an old monitor run and an old user run, both with old samples
        old_ns = time.time_ns() - 30 * 86400 * 10**9
        mon = store_runs.begin_recording(con, name="monitor old", source="monitor", started_ns=old_ns, command=None,
                                         info={"owner": {"pid": os.getpid()}})
        usr = store_runs.begin_recording(con, name="user", source="run", started_ns=old_ns, command=None,
                                         info={"owner": {"pid": os.getpid()}})
        for rid in (mon, usr):
            con.execute("INSERT INTO devices (run_id, device_id, key, source, vendor, kind) "
                        "VALUES (?, 0, 'gpu0', 'telemetry', 'nvidia', 'gpu')", [rid])
            con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w) VALUES (?, 0, ?, 100.0)", [rid, old_ns])
    con.close()
    p = _monitor("--db", str(db), "--retention", "7", "--interval", "0.2", "--seconds", "2")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "the store" in err and "keeping 7 days" in err
    con = duckdb.connect(str(db), read_only=True)
    try:
        left = dict(con.execute("SELECT run_id, count(*) FROM samples GROUP BY run_id").fetchall())
        new = con.execute("SELECT id, status FROM runs WHERE source = 'monitor' AND id <> ?", [mon]).fetchall()
        power = {r[0] for r in con.execute(
            "SELECT s.power_w FROM samples s JOIN devices d ON d.run_id = s.run_id AND d.device_id = s.device_id "
            "WHERE s.run_id = ? AND d.key = 'gpu0' AND s.power_w IS NOT NULL", [new[0][0]]).fetchall()}
    finally:
        con.close()
    assert mon not in left  # the old monitor samples are gone
    assert left[usr] == 1  # a user's run is never touched
    assert len(new) == 1 and new[0][1] == "complete" and left[new[0][0]] > 0
    assert power and power <= _recorded("gpu0", "power_w")


def test_retention_without_db_and_a_bad_store_exit_2(tmp_path: Path) -> None:
    r = run_cli("monitor", "--prometheus", "9464", "--retention", "3")
    assert r.code == 2 and "--retention" in r.err
    bad = tmp_path / "not-a-store"
    bad.write_text("hello, this is not a database at all")
    r = run_cli("monitor", "--db", str(bad))
    assert r.code == 2 and "not a gpuscope store" in r.err and len(r.err.strip().splitlines()) == 1
    assert bad.read_text() == "hello, this is not a database at all"


# -- gpuscope run --otlp ---------------------------------------------------------------------------

class _OtlpReceiver(_HttpReceiver):
    """Metrics and traces over OTLP/HTTP, decoded by path."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        super().__init__()
        self.traces: list[Any] = []
        outer = self
        handler = self.server.RequestHandlerClass
        base_post = handler.do_POST

        def do_post(h: Any) -> None:
            if h.path == "/v1/traces":
                body = h.rfile.read(int(h.headers["Content-Length"]))
                if h.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                outer.traces.append(req)
                h.send_response(200)
                h.send_header("Content-Type", "application/x-protobuf")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            base_post(h)

        handler.do_POST = do_post


@pytest.mark.slow
def test_run_otlp_exports_telemetry_and_spans_inside_the_callers_trace(tmp_path: Path) -> None:
    rx = _OtlpReceiver()
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    child = ("import time, gpuscope\n"
             "gpuscope.mark('prefill', prompt_tokens=16, phase='prefill')\n"
             "for i in range(3):\n"
             "    time.sleep(0.3); gpuscope.mark('decode', tokens=4, step=i)\n"
             "time.sleep(0.3)\n")
    try:
        env = dict(os.environ, TRACEPARENT=f"00-{trace_id}-{parent_id}-01", OTEL_METRIC_EXPORT_INTERVAL="300",
                   GPUSCOPE_DB=str(tmp_path / "s.duckdb"))
        p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--replay", str(RECORDING), "--no-profile",
                            "--otlp", f"http://127.0.0.1:{rx.port}", "--json", "--", sys.executable, "-c", child,
                            "--api-key=sk-secretvalue123"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    finally:
        rx.close()
    import json as _json

    summary = _json.loads(p.stdout)
    assert summary["otlp"]["spans_exported"] is True and summary["otlp"]["metric_exports"] >= 1
    metrics, resources = _metrics(rx.requests)
    assert "hw.power" in metrics and any(r.get("gpuscope.run.name") for r in resources)
    spans = [s for req in rx.traces for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    run = next(s for s in spans if s.name == "gpuscope run")
    assert run.trace_id.hex() == trace_id and run.parent_span_id.hex() == parent_id  # inside the caller's trace
    attrs = {kv.key: kv.value for kv in run.attributes}
    assert attrs["process.exit.code"].int_value == 0 and attrs["gpuscope.run.id"].int_value == summary["run_id"]
    command = attrs["gpuscope.run.command"].string_value
    assert "sk-secretvalue123" not in command and "--api-key" in command  # redacted, as stored
    names = [e.name for e in run.events]
    assert names == ["prefill", "decode", "decode", "decode"]
    step = {kv.key: kv.value for kv in run.events[2].attributes}
    assert step["gpuscope.mark.tokens"].int_value == 4 and step["gpuscope.mark.step"].int_value == 1
    assert "gpuscope.decode.tokens_per_s" in attrs
    assert len(spans) == 1  # no profiler window, and never a span per kernel
    # nothing secret anywhere in what went out
    raw = b"".join(r.SerializeToString() for r in rx.requests + rx.traces)
    assert b"sk-secretvalue123" not in raw


def test_span_plan_has_a_child_per_window_and_the_analysis_shares() -> None:
    from gpuscope.otel.spans import run_span_plan

    summary = {"run_id": 7, "exit_code": 3,
               "analysis": {"gpu_activity": True, "devices": [{"key": "gpu0", "name": "NVIDIA H100 80GB HBM3"}],
                            "time_us": {"compute": 60.0, "communication": 10.0, "memory": 10.0, "idle": 20.0},
                            "ops": [{"roof_us": 30.0, "kernel_us": 60.0}, {"roof_us": None, "kernel_us": 5.0}]},
               "telemetry": {"generation": {"tokens_per_s": 120.0, "decode": {"tokens_per_s": 150.0}}, "energy_j": 42.0}}
    windows = [{"pid": 11, "start_ns": 100, "end_ns": 200, "open_ns": 90, "written_ns": 260, "label": "1"},
               {"pid": 11, "start_ns": 300}]  # an unfinished window is left out
    plan = run_span_plan(summary, name="r", command="python x.py", started_ns=0, ended_ns=1000, windows=windows,
                         marks=[{"ts_ns": 150, "name": "decode", "tokens": 2, "fields": {"x": 1}}])
    a = plan["attributes"]
    assert a["process.exit.code"] == 3 and a["gpuscope.time.compute_share"] == 0.6 and a["gpuscope.time.idle_share"] == 0.2
    assert a["gpuscope.roofline.pct_of_roof"] == 50.0 and a["gpuscope.tokens_per_s"] == 120.0
    assert a["gpuscope.decode.tokens_per_s"] == 150.0 and a["gpuscope.energy_j"] == 42.0
    assert a["gpuscope.run.devices"] == ["NVIDIA H100 80GB HBM3"]
    assert [c["name"] for c in plan["children"]] == ["profiler window 1"]
    assert plan["children"][0]["attributes"]["gpuscope.window.written_ns"] == 260
    assert plan["events"] == [{"name": "decode", "ts_ns": 150, "attributes": {"gpuscope.mark.tokens": 2}}]


@pytest.mark.slow
def test_sigterm_exports_what_monitor_holds_before_exiting() -> None:
    """An export interval far beyond the test: the one export the receiver gets is the flush at
    SIGTERM, with the replay's values."""
    rx = _HttpReceiver()
    try:
        p = _monitor("--otlp", f"http://127.0.0.1:{rx.port}", "--interval", "0.2",
                     env={"OTEL_METRIC_EXPORT_INTERVAL": "600000"})
        time.sleep(3.0)
        assert not rx.requests  # nothing periodic yet
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert len(rx.requests) == 1
        _check_otlp(rx.requests)
    finally:
        rx.close()


def test_ecc_errors_are_hw_errors_by_error_type_counted_since_monitor_started_and_dcgm_counters() -> None:
    """The ECC counts run since the driver loaded; exported with monitor's start as their
    start, they are what was counted since (12 then 15 corrected: 3), and a driver reload (the
    count back to 2) adds its 2 rather than going back."""
    from gpuscope.collectors.base import DeviceInfo, Sample
    from gpuscope.otel.dcgm import labels, samples
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    d = DeviceInfo(key="gpu0", vendor="nvidia", index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1")
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=1.0, started_ns=0, vendors=[], devices=[d]))
    seen = []
    for k, (sbe, dbe) in enumerate([(12, 1), (15, 1), (2, 0)]):
        state.write(SampleBatch([(k, [Sample("gpu0", k * 10**9, {"ecc_corrected_errors": sbe,
                                                                 "ecc_uncorrected_errors": dbe})])]))
        seen.append({dict(a)["error.type"]: v for v, a in state.observe("hw.errors")})
    assert seen == [{"corrected": 0, "uncorrected": 0}, {"corrected": 3, "uncorrected": 0},
                    {"corrected": 5, "uncorrected": 0}]
    got = {n: (k, v) for n, k, _, v in samples(labels(d, "h", None), {"ecc_corrected_errors": 12})}
    assert got["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == ("counter", 12.0) and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in got


def test_a_counter_read_once_a_second_stays_in_every_scrape() -> None:
    """An H100 answers the energy field in 3-4 ms, so the collector reads it once a second
    (collectors/nvml_probe.py SLOW_FIELD_S): most ticks carry no energy. The exported gauge and the
    DCGM-named endpoint's values keep the last reading (gpuscope.metrics.HOLD_S) instead of
    dropping the series between readings; the store keeps those ticks NULL."""
    from fakes.fake_pynvml import FakeNvml, load_table

    from gpuscope.collectors import NvmlCollector
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    table = load_table("nvml_h100_a100.json")
    table["devices"][0]["base"]["field_cost_us"] = {"83": 3000}
    fake = FakeNvml(table)
    collector = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0, slow_counter_interval_s=60)
    devices = collector.open()
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=devices))
    seen, energy = [], []
    for _ in range(3):
        rows = collector.sample()
        seen.append("energy_j" in next(r for r in rows if r.device == "gpu0").values)
        state.write(SampleBatch([(0, rows)]))
        energy.append([v for v, a in state.observe("hw.energy") if dict(a)["hw.name"] == "gpu0"])
        fake.step()
    collector.close()
    assert seen == [True, False, False]  # the collector reads it once in these three ticks
    assert all(len(e) == 1 for e in energy) and energy[0] == energy[1] == energy[2]
    assert state.latest()["gpu0"][0]["energy_j"] == energy[0][0]
