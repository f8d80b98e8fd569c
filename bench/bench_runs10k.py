#!/usr/bin/env python3
"""A store of 10,000 runs (issue 20, "Load"): `runs`, `analyze`, `sql` and the TUI's runs
screen on 1,000 and on 10,000 runs, side by side.

    python bench/bench_runs10k.py [--repeat N] [--json] [--cache DIR] [--no-tui]

Inputs, built once into ``~/.cache/gpuscope-bench/scale`` (``--cache``):

  runs1000.duckdb    1,000 ingests of small synthetic traces (bench_scale's store; bench_tui's
                     ``build_store_of_runs``)
  runs10000.duckdb   that store and 9 shifted copies of it, made in DuckDB with SQL (10,000
                     ingests would take too long here): every table with a ``run_id`` column,
                     read from the catalog so that a new table is not left out, and ``runs``
                     itself (keyed by ``id``); copy c of run r is run ``r + c * max(id)``,
                     named ``<name>-x<c>``, ``created_ns`` c spans of the source's creation
                     times later (newest first: copy 9, ..., copy 1, the source; nothing in
                     the future: the source moves back if needed), ``started_ns`` /
                     ``ended_ns`` c spans of the source's start times later; the run id
                     sequence is moved past them.
                     Built under a temporary name, checked (``runs --json`` lists 10x the runs,
                     ids and names unique; ``analyze --json`` of a copied run equals its
                     original's but for the run's id, name and times) and only then renamed.

Measured, every tool as a whole process (interpreter start-up counts), 1,000 and 10,000 runs
alternating, ``--repeat`` times (at least 3); median and range, and "after the floor": less
the median of ``python -c "import gpuscope.cli"`` measured in the same loop.

  runs --json, runs (text)        wall; peak RSS (ru_maxrss, in runs of their own)
  analyze FIRST / LAST --json     the oldest run (id 1) and the newest (10,000 / 1,000) of each
                                  store: the same runs' analyses, by construction
  sql "SELECT count(*) FROM runs"
  TUI first paint                 bench_tui's ``first-paint`` child: from spawn to the runs
                                  table filled (headless, 160x48)
  TUI filter, sort, idle          this file's child: after the first paint, typing a filter
                                  (``/`` then 8 characters, to settled), then Esc and ``s``
                                  (sort by name, to settled), then the process's CPU over a few
                                  seconds left on the runs screen (it re-reads every 2 s)
  parts                           in one process per store: connect, list_runs (its first call,
                                  then later ones: what the TUI's refreshes pay), the redaction
                                  of every command made distinct (the stores repeat 100
                                  commands), the JSON text, render_runs (text)

No goals to meet and no asserts: exit code 0 whatever the numbers (2 on unusable arguments,
1 when a child fails).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import ChildFailed, _check, compile_gpuscope, machine, run_child  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
FLOOR_CODE = "import gpuscope.cli"
COPIES = 10  # the source store and 9 copies of it
FILTER_TEXT = "run-0999"  # bench_tui names runs (bench-)run-NNNN: matches one run per copy
IDLE_S = 6.0  # the TUI's runs screen left alone: three of its 2 s refreshes
#: Peak RSS through a small launcher that forks the command and reports its ru_maxrss: Linux
#: carries a parent's high-water mark into a forked child's ru_maxrss, so a child of this
#: (larger) process would report at least this process's size.
RSS_LAUNCHER = ("import os, sys\npid = os.fork()\nif pid == 0:\n    os.execv(sys.argv[1], sys.argv[1:])\n"
                "_, st, ru = os.wait4(pid, 0)\nsys.stderr.write(f'\\nmaxrss_kib {ru.ru_maxrss}\\n')\n"
                "sys.exit(os.waitstatus_to_exitcode(st))")


def log(msg: str) -> None:
    print(f"bench_runs10k: {msg}", file=sys.stderr, flush=True)


# --- the 10,000-run store ------------------------------------------------------------------------


def run_tables(con: Any) -> list[str]:
    """Every table of the store's main schema with a ``run_id`` column, from the catalog."""
    return [r[0] for r in con.execute(
        "SELECT DISTINCT c.table_name FROM duckdb_columns() c JOIN duckdb_tables() t "
        "ON t.database_name = c.database_name AND t.schema_name = c.schema_name AND t.table_name = c.table_name "
        "WHERE c.database_name = current_database() AND c.schema_name = 'main' AND NOT t.temporary "
        "AND c.column_name = 'run_id' ORDER BY 1").fetchall()]


