"""The NVML collector against a fake pynvml driven by tables of values (tests/fakes/tables)."""
from __future__ import annotations

import sys
import time

import pytest

from fakes.fake_pynvml import FakeNvml, load_table
from gpuscope.collectors import CollectorUnavailable, NvmlCollector, discover
from gpuscope.collectors.nvml import import_pynvml
from gpuscope.metrics import GPU_METRIC_NAMES

EPOCH_US = 1_763_780_000_000_000


def _open(table: str, epoch_us: int | None = EPOCH_US, **kw):
    fake = FakeNvml(table, epoch_us=epoch_us)
    kw.setdefault("gpm_min_interval_s", 0.0)
    kw.setdefault("process_interval_s", 0.0)
    kw.setdefault("pcie_fallback_interval_s", 0.0)
    c = NvmlCollector(nvml=fake, **kw)
    return fake, c, {d.key: d for d in c.open()}


def _rows(c) -> dict:
    return {s.device: s for s in c.sample()}


def test_units_are_converted_from_the_table(monkeypatch) -> None:
    # the fake's µs timestamps are near "now", so the collector keeps them as the rows' time
    monkeypatch.setattr("gpuscope.collectors.nvml.now_ns", lambda: EPOCH_US * 1000 + 5_000_000)
    fake, c, devs = _open("nvml_h100_a100.json")
    r = _rows(c)["gpu0"]
    v = r.values
    assert v["power_w"] == pytest.approx(650.123)          # field 185: 650123 mW
    assert v["power_instant_w"] == pytest.approx(689.456)  # field 186: 689456 mW
    assert v["energy_j"] == pytest.approx(123_456_789.012)  # field 83: mJ since driver load
    assert v["power_limit_w"] == pytest.approx(700.0)
    assert v["gpu_util"] == pytest.approx(0.87) and v["mem_util"] == pytest.approx(0.45)  # percent -> ratio
    assert v["mem_used_bytes"] == 76_235_669_504 and v["mem_total_bytes"] == 85_520_809_984
    assert v["temp_c"] == 61.0 and v["mem_temp_c"] == 70.0
    assert v["sm_clock_mhz"] == 1980.0 and v["mem_clock_mhz"] == 2619.0
    assert v["throttle_reasons"] == 4  # SwPowerCap
    # GPM (Hopper): percent -> ratio
    assert v["sm_active"] == pytest.approx(0.785) and v["sm_occupancy"] == pytest.approx(0.3125)
    assert v["tensor_active"] == pytest.approx(0.45) and v["dram_bw_util"] == pytest.approx(0.625)
    # counters need two readings: unknown on the first tick, never 0
    assert v["pcie_tx_bytes_per_s"] is None and v["xgmi_nvlink_tx_bytes_per_s"] is None
    assert "fan_speed" not in v  # NotSupported -> never read, None
    assert r.ts_ns == EPOCH_US * 1000  # the field values' own timestamp (µs -> ns)

    fake.step()
    v = _rows(c)["gpu0"].values
    assert v["gpu_util"] == 1.0 and v["mem_util"] == pytest.approx(0.8)
    # byte counters over the field timestamps' 100 ms
    assert v["pcie_tx_bytes_per_s"] == pytest.approx(1.25e9)
    assert v["pcie_rx_bytes_per_s"] == pytest.approx(3.0e9)
    assert v["pcie_bytes_per_s"] == pytest.approx(4.25e9)
    # NVLink: two links, +100,000 KiB each (tx) and +50,000 KiB each (rx) in 0.1 s
    assert v["xgmi_nvlink_tx_bytes_per_s"] == pytest.approx(2 * 100_000 * 1024 / 0.1)
    assert v["xgmi_nvlink_rx_bytes_per_s"] == pytest.approx(2 * 50_000 * 1024 / 0.1)
    assert v["energy_j"] - 123_456_789.012 == pytest.approx(69.0)  # 69,000 mJ in 0.1 s: 690 W
    assert v["sm_active"] == pytest.approx(0.91) and v["dram_bw_util"] == pytest.approx(0.88)

    fake.step(2)  # tick 3: the counters went back to the base values (a reset): no rate, not negative
    v = _rows(c)["gpu0"].values
    assert v["pcie_tx_bytes_per_s"] is None and v["xgmi_nvlink_rx_bytes_per_s"] is None
    c.close()
    assert fake.initialised == 0  # nvmlShutdown


