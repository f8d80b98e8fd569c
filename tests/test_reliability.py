"""Stores gpuscope must refuse without touching them: another program's DuckDB database, a
file that is not DuckDB at all, a store written by a newer gpuscope. Every command that opens
a store exits 2 with one line naming the file, and the file keeps every byte."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import file_digest, fill, kernel, run_cli, write_trace


def _foreign(path: Path) -> Path:
    from gpuscope._db import duckdb

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE orders (id INTEGER, total DOUBLE)")
    con.execute("INSERT INTO orders VALUES (1, 9.5)")
    con.execute("CREATE VIEW big AS SELECT * FROM orders WHERE total > 5")
    con.close()
    return path


def _newer(path: Path, tmp_path: Path) -> Path:
    from gpuscope._db import duckdb

    trace = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)])
    assert run_cli("ingest", str(trace), "--db", str(path), "-q").code == 0
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    return path


def _garbage(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 400)
    return path


COMMANDS = [
    ["runs"], ["analyze"], ["compare", "1", "2"], ["sql", "SELECT 1"], ["export", "--format", "csv", "--out", "{tmp}/x"],
    ["report", "--out", "{tmp}/r.html"], ["ingest", "{trace}", "-q"], ["analyze", "{trace}"],
]


@pytest.mark.parametrize("kind", ["foreign", "newer", "garbage"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[:1] + (["TRACE"] if "{trace}" in c else [])))
def test_a_store_that_is_not_ours_is_refused_untouched(tmp_path: Path, kind: str, command: list[str]) -> None:
    db = tmp_path / "store.duckdb"
    {"foreign": lambda: _foreign(db), "newer": lambda: _newer(db, tmp_path), "garbage": lambda: _garbage(db)}[kind]()
    before = file_digest(db)
    trace = write_trace(tmp_path / "u.json", [kernel("k", 1.0, 2.0)])
    args = [a.replace("{tmp}", str(tmp_path)).replace("{trace}", str(trace)) for a in command]
    r = run_cli(*args, "--db", str(db))
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and "Traceback" not in r.err, r.err
    expect = {"foreign": "another program", "newer": "newer than this gpuscope", "garbage": "not a DuckDB database"}[kind]
    assert expect in lines[0]
    assert file_digest(db) == before
    assert not (tmp_path / "x").exists() and not (tmp_path / "r.html").exists()


def test_an_empty_duckdb_database_becomes_a_store(tmp_path: Path) -> None:
    from gpuscope._db import duckdb

    db = tmp_path / "empty.duckdb"
    duckdb.connect(str(db)).close()
    trace = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)])
    r = run_cli("ingest", str(trace), "--db", str(db), "-q")
    assert r.code == 0, r.err
    assert len(run_cli("runs", "--db", str(db), "--json").json()) == 1


def test_kill_9_of_ingest_at_random_points_leaves_a_usable_store(tmp_path: Path) -> None:
    """bench/fault_kill.py (20 points on the 1.2M trace in the benchmark): here five kills of
    an ingest of 100k synthetic events; after each the store opens, lists only complete runs
    (one more at most), and takes the next ingest."""
    import sys

    from conftest import REPO, cpu_op, runtime

    sys.path.insert(0, str(REPO / "bench"))
    import fault_kill

    events = []
    for i in range(25_000):
        t = i * 100.0
        events += [cpu_op("aten::mm", t, 50.0, ext=i + 1, dims=[[8, 8], [8, 8]], types=["float", "float"]),
                   runtime("cudaLaunchKernel", t + 5, 5.0, corr=i + 1, ext=i + 1), kernel("k", t + 20, 10.0, corr=i + 1),
                   {"ph": "f", "id": i, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": t + 20, "bp": "e"}]
    trace = write_trace(tmp_path / "big.json.gz", events, gz=True)
    work = tmp_path / "work"
    work.mkdir()
    res = fault_kill.kill_points(trace, 5, seed=7, work=work)
    assert res["bad"] == 0, res["kills"]
    assert sum(k["killed"] for k in res["kills"]) >= 3  # most kills land inside the ingest


def test_symlink_loops_in_a_trace_directory_end(tmp_path: Path) -> None:
    """A directory whose links point back up (a loop) or at itself: each trace is read once,
    the walk ends."""
    d = tmp_path / "traces"
    (d / "sub").mkdir(parents=True)
    write_trace(d / "rank0.json", [kernel("k", 1.0, 2.0)])
    (d / "sub" / "up").symlink_to("..")
    (d / "self").symlink_to(d)
    (d / "sub" / "again.json").symlink_to(d / "rank0.json")  # the same file under another name
    r = run_cli("ingest", str(d), "--db", str(tmp_path / "s.duckdb"), "--json", "-q")
    assert r.code == 0, r.err
    assert [f["path"] for f in r.json()["files"]] == [str(d / "rank0.json")]


def test_the_spools_of_a_killed_ingest_are_removed_by_the_next(tmp_path: Path, monkeypatch) -> None:
    """kill -9 leaves an ingest's spool folder behind (up to 256 MiB of parts); the next ingest
    removes the folders whose process is gone, and only the current user's."""
    import os
    import subprocess
    import sys

    from gpuscope.ingest import read

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f"{read.SPOOL_DIR_PREFIX}{dead_pid}-abc"
    stale.mkdir()
    (stale / "events-1.part0.json").write_text("[]")
    alive = tmp_path / f"{read.SPOOL_DIR_PREFIX}{os.getpid()}-xyz"  # a live process's: kept
    alive.mkdir()
    other = tmp_path / "gpuscope-ingest-notapid"
    other.mkdir()
    trace = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)])
    r = run_cli("ingest", str(trace), "--db", str(tmp_path / "s.duckdb"), "-q")
    assert r.code == 0, r.err
    assert not stale.exists() and alive.exists() and other.exists()


