"""The AMD collectors: amdsmi (fake module from a table), the import fallbacks, the amd-smi CLI."""
from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_cli
from fakes.fake_amdsmi import FakeAmdSmi, FakeAmdSmiCli
from gpuscope.collectors import AmdCollector, CollectorUnavailable
from gpuscope.collectors.amd import (
    AmdSmiCliCollector,
    import_amdsmi,
    parse_amd_smi_metric,
)
from gpuscope.collectors.amd_values import gfx_to_capability
from gpuscope.collectors.base import plausible_celsius
from gpuscope.metrics import GPU_METRIC_NAMES

TABLES = Path(__file__).resolve().parent / "fakes" / "tables"


def _open(**kw):
    fake = FakeAmdSmi("amdsmi_mi300x.json")
    kw.setdefault("process_interval_s", 0.0)
    c = AmdCollector(amdsmi=fake, **kw)
    return fake, c, {d.key: d for d in c.open()}


def _rows(c) -> dict:
    return {s.device: s for s in c.sample()}


def test_gpu_metrics_units() -> None:
    fake, c, devs = _open()
    v = _rows(c)["gpu0"].values
    assert v["gpu_util"] == 0.75 and v["mem_util"] == 0.4  # percent -> ratio
    assert v["power_w"] == 550.0 and v["power_instant_w"] == 560.0  # average / current socket power, W
    assert v["energy_j"] == pytest.approx(1_000_000_000 * 15.259e-6)  # accumulator x resolution (µJ)
    assert v["temp_c"] == 65.0 and v["mem_temp_c"] == 58.0  # hotspot (edge is N/A on MI300X)
    assert v["sm_clock_mhz"] == pytest.approx((2100 + 2100 + 2090 + 2100) / 4)  # per-XCC clocks, N/A left out
    assert v["mem_clock_mhz"] == 1300.0
    assert v["throttle_reasons"] == 0
    assert v["pcie_bytes_per_s"] == 12e9  # pcie_bandwidth_inst GB/s
    assert v["mem_used_bytes"] == 4 * 1024**3 and v["mem_total_bytes"] == 25_753_026_560
    assert v["power_limit_w"] == 750.0  # power_cap in µW
    fake.step()
    r = _rows(c)["gpu0"]
    v = r.values
    assert v["gpu_util"] == 1.0
    assert v["energy_j"] == pytest.approx(1_003_276_760 * 15.259e-6)
    # XGMI KB counters over the firmware clock's 100 ms (10 ns ticks)
    assert v["xgmi_nvlink_tx_bytes_per_s"] == pytest.approx(100_000 * 1024 / 0.1)
    assert v["xgmi_nvlink_rx_bytes_per_s"] == pytest.approx(7_000 * 1024 / 0.1)


def test_na_and_wrong_unit_temperatures() -> None:
    fake, c, devs = _open()
    p1, mi250 = devs["gpu1"], devs["gpu2"]
    # the second CPX partition: socket power / energy / PCIe are N/A -> unsupported, never 0
    for m in ("power_w", "energy_j", "pcie_bytes_per_s", "mem_util"):
        assert p1.unsupported[m] == "not reported by this GPU (N/A in gpu_metrics)"
    assert p1.unsupported["proc_gpu_mem_bytes"].startswith("no permission")
    rows = _rows(c)
    v1 = rows["gpu1"].values
    assert v1["power_w"] is None and v1["energy_j"] is None and v1["mem_util"] is None
    assert v1["temp_c"] == 66.0 and v1["mem_temp_c"] == 59.0  # reported in m°C
    v2 = rows["gpu2"].values
    assert v2["temp_c"] == 52.25 and v2["mem_temp_c"] == 60.0  # gpu_metrics 1.3: centi-°C
    assert v2["throttle_reasons"] == 1  # the old throttle_status flag when indep_throttle_status is N/A
    assert v2["power_w"] == 300.0 and v2["power_instant_w"] is None
    assert "power_instant_w" in mi250.unsupported


@pytest.mark.parametrize("raw, celsius", [(45, 45.0), (4500, 45.0), (45000, 45.0), (0xFFFF, None), ("N/A", None),
                                          (-5, -5.0), (10**9, None)])
def test_temperature_scale_by_range(raw, celsius) -> None:
    assert plausible_celsius(raw) == celsius