def test_probe_reports_unsupported_with_reasons() -> None:
    fake, c, devs = _open("nvml_h100_a100.json")
    h100, a100 = devs["gpu0"], devs["gpu1"]
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.pci_device_id == "0x2330"
    assert h100.compute_capability == "9.0" and h100.pci_bus_id == "00000000:18:00.0"
    assert h100.properties["architecture"] == "Hopper" and h100.properties["driver_version"] == "570.124.06"
    assert set(h100.supported) | set(h100.unsupported) == set(GPU_METRIC_NAMES)
    assert h100.unsupported == {"fan_speed": "not supported by this GPU"}
    # GPM only on Hopper and newer; the A100 says why
    for m in ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util"):
        assert m in h100.supported
        assert a100.unsupported[m] == "needs GPM (Hopper or newer; this GPU is Ampere)"
    assert a100.unsupported["power_instant_w"] == "not supported by this GPU"
    assert a100.unsupported["xgmi_nvlink_tx_bytes_per_s"] == "no NVLink on this GPU"
    assert a100.unsupported["proc_gpu_util"] == "not supported by this GPU"
    # each probe-time gap is reported once, as a degradation
    probe = [d for d in c.take_degradations() if d.phase == "probe"]
    assert ("gpu1", "sm_active") in {(d.device, d.metric) for d in probe}
    assert len(probe) == len(h100.unsupported) + len(a100.unsupported)
    assert c.take_degradations() == []


def test_gpm_is_not_asked_for_before_hopper() -> None:
    fake, c, devs = _open("nvml_h100_a100.json")
    fake.calls.clear()
    c.sample()
    # one GPM sample per tick for the H100 only (the A100 never gets a GPM call)
    assert fake.calls.count("nvmlGpmSampleGet") == 1 and fake.calls.count("nvmlGpmMetricsGet") == 1


def test_gpm_windows_are_at_least_the_minimum_interval() -> None:
    fake, c, devs = _open("nvml_h100_a100.json", gpm_min_interval_s=3600.0)
    v = _rows(c)["gpu0"].values
    assert "sm_active" not in v  # no window closed yet this tick: None, not a stale or made-up value


def test_lost_gpu_is_marked_and_the_others_go_on() -> None:
    fake, c, devs = _open("nvml_h100_a100.json")
    c.sample()
    fake.step()
    c.sample()
    fake.step()  # tick 2: gpu1 falls off the bus
    rows = c.sample()
    by = {s.device: s for s in rows}
    assert by["gpu1"].lost and by["gpu1"].values == {}
    assert not by["gpu0"].lost and by["gpu0"].values["gpu_util"] == 0.0
    lost = [d for d in c.take_degradations() if d.phase == "lost"]
    assert [(d.device, d.reason) for d in lost] == [
        ("gpu1", "GPU is lost (fell off the bus): marked lost, no more samples from it")]
    assert devs["gpu1"].lost
    fake.step()
    rows = c.sample()
    assert [s.device for s in rows] == ["gpu0"]  # no more rows from the lost GPU, no exception
    assert c.take_degradations() == []  # reported once


def test_a100_pcie_falls_back_to_the_slow_throughput_call() -> None:
    fake, c, devs = _open("nvml_h100_a100.json", pcie_fallback_interval_s=3600.0)
    assert devs["gpu1"].properties["pcie_sampled_every_s"] == 3600.0
    v = _rows(c)["gpu1"].values
    assert v["pcie_tx_bytes_per_s"] == 1024 * 1024 and v["pcie_rx_bytes_per_s"] == 2048 * 1024  # KB/s -> B/s
    fake.step()
    v = _rows(c)["gpu1"].values
    assert "pcie_tx_bytes_per_s" not in v  # the 20 ms call is paced: None in between


@pytest.fixture
def slow_field_20ms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector's 1 ms line between fast and slow fields, raised to 20 ms for these tests:
    the fake's "slow" field sleeps 60 ms, so a loaded machine (a test run on every core) that
    stalls a fast field's read for a millisecond does not make it slow too."""
    from gpuscope.collectors import nvml_probe

    monkeypatch.setattr(nvml_probe, "SLOW_FIELD_S", 0.02)


