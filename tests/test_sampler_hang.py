"""A vendor call that never returns: the sampler's watchdog (gpuscope/sampling.py).

The fake pynvml of tests/fakes blocks a named call when its table says ``"hang"`` (until the
test sets ``release``), as NVML blocks on a wedged GPU. The other source here is the real host
collector (psutil over this process).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from fakes.fake_pynvml import FakeNvml, load_table
from gpuscope.collectors import HostCollector, NvmlCollector, ProcessTree
from gpuscope.sampling import Sampler
from gpuscope.sinks import MemorySink

REPO = Path(__file__).resolve().parents[1]


def _until(cond: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _stop_within(s: Sampler, timeout_s: float = 20.0):
    """``s.stop()`` in a thread: the suite must not hang if it does."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("stats", s.stop()), daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "stop() blocked on the hung call"
    return out["stats"]


def _opened_nvml() -> tuple[FakeNvml, NvmlCollector]:
    fake = FakeNvml("nvml_h100_a100.json")
    fake.table["devices"][1]["ticks"] = fake.table["devices"][1]["ticks"][:2]  # keep the A100 alive
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, process_interval_s=0.0)
    c.open()
    return fake, c


def test_a_hung_nvml_call_leaves_the_host_sampling_and_nvml_comes_back() -> None:
    fake, nvml = _opened_nvml()
    mem = MemorySink()
    said: list[str] = []
    s = Sampler([nvml, HostCollector(ProcessTree([os.getpid()]))], [mem], interval_s=0.02, batch_s=0.02,
                hang_s=0.3, on_degradation=lambda g: said.append(f"{g.source}: {g.reason}"))
    s.start()
    try:
        assert _until(lambda: len(mem.rows("gpu0")) >= 5 and len(mem.rows("host")) >= 5)
        fake.table["hang"] = {"call": "nvmlDeviceGetFieldValues"}  # the driver stops answering
        assert _until(lambda: any("has not returned in 0.3 s" in m for m in said))
        hung_host, hung_gpu = len(mem.rows("host")), len(mem.rows("gpu0"))
        assert _until(lambda: len(mem.rows("host")) >= hung_host + 10)  # the host goes on
        assert len(mem.rows("gpu0")) == hung_gpu and fake.hung_calls == 1  # no row, no second stuck call
        fake.table.pop("hang")
        fake.release.set()  # the driver answers again
        assert _until(lambda: len(mem.rows("gpu0")) > hung_gpu)
        assert any("sample() answered again after" in m for m in said)
    finally:
        fake.release.set()
        st = _stop_within(s)
    reasons = [g.reason for g in st.degradations if g.source == "nvidia"]
    assert sum("has not returned" in r for r in reasons) == 1
    assert sum("answered again" in r for r in reasons) == 1
    host_ts = [r.ts_ns for r in mem.rows("host")]
    assert host_ts == sorted(host_ts)  # the new sampling thread kept the rows in order


def test_stop_does_not_wait_for_a_call_that_never_returns() -> None:
    fake, nvml = _opened_nvml()
    mem = MemorySink()
    s = Sampler([nvml, HostCollector(ProcessTree([os.getpid()]))], [mem], interval_s=0.02, batch_s=0.02, hang_s=0.3)
    s.start()
    try:
        assert _until(lambda: len(mem.rows("host")) >= 3)
        fake.table["hang"] = {"call": "nvmlDeviceGetFieldValues"}
        assert _until(lambda: fake.hung_calls == 1)
        st = _stop_within(s)  # still hung: stop hands over, flushes and closes the others
        assert mem.stats is st and st.ticks >= 3
        assert any("has not returned" in g.reason for g in st.degradations)
        assert "nvmlShutdown" not in fake.calls  # never closed under a call in progress
    finally:
        fake.release.set()


def test_a_vendor_that_hangs_when_opened_is_left_out() -> None:
    table = load_table("nvml_h100_a100.json")
    table["hang"] = {"call": "nvmlInit"}
    fake = FakeNvml(table)
    mem = MemorySink()
    s = Sampler([NvmlCollector(nvml=fake), HostCollector(ProcessTree([os.getpid()]))], [mem], interval_s=0.02,
                open_timeout_s=0.3)
    try:
        s.start()
        assert [(v.vendor, v.reason) for v in s.unavailable] == [
            ("nvidia", "did not answer within 0.3 s when opened (a hung driver or tool call?): left out")]
        assert _until(lambda: len(mem.rows("host")) >= 3)
        assert [d.key for d in s.devices] == ["host"]
    finally:
        fake.release.set()
        _stop_within(s)


@pytest.mark.slow
def test_gpuscope_run_with_a_driver_that_stops_answering(tmp_path: Path) -> None:
    """The whole command, as separate processes: NVML (the fake, as ``pynvml``) stops answering
    a few ticks into the run; the program runs to its end and its exit status comes back, the
    host is sampled to the end, the run is complete and says what happened."""
    table = load_table("nvml_h100_a100.json")
    # opening reads the field values a few times (probing, timing); then about 10 ticks pass
    table["hang"] = {"call": "nvmlDeviceGetFieldValues", "after_calls": 30}
    (tmp_path / "table.json").write_text(json.dumps(table))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "from fakes.fake_pynvml import FakeNvml\n"
        "sys.modules[__name__] = FakeNvml(os.environ['FAKE_NVML_TABLE'])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
               FAKE_NVML_TABLE=str(tmp_path / "table.json"))
    db = tmp_path / "s.duckdb"
    child = "import time, sys; time.sleep(5); print('done'); sys.exit(7)"
    p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--no-analyze",
                        "-q", "--", sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 7, p.stderr
    assert "done" in p.stdout
    assert "Traceback" not in p.stderr
    con = duckdb.connect(str(db), read_only=True)
    status, started, ended = con.execute("SELECT status, started_ns, ended_ns FROM runs").fetchone()
    assert status == "complete"
    last = dict(con.execute("SELECT d.key, max(s.ts_ns) FROM samples s JOIN devices d USING (run_id, device_id) "
                            "GROUP BY 1").fetchall())
    assert ended - last["host"] < 1.5e9  # sampled to the end
    assert last["gpu0"] - started < 4e9 and ended - last["gpu0"] > 1.5e9  # no GPU rows once NVML hung
    (degr,) = con.execute("SELECT degradations FROM sampler_stats").fetchone()
    assert any("has not returned" in g["reason"] and g["source"] == "nvidia" for g in json.loads(degr))
