#!/usr/bin/env python3
"""One store, every kind of process at once, for a minute: what each waits.

    python bench/bench_concurrency.py [--seconds 60] [--json]

As separate processes on one store: a ``monitor --db`` daemon sampling a replayed recording
(3 devices) at 10 Hz for the whole time; two ``gpuscope run``s at a time recording telemetry
at 10 Hz (``-- sleep 8``, started again as they end); a loop of ``ingest`` (a 9,000-event
trace), ``runs --json`` and ``sql``; and the TUI on its runs screen in tmux (where tmux is
installed), its screen read every 0.2 s. Printed: whether every writer completed with all its
rows; the longest flush of each telemetry writer (waiting for the store plus writing, from
``sampler_stats.info``); ingest and reader wall times (median, p99, max) and failures; the TUI's
"store busy" sightings and how long after an ingest ended the TUI showed its run (the runs
screen reads the store every 2 s). DuckDB lets one process write a file at a time; the design
this measures is in docs/reliability.md ("Concurrency"). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
PY = sys.executable
REC = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"


def _gs(db: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "gpuscope", *args[:1], "--db", str(db), *args[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def _q(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "median": None, "p99": None, "max": None}
    s = sorted(values)
    return {"n": len(s), "median": round(statistics.median(s), 3), "p99": round(s[min(len(s) - 1, int(0.99 * len(s)))], 3),
            "max": round(s[-1], 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from conftest import launch_trace

    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-bench-conc-"))
    db = tmp / "s.duckdb"
    trace = launch_trace(tmp / "t.json")
    monitor = _gs(db, "monitor", "--replay", str(REC), "--interval", "0.1", "--seconds", str(args.seconds + 10))
    time.sleep(2.0)

    tui: dict[str, Any] = {"counts": [], "busy": 0, "tracebacks": 0, "frames": 0}
    tmux = None
    stop = threading.Event()
    watcher = None
    if shutil.which("tmux"):
        from tmux_harness import Tmux, start_tui

        tmux = Tmux()
        start_tui(tmux, db, "--replay", str(REC), "--interval", "0.5", width=120, height=30)
        tmux.wait_for("the TUI", lambda s: "gpuscope" in s)
        tmux.keys("2")

        def watch() -> None:
            while not stop.wait(0.2):
                try:
                    screen = tmux.screen()
                except AssertionError:
                    continue
                tui["frames"] += 1
                m = re.search(r"\b(\d+) runs\b", screen)
                if m and (not tui["counts"] or tui["counts"][-1][1] != int(m.group(1))):
                    tui["counts"].append((time.monotonic(), int(m.group(1))))
                tui["busy"] += "store busy" in screen
                tui["tracebacks"] += "Traceback" in screen or "gpuscope-exit=" in screen

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

    runs: list[subprocess.Popen] = []
    finished_runs: list[tuple[subprocess.Popen, str, str]] = []
    ingest_s, read_s, failures, landed = [], [], [], []  # landed: (monotonic end, runs in the store then)
    n_runs = 0
    t_end = time.monotonic() + args.seconds
    while time.monotonic() < t_end:
        for r in [r for r in runs if r.poll() is not None]:
            runs.remove(r)
            finished_runs.append((r, *r.communicate()))
        while len(runs) < 2:
            runs.append(_gs(db, "run", "--json", "--replay", str(REC), "--hz", "10", "--no-analyze", "--", "sleep", "8"))
            n_runs += 1
        t0 = time.monotonic()
        p = subprocess.run([PY, "-m", "gpuscope", "ingest", str(trace), "--db", str(db), "-q"], capture_output=True,
                           text=True, cwd=REPO, timeout=300)
        ingest_s.append(time.monotonic() - t0)
        if p.returncode != 0:
            failures.append(("ingest", p.stderr.strip()))
        for a in (["runs", "--json"], ["sql", "SELECT count(*) FROM samples"]):
            t0 = time.monotonic()
            q = subprocess.run([PY, "-m", "gpuscope", a[0], "--db", str(db), *a[1:]], capture_output=True, text=True,
                               cwd=REPO, timeout=300)
            read_s.append(time.monotonic() - t0)
            if q.returncode != 0:
                failures.append((a[0], q.stderr.strip()))
            elif a[0] == "runs" and p.returncode == 0:
                landed.append((t0, len(json.loads(q.stdout))))
    for r in runs:
        finished_runs.append((r, *r.communicate(timeout=300)))
    mon_out, mon_err = monitor.communicate(timeout=300)
    time.sleep(5)  # two refreshes of the runs screen
    stop.set()
    if watcher is not None:
        watcher.join(5)
    if tmux is not None:
        tmux.close()

    q = subprocess.run([PY, "-m", "gpuscope", "sql", "--db", str(db), "--json",
                        "SELECT r.id, r.source, r.status, s.ticks, s.rows, s.info, "
                        "(SELECT count(*) FROM samples x WHERE x.run_id = r.id) + (SELECT count(*) FROM annotations a "
                        "WHERE a.run_id = r.id AND a.kind = 'device_lost') AS stored FROM runs r "
                        "LEFT JOIN sampler_stats s ON s.run_id = r.id ORDER BY r.id"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    rows = json.loads(q.stdout)
    recorded = [r for r in rows if r["source"] in ("monitor", "run")]
    flush_max = {}
    for r in recorded:
        info = json.loads(r["info"]) if isinstance(r["info"], str) else (r["info"] or {})
        if info.get("flush_wall_ns_max") is not None:
            flush_max[f"{r['source']} {r['id']}"] = info["flush_wall_ns_max"] / 1e6
    # how long after an ingest's run was in the store the TUI's count reached it
    staleness = []
    for t_seen, n in landed:
        shown = next((t for t, c in tui["counts"] if c >= n and t >= t_seen - 2.5), None)
        if shown is not None:
            staleness.append(max(0.0, shown - t_seen))
    doc = {
        "seconds": args.seconds,
        "writers": {"monitor_exit": monitor.returncode, "runs_started": n_runs,
                    "runs_failed": sum(r.returncode != 0 for r, _, _ in finished_runs),
                    "ingests": len(ingest_s), "failures": failures[:5], "failure_count": len(failures)},
        "runs_not_complete": [r["id"] for r in rows if r["status"] != "complete"],
        "samples_made_vs_stored": {"made": sum(r["rows"] or 0 for r in recorded),
                                   "stored": sum(r["stored"] or 0 for r in recorded),
                                   "runs_short": [r["id"] for r in recorded if r["stored"] != r["rows"]]},
        "telemetry_flush_ms_max": {"max": round(max(flush_max.values()), 1) if flush_max else None,
                                   "median_of_writers": round(statistics.median(flush_max.values()), 1) if flush_max else None},
        "ingest_s": _q(ingest_s),
        "reader_s": _q(read_s),
        "tui": {"frames": tui["frames"], "distinct_counts": len(tui["counts"]), "busy_frames": tui["busy"],
                "traceback_frames": tui["tracebacks"], "staleness_s": _q(staleness)} if tmux is not None
        else "skipped: tmux is not installed",
    }
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
