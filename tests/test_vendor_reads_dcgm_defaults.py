"""Issue 32's collector reads: serial number and VBIOS version as device properties, and the
dcgm-exporter default counters NVML gives (encoder / decoder utilization, PCIe replays,
remapped rows), from the fake vendors' tables of values (tests/fakes/tables) through the real
collectors, the OpenTelemetry state and the dcgm-exporter names, and one live ``/metrics``
per name set against docs/otel.md's table.

The values: nvml_h100x8_nvsmi_dump.json holds what a real ``nvidia-smi -q`` printed (serials,
VBIOS 96.00.74.00.01, 0 % encoder / decoder, 7 and 0 replays, no remapped rows);
nvml_h100_a100.json and amdsmi_mi300x.json are hand-made (non-zero counts, so that a wrong
field shows)."""
from __future__ import annotations

import copy
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fakes.fake_amdsmi import FakeAmdSmi
from fakes.fake_pynvml import TABLES, FakeNvml, load_table
from gpuscope.collectors import AmdCollector, NvmlCollector

REPO = Path(__file__).resolve().parents[1]
EPOCH_US = 1_763_780_000_000_000
REMAP = ("remapped_rows_corrected", "remapped_rows_uncorrected", "row_remap_pending", "row_remap_failed")
NEW = ("enc_util", "dec_util", "pcie_replays", *REMAP)


def _nvml(table: Any, **kw: Any) -> tuple[FakeNvml, NvmlCollector, dict[str, Any]]:
    fake = FakeNvml(table, epoch_us=EPOCH_US)
    kw.setdefault("slow_counter_interval_s", 0.0)  # the replay / remap reads every tick here
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0, pcie_fallback_interval_s=0.0, **kw)
    return fake, c, {d.key: d for d in c.open()}


def _rows(c: Any) -> dict[str, Any]:
    return {s.device: s.values for s in c.sample()}


# -- NVML: supported ----------------------------------------------------------------------------------


def test_nvml_serial_vbios_video_engines_replays_and_remapped_rows() -> None:
    fake, c, devs = _nvml("nvml_h100_a100.json")
    h100, a100 = devs["gpu0"], devs["gpu1"]
    assert h100.properties["serial_number"] == "1654423001593"
    assert h100.properties["vbios_version"] == "96.00.74.00.01"
    # the A100's table has no serial / VBIOS: NVML says NotSupported, the property is None
    assert a100.properties["serial_number"] is None and a100.properties["vbios_version"] is None
    assert set(NEW) <= set(h100.supported)
    v = _rows(c)["gpu0"]
    # [util %, period µs] -> the ratio of util; (corrected, uncorrected, pending, failed) as counts and 0/1
    assert v["enc_util"] == 0.0 and v["dec_util"] == pytest.approx(0.38)
    assert v["pcie_replays"] == 7 and type(v["pcie_replays"]) is int
    assert (v["remapped_rows_corrected"], v["remapped_rows_uncorrected"], v["row_remap_pending"],
            v["row_remap_failed"]) == (2, 1, 1, 0)
    fake.step()
    v = _rows(c)["gpu0"]
    assert v["dec_util"] == pytest.approx(0.64) and v["pcie_replays"] == 9
    c.close()


def test_the_slow_counts_are_read_at_the_slow_counters_pace() -> None:
    fake, c, _ = _nvml("nvml_h100_a100.json", slow_counter_interval_s=3600.0)
    first = _rows(c)["gpu0"]
    fake.calls.clear()
    fake.step()
    second = _rows(c)["gpu0"]
    assert first["pcie_replays"] == 7 and first["remapped_rows_corrected"] == 2
    # within the interval: not read again (NULL in the store, held by the live views), the gauges are
    assert "pcie_replays" not in second and "remapped_rows_corrected" not in second
    assert "nvmlDeviceGetRemappedRows" not in fake.calls and "nvmlDeviceGetPcieReplayCounter" not in fake.calls
    assert second["dec_util"] == pytest.approx(0.64)
    c.close()


def test_recorded_nvidia_smi_values_come_through() -> None:
    """GPUs 0 and 1 of the published `nvidia-smi -q` (thamada/nvidia-smi, nvsim/H100SXMx8_smi.py)."""
    fake, c, devs = _nvml("nvml_h100x8_nvsmi_dump.json")
    assert [(d.properties["serial_number"], d.properties["vbios_version"]) for d in devs.values()] == [
        ("1654423001593", "96.00.74.00.01"), ("1654223054577", "96.00.74.00.01")]
    rows = _rows(c)
    assert [rows[k]["pcie_replays"] for k in ("gpu0", "gpu1")] == [7, 0]  # "Replays Since Reset"
    for k in ("gpu0", "gpu1"):
        assert rows[k]["enc_util"] == 0.0 and rows[k]["dec_util"] == 0.0
        assert [rows[k][m] for m in REMAP] == [0, 0, 0, 0]  # Correctable 0, Uncorrectable 0, Pending No, Failure No
    c.close()