def multiply_runs(db: Path, copies: int) -> dict[str, Any]:
    """Add ``copies - 1`` shifted copies of every run of the store ``db`` (in place, one
    transaction): ids offset by multiples of the largest id, names suffixed ``-x<c>``, the run's
    times moved later. Returns what it did (tables, offsets)."""
    from gpuscope._db import duckdb
    from gpuscope.store.read import RUN_TABLES

    con = duckdb.connect(str(db))
    try:
        tables = run_tables(con)
        # the read layer's list of a run's tables is the other place that names them: a table
        # it knows that the catalog does not show means this store is not what we think
        missing = sorted(set(RUN_TABLES) - set(tables) - {"runs"})
        if missing:
            raise SystemExit(f"bench_runs10k: {db}: tables {missing} of the read layer have no run_id column here")
        if "id" not in {r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND table_name = 'runs'").fetchall()}:
            raise SystemExit(f"bench_runs10k: {db}: no runs table keyed by id")
        max_id, n_runs, c_min, c_max, s_min, s_max = con.execute(
            "SELECT max(id), count(*), min(created_ns), max(created_ns), min(started_ns), max(started_ns) "
            "FROM runs").fetchone()
        if not n_runs:
            raise SystemExit(f"bench_runs10k: {db}: no runs to copy")
        # created_ns orders the runs (newest first): a copy comes after the whole source's span
        # of creation times, so the list is copy 9, 8, ... then the source, each in the source's
        # own order, and ids grow with it. The source's runs move back first as far as needed
        # for the last copy not to lie in the future (a run made later must come first).
        span_ns = int(c_max) - int(c_min) + 1
        back_ns = max(0, int(c_max) + (copies - 1) * span_ns - time.time_ns())
        # started_ns / ended_ns are shown, not ordered by: moved by their own span, which keeps
        # relative times (a trace without a base time) small and positive
        start_span_ns = int(s_max) - int(s_min) + 1 if s_min is not None else 0
        con.execute("BEGIN TRANSACTION")
        if back_ns:
            con.execute(f"UPDATE runs SET created_ns = created_ns - {back_ns}")
        for c in range(1, copies):
            off, shift, start_shift = c * int(max_id), c * span_ns, c * start_span_ns
            con.execute(
                f"INSERT INTO runs SELECT * REPLACE (id + {off} AS id, name || '-x{c}' AS name, "
                f"created_ns + {shift} AS created_ns, started_ns + {start_shift} AS started_ns, "
                f"ended_ns + {start_shift} AS ended_ns) FROM runs WHERE id <= {int(max_id)}")
            for t in tables:
                con.execute(f'INSERT INTO "{t}" SELECT * REPLACE (run_id + {off} AS run_id) FROM "{t}" '
                            f"WHERE run_id <= {int(max_id)}")
        # the next run gpuscope makes in this store must not take a copy's id
        seq = con.execute("SELECT coalesce(last_value, start_value - 1) FROM duckdb_sequences() "
                          "WHERE database_name = current_database() AND sequence_name = 'run_id_seq'").fetchone()
        new_max = int(max_id) * copies
        if seq is not None and int(seq[0]) < new_max:
            con.execute("SELECT max(nextval('run_id_seq')) FROM range(?)", [new_max - int(seq[0])]).fetchone()
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in ["runs", *tables]}
    finally:
        con.close()
    return {"tables": tables, "source_runs": int(n_runs), "id_offset": int(max_id), "created_shift_ns": span_ns,
            "source_moved_back_ns": back_ns, "started_shift_ns": start_span_ns, "rows": counts}


def gs(*args: str) -> Any:
    return _check(run_child([PY, "-m", "gpuscope", *args], cwd=REPO), "gpuscope " + " ".join(args[:3]))


def same_analysis(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two ``analyze --json`` documents equal but for the run's id, name and times (what a
    copy changes); the run's duration must be the same too."""
    ra, rb = a.get("run") or {}, b.get("run") or {}
    dur = [(r.get("ended_ns") or 0) - (r.get("started_ns") or 0) for r in (ra, rb)]
    rest = [{k: v for k, v in d.items() if k != "run"} for d in (a, b)]
    keep = [{k: v for k, v in r.items() if k not in ("id", "name", "started_ns", "ended_ns")} for r in (ra, rb)]
    return rest[0] == rest[1] and keep[0] == keep[1] and dur[0] == dur[1]