def test_partitions_are_devices() -> None:
    fake, c, devs = _open()
    p0, p1, mi250 = devs["gpu0"], devs["gpu1"], devs["gpu2"]
    assert p0.kind == "partition" and p0.properties["compute_partition"] == "CPX"
    assert p0.properties["physical_gpu"] == p1.properties["physical_gpu"] == 0  # same ASIC serial
    assert mi250.kind == "gpu" and mi250.properties["physical_gpu"] == 1
    assert p0.name == "AMD Instinct MI300X" and p0.pci_device_id == "0x74a1" and p0.num_sms == 38
    assert p0.compute_capability == "9.4" and mi250.compute_capability == "9.0" and p0.warp_size == 64
    for d in devs.values():
        assert set(d.supported) | set(d.unsupported) == set(GPU_METRIC_NAMES)
        assert d.unsupported["tensor_active"] == "not exposed by amdsmi (needs rocprofiler counters)"


def test_processes_and_lost_gpu() -> None:
    fake, c, devs = _open()
    c.set_pids({4242})
    r = _rows(c)["gpu0"]
    assert r.values["proc_gpu_mem_bytes"] == 4 * 1024**3  # pid 777 is not watched
    assert r.values["proc_gpu_util"] is None  # engine time is cumulative: needs two readings
    assert r.processes[0].name == "python3"
    fake.step()
    rows = _rows(c)
    # gfx engine time +50 ms over the firmware clock's 100 ms
    assert rows["gpu0"].values["proc_gpu_util"] == pytest.approx(0.5)
    assert rows["gpu2"].values["proc_gpu_mem_bytes"] == 0  # nothing of ours on it
    fake.step()
    rows = _rows(c)
    assert rows["gpu2"].lost and not rows["gpu0"].lost  # sysfs gone on the MI250X
    lost = [d for d in c.take_degradations() if d.phase == "lost"]
    assert [d.device for d in lost] == ["gpu2"]
    fake.step()
    assert sorted(s.device for s in c.sample()) == ["gpu0", "gpu1"]


def test_amdsmi_init_failure_and_no_cli() -> None:
    fake = FakeAmdSmi({"init_error": 34, "devices": []})
    with pytest.raises(CollectorUnavailable) as e:
        AmdCollector(amdsmi=fake, use_cli=False).open()
    assert e.value.reason == "amdsmi_init failed: amdgpu driver not loaded"


def _fake_package(root: Path, body: str) -> Path:
    pkg = root / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    return root


def test_import_survives_the_pypi_wheel_keyerror_and_finds_rocms_copy(tmp_path, monkeypatch, capsys) -> None:
    # the PyPI wheel without ROCm: prints to stdout, then KeyError at import time
    wheel = _fake_package(tmp_path / "site", """
        print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file")
        print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
        raise KeyError("libamd_smi.so")
    """)
    rocm = _fake_package(tmp_path / "opt" / "rocm-6.3.0" / "share" / "amd_smi", """
        FROM_ROCM = True
        def amdsmi_init(flag=None):
            pass
    """)
    monkeypatch.syspath_prepend(str(wheel))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    mod, backend, reasons = import_amdsmi([str(tmp_path / "opt" / "rocm*" / "share" / "amd_smi")])
    try:
        assert getattr(mod, "FROM_ROCM", False)
        assert backend == f"amdsmi ({rocm})"
        assert reasons == ["amdsmi installed but its library is missing (KeyError 'libamd_smi.so': no ROCm)"]
        assert capsys.readouterr().out == ""  # the wheel's noise never reaches stdout (--json stays clean)
        assert str(rocm) not in sys.path
    finally:
        sys.modules.pop("amdsmi", None)
    # nothing anywhere: every reason, and the collector says it in one line
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    mod, backend, reasons = import_amdsmi([str(tmp_path / "nowhere*")])
    assert mod is None and reasons[-1] == f"no ROCm copy under {tmp_path / 'nowhere*'}"
    sys.modules.pop("amdsmi", None)
    monkeypatch.setattr("gpuscope.collectors.amd_smi_cli.find_amd_smi", lambda: None)
    with pytest.raises(CollectorUnavailable) as e:
        AmdCollector(rocm_globs=[str(tmp_path / "nowhere*")]).open()
    assert e.value.reason.startswith("amdsmi not importable (amdsmi installed but its library is missing")
    assert e.value.reason.endswith("; amd-smi CLI not found")
    sys.modules.pop("amdsmi", None)


