#!/usr/bin/env python3
"""gpuscope's roofline class beside Nsight Compute's Speed-of-Light verdict, kernel by kernel.

    python bench/ncu_compare.py NCU_CSV --db STORE --run NAME [--json]
    python bench/ncu_compare.py NCU_CSV --analyze-json ANALYZE.json [--json]

``NCU_CSV`` is an ``ncu --section SpeedOfLight --csv`` export of a workload, either page:
``--page raw`` (one row per launch, one column per metric, a units row under the header) or
``--page details`` (one row per launch and metric: ``Section Name``, ``Metric Name``,
``Metric Unit``, ``Metric Value``). Lines ncu or the profiled program print before the header
(``==PROF== ...``) are skipped. The store and run (or a saved ``analyze --json``) are the SAME
workload profiled with ``torch.profiler`` and ingested by gpuscope.

Kernels are matched by demangled name (whitespace and a leading ``void`` ignored; failing
that, by the bare function name when exactly one gpuscope kernel has it). Per kernel name,
ncu's throughputs are averaged weighted by each launch's duration, and classed the way ncu's
own ``SOLBottleneck`` rule reads them (thresholds below): the larger of memory and compute
(SM) throughput at 60 % of peak or more names the unit that bounds the kernel; both under
60 % is latency. gpuscope's class agrees when it names the same unit (memory- or cache-bound
for ncu's memory, compute-bound for compute); for ncu's latency, when gpuscope says
latency-bound or puts the kernel under 60 % of its own roof (neither tool sees a unit near
its peak). Time shares are gpuscope's (the kernels as they ran under ``torch.profiler``;
ncu replays each kernel and its durations are not the workload's).

Exit 0 with the table (or ``--json``), 2 with one line on stderr for an input that cannot be
read. The agreement is a number to read, not a pass/fail: ``bench/gpu_acceptance.py`` judges it.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ncu's SOLBottleneck rule (sections/SpeedOfLight_Bottleneck rule shipped with Nsight Compute):
#: both throughputs under 60 % of peak "typically indicate latency issues"; at 80 % or more a
#: unit is saturated; within 10 points of each other the two are "well-balanced".
LATENCY_PCT = 60.0
SATURATED_PCT = 80.0
BALANCED_PCT = 10.0
#: gpuscope's pct_of_roof (a fraction) under which it, too, says the kernel is far from its roof
GPUSCOPE_NEAR_ROOF = LATENCY_PCT / 100.0

MEM_METRIC = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SM_METRIC = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_METRIC = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
DURATION_METRIC = "gpu__time_duration.sum"
#: the same metrics as the details page (and the UI) names them in the SpeedOfLight section
DETAILS_NAMES = {"Memory Throughput": MEM_METRIC, "Compute (SM) Throughput": SM_METRIC,
                 "DRAM Throughput": DRAM_METRIC, "Duration": DURATION_METRIC}
PCT_METRICS = (MEM_METRIC, SM_METRIC, DRAM_METRIC)
#: time units ncu prints (auto-scaled, or base with --print-units base), in microseconds
TIME_UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "nsec": 1e-3, "us": 1.0, "usecond": 1.0, "usec": 1.0,
                 "ms": 1e3, "msecond": 1e3, "msec": 1e3, "s": 1e6, "second": 1e6, "sec": 1e6}
MEMORY_CLASSES = ("memory_bound", "cache_bound")


class InputError(Exception):
    """An input file that cannot be read as what it should be; the message names it."""


@dataclass
class NcuLaunch:
    """One profiled kernel launch: ncu's ID, the demangled name, throughputs in % of peak."""

    launch_id: str
    name: str
    mem_pct: float | None = None
    sm_pct: float | None = None
    dram_pct: float | None = None
    duration_us: float | None = None


@dataclass
class NcuKernel:
    """ncu's launches of one kernel name, throughputs averaged weighted by duration."""

    name: str
    launches: int = 0
    duration_us: float = 0.0
    mem_pct: float | None = None
    sm_pct: float | None = None
    dram_pct: float | None = None
    ids: list[str] = field(default_factory=list)


