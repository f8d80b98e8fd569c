"""`gpuscope run -- CMD` end to end on the CPU: exit codes, signals, kill -9 recovery, the
bootstrap (sitecustomize chaining, no cost without torch, profiler windows in worker
processes), non-Python children and the Python API."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_cli

PY = sys.executable


def gpuscope(db: Path, *args: str, timeout: float = 180, **kw) -> subprocess.CompletedProcess[str]:
    """``python -m gpuscope --db DB ARGS`` as a separate process (signals need one)."""
    return subprocess.run([PY, "-m", "gpuscope", *args[:1], "--db", str(db), *args[1:]], capture_output=True,
                          text=True, timeout=timeout, cwd=kw.pop("cwd", None), env=kw.pop("env", None), **kw)


def runs(db: Path) -> list[dict]:
    r = run_cli("runs", "--db", str(db), "--json")
    assert r.code == 0, r.err
    return r.json()


def test_exit_code_passthrough_and_a_complete_run(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    p = gpuscope(db, "run", "--no-analyze", "-q", "--", PY, "-c", "import sys; sys.exit(3)")
    assert p.returncode == 3, p.stderr
    (run,) = runs(db)
    assert run["status"] == "complete" and run["exit_code"] == 3 and run["source"] == "run"


def test_unknown_command_exits_2_and_leaves_no_run(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    p = gpuscope(db, "run", "--", "no-such-program-xyz")
    assert p.returncode == 2 and "no-such-program-xyz" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("gpuscope run: ")
    p = gpuscope(db, "run", "--hz", "0", "--", "true")
    assert p.returncode == 2 and p.stderr.startswith("gpuscope run: ") and "--hz" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not db.exists() or runs(db) == []
    p = gpuscope(db, "run")
    assert p.returncode == 2 and "nothing to run" in p.stderr


def test_non_python_child_gets_telemetry_only(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    p = gpuscope(db, "run", "--json", "--hz", "20", "--", "sh", "-c", "sleep 0.6; exit 0")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["exit_code"] == 0 and doc["traces"] == [] and doc["windows"] == []
    (run,) = runs(db)
    assert run["samples"] >= 5  # host samples at 20 Hz over ~0.6 s
    assert run["kernels"] == 0 and run["ops"] == 0


def test_program_without_torch_pays_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code = ("import sys, json; print(json.dumps({'torch': 'torch' in sys.modules, "
            "'boot': '_gpuscope_boot' in sys.modules, 'site': sys.modules['sitecustomize'].__file__}))")
    p = gpuscope(db, "run", "--no-analyze", "-q", "--profile-delay", "0", "--", PY, "-c", code)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[0])
    assert out == {"torch": False, "boot": False, "site": out["site"]}
    # the run's private copy of the bootstrap (0700 run directory), not the installed one
    assert out["site"].endswith(os.path.join("gpuscope-runs", f"1-{Path(PY).name}", "bootstrap", "sitecustomize.py"))


def test_bootstrap_chains_to_the_programs_own_sitecustomize(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE_RAN'] = 'yes'\n")
    env = dict(os.environ, PYTHONPATH=str(own))
    p = gpuscope(db, "run", "--no-analyze", "-q", "--", PY, "-c",
                 "import os; print(os.environ.get('OWN_SITECUSTOMIZE_RAN'))", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[0] == "yes"


CHILD_WAITS = """
import signal, sys, time, pathlib
# Ctrl-C as at a terminal, whatever started the tests (a background job of a script has SIGINT
# ignored, and the program inherits that through gpuscope as it would without it)
signal.signal(signal.SIGINT, signal.default_int_handler)
out = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    out.write_text(signal.Signals(signum).name)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
try:
    pathlib.Path(sys.argv[1] + '.ready').write_text('1')
    time.sleep(60)
except KeyboardInterrupt:
    out.write_text('SIGINT')
    sys.exit(130)