@pytest.mark.parametrize("table", ["amdsmi_cli_list.json", "amdsmi_cli_gpu_data.json"])
def test_amd_smi_cli_both_json_shapes(table) -> None:
    cli = FakeAmdSmiCli(table)
    c = AmdCollector(amdsmi=None, rocm_globs=["/nonexistent*"], cli_runner=cli, cli_threaded=False)
    devs = {d.key: d for d in c.open()}
    assert c.status.backend == "amd-smi cli"
    assert devs["gpu0"].name == "AMD Instinct MI300X" and devs["gpu0"].memory_total_bytes == 196592 * 1024**2
    assert devs["gpu0"].compute_capability == "9.4" and devs["gpu0"].num_sms == 304
    fallback = [d for d in c.take_degradations() if d.device is None]
    assert fallback and "amd-smi CLI fallback" in fallback[0].reason
    rows = {s.device: s for s in c.sample()}
    v = rows["gpu0"].values
    if table == "amdsmi_cli_list.json":  # second recorded output
        assert v["gpu_util"] == 0.91 and v["power_w"] == 640.0 and v["energy_j"] == 1_234_631.5
        assert rows["gpu1"].values["power_w"] == 139.0
    else:
        assert v["gpu_util"] == 0.87 and v["power_w"] == 612.0
        v1 = rows["gpu1"].values
        assert v1["power_w"] is None and v1["energy_j"] is None  # "N/A" -> None
        assert v1["temp_c"] == 52.0 and v1["mem_temp_c"] == 47.0  # m°C with unit "C" -> range check
        assert "power_w" in devs["gpu1"].unsupported
    assert v["mem_used_bytes"] == 150000 * 1024**2 and v["temp_c"] in (71.0, 72.0)
    assert v["sm_clock_mhz"] == 2100.0 and v["mem_clock_mhz"] == 1300.0
    assert v["pcie_bytes_per_s"] == pytest.approx(96000e6 / 8)  # Mb/s -> B/s
    c.close()


def test_cli_parser_edge_cases() -> None:
    assert parse_amd_smi_metric({"gpu_data": []}) == {}
    one = parse_amd_smi_metric({"gpu": 3, "usage": {"gfx_activity": 50}, "power": {"socket_power": "N/A"},
                                "energy": {"total_energy_consumption": {"value": 5e6, "unit": "uJ"}},
                                "clock": {"gfx_0": {"clk": {"value": 1.2, "unit": "GHz"}}},
                                "mem_usage": {"used_vram": {"value": 3, "unit": "furlongs"}}})
    v = one[3]
    assert v["gpu_util"] == 0.5 and v["power_w"] is None and v["energy_j"] == pytest.approx(5.0)
    assert v["sm_clock_mhz"] == pytest.approx(1200.0) and v["mem_used_bytes"] is None  # unknown unit: None
    with pytest.raises(ValueError):
        parse_amd_smi_metric("oops")


def test_cli_thread_serves_each_reading_once() -> None:
    cli = FakeAmdSmiCli("amdsmi_cli_list.json")
    c = AmdSmiCliCollector(cli, threaded=True, min_period_s=0.05)
    c.open()
    import time

    got = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        got.extend(c.sample())
        time.sleep(0.01)
    c.close()
    assert len({s.ts_ns for s in got}) * 2 >= len(got) >= 3  # rows come per reading, two GPUs each


def test_cli_open_failures() -> None:
    def broken(args):
        raise RuntimeError("amd-smi metric --json exited 1: ERROR: no AMD GPU found")

    with pytest.raises(CollectorUnavailable, match="amd-smi metric --json failed"):
        AmdSmiCliCollector(broken, threaded=False).open()
    with pytest.raises(CollectorUnavailable, match="found no AMD GPU"):
        AmdSmiCliCollector(lambda a: json.dumps({"gpu_data": []}), threaded=False).open()


def test_gfx_target_to_capability() -> None:
    assert [gfx_to_capability(t) for t in ("gfx942", "gfx90a", "gfx1100", "gfx950", "N/A", None)] == \
        ["9.4", "9.0", "11.0", "9.5", None, None]