# -- ncu's CSV ------------------------------------------------------------------------------------

def _number(text: str | None) -> float | None:
    """ncu's value text as a float: thousands separators dropped; ``n/a`` and blanks are None."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "na", "nan", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _duration_us(value: float | None, unit: str) -> float | None:
    if value is None:
        return None
    scale = TIME_UNITS_US.get(unit.strip().lower())
    return None if scale is None else value * scale


def parse_ncu_csv(text: str, source: str = "ncu CSV") -> list[NcuLaunch]:
    """The launches of an ``ncu --csv`` export of the SpeedOfLight section, raw or details page.

    Raises InputError (naming ``source``) when no ncu header is found, the header lacks the
    columns, or no launch carries both throughputs.
    """
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        raise InputError(f"{source}: no ncu CSV header (a line starting \"ID\",...) found")
    # ncu's own messages can follow the rows (==PROF== Disconnected ...): keep CSV rows only
    body = [ln for ln in lines[start:] if ln.strip() and not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise InputError(f"{source}: the ncu header has no \"Kernel Name\" column")
    launches: dict[str, NcuLaunch] = {}

    def launch(row: list[str]) -> NcuLaunch:
        lid = row[col["ID"]]
        return launches.setdefault(lid, NcuLaunch(lid, row[col["Kernel Name"]]))

    if "Metric Name" in col and "Metric Value" in col:  # --page details: one row per metric
        unit_i = col.get("Metric Unit")
        sect_i = col.get("Section Name")
        for row in rows[1:]:
            if len(row) < len(header):
                continue
            metric = row[col["Metric Name"]].strip()
            key = DETAILS_NAMES.get(metric, metric)
            unit = row[unit_i].strip() if unit_i is not None else ""
            if sect_i is not None and row[sect_i] and "speed of light" not in row[sect_i].lower() \
                    and key != DURATION_METRIC:
                continue  # another section's "Memory Throughput" (in bytes/s) is not this one
            _store(launch(row), key, _number(row[col["Metric Value"]]), unit)
    else:  # --page raw: one row per launch, a units row first
        missing = [m for m in (MEM_METRIC, SM_METRIC) if m not in col]
        if missing:
            raise InputError(f"{source}: the raw ncu CSV has no {', '.join(missing)} column "
                             "(profile with --section SpeedOfLight)")
        units = [""] * len(header)
        data = rows[1:]
        if data and not data[0][col["ID"]].strip():
            units, data = data[0], data[1:]
        for row in data:
            if len(row) < len(header) or not row[col["ID"]].strip():
                continue
            la = launch(row)
            for metric in (*PCT_METRICS, DURATION_METRIC):
                if metric in col:
                    i = col[metric]
                    _store(la, metric, _number(row[i]), units[i] if i < len(units) else "")
    out = [la for la in launches.values() if la.mem_pct is not None and la.sm_pct is not None]
    if not out:
        raise InputError(f"{source}: no launch with both memory and compute (SM) throughput "
                         f"({len(launches)} launches read)")
    return out


def _store(la: NcuLaunch, key: str, value: float | None, unit: str) -> None:
    if key == DURATION_METRIC:
        la.duration_us = _duration_us(value, unit or "ns")  # raw metric's base unit is ns
    elif key in PCT_METRICS and unit.strip() in ("", "%"):
        setattr(la, {MEM_METRIC: "mem_pct", SM_METRIC: "sm_pct", DRAM_METRIC: "dram_pct"}[key], value)


def aggregate(launches: list[NcuLaunch]) -> dict[str, NcuKernel]:
    """ncu's launches per kernel name; percentages weighted by duration (equal weights when a
    launch has none), so that they are the throughput over the kernel's whole time."""
    out: dict[str, NcuKernel] = {}
    sums: dict[str, dict[str, float]] = {}
    for la in launches:
        k = out.setdefault(la.name, NcuKernel(la.name))
        s = sums.setdefault(la.name, {"w": 0.0, "mem": 0.0, "sm": 0.0, "dram": 0.0, "dram_w": 0.0})
        w = la.duration_us if la.duration_us and la.duration_us > 0 else 1.0
        k.launches += 1
        k.duration_us += la.duration_us or 0.0
        k.ids.append(la.launch_id)
        s["w"] += w
        s["mem"] += w * (la.mem_pct or 0.0)
        s["sm"] += w * (la.sm_pct or 0.0)
        if la.dram_pct is not None:
            s["dram"] += w * la.dram_pct
            s["dram_w"] += w
    for name, k in out.items():
        s = sums[name]
        k.mem_pct, k.sm_pct = s["mem"] / s["w"], s["sm"] / s["w"]
        k.dram_pct = s["dram"] / s["dram_w"] if s["dram_w"] else None
    return out