def check_copies(db: Path, source: Path, copies: int, id_offset: int) -> dict[str, Any]:
    """``runs --json`` lists every copy once, newest first; the last copy of the source's newest
    run and the first copy of its oldest have their originals' analyses and row counts."""
    src_runs = json.loads(gs("runs", "--db", str(source), "--json").stdout)
    runs = json.loads(gs("runs", "--db", str(db), "--json").stdout)
    ids = [r["id"] for r in runs]
    problems = []
    if len(runs) != copies * len(src_runs) or len(set(ids)) != len(ids) or len({r["name"] for r in runs}) != len(runs):
        problems.append(f"runs --json: {len(runs)} runs, {len(set(ids))} ids, {len({r['name'] for r in runs})} names")
    if ids != sorted(ids, reverse=True):
        problems.append("runs --json: not newest (highest id) first")
    by_id, src_by_id = {r["id"]: r for r in runs}, {r["id"]: r for r in src_runs}
    pairs = [(src_runs[0]["id"] + (copies - 1) * id_offset, src_runs[0]["id"]),
             (src_runs[-1]["id"] + id_offset, src_runs[-1]["id"])]
    for copy, original in pairs:
        a = json.loads(gs("analyze", str(copy), "--db", str(db), "--json").stdout)
        b = json.loads(gs("analyze", str(original), "--db", str(source), "--json").stdout)
        if not same_analysis(a, b):
            problems.append(f"analyze {copy} differs from run {original}'s in the source store")
        counted = ("samples", "kernels", "ops", "devices")
        if copy not in by_id or any(by_id[copy][k] != src_by_id[original][k] for k in counted):
            problems.append(f"runs --json: run {copy}'s counts differ from run {original}'s")
    if problems:
        raise SystemExit(f"bench_runs10k: the {len(runs)}-run store is not whole: " + "; ".join(problems))
    return {"runs": len(runs), "checked": [{"copy": c, "original": o} for c, o in pairs]}


def store_of_10000_runs(cache: Path, source: Path) -> tuple[Path, dict[str, Any]]:
    db = cache / "runs10000.duckdb"
    if db.exists():
        log(f"using the cached {db}")
        return db, {"built": False}
    log(f"building {db} from {source.name}: {COPIES - 1} shifted copies in SQL (once) ...")
    t0 = time.perf_counter()
    tmp = db.with_name(db.stem + ".tmp.duckdb")
    for p in (tmp, tmp.with_name(tmp.name + ".wal")):
        p.unlink(missing_ok=True)
    shutil.copyfile(source, tmp)
    # in a child: this process stays small, and a child forked from it reports its own peak RSS
    # (Linux carries the parent's high-water mark into a forked child's ru_maxrss)
    p = _check(run_child([PY, __file__, "--child", "multiply", str(tmp), str(COPIES)], cwd=REPO), "the copying child")
    done = json.loads(p.stdout.strip().splitlines()[-1])
    log(f"  copied tables runs, {', '.join(done['tables'])} ({time.perf_counter() - t0:.1f} s); checking ...")
    done["check"] = check_copies(tmp, source, COPIES, done["id_offset"])
    tmp.rename(db)
    done["built"] = True
    done["build_s"] = time.perf_counter() - t0
    log(f"built {db}: {done['check']['runs']} runs; runs " +
        " and ".join(f"{c['copy']} and {c['original']}" for c in done["check"]["checked"]) +
        f" have the same analysis ({done['build_s']:.1f} s)")
    return db, done


# --- the TUI child: filter, sort, idle -----------------------------------------------------------


def _timed(cls: Any, name: str, spent: dict[str, float], key: str) -> None:
    """Add the time spent in ``cls.name`` to ``spent[key]`` (bench only: what part of a step is
    the screen's own work and what the table's measuring, the rest being Textual and Pilot)."""
    fn = getattr(cls, name, None)
    if fn is None:
        return

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0

    setattr(cls, name, timed)