def test_devices_json_with_fake_amd(monkeypatch) -> None:
    fake = FakeAmdSmi("amdsmi_mi300x.json")
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    r = run_cli("devices", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    amd = next(v for v in doc["vendors"] if v["vendor"] == "amd")
    assert amd["available"] and amd["backend"] == "amdsmi"
    keys = [d["key"] for d in doc["devices"]]
    assert keys == ["gpu0", "gpu1", "gpu2", "host"] and doc["gpus"] == 3
    gpu1 = doc["devices"][1]
    assert gpu1["kind"] == "partition" and gpu1["unsupported"]["power_w"].startswith("not reported")
    text = run_cli("devices")
    assert text.code == 0 and "gpu0  amd partition  AMD Instinct MI300X" in text.out


# -- real amd-smi outputs, through a real subprocess --------------------------------------------

REAL = json.loads((Path(__file__).parent / "fakes" / "tables" / "amdsmi_cli_real_outputs.json").read_text())["outputs"]


def _fake_amd_smi(tmp_path: Path, metric: str, static: str | None = None) -> str:
    """An `amd-smi` executable that prints a recorded output (stdout, stderr, exit code)."""
    table = tmp_path / "outputs.json"
    table.write_text(json.dumps(REAL))
    exe = tmp_path / "amd-smi"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"out = json.load(open({str(table)!r}))\n"
        f"name = {metric!r} if sys.argv[1] == 'metric' else {static!r}\n"
        "if name is None:\n    sys.stderr.write('unknown command\\n'); sys.exit(2)\n"
        "o = out[name]\n"
        "sys.stdout.write(o['stdout']); sys.stderr.write(o['stderr']); sys.exit(o['exit_code'])\n")
    exe.chmod(0o755)
    return str(exe)


def _cli_collector(exe: str) -> AmdSmiCliCollector:
    from gpuscope.collectors.amd_smi_cli import AmdSmiRunner

    return AmdSmiCliCollector(AmdSmiRunner(exe), threaded=False)


def test_real_w7700_output_is_read(tmp_path: Path) -> None:
    c = _cli_collector(_fake_amd_smi(tmp_path, "w7700_usage"))
    (dev,) = c.open()
    (row,) = c.sample()
    assert row.values["gpu_util"] == 0.42 and row.values["mem_util"] == 0.01
    assert row.values["power_w"] is None and "notes" not in dev.properties
    c.close()


def test_warning_before_the_json_is_kept_as_a_note(tmp_path: Path) -> None:
    c = _cli_collector(_fake_amd_smi(tmp_path, "w7700_usage_group_warning"))
    (dev,) = c.open()
    (row,) = c.sample()
    assert row.values["gpu_util"] == 0.42  # the collector works despite the warning
    (note,) = dev.properties["notes"]
    assert note.startswith("WARNING: User is missing the following required groups: render, video")
    assert any("render, video" in d.reason for d in c.take_degradations())
    c.close()


def test_all_na_apu_in_watch_mode(tmp_path: Path, monkeypatch) -> None:
    c = _cli_collector(_fake_amd_smi(tmp_path, "apu_all_na_watch"))
    (dev,) = c.open()
    assert dev.supported == ()  # every metric N/A: none supported, each with its reason
    assert dev.unsupported["gpu_util"].startswith("not in amd-smi metric output")
    assert dev.properties["notes"] == ["'CTRL' + 'C' to stop watching output:"]
    (row,) = c.sample()
    assert all(v is None for v in row.values.values())
    # its timestamp (2026-01-21) is far from this host's clock: the host clock is used, and said
    assert abs(row.ts_ns - time.time_ns()) < 60e9
    assert any(d.metric == "timestamp" and "host clock" in d.reason for d in c.take_degradations())
    c.close()


@pytest.mark.parametrize("name,reason", [
    ("no_driver", "Unable to get devices, driver not initialized (amdgpu not found in modules)"),
    ("groups_error_rocm7", "WARNING: User is missing the following required groups: render, video"),
    ("device_nodes_denied_rocm71", "Permission needed to access required GPU device node(s): /dev/dri/card0: Permission denied"),
])
def test_failing_cli_names_the_line_that_says_why(tmp_path: Path, name: str, reason: str) -> None:
    with pytest.raises(CollectorUnavailable) as e:
        _cli_collector(_fake_amd_smi(tmp_path, name)).open()
    assert reason in e.value.reason, e.value.reason
    assert "AMDSMI Tool" not in e.value.reason and "usermod" not in e.value.reason


