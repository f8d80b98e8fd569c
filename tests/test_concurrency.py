"""One store, many processes at once, for real: a `monitor --db` daemon sampling at 10 Hz, two
`gpuscope run`s recording telemetry, ingests, and readers (`runs`, `sql`) in a loop. Every
writer completes with all its rows and no reader fails (DuckDB allows one writing process at a
time: each writer holds the store only for a short transaction and others wait and retry;
docs/reliability.md)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, cpu_op, kernel, runtime, write_trace

PY = sys.executable
REC = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"


def _gs(db: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "gpuscope", *args[:1], "--db", str(db), *args[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def test_monitor_runs_ingests_and_readers_share_a_store(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    events = []
    for i in range(3000):
        t = i * 50.0
        events += [cpu_op("aten::mm", t, 20.0, ext=i + 1), runtime("cudaLaunchKernel", t + 2, 2.0, corr=i + 1, ext=i + 1),
                   kernel("k", t + 5, 10.0, corr=i + 1)]
    trace = write_trace(tmp_path / "t.json", events)
    monitor = _gs(db, "monitor", "--replay", str(REC), "--interval", "0.1", "--seconds", "14")
    time.sleep(2.0)
    runs = [_gs(db, "run", "--json", "--replay", str(REC), "--hz", "10", "--no-analyze", "--", "sleep", "4")
            for _ in range(2)]
    ingests, reads, failures = 0, 0, []
    t_end = time.monotonic() + 9
    while time.monotonic() < t_end:
        p = subprocess.run([PY, "-m", "gpuscope", "ingest", str(trace), "--db", str(db), "-q"], capture_output=True,
                           text=True, cwd=REPO, timeout=120)
        ingests += p.returncode == 0
        if p.returncode != 0:
            failures.append(("ingest", p.stderr.strip()))
        for args in (["runs", "--json"], ["sql", "SELECT count(*) FROM samples"]):
            q = subprocess.run([PY, "-m", "gpuscope", args[0], "--db", str(db), *args[1:]], capture_output=True,
                               text=True, cwd=REPO, timeout=120)
            reads += q.returncode == 0
            if q.returncode != 0:
                failures.append((args[0], q.stderr.strip()))
    outs = [r.communicate(timeout=120) for r in runs]
    mon_out, mon_err = monitor.communicate(timeout=120)
    assert failures == []
    assert monitor.returncode == 0, mon_err
    for r, (out, err) in zip(runs, outs):
        assert r.returncode == 0, err
    assert ingests >= 2 and reads >= 4
    q = subprocess.run([PY, "-m", "gpuscope", "sql", "--db", str(db), "--json",
                        "SELECT r.source, r.status, s.ticks, s.rows, (SELECT count(*) FROM samples x WHERE x.run_id = r.id) "
                        "+ (SELECT count(*) FROM annotations a WHERE a.run_id = r.id AND a.kind = 'device_lost') "
                        "AS stored FROM runs r LEFT JOIN sampler_stats s ON s.run_id = r.id ORDER BY r.id"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    rows = json.loads(q.stdout)
    assert all(r["status"] == "complete" for r in rows), rows
    assert sum(r["source"] == "ingest" for r in rows) == ingests
    recorded = [r for r in rows if r["source"] in ("monitor", "run")]
    assert len(recorded) == 3
    for r in recorded:  # every sample the sampler made is in the store (a lost device's as its annotation)
        assert r["rows"] and r["stored"] == r["rows"], r
