"""The sampler: cadence without drift, sinks, the store (runs, devices, samples, stats), devices CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import FIXTURES, run_cli
from fakes.fake_pynvml import FakeNvml
from gpuscope import store
from gpuscope.collectors import (
    AmdCollector,
    Collector,
    CollectorUnavailable,
    DeviceInfo,
    NvmlCollector,
    ReplayCollector,
    Sample,
    load_recording,
)
from gpuscope.errors import StoreError
from gpuscope.sampling import Sampler
from gpuscope.sinks import MemorySink, RecordingSink, SampleBatch, SamplerInfo, Sink, StoreSink

SYNTHETIC = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


class Clocked(Collector):
    """One device whose row records when it was sampled; optionally slow."""

    source = "test"

    def __init__(self, work_s: float = 0.0, fail_at: int | None = None) -> None:
        super().__init__()
        self.work_s = work_s
        self.fail_at = fail_at
        self.calls = 0

    def _open(self) -> list[DeviceInfo]:
        return [DeviceInfo(key="dev0", vendor="test", supported=("gpu_util",))]

    def sample(self) -> list[Sample]:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("boom")
        t = time.monotonic_ns()
        if self.work_s:
            time.sleep(self.work_s)
        return [Sample("dev0", time.time_ns(), {"gpu_util": 0.5, "_mono": t})]


class Unavailable(Collector):
    source = "nowhere"

    def _open(self) -> list[DeviceInfo]:
        raise CollectorUnavailable("nowhere", "no such vendor here")

    def sample(self) -> list[Sample]:  # pragma: no cover
        return []


def test_cadence_does_not_drift() -> None:
    mem = MemorySink()
    s = Sampler([Clocked()], [mem], interval_s=0.02, batch_s=0.1)
    st = s.run(1.0)
    rows = mem.rows("dev0")
    monos = [r.values["_mono"] for r in rows]
    t0 = monos[0]
    # every tick starts at its own slot (t0 + k * interval); late only by its own delay, which
    # does not add up over the run: compare the last ticks' offsets with the first ones'
    offsets = [(m - t0) / 1e9 - k * 0.02 for k, m in zip(mem.ticks, monos)]
    assert all(o > -0.005 for o in offsets)
    tail = sorted(offsets[-10:])[5]
    assert tail < 0.25, offsets[-10:]  # generous: a loaded CI machine delays single ticks, never all of them
    assert st.ticks + st.missed_ticks >= 1.0 / 0.02 * 0.8
    assert st.ticks == len(rows) and st.rows == len(rows)
    assert abs(st.drift_ns) < 0.25e9
    assert st.tick_cpu_ns_mean is not None and st.cpu_ns_per_tick_per_device == st.tick_cpu_ns_mean
    assert mem.ticks == sorted(mem.ticks) and len(set(mem.ticks)) == len(mem.ticks)


def test_tick_statistics_hold_bounded_memory(monkeypatch) -> None:
    # A day at 10 Hz is 864,000 ticks: the sampler keeps exact means and maxima but only the
    # newest PERCENTILE_WINDOW values for its percentiles.
    from gpuscope import sampling as sampler_mod

    monkeypatch.setattr(sampler_mod, "PERCENTILE_WINDOW", 5)
    s = Sampler([Clocked()], [MemorySink()], interval_s=0.01, max_ticks=12)
    st = s.run(5)
    assert st.ticks == 12
    for series in (s._tick_cpu, s._tick_wall, s._lateness):
        assert series.n == 12 and len(series.recent) == 5
    assert st.tick_cpu_ns_mean == s._tick_cpu.total / 12 and st.tick_cpu_ns_max >= max(s._tick_cpu.recent)
    assert st.lateness_ns_p99 == float(max(s._lateness.recent)) and st.drift_ns == s._lateness.recent[-1]


def test_the_percentile_window_is_a_ring_of_the_newest_values(monkeypatch) -> None:
    from gpuscope import sampling as sampler_mod

    monkeypatch.setattr(sampler_mod, "PERCENTILE_WINDOW", 5)
    series = sampler_mod._Series()
    for v in range(1, 4):
        series.add(v)
    assert series.recent == [1, 2, 3]
    for v in range(4, 13):
        series.add(v)
    assert series.recent == [8, 9, 10, 11, 12] and series.last == 12 and series.max == 12 and series.n == 12
    assert series.total == sum(range(1, 13))


def test_slow_ticks_are_skipped_not_bunched() -> None:
    mem = MemorySink()
    st = Sampler([Clocked(work_s=0.05)], [mem], interval_s=0.02).run(0.8)
    monos = [r.values["_mono"] for r in mem.rows("dev0")]
    gaps = [(b - a) / 1e9 for a, b in zip(monos, monos[1:])]
    assert st.missed_ticks >= st.ticks  # each 50 ms tick overruns two 20 ms slots
    assert min(gaps) >= 0.02 * 0.9  # never two ticks back to back to catch up
    assert all(b - a >= 2 for a, b in zip(mem.ticks, mem.ticks[1:]))  # the skipped slots show as gaps


def test_max_rate_and_bad_interval() -> None:
    with pytest.raises(ValueError, match="100 Hz"):
        Sampler([Clocked()], interval_s=0.005)
    Sampler([Clocked()], interval_s=0.01)  # 100 Hz is allowed


def test_unavailable_vendor_and_failing_collector_do_not_stop_the_others() -> None:
    mem = MemorySink()
    bad = Clocked(fail_at=3)
    s = Sampler([Unavailable(), bad], [mem], interval_s=0.01, max_ticks=10)
    s.start()
    assert s.wait(10)
    st = s.stop()
    assert [(v.vendor, v.available, v.reason) for v in s.unavailable] == [("nowhere", False, "no such vendor here")]
    assert st.ticks == 10 and len(mem.rows("dev0")) == 9
    assert [g.reason for g in st.degradations] == ["sample() failed: RuntimeError: boom"]
    assert mem.info is not None and mem.stats is st


def test_a_failing_sink_is_reported_and_the_others_get_the_rows() -> None:
    class Broken(Sink):
        def write(self, batch: SampleBatch) -> None:
            raise OSError("disk full")

    mem = MemorySink()
    st = Sampler([Clocked()], [Broken(), mem], interval_s=0.01, max_ticks=5).run(10)
    assert len(mem.rows("dev0")) == 5 and st.sink_errors >= 1
    assert any("sink Broken failed: OSError: disk full" in g.reason for g in st.degradations)


def test_replay_through_the_sampler_into_a_recording(tmp_path: Path) -> None:
    out = tmp_path / "again.jsonl"
    rep = ReplayCollector(SYNTHETIC, realtime=False)
    s = Sampler([rep], [RecordingSink(out)], interval_s=0.01)
    s.start()
    assert s.wait(20)  # ends by itself when the recording is exhausted
    st = s.stop()
    assert st.ticks == 30
    again = load_recording(out)
    orig = load_recording(SYNTHETIC)
    assert [[r["values"] for r in t] for t in again.ticks] == [[r["values"] for r in t] for t in orig.ticks]
    assert [d.key for d in again.devices] == ["gpu0", "gpu1", "host"]


def _fake_nvml_sampler(db: Path, **kw) -> tuple[Sampler, StoreSink, FakeNvml]:
    fake = FakeNvml("nvml_h100_a100.json")
    sink = StoreSink(db, name="fake-h100", command="python serve.py", flush_s=kw.pop("flush_s", 0.2))
    s = Sampler([NvmlCollector(nvml=fake, gpm_min_interval_s=0.0), AmdCollector(rocm_globs=["/nonexistent*"], use_cli=False)],
                [sink], interval_s=kw.pop("interval_s", 0.02), batch_s=0.1, **kw)
    return s, sink, fake


def test_store_sink_writes_a_run_that_others_can_read_while_it_records(db: Path) -> None:
    s, sink, fake = _fake_nvml_sampler(db)
    s.start()
    try:
        # the first flush lands about a second in; on a loaded machine later: wait for it
        end = time.monotonic() + 30
        while sink.rows_written == 0 and time.monotonic() < end:
            time.sleep(0.05)
        # another process lists runs while the sampler writes: it gets in between the flushes
        p = subprocess.run([sys.executable, "-m", "gpuscope", "runs", "--json", "--db", str(db)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        (run,) = json.loads(p.stdout)
        assert run["status"] == "recording" and run["samples"] > 0 and run["name"] == "fake-h100"
    finally:
        st = s.stop()
    con = store.connect(db, read_only=True)
    try:
        (run,) = store.list_runs(con)
        assert run["status"] == "complete" and run["source"] == "run" and run["command"] == "python serve.py"
        assert run["samples"] == st.rows and run["ended_ns"] >= run["started_ns"]
        devs = con.execute("SELECT device_id, key, source, vendor, kind, name, memory_total_bytes, properties "
                           "FROM devices ORDER BY device_id").fetchall()
        assert [(d[0], d[1], d[2], d[3]) for d in devs] == [(0, "gpu0", "telemetry", "nvidia"), (1, "gpu1", "telemetry", "nvidia")]
        props = json.loads(devs[1][7])
        assert props["unsupported"]["sm_active"].startswith("needs GPM") and "power_w" in props["supported"]
        vals = con.execute("SELECT min(power_w), max(power_w), min(gpu_util), max(sm_active), count(*), "
                           "count(fan_speed), count(host_cpu_util) FROM samples WHERE device_id = 0").fetchone()
        assert vals[:4] == (pytest.approx(650.123), pytest.approx(650.123), 0.87, 0.785)
        assert vals[5] == 0 and vals[6] == 0  # unsupported and host-only columns stay NULL
        stats = con.execute("SELECT ticks, rows, devices, interval_ns, tick_cpu_ns_mean > 0, degradations "
                            "FROM sampler_stats").fetchone()
        assert stats[:5] == (st.ticks, st.rows, 2, 20_000_000, True)
        assert any(d["metric"] == "fan_speed" for d in json.loads(stats[5]))
        info = json.loads(con.execute("SELECT info FROM runs").fetchone()[0])
        assert info["sampler"]["pid"] == os.getpid()
        assert [v["vendor"] for v in info["vendors"] if not v["available"]] == ["amd"]
    finally:
        con.close()


def test_lost_gpu_is_stored_as_an_annotation(db: Path) -> None:
    fake = FakeNvml("nvml_h100_a100.json")
    fake.step(2)  # the A100 is lost from the start of sampling (after the probe)

    class Late(NvmlCollector):
        def _open(self):
            fake.tick = 0
            out = super()._open()
            fake.tick = 2
            return out

    sink = StoreSink(db, name="lost", flush_s=0.0)
    st = Sampler([Late(nvml=fake)], [sink], interval_s=0.02, max_ticks=5).run(10)
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute("SELECT device_id, count(*) FROM samples GROUP BY 1 ORDER BY 1").fetchall()
        assert rows == [(0, 5)]
        ann = con.execute("SELECT kind, name, device_id FROM annotations").fetchall()
        assert ann == [("device_lost", "gpu1", 1)]
    finally:
        con.close()
    assert any(g.phase == "lost" and g.device == "gpu1" for g in st.degradations)


def test_store_sink_keeps_rows_while_the_store_is_busy(db: Path) -> None:
    s, sink, fake = _fake_nvml_sampler(db, interval_s=0.02)
    sink.lock_retry_s = 0.0
    s.start()
    time.sleep(0.3)
    hold = ("import duckdb, time\n"
            "while True:\n"
            "    try:\n"
            f"        c = duckdb.connect({str(db)!r}); break\n"
            "    except duckdb.IOException:\n"
            "        time.sleep(0.01)\n"
            "print('held', flush=True); time.sleep(0.8)")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        time.sleep(0.4)
    finally:
        holder.wait(timeout=30)
    st = s.stop()
    assert sink.last_error is not None and "busy" in sink.last_error  # it met the lock ...
    con = store.connect(db, read_only=True)
    try:  # ... and lost nothing
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == st.rows
        assert con.execute("SELECT status FROM runs").fetchone()[0] == "complete"
    finally:
        con.close()


def test_store_sink_into_an_existing_run(db: Path) -> None:
    con = store.connect(db)
    con.execute("INSERT INTO runs (id, name, status, source, created_ns, info) VALUES (nextval('run_id_seq'), 'w', "
                "'recording', 'run', 1, ?)", [json.dumps({"owner": {"pid": os.getpid()}})])
    run_id = con.execute("SELECT max(id) FROM runs").fetchone()[0]
    con.execute("INSERT INTO devices (run_id, device_id, key, source) VALUES (?, 0, 'gpu0', 'trace')", [run_id])
    con.close()
    sink = StoreSink(db, run_id=run_id, final_status=None)
    Sampler([ReplayCollector(SYNTHETIC, realtime=False)], [sink], interval_s=0.01).run(5)
    con = store.connect(db, read_only=True)
    try:
        assert con.execute("SELECT status FROM runs").fetchone()[0] == "recording"  # left to the wrapper
        assert con.execute("SELECT list(device_id ORDER BY device_id) FROM devices WHERE source = 'telemetry'"
                           ).fetchone()[0] == [1, 2, 3]  # after the trace's device
        host = con.execute("SELECT max(proc_count), count(gpu_util) FROM samples WHERE device_id = 3").fetchone()
        assert host == (3, 0)
    finally:
        con.close()
    with pytest.raises(StoreError, match="run 999 does not exist"):
        StoreSink(db, run_id=999).start(SamplerInfo(0.1, time.time_ns(), [], []))


def test_migration_from_schema_2_adds_the_new_columns(tmp_path: Path, monkeypatch) -> None:
    from gpuscope import metrics

    path = tmp_path / "v2.duckdb"
    old = tuple(m for m in metrics.METRICS if m.name not in dict(store.schema._SAMPLE_COLUMNS_V3)
                and m.name != "mem_reserved_bytes")
    monkeypatch.setattr(store.schema, "METRICS", old)
    monkeypatch.setattr(store.schema, "SCHEMA_VERSION", 2)
    store.connect(path).close()
    monkeypatch.undo()
    con = store.connect(path)
    try:
        assert store.schema_version(con) == store.SCHEMA_VERSION
        cols = [r[0] for r in con.execute("DESCRIBE samples").fetchall()]
        # step 2->3 adds its columns, then step 3->4 mem_reserved_bytes
        assert cols[-len(store.schema._SAMPLE_COLUMNS_V3) - 1:] == [n for n, _ in store.schema._SAMPLE_COLUMNS_V3] + ["mem_reserved_bytes"]
        assert con.execute("SELECT count(*) FROM sampler_stats").fetchone()[0] == 0
    finally:
        con.close()
    # and the sampler writes into the migrated store, whose column order differs from a new one
    st = Sampler([ReplayCollector(SYNTHETIC, realtime=False)], [StoreSink(path)], interval_s=0.01).run(5)
    con = duckdb.connect(str(path), read_only=True)
    # every row but the lost GPU's (an annotation instead)
    assert con.execute("SELECT count(*), max(proc_count) FROM samples").fetchone() == (st.rows - 1, 3)
    con.close()


def test_devices_without_any_gpu_explains_itself(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.DEFAULT_ROCM_GLOBS", ("/nonexistent*",))
    monkeypatch.setattr("gpuscope.collectors.amd_smi_cli.find_amd_smi", lambda: None)
    r = run_cli("devices", "--json")
    assert r.code == 0 and r.err == ""
    doc = r.json()
    reasons = {v["vendor"]: v["reason"] for v in doc["vendors"]}
    assert reasons["nvidia"] == "nvidia-ml-py not installed (pip install 'gpuscope[nvidia]')"
    assert reasons["amd"].startswith("amdsmi not importable (") and reasons["amd"].endswith("amd-smi CLI not found")
    assert reasons["host"] is None and doc["gpus"] == 0 and [d["key"] for d in doc["devices"]] == ["host"]
    t = run_cli("devices")
    assert t.code == 0
    assert "nvidia: nvidia-ml-py not installed" in t.out and "no GPU found on this machine" in t.out


def test_devices_with_fake_nvml(monkeypatch) -> None:
    fake = FakeNvml("nvml_h100_a100.json")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    r = run_cli("devices", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    nv = next(v for v in doc["vendors"] if v["vendor"] == "nvidia")
    assert nv["available"] and nv["details"]["driver_version"] == "570.124.06"
    gpu1 = next(d for d in doc["devices"] if d["key"] == "gpu1")
    assert gpu1["name"] == "NVIDIA A100-SXM4-80GB" and gpu1["pci_device_id"] == "0x20b2"
    assert gpu1["unsupported"]["tensor_active"] == "needs GPM (Hopper or newer; this GPU is Ampere)"
    text = run_cli("devices").out
    assert "missing sm_active, sm_occupancy, tensor_active, dram_bw_util: needs GPM" in text


def test_spec_keys_come_from_the_spec_database_when_there_is_one(monkeypatch) -> None:
    import types

    class Match:
        def __init__(self, key):
            self.spec = types.SimpleNamespace(key=key)
            self.exact = True

    class Db:
        def identify(self, name=None, pci_id=None, memory_bytes=None):
            return Match("h100-sxm") if pci_id == "0x2330" else None

    mod = types.ModuleType("gpuscope.specs")
    mod.load_specs = lambda: Db()
    monkeypatch.setitem(sys.modules, "gpuscope.specs", mod)
    from gpuscope.collectors import discover

    devices, _ = discover([NvmlCollector(nvml=FakeNvml("nvml_h100_a100.json"))])
    assert [(d.key, d.spec_key, d.spec_exact) for d in devices] == [("gpu0", "h100-sxm", True), ("gpu1", None, None)]


def test_sampler_watches_the_process_tree(monkeypatch) -> None:
    from gpuscope.collectors import HostCollector, ProcessTree

    tree = ProcessTree([os.getpid()], refresh_s=0.0)
    fake = FakeNvml("nvml_h100_a100.json", epoch_us=None)
    nv = NvmlCollector(nvml=fake, process_interval_s=0.0)
    seen: list[frozenset[int]] = []
    orig = nv.set_pids
    monkeypatch.setattr(nv, "set_pids", lambda p: (seen.append(frozenset(p)), orig(p)))
    mem = MemorySink()
    Sampler([nv, HostCollector(tree)], [mem], interval_s=0.05, tree=tree, max_ticks=4).run(10)
    assert seen and os.getpid() in seen[0]
    host = mem.rows("host")[-1].values
    assert host["proc_count"] >= 1 and host["proc_rss_bytes"] > 0
    assert mem.rows("gpu0")[-1].values["proc_gpu_mem_bytes"] == 0  # our pid has no memory on the fake GPU


# -- memory: nvidia-smi's "used", the driver's reservation apart ---------------------------------

MIB = 1 << 20


def test_store_holds_nvidia_smis_memory_figures_and_which_query_gave_them(db: Path) -> None:
    """The real 8x H100 `nvidia-smi -q` dump: Used 1 MiB, Reserved 454 MiB on both GPUs; a driver
    without the v2 query stores v1's used and NULL reserved, and says so in devices.properties."""
    nv = NvmlCollector(nvml=FakeNvml("nvml_h100x8_nvsmi_dump.json"), gpm_min_interval_s=0.0)
    Sampler([nv], [StoreSink(db, name="h100", flush_s=0.0)], interval_s=0.02, max_ticks=3).run(10)
    old = NvmlCollector(nvml=FakeNvml("nvml_old_driver.json"), gpm_min_interval_s=0.0)
    Sampler([old], [StoreSink(db, name="v100", flush_s=0.0)], interval_s=0.02, max_ticks=3).run(10)
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT r.name, d.key, min(s.mem_used_bytes), max(s.mem_used_bytes), min(s.mem_reserved_bytes), "
            "count(s.mem_reserved_bytes), count(*), json_extract_string(d.properties, '$.memory_query') "
            "FROM samples s JOIN runs r ON r.id = s.run_id JOIN devices d USING (run_id, device_id) "
            "GROUP BY ALL ORDER BY 1, 2").fetchall()
        assert rows == [("h100", "gpu0", MIB, MIB, 454 * MIB, 3, 3, "v2"),
                        ("h100", "gpu1", MIB, MIB, 454 * MIB, 3, 3, "v2"),
                        ("v100", "gpu0", 524_288_000, 524_288_000, None, 0, 3, "v1")]
        props = json.loads(con.execute("SELECT properties FROM devices d JOIN runs r ON r.id = d.run_id "
                                       "WHERE r.name = 'v100'").fetchone()[0])
        assert "function not found" in props["memory_query_note"]
        assert "reserve" in props["unsupported"]["mem_reserved_bytes"]
    finally:
        con.close()


