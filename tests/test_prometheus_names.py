"""`monitor --prometheus-names dcgm|amd` and docs/otel.md's one table of names: the table read as
markdown and checked against a live /metrics of `monitor --replay` for each name set (names, the
units the exporters' help texts state, the Collector's names by its documented rules), its
conversions checked value by value on one state, and dcgm-exporter's and AMD's exporter's
labels and number formats computed by hand."""
from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, run_cli
from test_monitor import _free_port, _monitor
from test_monitor_deploy import collector_name

pytest.importorskip("opentelemetry.sdk.metrics")
pytest.importorskip("opentelemetry.exporter.prometheus")

REPO = Path(__file__).resolve().parents[1]
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
NONE = {"", "—"}
#: One unit in base units (bytes, joules, hertz, ...; a ratio is 1, a percent 1/100).
SCALE = {"1": 1.0, "%": 0.01, "By": 1.0, "MiB": 2.0**20, "MB": 2.0**20, "W": 1.0, "J": 1.0, "mJ": 1e-3, "uJ": 1e-6,
         "Cel": 1.0, "Hz": 1.0, "MHz": 1e6, "By/s": 1.0, "{error}": 1.0, "{replay}": 1.0, "{row}": 1.0,
         "1000 KiB/s": 1024.0 * 1000}
