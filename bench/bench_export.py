#!/usr/bin/env python3
"""`gpuscope export` and `gpuscope report` of a 1.2M-event run (issue 18): time and peak memory
of the Perfetto timeline, the Parquet tables and the HTML report, next to ingesting the same run
(and analyzing it, for context), each a fresh process.

    python bench/bench_export.py            # inputs built once into ~/.cache/gpuscope-bench/tui
    python bench/bench_export.py --json

The run is the shared A100 training trace scaled to 11 copies (bench/scale_trace.py, 1,198,296
events), ingested once by bench/bench_tui.py. Each measurement is a child process timed by
wall clock, its peak RSS from wait4's rusage. When Holistic Trace Analysis is installed
(``pip install holistictraceanalysis "pandas<3"``), the exported timeline is also handed to
HTA's TraceAnalysis, and whether it parses is printed (HTA is the peer that reads Kineto
traces; it does not export).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
PY = sys.executable


def _child(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    # output to files, not pipes: a child whose output fills a pipe would wait for us forever
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(args, cwd=REPO, stdout=fo, stderr=fe, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(), fe.read().decode()
    code = os.waitstatus_to_exitcode(status)
    return {"seconds": round(wall, 3), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "exit_code": code,
            "stderr_tail": err[-400:] if code else "", "stdout": out}


def hta_parses(trace: Path) -> dict[str, Any]:
    code = ("import sys, logging; logging.disable(logging.CRITICAL)\n"
            "from hta.trace_analysis import TraceAnalysis\n"
            "a = TraceAnalysis(trace_dir=sys.argv[1])\n"
            "t = a.t.get_trace(next(iter(a.t.traces)))\n"
            "print(len(t))\n")
    r = _child([PY, "-c", code, str(trace.parent)])
    return {"parsed": r["exit_code"] == 0, "events": int(r["stdout"].strip() or 0) if r["exit_code"] == 0 else None,
            "seconds": r["seconds"], "error": r["stderr_tail"] or None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "gpuscope-bench" / "tui")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from bench_tui import BIG_COPIES, store_of_big_run

    args.cache.mkdir(parents=True, exist_ok=True)
    db = store_of_big_run(args.cache)
    if db is None:
        print("bench_export: skipped: the shared A100 trace is not here (../shared/data/traces)")
        return 0
    trace = args.cache / f"a100_large_x{BIG_COPIES}.json.gz"
    gs = [PY, "-m", "gpuscope"]
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        res["ingest"] = _child(gs + ["ingest", "--db", str(t / "i.duckdb"), "-q", str(trace)])
        (t / "hta").mkdir()
        out = t / "hta" / "rank0.json.gz"
        res["export_perfetto"] = _child(gs + ["export", "--db", str(db), "--format", "perfetto", "--out", str(out), "--json"])
        res["export_perfetto"]["file_mib"] = round(out.stat().st_size / 2**20, 1) if out.exists() else None
        res["export_parquet"] = _child(gs + ["export", "--db", str(db), "--format", "parquet", "--out", str(t / "pq")])
        res["report"] = _child(gs + ["report", "--db", str(db), "--out", str(t / "r.html")])
        res["analyze"] = _child(gs + ["analyze", "--db", str(db), "--json"])
        try:
            import importlib.util

            have_hta = importlib.util.find_spec("hta") is not None
        except ImportError:
            have_hta = False
        res["hta"] = hta_parses(out) if have_hta and out.exists() else {"parsed": None, "error": "HTA not installed"}
    for k in ("export_perfetto", "export_parquet", "report", "analyze"):
        res[k]["time_vs_ingest"] = round(res[k]["seconds"] / res["ingest"]["seconds"], 3)
        res[k]["memory_vs_ingest"] = round(res[k]["peak_rss_mib"] / res["ingest"]["peak_rss_mib"], 3)
        res[k].pop("stdout", None)
    res["ingest"].pop("stdout", None)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    i = res["ingest"]
    print(f"1.2M-event run (a100 x{BIG_COPIES}): ingest {i['seconds']:.2f} s, peak {i['peak_rss_mib']} MiB")
    for k, label in (("export_perfetto", "export --format perfetto"), ("export_parquet", "export --format parquet"),
                     ("report", "report"), ("analyze", "analyze --json (for context)")):
        r = res[k]
        extra = f", {r['file_mib']} MiB file" if r.get("file_mib") else ""
        print(f"  {label:<26} {r['seconds']:.2f} s ({r['time_vs_ingest']:.2f}x ingest), peak {r['peak_rss_mib']} MiB "
              f"({r['memory_vs_ingest']:.2f}x ingest){extra}; exit {r['exit_code']}")
    h = res["hta"]
    print(f"  HTA parses the timeline: {h['parsed']}" + (f" ({h['events']:,} events, {h['seconds']:.1f} s)" if h.get("events")
                                                        else f" ({h['error']})" if h.get("error") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
