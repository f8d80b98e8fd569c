"""When the bootstrap opens a window (issue 30): never from inside an import, at the N-th mark,
on request (``gpuscope profile``, ``--profile-when busy``), only in processes that use a GPU when
the run has GPUs, and never while another profiler records in the process.

The programs run directly in the environment ``gpuscope run`` gives them (run directory and
private bootstrap made by the wrapper's own functions, as in test_bootstrap_faults.py). The
import case uses the real (CPU) torch, whose profiler imports torch._dynamo when it starts; the
others a fake torch whose profiler leaves a flag file per start and stop, so that programs and
tests wait on files, never on time.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpuscope.run import contract
from test_bootstrap_faults import PY, assert_one_line_each, environments, fake_torch, write

#: A fake torch whose CUDA is initialised once the file FAKE_TORCH_FLAGS/cuda exists.
FAKE_CUDA = """
class cuda:
    @staticmethod
    def is_available():
        return False
    @staticmethod
    def is_initialized():
        import os
        return os.path.exists(os.path.join(os.environ["FAKE_TORCH_FLAGS"], "cuda"))
"""


def profile_env(*, when: str = "time", delay_s: float = 0.0, duration_s: float = 0.3, windows: int = 1,
                after_marks: int = 0, gpu_only: bool = False) -> str:
    return contract.encode_profile(enabled=True, delay_s=delay_s, duration_s=duration_s, windows=windows,
                                   interval_s=0.0, when=when, after_marks=after_marks, gpu_only=gpu_only)


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / contract.EVENTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def windows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / contract.WINDOWS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_until(what: str, check: Any, proc: subprocess.Popen[str] | None = None, bound_s: float = 60.0) -> Any:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            got = check()
            if got:
                return got
            raise AssertionError(f"the program ended before {what}: {proc.communicate()}")
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {bound_s} s")


def request(run_dir: Path, rid: str, pids: list[int] | None, duration_s: Any = 0.3) -> None:
    line = json.dumps({"id": rid, "ts_ns": time.time_ns(), "duration_s": duration_s, "pids": pids,
                       "source": "test"}) + "\n"
    with open(run_dir / contract.REQUESTS_FILE, "a") as f:
        f.write(line)


def answers(run_dir: Path, rid: str) -> list[dict[str, Any]]:
    """The answers to request ``rid``: a window opened or skipped (a deferral is not one)."""
    return [e for e in events(run_dir) if e.get("request") == rid and e["event"] != "window_deferred"]


# -- 1. a window due inside an import waits for it --------------------------------------------

#: Stalls the import of torch._dynamo.utils before its body runs (the module is in sys.modules,
#: partially initialised, as when the program's own import of it was under way on the H100),
#: until the bootstrap has deferred the window; then imports it and computes until the window is
#: written.
STALLED_IMPORT = """
import importlib.abc, importlib.machinery, json, os, sys, time
import torch

events = os.path.join(os.environ["GPUSCOPE_RUN_DIR"], "profiler.jsonl")
written = os.path.join(os.environ["GPUSCOPE_RUN_DIR"], "windows.jsonl")

def seen(kind):
    return os.path.exists(events) and f'"event":"{kind}"' in open(events).read()

class Stall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch._dynamo.utils":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def stalled(module):
            t = time.monotonic()
            while not seen("window_deferred") and not seen("window_open") and time.monotonic() - t < 60:
                time.sleep(0.02)
            print("import_done", time.time_ns(), flush=True)
            run(module)
        spec.loader.exec_module = stalled
        return spec

sys.meta_path.insert(0, Stall())
import torch._dynamo
a = torch.ones(64, 64)
t = time.monotonic()
while not os.path.exists(written) and time.monotonic() - t < 120:
    a = torch.mm(a, a).clamp_(max=1.0)
