"""``--profile-when busy``: the decision (:class:`gpuscope.run.busy.BusyTrigger`) over tables of
utilisation values whose request times are worked out by hand, and the request file's one home
(:mod:`gpuscope.run.requests`): writing, refusing unsafe places, reading answers, armed processes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuscope.collectors.base import ProcessSample, Sample
from gpuscope.errors import InputError
from gpuscope.run import contract
from gpuscope.run.busy import BUSY_FOR_S, BusyTrigger
from gpuscope.run.requests import (GpuProcesses, armed_processes, new_request, read_answers, read_gpu_processes,
                                   wait_for_answers, write_gpu_processes, write_request)

T0 = 1_800_000_000_000_000_000
TICK_NS = 100_000_000  # 10 Hz


def ts(k: int) -> int:
    return T0 + k * TICK_NS


def feed_all(trig: BusyTrigger, utils: list[float | None], device: str = "gpu0", ready=lambda k: True) -> list[int]:
    """Feed one GPU's utilisation per tick; the tick indexes at which a request came."""
    out = []
    for k, u in enumerate(utils):
        req = trig.feed([Sample(device, ts(k), {"gpu_util": u}), Sample("host", ts(k), {"host_cpu_util": 0.5})],
                        ready=ready(k))
        if req is not None:
            out.append(k)
            assert req.ts_ns == ts(k) and req.devices == (device,)
    return out


def test_busy_for_three_seconds_in_a_row_asks_once() -> None:
    assert BUSY_FOR_S == 3.0
    trig = BusyTrigger(util=0.5, duration_s=2.0)
    # idle (20 %) for 1 s, then 80 %: the stretch starts at tick 10 (1.0 s); 3 s later is tick 40
    assert feed_all(trig, [0.2] * 10 + [0.8] * 60) == [40]
    assert trig.requests[0].pids is None  # no per-process data: every armed process is asked
    assert trig.longest_s == pytest.approx(5.9)  # ticks 10..69


def test_a_dip_or_a_missing_reading_starts_the_stretch_again() -> None:
    # busy from tick 0, a dip at tick 20 (2.0 s), busy again from tick 21: 3 s later is tick 51
    assert feed_all(BusyTrigger(util=0.5, duration_s=1.0), [0.9] * 20 + [0.1] + [0.9] * 40) == [51]
    # a tick without a reading ends the stretch too: busy again from tick 26, due at tick 56
    assert feed_all(BusyTrigger(util=0.5, duration_s=1.0), [0.9] * 25 + [None] + [0.9] * 40) == [56]


def test_util_is_at_least_the_threshold_and_never_below() -> None:
    assert feed_all(BusyTrigger(util=0.5, duration_s=1.0), [0.5] * 31) == [30]  # 50 % counts as busy at 50 %
    assert feed_all(BusyTrigger(util=0.5, duration_s=1.0), [0.49] * 100) == []


def test_later_windows_wait_for_the_interval_after_the_previous_end_and_stop_at_the_count() -> None:
    trig = BusyTrigger(util=0.5, duration_s=1.0, windows=2, interval_s=2.0)
    # first at tick 30 (3.0 s); the next no sooner than 3.0 + 1.0 (window) + 2.0 (interval) = 6.0 s
    assert feed_all(trig, [0.9] * 200) == [30, 60]
    trig = BusyTrigger(util=0.5, duration_s=1.0, windows=3, interval_s=2.0)
    # idle from tick 50 to 79: at 6.0 s the GPU is not busy; busy again from tick 80, due at tick 110;
    # the third no sooner than 11.0 + 1.0 + 2.0 = 14.0 s, busy all along: tick 140
    assert feed_all(trig, [0.9] * 50 + [0.0] * 30 + [0.9] * 100) == [30, 110, 140]


def test_a_due_request_waits_until_a_process_can_answer() -> None:
    # due at tick 30, but no process armed before tick 45: asked at tick 45, while still busy
    assert feed_all(BusyTrigger(util=0.5, duration_s=1.0), [0.9] * 60, ready=lambda k: k >= 45) == [45]


def gpu_row(device: str, k: int, util: float, procs: list[tuple[int, float]] | None) -> Sample:
    """A GPU row; ``procs`` given: the collector read its processes this tick (pid, util)."""
    values: dict = {"gpu_util": util}
    processes: tuple = ()
    if procs is not None:
        values["proc_gpu_mem_bytes"] = 2**30 * len(procs)
        values["proc_gpu_util"] = sum(u for _, u in procs) if procs else 0.0
        processes = tuple(ProcessSample(pid, 2**30, u) for pid, u in procs)
    return Sample(device, ts(k), values, processes=processes)


