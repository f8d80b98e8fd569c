"""Issue 32: the host's CPU time by OpenTelemetry ``cpu.mode`` (``host_cpu_<mode>_util``).

Two readings of /proc/stat's ``cpu`` line (recorded on the 2-core test VM, and a few made up
where the recorded ones cannot show a case: guests, a counter going back, other platforms)
give each mode's fraction, computed by hand below; the schema step 9 -> 10 that stores them;
an old recording replayed gives NULL, not 0; the OpenTelemetry export is checked against the
conventions' definitions (fixtures/semconv/v1.44.0.json) in tests/test_otel_conventions.py.
"""
from __future__ import annotations

import functools
import hashlib
import math
import sys
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES
from gpuscope import store
from gpuscope.collectors import host as host_module
from gpuscope.collectors.host import CPU_MODE_COLUMNS, CpuTimesWindow, HostCollector, cpu_mode_fractions
from gpuscope.errors import StoreError

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
#: USER_HZ: /proc/stat counts ticks of 1/100 s (getconf CLK_TCK); psutil gives seconds.
USER_HZ = 100
LINUX_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
LinuxTimes = namedtuple("scputimes", LINUX_FIELDS)  # psutil's name for it
MacTimes = namedtuple("scputimes", ("user", "nice", "system", "idle"))
WindowsTimes = namedtuple("scputimes", ("user", "system", "idle", "interrupt", "dpc"))


def proc_stat(line: str) -> Any:
    """psutil's reading of /proc/stat's aggregate ``cpu`` line (ticks -> seconds)."""
    name, *ticks = line.split()
    assert name == "cpu" and len(ticks) == len(LINUX_FIELDS)
    return LinuxTimes(*(int(t) / USER_HZ for t in ticks))


#: (case, first reading, second reading, each mode's fraction by hand, the busy total by hand).
#: The busy total is the stored ``host_cpu_util``: every mode but idle and iowait, from the same
#: shares as the modes (guest time counted once: summing psutil's fields counted it twice).
CASES = [
    # recorded on the test VM (2 logical CPUs) about 80 s apart while the test suite ran:
    # d user 10561, nice 3926, system 1564, idle 1, iowait 5, irq 0, softirq 8, steal 109:
    # 16174 ticks = 2 CPUs x ~80.9 s
    ("recorded, 80 s",
     proc_stat("cpu  3799930 1539 422646 2064040 25385 0 9734 17678 0 0"),
     proc_stat("cpu  3810491 5465 424210 2064041 25390 0 9742 17787 0 0"),
     {"user": 10561 / 16174, "nice": 3926 / 16174, "system": 1564 / 16174, "idle": 1 / 16174,
      "iowait": 5 / 16174, "interrupt": 8 / 16174, "steal": 109 / 16174},
     16168 / 16174),
    # recorded 1 s apart: 202 ticks over 2 CPUs (a tick of rounding over 200)
    ("recorded, 1 s",
     proc_stat("cpu  3810491 5465 424210 2064041 25390 0 9742 17787 0 0"),
     proc_stat("cpu  3810605 5536 424227 2064041 25390 0 9742 17787 0 0"),
     {"user": 114 / 202, "nice": 71 / 202, "system": 17 / 202, "idle": 0.0, "iowait": 0.0, "interrupt": 0.0,
      "steal": 0.0},
     1.0),
    # made up: a KVM host, whose user / nice already hold its guests' 400 / 40 ticks: the modes
    # count them once (total 1420), and so does the busy total (it read (1860 - 620) / 1860 when it
    # summed the fields)
    ("guests",
     proc_stat("cpu  1000 200 300 5000 50 10 20 0 400 100"),
     proc_stat("cpu  1600 260 420 5600 70 20 30 0 800 140"),
     {"user": 600 / 1420, "nice": 60 / 1420, "system": 120 / 1420, "idle": 600 / 1420, "iowait": 20 / 1420,
      "interrupt": 20 / 1420, "steal": 0.0},
     (1420 - 600 - 20) / 1420),
    # made up: iowait going back (tickless Linux kernels do that): it counts 0
    ("iowait back",
     proc_stat("cpu  100 0 100 700 70 0 0 30 0 0"),
     proc_stat("cpu  200 0 150 800 65 0 0 30 0 0"),
     {"user": 100 / 250, "nice": 0.0, "system": 50 / 250, "idle": 100 / 250, "iowait": 0.0, "interrupt": 0.0,
      "steal": 0.0},
     (250 - 100) / 250),
    # made up, macOS's four fields: no iowait, interrupt or steal there (None)
    ("macOS", MacTimes(10.0, 1.0, 5.0, 84.0), MacTimes(13.0, 1.0, 6.0, 90.0),
     {"user": 3 / 10, "nice": 0.0, "system": 1 / 10, "idle": 6 / 10, "iowait": None, "interrupt": None, "steal": None},
     4 / 10),
    # made up, Windows' five: system (kernel time less idle) holds the 0.5 s of interrupts and
    # the 0.5 s of DPCs (perfmon: "DPC Time is a component of Privileged Time"), which are the
    # interrupt mode: system 2 - 1, total 4 + 1 + 12 + 1 = 18; busy all but the 12 s idle
    ("Windows", WindowsTimes(10.0, 5.0, 80.0, 1.0, 0.5), WindowsTimes(14.0, 7.0, 92.0, 1.5, 1.0),
     {"user": 4 / 18, "nice": None, "system": 1 / 18, "idle": 12 / 18, "iowait": None, "interrupt": 1 / 18,
      "steal": None},
     6 / 18),
]