def child_tui_ops(db: str) -> dict[str, Any]:
    from bench_tui import _settle

    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.runs import RunsScreen
    from textual.widgets import DataTable

    out: dict[str, Any] = {}
    spent: dict[str, float] = {}
    _timed(RunsScreen, "show", spent, "show_s")
    _timed(DataTable, "_update_dimensions", spent, "table_measure_s")  # Textual's, private
    app = GpuscopeApp(db=Path(db), replay=None, interval_s=1.0)

    def rows() -> int:
        return app.screen.query_one("#runs-table", DataTable).row_count

    def parts(step: str) -> None:
        for k in ("show_s", "table_measure_s"):
            out[f"{step}_{k}"] = spent.pop(k, 0.0)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            t0 = time.perf_counter()
            await pilot.press("2")
            await _settle(app, pilot)
            out["open_s"], out["rows_open"] = time.perf_counter() - t0, rows()
            t0 = time.perf_counter()
            parts("open")
            await pilot.press("slash", *FILTER_TEXT)
            await _settle(app, pilot)
            out["filter_s"], out["rows_filtered"] = time.perf_counter() - t0, rows()
            parts("filter")
            await pilot.press("escape")
            await _settle(app, pilot)
            parts("clear")
            t0 = time.perf_counter()
            await pilot.press("s")
            await _settle(app, pilot)
            out["sort_s"], out["rows_sorted"] = time.perf_counter() - t0, rows()
            parts("sort")
            out["sort_key"] = getattr(app.screen, "sort_key", None)
            c0, w0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(IDLE_S)
            out["idle_core_pct"] = 100 * (time.process_time() - c0) / (time.perf_counter() - w0)

    asyncio.run(go())
    return out


def _child(kind: str, db: Path) -> dict[str, Any]:
    if kind == "first-paint":
        from bench_tui import _run_child

        d = _run_child("first-paint", str(db))
        return {"runs_filled_s": d["t_runs_filled"] - d["t_spawn"], "imports_s": d["t_imported"] - d["t_spawn"],
                "first_frame_s": d["t_first_frame"] - d["t_spawn"], "rows_shown": d["rows_shown"]}
    p = _check(run_child([PY, __file__, "--child", kind, str(db)], cwd=REPO), f"the {kind} child")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --- parts, in this process ----------------------------------------------------------------------


def parts(db: Path, repeat: int) -> dict[str, float]:
    """(A child.) Where `runs` spends its time after start-up: the read (``list_runs``, of which the
    commands' redaction), the JSON text, the text table; medians in seconds."""
    from gpuscope import store
    from gpuscope.redact import redact_command
    from gpuscope.render.json import document
    from gpuscope.render.runs import render_runs
    from gpuscope.store import read

    got: dict[str, list[float]] = {}

    def note(k: str, t0: float) -> float:
        t1 = time.perf_counter()
        got.setdefault(k, []).append(t1 - t0)
        return t1

    for i in range(repeat):
        t = time.perf_counter()
        con = store.connect(db, read_only=True)
        t = note("connect_s", t)
        runs = read.list_runs(con)
        # the first call is what a `runs` process pays; later ones what the TUI's refresh pays
        t = note("list_runs_first_s" if i == 0 else "list_runs_again_s", t)
        commands = [r[0] for r in con.execute("SELECT command FROM runs").fetchall()]
        con.close()
        t = time.perf_counter()
        # every command made distinct, as in a real store (the bench stores repeat 100 commands),
        # so that no cache of redacted commands answers
        for i, c in enumerate(commands):
            redact_command(f"{c} --seed {i}")
        t = note("redact_distinct_s", t)
        document(runs, indent=None)
        t = note("json_text_s", t)
        render_runs(runs, width=120)
        note("render_text_s", t)
    return {k: statistics.median(v) for k, v in got.items()}


# --- the measurements ----------------------------------------------------------------------------


def peak_rss_bytes(argv: list[str]) -> int:
    p = _check(run_child([PY, "-S", "-c", RSS_LAUNCHER, *argv], cwd=REPO), " ".join(argv[2:5]))
    return int(p.stderr.strip().splitlines()[-1].split()[-1]) * 1024  # Linux: KiB


def stats(xs: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "all": xs}


