#!/usr/bin/env python3
"""`kill -9` of `gpuscope run`, or of the program it runs, at random points.

    python bench/fault_kill_run.py [--points 10] [--target run|child|both] [--seed 1] [--json]

Each point: `gpuscope run --replay RECORDING --hz 10 -- python -c "sleep 8"` on a store that
already holds the previous points' runs, and after a random delay (0.3 s to 7.5 s) SIGKILL to

- ``run``: gpuscope itself, the delay counted from its start (the program lives on in its own
  process group and is killed next). The store must open (`gpuscope runs --json` exits 0), the run must read
  ``incomplete``, and the samples lost are counted: the time from the last stored sample to
  the kill (the sink writes once a second, and the sampler hands rows over every 0.5 s, so
  about 1.5 s at most is expected to be lost); killed before it made the run, the store must
  simply hold no new run;
- ``child``: the program, the delay counted from the program's start. gpuscope must exit 137 (128 + SIGKILL, as a shell reports it), the
  run must be ``complete`` with that exit code stored, and sampled to its end.

Prints each point and a summary. Exit code 0 when every point held, 1 otherwise, 2 on
unusable arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
REC = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"
CHILD_S = 8.0


def _runs(db: Path) -> list[dict[str, Any]] | None:
    p = subprocess.run([PY, "-m", "gpuscope", "runs", "--db", str(db), "--json"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    return json.loads(p.stdout) if p.returncode == 0 else None


def _last_sample_ns(db: Path, run_id: int) -> int | None:
    p = subprocess.run([PY, "-m", "gpuscope", "sql", "--db", str(db), "--json",
                        f"SELECT max(ts_ns) AS t FROM samples WHERE run_id = {int(run_id)}"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    return json.loads(p.stdout)[0]["t"] if p.returncode == 0 else None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def one_point(db: Path, target: str, delay_s: float) -> dict[str, Any]:
    before = {r["id"] for r in _runs(db) or []}
    t0 = time.time_ns()
    proc = subprocess.Popen([PY, "-m", "gpuscope", "run", "--db", str(db), "--replay", str(REC), "--hz", "10",
                             "--no-profile", "--no-analyze", "-q", "--", PY, "-c", f"import time; time.sleep({CHILD_S})"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    out: dict[str, Any] = {"target": target, "delay_s": round(delay_s, 2), "problems": []}
    if target == "child":
        # the program's own random point: the delay counts from when it exists
        end = time.monotonic() + 60
        while not _children(proc.pid) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.01)
    time.sleep(delay_s)
    child = next(iter(_children(proc.pid)), None)
    if target == "run":
        kill_ns = time.time_ns()
        proc.kill()
        proc.wait(60)
        for pid in [child] if child else []:
            try:
                os.killpg(pid, signal.SIGKILL)  # the program, in its own process group
            except OSError:
                pass
    else:
        if child is None:
            out["problems"].append("no child found to kill (the program had not started)")
            proc.wait(120)
            kill_ns = time.time_ns()
        else:
            kill_ns = time.time_ns()
            os.kill(child, signal.SIGKILL)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                out["problems"].append("gpuscope run did not return within 120 s of the program's death")
                proc.kill()
                proc.wait(60)
        out["exit"] = proc.returncode
        if proc.returncode != 137:
            out["problems"].append(f"gpuscope run exited {proc.returncode}, not 137; stderr: "
                                   f"{(proc.stderr.read() if proc.stderr else '').strip()[-300:]}")
    runs = _runs(db)
    if runs is None:
        out["problems"].append("the store did not open")
        return out
    new = [r for r in runs if r["id"] not in before]
    if not new and target == "run":
        out["status"] = "no run yet"  # killed before it made one: nothing half-made is fine
        return out
    if len(new) != 1:
        out["problems"].append(f"{len(new)} new runs, not 1")
        return out
    run = new[0]
    out["status"] = run["status"]
    last = _last_sample_ns(db, run["id"])
    if target == "run":
        if run["status"] != "incomplete":
            out["problems"].append(f"status {run['status']}, not incomplete")
        # rows sampled after the kill cannot exist; what was sampled before it and not stored is lost
        # no sample stored yet: everything since the sampler started (the run's start) is lost
        since = last if last is not None else run.get("started_ns") or t0
        out["lost_s"] = round((kill_ns - since) / 1e9, 2)
    else:
        if run["status"] != "complete" or run.get("exit_code") not in (137, -9):
            out["problems"].append(f"status {run['status']}, exit code {run.get('exit_code')}")
        out["exit_code_stored"] = run.get("exit_code")
        out["gap_to_end_s"] = round((run["ended_ns"] - last) / 1e9, 2) if last is not None and run.get("ended_ns") else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10)
    ap.add_argument("--target", choices=("run", "child", "both"), default="both")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.points < 1:
        print("fault_kill_run: --points must be at least 1", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    targets = ["run", "child"] if args.target == "both" else [args.target]
    db = Path(tempfile.mkdtemp(prefix="gpuscope-killrun-")) / "s.duckdb"
    results = []
    for target in targets:
        for _ in range(args.points):
            r = one_point(db, target, rng.uniform(0.3, CHILD_S - 0.5))
            results.append(r)
            if not args.json:
                extra = f"lost {r.get('lost_s')} s" if target == "run" else \
                    f"exit {r.get('exit')}, stored {r.get('exit_code_stored')}, last sample {r.get('gap_to_end_s')} s before the end"
                print(f"kill -9 {target:<5} at {r['delay_s']:5.2f} s: {r.get('status')}, {extra}"
                      + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""), flush=True)
    lost = [r["lost_s"] for r in results if r.get("lost_s") is not None]
    summary = {"points": len(results), "failed": sum(bool(r["problems"]) for r in results),
               "lost_s_after_kill_of_run": {"median": statistics.median(lost), "max": max(lost)} if lost else None,
               "results": results}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{summary['points']} kills, {summary['failed']} with problems; samples lost when gpuscope was killed: "
              f"{summary['lost_s_after_kill_of_run']}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