def _clock(*seconds: float) -> Any:
    return iter(seconds).__next__


@pytest.mark.parametrize("case, first, second, modes, busy", CASES, ids=[c[0] for c in CASES])
def test_two_readings_give_each_modes_fraction_by_hand(case: str, first: Any, second: Any,
                                                       modes: dict[str, float | None], busy: float) -> None:
    window = CpuTimesWindow(iter([first, second]).__next__, clock=_clock(0.0, 1.0))
    window.start()
    got = window.sample()
    assert set(got) == {"host_cpu_util", *CPU_MODE_COLUMNS.values()}
    for mode, want in modes.items():
        value = got[CPU_MODE_COLUMNS[mode]]
        assert (value is None) == (want is None), (case, mode, value)
        if want is not None:
            # psutil's seconds are ticks / 100 in floating point: a 1-tick step of a 20,000 s
            # counter keeps ~9 digits
            assert value == pytest.approx(want, rel=1e-9, abs=1e-15), (case, mode)
    assert math.fsum(v for v in modes.values() if v is not None) == pytest.approx(1.0)
    assert got["host_cpu_util"] == pytest.approx(busy, rel=1e-9)


def test_a_window_under_50_ms_gives_none_and_the_next_one_spans_from_the_first_reading() -> None:
    first, _, third = (proc_stat(line) for line in (
        "cpu  100 0 100 800 0 0 0 0 0 0", "cpu  101 0 100 801 0 0 0 0 0 0", "cpu  200 0 200 1400 0 0 0 0 0 0"))
    reads = iter([first, third])
    window = CpuTimesWindow(reads.__next__, clock=_clock(10.0, 10.02, 11.0))
    window.start()
    assert set(window.sample().values()) == {None}  # 20 ms: not even read
    got = window.sample()  # from the first reading: d user 100, system 100, idle 600
    assert (got["host_cpu_user_util"], got["host_cpu_system_util"], got["host_cpu_idle_util"]) == \
        pytest.approx((100 / 800, 100 / 800, 600 / 800))


def test_no_time_counted_gives_none_not_zero() -> None:
    same = proc_stat("cpu  100 0 100 800 0 0 0 0 0 0")
    assert set(cpu_mode_fractions(same._asdict(), same._asdict()).values()) == {None}


def test_the_collector_stores_the_modes_from_psutils_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """HostCollector over psutil giving the recorded readings (and a clock a second on)."""
    import psutil

    readings = iter([CASES[0][1], CASES[0][2]])
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: next(readings))
    monkeypatch.setattr(host_module, "CpuTimesWindow", functools.partial(CpuTimesWindow, clock=_clock(0.0, 1.0)))
    c = HostCollector()
    (dev,) = c.open()
    assert set(CPU_MODE_COLUMNS.values()) <= set(dev.supported)
    (s,) = c.sample()
    c.close()
    for mode, want in CASES[0][3].items():
        assert s.values[CPU_MODE_COLUMNS[mode]] == pytest.approx(want, rel=1e-12)
    assert s.values["host_cpu_util"] == pytest.approx(16168 / 16174)