def test_a_slow_counter_field_is_read_once_a_second_and_the_rest_every_tick(slow_field_20ms: None) -> None:
    # an H100 on driver 580 took about 4 ms of CPU to answer the energy field, the others µs
    # (bench/README.md); the collector times each counter field once and paces the slow ones
    table = load_table("nvml_h100_a100.json")
    table["devices"][0]["base"]["field_cost_us"] = {"83": 60000}
    fake = FakeNvml(table, epoch_us=EPOCH_US)
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0, slow_counter_interval_s=1.0)
    devs = {d.key: d for d in c.open()}
    props = devs["gpu0"].properties
    assert props["slow_counters_read_every_s"] == 1.0 and list(props["slow_counters_ms_per_read"]) == ["energy_j"]
    assert props["slow_counters_ms_per_read"]["energy_j"] >= 60.0
    assert "slow_counters_ms_per_read" not in devs["gpu1"].properties  # its fields cost nothing
    rows = []
    for _ in range(3):
        rows.append(_rows(c)["gpu0"].values)
        fake.step()
    time.sleep(1.05)  # the slow field's interval, 1 s, passes: it is read again
    rows.append(_rows(c)["gpu0"].values)
    assert ["energy_j" in v for v in rows] == [True, False, False, True]
    assert all(v["power_w"] is not None for v in rows)  # the fast fields: every tick
    assert rows[1]["pcie_tx_bytes_per_s"] is not None  # PCIe counters are fast here: every tick


def test_slow_counter_groups_are_read_together(slow_field_20ms: None) -> None:
    # one slow PCIe counter moves both: a rate's sum never mixes two ticks' readings
    table = load_table("nvml_h100_a100.json")
    table["devices"][0]["base"]["field_cost_us"] = {"198": 60000}
    fake = FakeNvml(table, epoch_us=EPOCH_US)
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0, slow_counter_interval_s=60)
    devs = {d.key: d for d in c.open()}
    assert set(devs["gpu0"].properties["slow_counters_ms_per_read"]) == {"pcie_tx", "pcie_rx"}
    first = _rows(c)["gpu0"].values
    fake.step()
    second = _rows(c)["gpu0"].values
    assert "pcie_tx_bytes_per_s" in first and "pcie_tx_bytes_per_s" not in second
    assert "pcie_rx_bytes_per_s" not in second and second["energy_j"] is not None


def test_watched_processes() -> None:
    # process samples are asked for "since the last one seen, else the last second": table times near now
    fake, c, devs = _open("nvml_h100_a100.json", epoch_us=None)
    assert _rows(c)["gpu0"].values.get("proc_gpu_mem_bytes") is None  # no pids watched: not filled
    c.set_pids({4242})
    r = _rows(c)["gpu0"]
    assert r.values["proc_gpu_mem_bytes"] == 2 * 1024**3  # pid 999 is not ours
    assert r.values["proc_gpu_util"] == pytest.approx(0.55)
    assert [(p.pid, p.gpu_mem_bytes) for p in r.processes] == [(4242, 2 * 1024**3)]
    r = _rows(c)["gpu0"]
    assert r.values["proc_gpu_util"] == 0.0  # NOT_FOUND: no new utilisation sample since the last one
    r1 = _rows(c)["gpu1"]
    assert r1.values["proc_gpu_mem_bytes"] == 0 and "proc_gpu_util" not in r1.values  # A100: util unsupported


def test_mig_instances_are_reported_as_devices() -> None:
    fake, c, devs = _open("nvml_mig.json")
    assert list(devs) == ["gpu0", "gpu0/mig0", "gpu0/mig2"]
    parent, mig0, mig2 = devs["gpu0"], devs["gpu0/mig0"], devs["gpu0/mig2"]
    assert parent.properties["mig_mode"] == "enabled"
    assert parent.unsupported["gpu_util"] == "not supported by this GPU"
    assert parent.unsupported["sm_active"] == "GPM is read per MIG instance while MIG is enabled"
    assert mig0.kind == "mig" and mig0.parent == "gpu0" and mig0.name.endswith("MIG 3g.40gb")
    assert mig0.memory_total_bytes == 40 * 1024**3 and mig0.properties["gpu_instance_id"] == 1
    assert set(mig0.supported) >= {"mem_used_bytes", "sm_active", "tensor_active"}
    assert mig0.unsupported["power_w"] == "not supported by this GPU"
    c.set_pids({4242})
    rows = _rows(c)
    assert rows["gpu0"].values["power_w"] == 120.0 and "gpu_util" not in rows["gpu0"].values
    assert rows["gpu0/mig0"].values["mem_used_bytes"] == 8 * 1024**3
    assert rows["gpu0/mig0"].values["sm_active"] == 0.5 and rows["gpu0/mig0"].values["tensor_active"] == 0.1
    assert rows["gpu0/mig2"].values["sm_active"] == 0.0 and mig2.memory_total_bytes == 10 * 1024**3
    # NVML gives no per-process memory in MIG mode: unknown (None), not 0
    assert rows["gpu0/mig0"].values["proc_gpu_mem_bytes"] is None
    assert "nvmlGpmMigSampleGet" in fake.calls