print("done", flush=True)
"""


def test_a_window_due_inside_an_import_opens_after_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    program = write(tmp_path, "prog.py", STALLED_IMPORT)
    run_dir, env, _ = environments(tmp_path, profile_env(delay_s=0.2, duration_s=0.5))
    p = subprocess.run([PY, str(program)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert_one_line_each(p.stderr)
    assert "profiler window failed" not in p.stderr, p.stderr  # before: ImportError ... dynamo_timed
    import_done_ns = int(next(line for line in p.stdout.splitlines() if line.startswith("import_done")).split()[1])
    kinds = [e["event"] for e in events(run_dir)]
    assert "window_deferred" in kinds, kinds
    opened = [e for e in events(run_dir) if e["event"] == "window_open"]
    assert len(opened) == 1 and opened[0]["ts_ns"] > import_done_ns
    (w,) = windows(run_dir)
    import gzip

    trace = json.loads(gzip.open(w["path"]).read())
    assert any(e.get("name") == "aten::mm" for e in trace["traceEvents"])  # the window recorded the work


# -- 2. requests ---------------------------------------------------------------------------------

#: Runs until the test creates FAKE_TORCH_FLAGS/done.
UNTIL_DONE = """
import os, time
import torch
print(os.getpid(), flush=True)
done = os.path.join(os.environ["FAKE_TORCH_FLAGS"], "done")
t = time.monotonic()
while not os.path.exists(done) and time.monotonic() - t < 120:
    time.sleep(0.01)
"""


def start(tmp_path: Path, program: str, profile: str, fake: Path) -> tuple[subprocess.Popen[str], Path, int]:
    path = write(tmp_path, "prog.py", program)
    run_dir, env, _ = environments(tmp_path, profile, fake)
    proc = subprocess.Popen([PY, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    wait_until("armed", lambda: any(e["event"] == "armed" for e in events(run_dir)), proc)
    return proc, run_dir, pid


def finish(tmp_path: Path, proc: subprocess.Popen[str]) -> str:
    (tmp_path / "flags" / "done").touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert_one_line_each(err)
    return err


def test_a_request_opens_a_window_of_its_duration_in_the_processes_it_names(tmp_path: Path) -> None:
    fake = fake_torch(tmp_path)
    proc, run_dir, pid = start(tmp_path, UNTIL_DONE, profile_env(when="busy"), fake)
    try:
        request(run_dir, "other", [pid + 100000])  # not this process: no answer
        request(run_dir, "r1", [pid], duration_s=0.4)
        opened = wait_until("an answer", lambda: answers(run_dir, "r1"), proc)
        assert opened[0]["event"] == "window_open" and opened[0]["label"] == "request"
        (w,) = wait_until("the window written", lambda: windows(run_dir), proc)
        assert w["request"] == "r1" and w["end_ns"] - w["start_ns"] >= 0.4e9
        request(run_dir, "all", None, duration_s=30)  # every armed process
        wait_until("a window for everyone", lambda: answers(run_dir, "all"), proc)
        request(run_dir, "while-open", [pid])  # one window at a time: said at once
        (skipped,) = wait_until("an answer", lambda: answers(run_dir, "while-open"), proc)
        assert skipped["event"] == "window_skipped" and "already open" in skipped["reason"]
        request(run_dir, "bad", [pid], duration_s="soon")
        (bad,) = wait_until("an answer", lambda: answers(run_dir, "bad"), proc)
    finally:
        finish(tmp_path, proc)
    assert answers(run_dir, "other") == []
    assert bad["event"] == "window_skipped" and "duration" in bad["reason"]
    # the 30 s window still open at exit was closed and written by the exit handler
    assert [w["request"] for w in windows(run_dir)] == ["r1", "all"]


def test_busy_mode_opens_no_window_of_its_own(tmp_path: Path) -> None:
    fake = fake_torch(tmp_path)
    proc, run_dir, _ = start(tmp_path, UNTIL_DONE, profile_env(when="busy", delay_s=0.0), fake)
    # a request answered proves the thread has looked at least once past the (zero) delay
    request(run_dir, "probe", None, duration_s=0.1)
    wait_until("the probe written", lambda: windows(run_dir), proc)
    finish(tmp_path, proc)
    assert [w["label"] for w in windows(run_dir)] == ["request"]


# -- 3. only processes that use a GPU, when the run has GPUs ----------------------------------

def fake_torch_with_cuda(tmp_path: Path) -> Path:
    fake = fake_torch(tmp_path)
    init = fake / "torch" / "__init__.py"
    init.write_text(init.read_text().replace(
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n", FAKE_CUDA))
    return fake


def test_with_gpus_a_window_waits_for_the_process_to_use_one(tmp_path: Path) -> None:
    fake = fake_torch_with_cuda(tmp_path)
    proc, run_dir, pid = start(tmp_path, UNTIL_DONE, profile_env(delay_s=0.0, gpu_only=True), fake)
    try:
        wait_until("the wait said", lambda: [e for e in events(run_dir) if e["event"] == "window_waiting"], proc)
        request(run_dir, "early", [pid])
        (skipped,) = wait_until("an answer", lambda: answers(run_dir, "early"), proc)
        assert skipped["event"] == "window_skipped" and skipped["reason"] == "no GPU work in this process"
        assert not [e for e in events(run_dir) if e["event"] == "window_open"]
        (tmp_path / "flags" / "cuda").touch()  # the process initialises CUDA
        wait_until("the window written", lambda: windows(run_dir), proc)
    finally:
        finish(tmp_path, proc)
    assert [w["label"] for w in windows(run_dir)] == ["window"]


# -- 4. after N marks ----------------------------------------------------------------------------

MARKS = """
import os, sys, time
import torch
import gpuscope
flags = os.environ["FAKE_TORCH_FLAGS"]