"""


@pytest.mark.parametrize("sig,expect_code,expect_seen", [(signal.SIGTERM, 7, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_signals_are_forwarded_to_the_child(tmp_path: Path, sig: int, expect_code: int, expect_seen: str) -> None:
    db = tmp_path / "s.duckdb"
    script = tmp_path / "child.py"
    script.write_text(CHILD_WAITS)
    seen = tmp_path / "seen"
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-analyze", "-q", "--", PY,
                             str(script), str(seen)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not Path(str(seen) + ".ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert proc.returncode == expect_code, proc.stderr.read()
    assert seen.read_text() == expect_seen
    (run,) = runs(db)
    assert run["status"] == "complete" and run["exit_code"] == expect_code


@pytest.mark.parametrize("ignored", [False, True])
def test_the_program_inherits_an_ignored_sigint_as_without_gpuscope(tmp_path: Path, ignored: bool) -> None:
    """A background job of a script starts with SIGINT ignored: the program under `gpuscope run`
    inherits that as it would without gpuscope (the stop-signal handlers gpuscope sets while it
    starts the program would otherwise reset it), and has Python's own handler otherwise."""
    db = tmp_path / "s.duckdb"
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"

    def start() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.SIG_DFL)

    p = subprocess.run([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-analyze", "--no-profile", "-q", "--",
                        PY, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=start)  # noqa: PLW1509
    assert p.returncode == 0, p.stderr
    assert str(ignored) in p.stdout.split(), p.stdout


def test_kill_9_of_gpuscope_leaves_an_incomplete_run_that_opens(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    script = tmp_path / "child.py"
    script.write_text(CHILD_WAITS)
    seen = tmp_path / "seen"
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-analyze", "-q", "--hz", "20", "--",
                             PY, str(script), str(seen)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child_pid = None
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the run never showed samples"
            if db.exists() and Path(str(seen) + ".ready").exists():
                rs = runs(db)
                if rs and rs[0]["samples"] > 0:
                    assert rs[0]["status"] == "recording"
                    break
            time.sleep(0.2)
        time.sleep(1.5)
        before = runs(db)[0]["samples"]
        out = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.split()
        child_pid = int(out[0]) if out else None
        proc.kill()
        proc.wait(timeout=30)
        (run,) = runs(db)
        assert run["status"] == "incomplete"
        assert run["samples"] >= before > 0
        # a writing command opens the store fine and records the status for good
        r = run_cli("sql", "--db", str(db), "SELECT status FROM runs", "--json")
        assert r.code == 0
        assert gpuscope(db, "run", "--no-analyze", "-q", "--", PY, "-c", "pass").returncode == 0
        assert run_cli("sql", "--db", str(db), "SELECT status FROM runs ORDER BY id", "--json").json()[0]["status"] \
            == "incomplete"
    finally:
        if proc.poll() is None:
            proc.kill()
        if child_pid:
            try:
                os.kill(child_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


TORCH_WORK = """
import os, sys, time
import torch
def work(seconds):
    # Work until this process's profiler window has closed (it is written to the run
    # directory's windows.jsonl), so a slow profiler start on a loaded machine still sees ops.
    a = torch.randn(128, 128)
    t0 = time.time()
    log = os.path.join(os.environ['GPUSCOPE_RUN_DIR'], 'windows.jsonl')
    while time.time() - t0 < seconds:
        for _ in range(20):
            a = torch.tanh(a @ a)
        if os.path.exists(log) and '"pid":%d,' % os.getpid() in open(log).read():
            break
if __name__ == '__main__':
    import multiprocessing as mp
    ctx = mp.get_context(sys.argv[1])
    procs = [ctx.Process(target=work, args=(60,)) for _ in range(2)]
    for p in procs:
        p.start()
    work(60)
    for p in procs:
        p.join()
    print('workers', [p.exitcode for p in procs])
"""


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_workers_each_leave_a_trace(tmp_path: Path, method: str) -> None:
    db = tmp_path / "s.duckdb"
    script = tmp_path / "work.py"
    script.write_text(TORCH_WORK)
    p = gpuscope(db, "run", "--json", "--profile-delay", "0.3", "--profile-duration", "0.5", "--", PY, str(script),
                 method)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    pids = {w["pid"] for w in doc["windows"]}
    assert len(pids) == 3, doc["windows"]  # the parent and both workers
    assert len(doc["traces"]) == 3
    ops = {o["name"] for o in doc["analysis"]["ops"]}
    assert {"aten::mm", "aten::tanh"} <= ops
    ann = run_cli("sql", "--db", str(db), "SELECT count(*) AS n FROM annotations WHERE kind = 'profiler_window'",
                  "--json").json()
    assert ann[0]["n"] == 3


def test_example_workload_run_records_windows_marks_and_tokens(tmp_path: Path) -> None:
    from gpuscope.render.run_summary import render_run_summary

    db = tmp_path / "s.duckdb"
    # the window opens at the 26th mark: past the full-length warm-up generation's 24 marks (the
    # warm-up's end mark is the 25th), on a timed step however loaded the machine is (a delay in
    # seconds fell inside the warm-up at load 12); 0.5 s open, and 8 s of generations to leave
    # steps after the trace is written (starting the profiler alone took 3 s on this CPU)
    p = gpuscope(db, "run", "--json", "--profile-after-marks", "26", "--profile-duration", "0.5", "--", PY,
                 str(REPO / "examples" / "tiny_llm.py"), "--layers", "2", "--d-model", "128", "--new-tokens", "24",
                 "--prompt-len", "32", "--batch", "2", "--warmup", "1", "--seconds", "8", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # stdout: the summary only; the example's own line went to stderr
    workload = json.loads(next(ln for ln in p.stderr.splitlines() if ln.startswith('{"device"')))
    tele = doc["telemetry"]
    gen = tele["generation"]
    assert gen is not None, (tele, p.stderr[-2000:])  # what the run saw, should it ever be missing
    n = workload["generations"]
    # generated tokens: batch x new tokens per generation (the prefill's first token, then the
    # decode steps); the prompt apart; the warm-up generation (full length: 24 new tokens) left out
    assert tele["tokens"] == gen["generated_tokens"] == n * 2 * 24 and tele["token_source"] == "marks"
    assert gen["prompt_tokens"] == n * 2 * 32
    assert gen["warmup"] == {"marks": 24, "generated_tokens": 2 * 24, "prompt_tokens": 2 * 32}
    assert gen["basis"] == "steps" and gen["unclosed_tokens"] == 0  # the example ends each generation with a mark
    # steps the profiler window held (opening to trace written) are counted apart, the rest in the rates
    held = gen["profiled"]
    assert held is not None and held["steps"] >= 1
    decode, prefill = gen["decode"] or {}, gen["prefill"] or {}
    summary_text = render_run_summary(doc)
    if held["kept"]:
        # a loaded machine: the window and its writing held every timed step; the rates are theirs,
        # and the summary says so
        assert held["generated_tokens"] == n * 2 * 24 and held["prompt_tokens"] == n * 2 * 32
        assert decode.get("tokens", 0) + 2 * prefill.get("steps", 0) == n * 2 * 24
        assert "every step ran under the profiler" in summary_text
    else:
        assert decode.get("tokens", 0) + 2 * prefill.get("steps", 0) + held["generated_tokens"] == n * 2 * 24
        assert prefill.get("prompt_tokens", 0) + held["prompt_tokens"] == n * 2 * 32
        assert f"left out: {held['steps']:,} step(s) held by the profiler" in summary_text
    w = doc["windows"][0]
    assert w["open_ns"] <= w["start_ns"] < w["end_ns"] <= w["written_ns"]
    # the decode rate is over the free steps alone (no comparison with the example's own rate: on a
    # loaded machine two rates measured at different moments say nothing about each other)
    if decode:
        assert decode["seconds"] > 0 and decode["tokens_per_s"] == pytest.approx(decode["tokens"] / decode["seconds"])
    assert tele["tokens_per_s"] == gen["tokens_per_s"] > 0
    text = render_run_summary(doc)
    assert f"tokens: {n * 2 * 24:,} generated (marks), {n * 2 * 32:,} prompt: " in text
    assert "generated tokens/s" in text, text
    assert ("decode " in text) == bool(decode) and ("prompt tokens/s" in text) == bool(prefill), (gen, text)
    assert "warm-up left out: 24 marks, 48 generated and 64 prompt tokens" in text
    assert len(doc["windows"]) == 1 and doc["analysis"]["ops"]
    w = doc["windows"][0]
    assert 0 < w["end_ns"] - w["start_ns"] <= 60e9


def test_profile_api_outside_a_run_writes_a_trace_and_mark_is_a_no_op(tmp_path: Path) -> None:
    code = f"""
import torch, gpuscope
gpuscope.mark('step', tokens=3)
with gpuscope.profile('block', out_dir={str(tmp_path / 'out')!r}) as w:
    torch.ones(64, 64) @ torch.ones(64, 64)
print(w.path)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    path = Path(p.stdout.strip().splitlines()[-1])
    assert path.exists() and path.parent == tmp_path / "out"
    r = run_cli("analyze", "--db", str(tmp_path / "s.duckdb"), str(path), "--json")
    assert r.code == 0 and any(o["name"] == "aten::mm" for o in r.json()["ops"])


def test_replayed_telemetry_gives_energy_per_token_cross_checked(tmp_path: Path) -> None:
    from gpuscope.render.run_summary import render_run_summary

    db = tmp_path / "s.duckdb"
    rec = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"  # 3 s, played in a loop
    p = gpuscope(db, "run", "--json", "--replay", str(rec), "--tokens", "1000", "--hz", "10", "--", "sleep", "4")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    tele = doc["telemetry"]
    keys = {g["key"] for g in tele["gpus"]}
    assert {"gpu0", "gpu1"} <= keys
    assert tele["energy_source"] == "counter" and tele["energy_j"] > 0
    # The replay started over, and the counters with it: summed step by step, they still describe
    # the energy that power integrated over time gives (the recording is consistent).
    assert 0.9 < tele["energy_crosscheck_ratio"] < 1.1
    gpu0 = next(g for g in tele["gpus"] if g["key"] == "gpu0")["energy"]
    assert gpu0["counter"]["resets"] >= 1 and "went back" in gpu0["note"]
    assert tele["energy_per_token_j"] == pytest.approx(tele["energy_j"] / 1000)
    assert tele["generation"]["basis"] == "run" and tele["tokens_per_s"] > 0
    # the metrics missing are missing from the recording: `gpuscope devices` would describe this machine
    assert "metric(s) not available" in p.stderr and p.stderr.count("not available") == 1
    assert "not in the recording" in p.stderr and "gpuscope devices" not in p.stderr
    specs = {d["key"]: d["spec"] for d in doc["analysis"]["devices"]}
    assert specs["gpu0"] == "h100-sxm"
    # one host: this machine's (it runs the command); the recording's host is not this run's
    hosts = run_cli("sql", "--db", str(db), "SELECT key, name FROM devices WHERE kind = 'host'", "--json").json()
    assert len(hosts) == 1 and hosts[0]["key"] == "host" and hosts[0]["name"] != "Synthetic CPU"
    text = render_run_summary(doc)
    assert "energy over the run:" in text and "J per generated token" in text and "gpuscope devices" not in text


class _SamplerWithTicks:
    """What the status line reads of a sampler: its tick count."""

    def __init__(self, ticks: int) -> None:
        self.stats = type("Stats", (), {"ticks": ticks})()


class _Live:
    """What the status line reads of the live sink: the latest sample per device."""

    def __init__(self, latest: dict | None = None) -> None:
        self._latest = latest or {}

    def latest(self) -> dict:
        return self._latest


def test_status_line_shows_elapsed_samples_util_and_power() -> None:
    from gpuscope.collectors.base import Sample
    from gpuscope.run.wrapper import _status

    live = _Live({"gpu0": Sample(device="gpu0", ts_ns=0, values={"gpu_util": 0.87, "power_w": 512.0}),
                  "host": Sample(device="host", ts_ns=0, values={"host_cpu_util": 0.5})})
    line = _status(_SamplerWithTicks(42), live, time.time_ns() - 3_000_000_000)
    assert line.startswith("gpuscope:") and "42 samples" in line and "gpu0  87%  512 W" in line
    assert "host" not in line  # only devices with GPU utilisation or power


@pytest.mark.parametrize("status_line", [False, True])
def test_waiting_for_the_child_redraws_the_status_line_and_lets_signals_through(capsys, status_line) -> None:
    import threading

    from gpuscope.run.wrapper import _wait

    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        child = subprocess.Popen([PY, "-c", "import sys, time; time.sleep(1.3); sys.exit(3)"])
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        code = _wait(child, _SamplerWithTicks(7), _Live(), time.time_ns(), status_line)
        waited = time.monotonic() - t0
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert code == 3 and seen == [signal.SIGUSR1] and waited < 5
    err = capsys.readouterr().err
    if status_line:  # redrawn every STATUS_INTERVAL_S, then cleared
        assert err.count("7 samples") >= 2 and err.endswith("\r\x1b[K")
    else:
        assert err == ""


def test_window_export_is_gzipped_whole_or_not_at_all(tmp_path: Path) -> None:
    import gzip

    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from gpuscope.run.bootstrap import load_child_side

    export_gzipped = load_child_side().export_gzipped

    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    prof.start()
    torch.ones(32, 32) @ torch.ones(32, 32)
    prof.stop()
    path = tmp_path / "w.pt.trace.json.gz"
    export_gzipped(prof, path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert any(e.get("name") == "aten::mm" for e in doc["traceEvents"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt.trace.json.gz"]  # no temporary files left

    class FailingExport:  # a profiler whose export dies half-way (disk full, killed thread...)
        def export_chrome_trace(self, p: str) -> None:
            Path(p).write_text('{"traceEvents": [')
            raise OSError("No space left on device")

    with pytest.raises(OSError):
        export_gzipped(FailingExport(), tmp_path / "x.pt.trace.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt.trace.json.gz"]


def test_unfinished_window_exports_are_not_ingested(tmp_path: Path) -> None:
    # A child killed while exporting leaves a `.tmp` (plain JSON) or `.part` (gzip) file in the
    # run's traces folder: the run still completes with the traces that were finished.
    db = tmp_path / "s.duckdb"
    script = tmp_path / "leftovers.py"
    script.write_text(
        "import os, pathlib\n"
        "t = pathlib.Path(os.environ['GPUSCOPE_RUN_DIR']) / 'traces'\n"
        "(t / 'h_1_window1.pt.trace.json.tmp').write_text('{\"traceEvents\": [')\n"
        "(t / 'h_1_window1.pt.trace.json.gz.part').write_bytes(b'\\x1f\\x8b')\n"
    )
    p = gpuscope(db, "run", "--json", "--no-profile", "--", PY, str(script))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert doc["traces"] == [] and doc["ingest_error"] is None


def test_marks_keep_their_file_open_and_survive_fork_and_a_closed_descriptor(tmp_path: Path, monkeypatch) -> None:
    import gpuscope
    from gpuscope.run.bootstrap import load_child_side

    boot = load_child_side()

    monkeypatch.setenv("GPUSCOPE_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(boot, "_append_fds", {})
    for i in range(3):
        gpuscope.mark("step", tokens=4, step=i)
    assert len(boot._append_fds) == 1  # one descriptor, opened once
    pid = os.fork()
    if pid == 0:  # the child writes through a descriptor of its own
        try:
            gpuscope.mark("child", tokens=1)
            gpuscope.mark("child", tokens=1)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    ((fd, _, _),) = boot._append_fds.values()
    # A program that closes descriptors it did not open, and gets the same number back for a
    # file of its own:
    other = tmp_path / "programs_own_file.txt"
    other_fd = os.open(other, os.O_WRONLY | os.O_CREAT)
    os.dup2(other_fd, fd)  # the number now refers to the program's file
    gpuscope.mark("after-close", tokens=2)
    os.close(fd)
    os.close(other_fd)
    assert other.read_text() == ""  # the program's file is untouched
    lines = [json.loads(line) for line in (tmp_path / "marks.jsonl").read_text().splitlines()]
    assert [m["name"] for m in lines] == ["step"] * 3 + ["child"] * 2 + ["after-close"]
    assert {m["pid"] for m in lines[3:5]} == {pid} and lines[0]["pid"] == lines[-1]["pid"] == os.getpid()
    assert sum(m["tokens"] for m in lines) == 3 * 4 + 2 + 2


def test_json_stdout_is_one_document_while_the_child_prints(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code = "import sys; print('hello from the child'); print('{\"not\": \"the summary\"}'); sys.stdout.flush()"
    p = gpuscope(db, "run", "--json", "--no-analyze", "-q", "--", PY, "-c", code)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # the whole of stdout is the summary
    assert doc["exit_code"] == 0 and doc["run_id"] == 1
    assert "hello from the child" in p.stderr and '{"not": "the summary"}' in p.stderr
    # without --json the child's output stays on stdout, before the summary
    p = gpuscope(db, "run", "--no-analyze", "-q", "--", PY, "-c", code)
    assert p.stdout.startswith("hello from the child\n") and "gpuscope run 2" in p.stdout


def test_run_help_says_where_the_childs_stdout_goes_with_json() -> None:
    r = run_cli("run", "--help")
    assert r.code == 0 and "own stdout goes to stderr" in " ".join(r.out.split())
    # the --json flag is shared by every reporting command: only `run`'s help says this
    assert "stdout goes to stderr" not in " ".join(run_cli("analyze", "--help").out.split())


TINY = ["--layers", "1", "--d-model", "64", "--heads", "4", "--vocab", "256", "--batch", "1", "--prompt-len", "8",
        "--new-tokens", "16", "--warmup", "0"]


def _events(tmp_path: Path) -> list[dict]:
    out = []
    for f in (tmp_path / "gpuscope-runs").glob("*/profiler.jsonl"):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def _wait_for(what: str, check, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"gpuscope ended before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)


def test_ctrl_c_twice_during_a_window_writes_it_and_opens_no_other(tmp_path: Path) -> None:
    # As at a terminal: gpuscope leads its own process group and the signals go to the group.
    # The window would stay open 30 s: the program must end on Ctrl-C, not when the window ends.
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--json", "--profile-delay", "0.2",
                             "--profile-duration", "30", "--", PY, str(REPO / "examples" / "tiny_llm.py"), *TINY,
                             "--seconds", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for("profiler window", lambda: any(e["event"] == "window_open" for e in _events(tmp_path)), proc)
        time.sleep(1.0)  # decode steps inside the window: enough ops that writing them takes a while
        first_ns = time.time_ns()
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)  # the program is exiting and writing its window: Ctrl-C again
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        exit_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Exception ignored" not in err and "KeyboardInterrupt" in err  # the program's own traceback
    doc = json.loads(out)
    assert len(doc["windows"]) == 1 and len(doc["traces"]) == 1 and doc["ingest_error"] is None
    assert doc["windows"][0]["start_ns"] < first_ns <= doc["windows"][0]["end_ns"] + 10**9
    assert any(o["name"] == "aten::mm" for o in doc["analysis"]["ops"])  # the trace is in the run
    assert doc["interrupted"]["signal"] == "SIGINT" and doc["profiler"]["notes"] == []
    opened = [e for e in _events(tmp_path) if e["event"] == "window_open"]
    assert len(opened) == 1 and opened[0]["ts_ns"] < first_ns
    # bounded by writing the window (seconds), far from the 30 s the window would have lasted
    assert exit_s < 25, exit_s


SHUTS_DOWN_SLOWLY = """
import os, sys, time, torch
a = torch.randn(64, 64)
def work(seconds):
    t = time.time()
    while time.time() - t < seconds:
        torch.tanh(a @ a)
try:
    while True:
        work(0.05)
except KeyboardInterrupt:
    work(4.0)  # a graceful shutdown, longer than the windows' interval
    print('shut down')
"""


def test_no_window_opens_once_exit_has_begun(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    script = tmp_path / "slow_exit.py"
    script.write_text(SHUTS_DOWN_SLOWLY)
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--json", "--no-analyze",
                             "--profile-delay", "0.2", "--profile-duration", "0.2", "--profile-interval", "0.2",
                             "--profile-windows", "50", "--", PY, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for("a written window", lambda: any(p.stat().st_size for p in
                                                  (tmp_path / "gpuscope-runs").glob("*/windows.jsonl")), proc)
        first_ns = time.time_ns()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "shut down" in err, err  # --json: the child's stdout is on stderr
    doc = json.loads(out)
    assert 1 <= len(doc["windows"]) < 50
    # during the 4 s of shutdown, the timer would have opened several more windows
    assert all(w["start_ns"] < first_ns for w in doc["windows"]), (first_ns, doc["windows"])
    events = _events(tmp_path)
    assert all(e["ts_ns"] < first_ns for e in events if e["event"] == "window_open")
    assert any(e["event"] == "window_skipped" for e in events)


@pytest.mark.parametrize("args,code,note", [
    (["--no-profile"], "pass", "profiling off (--no-profile"),
    ([], "print('no torch here')", "the program never imported torch"),
    # the child imports torch: 6.5 s of CPU, the most of the README's set (bench/README.md)
    pytest.param(["--profile-delay", "60"], "import torch", "ended within --profile-delay (60 s) of importing torch",
                 marks=pytest.mark.slow),
])
def test_a_run_without_a_trace_says_why(tmp_path: Path, args: list[str], code: str, note: str) -> None:
    from gpuscope.render.run_summary import render_run_summary

    db = tmp_path / "s.duckdb"
    p = gpuscope(db, "run", "--json", *args, "--", PY, "-c", code)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["traces"] == [] and len(doc["profiler"]["notes"]) == 1 and note in doc["profiler"]["notes"][0]
    text = render_run_summary(doc)
    assert f"  profiler: {doc['profiler']['notes'][0]}" in text
    assert "the trace is CPU-only" not in text  # there is no trace at all


def test_run_directories_are_never_reused(tmp_path: Path) -> None:
    # two stores in one folder (or a store deleted and made again) both start at run 1
    code = "import gpuscope; gpuscope.mark('step', tokens=5)"
    dirs = []
    for name in ("a.duckdb", "b.duckdb"):
        p = gpuscope(tmp_path / name, "run", "--json", "--no-profile", "--", PY, "-c", code)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["run_id"] == 1 and doc["marks"] == 1 and doc["telemetry"]["tokens"] == 5
        dirs.append(doc["run_dir"])
    assert dirs[0] != dirs[1] and dirs[1].endswith(f"1-{Path(PY).name}.2")


CHILD_MODULES = """
import json, sys
def ours():
    return sorted(m for m in sys.modules if m.split('.')[0] in ('gpuscope', '_gpuscope_boot', '_gpuscope_contract'))
at_start = ours()
if sys.argv[1] == 'torch':
    import torch
import gpuscope
gpuscope.mark('step', tokens=3)
import gpuscope.api
boot = sys.modules.get('_gpuscope_boot')
print(json.dumps({'at_start': at_start, 'after': ours(),
                  'heavy': sorted(m for m in ('duckdb', 'pyarrow', 'numpy', 'psutil', 'pandas', 'textual')
                                  if m in sys.modules),
                  'boot': boot.__file__ if boot else None, 'api_boot_is_the_one': gpuscope.api._boot is boot,
                  'contract': sys.modules['_gpuscope_contract'].__file__}))
"""


# the child importing torch: 6.3 s of CPU (bench/README.md, "Test suite times")
@pytest.mark.parametrize("program", ["plain", pytest.param("torch", marks=pytest.mark.slow)])
def test_the_child_loads_the_bootstrap_under_one_name_and_nothing_heavy(tmp_path: Path, program: str) -> None:
    """Inside the program, gpuscope's bootstrap and contract are one module each, from the run's
    private copy, whether the program imports gpuscope.api, torch, or both; and gpuscope brings
    none of the store's or the CLI's packages into it."""
    if program == "torch":
        pytest.importorskip("torch")
    db = tmp_path / "s.duckdb"
    p = gpuscope(db, "run", "--json", "--no-analyze", "--profile-delay", "600", "--", PY, "-c", CHILD_MODULES,
                 program)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    child = json.loads(p.stderr[p.stderr.index('{"at_start"'):].splitlines()[0])  # run --json: child stdout -> stderr
    boot_dir = Path(doc["run_dir"]) / "bootstrap"
    # before the program imports anything, the bootstrap has loaded only the contract
    assert child["at_start"] == ["_gpuscope_contract"]
    assert child["after"] == sorted(["_gpuscope_boot", "_gpuscope_contract", "gpuscope", "gpuscope.api", "gpuscope.run",
                                     "gpuscope.run.bootstrap"])
    assert child["boot"] == str(boot_dir / "_gpuscope_boot.py") and child["api_boot_is_the_one"]
    assert child["contract"] == str(boot_dir / "_gpuscope_contract.py")
    if program == "plain":  # torch brings numpy of its own
        assert child["heavy"] == []
    assert doc["marks"] == 1


def test_the_private_bootstrap_is_owner_only_and_holds_the_contract(tmp_path: Path) -> None:
    from gpuscope.run import contract
    from gpuscope.run.bootstrap import CHILD_FILES
    from gpuscope.run.wrapper import ProfileConfig, child_env, private_bootstrap

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    boot = private_bootstrap(run_dir)
    assert boot == run_dir / contract.BOOTSTRAP_DIR and (boot.stat().st_mode & 0o777) == 0o700
    assert sorted(p.name for p in boot.iterdir()) == ["__pycache__", "_gpuscope_boot.py", "_gpuscope_contract.py",
                                                      "sitecustomize.py"]
    assert (boot / "__pycache__").stat().st_mode & 0o777 == 0o700  # the program's bytecode cache, owner-only
    assert (boot / "_gpuscope_contract.py").read_text() == CHILD_FILES["_gpuscope_contract.py"].read_text()
    env = child_env(run_dir, 7, ProfileConfig(delay_s=2.0), boot,
                    base={"PYTHONPATH": "/a" + os.pathsep + os.pathsep + "/b", "KINETO_LOG_LEVEL": "3"})
    assert env["PYTHONPATH"] == os.pathsep.join([str(boot), "/a", "/b"])
    assert env["GPUSCOPE_RUN_DIR"] == str(run_dir) and env["GPUSCOPE_RUN_ID"] == "7"
    assert json.loads(env["GPUSCOPE_PROFILE"]) == {"enabled": True, "delay_s": 2.0, "duration_s": 3.0, "windows": 1,
                                                   "interval_s": 2.0, "when": "time", "after_marks": 0,
                                                   "gpu_only": False}
    assert contract.decode_profile(env["GPUSCOPE_PROFILE"])["interval_s"] == 2.0
    assert env["VLLM_TORCH_PROFILER_DIR"] == str(run_dir / "traces") and env["KINETO_LOG_LEVEL"] == "3"
    assert child_env(run_dir, 7, ProfileConfig(), boot, base={})["KINETO_LOG_LEVEL"] == "6"


def test_a_window_without_gpu_kernels_on_a_gpu_machine_says_why() -> None:
    """On an H100 machine the README's command once profiled only the model's CPU initialisation:
    the summary must say that the window came too early, not only that the trace is CPU-only."""
    from gpuscope.run.wrapper import ProfileConfig, window_missed_gpu_note

    profile = ProfileConfig(delay_s=2, duration_s=1)
    summary = {"traces": ["t.json"], "windows": [{"pid": 1}], "analysis": {"gpu_activity": False},
               "telemetry": {"gpus": [{"key": "gpu0"}]}}
    note = window_missed_gpu_note(profile, summary)
    assert note is not None and "2-3 s after the program imported torch" in note and "--profile-delay" in note
    assert "1 GPU(s) were sampled" in note
    # kernels recorded, no GPU sampled, or no trace at all: nothing to explain
    assert window_missed_gpu_note(profile, {**summary, "analysis": {"gpu_activity": True}}) is None
    assert window_missed_gpu_note(profile, {**summary, "telemetry": {"gpus": []}}) is None
    assert window_missed_gpu_note(profile, {**summary, "traces": []}) is None