def test_device_properties_of_any_type_are_taken_or_left_out(tmp_path: Path) -> None:
    """Found by bench/fuzz_ingest.py: NaN, infinity, an object or a boolean where Kineto writes a
    number, and a lone surrogate in a name, made the ingest fail with an internal error while
    writing the devices. They are left out (NULL) or the text repaired; the ingest goes through."""
    import json

    props = [{"id": 0, "name": "NVIDIA H100\udfff", "totalGlobalMem": float("nan"), "numSms": {"a": "b"},
              "warpSize": float("inf"), "computeMajor": True, "computeMinor": 0}]
    text = json.dumps({"deviceProperties": props, "traceEvents": [kernel("k", 1.0, 2.0)]})
    path = tmp_path / "t.json"
    path.write_text(text)  # NaN and Infinity as Python writes them; the surrogate as an escape
    assert "NaN" in text and "\\udfff" in text
    db = tmp_path / "s.duckdb"
    r = run_cli("ingest", str(path), "--db", str(db), "-q")
    assert r.code == 0, r.err
    q = run_cli("sql", "SELECT name, memory_total_bytes, num_sms, warp_size, compute_capability FROM devices",
                "--db", str(db), "--json")
    assert q.code == 0, q.err
    (row,) = q.json()
    assert row["name"].startswith("NVIDIA H100") and row["memory_total_bytes"] is None
    assert row["num_sms"] is None and row["warp_size"] is None and row["compute_capability"] is None


def test_a_full_disk_under_the_store_is_one_line_and_the_store_as_it_was(small_fs: Path, tmp_path: Path) -> None:
    """The store on a 3 MiB tmpfs, filled up: the ingest that cannot write its run says so in
    one line (exit 1), the store keeps every byte and opens; with room again the next ingest
    goes through. Needs to mount a tmpfs (root with CAP_SYS_ADMIN, as in CI); skipped elsewhere."""
    import os

    db = small_fs / "s.duckdb"
    events = [kernel(f"k{i % 50}", i * 10.0, 5.0, corr=i) for i in range(3000)]
    trace = write_trace(tmp_path / "t.json", events)
    assert run_cli("ingest", str(trace), "--db", str(db), "-q").code == 0
    before = file_digest(db)
    room = fill(small_fs)
    r = run_cli("ingest", str(trace), "--db", str(db), "-q")
    assert r.code == 1 and len(r.err.strip().splitlines()) == 1, r.err
    assert str(db) in r.err and "no space left on the device" in r.err and "internal error" not in r.err
    assert file_digest(db) == before
    assert len(run_cli("runs", "--db", str(db), "--json").json()) == 1
    os.remove(room)
    assert run_cli("ingest", str(trace), "--db", str(db), "-q").code == 0
    assert len(run_cli("runs", "--db", str(db), "--json").json()) == 2