def test_migration_from_schema_3_adds_mem_reserved_bytes_null_for_old_rows(tmp_path: Path, monkeypatch) -> None:
    from gpuscope import metrics

    path = tmp_path / "v3.duckdb"
    monkeypatch.setattr(store.schema, "METRICS", tuple(m for m in metrics.METRICS if m.name != "mem_reserved_bytes"))
    monkeypatch.setattr(store.schema, "SCHEMA_VERSION", 3)
    con = store.connect(path)
    con.execute("INSERT INTO samples (run_id, device_id, ts_ns, mem_used_bytes) VALUES (1, 0, 5, ?)", [455 * MIB])
    con.close()
    monkeypatch.undo()
    con = store.connect(path)
    try:
        assert store.schema_version(con) == store.SCHEMA_VERSION >= 4
        assert con.execute("SELECT mem_used_bytes, mem_reserved_bytes FROM samples").fetchall() == [(455 * MIB, None)]
        assert [r[1] for r in con.execute("DESCRIBE samples").fetchall()
                if r[0] == "mem_reserved_bytes"] == ["BIGINT"]
    finally:
        con.close()


def test_recordings_carry_the_reserved_memory_and_old_ones_replay_it_as_null(db: Path, tmp_path: Path) -> None:
    # the synthetic fixture predates mem_reserved_bytes: its rows replay with the column NULL
    assert "mem_reserved_bytes" not in load_recording(SYNTHETIC).header["metrics"]
    rep = ReplayCollector(SYNTHETIC, realtime=False)
    rep.open()
    assert all(s.values.get("mem_reserved_bytes") is None for s in rep.sample())
    Sampler([ReplayCollector(SYNTHETIC, realtime=False)], [StoreSink(db, name="old", flush_s=0.0)],
            interval_s=0.01).run(20)
    # a recording of the H100 dump keeps it, and which query gave "used"
    out = tmp_path / "h100.jsonl.gz"
    nv = NvmlCollector(nvml=FakeNvml("nvml_h100x8_nvsmi_dump.json"), gpm_min_interval_s=0.0)
    Sampler([nv], [RecordingSink(out)], interval_s=0.02, max_ticks=2).run(10)
    rec = load_recording(out)
    assert rec.header["metrics"]["mem_reserved_bytes"] == "By"
    assert [d.properties["memory_query"] for d in rec.devices] == ["v2", "v2"]
    assert {r["values"]["mem_reserved_bytes"] for t in rec.ticks for r in t} == {454 * MIB}
    Sampler([ReplayCollector(out, realtime=False)], [StoreSink(db, name="new", flush_s=0.0)], interval_s=0.01).run(20)
    con = store.connect(db, read_only=True)
    try:
        got = dict(con.execute("SELECT r.name, count(s.mem_used_bytes) > 0 AND count(s.mem_reserved_bytes) = 0 "
                               "FROM samples s JOIN runs r ON r.id = s.run_id GROUP BY 1").fetchall())
        assert got == {"old": True, "new": False}
        assert con.execute("SELECT DISTINCT mem_used_bytes, mem_reserved_bytes FROM samples s JOIN runs r "
                           "ON r.id = s.run_id WHERE r.name = 'new'").fetchall() == [(MIB, 454 * MIB)]
    finally:
        con.close()


