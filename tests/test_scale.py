"""Ingest at scale: batches, the progress line, threads and rank files read at once, and the
fleet recipe of docs/scale.md (several stores' runs exported as Parquet and queried together
with the SQL `gpuscope sql` runs on one store)."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cpu_op, kernel, run_cli, runtime, write_trace


def _trace(n: int, seed: int = 0, rank: int | None = None) -> list:
    events = []
    for i in range(n):
        t = i * 100.0
        events.append(cpu_op("aten::mm" if (i + seed) % 2 else "aten::add", t, 50.0, ext=i + 1,
                             dims=[[64, 64], [64, 64]], types=["float", "float"]))
        events.append(runtime("cudaLaunchKernel", t + 5, 5.0, corr=10_000 + i, ext=i + 1))
        events.append(kernel("sgemm" if (i + seed) % 2 else "add_kernel", t + 20, 10.0 + (i + seed) % 7,
                             corr=10_000 + i))
        events.append({"ph": "f", "id": i, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": t + 20, "bp": "e"})
    return events


def _write_rank(path: Path, n: int, rank: int) -> Path:
    return write_trace(path, _trace(n, seed=rank), distributedInfo={"rank": rank, "world_size": 4})


# -- the progress line ------------------------------------------------------------------------

class _Clock:
    def __init__(self, times: list[float]) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_line_waits_a_second_then_rewrites_itself_in_place() -> None:
    from gpuscope.ingest import ProgressLine

    out = _Tty()
    # start, a tick at 0.5 s (too early: silent), at 2 s (shown), at 4 s (shown, rewritten)
    p = ProgressLine(out, clock=_Clock([0.0, 0.5, 2.0, 4.0]))
    p.total_bytes = 1000
    p.tick("t.json.gz", 100, 0.1, 1000)
    assert out.getvalue() == ""
    p.tick("t.json.gz", 1000, 0.25, 1000)
    p.tick("t.json.gz", 2000, 0.5, 1000)
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 2 and "\n" not in text
    assert "t.json.gz: 2,000 events, 500 events/s, 50% read, about" in text
    p("linking kernels to launches and ops")  # a stage line ends the live line first
    assert out.getvalue().endswith("\ngpuscope: linking kernels to launches and ops\n")


def test_off_a_terminal_it_prints_at_most_a_line_a_second() -> None:
    from gpuscope.ingest import ProgressLine

    out = io.StringIO()
    p = ProgressLine(out, clock=_Clock([0.0, 1.5, 1.7, 2.9]))
    for k in range(3):
        p.tick("t", 10 * (k + 1), 0.5, 100)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()  # 1.5 s and 2.9 s; 1.7 s is too soon
    assert lines[0].startswith("gpuscope: t: 10 events") and "left" not in lines[0]  # no total: no time left


def test_time_left_counts_linking_and_writing() -> None:
    from gpuscope.ingest import ProgressLine
    from gpuscope.ingest.progress import AFTER_PARSE_SHARE

    out = io.StringIO()
    p = ProgressLine(out, live=False, clock=_Clock([0.0, 10.0]))
    p.total_bytes = 100
    p.tick("t", 5, 1.0, 100)  # all read after 10 s: what is left is linking and writing
    assert f"about {round(10 * AFTER_PARSE_SHARE)} s left" in out.getvalue()


def _ingest_proc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", "ingest", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_progress_is_shown_only_when_asked_off_a_terminal(tmp_path: Path) -> None:
    """Piped (as here), ingest shows no progress unless --progress; with it the stage lines and
    the live lines go to stderr and --json's stdout stays one JSON document."""
    trace = write_trace(tmp_path / "t.json", _trace(3000))
    plain = _ingest_proc(str(trace), "--db", str(tmp_path / "a.duckdb"), "--json")
    assert plain.returncode == 0 and plain.stderr == ""
    code = ("import sys; import gpuscope.ingest.progress as p; p.LIVE_AFTER_S = 0.0\n"
            "import gpuscope.ingest.read as read; read.SPOOL_PART_BYTES = 16384\n"
            "from gpuscope.cli import main; sys.exit(main(sys.argv[1:]))")
    shown = subprocess.run([sys.executable, "-c", code, "ingest", str(trace), "--db", str(tmp_path / "b.duckdb"),
                            "--json", "--progress"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["events"] == 12000
    assert "gpuscope: reading " in shown.stderr and "gpuscope: writing run to" in shown.stderr
    live = [ln for ln in shown.stderr.splitlines() if "events/s" in ln]
    # (off a terminal a line a second at most: the first batch's)
    assert live and live[0].startswith(f"gpuscope: {trace.name}: ") and "% read, about " in live[0]


@pytest.mark.parametrize("value", ["0", "x", "-2"])
def test_bad_threads_is_exit_2(tmp_path: Path, db: Path, value: str) -> None:
    trace = write_trace(tmp_path / "t.json", _trace(5))
    r = run_cli("ingest", str(trace), "--threads", value)
    assert r.code == 2 and "--threads" in r.err and "Traceback" not in r.err


# -- many ranks ------------------------------------------------------------------------------

def _analysis(db: Path) -> dict:
    r = run_cli("analyze", "--db", str(db), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    doc.pop("run")
    return doc


def test_rank_files_read_several_at_once_give_the_run_one_thread_gives(tmp_path: Path, monkeypatch) -> None:
    """Ranks spooled on several threads and parsed in batches of parts on several DuckDB
    threads: the same run, to the last digit, as one thread reading them one by one."""
    import gpuscope.ingest.read as read
    import gpuscope.ingest.stage as stage

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(4):
        _write_rank(ranks / f"rank{r}.pt.trace.json", 1500, r)
    monkeypatch.setattr(stage, "PARALLEL_JSON_BYTES", 0)  # every input counts as large
    monkeypatch.setattr(read, "SPOOL_PART_BYTES", 8192)  # many parts, several batches a file
    docs, ingests = [], []
    for threads in ("1", "4"):
        db = tmp_path / f"t{threads}.duckdb"
        r = run_cli("ingest", str(ranks), "--db", str(db), "--threads", threads, "--json", "-q")
        assert r.code == 0, r.err
        doc = r.json()
        ingests.append({k: doc[k] for k in ("events", "loaded", "skipped", "ignored", "linked")})
        assert [f["rank"] for f in doc["files"]] == [0, 1, 2, 3]
        docs.append(_analysis(db))
    assert ingests[0] == ingests[1] and ingests[0]["events"] == 4 * 6000
    assert ingests[0]["ignored"] == {"ac2g": 4 * 1500}
    assert docs[0] == docs[1]
    keys = [d["key"] for d in docs[0]["per_device"]] if "per_device" in docs[0] else None
    assert keys is None or keys == [f"rank{r}/gpu0" for r in range(4)]


def test_spool_ahead_keeps_order_and_hands_over_errors(tmp_path: Path) -> None:
    from gpuscope.errors import InputError
    from gpuscope.ingest.read import SpoolAhead

    paths = [write_trace(tmp_path / f"t{i}.json", _trace(20, seed=i)) for i in range(5)]
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    paths.insert(2, bad)
    ahead = SpoolAhead(paths, workers=3)
    try:
        got = []
        for i in range(len(paths)):
            try:
                got.append(ahead.take(i).result().source.name)
            except InputError as exc:
                got.append(f"error:{Path(exc.source).name}")
        assert got[:2] == ["t0.json", "t1.json"] and got[2] == "error:bad.json" and got[3:] == [
            "t2.json", "t3.json", "t4.json"]
        with pytest.raises(ValueError):
            ahead.take(0)
    finally:
        ahead.close()
    assert not ahead.dir.exists()


def test_a_large_trace_parsed_in_batches_gives_the_run_a_whole_read_gives(tmp_path: Path, monkeypatch) -> None:
    """The batches (each routed into tables of its own) change nothing: the same ingest counts
    and analysis as one batch of the whole trace."""
    import gpuscope.ingest.read as read
    import gpuscope.ingest.parse as parse

    trace = write_trace(tmp_path / "t.json", _trace(2000))
    out = []
    for part_bytes, per_batch in ((1 << 30, 8), (4096, 1)):
        monkeypatch.setattr(read, "SPOOL_PART_BYTES", part_bytes)
        monkeypatch.setattr(parse, "PARTS_PER_BATCH", per_batch)
        db = tmp_path / f"s{part_bytes}.duckdb"
        r = run_cli("ingest", str(trace), "--db", str(db), "--json", "-q")
        assert r.code == 0, r.err
        out.append(({k: r.json()[k] for k in ("events", "loaded", "ignored", "linked")}, _analysis(db)))
    assert out[0] == out[1]
    assert out[0][0]["linked"]["kernels_with_op"] == 2000


# -- a fleet: several stores' runs in shared storage, queried together ------------------------

FLEET_QUERY = ("SELECT k.name, count(*) AS launches, sum(k.dur_ns) AS busy_ns FROM kernels k "
               "GROUP BY k.name ORDER BY k.name")


def test_runs_of_several_stores_exported_as_parquet_answer_the_same_sql_together(tmp_path: Path) -> None:
    """docs/scale.md's recipe: each host exports its runs under host=H/run=R/ in shared
    storage; DuckDB reads them all with views named like the store's tables, so the query
    `gpuscope sql` runs on one store runs unchanged on the fleet, and gives the sums of the
    hosts' answers."""
    from gpuscope._db import duckdb

    fleet = tmp_path / "fleet"
    per_host = []
    for host, seed in (("gpu-a", 0), ("gpu-b", 1)):
        store = tmp_path / f"{host}.duckdb"
        for k in range(2):
            trace = write_trace(tmp_path / f"{host}-{k}.json", _trace(50 + 10 * k, seed=seed + k))
            assert run_cli("ingest", str(trace), "--db", str(store), "-q").code == 0
        ids = [row["id"] for row in run_cli("runs", "--db", str(store), "--json").json()]
        (fleet / f"host={host}").mkdir(parents=True)  # (export makes the run's folder, not its parents)
        for run_id in ids:
            r = run_cli("export", str(run_id), "--db", str(store), "--format", "parquet",
                        "--out", str(fleet / f"host={host}" / f"run={run_id}"))
            assert r.code == 0, r.err
        q = run_cli("sql", FLEET_QUERY, "--db", str(store), "--json")
        assert q.code == 0, q.err
        per_host.append(q.json())
    con = duckdb.connect()
    for table in ("runs", "kernels", "ops", "devices", "samples"):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{fleet}/*/*/{table}.parquet', "
                    "hive_partitioning = true, union_by_name = true)")
    together = con.execute(FLEET_QUERY).fetchall()
    expected: dict[str, list[int]] = {}
    for doc in per_host:
        rows = doc["rows"] if isinstance(doc, dict) else doc
        for row in rows:
            name, n, ns = (row["name"], row["launches"], row["busy_ns"]) if isinstance(row, dict) else row
            e = expected.setdefault(name, [0, 0])
            e[0] += n
            e[1] += ns
    assert {n: [c, b] for n, c, b in together} == expected
    hosts = con.execute("SELECT host, count(DISTINCT run) FROM kernels GROUP BY host ORDER BY host").fetchall()
    assert hosts == [("gpu-a", 2), ("gpu-b", 2)]