def _amd_device_via_cli(tmp_path: Path, monkeypatch, output: str) -> dict:
    """`gpuscope devices --json` on a machine whose only AMD source is an amd-smi printing ``output``."""
    exe = _fake_amd_smi(tmp_path, output)
    monkeypatch.setattr("gpuscope.collectors.amd_smi_cli.find_amd_smi", lambda: exe)
    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.import_amdsmi", lambda *a, **k: (None, "amdsmi not importable", []))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    r = run_cli("devices", "--json")
    assert r.code == 0, r.err
    gpu = next(d for d in r.json()["devices"] if d["vendor"] == "amd")
    return gpu


def test_devices_shows_the_warning_on_amd_devices(tmp_path: Path, monkeypatch) -> None:
    gpu = _amd_device_via_cli(tmp_path, monkeypatch, "w7700_usage_group_warning")
    assert gpu["properties"]["notes"][0].startswith("WARNING: User is missing the following required groups")
    text = run_cli("devices")
    assert "note: WARNING: User is missing the following required groups: render, video" in text.out


def test_timestamps_checked_for_order_and_skew() -> None:
    c = AmdSmiCliCollector(lambda a: "[]", threaded=False)
    now = time.time_ns()
    assert c._checked_ts(0, "gpu0", now - 1_000_000, now) == now - 1_000_000  # near and later: kept
    assert c._checked_ts(0, "gpu0", now - 2_000_000, now) == now  # went backwards: host clock
    assert c._checked_ts(0, "gpu1", now + 3_600_000_000_000, now) == now  # an hour off: host clock
    reasons = [d.reason for d in c.take_degradations()]
    assert any("backwards" in r for r in reasons) and any("+3600.0 s" in r for r in reasons)


# -- more published outputs: ROCm 7 shapes, a banner on stdout with exit 0, errors after noise ------


def test_rocm7_mi300x_after_the_permission_banner(tmp_path: Path) -> None:
    # ROCm 7.1 prints its device-node banner on stdout and exits 0 with the JSON after it
    c = _cli_collector(_fake_amd_smi(tmp_path, "mi300x_dpx_usage_after_permission_banner"))
    (dev,) = c.open()
    (row,) = c.sample()
    assert row.values["gpu_util"] == 0.0 and row.values["mem_util"] == 0.0  # gpu_data[0].usage, ROCm 7 shape
    notes = dev.properties["notes"]
    assert notes[0] == "Permission needed to access required GPU device node(s):"
    assert "- /dev/dri/card7: Permission denied; owner=root(0):video(39);" in notes
    # the metrics it hides are missing for that reason, and say so
    assert "device permissions" in dev.unsupported["power_w"] and "note" in dev.unsupported["power_w"]
    assert "device permissions" not in dev.unsupported["sm_active"]  # not an amd-smi metric at all
    c.close()


def test_no_driver_with_exit_status_0_names_the_error_not_the_version_line(tmp_path: Path) -> None:
    # the issue does not say how amd-smi exited: with 0 the stdout holds only the version line
    with pytest.raises(CollectorUnavailable) as e:
        _cli_collector(_fake_amd_smi(tmp_path, "no_driver_exit_0")).open()
    assert e.value.reason == ("amd-smi metric --json printed no JSON: Unable to get devices, driver not "
                              "initialized (amdgpu not found in modules)")


def test_python_warnings_on_stderr_are_not_the_reason(tmp_path: Path) -> None:
    with pytest.raises(CollectorUnavailable) as e:
        _cli_collector(_fake_amd_smi(tmp_path, "groups_error_after_python_warnings")).open()
    assert e.value.reason == ("amd-smi metric --json exited 1: WARNING: User is missing the following required "
                              "groups: render, video. Please add user to these groups.")


def test_python_warning_lines_are_skipped_even_when_they_say_error() -> None:
    from gpuscope.collectors.amd_cli_output import failure_reason

    stderr = ("/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:812: DeprecationWarning: "
              "error codes will change\n  return _check_res(ret)\n"
              "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)\n")
    assert failure_reason(stderr) == "Unable to get devices, driver not initialized (amdgpu not found in modules)"