def test_devices_says_which_memory_query_it_uses(monkeypatch) -> None:
    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.DEFAULT_ROCM_GLOBS", ("/nonexistent*",))
    monkeypatch.setattr("gpuscope.collectors.amd_smi_cli.find_amd_smi", lambda: None)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml("nvml_h100x8_nvsmi_dump.json"))
    r = run_cli("devices", "--json")
    assert r.code == 0, r.err
    gpus = [d for d in r.json()["devices"] if d["kind"] == "gpu"]
    assert [d["properties"]["memory_query"] for d in gpus] == ["v2", "v2"]
    assert all("mem_reserved_bytes" in d["supported"] for d in gpus)
    assert run_cli("devices").out.count("memory_query v2") == 2
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml("nvml_old_driver.json"))
    text = run_cli("devices", "--all-reasons").out
    assert "memory_query v1" in text
    assert "missing mem_reserved_bytes: the driver has no v2 memory query" in text


@pytest.mark.parametrize("maxlen", [1, 7, 30, 100])
def test_live_buffer_keeps_the_newest_samples_of_a_real_recording(maxlen: int) -> None:
    """A recording played through the sampler into a LiveBuffer: each device's ring holds the
    recording's last ``maxlen`` rows of that device, values and spacing as recorded."""
    from gpuscope.sinks import LiveBuffer

    orig = load_recording(SYNTHETIC)
    live = LiveBuffer(maxlen=maxlen)
    before = live.snapshot()
    assert before.ticks == 0 and before.last_tick is None and before.samples == {} and before.devices == ()
    s = Sampler([ReplayCollector(SYNTHETIC, realtime=False)], [live], interval_s=0.01)
    s.start()
    assert s.wait(20)
    st = s.stop()
    snap = live.snapshot()
    # the last tick's number is its slot: slots the loaded machine missed are skipped, not bunched
    assert snap.ticks == st.ticks == len(orig.ticks) == 30 and snap.last_tick == 29 + st.missed_ticks
    assert [d.key for d in snap.devices] == ["gpu0", "gpu1", "host"] and snap.interval_s == 0.01
    assert set(snap.samples) == {"gpu0", "gpu1", "host"}
    for dev, got in snap.samples.items():
        recorded = [r for tick in orig.ticks for r in tick if r["device"] == dev]
        want = recorded[-maxlen:]
        assert len(got) == min(maxlen, len(recorded))
        assert [g.values for g in got] == [r["values"] for r in want]
        # timestamps are moved to now, keeping the recorded spacing
        assert [g.ts_ns - got[0].ts_ns for g in got] == [r["ts_ns"] - want[0]["ts_ns"] for r in want]
    assert snap.latest()["gpu0"].values == [r for r in orig.ticks[-1] if r["device"] == "gpu0"][0]["values"]
    assert live.latest().keys() == snap.latest().keys()
    assert live.stats is st


