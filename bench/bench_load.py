#!/usr/bin/env python3
"""Load: 8 replayed GPUs sampled at 100 Hz for 10 minutes into one run of a store.

    python bench/bench_load.py [--seconds 600] [--interval 0.01] [--recording FILE] [--json]

Runs `gpuscope monitor --db STORE --replay RECORDING --interval S --seconds N` (8 GPUs from
bench_tui.py's recording, made once) as a child process, reads its resident memory from
/proc every 10 s, and when it ends reads the run's `sampler_stats` and counts what the store
holds. Reports: ticks made and missed, samples made and stored (a lost device's as its
annotation: none may be missing), the sampler's lateness (p50 / p99 / max) and CPU per tick,
and memory over time (first and last minute, the largest).

Exit code 0 when no sample was lost, 1 otherwise, 2 on unusable arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
DEFAULT_REC = Path.home() / ".cache" / "gpuscope-bench" / "tui" / "eight_gpus.jsonl"


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_load(recording: Path, seconds: float, interval: float, work: Path, log: Any = None) -> dict[str, Any]:
    db = work / "load.duckdb"
    proc = subprocess.Popen([PY, "-m", "gpuscope", "monitor", "--db", str(db), "--replay", str(recording),
                             "--interval", str(interval), "--seconds", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    t0 = time.monotonic()
    rss: list[tuple[float, int]] = []
    while proc.poll() is None:
        r = _rss_kib(proc.pid)
        if r is not None:
            rss.append((time.monotonic() - t0, r))
        if log and len(rss) % 6 == 0:
            print(f"bench_load: {time.monotonic() - t0:.0f} s, RSS {r} KiB", file=log, flush=True)
        for _ in range(100):
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"bench_load: monitor failed (exit {proc.returncode}): {err.strip()[-500:]}")
    q = subprocess.run([PY, "-m", "gpuscope", "sql", "--db", str(db), "--json",
                        "SELECT s.*, (SELECT count(*) FROM samples x WHERE x.run_id = s.run_id) AS stored, "
                        "(SELECT count(*) FROM annotations a WHERE a.run_id = s.run_id AND a.kind = 'device_lost') "
                        "AS lost_marks FROM sampler_stats s"], capture_output=True, text=True, cwd=REPO)
    (st,) = json.loads(q.stdout)
    first = [k for t, k in rss if t <= 60]
    last = [k for t, k in rss if t >= rss[-1][0] - 60] if rss else []
    return {
        "seconds": seconds, "interval_s": interval, "devices": st["devices"], "ticks": st["ticks"],
        "missed_ticks": st["missed_ticks"], "rows": st["rows"], "stored": st["stored"] + st["lost_marks"],
        "lost_rows": st["rows"] - st["stored"] - st["lost_marks"],
        "lateness_ms": {k: (st[f"lateness_ns_{k}"] or 0) / 1e6 for k in ("p50", "p99", "max")},
        "tick_cpu_ms": {k: (st[f"tick_cpu_ns_{k}"] or 0) / 1e6 for k in ("mean", "p99", "max")},
        "cpu_share_of_a_core": (st["tick_cpu_ns_mean"] or 0) / (interval * 1e9),
        "rss_mib": {"first_minute_max": max(first) / 1024 if first else None,
                    "last_minute_max": max(last) / 1024 if last else None,
                    "max": max(k for _, k in rss) / 1024 if rss else None},
        "store_bytes": db.stat().st_size, "sink": json.loads(st["info"] or "{}"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--recording", type=Path, default=DEFAULT_REC)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not a.recording.exists():
        print(f"bench_load: {a.recording}: missing (python bench/bench_tui.py makes it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuscope-load-") as tmp:
        res = run_load(a.recording, a.seconds, a.interval, Path(tmp), log=sys.stderr)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print(f"{res['devices']} devices at {1 / res['interval_s']:.0f} Hz for {res['seconds']:.0f} s: {res['ticks']:,} ticks "
              f"({res['missed_ticks']} missed), {res['rows']:,} samples made, {res['stored']:,} stored "
              f"({res['lost_rows']} lost)")
        print(f"  lateness p50 / p99 / max: {res['lateness_ms']['p50']:.2f} / {res['lateness_ms']['p99']:.2f} / "
              f"{res['lateness_ms']['max']:.1f} ms; CPU per tick {res['tick_cpu_ms']['mean']:.3f} ms "
              f"({res['cpu_share_of_a_core']:.1%} of a core)")
        r = res["rss_mib"]
        print(f"  RSS: first minute {r['first_minute_max']:.1f} MiB, last minute {r['last_minute_max']:.1f} MiB, "
              f"max {r['max']:.1f} MiB; store {res['store_bytes'] / 1e6:.1f} MB")
    return 1 if res["lost_rows"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