# -- NVML: unsupported --------------------------------------------------------------------------------


def test_not_supported_at_open_is_none_with_one_degradation_and_never_asked_again() -> None:
    fake, c, devs = _nvml("nvml_h100_a100.json")
    a100 = devs["gpu1"]
    # the A100's table answers NotSupported for the video engines
    assert a100.unsupported["enc_util"] == a100.unsupported["dec_util"] == "not supported by this GPU"
    probe = [(d.device, d.metric, d.reason) for d in c.take_degradations() if d.device == "gpu1"]
    assert probe.count(("gpu1", "enc_util", "not supported by this GPU")) == 1
    assert probe.count(("gpu1", "dec_util", "not supported by this GPU")) == 1
    fake.calls.clear()
    v = _rows(c)["gpu1"]
    assert v.get("enc_util") is None and v.get("dec_util") is None
    assert v["pcie_replays"] == 0 and [v[m] for m in REMAP] == [0, 0, 0, 0]
    # one encoder and one decoder call per tick: the H100's only
    assert fake.calls.count("nvmlDeviceGetEncoderUtilization") == 1
    assert fake.calls.count("nvmlDeviceGetDecoderUtilization") == 1
    assert not [d for d in c.take_degradations() if d.device == "gpu1" and d.metric in NEW]
    c.close()


def test_a_read_that_stops_being_supported_degrades_once_with_its_nvml_code() -> None:
    table = copy.deepcopy(load_table("nvml_h100_a100.json"))
    gpu0 = table["devices"][0]
    gpu0["ticks"][1]["remapped_rows"] = "NOT_SUPPORTED"
    gpu0["ticks"][1]["pcie_replay"] = "NO_PERMISSION"
    fake, c, _ = _nvml(table)
    c.take_degradations()
    assert _rows(c)["gpu0"]["remapped_rows_corrected"] == 2
    for _ in range(3):
        fake.step()
        v = _rows(c)["gpu0"]
        assert all(v.get(m) is None for m in REMAP) and v.get("pcie_replays") is None
    said = [(d.metric, d.reason) for d in c.take_degradations() if d.device == "gpu0"]
    assert said == [("pcie_replays", "no permission (NVML: Insufficient Permissions)"),
                    ("/".join(REMAP), "not supported by this GPU")]
    # a permanent code takes the read out of the plan: not asked again
    fake.calls.clear()
    fake.step()
    _rows(c)
    assert "nvmlDeviceGetRemappedRows" not in fake.calls and "nvmlDeviceGetPcieReplayCounter" not in fake.calls
    c.close()


def test_an_old_driver_without_the_functions_leaves_them_none_with_the_reason() -> None:
    table = copy.deepcopy(load_table("nvml_h100_a100.json"))
    for name in ("encoder_util", "decoder_util", "pcie_replay", "remapped_rows"):
        table["devices"][0]["base"][name] = "FUNCTION_NOT_FOUND"
    _, c, devs = _nvml(table)
    reason = "not in this driver's NVML (function not found; nvidia-ml-py newer than the driver)"
    assert {devs["gpu0"].unsupported[m] for m in NEW} == {reason}
    assert not set(NEW) & set(_rows(c)["gpu0"])
    c.close()


def test_remapped_rows_flags_other_than_0_or_1_are_none() -> None:
    from gpuscope.collectors.nvml_values import read_remapped_rows

    class Mod:
        @staticmethod
        def nvmlDeviceGetRemappedRows(h: Any) -> tuple[int, int, int, int]:  # noqa: N802 - pynvml's name
            return h

    assert read_remapped_rows(Mod, (3, 0, 1, 0)) == {"remapped_rows_corrected": 3, "remapped_rows_uncorrected": 0,
                                                     "row_remap_pending": 1, "row_remap_failed": 0}
    assert read_remapped_rows(Mod, (0xFFFFFFFF, -1, 2, True)) == {
        "remapped_rows_corrected": None, "remapped_rows_uncorrected": None, "row_remap_pending": None,
        "row_remap_failed": 1}


# -- AMD ------------------------------------------------------------------------------------------------


