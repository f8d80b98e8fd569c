"""GPU-GPU link (NVLink / XGMI) byte rates beside the communication analysis: exported as
``gpuscope.gpu.link.io`` byte counters per direction, and shown on the run's timeline as link
utilization tracks (percent of the spec's scale-up bandwidth). The collectors' rates from the
fake NVML / amdsmi tables are checked in test_collectors_nvml.py / test_collectors_amd.py; the
dcgm names in test_prometheus_names.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import link_test_devices, run_cli

T0_NS = 1_767_225_600_000_000_000
STEP_NS = 100_000_000  # 0.1 s between ticks
# (tx, rx) bytes/s per tick
H100 = [(1.0e9, 5.0e8), (2.0e9, 5.0e8), (4.5e10, 9.0e10)]
MI300X = [(None, None), (4.48e10, 2.24e11), (None, None)]  # an XGMI reading missing on the first and last tick




def _rows(k: int) -> list[Any]:
    from gpuscope.collectors.base import Sample

    ts = T0_NS + k * STEP_NS
    out = []
    for key, series in (("gpu0", H100), ("gpu1", MI300X)):
        tx, rx = series[k]
        out.append(Sample(key, ts, {"power_w": 300.0, "xgmi_nvlink_tx_bytes_per_s": tx, "xgmi_nvlink_rx_bytes_per_s": rx}))
    # PCIe-only: no link counters, and a rate it could show would have no link to divide by
    out.append(Sample("gpu2", ts, {"power_w": 200.0, "xgmi_nvlink_tx_bytes_per_s": None}))
    return out


def test_link_rates_are_integrated_into_byte_counters_per_direction() -> None:
    from gpuscope.otel.sink import TelemetryState
    from gpuscope.sinks.base import SampleBatch, SamplerInfo

    state = TelemetryState()
    state.start(SamplerInfo(interval_s=0.1, started_ns=T0_NS, vendors=[], devices=link_test_devices()))
    for k in range(3):
        state.write(SampleBatch([(k, _rows(k))]))
    got = {(dict(a)["hw.name"], dict(a)["network.io.direction"]): v for v, a in state.observe("gpuscope.gpu.link.io")}
    # each step adds the newer reading's rate x 0.1 s; the first reading starts the series at 0
    assert got[("gpu0", "transmit")] == pytest.approx(2.0e9 * 0.1 + 4.5e10 * 0.1)
    assert got[("gpu0", "receive")] == pytest.approx(5.0e8 * 0.1 + 9.0e10 * 0.1)
    # MI300X: its one reading counts over the 0.1 s since the device's previous row (a tick
    # without a reading still has a time); the missing last reading adds nothing
    assert got[("gpu1", "transmit")] == pytest.approx(4.48e10 * 0.1)
    assert got[("gpu1", "receive")] == pytest.approx(2.24e11 * 0.1)
    assert not any(name == "gpu2" for name, _ in got)  # a GPU that never reports has no series, not a 0
    # the PCIe instrument carries no link bytes
    assert not [a for _, a in state.observe("hw.gpu.io") if dict(a)["hw.name"] in ("gpu0", "gpu1")]


def _store_run(db: Path) -> None:
    from gpuscope.sinks import StoreSink
    from gpuscope.sinks.base import SampleBatch, SamplerInfo, SamplerStats

    sink = StoreSink(db, name="links", flush_s=0.0)
    sink.start(SamplerInfo(interval_s=0.1, started_ns=T0_NS, vendors=[], devices=link_test_devices()))
    for k in range(3):
        sink.write(SampleBatch([(k, _rows(k))]))
    sink.close(SamplerStats(interval_s=0.1, started_ns=T0_NS, ended_ns=T0_NS + 3 * STEP_NS, ticks=3))


def test_the_timeline_shows_link_utilization_as_percent_of_the_spec_link(tmp_path: Path) -> None:
    from gpuscope.specs import link_bytes_per_s
    from gpuscope.specs import load_specs

    db = tmp_path / "s.duckdb"
    _store_run(db)
    out = tmp_path / "t.json"
    r = run_cli("export", "--db", str(db), "--format", "chrome", "--out", str(out), "--json")
    assert r.code == 0, r.err
    doc = json.loads(out.read_text())
    base = doc["baseTimeNanoseconds"]
    tracks: dict[str, list[tuple[int, float]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "C" and "_util_pct" in e["name"]:
            (metric, value), = e["args"].items()
            assert e["name"].endswith(" " + metric)
            tracks.setdefault(e["name"], []).append((base + round(e["ts"] * 1000), value))
    # H100 SXM: 18 NVLink4 links x 25 GB/s = 450 GB/s each direction; MI300X: 7 x 64 GB/s = 448 GB/s
    db_specs = load_specs()
    assert db_specs.get("h100-sxm").scaleup_bytes_per_s == 450e9 and db_specs.get("mi300x").scaleup_bytes_per_s == 448e9
    assert link_bytes_per_s("h100-sxm") == 450e9 and link_bytes_per_s("mi300x") == 448e9
    assert link_bytes_per_s("l40s") is None and link_bytes_per_s(None) is None and link_bytes_per_s("no-such-gpu") is None
    ts = [T0_NS + k * STEP_NS for k in range(3)]
    assert sorted(tracks["gpu0 link_tx_util_pct"]) == [(ts[0], pytest.approx(100 * 1.0e9 / 450e9, abs=1e-3)),
                                                       (ts[1], pytest.approx(100 * 2.0e9 / 450e9, abs=1e-3)),
                                                       (ts[2], pytest.approx(10.0))]
    assert sorted(tracks["gpu0 link_rx_util_pct"])[2] == (ts[2], pytest.approx(20.0))
    assert tracks["gpu1 link_tx_util_pct"] == [(ts[1], pytest.approx(10.0))]  # None ticks: no point
    assert tracks["gpu1 link_rx_util_pct"] == [(ts[1], pytest.approx(50.0))]
    assert not any(name.startswith("gpu2 ") for name in tracks)  # PCIe-only card: no link track
    assert json.loads(r.out)["events"]["link_counters"] == 3 + 3 + 1 + 1


def test_hopper_without_nvlink_field_counters_takes_gpms_nvlink_rates() -> None:
    """An H100 whose NVLink throughput fields (138/139) answer NotSupported: the rates come
    from GPM's NVLINK_TOTAL_TX/RX_PER_SEC (61/60, MiB/s), one reading per tick."""
    import copy

    from fakes.fake_pynvml import FakeNvml, load_table
    from gpuscope.collectors import NvmlCollector

    table = copy.deepcopy(load_table("nvml_h100_a100.json"))
    h100 = table["devices"][0]
    for part in [h100["base"], *h100["ticks"]]:
        for fid in [f for f in part.get("fields", {}) if f.split(":")[0] in ("138", "139")]:
            del part["fields"][fid]
        if "gpm" in part:
            part["gpm"].update({"61": 12_000.0, "60": 3_000.0})  # MiB/s
    h100["ticks"][1]["gpm"].update({"61": 150_000.0, "60": 250.5})
    fake = FakeNvml(table, epoch_us=1_763_780_000_000_000)
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0, pcie_fallback_interval_s=0.0)
    devs = {d.key: d for d in c.open()}
    assert {"xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"} <= set(devs["gpu0"].supported)
    v = {s.device: s for s in c.sample()}["gpu0"].values
    assert v["xgmi_nvlink_tx_bytes_per_s"] == 12_000.0 * 2**20 and v["xgmi_nvlink_rx_bytes_per_s"] == 3_000.0 * 2**20
    fake.step()
    rows = {s.device: s for s in c.sample()}
    v = rows["gpu0"].values
    assert v["xgmi_nvlink_tx_bytes_per_s"] == 150_000.0 * 2**20 and v["xgmi_nvlink_rx_bytes_per_s"] == 250.5 * 2**20
    # the A100 beside it has neither: None on every row, and the reason once, at the probe
    assert rows["gpu1"].values.get("xgmi_nvlink_tx_bytes_per_s") is None
    assert devs["gpu1"].unsupported["xgmi_nvlink_rx_bytes_per_s"] == "no NVLink on this GPU"
    gaps = [(d.device, d.metric, d.reason) for d in c.take_degradations()
            if d.metric and d.metric.startswith("xgmi_nvlink")]
    assert sorted(gaps) == [("gpu1", "xgmi_nvlink_rx_bytes_per_s", "no NVLink on this GPU"),
                            ("gpu1", "xgmi_nvlink_tx_bytes_per_s", "no NVLink on this GPU")]
    c.close()
