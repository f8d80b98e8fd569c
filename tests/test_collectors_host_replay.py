"""The host collector (psutil, real) and recordings: format, replay, `gpuscope record`."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from gpuscope.collectors import HostCollector, ProcessTree, ReplayCollector, Sample, load_recording
from gpuscope.collectors.replay import RecordingWriter
from gpuscope.errors import InputError
from gpuscope.metrics import HOST_METRIC_NAMES

SYNTHETIC = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


def test_host_collector_and_process_tree() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time\nx=0\nt=time.time()\nwhile time.time()-t<3: x+=1"])
    try:
        tree = ProcessTree([os.getpid()], refresh_s=0.0)
        c = HostCollector(tree)
        (dev,) = c.open()
        assert dev.key == "host" and dev.kind == "host" and dev.vendor == "host"
        assert set(dev.supported) == set(HOST_METRIC_NAMES) and dev.memory_total_bytes > 0
        import psutil

        procs = [psutil.Process(os.getpid()), psutil.Process(child.pid)]

        def tree_cpu_s() -> tuple[float, float]:
            return sum(p.cpu_times().user + p.cpu_times().system for p in procs), time.monotonic()

        time.sleep(0.3)
        a0 = tree_cpu_s()
        (first,) = c.sample()
        a1 = tree_cpu_s()
        assert first.values["proc_cpu_cores"] is None  # needs two readings
        time.sleep(0.5)
        b0 = tree_cpu_s()
        (s,) = c.sample()
        b1 = tree_cpu_s()
        v = s.values
        assert 0.0 <= v["host_cpu_util"] <= 1.0
        assert 0 < v["host_mem_used_bytes"] < v["host_mem_total_bytes"] == dev.memory_total_bytes
        assert v["proc_count"] >= 2  # this process and the busy child
        assert child.pid in tree.pids()
        assert v["proc_rss_bytes"] > 10 * 2**20
        # the child spins: the tree's CPU time between the two readings, bracketed by what psutil
        # says just outside and just inside them (a loaded machine gives the child what it gives)
        low = (b0[0] - a1[0]) / (b1[1] - a0[1])
        high = (b1[0] - a0[0]) / (b0[1] - a1[1])
        assert low > 0.0 and 0.95 * low - 0.05 <= v["proc_cpu_cores"] <= 1.05 * high + 0.05  # 10 ms ticks
        assert v["proc_cpu_cores"] < os.cpu_count() + 0.5
        assert abs(s.ts_ns - time.time_ns()) < 5e9
    finally:
        child.kill()
        child.wait()
    c.close()


def test_host_without_tree_says_why() -> None:
    c = HostCollector()
    (dev,) = c.open()
    assert dev.unsupported["proc_rss_bytes"].startswith("no process tree to watch")
    time.sleep(0.06)
    (s,) = c.sample()
    assert "proc_rss_bytes" not in s.values and s.values["host_cpu_util"] is not None


def test_short_windows_give_no_cpu_util() -> None:
    c = HostCollector()
    c.open()
    (s,) = c.sample()  # right after open: a window under 50 ms says nothing
    assert s.values["host_cpu_util"] is None


def test_synthetic_fixture_is_marked_and_loads() -> None:
    rec = load_recording(SYNTHETIC)
    assert rec.header["synthetic"] is True and "SYNTHETIC" in rec.header["note"]
    assert [d.key for d in rec.devices] == ["gpu0", "gpu1", "host"]
    assert rec.interval_s == 0.1 and len(rec.ticks) == 30
    assert rec.rows == 30 + 21 + 30  # gpu1: 20 rows, then its lost row, then nothing
    assert rec.devices[0].name == "NVIDIA H100 80GB HBM3" and "sm_active" in rec.devices[0].supported
    assert "sm_active" in rec.devices[1].unsupported


def test_replay_one_tick_per_call_keeps_values_and_spacing() -> None:
    c = ReplayCollector(SYNTHETIC, realtime=False)
    devs = c.open()
    assert [d.source for d in devs] == ["replay"] * 3 and devs[0].properties["replay_of"] == str(SYNTHETIC)
    t0 = c.sample()
    assert [s.device for s in t0] == ["gpu0", "gpu1", "host"]
    assert t0[0].values["power_instant_w"] == 690.0 and t0[0].values["gpu_util"] == 1.0
    assert abs(t0[0].ts_ns - time.time_ns()) < 5e9  # moved to now
    t1 = c.sample()
    assert t1[0].ts_ns - t0[0].ts_ns == 100_000_000  # recorded spacing
    assert t1[0].values["pcie_tx_bytes_per_s"] == pytest.approx(5e8)
    for _ in range(18):
        rows = c.sample()
    rows = c.sample()  # tick 20
    assert {s.device: s.lost for s in rows} == {"gpu0": False, "gpu1": True, "host": False}
    for _ in range(9):
        assert "gpu1" not in {s.device for s in c.sample()}
    assert c.sample() == [] and c.done


def test_replay_realtime_follows_the_recorded_cadence() -> None:
    c = ReplayCollector(SYNTHETIC, realtime=True, speed=10.0)  # 3 s recording -> 0.3 s
    c.open()
    assert c.interval_s == pytest.approx(0.01)
    got: list[Sample] = []
    t = time.monotonic()
    first = c.sample()
    assert len(first) == 3  # tick 0 is due at once
    while not c.done and time.monotonic() - t < 10:
        got.extend(c.sample())
        time.sleep(0.005)
    elapsed = time.monotonic() - t
    assert len(first) + len(got) == 81 and elapsed >= 0.25  # not all at once
    ts = [s.ts_ns for s in first + got if s.device == "gpu0"]
    assert (ts[-1] - ts[0]) == pytest.approx(2.9e9 / 10, rel=1e-6)  # timestamps at the replay speed


def test_replay_loop() -> None:
    c = ReplayCollector(SYNTHETIC, realtime=False, loop=True)
    c.open()
    ts = [c.sample()[0].ts_ns for _ in range(35)]
    assert not c.done and all(b > a for a, b in zip(ts, ts[1:]))  # the second pass continues in time


def test_bad_recordings(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"format": "something else"}\n')
    (tmp_path / "b.jsonl").write_text("not json\n")
    with pytest.raises(InputError, match="not a gpuscope recording"):
        load_recording(tmp_path / "a.jsonl")
    with pytest.raises(InputError, match="not a gpuscope recording"):
        load_recording(tmp_path / "b.jsonl")
    with pytest.raises(InputError, match="no such recording"):
        load_recording(tmp_path / "missing.jsonl")


def test_writer_roundtrip_gz_and_truncated_tail(tmp_path: Path) -> None:
    rec = load_recording(SYNTHETIC)
    out = tmp_path / "r.jsonl.gz"
    w = RecordingWriter(out, rec.devices, interval_s=0.1)
    rows = [Sample(r["device"], r["ts_ns"], r["values"], lost=bool(r.get("lost"))) for r in rec.ticks[0]]
    w.write_tick(0, rows)
    w.close({"ticks": 1})
    again = load_recording(out)
    assert again.ticks[0] == rec.ticks[0] and again.end["rows"] == 3
    # a recorder killed mid-line: everything before the broken last line is kept
    text = gzip.decompress(out.read_bytes()).decode().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(text[:-1]) + "\n" + text[-1][:10])
    assert load_recording(tmp_path / "cut.jsonl").rows == 3


def test_record_command_host_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA here, whatever the machine has
    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.DEFAULT_ROCM_GLOBS", ("/nonexistent*",))
    monkeypatch.setattr("gpuscope.collectors.amd_smi_cli.find_amd_smi", lambda: None)
    out = tmp_path / "host.jsonl.gz"
    r = run_cli("record", "--seconds", "0.4", "--interval", "0.05", "--out", out, "--pid", os.getpid(), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["devices"] == ["host"] and doc["gpus"] == 0 and doc["ticks"] >= 4
    assert "nvidia-ml-py not installed" in doc["unavailable"]["nvidia"]
    assert "nvidia-ml-py not installed" in r.err  # said on stderr too, JSON alone on stdout
    rec = load_recording(out)
    assert rec.header["interval_s"] == 0.05 and rec.rows == doc["rows"]
    assert rec.devices[0].properties["watched_roots"] == [os.getpid()]
    assert rec.end["stats"]["ticks"] == doc["ticks"]
    c = ReplayCollector(out, realtime=False)
    c.open()
    assert c.sample()[0].values["proc_count"] >= 1
    json.dumps(doc)


@pytest.mark.parametrize("args, msg", [
    (("--seconds", "0"), "--seconds: '0' must be a number greater than 0"),
    (("--seconds", "1", "--interval", "0.001"), "--interval: must be between 0.01"),
])
def test_record_command_bad_arguments(tmp_path: Path, args, msg) -> None:
    r = run_cli("record", "--out", tmp_path / "x.jsonl", *args)
    assert r.code == 2 and msg in r.err and not (tmp_path / "x.jsonl").exists()