def test_amdsmi_serial_vbios_and_pcie_replays() -> None:
    from gpuscope.collectors.amd_values import NO_ROW_REMAP_REASON, NO_VIDEO_SPLIT_REASON

    fake = FakeAmdSmi("amdsmi_mi300x.json")
    c = AmdCollector(amdsmi=fake, use_cli=False)
    devs = {d.key: d for d in c.open()}
    gpu0, gpu2 = devs["gpu0"], devs["gpu2"]
    assert gpu0.properties["serial_number"] == "0x4A2B6C8D00112233"
    assert gpu0.properties["vbios_version"] == "022.040.003.043.000001"
    assert gpu2.properties["serial_number"] == "0x1111222233334444"
    assert gpu2.properties["vbios_version"] is None  # amdsmi raised: no VBIOS facts
    assert "pcie_replays" in gpu0.supported
    assert gpu2.unsupported["pcie_replays"] == "not reported by this GPU (N/A in gpu_metrics)"
    assert gpu0.unsupported["enc_util"] == gpu0.unsupported["dec_util"] == NO_VIDEO_SPLIT_REASON
    assert {gpu0.unsupported[m] for m in REMAP} == {NO_ROW_REMAP_REASON}
    v = {s.device: s.values for s in c.sample()}
    assert v["gpu0"]["pcie_replays"] == 3 and v["gpu2"].get("pcie_replays") is None
    c.close()


def test_amd_smi_static_serial_and_vbios() -> None:
    from gpuscope.collectors.amd import parse_amd_smi_static
    from gpuscope.collectors.amd_cli_output import split_json_output

    real = json.loads((TABLES / "amdsmi_cli_real_outputs.json").read_text())["outputs"]
    rx = parse_amd_smi_static(split_json_output(real["rx7800xt_static_rocm7_py314"]["stdout"])[0])[0]
    assert rx["serial_number"] == "0x4162405E51BB99B0" and rx["vbios_version"] is None  # cut before `vbios`
    apu = parse_amd_smi_static(json.loads(real["granite_ridge_static_asic"]["stdout"]))[0]
    assert apu["serial_number"] is None  # "asic_serial": "N/A"
    # the `vbios` section as amd-smi static prints it (name, build_date, part_number, version)
    doc = [{"gpu": 0, "asic": {"asic_serial": "0x4A2B6C8D00112233"},
            "vbios": {"name": "AMD MI300X", "build_date": "2024/03/20 15:26", "part_number": "113-M3000100-102",
                      "version": "022.040.003.043.000001"}},
           {"gpu": 1, "vbios": "N/A"}]
    got = parse_amd_smi_static(doc)
    assert (got[0]["serial_number"], got[0]["vbios_version"]) == ("0x4A2B6C8D00112233", "022.040.003.043.000001")
    assert (got[1]["serial_number"], got[1]["vbios_version"]) == (None, None)


# -- exported ---------------------------------------------------------------------------------------------


def _state_from_fake() -> Any:
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    fake, c, devs = _nvml("nvml_h100_a100.json")
    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=0, vendors=[], devices=list(devs.values())))
    for k in range(2):
        rows = c.sample()
        for s in rows:
            s.ts_ns = EPOCH_US * 1000 + k * 100_000_000
        state.write(SampleBatch([(k, [s for s in rows if s.device == "gpu0"])]))
        fake.step()
    c.close()
    return state, devs["gpu0"]