def ncu_class(mem_pct: float, sm_pct: float) -> str:
    """ncu's verdict in gpuscope's words: ``memory``, ``compute`` or ``latency`` (both < 60 %)."""
    if max(mem_pct, sm_pct) < LATENCY_PCT:
        return "latency"
    return "memory" if mem_pct >= sm_pct else "compute"


def agrees(gpuscope_bound: str | None, pct_of_roof: float | None, ncu: str) -> bool | None:
    """Whether gpuscope's class says what ncu's does; None when gpuscope did not judge it."""
    if gpuscope_bound in (None, "unknown"):
        return None
    if ncu == "memory":
        return gpuscope_bound in MEMORY_CLASSES
    if ncu == "compute":
        return gpuscope_bound == "compute_bound"
    # ncu: no unit at 60 % of its peak
    return gpuscope_bound == "latency_bound" or (pct_of_roof is not None and pct_of_roof < GPUSCOPE_NEAR_ROOF)


# -- names ----------------------------------------------------------------------------------------

_LAMBDA_INSTANCE = re.compile(r"\[lambda\(([^()]*)\)\s*\(instance\s*(\d+)\)\]")


def name_key(name: str) -> str:
    """A demangled kernel name without whitespace or a leading return type ``void``: CUPTI (in
    the Kineto trace) and ncu print the same signature with different spacing (``> >``), and
    a demangler may write a lambda ``[lambda(int) (instance 1)]`` where the other writes
    ``{lambda(int)#1}``."""
    s = _LAMBDA_INSTANCE.sub(lambda m: "{lambda(" + m.group(1) + ")#" + m.group(2) + "}", name)
    return re.sub(r"\s+", "", re.sub(r"^\s*void\s+", "", s))


def base_name(name: str) -> str:
    """The bare function name: no return type, namespaces, template arguments or parameters."""
    key = name_key(name)
    depth, cut = 0, len(key)
    for i, ch in enumerate(key):
        if ch in "<(" and depth == 0 and not key.startswith("(anonymousnamespace)", i):
            cut = i
            break
    return key[:cut].rsplit("::", 1)[-1]


# -- gpuscope's side ------------------------------------------------------------------------------

def load_analyze(db: str | None, run: str | None, analyze_json: str | None) -> dict[str, Any]:
    """``analyze --json`` of the run: read from a file, or run ``gpuscope analyze`` on the store."""
    if analyze_json:
        try:
            doc = json.loads(Path(analyze_json).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"{analyze_json}: cannot read ({exc.strerror})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{analyze_json}: not JSON ({exc})") from None
        src = analyze_json
    else:
        if not db or not run:
            raise InputError("need --db STORE and --run NAME, or --analyze-json FILE")
        if not Path(db).is_file():
            raise InputError(f"{db}: no such store")
        p = subprocess.run([sys.executable, "-m", "gpuscope", "analyze", "--db", db, "--json", run],
                           capture_output=True, text=True, env=dict(os.environ, GPUSCOPE_DB=db))
        if p.returncode != 0:
            last = next((ln for ln in reversed(p.stderr.splitlines()) if ln.strip()), f"exit {p.returncode}")
            raise InputError(f"{db} run {run}: gpuscope analyze failed: {last.strip()}")
        try:
            doc = json.loads(p.stdout)
        except json.JSONDecodeError as exc:
            raise InputError(f"{db} run {run}: analyze --json printed no JSON ({exc})") from None
        src = f"{db} run {run}"
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list):
        raise InputError(f"{src}: not an analyze --json document (no kernels table)")
    return doc