def test_sections_that_are_na_strings_give_none_not_a_crash(tmp_path: Path) -> None:
    # The all-N/A APU (ROCm/rocm-systems#2720) prints "usage": "N/A" as a string where other GPUs
    # print an object; any section may come that way, so here every one does.
    doc = json.loads(REAL["apu_all_na_watch"]["stdout"].split("\n", 1)[1])
    for k in ("usage", "power", "clock", "temperature", "mem_usage", "pcie", "energy", "ecc", "fan"):
        doc[0][k] = "N/A"
    doc[0]["timestamp"] = "N/A"
    c = AmdSmiCliCollector(lambda a: json.dumps(doc), threaded=False)
    (dev,) = c.open()
    assert dev.supported == () and dev.name is None
    (row,) = c.sample()
    assert all(v is None for v in row.values.values()) and abs(row.ts_ns - time.time_ns()) < 60e9


def test_static_from_published_outputs() -> None:
    from gpuscope.collectors.amd import parse_amd_smi_static
    from gpuscope.collectors.amd_cli_output import split_json_output

    rx = parse_amd_smi_static(split_json_output(REAL["rx7800xt_static_rocm7_py314"]["stdout"])[0])[0]
    assert rx["name"] == "AMD Radeon RX 7800 XT" and rx["pci_device_id"] == "0x747e" and rx["num_sms"] == 60
    assert rx["gfx_target"] == "gfx1101" and rx["pci_bus_id"] == "0000:03:00.0" and rx["memory_total_bytes"] is None
    apu = parse_amd_smi_static(json.loads(REAL["granite_ridge_static_asic"]["stdout"]))[0]
    assert apu["name"] == "Granite Ridge [Radeon Graphics]" and apu["gfx_target"] == "gfx1036"
    # what amd-smi prints for a field it cannot read is "N/A": never a value
    na = parse_amd_smi_static([{"gpu": 0, "asic": {"market_name": "N/A", "device_id": "N/A",
                                                   "target_graphics_version": "N/A"}, "bus": {"bdf": "N/A"},
                                "partition": "N/A"}])[0]
    assert na == {"name": None, "pci_device_id": None, "num_sms": None, "gfx_target": None, "pci_bus_id": None,
                  "memory_total_bytes": None, "compute_partition": None, "memory_partition": None,
                  "serial_number": None, "vbios_version": None}


def test_power_only_output_from_the_changelog(tmp_path: Path) -> None:
    c = _cli_collector(_fake_amd_smi(tmp_path, "power_rocm61_changelog"))
    (dev,) = c.open()
    assert dev.supported == ("power_w",)
    (row,) = c.sample()
    assert row.values["power_w"] == 10.0 and row.values["gpu_util"] is None
    c.close()


def _watch_doc(ts_s: float) -> str:
    return json.dumps([{"timestamp": ts_s, "gpu": 0, "usage": {"gfx_activity": {"value": 50, "unit": "%"}}}])


def test_a_device_that_failed_the_timestamp_check_stays_on_the_host_clock() -> None:
    t = time.time()
    stamps = iter([t, t + 1, t + 2, t - 30, t + 4])  # fine (x3), backwards, then fine again
    c = AmdSmiCliCollector(lambda a: _watch_doc(next(stamps)) if a[0] == "metric" else "", threaded=False)
    c.open()  # reading 1 (unthreaded, each sample() reads anew: 2..5)
    rows = [c.sample()[0] for _ in range(4)]
    assert rows[0].ts_ns == int((t + 1) * 1e9)
    assert rows[1].ts_ns == int((t + 2) * 1e9)
    # from the backwards one on: the host clock, also when amd-smi's clock looks fine again, so the
    # device's rows never mix two clocks; they stay in order
    assert all(abs(r.ts_ns - time.time_ns()) < 10e9 for r in rows[2:])
    assert rows[3].ts_ns != int((t + 4) * 1e9)
    assert [r.ts_ns for r in rows] == sorted(r.ts_ns for r in rows)
    clock = [d for d in c.take_degradations() if d.phase == "clock"]
    assert len(clock) == 1 and clock[0].device == "gpu0" and "host clock" in clock[0].reason


