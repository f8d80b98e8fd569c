#!/usr/bin/env python3
"""Ingest benchmark: gpuscope against Holistic Trace Analysis on the same trace.

    python bench/bench_ingest.py [TRACE ...] [--repeat N] [--json] [--check]

For each trace, in whole processes and alternating between the tools on every repeat:

  gpuscope, two-step   `python -m gpuscope ingest TRACE --db STORE --json -q`, then
                       `python -m gpuscope analyze --db STORE --json` (a fresh store each repeat);
                       wall = the sum of the two processes, peak RSS = the larger of the two
  gpuscope, one-step   `python -m gpuscope analyze TRACE --db STORE2 --json` (ingest + analyze)
  HTA                  `python bench/_hta_child.py DIR`: TraceAnalysis(trace_dir=DIR) (parse),
                       get_gpu_kernel_breakdown(), get_temporal_breakdown(); DIR holds a
                       symlink to the one trace
  floor                `python -c "from gpuscope._db import duckdb; duckdb.connect()"`: what any
                       gpuscope process that opens a store pays before it does any work
                       (context for the ratios, not a goal)
  bound                `python bench/_bound_child.py TRACE`: the floor, plus the trace streamed
                       once (gunzip) and its events parsed by DuckDB into the nine fields that
                       even the bare breakdown needs; nothing linked, stored or analyzed. No
                       DuckDB-based ingest can be faster: HTA / bound is the most a one-step
                       form could reach on this machine, HTA / (bound + floor) the most a
                       two-step form could (context, not a goal)

Wall time is measured around each child from spawn to exit, peak RSS is that child's
ru_maxrss as reported by os.wait4() (the kernel includes descendants it reaped). The medians
over the repeats are reported, with the ratios and the issue's goals:

  HTA wall / gpuscope wall        >= 10
  gpuscope peak RSS / HTA's       <= 1/3
  store bytes / .json.gz bytes    <= 1/3

Exit codes: 0 done (goals met or not, unless --check), 1 a child failed or --check and a goal
was missed, 2 unusable arguments (a missing trace, HTA or gpuscope not installed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared/data/traces/hta/a100_sxm4_80gb_training_large.json.gz"
HTA_CHILD = Path(__file__).resolve().with_name("_hta_child.py")
BOUND_CHILD = Path(__file__).resolve().with_name("_bound_child.py")

GOAL_SPEEDUP = 10.0  # HTA wall / gpuscope wall, at least
GOAL_RSS = 1 / 3  # gpuscope peak RSS / HTA peak RSS, at most
GOAL_STORE = 1 / 3  # store bytes / .json.gz bytes, at most

HTA_INSTALL = 'pip install -e ".[bench]"  (or: pip install holistictraceanalysis "pandas<3")'


@dataclass
class Proc:
    """One finished child process."""

    argv: list[str]
    wall_s: float
    maxrss_bytes: int
    rc: int
    stdout: str
    stderr: str


def _maxrss_bytes(ru_maxrss: int) -> int:
    # Linux reports KiB, macOS (and the other BSDs' descendants Python runs on) bytes.
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def run_child(argv: list[str], cwd: Path | None = None, cpus: set[int] | None = None) -> Proc:
    """Run argv to completion; wall time from spawn to reap, peak RSS via wait4. With ``cpus``
    the child runs on those cores only (``sched_setaffinity``)."""
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd, preexec_fn=preexec)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        p.returncode = rc  # reaped here; keeps Popen from waiting on a pid that is gone
        out.seek(0)
        err.seek(0)
        return Proc(
            argv=argv,
            wall_s=wall,
            maxrss_bytes=_maxrss_bytes(ru.ru_maxrss),
            rc=rc,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
        )


class ChildFailed(Exception):
    pass


def _check(proc: Proc, what: str) -> Proc:
    if proc.rc != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ChildFailed(
            f"{what} failed (exit {proc.rc}): {' '.join(proc.argv)}\n{tail}".rstrip()
        )
    return proc


def _store_bytes(db: Path) -> int:
    total = 0
    for p in (db, db.with_name(db.name + ".wal")):
        if p.exists():
            total += p.stat().st_size
    return total


def run_gpuscope(trace: Path, work: Path) -> dict[str, Any]:
    py = sys.executable
    db = work / "store.duckdb"
    db2 = work / "store2.duckdb"
    ingest = _check(
        run_child([py, "-m", "gpuscope", "ingest", str(trace), "--db", str(db), "--json", "-q"]),
        "gpuscope ingest",
    )
    store_after_ingest = _store_bytes(db)
    analyze = _check(
        run_child([py, "-m", "gpuscope", "analyze", "--db", str(db), "--json"]),
        "gpuscope analyze",
    )
    store_after_analyze = _store_bytes(db)
    one = _check(
        run_child([py, "-m", "gpuscope", "analyze", str(trace), "--db", str(db2), "--json"]),
        "gpuscope analyze TRACE",
    )
    # What any gpuscope process that opens a store pays before doing work: interpreter
    # start-up, the DuckDB module and opening a database. The two-step form pays it twice.
    floor = _check(run_child([py, "-c", FLOOR_CODE]), "the floor process")
    bound = _check(run_child([py, str(BOUND_CHILD), str(trace)]), "the bound process")
    ingest_doc = json.loads(ingest.stdout)
    analysis = json.loads(analyze.stdout)
    analysis_one = json.loads(one.stdout)
    return {
        "ingest": {"wall_s": ingest.wall_s, "maxrss_bytes": ingest.maxrss_bytes},
        "analyze": {"wall_s": analyze.wall_s, "maxrss_bytes": analyze.maxrss_bytes},
        "two_step": {
            "wall_s": ingest.wall_s + analyze.wall_s,
            "maxrss_bytes": max(ingest.maxrss_bytes, analyze.maxrss_bytes),
        },
        "one_step": {"wall_s": one.wall_s, "maxrss_bytes": one.maxrss_bytes},
        "floor": {"wall_s": floor.wall_s, "maxrss_bytes": floor.maxrss_bytes},
        "bound": {"wall_s": bound.wall_s, "maxrss_bytes": bound.maxrss_bytes,
                  "phases_s": json.loads(bound.stdout)},
        "bound_two_step": {"wall_s": bound.wall_s + floor.wall_s,
                           "maxrss_bytes": max(bound.maxrss_bytes, floor.maxrss_bytes)},
        "store_bytes": store_after_ingest,
        "store_bytes_after_analyze": store_after_analyze,
        "store2_bytes": _store_bytes(db2),
        "events": ingest_doc.get("events"),
        "loaded": ingest_doc.get("loaded"),
        "time_us": analysis.get("time_us"),
        "time_us_one_step": analysis_one.get("time_us"),
        "per_device": analysis.get("per_device"),
    }


class PeerMissing(Exception):
    pass


def run_hta(trace: Path, work: Path) -> dict[str, Any]:
    d = work / "hta_trace_dir"
    d.mkdir()
    link = d / trace.name
    try:
        link.symlink_to(trace.resolve())
    except OSError:  # no symlinks here (some filesystems, Windows): copy
        link.write_bytes(trace.read_bytes())
    proc = run_child([sys.executable, str(HTA_CHILD), str(d)])
    if proc.rc == 3:
        raise PeerMissing(proc.stderr.strip())
    _check(proc, "HTA")
    doc = json.loads(proc.stdout)
    return {"wall_s": proc.wall_s, "maxrss_bytes": proc.maxrss_bytes, **doc}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def bench_trace(trace: Path, repeat: int, progress: bool) -> dict[str, Any]:
    gs_runs: list[dict[str, Any]] = []
    hta_runs: list[dict[str, Any]] = []
    for i in range(repeat):
        order = ("gpuscope", "hta") if i % 2 == 0 else ("hta", "gpuscope")
        for tool in order:
            with tempfile.TemporaryDirectory(prefix="gpuscope-bench-") as tmp:
                if tool == "gpuscope":
                    r = run_gpuscope(trace, Path(tmp))
                    gs_runs.append(r)
                    msg = f"gpuscope {r['two_step']['wall_s']:.2f} s (two-step), {r['one_step']['wall_s']:.2f} s (one-step)"
                else:
                    r = run_hta(trace, Path(tmp))
                    hta_runs.append(r)
                    msg = f"HTA {r['wall_s']:.2f} s"
            if progress:
                print(f"  [{trace.name}] repeat {i + 1}/{repeat}: {msg}", file=sys.stderr, flush=True)

    def med(runs: list[dict[str, Any]], *keys: str) -> float:
        vals = []
        for r in runs:
            v: Any = r
            for k in keys:
                v = v[k]
            vals.append(v)
        return _median(vals)

    median = {
        name: {"wall_s": med(gs_runs, name, "wall_s"), "maxrss_bytes": med(gs_runs, name, "maxrss_bytes")}
        for name in ("ingest", "analyze", "two_step", "one_step", "floor", "bound", "bound_two_step")
    }
    median["hta"] = {"wall_s": med(hta_runs, "wall_s"), "maxrss_bytes": med(hta_runs, "maxrss_bytes")}

    gz_bytes = trace.stat().st_size
    store_bytes = int(med(gs_runs, "store_bytes"))
    hta = median["hta"]
    ratios = {
        form: {
            "speedup": hta["wall_s"] / median[form]["wall_s"],
            "rss": median[form]["maxrss_bytes"] / hta["maxrss_bytes"],
        }
        for form in ("two_step", "one_step")
    }
    ratios["store_vs_gz"] = store_bytes / gz_bytes
    # The most any DuckDB-based form could reach here (see BOUND_CHILD): context, not goals.
    ratios["bound"] = {
        "two_step_speedup_max": hta["wall_s"] / median["bound_two_step"]["wall_s"],
        "one_step_speedup_max": hta["wall_s"] / median["bound"]["wall_s"],
        "rss_min": median["bound"]["maxrss_bytes"] / hta["maxrss_bytes"],
    }
    goals = {
        form: {
            "speedup": ratios[form]["speedup"] >= GOAL_SPEEDUP,
            "rss": ratios[form]["rss"] <= GOAL_RSS,
        }
        for form in ("two_step", "one_step")
    }
    goals["store"] = ratios["store_vs_gz"] <= GOAL_STORE

    last_gs, last_hta = gs_runs[-1], hta_runs[-1]
    return {
        "trace": str(trace),
        "gz_bytes": gz_bytes,
        "events": last_gs["events"],
        "loaded": last_gs["loaded"],
        "store_bytes": store_bytes,
        "store_bytes_after_analyze": int(med(gs_runs, "store_bytes_after_analyze")),
        "median": median,
        "ratios": ratios,
        "goals": goals,
        "breakdown": {
            "gpuscope_time_us": last_gs["time_us"],
            "gpuscope_time_us_one_step": last_gs["time_us_one_step"],
            "gpuscope_per_device": last_gs["per_device"],
            "hta_temporal": last_hta["temporal"],
            "hta_kernel_type_us": last_hta["kernel_type_us"],
        },
        "runs": {"gpuscope": gs_runs, "hta": [{k: r[k] for k in ("wall_s", "maxrss_bytes")} for r in hta_runs]},
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "gpuscope": _version("gpuscope"),
        "duckdb": _version("duckdb"),
        "holistictraceanalysis": _version("holistictraceanalysis"),
        "pandas": _version("pandas"),
    }


# ---------------------------------------------------------------- text report


def _mib(b: float) -> str:
    return f"{b / 2**20:8.1f}"


def _pf(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _us(x: Any) -> str:
    return "-" if x is None else f"{float(x):,.0f}"


def text_report(res: dict[str, Any], repeat: int) -> str:
    m = res["median"]
    r = res["ratios"]
    g = res["goals"]
    lines = [
        f"trace  {res['trace']}",
        f"       {res['gz_bytes']:,} bytes gzipped, {res['events']:,} events; median of {repeat} "
        f"repeat{'s' if repeat != 1 else ''}, whole processes, alternating",
        "",
        f"  {'':34}{'wall s':>8}  {'peak RSS MiB':>12}",
    ]
    rows = [
        ("gpuscope ingest", m["ingest"]),
        ("gpuscope analyze", m["analyze"]),
        ("gpuscope two-step (sum / max)", m["two_step"]),
        ("gpuscope analyze TRACE (one-step)", m["one_step"]),
        ("HTA parse + kernel + temporal", m["hta"]),
        ("(floor: start, DuckDB, connect)", m["floor"]),
        ("(bound: floor, gunzip, parse)", m["bound"]),
        ("(bound + floor: two-step bound)", m["bound_two_step"]),
    ]
    for name, v in rows:
        lines.append(f"  {name:34}{v['wall_s']:8.2f}  {_mib(v['maxrss_bytes']):>12}")
    lines += [
        "",
        f"  {'':34}{'two-step':>9}  {'one-step':>9}   goal",
        f"  {'HTA wall / gpuscope wall':34}{r['two_step']['speedup']:8.2f}x  {r['one_step']['speedup']:8.2f}x"
        f"   >= {GOAL_SPEEDUP:.0f}x    {_pf(g['two_step']['speedup'])} / {_pf(g['one_step']['speedup'])}",
        f"  {'gpuscope peak RSS / HTA peak RSS':34}{r['two_step']['rss']:9.2f}  {r['one_step']['rss']:9.2f}"
        f"   <= 0.33    {_pf(g['two_step']['rss'])} / {_pf(g['one_step']['rss'])}",
        f"  {'store / .json.gz':34}{r['store_vs_gz']:9.2f}  {'':9}   <= 0.33    {_pf(g['store'])}"
        f"   ({res['store_bytes']:,} vs {res['gz_bytes']:,} bytes)",
        "",
        "  the most any DuckDB-based ingest could reach here (the bound process does nothing but start,",
        "  gunzip and parse; no linking, store or analysis):",
        f"  {'HTA wall / bound wall':34}{r['bound']['two_step_speedup_max']:8.2f}x  "
        f"{r['bound']['one_step_speedup_max']:8.2f}x",
        f"  {'bound peak RSS / HTA peak RSS':34}{r['bound']['rss_min']:9.2f}  {r['bound']['rss_min']:9.2f}",
    ]
    b = res["breakdown"]
    t = b["gpuscope_time_us"] or {}
    span = sum(d.get("span_us") or 0 for d in (b["gpuscope_per_device"] or []))
    busy = sum(d.get("busy_us") or 0 for d in (b["gpuscope_per_device"] or []))
    hts = b["hta_temporal"] or []

    def hsum(key: str) -> float | None:
        vals = [rec.get(key) for rec in hts if rec.get(key) is not None]
        return sum(vals) if vals else None

    kt = b["hta_kernel_type_us"] or {}
    lines += [
        "",
        "  same trace, both tools (µs, summed over devices / ranks):",
        f"    gpuscope time_us   compute {_us(t.get('compute'))}  communication {_us(t.get('communication'))}"
        f"  memory {_us(t.get('memory'))}  idle {_us(t.get('idle'))}  (busy {_us(busy)}, span {_us(span)})",
        f"    HTA temporal       compute {_us(hsum('compute_time(us)'))}  non-compute {_us(hsum('non_compute_time(us)'))}"
        f"  idle {_us(hsum('idle_time(us)'))}  (kernel_time {_us(hsum('kernel_time(us)'))}, {len(hts)} rank(s))",
        "    HTA kernel types   " + "  ".join(f"{k} {_us(v)}" for k, v in kt.items()),
    ]
    if (b["gpuscope_time_us_one_step"] or {}) != t:
        lines.append(f"    NOTE: one-step analyze gave different time_us: {b['gpuscope_time_us_one_step']}")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


#: What every gpuscope process that opens a store pays first: the interpreter, the DuckDB
#: module gpuscope imports, and opening a database.
FLOOR_CODE = "from gpuscope._db import duckdb; duckdb.connect(':memory:').close()"


def compile_gpuscope() -> list[str]:
    """Write the bytecode of gpuscope's packages, as installing a wheel does (pip compiles
    ``.py`` files at install time; an editable install does not, and with
    ``PYTHONDONTWRITEBYTECODE`` set every process would then compile gpuscope from source while
    HTA and pandas, installed from wheels, load theirs). Returns the directories compiled."""
    import compileall

    done = []
    for name in ("gpuscope", "gpuscope.analyzers", "gpuscope.collectors", "gpuscope.tui"):
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            continue
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if compileall.compile_dir(loc, quiet=2, maxlevels=0):
                done.append(loc)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="gpuscope ingest + analyze against Holistic Trace Analysis, whole processes.",
    )
    ap.add_argument("traces", nargs="*", metavar="TRACE", type=Path,
                    help=f"Kineto trace (.json / .json.gz); default: {DEFAULT_TRACE}")
    ap.add_argument("--repeat", type=int, default=3, help="repeats per tool; the median is reported (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed (two-step form)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not write gpuscope's bytecode first (by default it is, as a wheel install does)")
    args = ap.parse_args(argv)

    if args.repeat < 1:
        print("bench_ingest: --repeat must be at least 1", file=sys.stderr)
        return 2
    traces = args.traces or [DEFAULT_TRACE]
    for t in traces:
        if not t.is_file():
            print(f"bench_ingest: trace not found: {t}", file=sys.stderr)
            return 2
    if importlib.util.find_spec("gpuscope") is None:
        print('bench_ingest: gpuscope is not importable; run: pip install -e ".[bench]"', file=sys.stderr)
        return 2
    if importlib.util.find_spec("hta") is None:
        print(f"bench_ingest: the peer, Holistic Trace Analysis, is not installed; run: {HTA_INSTALL}",
              file=sys.stderr)
        return 2

    compiled = [] if args.no_compile else compile_gpuscope()
    results = []
    try:
        for t in traces:
            results.append(bench_trace(t.resolve(), args.repeat, progress=not args.quiet))
    except PeerMissing as exc:
        print(f"bench_ingest: Holistic Trace Analysis does not import ({exc}); run: {HTA_INSTALL}",
              file=sys.stderr)
        return 2
    except ChildFailed as exc:
        print(f"bench_ingest: {exc}", file=sys.stderr)
        return 1

    missed = any(
        not (r["goals"]["two_step"]["speedup"] and r["goals"]["two_step"]["rss"] and r["goals"]["store"])
        for r in results
    )
    if args.json:
        doc = {
            "schema": "gpuscope.bench.ingest/1",
            "machine": machine(),
            "repeat": args.repeat,
            "bytecode": "compiled before measuring" if compiled else "as installed",
            "goals": {"speedup_min": GOAL_SPEEDUP, "rss_ratio_max": GOAL_RSS, "store_ratio_max": GOAL_STORE},
            "traces": results,
        }
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        mc = machine()
        print(f"machine  {mc['platform']}, {mc['cpu_count']} CPUs, Python {mc['python']}; "
              f"gpuscope {mc['gpuscope']}, duckdb {mc['duckdb']}, HTA {mc['holistictraceanalysis']}, "
              f"pandas {mc['pandas']}")
        print(f"bytecode {'gpuscope compiled before measuring, as a wheel install does' if compiled else 'as installed'}"
              f"{'; PYTHONDONTWRITEBYTECODE is set' if os.environ.get('PYTHONDONTWRITEBYTECODE') else ''}")
        for r in results:
            print()
            print(text_report(r, args.repeat))
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