# -- the comparison -------------------------------------------------------------------------------

def compare(analyze: dict[str, Any], launches: list[NcuLaunch]) -> dict[str, Any]:
    """Each gpuscope kernel beside ncu's verdict for the same name, and the share of gpuscope's
    kernel time whose class agrees. Pure: no I/O."""
    kernels = [k for k in analyze["kernels"] if k.get("kind", "kernel") == "kernel"]
    total_us = sum(float(k.get("total_us") or 0.0) for k in kernels)
    ncu = aggregate(launches)
    by_key = {name_key(n): k for n, k in ncu.items()}
    bases: dict[str, list[str]] = {}
    for k in kernels:
        bases.setdefault(base_name(k["name"]), []).append(k["name"])
    ncu_by_base: dict[str, list[NcuKernel]] = {}
    for k in ncu.values():
        ncu_by_base.setdefault(base_name(k.name), []).append(k)
    used: set[str] = set()
    rows: list[dict[str, Any]] = []
    for k in sorted(kernels, key=lambda r: -float(r.get("total_us") or 0.0)):
        us = float(k.get("total_us") or 0.0)
        match, how = by_key.get(name_key(k["name"])), "name"
        if match is None:
            b = base_name(k["name"])
            cands = ncu_by_base.get(b, [])
            if len(bases.get(b, [])) == 1 and len(cands) == 1:
                match, how = cands[0], "function name"
        bound, pct = k.get("bound"), k.get("pct_of_roof")
        row: dict[str, Any] = {"kernel": k["name"], "time_us": round(us, 3),
                               "time_share": us / total_us if total_us else 0.0,
                               "gpuscope_bound": bound, "gpuscope_pct_of_roof": pct}
        if match is None:
            row.update(ncu_class=None, agrees=None, note="not profiled by ncu")
        else:
            used.add(match.name)
            cls = ncu_class(match.mem_pct or 0.0, match.sm_pct or 0.0)
            same_unit = None
            if bound in MEMORY_CLASSES:
                same_unit = match.mem_pct
            elif bound == "compute_bound":
                same_unit = match.sm_pct
            ok = agrees(bound, pct, cls)
            row.update(ncu_mem_pct=match.mem_pct, ncu_sm_pct=match.sm_pct, ncu_dram_pct=match.dram_pct,
                       ncu_launches=match.launches, ncu_duration_us=round(match.duration_us, 3),
                       ncu_class=cls, ncu_pct_same_unit=same_unit, matched_by=how, agrees=ok)
            if ok is None:
                row["note"] = "gpuscope did not judge it"
            elif cls != "latency" and max(match.mem_pct or 0.0, match.sm_pct or 0.0) < SATURATED_PCT \
                    and abs((match.mem_pct or 0.0) - (match.sm_pct or 0.0)) < BALANCED_PCT:
                row["note"] = "ncu: memory and compute within 10 points (well-balanced)"
        rows.append(row)
    compared = [r for r in rows if r["agrees"] is not None]
    compared_us = sum(r["time_us"] for r in compared)
    agree_us = sum(r["time_us"] for r in compared if r["agrees"])
    profiled_us = sum(r["time_us"] for r in rows if r["ncu_class"] is not None)
    unmatched_ncu = sorted(n for n in ncu if n not in used)
    return {
        "schema": "gpuscope.ncu_compare/1",
        "thresholds": {"latency_pct": LATENCY_PCT, "saturated_pct": SATURATED_PCT, "balanced_pct": BALANCED_PCT,
                       "gpuscope_near_roof": GPUSCOPE_NEAR_ROOF},
        "kernel_time_us": round(total_us, 3),
        "profiled_share": profiled_us / total_us if total_us else 0.0,
        "compared_share": compared_us / total_us if total_us else 0.0,
        "agree_share": agree_us / compared_us if compared_us else None,
        "kernels": len(rows), "kernels_compared": len(compared),
        "disagreements": [r["kernel"] for r in compared if not r["agrees"]],
        "ncu_launches": len(launches), "ncu_kernels": len(ncu),
        "ncu_kernels_unmatched": unmatched_ncu,
        "rows": rows,
    }