def wait_for(name):
    t = time.monotonic()
    while not os.path.exists(os.path.join(flags, name)) and time.monotonic() - t < 60:
        time.sleep(0.01)

for step in range(1, 8):
    gpuscope.mark("step", tokens=1)
    if step == 3:
        wait_for(f"start.{os.getpid()}")  # the first window opens at the 3rd mark
        print("started_after", step, flush=True)
        wait_for(f"stop.{os.getpid()}")
    if step < 3:
        time.sleep(0.05)
        assert not os.path.exists(os.path.join(flags, f"start.{os.getpid()}")), step
wr = os.path.join(os.environ["GPUSCOPE_RUN_DIR"], "windows.jsonl")
t = time.monotonic()
while (not os.path.exists(wr) or len(open(wr).read().splitlines()) < 2) and time.monotonic() - t < 60:
    time.sleep(0.01)
"""


def test_windows_open_at_every_nth_mark(tmp_path: Path) -> None:
    fake = fake_torch(tmp_path)
    path = write(tmp_path, "prog.py", MARKS)
    run_dir, env, _ = environments(tmp_path, profile_env(when="marks", after_marks=3, windows=2, duration_s=0.1),
                                   fake)
    p = subprocess.run([PY, str(path)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "started_after 3" in p.stdout
    marks = [json.loads(line) for line in (run_dir / contract.MARKS_FILE).read_text().splitlines()]
    wins = windows(run_dir)
    assert [w["label"] for w in wins] == ["marks", "marks"]  # windows=2: none at the 9th
    assert wins[0]["start_ns"] > marks[2]["ts_ns"]
    assert wins[1]["start_ns"] > marks[5]["ts_ns"]


@pytest.mark.parametrize("setting,says", [
    ('{"when": "sometimes"}', "when must be one of time, busy, marks"),
    ('{"when": "marks", "after_marks": 0}', "after_marks >= 1"),
    ('{"delay_s": 1e300}', "delay_s must be a number from 0 to"),
])
def test_bad_trigger_settings_cost_one_line(tmp_path: Path, setting: str, says: str) -> None:
    fake = fake_torch(tmp_path)
    path = write(tmp_path, "prog.py", "import torch\nprint('ran')\n")
    _, env, _ = environments(tmp_path, setting, fake)
    p = subprocess.run([PY, str(path)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (p.returncode, p.stdout) == (0, "ran\n")
    assert says in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


# -- 5. one profiler per process ------------------------------------------------------------

OWN_PROFILER = """
import os, time
import torch
from torch.profiler import profile
print(os.getpid(), flush=True)
done = os.path.join(os.environ["FAKE_TORCH_FLAGS"], "done")
with profile():  # the program's (or its engine's) own profiler holds the process's session
    t = time.monotonic()
    while not os.path.exists(done) and time.monotonic() - t < 120:
        torch.ones(4).sum()
        time.sleep(0.005)
