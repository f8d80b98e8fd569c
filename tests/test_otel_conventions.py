"""Issue 32: `gpuscope monitor`'s OpenTelemetry export against the semantic conventions' own
definitions (fixtures/semconv/v1.44.0.json: a few definitions copied from the conventions'
model files, with their source), its counters across resets (a looping replay, a driver reload)
read over the exporter and by a real Prometheus, and its endpoints as documented (IPv6, the
OTLP signal path, one log line a minute with the endpoint down)."""
from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, run_cli
from test_monitor import H100_UUID, RECORDING, _free_port, _HttpReceiver, _monitor, _scrape, _series

pytest.importorskip("opentelemetry.sdk.metrics")
pytest.importorskip("opentelemetry.exporter.prometheus")

SEMCONV = json.loads((FIXTURES / "semconv" / "v1.44.0.json").read_text())
_KIND = {"counter": "counter", "updowncounter": "updown", "gauge": "gauge"}


# -- helpers -------------------------------------------------------------------------------------

def _state_from_recording(ticks: int = 19, extra: dict[str, dict[str, Any]] | None = None) -> Any:
    """A TelemetryState fed the synthetic recording's first ``ticks`` ticks (gpu1 is lost at
    tick 20); ``extra``: values added to a device's rows (device -> values)."""
    from gpuscope.collectors.base import Sample
    from gpuscope.collectors.replay import load_recording
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    rec = load_recording(RECORDING)
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=list(rec.devices)))
    for k, tick in enumerate(rec.ticks[:ticks]):
        state.write(SampleBatch([(k, [Sample(r["device"], r["ts_ns"], {**r["values"], **(extra or {}).get(r["device"], {})},
                                             bool(r.get("lost"))) for r in tick])]))
    return state