def measure(stores: dict[str, Path], repeat: int, tui: bool) -> dict[str, Any]:
    walls: dict[str, list[float]] = {}
    rss: dict[str, list[int]] = {}
    tui_runs: dict[str, list[dict[str, Any]]] = {}
    listed = {k: json.loads(gs("runs", "--db", str(db), "--json").stdout) for k, db in stores.items()}
    first_ids = {k: runs[-1]["id"] for k, runs in listed.items()}  # the oldest run
    last_ids = {k: runs[0]["id"] for k, runs in listed.items()}  # the newest
    docs: dict[str, dict[str, Any]] = {}

    def add(key: str, p: Any) -> Any:
        walls.setdefault(key, []).append(p.wall_s)
        return p

    for i in range(repeat):
        order = list(stores) if i % 2 == 0 else list(reversed(stores))
        log(f"repeat {i + 1}/{repeat} ({' then '.join(order)})")
        add("floor", _check(run_child([PY, "-c", FLOOR_CODE], cwd=REPO), "the floor"))
        for k in order:
            db = str(stores[k])
            add(f"runs --json/{k}", gs("runs", "--db", db, "--json"))
            add(f"runs text/{k}", gs("runs", "--db", db))
            p = add(f"analyze first/{k}", gs("analyze", str(first_ids[k]), "--db", db, "--json"))
            docs[f"first/{k}"] = json.loads(p.stdout)
            p = add(f"analyze last/{k}", gs("analyze", str(last_ids[k]), "--db", db, "--json"))
            docs[f"last/{k}"] = json.loads(p.stdout)
            add(f"sql count/{k}", gs("sql", "SELECT count(*) FROM runs", "--db", db))
        add("floor", _check(run_child([PY, "-c", FLOOR_CODE], cwd=REPO), "the floor"))
        rss.setdefault("floor", []).append(peak_rss_bytes([PY, "-c", FLOOR_CODE]))
        for k in order:
            rss.setdefault(f"runs --json/{k}", []).append(
                peak_rss_bytes([PY, "-m", "gpuscope", "runs", "--db", str(stores[k]), "--json"]))
            rss.setdefault(f"runs text/{k}", []).append(
                peak_rss_bytes([PY, "-m", "gpuscope", "runs", "--db", str(stores[k])]))
        if tui:
            for k in order:
                tui_runs.setdefault(f"first paint/{k}", []).append(_child("first-paint", stores[k]))
                tui_runs.setdefault(f"ops/{k}", []).append(_child("tui-ops", stores[k]))
    ks = list(stores)
    same = {w: same_analysis(docs[f"{w}/{ks[0]}"], docs[f"{w}/{ks[1]}"]) for w in ("first", "last")}
    out: dict[str, Any] = {"first_ids": first_ids, "last_ids": last_ids, "same_analysis_in_both_stores": same,
                           "wall_s": {k: stats(v) for k, v in walls.items()},
                           "maxrss_bytes": {k: statistics.median(v) for k, v in rss.items()}}
    if tui:
        tui_out: dict[str, Any] = {}
        for key, ds in tui_runs.items():
            for field in ds[0]:
                if isinstance(ds[0][field], (int, float)) and not isinstance(ds[0][field], bool):
                    tui_out[f"{key}/{field}"] = stats([float(d[field]) for d in ds])
        out["tui"] = tui_out
    return out


# --- the report ----------------------------------------------------------------------------------