#: What an exporter's help text says for a unit (dcgm-exporter: "(in MiB)", AMD: "in MB").
HELP_SAYS = {"%": ("%", "percent"), "MiB": ("MiB",), "MB": ("MB",), "W": ("(in W)", "Watts"), "mJ": ("mJ",),
             "uJ": ("uJ",), "Cel": ("(in C)", "Celsius"), "MHz": ("MHz",), "By/s": ("bytes per second",),
             "1": (), "1000 KiB/s": ()}


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def mapping_rows() -> list[dict[str, str]]:
    """docs/otel.md's table of OpenTelemetry, dcgm-exporter and AMD exporter names, one dict a row."""
    lines = (REPO / "docs" / "otel.md").read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| gpuscope metric | OpenTelemetry | unit | Prometheus: direct"))
    keys = ["stored", "otel", "otel_unit", "direct", "collector", "dcgm", "dcgm_unit", "amd", "amd_unit"]
    rows = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [_cell(c) for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(keys), line
        rows.append(dict(zip(keys, cells)))
    return rows


def _selector(text: str) -> tuple[str, dict[str, str]]:
    """``name{k="v"}`` -> (name, labels)."""
    name, _, rest = text.partition("{")
    return name, dict(re.findall(r'(\w+)="([^"]*)"', rest))


def _families(body: str) -> tuple[dict[str, str], dict[str, str], list[tuple[str, dict[str, str], str]]]:
    """(help by name, type by name, samples (name, labels, value text)) of a text-format body."""
    helps, types, samples = {}, {}, []
    for line in body.splitlines():
        if line.startswith("# HELP "):
            name, _, text = line[7:].partition(" ")
            helps[name] = text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            m = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
            assert m, line
            samples.append((m.group(1), dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")), m.group(3)))
    return helps, types, samples


def _recorded_metrics() -> set[str]:
    from gpuscope.collectors.replay import load_recording

    rec = load_recording(RECORDING)
    return {m for tick in rec.ticks for r in tick if str(r["device"]).startswith("gpu") for m in r["values"]}


def _live_host_metrics() -> set[str]:
    """What the host collector reads on this machine (monitor --replay's host is this one)."""
    from gpuscope.collectors import HostCollector

    c = HostCollector()
    (dev,) = c.open()
    c.close()
    return set(dev.supported)


def _stored_names(stored: str) -> list[str]:
    return re.findall(r"[a-z][a-z0-9_]*", stored)


# -- the table against a live /metrics ----------------------------------------------------------

def _scrape(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.headers["Content-Type"], r.read().decode()


@pytest.mark.slow
def test_the_docs_table_matches_a_live_metrics_endpoint_for_each_name_set() -> None:
    from gpuscope.otel.names import INSTRUMENTS_BY_NAME

    rows = mapping_rows()
    assert len(rows) >= 20
    recorded = _recorded_metrics() | _live_host_metrics()
    ports = {names: _free_port() for names in ("otel", "dcgm", "amd")}
    procs = {names: _monitor("--prometheus", str(port), "--prometheus-names", names, "--interval", "0.2")
             for names, port in ports.items()}
    # the host is this machine's (its CPU modes from the second tick on)
    wanted = {"otel": ("gpuscope_gpu_clock_sm_hertz{", 'cpu_mode="user"'), "dcgm": ("DCGM_FI_DEV_SM_CLOCK{",),
              "amd": ('clock_type="memory"',)}
    bodies: dict[str, tuple[str, str]] = {}
    try:
        deadline = time.monotonic() + 60
        while len(bodies) < 3 and time.monotonic() < deadline:
            for names, port in ports.items():
                if names in bodies:
                    continue
                try:
                    ctype, body = _scrape(port)
                except (urllib.error.URLError, ConnectionError):
                    continue
                if all(w in body for w in wanted[names]):
                    bodies[names] = (ctype, body)
            time.sleep(0.1)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.communicate(timeout=30)
    assert set(bodies) == {"otel", "dcgm", "amd"}, sorted(bodies)
    parsed = {names: _families(body) for names, (_, body) in bodies.items()}
    for names, (ctype, _) in bodies.items():
        assert ctype == "text/plain; version=0.0.4; charset=utf-8", (names, ctype)

    def present(names: str, selector: str) -> bool:
        name, want = _selector(selector)
        return any(n == name and all(lab.get(k) == v for k, v in want.items()) for n, lab, _ in parsed[names][2])

    for row in rows:
        inputs = _stored_names(row["stored"])
        on_replay = bool(inputs) and all(m in recorded for m in inputs)
        if row["otel"] not in NONE:
            inst = INSTRUMENTS_BY_NAME[row["otel"]]
            assert row["otel_unit"] == inst.unit, row
            assert _selector(row["collector"])[0] == collector_name(inst.name, inst.unit, inst.kind), row
            if on_replay:
                assert present("otel", row["direct"]), row["direct"]
        for names in ("dcgm", "amd"):
            selector, unit = row[names], row[f"{names}_unit"]
            if selector in NONE:
                continue
            helps = parsed[names][0]
            name = _selector(selector)[0]
            if on_replay or not inputs:
                assert present(names, selector), (names, selector)
            if name in helps and HELP_SAYS[unit]:
                assert any(t.lower() in helps[name].lower() for t in HELP_SAYS[unit]), (names, name, unit, helps[name])
    # and nothing on the other name sets' endpoints is missing from the table
    for names in ("dcgm", "amd"):
        documented = {_selector(r[names])[0] for r in rows}
        assert {n for n, _, _ in parsed[names][2]} <= documented, (names, {n for n, _, _ in parsed[names][2]} - documented)
    # dcgm-exporter's number format and host label, live
    dcgm = parsed["dcgm"][2]
    for name, lab, value in dcgm:
        assert "Hostname" in lab and "hostname" not in lab
        if name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"):
            assert re.fullmatch(r"-?[0-9]+", value), (name, value)
    assert {lab["gpu_id"] for n, lab, _ in parsed["amd"][2] if n == "gpu_used_vram"} == {"0", "1"}


# -- the table's conversions, value by value on one state ---------------------------------------

def _state() -> Any:
    from gpuscope.collectors.base import Sample
    from gpuscope.collectors.replay import load_recording
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    rec = load_recording(RECORDING)
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=list(rec.devices)))
    for k, tick in enumerate(rec.ticks[:19]):  # before gpu1 is lost
        state.write(SampleBatch([(k, [Sample(r["device"], r["ts_ns"], r["values"], bool(r.get("lost"))) for r in tick])]))
    return state


def _close(got: float, want: float, whole: bool) -> bool:
    # an integer field is rounded (or truncated) to a whole number: within 1 of the exact value
    return abs(got - want) <= (1.0 if whole else 1e-9 * max(1.0, abs(want)))


def test_the_docs_tables_conversions_hold_for_every_name_set() -> None:
    from gpuscope.metrics import METRICS_BY_NAME
    from gpuscope.otel import amd, dcgm
    from gpuscope.otel.names import INSTRUMENTS_BY_NAME

    state = _state()
    latest = state.latest()
    snapshot = state.snapshot()
    checked = 0
    for key in ("gpu0", "gpu1"):
        values, lost = latest[key]
        device = state.devices[key]
        got = {"dcgm": {(n, ()): v for n, _, _, v in dcgm.samples(dcgm.labels(device, "h", None), values)},
               "amd": {(n, extra): v for n, _, extra, v in amd.samples(values)}}
        hw_id = device.uuid
        for row in mapping_rows():
            inputs = _stored_names(row["stored"])
            if len(inputs) != 1 or row["stored"] != inputs[0] or values.get(inputs[0]) is None:
                continue
            stored = float(values[inputs[0]]) * SCALE[METRICS_BY_NAME[inputs[0]].otel_unit]  # in base units
            for names in ("dcgm", "amd"):
                if row[names] in NONE:
                    continue
                name, labels = _selector(row[names])
                v = got[names][(name, tuple(sorted(labels.items())))]
                assert _close(float(v), stored / SCALE[row[f"{names}_unit"]], isinstance(v, int)), (key, names, name, v)
                checked += 1
            inst = INSTRUMENTS_BY_NAME.get(row["otel"])
            if inst is not None and inst.kind != "counter":  # counters count from monitor's start
                want = _selector(row["direct"])[1]  # Prometheus label names: the attributes' dots as underscores
                points = [v for (n, attrs), v in snapshot.items() if n == inst.name
                          and dict(attrs).get("hw.id", "").split("/")[0] == hw_id
                          and want.items() <= {k.replace(".", "_"): a for k, a in attrs}.items()]
                assert len(points) == 1, (key, row["otel"], points)
                assert _close(points[0], stored / SCALE[row["otel_unit"]], False), (key, row["otel"], points[0])
                checked += 1
    assert checked >= 40


# -- dcgm-exporter's labels and numbers, by hand --------------------------------------------------

def test_dcgm_names_write_integers_where_dcgm_does_and_the_released_host_label() -> None:
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.otel.dcgm import NOT_GIVEN, labels, samples

    h100 = DeviceInfo(key="gpu0", vendor="nvidia", index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1",
                      pci_bus_id="00000000:18:00.0")
    lab = labels(h100, "node7", "570.86.15")
    assert list(lab) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
    assert lab["Hostname"] == "node7" and lab["device"] == "nvidia0"
    got = {n: (k, v) for n, k, _, v in samples(lab, {
        "gpu_util": 0.916, "mem_used_bytes": 3 * 2**30 + 2**19, "mem_total_bytes": 80 * 2**30, "mem_reserved_bytes": 2**29,
        "energy_j": 12.3456, "power_w": 455.25, "temp_c": 61.6, "sm_clock_mhz": 1980.0, "sm_active": 0.5,
        "xgmi_nvlink_tx_bytes_per_s": 3e9, "xgmi_nvlink_rx_bytes_per_s": 1e9, "pcie_tx_bytes_per_s": 1234.6})}
    assert got["DCGM_FI_DEV_GPU_UTIL"] == ("gauge", 92) and type(got["DCGM_FI_DEV_GPU_UTIL"][1]) is int
    assert got["DCGM_FI_DEV_FB_USED"][1] == 3072 and type(got["DCGM_FI_DEV_FB_USED"][1]) is int  # 3072.5 MiB truncated
    assert got["DCGM_FI_DEV_FB_RESERVED"][1] == 512
    assert got["DCGM_FI_DEV_FB_FREE"][1] == 80 * 1024 - 3072 - 1 - 512  # 77311.5 MiB truncated
    assert got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == ("counter", 12346)  # mJ
    assert got["DCGM_FI_DEV_POWER_USAGE"][1] == 455.25 and type(got["DCGM_FI_DEV_POWER_USAGE"][1]) is float
    assert got["DCGM_FI_DEV_GPU_TEMP"][1] == 62 and got["DCGM_FI_DEV_SM_CLOCK"][1] == 1980
    assert got["DCGM_FI_PROF_SM_ACTIVE"][1] == 0.5 and got["DCGM_FI_PROF_PCIE_TX_BYTES"][1] == 1235
    # NVLink: (3e9 + 1e9) B/s = 3,906,250 KiB/s, / 1000 = 3906.25 -> 3906, typed counter as dcgm-exporter has it
    assert got["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == ("counter", 3906)
    # the per-direction PROF rates: bytes/s as stored, INT64 gauges
    assert got["DCGM_FI_PROF_NVLINK_TX_BYTES"] == ("gauge", 3_000_000_000)
    assert got["DCGM_FI_PROF_NVLINK_RX_BYTES"] == ("gauge", 1_000_000_000)
    assert type(got["DCGM_FI_PROF_NVLINK_TX_BYTES"][1]) is int
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in NOT_GIVEN and "DCGM_FI_DEV_ENC_UTIL" not in NOT_GIVEN
    assert not {n for n in got} & set(NOT_GIVEN)


def test_dcgm_default_counters_are_given_or_said_why() -> None:
    """Every counter enabled in dcgm-exporter 4.5.3-4.8.2's etc/default-counters.csv (listed
    here from that file) is given or named in NOT_GIVEN with a reason, and docs/otel.md names it."""
    from gpuscope.otel.dcgm import DCGM, FB_FREE, NOT_GIVEN, NVLINK_BANDWIDTH_TOTAL

    enabled = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
               "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
               "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
               "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
               "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
               "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
               "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
               "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"]
    given = set(DCGM) | {FB_FREE[0], NVLINK_BANDWIDTH_TOTAL[0]}
    docs = (REPO / "docs" / "otel.md").read_text()
    for name in enabled:
        assert (name in given) != (name in NOT_GIVEN), name
        assert f"`{name}`" in docs, name
    assert all(len(why) > 20 for why in NOT_GIVEN.values())


# -- AMD's exporter's names, by hand --------------------------------------------------------------

def test_amd_names_units_and_labels_for_amd_and_nvidia_gpus() -> None:
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.otel.amd import labels, samples

    mi300 = DeviceInfo(key="gpu3", vendor="amd", index=3, name="AMD Instinct MI300X", uuid="5f00-ab",
                       pci_bus_id="0000:0c:00.0", properties={"compute_partition": "SPX", "memory_partition": "NPS1"})
    lab = labels(mi300, "node7")
    assert lab == {"card_model": "AMD Instinct MI300X", "deployment_mode": "baremetal",
                   "gpu_compute_partition_type": "spx", "gpu_id": "3", "gpu_memory_partition_type": "nps1",
                   "gpu_partition_id": "0", "gpu_uuid": "5f00-ab", "hostname": "node7", "serial_number": ""}
    got = {(n, extra): v for n, _, extra, v in samples({
        "gpu_util": 0.5, "mem_util": 0.125, "mem_used_bytes": 3 * 2**30 + 2**19, "mem_total_bytes": 192 * 2**30,
        "energy_j": 12.5, "power_w": 600.5, "temp_c": 71.0, "mem_temp_c": 65.5, "sm_clock_mhz": 2100.0,
        "mem_clock_mhz": 1300.0, "tensor_active": 0.25})}
    assert got[("gpu_gfx_activity", ())] == 50 and got[("gpu_umc_activity", ())] == 12.5
    assert got[("gpu_used_vram", ())] == 3072 and got[("gpu_total_vram", ())] == 192 * 1024  # MB = 2^20 B
    assert got[("gpu_free_vram", ())] == 192 * 1024 - 3073  # 193535.5 MB truncated
    assert got[("gpu_energy_consumed", ())] == 12_500_000  # uJ
    assert got[("gpu_package_power", ())] == 600.5 and got[("gpu_junction_temperature", ())] == 71
    assert got[("gpu_memory_temperature", ())] == 65.5
    assert got[("gpu_clock", (("clock_type", "system"),))] == 2100
    assert got[("gpu_clock", (("clock_type", "memory"),))] == 1300
    assert got[("gpu_prof_tensor_active_percent", ())] == 25
    assert ("gpu_edge_temperature", ()) not in got and ("gpu_ecc_correct_total", ()) not in got  # not reported: none
    h100 = DeviceInfo(key="gpu0", vendor="nvidia", index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1")
    nv = labels(h100, "node7")
    assert nv["gpu_compute_partition_type"] == "" and nv["gpu_id"] == "0" and nv["card_model"] == "NVIDIA H100 80GB HBM3"


def test_amd_endpoint_body_counts_gpus_and_escapes_label_values() -> None:
    from gpuscope.otel.amd import AmdNames

    state = _state()
    body = AmdNames(state, 'host"\x1b').render().decode()
    helps, types, samples = _families(body)
    assert set(types.values()) == {"gauge"}
    assert [(lab, v) for n, lab, v in samples if n == "gpu_nodes_total"] == [({"hostname": 'host\\"\\\\x1b'}, "2")]
    assert "\x1b" not in body


def test_an_unknown_name_set_exits_2_with_one_line() -> None:
    r = run_cli("monitor", "--replay", str(RECORDING), "--prometheus", "9464", "--prometheus-names", "prom")
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "--prometheus-names" in lines[0] and "prom" in lines[0] and "Traceback" not in r.err

