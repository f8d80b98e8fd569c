"""Windows that catch serving, end to end on the CPU: ``gpuscope run --profile-when busy`` over a
replayed recording whose GPU gets busy after two seconds, and ``gpuscope profile`` asking a
running run for a window, first with a stand-in child (tests/fakes/fake_window_child.py, the
contract's side of the requests) and, once the bootstrap answers requests, with a CPU torch
program."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_cli

PY = sys.executable
FAKE = REPO / "tests" / "fakes" / "fake_window_child.py"
BOOT = REPO / "gpuscope" / "run" / "bootstrap" / "_gpuscope_boot.py"
#: the bootstrap reads window requests (the lead's child side); until then the real-torch tests skip
BOOT_ANSWERS = "REQUESTS_FILE" in BOOT.read_text()
needs_boot = pytest.mark.skipif(not BOOT_ANSWERS, reason="the bootstrap does not answer window requests yet")


def gpuscope(db: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "gpuscope", *args[:1], "--db", str(db), *args[1:]], capture_output=True,
                          text=True, timeout=timeout)


def rising_recording(path: Path, idle_s: float = 2.0, busy_s: float = 8.0, util: float = 0.9) -> Path:
    """One GPU at 10 Hz: 5 % for ``idle_s``, then ``util`` for ``busy_s``."""
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.collectors.replay import RECORDING_FORMAT

    dev = DeviceInfo(key="gpu0", vendor="nvidia", kind="gpu", name="Test GPU", index=0,
                     supported=("gpu_util", "power_w"))
    t0 = 1_767_225_600_000_000_000
    lines = [json.dumps({"format": RECORDING_FORMAT, "created_ns": t0, "host": "test", "interval_s": 0.1,
                         "synthetic": True, "note": "SYNTHETIC: test recording", "devices": [dev.to_dict()],
                         "vendors": []})]
    n_idle, n = int(round(idle_s * 10)), int(round((idle_s + busy_s) * 10))
    for k in range(n):
        u = 0.05 if k < n_idle else util
        lines.append(json.dumps({"tick": k, "device": "gpu0", "ts_ns": t0 + k * 100_000_000,
                                 "values": {"gpu_util": u, "power_w": 100 + 400 * u}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_busy_never_reached_says_so(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    rec = rising_recording(tmp_path / "low.jsonl", idle_s=0.5, busy_s=1.0, util=0.3)
    p = gpuscope(db, "run", "--json", "--no-analyze", "--replay", str(rec), "--profile-when", "busy=25",
                 "--", PY, "-c", "pass")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert not (Path(doc["run_dir"]) / "window-requests.jsonl").exists()
    notes = doc["profiler"]["notes"]
    assert any(n.startswith("the GPUs never stayed above 25 % for 3 s: no window") for n in notes), notes


def start_run(db: Path, *child: str, extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--json", "--no-analyze", *extra, "--",
                             *child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for(what: str, check, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"gpuscope ended before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)


def armed(tmp_path: Path) -> bool:
    return any(e.get("event") == "armed" for f in (tmp_path / "gpuscope-runs").glob("*/profiler.jsonl")
               for e in read_jsonl(f))


def test_gpuscope_profile_says_who_skipped_and_why_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    proc = start_run(db, PY, str(FAKE), "1", "--skip", "no GPU work in this process", "--deadline", "90")
    try:
        wait_for("an armed process", lambda: armed(tmp_path), proc)
        p = gpuscope(db, "profile")
        assert p.returncode == 1, p.stderr
        lines = p.stdout.splitlines()
        assert re.fullmatch(r"run \d+ \(fake_window_child\): asked every process that imported torch \(1\) for a 3 s window",
                            lines[0]), lines
        assert re.fullmatch(r"skipped: pid \d+ \(python\S*\): no GPU work in this process", lines[1]), lines
        assert lines[-1] == "no window opened"
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_gpuscope_profile_refuses_runs_it_cannot_ask(tmp_path: Path) -> None:
    from gpuscope import store
    from gpuscope.machine import hostname
    from gpuscope.store import runs
    from gpuscope.store.run_info import OwnerProcess, RunInfo

    db = tmp_path / "s.duckdb"
    r = run_cli("profile", "--db", str(db))
    assert r.code == 2 and "no store here yet" in r.err and len(r.err.strip().splitlines()) == 1
    dead = 2**22 + 4321  # beyond the default pid_max: no such process
    with store.writing(db) as con:
        rid = runs.begin_recording(con, name="orphan", source="run", started_ns=1, command="python x.py",
                                   info=RunInfo(owner=OwnerProcess(pid=dead, host=hostname()),
                                                run_dir=str(tmp_path), profile={"enabled": True}))
    r = run_cli("profile", "--db", str(db), "orphan")
    assert r.code == 2 and f"run {rid} (orphan): its gpuscope process (pid {dead}) is gone" in r.err
    release = tmp_path / "release"
    proc = start_run(db, PY, str(FAKE), "1", "--release", str(release), "--deadline", "90", extra=("--no-profile",))
    try:
        wait_for("an armed process", lambda: armed(tmp_path), proc)
        r = run_cli("profile", "--db", str(db))
        assert r.code == 2 and "was started with --no-profile" in r.err, r.err
        assert not list((tmp_path / "gpuscope-runs").glob("*/window-requests.jsonl"))
        release.touch()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    r = run_cli("profile", "--db", str(db))
    assert r.code == 2 and "no run is recording" in r.err
    r = run_cli("profile", "--db", str(db), "fake_window_child")
    assert r.code == 2 and re.fullmatch(r"gpuscope profile: run \d+ \(fake_window_child\): is not recording \(it is "
                                        r"complete\): windows open only while its program runs", r.err.strip()), r.err


CPU_TORCH = """
import os, sys, time, json, pathlib
import torch
run = pathlib.Path(os.environ["GPUSCOPE_RUN_DIR"])
a = torch.randn(64, 64)
end = time.monotonic() + 90
# work until two requested windows are written (or 90 s): each step runs Python, so requests are read
while time.monotonic() < end:
    for _ in range(20):
        a = torch.tanh(a @ a)
    w = run / "windows.jsonl"
    if w.exists() and sum(1 for x in w.read_text().splitlines() if x.strip() and json.loads(x).get("request")) >= 2:
        break