def text(result: dict[str, Any]) -> str:
    m = result["measured"]
    w, r = m["wall_s"], m["maxrss_bytes"]
    floor = w["floor"]["median"]
    ks = result["store_keys"]
    lines = [f"floor (python -c \"{FLOOR_CODE}\"): {floor:.3f} s median "
             f"[{w['floor']['min']:.3f}-{w['floor']['max']:.3f}], {len(w['floor']['all'])} runs",
             "", f"{'command':34s}" + "".join(f"{k + ' runs':>34s}" for k in ks) + "   10k/1k after floor",
             f"{'':34s}" + "".join(f"{'median [min-max] s, after floor':>34s}" for _ in ks)]
    labels = {"runs --json": "runs --json", "runs text": "runs (text)", "analyze first": "analyze FIRST --json",
              "analyze last": "analyze LAST --json", "sql count": "sql SELECT count(*) FROM runs"}
    for key, label in labels.items():
        cells, after = [], []
        for k in ks:
            s = w[f"{key}/{k}"]
            after.append(s["median"] - floor)
            cells.append(f"{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}] {after[-1]:+.3f}")
        if key.startswith("analyze"):
            label += f" ({'/'.join(str(m[key[8:] + '_ids'][k]) for k in ks)})"
        ratio = f"{after[1] / after[0]:.1f}x" if after[0] > 0.005 else "-"
        lines.append(f"{label:34s}" + "".join(f"{c:>34s}" for c in cells) + f"   {ratio:>8s}")
    lines.append("")
    lines.append("peak RSS (MiB, median): " + "; ".join(
        f"{key} {k}: {r[f'{key}/{k}'] / 2**20:.0f}" for key in ("runs --json", "runs text") for k in ks) +
        f"; floor {r['floor'] / 2**20:.0f}")
    same = m["same_analysis_in_both_stores"]
    lines.append(f"same analysis of the first / last run in both stores: {same['first']} / {same['last']}")
    if "tui" in m:
        t = m["tui"]
        lines.append("")
        lines.append(f"{'TUI runs screen (headless 160x48)':34s}" + "".join(f"{k + ' runs':>34s}" for k in ks))
        rows = [("first paint/{k}/runs_filled_s", "first paint, from spawn (s)"),
                ("first paint/{k}/imports_s", "  of which imports (s)"),
                ("first paint/{k}/first_frame_s", "  first frame (s)"),
                ("ops/{k}/open_s", "open runs screen, warm app (s)"),
                ("ops/{k}/open_show_s", "  in the screen's show() (s)"),
                ("ops/{k}/open_table_measure_s", "  in DataTable's measuring (s)"),
                ("ops/{k}/filter_s", f"type filter '/{FILTER_TEXT}' (s)"),
                ("ops/{k}/filter_show_s", "  in show() (s)"),
                ("ops/{k}/filter_table_measure_s", "  in DataTable's measuring (s)"),
                ("ops/{k}/sort_s", "s: sort by name (s)"),
                ("ops/{k}/sort_show_s", "  in show() (s)"),
                ("ops/{k}/sort_table_measure_s", "  in DataTable's measuring (s)"),
                ("ops/{k}/idle_core_pct", f"idle on the screen (% core, {IDLE_S:g} s)")]
        for pat, label in rows:
            cells = []
            for k in ks:
                s = t.get(pat.format(k=k))
                cells.append("-" if s is None else f"{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}]")
            lines.append(f"{label:34s}" + "".join(f"{c:>34s}" for c in cells))
        shown = "; ".join(f"{k}: {t[f'first paint/{k}/rows_shown']['median']:.0f} rows at first paint, "
                          f"{t[f'ops/{k}/rows_filtered']['median']:.0f} after the filter" for k in ks)
        lines.append(f"  ({shown})")
    p = result["parts"]
    lines.append("")
    lines.append("parts, in one process (median ms):")
    for k in ks:
        lines.append(f"  {k} runs: " + ", ".join(f"{name[:-2]} {v * 1e3:.0f}" for name, v in p[k].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="repeats per measurement, at least 3 (default 3)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "gpuscope-bench" / "scale")
    ap.add_argument("--no-tui", action="store_true", help="skip the TUI measurements")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, db, *rest = a.child
        doc = (child_tui_ops(db) if kind == "tui-ops" else multiply_runs(Path(db), int(rest[0])) if kind == "multiply"
               else parts(Path(db), int(rest[0])))
        print(json.dumps(doc))
        return 0
    if a.repeat < 3:
        print("bench_runs10k: --repeat must be at least 3", file=sys.stderr)
        return 2
    a.cache.mkdir(parents=True, exist_ok=True)
    compile_gpuscope()
    from bench_scale import store_of_1000_runs

    try:
        src = store_of_1000_runs(a.cache)
        big, built = store_of_10000_runs(a.cache, src)
        n_src = len(json.loads(gs("runs", "--db", str(src), "--json").stdout))
        n_big = len(json.loads(gs("runs", "--db", str(big), "--json").stdout))
        stores = {f"{n_src:,}": src, f"{n_big:,}": big}
        measured = measure(stores, a.repeat, tui=not a.no_tui)
    except ChildFailed as exc:
        print(f"bench_runs10k: {exc}", file=sys.stderr)
        return 1
    log("parts ...")
    result = {"machine": machine(), "stores": {k: str(v) for k, v in stores.items()}, "store_keys": list(stores),
              "store_10000": built, "measured": measured,
              # a fresh process per store: nothing one store's reads left in memory helps the other's
              "parts": {k: json.loads(_check(run_child([PY, __file__, "--child", "parts", str(db), str(a.repeat)],
                                                       cwd=REPO), "the parts child").stdout.strip().splitlines()[-1])
                        for k, db in stores.items()}}
    if a.json:
        json.dump(result, sys.stdout, indent=1, default=str)
        print()
    else:
        print(text(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