def test_the_new_values_as_opentelemetry_points_and_dcgm_samples() -> None:
    from gpuscope.otel import dcgm

    state, gpu0 = _state_from_fake()
    snap = state.snapshot()

    def point(name: str, **want: str) -> float:
        got = [v for (n, attrs), v in snap.items() if n == name and want.items() <= dict(attrs).items()]
        assert len(got) == 1, (name, want, got)
        return got[0]

    assert point("hw.gpu.utilization", **{"hw.gpu.task": "decoder"}) == pytest.approx(0.64)
    assert point("hw.gpu.utilization", **{"hw.gpu.task": "encoder"}) == 0.0
    assert point("hw.gpu.utilization", **{"hw.gpu.task": "general"}) == 1.0
    assert point("gpuscope.gpu.pcie.replays") == 2.0  # 7 -> 9: two since monitor started
    assert point("gpuscope.gpu.memory.remapped_rows", **{"error.type": "corrected"}) == 2
    assert point("gpuscope.gpu.memory.remapped_rows", **{"error.type": "uncorrected"}) == 1
    assert point("gpuscope.gpu.memory.row_remap.pending") == 1 and point("gpuscope.gpu.memory.row_remap.failed") == 0
    # serial and VBIOS on every GPU point
    assert point("hw.gpu.utilization", **{"hw.gpu.task": "decoder", "hw.serial_number": "1654423001593",
                                          "hw.firmware_version": "96.00.74.00.01"}) == pytest.approx(0.64)
    values, _ = state.latest()["gpu0"]
    got = {n: (k, v) for n, k, _, v in dcgm.samples(dcgm.labels(gpu0, "h", None), values)}
    assert got["DCGM_FI_DEV_ENC_UTIL"] == ("gauge", 0) and got["DCGM_FI_DEV_DEC_UTIL"] == ("gauge", 64)
    assert got["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == ("counter", 9)  # the driver's count, as dcgm-exporter gives it
    assert got["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == ("counter", 2)
    assert got["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == ("counter", 1)
    assert got["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == ("gauge", 0)
    assert all(type(v) is int for n, (_, v) in got.items() if n in dcgm.DCGM and dcgm.DCGM[n][4] == dcgm.INT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _recording(path: Path) -> None:
    """A recording of the fake H100 / A100 made by the real NVML collector (as
    tests/fakes/make_recording.py makes the synthetic one), six ticks at 10 Hz."""
    from gpuscope.collectors.replay import RecordingWriter

    fake, c, devs = _nvml("nvml_h100_a100.json")
    t0 = EPOCH_US * 1000
    w = RecordingWriter(path, list(devs.values()), interval_s=0.1, vendors=[c.status], synthetic=True,
                        note="test: tests/fakes/tables/nvml_h100_a100.json through NvmlCollector")
    for k in range(6):
        rows = c.sample()
        for s in rows:
            s.ts_ns = t0 + k * 100_000_000
        w.write_tick(k, rows)
        fake.step()
    w.close({"synthetic": True})
    c.close()


@pytest.mark.slow
def test_live_metrics_carry_the_new_series_as_docs_otel_md_names_them(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus")
    from test_prometheus_names import _families, _selector, mapping_rows

    rec = tmp_path / "fake.jsonl"
    _recording(rec)
    ports = {names: _free_port() for names in ("otel", "dcgm")}
    procs = {names: subprocess.Popen([sys.executable, "-m", "gpuscope", "monitor", "--replay", str(rec), "--prometheus",
                                      str(port), "--prometheus-names", names, "--interval", "0.2"], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for names, port in ports.items()}
    wanted = {"otel": ('hw_gpu_task="decoder"', "gpuscope_gpu_pcie_replays_total{", "gpuscope_gpu_memory_remapped_rows{"),
              "dcgm": ("DCGM_FI_DEV_DEC_UTIL{", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{")}
    bodies: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(bodies) < 2 and time.monotonic() < deadline:
            for names, port in ports.items():
                if names in bodies:
                    continue
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                        body = r.read().decode()
                except (urllib.error.URLError, ConnectionError):
                    continue
                if all(w in body for w in wanted[names]):
                    bodies[names] = body
            time.sleep(0.1)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.communicate(timeout=30)
    assert set(bodies) == {"otel", "dcgm"}, sorted(bodies)
    samples = {names: _families(body)[2] for names, body in bodies.items()}

    def values(names: str, selector: str) -> list[float]:
        name, want = _selector(selector)
        return [float(v) for n, lab, v in samples[names] if n == name and want.items() <= lab.items()
                and lab.get("hw_id", lab.get("UUID", "")).startswith("GPU-5e1a7c2b-0000-4000-8000-000000000001")]

    rows = [r for r in mapping_rows() if r["stored"] in NEW]
    assert {r["stored"] for r in rows} == set(NEW)
    for row in rows:  # every new row's names are on the endpoints, for the H100
        assert values("otel", row["direct"]), row["direct"]
        if row["dcgm"] not in ("", "—"):
            assert values("dcgm", row["dcgm"]), row["dcgm"]
    assert values("otel", 'gpuscope_gpu_memory_remapped_rows{error_type="corrected"}') == [2.0]
    assert values("otel", "gpuscope_gpu_memory_row_remap_pending") == [1.0]
    assert values("dcgm", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") == [1.0]
    assert set(values("dcgm", "DCGM_FI_DEV_DEC_UTIL")) <= {38.0, 64.0}
    assert set(values("dcgm", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")) <= {7.0, 9.0}
    assert re.search(r'hw_firmware_version="96\.00\.74\.00\.01"', bodies["otel"])
    assert re.search(r'hw_serial_number="1654423001593"', bodies["otel"])