def test_clock_fallback_is_in_the_sampler_stats_and_the_store(tmp_path: Path, db: Path) -> None:
    import duckdb

    from gpuscope.sampling import Sampler
    from gpuscope.sinks import MemorySink, StoreSink

    c = _cli_collector(_fake_amd_smi(tmp_path, "apu_all_na_watch"))  # its timestamp is from 2026-01-21
    sampler = Sampler([c], [MemorySink(), StoreSink(db, name="apu", flush_s=0.0)], interval_s=0.5, max_ticks=2)
    st = sampler.run(30)
    (reason,) = st.clock_fallbacks.values()
    assert list(st.clock_fallbacks) == ["amd/gpu0"] and "host clock" in reason and "s from the host clock" in reason
    assert st.to_dict()["clock_fallbacks"] == st.clock_fallbacks
    con = duckdb.connect(str(db), read_only=True)
    try:
        info = json.loads(con.execute("SELECT info FROM sampler_stats").fetchone()[0])
    finally:
        con.close()
    assert info["clock_fallbacks"] == {"amd/gpu0": reason}


def test_devices_shows_the_rocm71_banner_and_why_metrics_are_missing(tmp_path: Path, monkeypatch) -> None:
    gpu = _amd_device_via_cli(tmp_path, monkeypatch, "mi300x_dpx_usage_after_permission_banner")
    assert gpu["properties"]["notes"][0] == "Permission needed to access required GPU device node(s):"
    assert gpu["supported"] == ["gpu_util", "mem_util"]
    assert "amd-smi warned about device permissions" in gpu["unsupported"]["temp_c"]
    text = run_cli("devices").out
    assert "  note: Permission needed to access required GPU device node(s):" in text
    assert "  note: - /dev/dri/card0: Permission denied; owner=root(0):video(39);" in text
    assert "amd-smi warned about device permissions (render/video groups), see the note" in text


def test_reserved_memory_is_none_on_amd_and_says_why(tmp_path: Path) -> None:
    # NVML's v2 memory query reports the driver's reservation apart; amdsmi has no such figure
    fake, c, devs = _open()
    assert _rows(c)["gpu0"].values.get("mem_reserved_bytes") is None
    assert devs["gpu0"].unsupported["mem_reserved_bytes"].startswith("amdsmi reports no driver-reserved memory")
    cli = _cli_collector(_fake_amd_smi(tmp_path, "w7700_usage"))
    (dev,) = cli.open()
    assert cli.sample()[0].values.get("mem_reserved_bytes") is None
    assert dev.unsupported["mem_reserved_bytes"].startswith("amdsmi reports no driver-reserved memory")
    cli.close()


# (bus id, index, what device_clocks gives) on the MI300X table: the first CPX partition by its
# bus id, the same by index, a GPU that is not there
@pytest.mark.parametrize("bus, index, expected", [
    ("0000:0c:00.0", None, {"sm_clock_mhz": 2097.5, "power_w": 550.0, "temperature_c": 65.0, "power_limit_w": 750.0}),
    (None, 0, {"sm_clock_mhz": 2097.5, "power_w": 550.0, "temperature_c": 65.0, "power_limit_w": 750.0}),
    ("0000:99:", 7, {}),
])
def test_amd_device_clocks_of_one_gpu(bus: str | None, index: int | None, expected: dict) -> None:
    from gpuscope.collectors.amd import device_clocks

    fake = FakeAmdSmi("amdsmi_mi300x.json")
    assert device_clocks(bus, index, amdsmi=fake) == expected


def test_amd_device_clocks_without_amdsmi_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.collectors.amd import device_clocks

    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.import_amdsmi", lambda *a, **k: (None, None, ["absent"]))
    assert device_clocks("0000:0c:00.0", 0) == {}


def test_ecc_counts_from_amdsmi_and_the_cli() -> None:
    fake, c, devs = _open()
    assert {"ecc_corrected_errors", "ecc_uncorrected_errors"} <= set(devs["gpu0"].supported)
    v = _rows(c)["gpu0"].values
    assert v["ecc_corrected_errors"] == 3 and v["ecc_uncorrected_errors"] == 0
    # the other partitions' table has no ECC counts: a reason, not a blank
    other = next(d for k, d in devs.items() if k != "gpu0")
    assert "ecc_corrected_errors" in other.unsupported and other.unsupported["ecc_corrected_errors"]
    # `amd-smi metric --json` (a real ROCm output): its ecc section, both zero
    doc = json.loads((TABLES / "amdsmi_cli_gpu_data.json").read_text())["metric"][0]
    got = parse_amd_smi_metric(doc)
    assert all(g["ecc_corrected_errors"] == 0 and g["ecc_uncorrected_errors"] == 0 for g in got.values())