def test_per_process_data_picks_the_programs_gpus_and_processes() -> None:
    trig = BusyTrigger(util=0.5, duration_s=1.0)
    first = None
    for k in range(80):
        read = k % 10 == 0  # processes read once a second, as the collectors do
        # gpu0: 95 % busy with someone else's work (the run's processes are not on it)
        # gpu1: the run's pid 4242 at 70 % of it from tick 10 (device 75 %), 10 % before
        rows = [gpu_row("gpu0", k, 0.95, [] if read else None),
                gpu_row("gpu1", k, 0.75 if k >= 10 else 0.1, ([(4242, 0.7 if k >= 10 else 0.1)] if read else None))]
        req = trig.feed(rows, tree=frozenset({1, 4242}))
        if req is not None and first is None:
            first = (k, req)
    assert first is not None
    k, req = first
    # gpu1's stretch starts at tick 10 (its reading at tick 10 says 70 %), due 3 s later
    assert k == 40 and req.devices == ("gpu1",) and req.pids == (4242,)
    assert trig.gpu_processes(frozenset({1, 4242})) == {"gpu1": (4242,)}


def test_pids_outside_the_process_tree_are_not_the_programs() -> None:
    trig = BusyTrigger(util=0.5, duration_s=1.0)
    reqs = [trig.feed([gpu_row("gpu0", k, 0.9, [(777, 0.9)] if k % 10 == 0 else None)], tree=frozenset({1, 2}))
            for k in range(60)]
    assert [r for r in reqs if r is not None] == []


def test_a_replay_ignores_per_process_readings() -> None:
    # per_process False (a replay): the device's 90 % counts although the reading names nobody
    trig = BusyTrigger(util=0.5, duration_s=1.0, per_process=False)
    reqs = [trig.feed([gpu_row("gpu0", k, 0.9, [] if k % 10 == 0 else None)]) for k in range(40)]
    got = [(k, r) for k, r in enumerate(reqs) if r is not None]
    assert [k for k, _ in got] == [30] and got[0][1].pids is None


# -- the requests file ----------------------------------------------------------------------------

def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)
    return d


def test_requests_are_appended_one_line_each(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    a = new_request(2.5, [7, 3, 7], "gpuscope profile", ts_ns=5)
    b = new_request(1.0, None, "busy", ts_ns=6)
    write_request(d, a)
    write_request(d, b)
    lines = [json.loads(x) for x in (d / contract.REQUESTS_FILE).read_text().splitlines()]
    assert lines == [{"id": a.id, "ts_ns": 5, "duration_s": 2.5, "pids": [3, 7], "source": "gpuscope profile"},
                     {"id": b.id, "ts_ns": 6, "duration_s": 1.0, "pids": None, "source": "busy"}]
    assert a.id != b.id
    assert (d / contract.REQUESTS_FILE).stat().st_mode & 0o777 == 0o600


def test_requests_refuse_a_linked_or_shared_run_dir_and_a_link_at_the_file(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(d)
    req = new_request(1.0, None, "t")
    with pytest.raises(InputError, match="symbolic link"):
        write_request(link, req)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(InputError, match="other users can write"):
        write_request(shared, req)
    target = tmp_path / "elsewhere.txt"
    (d / contract.REQUESTS_FILE).symlink_to(target)
    with pytest.raises(InputError, match="cannot write the request"):
        write_request(d, req)
    assert not target.exists()


def events(d: Path, *objs: dict) -> None:
    with open(d / contract.EVENTS_FILE, "a") as f:
        for o in objs:
            f.write(json.dumps(o) + "\n")


def test_answers_and_armed_processes_come_from_the_events(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    me, gone = os.getpid(), 2**22 + 12345  # beyond pid_max's default: no such process
    events(d, {"event": "armed", "pid": me, "ts_ns": 1}, {"event": "armed", "pid": 11, "ts_ns": 2},
           {"event": "exit", "pid": 11, "ts_ns": 3}, {"event": "armed", "pid": gone, "ts_ns": 4},
           {"event": "window_open", "pid": me, "ts_ns": 9, "path": "p", "label": "l", "request": "r1"},
           {"event": "window_skipped", "pid": 11, "ts_ns": 9, "reason": "exiting", "request": "r1"},
           {"event": "window_open", "pid": 12, "ts_ns": 9, "path": "q", "label": "l", "request": "other"})
    with open(d / contract.EVENTS_FILE, "a") as f:
        f.write('{"event": "window_skipped", "pid": 13, "request": "r1"')  # still being written: not read
    (d / contract.WINDOWS_FILE).write_text(json.dumps({"pid": me, "start_ns": 9, "end_ns": 10, "path": "p",
                                                       "request": "r1"}) + "\n")
    assert [a.pid for a in armed_processes(d)] == [me]  # 11 exited, `gone` is not running
    ans = read_answers(d, "r1")
    assert set(ans.opened) == {me} and ans.skipped == {11: "exiting"} and set(ans.written) == {me}
    req = new_request(1.0, None, "t")
    object.__setattr__(req, "id", "r1")
    clock = iter(range(1000))
    got, silent = wait_for_answers(d, req, [me, 11, gone], clock=lambda: next(clock), sleep=lambda s: None)
    assert silent == set() and got.answered == {me, 11}


def test_gpu_processes_file_round_trip(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    assert read_gpu_processes(d) is None
    write_gpu_processes(d, GpuProcesses(42, {"gpu1": (9, 4), "gpu0": (4,)}))
    got = read_gpu_processes(d)
    assert got is not None and got.pids == (4, 9) and got.devices == {"gpu0": (4,), "gpu1": (9, 4)}