def agreement_line(doc: dict[str, Any]) -> str:
    """One line: the share of compared GPU time whose class agrees, and what was compared."""
    share = doc["agree_share"]
    return ((f"ncu agrees on {100 * share:.1f} % of the compared GPU time" if share is not None
             else "ncu and gpuscope share no judged kernel")
            + f" ({doc['kernels_compared']} of {doc['kernels']} kernels, {100 * doc['compared_share']:.1f} % of "
            f"kernel time; {len(doc['disagreements'])} disagree; {doc['ncu_launches']} ncu launches, "
            f"{len(doc['ncu_kernels_unmatched'])} ncu kernels unmatched)")


def short_name(name: str) -> str:
    """A kernel name for the table: no return type, parameter list or namespace qualifiers."""
    s = re.sub(r"^\s*void\s+", "", name)
    if s.endswith(")"):  # drop the parameter list: the last balanced "(...)"
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i] if i else s
                break
    return re.sub(r"(\(anonymous namespace\)|\w+)::", "", s)


def _pct(v: float | None, fraction: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.0f}%" if fraction else f"{v:.0f}%"


def render(doc: dict[str, Any], width: int = 60, wide: bool = False) -> str:
    """The table: kernel, time share, gpuscope class and % of roof, ncu mem/SM %, ncu class, agree."""
    short = {"memory_bound": "memory", "compute_bound": "compute", "cache_bound": "cache",
             "latency_bound": "latency", None: "-", "unknown": "unknown"}
    lines = [f"{'kernel':<{width}} {'time':>6}  {'gpuscope':<15} {'ncu mem/SM':>11}  {'ncu':<8} agree"]
    for r in doc["rows"]:
        name = r["kernel"] if wide else short_name(r["kernel"])
        name = name if wide or len(name) <= width else name[:width - 1] + "…"
        gs = f"{short.get(r['gpuscope_bound'], r['gpuscope_bound'])} {_pct(r['gpuscope_pct_of_roof'], True)}"
        nc = f"{_pct(r.get('ncu_mem_pct'))}/{_pct(r.get('ncu_sm_pct'))}" if r["ncu_class"] else "-"
        ok = {True: "yes", False: "NO", None: "-"}[r["agrees"]]
        cls = r["ncu_class"] or "-"
        lines.append(f"{name:<{width}} {100 * r['time_share']:5.1f}%  {gs:<15} {nc:>11}  {cls:<8} {ok}"
                     + (f"  ({r['note']})" if r.get("note") else ""))
    lines += ["", agreement_line(doc)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ncu_csv", help="ncu --csv export (--page raw or details) of the SpeedOfLight section")
    ap.add_argument("--db", help="the gpuscope store holding the torch.profiler run of the same workload")
    ap.add_argument("--run", help="that run's name or id")
    ap.add_argument("--analyze-json", metavar="FILE", help="a saved `gpuscope analyze --json` instead of --db/--run")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--wide", action="store_true", help="whole kernel names in the table")
    args = ap.parse_args(argv)
    try:
        try:
            text = Path(args.ncu_csv).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"{args.ncu_csv}: cannot read ({exc.strerror})") from None
        launches = parse_ncu_csv(text, args.ncu_csv)
        analyze = load_analyze(args.db, args.run, args.analyze_json)
    except InputError as exc:
        print(f"ncu_compare: {exc}", file=sys.stderr)
        return 2
    doc = compare(analyze, launches)
    print(json.dumps(doc, indent=1) if args.json else render(doc, wide=args.wide))
    return 0


if __name__ == "__main__":
    sys.exit(main())
