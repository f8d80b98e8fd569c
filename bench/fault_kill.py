#!/usr/bin/env python3
"""`kill -9` of `gpuscope ingest` at random points of a large ingest.

    python bench/fault_kill.py [TRACE] [--points 20] [--seed 1] [--json]

The store first holds one run. Then, ``--points`` times: `gpuscope ingest TRACE` starts on it
and gets SIGKILL after a random delay within the time a whole ingest takes (measured first);
after each kill the store must open (`gpuscope runs --json` exits 0), hold no half-written run
(every run it lists is complete, and there is one more only when the kill came after the
commit), and take the next ingest (a small trace, exit 0). Prints each kill's delay and what
the store held, and a summary. With no TRACE, the 1.2M-event trace of bench_scale.py (made
once) or else the shared A100 trace.

Exit code: 0 when the store survived every kill, 1 otherwise, 2 on unusable arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
DEFAULT = [Path.home() / ".cache" / "gpuscope-bench" / "scale" / "a100x11.json.gz",
           REPO.parent / "shared" / "data" / "traces" / "hta" / "a100_sxm4_80gb_training_large.json.gz"]


def _gs(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _runs(db: Path) -> tuple[int, list[dict[str, Any]], str]:
    p = _gs("runs", "--db", str(db), "--json")
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else []), p.stderr.strip()


def _small_trace(path: Path) -> Path:
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {"device": 0}}]}))
    return path


def kill_points(trace: Path, points: int, seed: int, work: Path, log: Any = None) -> dict[str, Any]:
    """Kill ``points`` ingests of ``trace`` at random delays; what each left in the store."""
    rng = random.Random(seed)
    db = work / "store.duckdb"
    small = _small_trace(work / "small.json")
    first = _gs("ingest", str(small), "--db", str(db), "-q")
    if first.returncode != 0:
        raise SystemExit(f"fault_kill: the first ingest failed: {first.stderr.strip()}")
    t0 = time.monotonic()
    whole = _gs("ingest", str(trace), "--db", str(work / "timing.duckdb"), "-q")
    whole_s = time.monotonic() - t0
    if whole.returncode != 0:
        raise SystemExit(f"fault_kill: {trace}: ingest failed: {whole.stderr.strip()}")
    kills = []
    for i in range(points):
        delay = rng.uniform(0.05, whole_s * 1.05)
        rc0, before, _ = _runs(db)
        proc = subprocess.Popen([PY, "-m", "gpuscope", "ingest", str(trace), "--db", str(db), "-q"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        rc, after, err = _runs(db)
        problems = []
        if rc != 0:
            problems.append(f"the store does not open: {err}")
        added = len(after) - len(before)
        if any(r.get("status") != "complete" for r in after):
            problems.append("a run that is not complete is listed")
        if added not in (0, 1):  # (1: the kill came after the commit)
            problems.append(f"{added} runs added")
        nxt = _gs("ingest", str(small), "--db", str(db), "-q")
        if nxt.returncode != 0:
            problems.append(f"the next ingest failed: {nxt.stderr.strip()}")
        leftovers = sorted(p.name for p in work.iterdir() if p.name.startswith("store.duckdb") and p.name != "store.duckdb")
        kills.append({"delay_s": delay, "killed": not finished, "runs_added": added, "problems": problems,
                      "files_beside_store": leftovers})
        if log:
            print(f"fault_kill: kill {i + 1}/{points} at {delay:.2f} s ({'killed' if not finished else 'had finished'}): "
                  f"runs +{added}, {'ok' if not problems else '; '.join(problems)}", file=log, flush=True)
    return {"trace": str(trace), "whole_ingest_s": whole_s, "points": points, "seed": seed, "kills": kills,
            "bad": sum(1 for k in kills if k["problems"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    trace = a.trace or next((p for p in DEFAULT if p.exists()), None)
    if trace is None or not trace.exists() or a.points < 1:
        print(f"fault_kill: {a.trace or 'no trace'}: missing (or --points below 1)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuscope-kill-") as tmp:
        res = kill_points(trace, a.points, a.seed, Path(tmp), log=sys.stderr)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        killed = sum(k["killed"] for k in res["kills"])
        print(f"{trace.name}: a whole ingest takes {res['whole_ingest_s']:.2f} s; {res['points']} kills "
              f"({killed} during the ingest, {res['points'] - killed} after it ended): "
              f"{res['bad']} left the store unusable or with a half-written run")
    return 1 if res["bad"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