def test_live_buffer_snapshots_are_consistent_while_the_sampler_writes() -> None:
    """A reader thread takes snapshots while the sampler's dispatch thread writes: each snapshot
    is whole (every ring within its bound, oldest first, never half of a batch) and never
    changes afterwards."""
    import threading

    from gpuscope.sinks import LiveBuffer

    live = LiveBuffer(maxlen=5)
    s = Sampler([ReplayCollector(SYNTHETIC, realtime=False, loop=True)], [live], interval_s=0.01, batch_s=0.01,
                max_ticks=200)
    snaps = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            snaps.append(live.snapshot())

    reader = threading.Thread(target=read)
    s.start()
    reader.start()
    assert s.wait(30)
    s.stop()
    stop.set()
    reader.join()
    assert len(snaps) > 10
    frozen = [(sn.ticks, {k: [x.ts_ns for x in v] for k, v in sn.samples.items()}) for sn in snaps]
    for sn in snaps:
        for ring in sn.samples.values():
            assert len(ring) <= 5
            assert [x.ts_ns for x in ring] == sorted(x.ts_ns for x in ring)
        # every device gets one row per tick in this recording: a whole batch or none of it
        if sn.ticks >= 5:
            assert {len(v) for v in sn.samples.values()} == {5}
    assert [sn.ticks for sn in snaps] == sorted(sn.ticks for sn in snaps)
    assert frozen == [(sn.ticks, {k: [x.ts_ns for x in v] for k, v in sn.samples.items()}) for sn in snaps]
    assert live.snapshot().ticks == 200
    with pytest.raises(ValueError):
        LiveBuffer(maxlen=0)
