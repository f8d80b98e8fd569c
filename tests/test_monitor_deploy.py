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
                "instance", "hw_name", "on", "ignoring", "group_left", "group_right", "topk", "bottomk", "or", "and",
                "unless"}


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


#: The OpenTelemetry Collector's UCUM -> Prometheus unit words and "per" units, as documented in
#: opentelemetry-collector-contrib pkg/translator/prometheus/normalize_name.go (unitMap, perUnitMap).
COLLECTOR_UNITS = {"d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
                   "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes",
                   "GiBy": "gibibytes", "TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
                   "TBy": "terabytes", "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts",
                   "g": "grams", "Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent", "$": "dollars"}
COLLECTOR_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^0-9A-Za-z]+", text) if w]


def collector_name(name: str, unit: str, kind: str) -> str:
    """The Prometheus name the Collector's prometheus / prometheusremotewrite exporters give an
    OTLP metric (``kind``: ``gauge``, ``counter`` = monotonic sum, ``updown`` = non-monotonic
    sum), by their documented rules: the name's words; the unit's word (mapped, else the unit
    cleaned) unless it is already a word of the name or holds ``{}``; ``per_<unit>`` for a
    ``/`` unit likewise; ``total`` last for a monotonic sum; ``ratio`` last for a gauge of unit ``1``."""
    words = _words(name)
    main, slash, per = unit.partition("/")
    main = main.strip()
    if main and "{" not in main and "}" not in main:
        word = "_".join(_words(COLLECTOR_UNITS.get(main, main)))
        if word and word not in words:
            words.append(word)
    per = per.strip()
    if slash and per and "{" not in per and "}" not in per:
        word = "_".join(_words(COLLECTOR_PER_UNITS.get(per, per)))
        if word and word not in words:
            words += ["per", word]
    if kind == "counter":
        words = [w for w in words if w != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        words = [w for w in words if w != "ratio"] + ["ratio"]
    out = "_".join(words)
    return "_" + out if out[:1].isdigit() else out


@pytest.mark.parametrize("name, unit, kind, expected", [
    # the Collector's own test cases (pkg/translator/prometheus/normalize_name_test.go)
    ("system.filesystem.usage", "By", "gauge", "system_filesystem_usage_bytes"),
    ("system.io", "By", "counter", "system_io_bytes_total"),
    ("network_transmitted_bytes_total", "By", "counter", "network_transmitted_bytes_total"),
    ("system.network.dropped", "{packets}", "counter", "system_network_dropped_total"),
    ("hw.gpu.memory.utilization", "1", "gauge", "hw_gpu_memory_utilization_ratio"),
    ("hw.fan.speed_ratio", "1", "gauge", "hw_fan_speed_ratio"),
    ("objects", "1", "counter", "objects_total"),
    ("hw.cpu.speed_limit", "Hz", "gauge", "hw_cpu_speed_limit_hertz"),
    ("astro.light.speed_limit", "m/s", "gauge", "astro_light_speed_limit_meters_per_second"),
    ("mongodbatlas.process.asserts", "{assertions}/s", "gauge", "mongodbatlas_process_asserts_per_second"),
    ("unsupported.metric.temperature", "°F", "gauge", "unsupported_metric_temperature_F"),
    ("3.14 digits", "", "gauge", "_3_14_digits"),
    # a unit the translators do not know stays as written: the mixed case monitor once exported
    ("gpuscope.gpu.clock.sm", "MHz", "gauge", "gpuscope_gpu_clock_sm_MHz"),
])
def test_collector_name_follows_the_collectors_documented_cases(name: str, unit: str, kind: str, expected: str) -> None:
    assert collector_name(name, unit, kind) == expected


def collector_prometheus_names() -> set[str]:
    """Every name monitor's metrics get on the Collector path (OTLP -> Collector -> Prometheus)."""
    from gpuscope.otel.names import INSTRUMENTS

    own = [("gpuscope.monitor.export.dropped", "{export}", "counter"),
           ("gpuscope.monitor.export.failures", "{export}", "counter")]
    return {collector_name(i.name, i.unit, i.kind) for i in INSTRUMENTS} | {collector_name(*m) for m in own}


def dashboard_queries() -> list[str]:
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    return exprs + [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]


def _metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
    bare = re.sub(r"\{[^}]*\}", "{}", bare)  # nor are label names
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # ranges
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if w not in PROMQL_WORDS}


def resolves(expr: str, names: set[str]) -> bool:
    """Whether ``expr`` has data when Prometheus holds ``names``: every ``(A or B ...)`` group
    needs one of its metrics, every metric outside such a group is needed itself."""
    groups = re.findall(r"\(([^()]*\bor\b[^()]*)\)", expr)
    rest = re.sub(r"\(([^()]*\bor\b[^()]*)\)", " ", expr)
    return all(_metric_names(g) & names for g in groups) and _metric_names(rest) <= names


def test_every_dashboard_query_resolves_on_a_direct_scrape_and_through_the_collector() -> None:
    direct = exported_prometheus_names()
    collector = collector_prometheus_names()
    assert {"hw_power_watts", "hw_energy_joules_total", "hw_gpu_utilization", "hw_gpu_io_bytes_total"} <= direct
    # the SDK's reader and the Collector name a unit-1 gauge differently, clocks (Hz) alike
    assert "hw_gpu_utilization_ratio" in collector and "hw_gpu_utilization" not in collector
    assert "gpuscope_gpu_clock_sm_hertz" in direct & collector
    exprs = dashboard_queries()
    assert len(exprs) >= 10
    for expr in exprs:
        names = _metric_names(expr)
        assert names and names <= direct | collector, (expr, names - direct - collector)
        assert resolves(expr, direct), ("direct scrape", expr)
        assert resolves(expr, collector), ("Collector", expr)


def test_the_resolution_check_can_fail() -> None:
    """A query naming only the direct name has no data on the Collector path, and vice versa."""
    assert not resolves('hw_gpu_utilization{hw_name=~"$gpu"}', {"hw_gpu_utilization_ratio"})
    assert resolves('(hw_gpu_utilization{a=""} or hw_gpu_utilization_ratio{a=""})', {"hw_gpu_utilization_ratio"})
    assert not resolves('(x{} or y{}) / z{}', {"x"})


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
        if names == "otel":  # every dashboard query parses and has data on a direct scrape
            for expr in dashboard_queries():
                if expr.startswith("label_values("):
                    continue
                promql = expr.replace("$instance", ".*").replace("$gpu", ".*")
                got: list[Any] = []
                for _ in range(50):
                    got = _query(prom_port, promql)
                    if got:
                        break
                    time.sleep(0.2)
                assert got, promql
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