def test_a_platform_without_a_mode_says_why_and_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    readings = iter([CASES[4][1], CASES[4][2]])  # macOS's fields
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: next(readings))
    monkeypatch.setattr(host_module, "CpuTimesWindow", functools.partial(CpuTimesWindow, clock=_clock(0.0, 1.0)))
    c = HostCollector()
    (dev,) = c.open()
    missing = {"host_cpu_iowait_util", "host_cpu_interrupt_util", "host_cpu_steal_util"}
    assert missing.isdisjoint(dev.supported) and {"host_cpu_user_util", "host_cpu_idle_util"} <= set(dev.supported)
    assert all("no " in dev.unsupported[m] and "mode" in dev.unsupported[m] for m in missing)
    (s,) = c.sample()
    c.close()
    assert all(s.values[m] is None for m in missing) and s.values["host_cpu_user_util"] == pytest.approx(0.3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc/stat")
def test_the_live_host_gives_every_mode_summing_to_one() -> None:
    c = HostCollector()
    (dev,) = c.open()
    assert set(CPU_MODE_COLUMNS.values()) <= set(dev.supported)
    deadline = time.monotonic() + 60
    values: dict[str, Any] = {}
    while time.monotonic() < deadline:  # wait for a window of 50 ms or more (not a fixed sleep)
        (s,) = c.sample()
        values = s.values
        if values["host_cpu_user_util"] is not None:
            break
    c.close()
    modes = [values[m] for m in CPU_MODE_COLUMNS.values()]
    assert all(0.0 <= v <= 1.0 for v in modes) and math.fsum(modes) == pytest.approx(1.0)


# -- the store -----------------------------------------------------------------------------------

def _schema9_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store as schema 9 made it (the metric table without the modes), with one host row."""
    from gpuscope import metrics

    monkeypatch.setattr(store.schema, "METRICS", tuple(m for m in metrics.METRICS
                                                       if m.name not in CPU_MODE_COLUMNS.values()))
    monkeypatch.setattr(store.schema, "SCHEMA_VERSION", 9)
    monkeypatch.setattr(store.schema, "MIGRATIONS", store.schema.MIGRATIONS[:9])
    con = store.connect(path)
    con.execute("INSERT INTO samples (run_id, device_id, ts_ns, host_cpu_util) VALUES (1, 0, 5, 0.25)")
    con.close()
    monkeypatch.undo()


def _columns(con: Any) -> list[str]:
    return [r[0] for r in con.execute("DESCRIBE samples").fetchall()]


def test_a_schema_9_store_migrates_to_10_with_null_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v9.duckdb"
    _schema9_store(path, monkeypatch)
    capsys.readouterr()
    con = store.connect(path)
    try:
        assert store.SCHEMA_VERSION == 10 and store.schema_version(con) == 10
        assert capsys.readouterr().err == f"gpuscope: {path}: migrated the store from schema 9 to 10\n"
        cols = _columns(con)
        assert cols[-7:] == [n for n, _ in store.schema._SAMPLE_COLUMNS_V10] == list(CPU_MODE_COLUMNS.values())
        assert {r[0]: r[1] for r in con.execute("DESCRIBE samples").fetchall()}["host_cpu_steal_util"] == "DOUBLE"
        # the old row keeps its busy total; its modes are unknown (NULL), not 0
        assert con.execute("SELECT host_cpu_util, host_cpu_user_util, host_cpu_idle_util FROM samples").fetchall() \
            == [(0.25, None, None)]
        store.schema.MIGRATIONS[9](con)  # idempotent: a second run changes nothing and does not fail
        assert _columns(con) == cols
    finally:
        con.close()


def test_a_schema_9_store_reads_as_10_without_a_byte_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v9.duckdb"
    _schema9_store(path, monkeypatch)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    con = store.connect(path, read_only=True)
    try:
        assert store.schema_version(con) == 9  # meta says what the file holds
        assert con.execute("SELECT host_cpu_util, host_cpu_interrupt_util FROM samples").fetchall() == [(0.25, None)]
    finally:
        con.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    con = store.connect(path)
    con.execute("UPDATE meta SET value = '11' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match="schema version 11, newer than this gpuscope understands \\(10\\)"):
        store.connect(path)


def test_an_old_recording_replays_its_host_with_null_modes_not_zero(tmp_path: Path) -> None:
    from gpuscope.collectors import ReplayCollector, load_recording
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink

    rec = load_recording(RECORDING)  # made before schema 10: the host row has the busy total only
    host_rows = [r for tick in rec.ticks for r in tick if r["device"] == "host"]
    assert host_rows and all("host_cpu_util" in r["values"] for r in host_rows)
    assert not any(set(CPU_MODE_COLUMNS.values()) & set(r["values"]) for r in host_rows)
    db = tmp_path / "s.duckdb"
    sink = StoreSink(db, name="replayed")
    Sampler([ReplayCollector(RECORDING, realtime=False)], [sink], interval_s=0.01).run(30)
    con = store.connect(db, read_only=True)
    try:
        got = con.execute(
            "SELECT count(*), count(s.host_cpu_util), count(s.host_cpu_user_util), count(s.host_cpu_idle_util), "
            "count(s.host_cpu_steal_util) FROM samples s JOIN devices d USING (run_id, device_id) "
            "WHERE d.key = 'host'").fetchone()
    finally:
        con.close()
    assert got == (len(host_rows), len(host_rows), 0, 0, 0)

