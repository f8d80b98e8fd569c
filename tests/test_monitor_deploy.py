"""What people deploy `gpuscope monitor` with (deploy/): a real Prometheus scrapes
`monitor --replay` and its HTTP API answers with the replay's values; the scrape config passes
`promtool check config`; every query of the Grafana dashboard names a metric monitor exports
(the names computed by the OpenTelemetry SDK's own Prometheus reader from the recording); the
systemd unit and the Collector pipeline match monitor's flags and defaults."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, run_cli
from test_monitor import H100_UUID, _free_port, _monitor, _recorded

pytest.importorskip("opentelemetry.exporter.prometheus")

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
#: PromQL words that are not metric names.
PROMQL_WORDS = {"rate", "irate", "increase", "sum", "avg", "max", "min", "by", "without", "count", "label_values",
                "instance", "hw_name", "on", "ignoring", "group_left", "group_right", "topk", "bottomk"}


def exported_prometheus_names() -> set[str]:
    """Every metric name on monitor's /metrics for the synthetic recording (host included), as
    the SDK's Prometheus reader writes them."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuscope.collectors.base import Sample
    from gpuscope.collectors.replay import load_recording
    from gpuscope.otel.sink import TelemetryState, meter_provider
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    rec = load_recording(FIXTURES / "recordings" / "synthetic_h100_a100.jsonl")
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=list(rec.devices)))
    for k, tick in enumerate(rec.ticks[:19]):  # before gpu1 is lost: every metric has a point
        state.write(SampleBatch([(k, [Sample(r["device"], r["ts_ns"], r["values"], bool(r.get("lost")))
                                      for r in tick])]))
    registry = CollectorRegistry()
    own = [("gpuscope.monitor.export.dropped", "counter", "{export}", "d", lambda: [(0.0, ())]),
           ("gpuscope.monitor.export.failures", "counter", "{export}", "f", lambda: [(0.0, ())])]
    provider = meter_provider(state, [PrometheusMetricReader(registry=registry)], {"host.name": "test"}, own)
    try:
        text = generate_latest(registry).decode()
    finally:
        provider.shutdown()
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", text, re.M)}


def test_every_dashboard_query_names_an_exported_metric() -> None:
    exported = exported_prometheus_names()
    assert {"hw_power_watts", "hw_energy_joules_total", "hw_gpu_utilization", "hw_gpu_io_bytes_total"} <= exported
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert len(exprs) >= 10
    for expr in exprs:
        bare = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
        bare = re.sub(r"\{[^}]*\}", "{}", bare)  # nor are label names
        bare = re.sub(r"\[[^\]]*\]", "", bare)  # ranges
        names = {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if w not in PROMQL_WORDS}
        assert names, expr
        assert names <= exported, (expr, names - exported)


def test_scrape_config_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    p = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_systemd_unit_runs_monitor_with_flags_it_takes() -> None:
    unit = (DEPLOY / "gpuscope-monitor.service").read_text()
    exec_start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "gpuscope" and argv[1] == "monitor"
    from gpuscope.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert args.prometheus.startswith("127.0.0.1:")  # loopback in the example too
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:
        # verify the unit's syntax (ExecStart's binary need not exist here)
        p = subprocess.run([analyze, "verify", str(DEPLOY / "gpuscope-monitor.service")], capture_output=True, text=True)
        problems = [ln for ln in (p.stdout + p.stderr).splitlines()
                    if ln.strip() and "is not executable" not in ln]
        assert not problems, problems


def test_collector_pipeline_receives_on_monitors_default_ports() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    protocols = doc["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"].endswith(":4318") and protocols["grpc"]["endpoint"].endswith(":4317")
    assert doc["service"]["pipelines"]["metrics"]["receivers"] == ["otlp"]


QUERIES = {"otel": ('hw_power_watts{hw_name="gpu0"}', 'hw_gpu_memory_limit_bytes{hw_name="gpu0"}', "hw_id", 1.0),
           "dcgm": ('DCGM_FI_DEV_POWER_USAGE{gpu="0"}', 'DCGM_FI_DEV_FB_USED{gpu="0"}', "UUID", 2.0**-20)}


@pytest.mark.slow
@pytest.mark.parametrize("names", ["otel", "dcgm"])
def test_a_real_prometheus_scrapes_monitor(tmp_path: Path, names: str) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (apt-get install prometheus; .ci/run installs it in CI)")
    port, prom_port = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        f"scrape_configs:\n  - job_name: gpuscope\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    mon = _monitor("--prometheus", str(port), "--interval", "0.2", "--prometheus-names", names)
    q_power, q_mem, id_label, mem_scale = QUERIES[names]
    prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        power = limit = None
        for _ in range(300):
            time.sleep(0.2)
            power = _query(prom_port, q_power)
            limit = _query(prom_port, q_mem)
            if power and limit:
                break
        assert power and limit, "Prometheus never had the series"
        labels, value = power[0]
        assert value in _recorded("gpu0", "power_w")
        assert labels[id_label] == H100_UUID and labels["job"] == "gpuscope"
        memory = "mem_total_bytes" if names == "otel" else "mem_used_bytes"
        assert limit[0][1] in {v * mem_scale for v in _recorded("gpu0", memory)}
        assert _query(prom_port, "up{job=\"gpuscope\"}")[0][1] == 1.0
    finally:
        prom.send_signal(signal.SIGTERM)
        mon.send_signal(signal.SIGTERM)
        prom.communicate(timeout=30)
        mon.communicate(timeout=30)
    assert mon.returncode == 0


def _query(port: int, promql: str) -> list[tuple[dict[str, str], float]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            doc: dict[str, Any] = json.loads(r.read())
    except OSError:
        return []
    return [(res["metric"], float(res["value"][1])) for res in doc.get("data", {}).get("result", [])]


def test_run_cli_monitor_help_names_the_variables() -> None:
    out = " ".join(run_cli("monitor", "--help").out.split())
    for var in ("OTEL_EXPORTER_OTLP_", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME", "OTEL_METRIC_EXPORT_INTERVAL"):
        assert var in out