def _collect(state: Any) -> tuple[Any, dict[str, Any]]:
    """(resource metrics, name -> Metric) of one collection by the SDK's in-memory reader."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from gpuscope.otel.sink import meter_provider

    reader = InMemoryMetricReader()
    provider = meter_provider(state, [reader], {"host.name": "test"})
    try:
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    rm = data.resource_metrics[0]
    return rm, {m.name: m for sm in rm.scope_metrics for m in sm.metrics}


def _gpu(state: Any, device: str, rows: list[tuple[int, dict[str, Any], bool]]) -> None:
    from gpuscope.collectors.base import Sample
    from gpuscope.sinks.base import SampleBatch

    for k, (ts_ns, values, lost) in enumerate(rows):
        state.write(SampleBatch([(k, [Sample(device, ts_ns, values, lost)])]))


def _one_gpu_state(vendor: str = "nvidia") -> Any:
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SamplerInfo

    d = DeviceInfo(key="gpu0", vendor=vendor, index=0, name="GPU", uuid="GPU-1",
                   properties={"serial_number": "1652823054321", "vbios_version": "96.00.74.00.01"})
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=[d]))
    return state


# -- conventions ---------------------------------------------------------------------------------

def test_instruments_have_the_conventions_instrument_unit_and_value_type() -> None:
    from gpuscope.otel.names import INSTRUMENTS_BY_NAME, SCHEMA_URL, SEMCONV_VERSION

    assert SEMCONV_VERSION == SEMCONV["version"] and SCHEMA_URL == SEMCONV["schema_url"]
    checked = 0
    for name, spec in SEMCONV["metrics"].items():
        inst = INSTRUMENTS_BY_NAME[name]  # every metric in the fixture is one monitor exports
        assert (inst.kind, inst.unit, inst.value_type) == (_KIND[spec["instrument"]], spec["unit"], spec["value_type"]), name
        checked += 1
    assert checked == 14
    assert "gpuscope.gpu.fan.speed" not in INSTRUMENTS_BY_NAME  # the conventions' name instead


def test_points_carry_the_conventions_value_types_attributes_and_schema_url() -> None:
    from gpuscope.otel.names import SCHEMA_URL

    state = _state_from_recording(extra={"gpu0": {"fan_speed": 0.3, "ecc_corrected_errors": 2, "xid_errors": 0}})
    rm, metrics = _collect(state)
    assert rm.resource.schema_url == SCHEMA_URL and rm.scope_metrics[0].scope.schema_url == SCHEMA_URL
    for name, spec in SEMCONV["metrics"].items():
        points = list(metrics[name].data.data_points)
        assert points, name
        for p in points:
            want = int if spec["value_type"] == "int" else float
            assert type(p.value) is want, (name, p.value)
            attrs = dict(p.attributes)
            missing = [a for a in spec["required"] if a not in attrs]
            assert not missing, (name, missing)
            if name.startswith("hw."):
                # nothing the definition does not list, other than gpuscope's hw.type on GPU
                # metrics (the common hardware metrics require it there) and the GPU's
                # descriptions on the common metrics
                extra = set(attrs) - set(spec["attributes"]) - {"hw.type", "hw.vendor", "hw.model", "hw.driver_version"}
                assert not extra, (name, extra)
    # a sensor and a fan are components of their own: own hw.id, the GPU as hw.parent, no hw.type
    for name, ids in (("hw.temperature", {f"{H100_UUID}/temperature/gpu", f"{H100_UUID}/temperature/memory"}),
                      ("hw.fan.speed_ratio", {f"{H100_UUID}/fan"})):
        pts = [dict(p.attributes) for p in metrics[name].data.data_points if p.attributes["hw.parent"] == H100_UUID]
        assert {a["hw.id"] for a in pts} == ids, name
        assert all("hw.type" not in a and a["hw.name"] == "gpu0" for a in pts), name
    fan = [p.value for p in metrics["hw.fan.speed_ratio"].data.data_points]
    assert fan == [0.3]
    # hw.energy counts from monitor's start (its OTLP start time), not from the driver's load:
    # the recording's counter went from 98765501.1 J to 98766415.5 J over these 19 ticks
    (energy,) = [p for p in metrics["hw.energy"].data.data_points if p.attributes["hw.id"] == H100_UUID]
    assert energy.value == pytest.approx(98766415.5 - 98765501.1) and 0 < energy.start_time_unix_nano <= energy.time_unix_nano
    # the host: memory used is the `used` state (MemTotal - MemAvailable, what the collector reads)
    (usage,) = metrics["system.memory.usage"].data.data_points
    assert dict(usage.attributes) == {"system.memory.state": "used"}
    assert "used" in SEMCONV["attributes"]["system.memory.state"]["members"]
    # system.cpu.utilization: the recording was made before schema 10, its host row holds only
    # the busy total, exported as one point without cpu.mode (docs/otel.md)
    (cpu,) = metrics["system.cpu.utilization"].data.data_points
    assert "cpu.mode" not in dict(cpu.attributes)
    # every hw.state a GPU reports is one the conventions list for a GPU
    states = {p.attributes["hw.state"] for p in metrics["hw.status"].data.data_points}
    assert states == {"ok", "degraded", "failed"} and states <= set(SEMCONV["gpu_states"])


def test_cpu_utilization_has_a_point_per_cpu_mode_the_conventions_name() -> None:
    """A host row with its CPU time by mode (schema 10): one point per mode, each carrying the
    conventions' cpu.mode attribute with one of their values, summing to 1, and no point
    without cpu.mode beside them (the busy total would be counted twice by a sum)."""
    spec = SEMCONV["metrics"]["system.cpu.utilization"]
    assert "cpu.mode" in spec["attributes"]
    modes = {"host_cpu_user_util": 0.5, "host_cpu_system_util": 0.125, "host_cpu_nice_util": 0.0,
             "host_cpu_idle_util": 0.25, "host_cpu_iowait_util": 0.0625, "host_cpu_interrupt_util": 0.03125,
             "host_cpu_steal_util": 0.03125}
    _, metrics = _collect(_state_from_recording(extra={"host": modes}))
    points = {dict(p.attributes).get("cpu.mode"): p.value for p in metrics["system.cpu.utilization"].data.data_points}
    assert None not in points
    assert points == {"user": 0.5, "system": 0.125, "nice": 0.0, "idle": 0.25, "iowait": 0.0625,
                      "interrupt": 0.03125, "steal": 0.03125}
    assert set(points) <= set(SEMCONV["attributes"]["cpu.mode"]["members"])
    assert sum(points.values()) == 1.0 and all(type(v) is float for v in points.values())
    # the host collector's modes are the conventions' values, one stored column each
    from gpuscope.collectors.host import CPU_MODE_COLUMNS
    from gpuscope.otel.names import CPU_MODE_METRICS, DIRECT

    assert set(CPU_MODE_COLUMNS) <= set(SEMCONV["attributes"]["cpu.mode"]["members"])
    assert {dict(DIRECT[m])["cpu.mode"]: m for m in CPU_MODE_METRICS} == CPU_MODE_COLUMNS
    # a platform without iowait, interrupt or steal (macOS): those modes have no point
    mac = {**modes, "host_cpu_iowait_util": None, "host_cpu_interrupt_util": None, "host_cpu_steal_util": None}
    _, metrics = _collect(_state_from_recording(extra={"host": mac}))
    assert {p.attributes["cpu.mode"] for p in metrics["system.cpu.utilization"].data.data_points} == \
        {"user", "system", "nice", "idle"}


def test_process_pid_is_an_int_as_the_conventions_type_it() -> None:
    from gpuscope.collectors.base import ProcessSample
    from gpuscope.otel.names import process_points

    assert SEMCONV["attributes"]["process.pid"]["type"] == "int"
    procs = [ProcessSample(pid=4242, gpu_mem_bytes=2**30, gpu_util=0.5)]
    (attrs,) = {a for _, _, a in process_points((("hw.id", "GPU-1"),), procs, 5, lambda pid: "vllm")}
    assert dict(attrs)["process.pid"] == 4242 and type(dict(attrs)["process.pid"]) is int


def test_serial_number_and_vbios_become_the_recommended_gpu_attributes() -> None:
    state = _one_gpu_state()
    _gpu(state, "gpu0", [(0, {"power_w": 100.0}, False)])
    ((_, attrs),) = state.observe("hw.power")
    assert dict(attrs)["hw.serial_number"] == "1652823054321" and dict(attrs)["hw.firmware_version"] == "96.00.74.00.01"


@pytest.mark.parametrize("vendor, reasons, state", [
    ("nvidia", 0x0, "ok"),
    ("nvidia", 0x4, "ok"),         # SW power cap: a loaded GPU at its cap is operating normally
    ("nvidia", 0x1 | 0x2, "ok"),   # idle, application clocks
    ("nvidia", 0x40, "degraded"),  # HW thermal slowdown
    ("nvidia", 0x20 | 0x4, "degraded"),  # SW thermal slowdown (with the power cap)
    ("nvidia", 0x8, "degraded"),   # HW slowdown
    ("nvidia", 0x80, "degraded"),  # HW power brake
    ("amd", 0x40, "ok"),           # AMD's bits are not NVIDIA's: not mapped
])
def test_hw_status_is_degraded_while_the_gpu_slows_for_a_thermal_or_hardware_reason(vendor: str, reasons: int,
                                                                                  state: str) -> None:
    st = _one_gpu_state(vendor)
    _gpu(st, "gpu0", [(0, {"throttle_reasons": reasons}, False)])
    got = {dict(a)["hw.state"]: v for v, a in st.observe("hw.status")}
    assert got == {s: float(s == state) for s in ("ok", "degraded", "failed")}


def test_a_lost_gpu_keeps_only_its_failed_status() -> None:
    state = _state_from_recording(ticks=25)  # gpu1 falls off the bus at tick 20
    gpu1 = [n for n in ("hw.gpu.io", "hw.energy", "hw.errors", "hw.power", "gpuscope.gpu.link.io", "hw.temperature")
            for v, a in state.observe(n) if dict(a).get("hw.name") == "gpu1" or dict(a).get("hw.parent") == "gpu1"]
    assert gpu1 == []
    status = {dict(a)["hw.state"]: v for v, a in state.observe("hw.status") if dict(a)["hw.name"] == "gpu1"}
    assert status == {"ok": 0.0, "degraded": 0.0, "failed": 1.0}
    assert any(dict(a)["hw.name"] == "gpu0" for _, a in state.observe("hw.gpu.io"))  # the other GPU goes on


# -- counters across resets ----------------------------------------------------------------------

def test_energy_is_counted_since_monitor_started_across_a_replay_restart_and_a_driver_reload() -> None:
    """Readings every 0.1 s at 100 W: +10 J a step. A replay starting over (back to an
    unrelated value) counts the power reading over that step (10 J); a driver reload (back to
    near 0) counts the new value (4 J since the reload); a 32-bit wrap of a microjoule
    counter (2^32 uJ = 4294.967296 J) counts across."""
    from gpuscope.otel.export import DcgmNames

    state = _one_gpu_state()
    energy = [5000.0, 5010.0, 5020.0, 3000.0, 3010.0, 4.0, 14.0]
    rows = [(k * 10**8, {"energy_j": e, "power_w": 100.0, "power_limit_w": 700.0}, False) for k, e in enumerate(energy)]
    totals = []
    for row in rows:
        _gpu(state, "gpu0", [row])
        totals.append(state.observe("hw.energy")[0][0])
    assert totals == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0, 44.0, 54.0])
    assert state.latest()["gpu0"][0]["energy_j"] == pytest.approx(54.0)
    text = DcgmNames(state, "h").render().decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{")]
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(54000.0)  # mJ
    wrap = _one_gpu_state()
    _gpu(wrap, "gpu0", [(0, {"energy_j": 4294.0, "power_w": 100.0}, False), (10**8, {"energy_j": 9.032704, "power_w": 100.0}, False)])
    assert wrap.observe("hw.energy")[0][0] == pytest.approx(10.0)


def _small_recording(tmp_path: Path, ticks: int = 5) -> Path:
    """The synthetic recording's first ``ticks`` ticks: played in a loop, its energy counter
    goes back every ``ticks`` ticks."""
    lines = RECORDING.read_text().splitlines()
    keep = [lines[0]] + [ln for ln in lines[1:] if json.loads(ln).get("tick", 10**9) < ticks]
    out = tmp_path / "loop.jsonl"
    out.write_text("\n".join(keep) + "\n")
    return out


@pytest.mark.slow
def test_a_looping_replay_never_takes_a_counter_back_on_the_endpoint(tmp_path: Path) -> None:
    rec = _small_recording(tmp_path)
    port = _free_port()
    mon = subprocess.Popen([*_monitor_cmd(rec), "--prometheus", str(port), "--interval", "0.05"],
                           cwd=_repo(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, list[float]] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen.get("energy", [])) < 25:
            time.sleep(0.1)  # a pace, not a wait for something: the endpoint serves a body for 0.2 s
            try:
                text = _scrape(port)
            except (urllib.error.URLError, ConnectionError):
                continue
            for key, name in (("energy", "hw_energy_joules_total"), ("io", "hw_gpu_io_bytes_total")):
                vals = [v for lab, v in _series(text, name) if lab.get("hw_name") == "gpu0"
                        and lab.get("network_io_direction", "transmit") == "transmit"]
                if vals:
                    seen.setdefault(key, []).append(vals[0])
    finally:
        mon.send_signal(signal.SIGTERM)
        mon.communicate(timeout=30)
    energy = seen["energy"]
    # 4 steps of ~69 J a loop: a few loops went by, and not one scrape went back
    assert len(energy) >= 25 and energy[-1] > 2 * 276, energy
    assert all(b >= a for a, b in zip(energy, energy[1:])), energy
    assert all(b >= a for a, b in zip(seen["io"], seen["io"][1:])), seen["io"]


def _repo() -> Path:
    return Path(__file__).resolve().parents[1]


def _monitor_cmd(recording: Path) -> list[str]:
    import sys

    return [sys.executable, "-m", "gpuscope", "monitor", "--replay", str(recording)]


@pytest.mark.slow
def test_a_real_prometheus_sees_no_counter_reset_over_a_looping_replay(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (apt-get install prometheus; .ci/run installs it in CI)")
    rec = _small_recording(tmp_path)
    otel_port, dcgm_port, prom_port = _free_port(), _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpuscope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{otel_port}', '127.0.0.1:{dcgm_port}']\n")
    mons = [subprocess.Popen([*_monitor_cmd(rec), "--prometheus", str(port), "--interval", "0.05",
                              "--prometheus-names", names], cwd=_repo(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
            for port, names in ((otel_port, "otel"), (dcgm_port, "dcgm"))]
    prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    names = ('hw_energy_joules_total{hw_name="gpu0"}', 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}')
    try:
        counts = [0.0, 0.0]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and min(counts) < 6:
            time.sleep(0.5)
            counts = [max((v for _, v in _query(prom_port, f"count_over_time({n}[5m])")), default=0.0) for n in names]
        assert min(counts) >= 6, counts  # six scrapes each, over many loops of the recording
        for n in names:
            resets = _query(prom_port, f"resets({n}[5m])")
            assert resets and resets[0][1] == 0.0, (n, resets)
            rate = _query(prom_port, f"rate({n}[5m])")
            scale = 1000.0 if n.startswith("DCGM") else 1.0
            # the recording's GPU draws 660-700 W: never the 32.9 MW of a counter read as reset
            assert rate and 0 < rate[0][1] / scale < 2000.0, (n, rate)
    finally:
        prom.send_signal(signal.SIGTERM)
        for m in mons:
            m.send_signal(signal.SIGTERM)
        prom.communicate(timeout=30)
        for m in mons:
            m.communicate(timeout=30)


def _query(port: int, promql: str) -> list[tuple[dict[str, str], float]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            doc: dict[str, Any] = json.loads(r.read())
    except OSError:
        return []
    return [(res["metric"], float(res["value"][1])) for res in doc.get("data", {}).get("result", [])]


# -- endpoints -----------------------------------------------------------------------------------

@pytest.mark.parametrize("base, metrics, traces", [
    ("http://h:4318", "http://h:4318/v1/metrics", "http://h:4318/v1/traces"),
    ("http://h:4318/", "http://h:4318/v1/metrics", "http://h:4318/v1/traces"),
    ("http://h:4318/my", "http://h:4318/my/v1/metrics", "http://h:4318/my/v1/traces"),
    ("https://h/a/b/", "https://h/a/b/v1/metrics", "https://h/a/b/v1/traces"),
])
def test_the_otlp_url_is_a_base_url_as_the_specification_reads_otel_exporter_otlp_endpoint(
        base: str, metrics: str, traces: str) -> None:
    from gpuscope.otel.otlp import signal_url
    from gpuscope.otel.spans import traces_endpoint

    assert signal_url(base, "metrics") == metrics and traces_endpoint(base) == traces


@pytest.mark.slow
def test_otlp_posts_to_the_base_urls_signal_path_and_a_signal_url_as_is() -> None:
    rx = _HttpReceiver()
    try:
        p = _monitor("--otlp", f"http://127.0.0.1:{rx.port}/my", "--interval", "0.2", "--seconds", "1")
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert rx.requests and set(rx.paths) == {"/my/v1/metrics"}, rx.paths
        rx.paths.clear()
        p = _monitor("--otlp", "--interval", "0.2", "--seconds", "1",
                     env={"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{rx.port}/custom/ingest"})
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert set(rx.paths) == {"/custom/ingest"}, rx.paths
    finally:
        rx.close()


def test_a_signal_path_in_the_otlp_flag_is_refused_with_one_line() -> None:
    r = run_cli("monitor", "--otlp", "http://collector:4318/v1/metrics")
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and "--otlp" in lines[0] and "http://collector:4318," in lines[0], r.err


@pytest.mark.slow
def test_otlp_endpoint_down_says_one_line_in_all() -> None:
    """A 0.3 s export interval for about 3 s: some ten failed exports, each retried by the
    SDK's exporter, and one line about them (the SDK's own lines swallowed)."""
    dead = _free_port()
    p = _monitor("--otlp", f"http://127.0.0.1:{dead}", "--interval", "0.2", "--seconds", "3",
                 env={"OTEL_METRIC_EXPORT_INTERVAL": "300"})
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err  # the start-up line and the one about the endpoint
    assert lines[1].startswith(f"gpuscope monitor: OTLP export to http://127.0.0.1:{dead} failed")
    assert "the exporter said: " in lines[1]  # the SDK's message, in our line instead of its own


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.slow
def test_prometheus_on_an_ipv6_host() -> None:
    """``[::]`` (every interface, IPv6 and, by Linux's default, IPv4), scraped over ``[::1]``."""
    if not _ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    port, host = _free_port(), "[::]"
    p = _monitor("--prometheus", f"{host}:{port}", "--interval", "0.2")
    text = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "hw_power_watts{" not in text:
            try:
                with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "hw_power_watts{" in text and f"Prometheus on http://{host}:{port}/metrics" in err