"""


def test_no_window_while_another_profiler_records_in_the_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "flags").mkdir()
    proc, run_dir, pid = start(tmp_path, OWN_PROFILER, profile_env(when="busy"), tmp_path / "no-fake")
    try:
        request(run_dir, "r", [pid])
        (answer,) = wait_until("an answer", lambda: answers(run_dir, "r"), proc, bound_s=120)
    finally:
        finish(tmp_path, proc)
    assert answer["event"] == "window_skipped" and "another profiler" in answer["reason"]
    assert windows(run_dir) == []


# -- 6. a process stopped while its window is open keeps it ------------------------------------

def test_a_process_ended_by_sigterm_writes_its_open_window_first(tmp_path: Path) -> None:
    import signal

    fake = fake_torch(tmp_path)
    proc, run_dir, pid = start(tmp_path, UNTIL_DONE, profile_env(when="busy"), fake)
    try:
        request(run_dir, "long", [pid], duration_s=60)
        wait_until("the window open", lambda: answers(run_dir, "long"), proc)
        proc.send_signal(signal.SIGTERM)  # its default action: no exit handlers would run
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, err  # it still dies of the signal
    assert [w["request"] for w in windows(run_dir)] == ["long"]
    assert [e.get("signal") for e in events(run_dir) if e["event"] == "exit"] == ["SIGTERM"]


WORKERS = """
import multiprocessing as mp, os, sys, time

def work(flags):
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Ctrl-C, whatever started the tests
    import torch
    done = os.path.join(flags, "done")
    t = time.monotonic()
    while not os.path.exists(done) and time.monotonic() - t < 120:
        time.sleep(0.01)

if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ctx = mp.get_context(sys.argv[1])
    procs = [ctx.Process(target=work, args=(os.environ["FAKE_TORCH_FLAGS"],)) for _ in range(2)]
    for p in procs:
        p.start()
    print(" ".join(str(p.pid) for p in procs), flush=True)
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.join()
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_worker_gets_its_window_and_a_ctrl_c_keeps_them_all(tmp_path: Path, method: str) -> None:
    import signal

    fake = fake_torch(tmp_path)
    path = write(tmp_path, "prog.py", WORKERS)
    run_dir, env, _ = environments(tmp_path, profile_env(when="busy"), fake)
    proc = subprocess.Popen([PY, str(path), method], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, start_new_session=True)
    try:
        assert proc.stdout is not None
        workers = {int(pid) for pid in proc.stdout.readline().split()}
        wait_until("both workers armed",
                   lambda: {e["pid"] for e in events(run_dir) if e["event"] == "armed"} >= workers, proc)
        request(run_dir, "all", None, duration_s=60)
        wait_until("both windows open", lambda: len(answers(run_dir, "all")) == 2, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what gpuscope run passes on at Ctrl-C
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert {e["pid"] for e in answers(run_dir, "all")} == workers
    assert {w["pid"] for w in windows(run_dir)} == workers  # each written before its worker ended
    # written at the Ctrl-C, not at the end of their 60 s
    assert all(w["end_ns"] - w["start_ns"] < 50e9 for w in windows(run_dir)), windows(run_dir)


# -- 7. what the summary says when a process got no window -----------------------------------

@pytest.mark.parametrize("when,extra,says", [
    ("time", [{"event": "window_waiting", "reason": "no GPU work in this process yet"}], "it never used a GPU"),
    ("time", [{"event": "window_skipped", "reason": "another profiler is running in this process"}],
     "no profiler window: another profiler is running in this process"),
    ("marks", [], "fewer than --profile-after-marks 8 gpuscope.mark() calls"),
    ("time", [], "no profiler window opened"),
])
def test_the_summary_says_why_a_process_got_no_window(when: str, extra: list[dict[str, Any]], says: str) -> None:
    from gpuscope.run.notes import profiler_notes
    from gpuscope.run.wrapper import ProfileConfig

    s = 1_000_000_000
    events = [{"event": "armed", "pid": 7, "ts_ns": 1 * s}, *({**e, "pid": 7, "ts_ns": 2 * s} for e in extra),
              {"event": "exit", "pid": 7, "ts_ns": 60 * s}]
    profile = ProfileConfig(delay_s=1.0, when=when, after_marks=8 if when == "marks" else 0)
    (note,) = profiler_notes(profile, events, [], 0, 0, None)
    assert note.startswith("pid 7: ") and says in note, note