def test_old_driver_without_field_values_uses_the_getters() -> None:
    fake, c, devs = _open("nvml_old_driver.json")
    d = devs["gpu0"]
    assert d.unsupported["power_instant_w"].startswith("not in this driver's NVML")
    assert d.unsupported["proc_gpu_mem_bytes"].startswith("no permission")
    assert d.unsupported["pcie_tx_bytes_per_s"].startswith("no permission")
    v = _rows(c)["gpu0"].values
    assert v["power_w"] == pytest.approx(56.789) and v["energy_j"] == pytest.approx(42_000.123)
    assert v["power_limit_w"] == 300.0
    fake.step()
    assert _rows(c)["gpu0"].values["energy_j"] == pytest.approx(42_005.123)


def test_a_read_that_starts_failing_is_reported_once_and_dropped() -> None:
    table = load_table("nvml_old_driver.json")
    table["devices"][0]["ticks"] = [{}, {"temp": "NOT_SUPPORTED"}, {"temp": 40}]
    fake = FakeNvml(table)
    c = NvmlCollector(nvml=fake)
    c.open()
    c.take_degradations()
    assert c.sample()[0].values["temp_c"] == 37.0
    fake.step()
    assert "temp_c" not in c.sample()[0].values
    assert [str(d) for d in c.take_degradations()] == ["nvidia: gpu0/temp_c: not supported by this GPU"]
    fake.step()
    assert "temp_c" not in c.sample()[0].values  # NotSupported is permanent: the read left the plan
    # a transient error (at probe time too) is reported once and the read is retried
    table["devices"][0]["ticks"] = [{"temp": "TIMEOUT"}, {"temp": "TIMEOUT"}, {"temp": 41}]
    fake2 = FakeNvml(table)
    c2 = NvmlCollector(nvml=fake2)
    assert "temp_c" in c2.open()[0].supported
    assert [d.reason for d in c2.take_degradations() if d.metric == "temp_c"] == ["NVML error 10: Timeout"]
    assert "temp_c" not in c2.sample()[0].values
    fake2.step()
    assert "temp_c" not in c2.sample()[0].values
    fake2.step()
    assert c2.sample()[0].values["temp_c"] == 41.0
    assert c2.take_degradations() == []


@pytest.mark.parametrize("error, reason", [
    ("LIBRARY_NOT_FOUND", "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver installed"),
    ("DRIVER_NOT_LOADED", "NVML: NVIDIA driver not loaded"),
    ("NO_PERMISSION", "no permission (NVML: Insufficient Permissions)"),
    ("LIB_RM_VERSION_MISMATCH", "NVML/driver version mismatch: the driver was upgraded without reloading the kernel module (reboot)"),
])
def test_init_failures_become_reasons(error: str, reason: str) -> None:
    fake = FakeNvml({"init_error": error, "devices": []})
    with pytest.raises(CollectorUnavailable) as e:
        NvmlCollector(nvml=fake).open()
    assert e.value.vendor == "nvidia" and e.value.reason == reason


def test_no_gpu_and_lost_at_start() -> None:
    with pytest.raises(CollectorUnavailable, match="found no NVIDIA GPU"):
        NvmlCollector(nvml=FakeNvml({"devices": []})).open()
    table = load_table("nvml_h100_a100.json")
    table["devices"][1]["handle_error"] = "GPU_IS_LOST"
    c = NvmlCollector(nvml=FakeNvml(table))
    devs = c.open()
    assert devs[1].lost and devs[1].unsupported["power_w"] == "GPU is lost (fell off the bus)"
    assert [s.device for s in c.sample()] == ["gpu0"]


