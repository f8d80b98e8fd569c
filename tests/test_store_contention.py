"""Issue 30, point 3: whatever happens to the store, `gpuscope run` runs its program.

Two runs started at once on a store that does not exist yet both run and are both stored (the
store's creation waits for the other process); a run whose store another process holds for
longer than the wait runs anyway, keeps its rows in its run folder, and `gpuscope ingest RUN_DIR`
stores them, once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

#: `gpuscope ARGS` in a new process that first imports what it needs, then waits until the
#: test closes the pipe it reads (a barrier: the processes reach the store together), with
#: the store waits of the wrapper shortened when the test says so.
LAUNCHER = r"""
import os, sys
import gpuscope.cli, gpuscope.store, gpuscope.run.wrapper as wrapper, duckdb
wait = os.environ.get("TEST_STORE_WAIT_S")
if wait:
    wrapper.STORE_WAIT_S = float(wait)
    wrapper.STORE_WAIT_AT_END_S = float(wait)
fd = int(os.environ.get("TEST_BARRIER_FD", "-1"))
if fd >= 0:
    os.read(fd, 1)  # returns once the test closes the pipe's other end
meet = os.environ.get("TEST_CREATE_MEET")
if meet:
    # Both processes found no store and are about to create it: each waits here for the other,
    # so that they create it at the same moment (the race of the issue, made certain).
    import time
    from gpuscope.store import connection
    make_room, met = connection._make_room, []
    def meeting(path):
        if not met:
            met.append(1)
            open(os.path.join(meet, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 60
            while len(os.listdir(meet)) < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
        return make_room(path)
    connection._make_room = meeting
sys.exit(gpuscope.cli.main(sys.argv[1:]))
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _program(marker: Path) -> list[str]:
    """A program that proves it ran: it writes ``marker``."""
    return [PY, "-c", f"open({str(marker)!r}, 'w').write('ran')"]


def test_two_runs_on_a_missing_store_both_run_and_are_both_stored(tmp_path: Path) -> None:
    db = tmp_path / "new" / "s.duckdb"
    meet = tmp_path / "meet"
    meet.mkdir()
    read_end, write_end = os.pipe()
    procs = []
    try:
        for i in range(2):
            cmd = [PY, "-c", LAUNCHER, "run", "--db", str(db), "--no-profile", "--no-analyze", "-q", "--name", f"r{i}",
                   "--", *_program(tmp_path / f"ran{i}")]
            env = _env(TEST_BARRIER_FD=str(read_end), TEST_CREATE_MEET=str(meet))
            procs.append(subprocess.Popen(cmd, env=env, pass_fds=(read_end,),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    finally:
        os.close(read_end)
        os.close(write_end)  # both processes go now
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
    assert (tmp_path / "ran0").read_text() == "ran" and (tmp_path / "ran1").read_text() == "ran"
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT name, status, exit_code FROM runs ORDER BY name").fetchall()
    finally:
        con.close()
    assert rows == [("r0", "complete", 0), ("r1", "complete", 0)]
    assert len(os.listdir(meet)) == 2  # both met at the store's creation
    assert not list((db.parent / "gpuscope-runs").glob("pending-*"))  # neither had to wait in its folder


HOLDER = r"""
import sys, duckdb
con = duckdb.connect(sys.argv[1])  # a writer: holds the store's lock until stdin closes
print("held", flush=True)
sys.stdin.read()
con.close()
"""


def test_a_run_on_a_held_store_runs_and_is_stored_later_once(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    con = duckdb.connect(str(db))  # an existing store (a DuckDB file gpuscope migrates), let go of
    con.close()
    holder = subprocess.Popen([PY, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run = subprocess.run(
            [PY, "-c", LAUNCHER, "run", "--db", str(db), "--no-profile", "--no-analyze", "--hz", "50", "--json",
             "--", *_program(tmp_path / "ran")],
            env=_env(TEST_STORE_WAIT_S="0.3"), capture_output=True, text=True, timeout=120)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "ran").read_text() == "ran"  # the program ran
    unavailable = [line for line in run.stderr.splitlines() if "the store is unavailable" in line]
    assert len(unavailable) == 1 and "gpuscope ingest" in unavailable[0]
    doc = json.loads(run.stdout)
    run_dir = Path(doc["run_dir"])
    assert run_dir.parent == tmp_path / "gpuscope-runs" and run_dir.name.startswith("pending-")
    assert (run_dir.stat().st_mode & 0o777) == 0o700
    # the run's rows are in its folder: one line per sample, its end in run.json
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and all(isinstance(s["ts_ns"], int) for s in samples)
    info = json.loads((run_dir / "run.json").read_text())
    assert (info["state"], info["status"], info["exit_code"]) == ("finished", "complete", 0)

    stored = subprocess.run([PY, "-m", "gpuscope", "ingest", "--db", str(db), "--json", str(run_dir)],
                            env=_env(), capture_output=True, text=True, timeout=120)
    assert stored.returncode == 0, stored.stderr
    out = json.loads(stored.stdout)
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT name, status, exit_code, source, started_ns IS NOT NULL, ended_ns IS NOT NULL "
                          "FROM runs WHERE id = ?", [out["run_id"]]).fetchone()
        count = con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [out["run_id"]]).fetchone()[0]
        devices = con.execute("SELECT count(*) FROM devices WHERE run_id = ?", [out["run_id"]]).fetchone()[0]
    finally:
        con.close()
    assert row == ("python", "complete", 0, "run", True, True)
    assert count == out["samples"] == len(samples)
    assert devices == len((run_dir / "devices.jsonl").read_text().splitlines()) > 0

    again = subprocess.run([PY, "-m", "gpuscope", "ingest", "--db", str(db), str(run_dir)],
                           env=_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and f"already stored as run {out['run_id']}" in again.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # never twice
    finally:
        con.close()


def test_the_next_run_stores_a_pending_run_folder(tmp_path: Path) -> None:
    """A pending run left in the store's run folder is stored by the next `gpuscope run` that
    writes the store, said in one line."""
    from gpuscope.run.pending import PendingRun, pending_dir_name
    from gpuscope.run.wrapper import _checked_runs_root, _new_run_dir

    db = tmp_path / "s.duckdb"
    run_dir = _new_run_dir(_checked_runs_root(db, create=True), pending_dir_name("earlier"))
    pending = PendingRun.begin(run_dir, "earlier", "python earlier.py", 0.1, "host", "held by a test")
    pending.started(1_000_000_000, [], {})
    (pending.run_dir / "devices.jsonl").write_text(json.dumps({"key": "host", "vendor": "host", "kind": "host"}) + "\n")
    (pending.run_dir / "samples.jsonl").write_text("".join(
        json.dumps({"device": "host", "ts_ns": 1_000_000_000 + i * 100_000_000, "values": {"host_cpu_util": 0.5}}) + "\n"
        for i in range(4)))
    pending.finish("complete", 3, 1_400_000_000)
    run = subprocess.run([PY, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--no-analyze", "--",
                          *_program(tmp_path / "ran")], env=_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "stored the pending run" in line]
    assert len(said) == 1 and str(pending.run_dir) in said[0] and "4 samples" in said[0]
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT r.name, r.exit_code, r.started_ns, r.ended_ns, "
                           "(SELECT count(*) FROM samples s WHERE s.run_id = r.id) FROM runs r ORDER BY r.id").fetchall()
    finally:
        con.close()
    assert rows[0][0] == "python" and rows[1] == ("earlier", 3, 1_000_000_000, 1_400_000_000, 4)
    assert (pending.run_dir / "stored.json").is_file()
