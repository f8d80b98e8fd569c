#!/usr/bin/env python3
"""Ingest and reads at scale: the goals of "ingest at the machine's limit", each printed with
its ratio and whether it is met.

    python bench/bench_scale.py [--cases 109k,1.2m,ranks8,5m,reads,growth] [--repeat N] [--json]

Inputs are made once from the shared A100 trace with bench/scale_trace.py and kept in
``~/.cache/gpuscope-bench/scale`` (``--cache DIR``): 1.2M events (11 copies), 8 rank traces
(one copy each, ``distributedInfo.rank`` 0-7), 0.5M (5 copies) and 5M events (45 copies).

Every tool runs as whole processes (interpreter start-up counts), as bench_ingest.py does:

  ingest     `python -m gpuscope ingest TRACE --db STORE --json -q` (fresh store)
  analyze    `python -m gpuscope analyze --db STORE --json`
  two-step   ingest + analyze; one-step: `python -m gpuscope analyze TRACE --db STORE2 --json`
  HTA        bench/_hta_child.py on a directory holding the trace (or the 8 ranks): HTA's parse,
             kernel breakdown and temporal breakdown
  bound      bench/_bound_child.py: interpreter, DuckDB, gunzip + spool, DuckDB's parse of nine
             fields, nothing else: no DuckDB-based ingest can take less
  floor      interpreter + DuckDB + connect: what every gpuscope process pays before any work

Goals (the issue's):

  109k      one-step / bound <= 1.6; HTA / two-step >= 5; peak RSS / HTA's <= 0.33
  1.2M      ingest / bound <= 1.5; HTA / two-step >= 12; peak RSS / HTA's <= 0.25;
            store / .json.gz <= 0.30
  8 ranks   HTA / two-step >= 10, ranks parsed on every core (the speed-up of ingest over the
            same ingest pinned to one core is printed)
  5M        ingest completes with peak RSS < 1 GiB and shows its progress line (``--progress``,
            as a terminal would show it)
  reads     analyze of the 1.2M-event run and `runs` on a store of 1,000 runs: each < 0.3 s
            after the floor; compare of two 1.2M-event runs < 1 s
  growth    ingest time and peak memory at 0.1M, 0.5M, 1.2M and 5M events (a table)

Exit code 0 whatever the numbers (1 with --check when a goal is missed, 2 on unusable
arguments).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import (  # noqa: E402
    BOUND_CHILD, DEFAULT_TRACE, FLOOR_CODE, HTA_CHILD, ChildFailed, Proc, _check, _store_bytes, compile_gpuscope,
    machine, run_child,
)

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SCALE = Path(__file__).resolve().with_name("scale_trace.py")
CASES = ("109k", "1.2m", "ranks8", "5m", "reads", "growth")
GIB = 1 << 30


def log(msg: str) -> None:
    print(f"bench_scale: {msg}", file=sys.stderr, flush=True)


def make_input(cache: Path, name: str, copies: int, ranks: int = 0) -> Path:
    """The scaled trace (or rank directory) ``name`` in the cache, made once."""
    out = cache / name
    if out.exists():
        return out
    log(f"making {out} (scale_trace.py --copies {copies}{f' --ranks {ranks}' if ranks else ''}, once)")
    tmp = cache / (name + ".tmp")
    argv = [PY, str(SCALE), str(DEFAULT_TRACE), str(tmp), "--copies", str(copies)]
    if ranks:
        argv += ["--ranks", str(ranks)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_scale: scale_trace failed: {p.stderr.strip()[-500:]}")
    tmp.rename(out)
    return out


def gz_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.json.gz")) if path.is_dir() else path.stat().st_size


def gs(*args: str, cpus: set[int] | None = None) -> Proc:
    return _check(run_child([PY, "-m", "gpuscope", *args], cpus=cpus), "gpuscope " + " ".join(args[:2]))


def hta(trace: Path, work: Path) -> Proc:
    if trace.is_dir():
        d = trace
    else:
        d = work / "hta"
        d.mkdir(exist_ok=True)
        link = d / trace.name
        if not link.exists():
            link.symlink_to(trace.resolve())
    p = run_child([PY, str(HTA_CHILD), str(d)])
    if p.rc == 3:
        raise SystemExit(f"bench_scale: HTA is not usable: {p.stderr.strip()}")
    return _check(p, "HTA")


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


def measure(trace: Path, work: Path, repeat: int, with_hta: bool = True, one_step: bool = True) -> dict[str, Any]:
    """Medians over ``repeat`` of ingest, analyze, one-step, bound, floor and HTA (alternating)."""
    runs: dict[str, list[Proc]] = {k: [] for k in ("ingest", "analyze", "one_step", "bound", "floor", "hta")}
    store = 0
    for i in range(repeat):
        order = ("gpuscope", "hta") if i % 2 == 0 else ("hta", "gpuscope")
        for tool in order:
            if tool == "hta":
                if with_hta:
                    runs["hta"].append(hta(trace, work))
                    log(f"  {trace.name}: HTA {runs['hta'][-1].wall_s:.2f} s")
                continue
            db, db2 = work / f"s{i}.duckdb", work / f"t{i}.duckdb"
            runs["ingest"].append(gs("ingest", str(trace), "--db", str(db), "--json", "-q"))
            store = _store_bytes(db)
            runs["analyze"].append(gs("analyze", "--db", str(db), "--json"))
            if one_step:
                runs["one_step"].append(gs("analyze", str(trace), "--db", str(db2), "--json"))
            runs["bound"].append(_check(run_child([PY, str(BOUND_CHILD), str(trace)]), "bound"))
            runs["floor"].append(_check(run_child([PY, "-c", FLOOR_CODE]), "floor"))
            log(f"  {trace.name}: ingest {runs['ingest'][-1].wall_s:.2f} s, bound {runs['bound'][-1].wall_s:.2f} s")
            for f in (db, db2):
                f.unlink(missing_ok=True)
    out: dict[str, Any] = {"events": json.loads(runs["ingest"][-1].stdout)["events"], "store_bytes": store,
                           "gz_bytes": gz_bytes(trace)}
    for k, ps in runs.items():
        if ps:
            out[k] = {"wall_s": med([p.wall_s for p in ps]), "maxrss_bytes": med([p.maxrss_bytes for p in ps])}
    out["two_step"] = {"wall_s": out["ingest"]["wall_s"] + out["analyze"]["wall_s"],
                       "maxrss_bytes": max(out["ingest"]["maxrss_bytes"], out["analyze"]["maxrss_bytes"])}
    return out


def goal(name: str, value: float, op: str, target: float, unit: str = "") -> dict[str, Any]:
    met = {"<=": value <= target, ">=": value >= target, "<": value < target, ">": value > target}[op]
    return {"goal": name, "value": value, "op": op, "target": target, "unit": unit, "met": bool(met)}


def case_109k(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    m = measure(DEFAULT_TRACE, work, repeat)
    return {"measured": m, "goals": [
        goal("one-step / bound", m["one_step"]["wall_s"] / m["bound"]["wall_s"], "<=", 1.6, "x"),
        goal("HTA / two-step", m["hta"]["wall_s"] / m["two_step"]["wall_s"], ">=", 5, "x"),
        goal("peak RSS / HTA's", m["two_step"]["maxrss_bytes"] / m["hta"]["maxrss_bytes"], "<=", 0.33),
    ]}


def case_12m(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    m = measure(make_input(cache, "a100x11.json.gz", 11), work, repeat)
    return {"measured": m, "goals": [
        goal("ingest / bound", m["ingest"]["wall_s"] / m["bound"]["wall_s"], "<=", 1.5, "x"),
        goal("HTA / two-step", m["hta"]["wall_s"] / m["two_step"]["wall_s"], ">=", 12, "x"),
        goal("peak RSS / HTA's", m["two_step"]["maxrss_bytes"] / m["hta"]["maxrss_bytes"], "<=", 0.25),
        goal("store / .json.gz", m["store_bytes"] / m["gz_bytes"], "<=", 0.30),
    ]}


def case_ranks8(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    ranks = make_input(cache, "ranks8", 1, ranks=8)
    m = measure(ranks, work, repeat)
    one = []
    for i in range(repeat):
        db = work / f"one{i}.duckdb"
        one.append(gs("ingest", str(ranks), "--db", str(db), "--json", "-q", cpus={min(_cpus())}).wall_s)
        db.unlink(missing_ok=True)
    m["ingest_one_core"] = {"wall_s": med(one)}
    m["cores"] = len(_cpus())
    m["speedup_over_one_core"] = med(one) / m["ingest"]["wall_s"]
    return {"measured": m, "goals": [
        goal("HTA / two-step", m["hta"]["wall_s"] / m["two_step"]["wall_s"], ">=", 10, "x"),
        goal(f"ingest speed-up on {m['cores']} cores over 1", m["speedup_over_one_core"], ">", 1.0, "x"),
    ]}


def _cpus() -> set[int]:
    import os

    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return set(range(os.cpu_count() or 1))


def case_5m(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    trace = make_input(cache, "a100x45.json.gz", 45)
    db = work / "5m.duckdb"
    p = gs("ingest", str(trace), "--db", str(db), "--json", "--progress")
    lines = [ln for ln in p.stderr.splitlines() if "events/s" in ln]
    m = {"events": json.loads(p.stdout)["events"], "ingest": {"wall_s": p.wall_s, "maxrss_bytes": p.maxrss_bytes},
         "store_bytes": _store_bytes(db), "gz_bytes": gz_bytes(trace), "progress_lines": len(lines),
         "last_progress_line": lines[-1] if lines else None}
    db.unlink(missing_ok=True)
    return {"measured": m, "goals": [
        goal("peak RSS", p.maxrss_bytes / GIB, "<", 1.0, "GiB"),
        goal("progress lines shown", len(lines), ">=", 1),
    ]}


def store_of_1000_runs(cache: Path) -> Path:
    from bench_tui import build_store_of_runs

    return build_store_of_runs(cache / "runs1000.duckdb", 1000, cache / "small", "bench_scale")


def case_reads(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    big = make_input(cache, "a100x11.json.gz", 11)
    db = work / "reads.duckdb"
    gs("ingest", str(big), "--db", str(db), "--name", "a", "-q")
    gs("ingest", str(big), "--db", str(db), "--name", "b", "-q")
    runs1000 = store_of_1000_runs(cache)
    floor, analyze, runs, compare = [], [], [], []
    for _ in range(max(3, repeat)):
        floor.append(_check(run_child([PY, "-c", FLOOR_CODE]), "floor").wall_s)
        analyze.append(gs("analyze", "a", "--db", str(db), "--json").wall_s)
        runs.append(gs("runs", "--db", str(runs1000), "--json").wall_s)
        compare.append(gs("compare", "a", "b", "--db", str(db), "--json").wall_s)
    f = med(floor)
    m = {"floor_s": f, "analyze_s": med(analyze), "runs_1000_s": med(runs), "compare_s": med(compare)}
    return {"measured": m, "goals": [
        goal("analyze 1.2M-event run, after the floor", m["analyze_s"] - f, "<", 0.3, "s"),
        goal("runs on 1,000 runs, after the floor", m["runs_1000_s"] - f, "<", 0.3, "s"),
        goal("compare two 1.2M-event runs", m["compare_s"], "<", 1.0, "s"),
    ]}


def case_growth(cache: Path, work: Path, repeat: int) -> dict[str, Any]:
    rows = []
    for label, trace in (("0.1M", DEFAULT_TRACE), ("0.5M", make_input(cache, "a100x5.json.gz", 5)),
                         ("1.2M", make_input(cache, "a100x11.json.gz", 11)),
                         ("5M", make_input(cache, "a100x45.json.gz", 45))):
        walls, rss = [], []
        for i in range(repeat):
            db = work / f"g{i}.duckdb"
            p = gs("ingest", str(trace), "--db", str(db), "--json", "-q")
            walls.append(p.wall_s)
            rss.append(p.maxrss_bytes)
            events = json.loads(p.stdout)["events"]
            store = _store_bytes(db)
            db.unlink(missing_ok=True)
        rows.append({"size": label, "events": events, "wall_s": med(walls), "maxrss_bytes": med(rss),
                     "us_per_event": med(walls) / events * 1e6, "store_bytes": store, "gz_bytes": gz_bytes(trace)})
        log(f"  growth {label}: {med(walls):.2f} s, {med(rss) / 2**20:.0f} MiB")
    return {"measured": {"rows": rows}, "goals": []}


RUNNERS = {"109k": case_109k, "1.2m": case_12m, "ranks8": case_ranks8, "5m": case_5m, "reads": case_reads,
           "growth": case_growth}


def _fmt(g: dict[str, Any]) -> str:
    v, t = g["value"], g["target"]
    unit = g["unit"]
    vs = f"{v:.2f}{unit}" if unit in ("x", "") else f"{v:.2f} {unit}"
    ts = f"{t:g}{unit}" if unit in ("x", "") else f"{t:g} {unit}"
    return f"    {g['goal']:44s} {vs:>10s}  {g['op']} {ts:<8s} {'met' if g['met'] else 'MISSED'}"


def text(results: dict[str, Any]) -> str:
    out = []
    for name, r in results.items():
        m = r["measured"]
        out.append(f"{name}:")
        if name == "growth":
            out.append("    size   events      ingest s   µs/event   peak MiB   store / .json.gz")
            for row in m["rows"]:
                out.append(f"    {row['size']:5s} {row['events']:>10,} {row['wall_s']:10.2f} {row['us_per_event']:10.2f} "
                           f"{row['maxrss_bytes'] / 2**20:10.0f}   {row['store_bytes'] / row['gz_bytes']:.2f}")
            continue
        parts = []
        for k in ("ingest", "analyze", "two_step", "one_step", "bound", "floor", "hta", "ingest_one_core"):
            if k in m:
                rss = m[k].get("maxrss_bytes")
                parts.append(f"{k} {m[k]['wall_s']:.2f} s" + (f" / {rss / 2**20:.0f} MiB" if rss else ""))
        for k in ("floor_s", "analyze_s", "runs_1000_s", "compare_s"):
            if k in m:
                parts.append(f"{k[:-2]} {m[k]:.3f} s")
        if "events" in m:
            out.append(f"    {m['events']:,} events, {m['gz_bytes']:,} bytes gzipped" +
                       (f", store {m['store_bytes']:,} bytes" if m.get("store_bytes") else ""))
        out.append("    " + "; ".join(parts))
        if m.get("last_progress_line"):
            out.append(f"    last progress line: {m['last_progress_line']}")
        out.extend(_fmt(g) for g in r["goals"])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--repeat", type=int, default=1, help="repeats per measurement; medians (default 1)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "gpuscope-bench" / "scale")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    a = ap.parse_args(argv)
    cases = [c.strip().lower() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in RUNNERS]
    if bad or a.repeat < 1:
        print(f"bench_scale: unknown case {bad[0]!r} (choose from {', '.join(CASES)})" if bad
              else "bench_scale: --repeat must be at least 1", file=sys.stderr)
        return 2
    if not DEFAULT_TRACE.exists():
        print(f"bench_scale: {DEFAULT_TRACE}: missing (the shared traces next to the repository)", file=sys.stderr)
        return 2
    a.cache.mkdir(parents=True, exist_ok=True)
    compile_gpuscope()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="gpuscope-bench-scale-") as tmp:
            for c in cases:
                log(f"case {c}")
                work = Path(tmp) / c
                work.mkdir()
                results[c] = RUNNERS[c](a.cache, work, a.repeat)
    except ChildFailed as exc:
        print(f"bench_scale: {exc}", file=sys.stderr)
        return 1
    if a.json:
        json.dump({"machine": machine(), "results": results}, sys.stdout, indent=1, default=str)
        print()
    else:
        print(text(results))
    missed = [g for r in results.values() for g in r["goals"] if not g["met"]]
    return 1 if (a.check and missed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