def test_pynvml_is_imported_only_in_open(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    c = NvmlCollector()
    assert "pynvml" not in sys.modules  # constructing imports nothing
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "not installed"
    with pytest.raises(CollectorUnavailable) as e:
        c.open()
    assert e.value.reason == "nvidia-ml-py not installed (pip install 'gpuscope[nvidia]')"
    # a fake placed where `import pynvml` finds it is used like the real module
    fake = FakeNvml("nvml_old_driver.json")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert import_pynvml() is fake
    devices, statuses = discover([NvmlCollector()])
    assert [d.name for d in devices] == ["Tesla V100-SXM2-16GB"]
    assert statuses[0].available and statuses[0].backend == "nvml"
    assert statuses[0].details["driver_version"] == "450.80.02"
    assert fake.initialised == 0  # discover closes what it opened


def test_a_foreign_pynvml_module_is_named(monkeypatch) -> None:
    import types

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    with pytest.raises(CollectorUnavailable, match="not nvidia-ml-py"):
        import_pynvml()


# -- memory: the v2 query, as nvidia-smi shows it -----------------------------------------------

MIB = 1 << 20


def test_memory_used_equals_nvidia_smi_on_a_real_h100_dump() -> None:
    """`nvidia-smi -q` of an idle 8x H100 node: Total 81559 MiB, Reserved 454 MiB, Used 1 MiB,
    Free 81106 MiB. The v1 query would say 453 MiB used (total - free)."""
    fake, c, devs = _open("nvml_h100x8_nvsmi_dump.json")
    v = _rows(c)["gpu0"].values
    assert v["mem_used_bytes"] == 1 * MIB
    assert v["mem_reserved_bytes"] == 454 * MIB
    assert v["mem_total_bytes"] == 81559 * MIB
    # nvidia-smi rounds each figure to a whole MiB, so its four do not add up (81559 != 454 + 1 + 81106)
    assert abs(v["mem_total_bytes"] - v["mem_used_bytes"] - v["mem_reserved_bytes"] - 81106 * MIB) <= 2 * MIB
    assert devs["gpu0"].properties["memory_query"] == "v2"
    assert "mem_reserved_bytes" in devs["gpu0"].supported
    # the v1 answer counts the reserved memory as used: what gpuscope used to store (the real
    # driver's total - free was 453 MiB; the fake's whole-MiB figures give 455)
    v1 = fake.nvmlDeviceGetMemoryInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert v1.used == v["mem_used_bytes"] + v["mem_reserved_bytes"]


def test_driver_without_v2_falls_back_to_v1_and_says_so() -> None:
    fake, c, devs = _open("nvml_old_driver.json")
    dev = devs["gpu0"]
    v = _rows(c)["gpu0"].values
    assert dev.properties["memory_query"] == "v1"
    assert "Function Not Found" in dev.properties["memory_query_note"] or "not found" in dev.properties["memory_query_note"].lower()
    assert v["mem_used_bytes"] == 524_288_000 and v.get("mem_reserved_bytes") is None
    assert "mem_reserved_bytes" in dev.unsupported and "reserve" in dev.unsupported["mem_reserved_bytes"]


def _dump_with_memory(**memory: str):
    """The real H100 dump's table, with ``memory`` errors added for both GPUs."""
    table = load_table("nvml_h100x8_nvsmi_dump.json")
    for d in table["devices"]:
        d["base"]["memory"].update(memory)
    return table


def test_v2_failing_otherwise_falls_back_to_v1_where_v1_answers() -> None:
    # under WSL the v2 query answers UNKNOWN (nvitop pull request #30; pynvml issue #42): keeping
    # v2 would leave memory empty on every tick
    table = _dump_with_memory(v2="UNKNOWN")
    c = NvmlCollector(nvml=FakeNvml(table, epoch_us=EPOCH_US), gpm_min_interval_s=0.0)
    dev = {d.key: d for d in c.open()}["gpu0"]
    v = _rows(c)["gpu0"].values
    assert dev.properties["memory_query"] == "v1"
    assert "v2 memory query fails" in dev.properties["memory_query_note"]
    assert v["mem_used_bytes"] == (1 + 454) * MIB  # v1: total - free, the reservation counted
    assert v.get("mem_reserved_bytes") is None and "reserve" in dev.unsupported["mem_reserved_bytes"]


def test_v1_refused_but_v2_answering_keeps_v2() -> None:
    # GB10 (DGX Spark, unified memory) refuses v1 with NOT_SUPPORTED and answers v2
    # (xorbitsai/inference pull request #4990)
    c = NvmlCollector(nvml=FakeNvml(_dump_with_memory(v1="NOT_SUPPORTED"), epoch_us=EPOCH_US), gpm_min_interval_s=0.0)
    dev = {d.key: d for d in c.open()}["gpu0"]
    v = _rows(c)["gpu0"].values
    assert dev.properties["memory_query"] == "v2" and "memory_query_note" not in dev.properties
    assert v["mem_used_bytes"] == 1 * MIB and v["mem_reserved_bytes"] == 454 * MIB


def test_neither_memory_query_answering_leaves_memory_unsupported() -> None:
    c = NvmlCollector(nvml=FakeNvml(_dump_with_memory(v1="NOT_SUPPORTED", v2="NOT_SUPPORTED"), epoch_us=EPOCH_US),
                      gpm_min_interval_s=0.0)
    dev = {d.key: d for d in c.open()}["gpu0"]
    v = _rows(c)["gpu0"].values
    assert "memory_query" not in dev.properties
    assert {"mem_used_bytes", "mem_total_bytes", "mem_reserved_bytes"} <= set(dev.unsupported)
    assert v.get("mem_used_bytes") is None and v.get("mem_reserved_bytes") is None
    assert v["power_w"] == pytest.approx(100.89)  # the rest of the device is read as before


class _StubNvmlLib:
    """A stand-in for libnvidia-ml.so behind the real nvidia-ml-py: answers the memory queries
    with the dump's GPU 0 figures; ``v2=False`` is a library without ``nvmlDeviceGetMemoryInfo_v2``."""

    def __init__(self, fake: FakeNvml, v2: bool) -> None:
        self.fake = fake
        if v2:
            self.nvmlDeviceGetMemoryInfo_v2 = self._v2

    def nvmlDeviceGetMemoryInfo(self, handle, ref) -> int:
        m = self.fake.nvmlDeviceGetMemoryInfo(handle)
        ref._obj.total, ref._obj.free, ref._obj.used = m.total, m.free, m.used
        return 0

    def _v2(self, handle, ref) -> int:
        try:
            m = self.fake.nvmlDeviceGetMemoryInfo(handle, version=ref._obj.version)
        except Exception as exc:
            return exc.value
        ref._obj.total, ref._obj.reserved, ref._obj.free, ref._obj.used = m.total, m.reserved, m.free, m.used
        return 0


@pytest.mark.parametrize("v2", [True, False])
def test_the_fake_memory_queries_behave_like_real_nvidia_ml_py(monkeypatch, v2: bool) -> None:
    """The real binding over a stub library: what it raises without the v2 symbol, and what the
    collector's queries make of its structs, are what the fake gives."""
    pynvml = pytest.importorskip("pynvml")
    from gpuscope.collectors.nvml_values import memory_query, read_memory_v1, read_memory_v2

    fake = FakeNvml("nvml_h100x8_nvsmi_dump.json", epoch_us=EPOCH_US)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    monkeypatch.setattr(pynvml, "nvmlLib", _StubNvmlLib(fake, v2=v2))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    assert pynvml.nvmlMemory_v2 == fake.nvmlMemory_v2
    for mod in (pynvml, fake):
        if v2:
            assert memory_query(mod, h) == ("v2", None)
            assert read_memory_v2(mod, h) == {"mem_used_bytes": MIB, "mem_total_bytes": 81559 * MIB,
                                       "mem_reserved_bytes": 454 * MIB}
            # the bare structure version (2) is refused: FUNCTION_NOT_FOUND from the driver
            # (gpuopenanalytics/pynvml issue #59, jp7677/dxvk-nvapi pull request #198)
            with pytest.raises(Exception) as exc:
                mod.nvmlDeviceGetMemoryInfo(h, version=2)
            assert type(exc.value).__name__ == "NVMLError_FunctionNotFound"
        else:
            fake.table["devices"][0]["base"]["memory"]["v2"] = "FUNCTION_NOT_FOUND"
            fake._cache.clear()
            with pytest.raises(Exception) as exc:
                mod.nvmlDeviceGetMemoryInfo(h, version=mod.nvmlMemory_v2)
            assert type(exc.value).__name__ == "NVMLError_FunctionNotFound"
            assert exc.value.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            query, why = memory_query(mod, h)
            assert query == "v1" and "function not found" in why
        assert read_memory_v1(mod, h)["mem_used_bytes"] == 455 * MIB  # v1: the reservation counted as used


# (table, uuid or None, index, what device_clocks gives): GPUs 0 and 1 of the recorded nvidia-smi
# dump (no max clocks in it, so that value is left out), a hand-made A100, a UUID NVML does not know
@pytest.mark.parametrize("table, uuid, index, expected", [
    ("nvml_h100x8_nvsmi_dump.json", "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", None,
     {"sm_clock_mhz": 345.0, "power_w": 100.89, "temperature_c": 30.0, "power_limit_w": 700.0}),
    ("nvml_h100x8_nvsmi_dump.json", None, 1,
     {"sm_clock_mhz": 345.0, "power_w": 82.81, "temperature_c": 30.0, "power_limit_w": 700.0}),
    ("nvml_h100_a100.json", "GPU-5e1a7c2b-0000-4000-8000-000000000002", None,
     {"sm_clock_mhz": 1410.0, "power_limit_w": 400.0}),
    ("nvml_h100_a100.json", "GPU-not-here", None, {}),
])
def test_device_clocks_of_one_gpu(table: str, uuid: str | None, index: int | None, expected: dict) -> None:
    from gpuscope.collectors.nvml import device_clocks

    fake = FakeNvml(table)
    got = device_clocks(uuid, index, nvml=fake)
    assert set(got) >= set(expected) and {k: pytest.approx(v) for k, v in expected.items()} == \
        {k: got[k] for k in expected}
    assert "max_sm_clock_mhz" not in got and fake.initialised == 0  # NVML shut down again


def test_device_clocks_without_nvml_is_empty() -> None:
    from gpuscope.collectors.nvml import device_clocks

    assert device_clocks("GPU-x", nvml=FakeNvml({"init_error": "DRIVER_NOT_LOADED", "devices": []})) == {}
    assert device_clocks(None, None, nvml=FakeNvml("nvml_h100_a100.json")) == {}


def test_ecc_error_counters_and_why_a_gpu_has_none() -> None:
    fake, c, devs = _open("nvml_h100_a100.json")
    v = _rows(c)["gpu0"].values
    assert v["ecc_corrected_errors"] == 12 and v["ecc_uncorrected_errors"] == 1  # fields 3 / 4: volatile SBE / DBE
    assert isinstance(v["ecc_corrected_errors"], int)
    assert "ECC mode off" in devs["gpu1"].unsupported["ecc_corrected_errors"]


def test_xid_events_are_counted_per_gpu_with_the_last_code() -> None:
    fake, c, devs = _open("nvml_h100_a100.json")
    assert {"xid_errors", "last_xid"} <= set(devs["gpu0"].supported)
    v = _rows(c)["gpu0"].values
    assert v["xid_errors"] == 0 and v["last_xid"] == 0  # registered, none yet
    c._xid_last = -1e18  # the drain is paced to once a second; the test steps faster
    fake.step()
    v = _rows(c)["gpu0"].values
    assert v["xid_errors"] == 1 and v["last_xid"] == 79
    c._xid_last = -1e18
    fake.step()
    rows = _rows(c)
    assert rows["gpu0"].values["xid_errors"] == 3 and rows["gpu0"].values["last_xid"] == 31
    c.close()
    assert "nvmlEventSetFree" in fake.calls


def test_xid_registration_refused_says_why() -> None:
    from fakes.fake_pynvml import load_table

    table = load_table("nvml_h100_a100.json")
    table["devices"][0]["xid_register"] = "NO_PERMISSION"
    c = NvmlCollector(nvml=FakeNvml(table, epoch_us=EPOCH_US), gpm_min_interval_s=0.0, process_interval_s=0.0)
    devs = {d.key: d for d in c.open()}
    assert "xid_errors" not in devs["gpu0"].supported
    assert "permission" in devs["gpu0"].unsupported["xid_errors"].lower()
    assert "xid_errors" not in c.sample()[0].values
