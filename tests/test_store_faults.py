"""A store that cannot be written: its disk full under `run` and `monitor --db` (the telemetry
sink holds the samples, says so once, retries, never disturbs the program), and a read-only
store (a read-only file system, file or folder): the commands that write refuse in one line
with the store untouched, the commands that read still work.

The small file systems are tmpfs mounts made by the test (root with CAP_SYS_ADMIN, as in CI);
read-only files and folders use `chattr +i`, because root writes through any mode bits. Each
test skips, saying why, where these cannot be made."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, file_digest, fill, kernel, run_cli, write_trace

PY = sys.executable
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
NO_SPACE = "cannot write to the store (no space left on the device)"

# The child of `gpuscope run`: says it started, waits for the test's word, exits 7 (an exit code
# gpuscope itself never uses, so the test sees whose code came back).
CHILD = ("import os, sys, time\n"
         "open(sys.argv[1], 'w').close()\n"
         "while not os.path.exists(sys.argv[2]):\n"
         "    time.sleep(0.05)\n"
         "sys.exit(7)\n")


# -- helpers -----------------------------------------------------------------------------------

def wait_for(cond: Callable[[], object], what: str, limit_s: float = 60.0) -> object:
    """Poll ``cond`` until it is true; the limit only ends a hung test, it is not the check."""
    deadline = time.monotonic() + limit_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.1)


def stored_samples(db: Path) -> int | None:
    """Samples in the store, read as another reader would (None while a writer holds it)."""
    r = run_cli("sql", "--db", str(db), "SELECT count(*) AS n FROM samples", "--json")
    return r.json()[0]["n"] if r.code == 0 else None


def lines_with(path: Path, text: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if text in line]


def query(db: Path, sql: str) -> list[dict]:
    r = run_cli("sql", "--db", str(db), sql, "--json")
    assert r.code == 0, r.err
    return r.json()


def assert_no_duplicates(db: Path) -> int:
    """Every sample once: a write retried after it had in fact landed would show twice."""
    (row,) = query(db, "SELECT count(*) AS n, count(DISTINCT (run_id, device_id, ts_ns)) AS d FROM samples")
    assert row["n"] == row["d"], row
    return int(row["n"])


def chattr(flag: str, path: Path) -> None:
    r = subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make {path} immutable here (chattr {flag}: {r.stderr.strip() or 'failed'})")


# -- a full disk under `run` -----------------------------------------------------------------------

def _start_run(db: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path, Path]:
    started, go = tmp_path / "child-started", tmp_path / "child-go"
    err = tmp_path / "run.err"
    p = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-analyze", "-q", "--replay",
                          str(RECORDING), "--hz", "20", "--", PY, "-c", CHILD, str(started), str(go)],
                         stdout=subprocess.DEVNULL, stderr=open(err, "w"), text=True)
    wait_for(lambda: started.exists() or p.poll() is not None, "the program to start")
    assert p.poll() is None, err.read_text()
    return p, go, err, started


def test_run_rides_out_a_full_disk_and_stores_the_held_samples_when_space_returns(small_fs: Path,
                                                                                tmp_path: Path) -> None:
    db = small_fs / "s.duckdb"
    p, go, err, _ = _start_run(db, tmp_path)
    try:
        wait_for(lambda: stored_samples(db), "the first samples in the store")
        room = fill(small_fs)
        wait_for(lambda: lines_with(err, NO_SPACE), "the line that the disk is full")
        os.remove(room)
        wait_for(lambda: lines_with(err, "the store takes writes again"), "the held samples to land")
        go.touch()
        assert p.wait(timeout=120) == 7, err.read_text()  # the program's exit code, not gpuscope's
    finally:
        go.touch()
        p.kill()
        p.wait()
    text = err.read_text()
    assert "Traceback" not in text and "internal error" not in text, text
    (said,) = lines_with(err, NO_SPACE)  # once, not at every retry
    assert str(db) in said and "samples not stored yet, held in memory" in said
    (run,) = run_cli("runs", "--db", str(db), "--json").json()
    assert run["status"] == "complete" and run["exit_code"] == 7
    n = assert_no_duplicates(db)
    (st,) = query(db, "SELECT rows, info FROM sampler_stats")
    info = json.loads(st["info"])
    (lost,) = query(db, "SELECT count(*) AS n FROM annotations WHERE kind = 'device_lost'")
    # every sample the sampler made is in the store: held through the full disk, none dropped
    assert st["rows"] == n + lost["n"] and info["rows_written"] == n
    assert info["refused_flushes"] >= 1 and info["held_rows_max"] > 0 and info["rows_dropped"] == 0
    assert info["refused_reasons"] == ["no space left on the device"]


def test_run_on_a_disk_that_stays_full_returns_the_programs_exit_code(small_fs: Path, tmp_path: Path) -> None:
    """The disk is still full when the program ends: gpuscope says what could not be stored and
    returns the program's code; the run keeps the samples written before and reads as
    incomplete."""
    db = small_fs / "s.duckdb"
    p, go, err, _ = _start_run(db, tmp_path)
    try:
        wait_for(lambda: stored_samples(db), "the first samples in the store")
        room = fill(small_fs)
        wait_for(lambda: lines_with(err, NO_SPACE), "the line that the disk is full")
        before = stored_samples(db)
        go.touch()
        code = p.wait(timeout=120)
    finally:
        go.touch()
        p.kill()
        p.wait()
    text = err.read_text()
    assert "Traceback" not in text and "internal error" not in text, text
    assert code == 7, text
    assert len(lines_with(err, NO_SPACE)) == 1  # once, not at every retry
    for said in ("samples could not be stored (no space left on the device)",
                 "the run's end could not be stored (no space left on the device); it shows as incomplete"):
        (line,) = lines_with(err, said)
        assert str(db) in line
    (run,) = run_cli("runs", "--db", str(db), "--json").json()
    assert run["status"] == "incomplete"  # its recorder is gone; nothing half-written shows
    assert assert_no_duplicates(db) == before
    os.remove(room)


# -- a full disk under `monitor --db` --------------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_monitor_keeps_serving_through_a_full_disk_and_retries(small_fs: Path, tmp_path: Path) -> None:
    """Two full-disk spells: the first ends (the held samples land), the second lasts until the
    monitor is stopped (exit 1, and how many never reached the store). /metrics answers
    throughout; the store opens afterwards with each sample once."""
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="the Prometheus endpoint needs its exporter")
    db = small_fs / "s.duckdb"
    port = _free_port()
    err = tmp_path / "monitor.err"
    p = subprocess.Popen([PY, "-m", "gpuscope", "monitor", "--replay", str(RECORDING), "--db", str(db),
                          "--interval", "0.1", "--prometheus", str(port)],
                         stdout=subprocess.DEVNULL, stderr=open(err, "w"), text=True)

    def scrape() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.status == 200 and b"hw_power" in r.read()
        except OSError:
            return False

    try:
        wait_for(lambda: stored_samples(db), "the first samples in the store")
        room = fill(small_fs)
        wait_for(lambda: lines_with(err, NO_SPACE), "the line that the disk is full")
        assert scrape()  # still serving while the store refuses
        os.remove(room)
        wait_for(lambda: lines_with(err, "the store takes writes again"), "the held samples to land")
        room = fill(small_fs)
        wait_for(lambda: len(lines_with(err, NO_SPACE)) == 2, "the second full-disk spell")
        assert scrape() and p.poll() is None
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=120)
    finally:
        p.kill()
        p.wait()
    text = err.read_text()
    assert "Traceback" not in text and "internal error" not in text, text
    assert code == 1, text  # samples were lost: a failure while working, said in one line
    (gave_up,) = lines_with(err, "samples could not be stored (no space left on the device)")
    assert str(db) in gave_up
    assert len(lines_with(err, NO_SPACE)) == 2  # once per spell, not at every retry
    os.remove(room)
    (run,) = run_cli("runs", "--db", str(db), "--json").json()
    assert run["status"] == "incomplete" and run["samples"] > 0
    assert_no_duplicates(db)


# -- the store sink in this process ----------------------------------------------------------------

def _sink_on(db: Path, lines: list[str], **kw):
    from gpuscope.collectors.base import DeviceInfo
    from gpuscope.sinks import StoreSink
    from gpuscope.sinks.base import SamplerInfo

    sink = StoreSink(db, name="faults", source="run", flush_s=0.0, report=lines.append, **kw)
    sink.start(SamplerInfo(0.1, time.time_ns(), [], [DeviceInfo(key="gpu0", vendor="nvidia", index=0)]))
    return sink


def _batch(first: int, n: int, t0: int):
    from gpuscope.collectors.base import Sample
    from gpuscope.sinks.base import SampleBatch

    return SampleBatch([(i, [Sample("gpu0", t0 + i * 1000, {"power_w": 100.0 + i % 7, "gpu_util": 0.5})])
                        for i in range(first, first + n)])


def test_the_sink_holds_at_most_its_bound_and_says_what_it_dropped(small_fs: Path) -> None:
    """Memory stays bounded on a disk that stays full: the newest ``max_held_rows`` samples are
    held, the older ones dropped and counted, and when room comes back the held ones land and
    the run says in its notes how many are missing and why."""
    from gpuscope.sinks.base import SamplerStats

    db = small_fs / "s.duckdb"
    lines: list[str] = []
    sink = _sink_on(db, lines, max_held_rows=500)
    t0 = time.time_ns()
    room = fill(small_fs)
    for k in range(8):  # 8 x 200 samples while the disk is full
        sink.write(_batch(k * 200, 200, t0))
    assert sink.held_rows == 500 and sink.held_rows_max == 500 and sink.rows_dropped == 1100
    assert sink.rows_written == 0 and sink.refused_flushes == 8
    assert len(lines) == 1 and NO_SPACE in lines[0]
    os.remove(room)
    sink.close(SamplerStats(interval_s=0.1, rows=1600))
    assert lines[1].endswith("the store takes writes again: 500 held samples stored (1,100 dropped while it could not)")
    (run,) = query(db, "SELECT status, info FROM runs")
    assert run["status"] == "complete"
    assert any("1100 samples were not stored" in n and "no space left on the device" in n
               for n in json.loads(run["info"])["notes"])
    # the newest were kept: the oldest 1,100 ticks are the ones missing
    (row,) = query(db, f"SELECT count(*) AS n, min(ts_ns) - {t0} AS first FROM samples")
    assert row == {"n": 500, "first": 1100 * 1000}


def test_a_note_of_missing_samples_goes_in_with_the_runs_end(small_fs: Path) -> None:
    """The disk stays full through the sink's close: the samples and the note saying so are
    refused. The note waits in ``missing_note``, and `gpuscope run`'s wrapper writes it in the
    same transaction as the run's end once there is room: seen on 2026-11-26, a run ended
    `complete` with samples missing and no note (its end fitted where the note had not)."""
    from gpuscope.run.wrapper import _finish
    from gpuscope.sinks.base import SamplerStats

    db = small_fs / "s.duckdb"
    lines: list[str] = []
    sink = _sink_on(db, lines, final_status=None, close_retry_s=0.2)
    t0 = time.time_ns()
    sink.write(_batch(0, 50, t0))  # stored
    room = fill(small_fs)
    sink.write(_batch(50, 200, t0))  # held
    sink.close(SamplerStats(interval_s=0.1, rows=250))
    assert sink.rows_not_stored == 200
    assert sink.missing_note is not None and "200 samples were not stored" in sink.missing_note
    os.remove(room)
    _finish(db, sink.run_id, "complete", 0, time.time_ns(), notes=[sink.missing_note])
    (run,) = query(db, "SELECT status, info FROM runs")
    assert run["status"] == "complete"
    notes = json.loads(run["info"])["notes"]
    assert sum("200 samples were not stored" in n for n in notes) == 1


def test_a_commit_whose_checkpoint_fails_is_not_written_twice(small_fs: Path) -> None:
    """Nearly full: the commit fits in the write-ahead log, the checkpoint at DETACH does not.
    Those rows are stored (DuckDB replays the log); found on 2026-11-26: the sink took DETACH's
    error for a failed write and wrote the same samples again at the next flush."""
    from gpuscope.sinks.base import SamplerStats

    db = small_fs / "s.duckdb"
    lines: list[str] = []
    sink = _sink_on(db, lines)
    st = os.statvfs(small_fs)
    with open(small_fs / "fill", "wb") as f:  # leave 100 KiB: the log of 200 samples, not a new 64 KiB block and its metadata
        f.write(b"\0" * (st.f_bavail * st.f_frsize - 100 * 1024))
    t0 = time.time_ns()
    for k in range(3):
        sink.write(_batch(k * 200, 200, t0))
    os.remove(small_fs / "fill")
    sink.close(SamplerStats(interval_s=0.1, rows=600))
    assert assert_no_duplicates(db) == 600
    assert sink.checkpoint_failures >= 1  # the case this test is about did happen


# -- a read-only store -----------------------------------------------------------------------------

def _store_with_a_run(db: Path, tmp_path: Path) -> Path:
    trace = write_trace(tmp_path / "t.json", [kernel(f"k{i % 5}", i * 10.0, 5.0, corr=i) for i in range(50)])
    assert run_cli("ingest", str(trace), "--db", str(db), "-q").code == 0
    return trace


@pytest.fixture(params=["read-only file system", "read-only file", "read-only folder"])
def read_only_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    """(store, trace, the reason the refusal must give): a store holding one run, made read-only
    as ``request.param`` says, made writable again afterwards."""
    kind = request.param
    if kind == "read-only file system":
        mnt = request.getfixturevalue("small_fs")
        db = mnt / "s.duckdb"
        trace = _store_with_a_run(db, tmp_path)
        r = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only ({r.stderr.strip()})")
        try:
            yield db, trace, "read-only file system"
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mnt)], capture_output=True)
        return
    folder = tmp_path / "stores"
    folder.mkdir()
    db = folder / "s.duckdb"
    trace = _store_with_a_run(db, tmp_path)
    target = db if kind == "read-only file" else folder
    chattr("+i", target)
    try:
        if os.access(db if kind == "read-only file" else folder, os.W_OK):
            pytest.skip(f"chattr +i does not make {target} read-only here")
        yield db, trace, ("the file is read-only" if kind == "read-only file"
                          else f"the folder {folder} is read-only, and the store writes s.duckdb.wal beside it")
    finally:
        subprocess.run(["chattr", "-i", str(target)], capture_output=True)


@pytest.mark.parametrize("command", ["ingest", "run", "monitor"])
def test_a_read_only_store_is_refused_in_one_line_and_left_as_it_was(read_only_store, command: str,
                                                                     tmp_path: Path) -> None:
    """Exit 2 like any --db that cannot be used; `run` refuses before it starts the program (it
    was asked to record into this store), as it does for a --db that is not a store."""
    db, trace, reason = read_only_store
    before = file_digest(db)
    ran = tmp_path / "program-ran"
    argv = {"ingest": ["ingest", str(trace), "--db", str(db), "-q"],
            "run": ["run", "--db", str(db), "--no-analyze", "-q", "--", PY, "-c", f"open({str(ran)!r}, 'w')"],
            "monitor": ["monitor", "--db", str(db), "--replay", str(RECORDING), "--seconds", "1"]}[command]
    r = run_cli(*argv)
    assert r.code == 2, (r.code, r.err)
    (line,) = r.err.strip().splitlines()
    assert line == f"gpuscope {command}: {db}: cannot write to the store ({reason}); the store is as it was"
    assert file_digest(db) == before and not Path(str(db) + ".wal").exists()
    assert not ran.exists()


def test_a_read_only_store_still_answers_the_commands_that_read(read_only_store, tmp_path: Path) -> None:
    db, _, _ = read_only_store
    before = file_digest(db)
    r = run_cli("runs", "--db", str(db), "--json")
    assert r.code == 0, r.err
    (run,) = r.json()
    assert run["kernels"] == 50
    for argv in (["analyze", "--json"], ["sql", "SELECT count(*) AS n FROM kernels", "--json"],
                 ["export", str(run["id"]), "--format", "csv", "--out", str(tmp_path / "csv")],
                 ["report", str(run["id"]), "--out", str(tmp_path / "r.html")]):
        r = run_cli(*argv, "--db", str(db))
        assert r.code == 0, (argv, r.err)
    assert (tmp_path / "csv").is_dir() and (tmp_path / "r.html").is_file()
    assert file_digest(db) == before


def test_a_new_store_in_a_read_only_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    trace = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0)])
    chattr("+i", folder)
    try:
        for argv in (["ingest", str(trace), "-q"], ["run", "--no-analyze", "-q", "--", PY, "-c", "pass"]):
            db = folder / "sub" / "new.duckdb"
            r = run_cli(argv[0], "--db", str(db), *argv[1:])
            assert r.code == 2, r.err
            (line,) = r.err.strip().splitlines()
            assert line == f"gpuscope {argv[0]}: {db}: cannot create the store (the folder {folder} is read-only)"
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


# -- `record`'s file (not the store, but the same disk) ---------------------------------------------

def test_record_to_a_read_only_or_full_file_system_is_one_line(small_fs: Path) -> None:
    """`record` writes a recording file, not the store; that file on a read-only file system is
    unusable input (exit 2), a disk that fills up while recording a failure (exit 1): one line
    each (before: an internal error quoting the OSError, exit 1)."""
    out = small_fs / "r.jsonl"
    args = ["record", "--seconds", "0.5", "--interval", "0.1", "--out", str(out)]
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only ({r.stderr.strip()})")
    try:
        res = run_cli(*args)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)
    if "no device to record" in res.err:
        pytest.skip("no device to record here, not even the host")
    assert res.code == 2 and "Traceback" not in res.err and "internal error" not in res.err, res.err
    assert res.err.strip().splitlines()[-1] == f"gpuscope record: {out}: cannot write the recording (read-only file system)"
    fill(small_fs)
    res = run_cli(*args)
    assert res.code == 1 and "Traceback" not in res.err and "internal error" not in res.err, res.err
    (line,) = [ln for ln in res.err.splitlines() if "cannot write" in ln]
    assert line.startswith(f"gpuscope record: {out}: cannot write the recording (no space left on the device); ")