"""


def requested_windows(tmp_path: Path) -> list[dict]:
    return [w for f in (tmp_path / "gpuscope-runs").glob("*/windows.jsonl") for w in read_jsonl(f) if w.get("request")]


@needs_boot
def test_busy_then_gpuscope_profile_windows_in_a_cpu_torch_program(tmp_path: Path) -> None:
    """One run of a CPU torch program over a replayed GPU that gets busy 2 s in: the busy window
    is asked for 3 s after the rise (never before), then `gpuscope profile` opens a second one."""
    db = tmp_path / "s.duckdb"
    rec = rising_recording(tmp_path / "rise.jsonl")
    prog = tmp_path / "prog.py"
    prog.write_text(CPU_TORCH)
    proc = start_run(db, PY, str(prog), extra=("--replay", str(rec), "--profile-when", "busy",
                                               "--profile-duration", "0.3"))
    try:
        wait_for("the busy window", lambda: len(requested_windows(tmp_path)) >= 1, proc, timeout_s=90)
        p = gpuscope(db, "profile", "--duration", "0.3", "--json")
        assert p.returncode == 0, p.stderr
        asked = json.loads(p.stdout)
        assert asked["via"] == "request" and asked["request"]["source"] == "gpuscope profile"
        assert asked["request"]["pids"] is None  # no GPU of this machine's: every armed process is asked
        assert len(asked["opened"]) == 1 and asked["skipped"] == [] and asked["silent"] == []
        pid = asked["opened"][0]["pid"]
        assert asked["asked"] == [pid] and asked["opened"][0]["name"].startswith("python")
        assert asked["waited_for_windows"] and [w["pid"] for w in asked["written"]] == [pid]
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    reqs = read_jsonl(Path(doc["run_dir"]) / "window-requests.jsonl")
    assert [r["source"] for r in reqs] == ["busy", "gpuscope profile"]
    assert reqs[0]["pids"] is None and reqs[0]["duration_s"] == 0.3
    assert [w["request"] for w in doc["windows"]] == [r["id"] for r in reqs] and len(doc["traces"]) == 2
    # The stored samples carry the replay's clock: the busy request came once 3 s had passed since
    # the first busy sample (the rise, 2 s into the recording), never before.
    rows = run_cli("sql", "--db", str(db), "SELECT s.ts_ns, s.gpu_util FROM samples s JOIN devices d ON "
                   "d.run_id = s.run_id AND d.device_id = s.device_id WHERE d.key = 'gpu0' ORDER BY s.ts_ns",
                   "--json").json()
    rise_ns = next(r["ts_ns"] for r in rows if r["gpu_util"] >= 0.5)
    assert rows[0]["gpu_util"] < 0.5 and rise_ns - rows[0]["ts_ns"] == pytest.approx(2e9, abs=1e6)
    assert reqs[0]["ts_ns"] >= rise_ns + 3e9
    note = next(n for n in doc["profiler"]["notes"] if n.startswith("busy window 1"))
    # (asked once the program had imported torch too: seconds on a loaded machine, so no upper bound)
    assert re.match(r"busy window 1: asked for [0-9.]+ s into the run", note), note
    assert "gpu0 had been at or above 50 % for 3 s" in note
    assert re.search(rf"opened by pid {pid} \(written\)", note), note
    assert "asked for a 0.3 s profiler window" in err
    info = run_cli("sql", "--db", str(db), "SELECT info FROM runs", "--json").json()[0]["info"]
    assert json.loads(info)["profile"]["when"] == "busy" and json.loads(info)["profile"]["gpu_only"] is False


FAKE_SGLANG = '''
import http.server, json, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
log = os.environ["FAKE_ENGINE_LOG"]

class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode()
        with open(log, "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"profiler " + self.path.strip("/").encode())
        if self.path == "/stop_profile":
            self.server.done = True
    def log_message(self, *a):
        pass

srv = http.server.HTTPServer(("127.0.0.1", port), H)
srv.done = False
srv.timeout = 0.2
open(log + ".ready", "w").close()
end = time.monotonic() + 90
while not srv.done and time.monotonic() < end:
    srv.handle_request()
'''


def test_gpuscope_profile_uses_the_engines_own_profiler(tmp_path: Path) -> None:
    import socket

    pkg = tmp_path / "fakepkgs" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_SGLANG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "engine.log"
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fakepkgs"), "FAKE_ENGINE_LOG": str(log)}
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "-q", "--no-analyze", "--", PY, "-m",
                             "sglang.launch_server", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        wait_for("the fake server", lambda: Path(str(log) + ".ready").exists(), proc)
        p = gpuscope(db, "profile", "--duration", "0.2", "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["via"] == "engine" and doc["engine"]["name"] == "SGLang"
        assert doc["engine"]["url"] == f"http://127.0.0.1:{port}" and doc["request"] is None
        calls = [json.loads(x) for x in log.read_text().splitlines()]
        assert [c["path"] for c in calls] == ["/start_profile", "/stop_profile"]
        assert json.loads(calls[0]["body"])["record_shapes"] is True
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not list((tmp_path / "gpuscope-runs").glob("*/window-requests.jsonl"))
