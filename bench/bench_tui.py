#!/usr/bin/env python3
"""The terminal UI's speed goals (issue 16): numbers, printed next to their goals.

    python bench/bench_tui.py                  # all three; inputs cached in ~/.cache/gpuscope-bench/tui
    python bench/bench_tui.py --only live      # first-paint | run-screen | live
    python bench/bench_tui.py --json

1. **first paint, 100 runs**: a store with 100 ingested runs (small synthetic traces, built
   once into the cache); a fresh ``python`` process imports the app, starts it headless
   (Textual's ``run_test``, 160x48), shows the live screen, then the runs screen until its
   worker has filled the table with the 100 runs. Times are from just before the process is
   spawned, so interpreter start-up and imports count. Goal: the runs table filled < 1 s.
2. **run screen, 1.2M events**: ``bench/scale_trace.py`` makes 11 back-to-back copies of the
   shared 109k-event A100 trace (``../shared/data/traces/hta/a100_sxm4_80gb_training_large.json.gz``)
   and ``gpuscope ingest`` stores it, once, into the cache. A fresh process starts the app,
   then ``open_run`` and waits until the run screen's workers are done (its reads and
   analysis). Goal < 1 s. The analysis read alone (``tui.data.analysis``) is printed next to it.
3. **live, 8 GPUs at 10 Hz**: the synthetic recording's two GPUs copied into eight
   (``RecordingWriter``), played with ``--replay`` at ``--interval 0.1``; the CPU time of the
   whole process (all threads) over ``--seconds`` after a 3 s warm-up, as a share of one
   core. Measured twice: headless (``run_test``) and, where tmux is installed, as
   ``gpuscope tui`` in a real 160x48 terminal (tmux), which also pays for writing to the
   terminal. Goal < 10 % of one core. For context, the same in tmux at the default 1 s refresh.

Peers: none run on the same input. nvitop and nvtop read a real GPU's NVML and cannot play a
recording, and no other tool opens gpuscope's store; the benchmark says so.
No asserts: the exit code is 0 whatever the numbers (``--check``: 1 when a goal is missed).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
RECORDING = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"
BIG_SOURCE = REPO.parent / "shared" / "data" / "traces" / "hta" / "a100_sxm4_80gb_training_large.json.gz"
BIG_COPIES = 11  # 11 x 109k events: the 1.2M-event run
N_RUNS = 100
GOALS = {"first_paint_s": 1.0, "run_screen_s": 1.0, "live_core_pct": 10.0}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- inputs, built once into the cache -----------------------------------------------------------


def _small_trace(path: Path, k: int) -> Path:
    """A small trace: a few ops, each launching a GEMM or an elementwise kernel; ``k`` varies it."""
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "python_function", "name": "bench", "pid": 100,
                                     "tid": 100, "ts": 0.0, "dur": 5000.0, "args": {}}]
    ts = 10.0
    for i in range(20):
        ext, corr = 1000 + i, 5000 + i
        n = 256 * (1 + (i + k) % 4)
        gemm = i % 2 == 0
        name = "aten::mm" if gemm else "aten::add"
        dims = [[n, n], [n, n]] if gemm else [[n, n], [n, n]]
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": 30.0,
                       "args": {"External id": ext, "Input Dims": dims, "Input type": ["float", "float"]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                       "ts": ts + 5, "dur": 5.0, "args": {"correlation": corr, "External id": ext}})
        kname = "ampere_sgemm_128x64_nn" if gemm else "vectorized_elementwise_kernel"
        events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": ts + 12,
                       "dur": 20.0 + (i * 7 + k) % 50, "args": {"device": 0, "stream": 7, "correlation": corr}})
        ts += 100.0
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _gpuscope(*args: str) -> None:
    p = subprocess.run([PY, "-m", "gpuscope", *args], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"bench_tui: gpuscope {' '.join(args[:2])} failed: {p.stderr.strip()[-500:]}")


def build_store_of_runs(db: Path, n_runs: int, traces: Path, what: str) -> Path:
    """A store at ``db`` with ``n_runs`` runs, each the ingest of one of up to 100 small traces
    (made in ``traces``), built once under a temporary name; ``what`` names the caller in errors."""
    if db.exists():
        return db
    log(f"building {db} ({n_runs} ingests in one process, once)")
    tmp = db.with_name(db.stem + ".tmp.duckdb")
    tmp.unlink(missing_ok=True)
    traces.mkdir(parents=True, exist_ok=True)
    # one process, many ingests: the CLI's main() in a loop (an interpreter start-up per run
    # would only make the build slower)
    paths = [str(_small_trace(traces / f"t{k:03d}.json", k)) for k in range(min(n_runs, 100))]
    code = ("import sys; from gpuscope.cli import main\n"
            "db, n, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]\n"
            "for k in range(n):\n"
            "    rc = main(['ingest', '--db', db, '--name', f'bench-run-{k:04d}', '-q', paths[k % len(paths)]])\n"
            "    assert rc == 0, (k, rc)\n")
    p = subprocess.run([PY, "-c", code, str(tmp), str(n_runs), *paths], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"{what}: building the {n_runs}-run store failed: {p.stderr.strip()[-800:]}")
    tmp.rename(db)
    return db


def store_of_100_runs(cache: Path) -> Path:
    return build_store_of_runs(cache / "runs100.duckdb", N_RUNS, cache / "small_traces", "bench_tui")


def store_of_big_run(cache: Path) -> Path | None:
    db = cache / "big.duckdb"
    if db.exists():
        return db
    if not BIG_SOURCE.exists():
        return None
    trace = cache / f"a100_large_x{BIG_COPIES}.json.gz"
    if not trace.exists():
        log(f"building {trace} (bench/scale_trace.py --copies {BIG_COPIES}, once)")
        p = subprocess.run([PY, str(REPO / "bench" / "scale_trace.py"), str(BIG_SOURCE), str(trace) + ".tmp",
                            "--copies", str(BIG_COPIES)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"bench_tui: scale_trace failed: {p.stderr.strip()[-500:]}")
        Path(str(trace) + ".tmp").rename(trace)
    log(f"ingesting {trace.name} into {db} (once)")
    tmp = cache / "big.tmp.duckdb"
    tmp.unlink(missing_ok=True)
    _gpuscope("ingest", "--db", str(tmp), "--name", f"a100-large-x{BIG_COPIES}", "-q", str(trace))
    tmp.rename(db)
    return db


def recording_of_8_gpus(cache: Path) -> Path:
    """The synthetic recording's GPUs copied into eight (gpu0..gpu7), the host kept."""
    from gpuscope.collectors.base import Sample
    from gpuscope.collectors.replay import RecordingWriter, load_recording

    out = cache / "eight_gpus.jsonl"
    if out.exists():
        return out
    rec = load_recording(RECORDING)
    gpus = [d for d in rec.devices if d.kind == "gpu"]
    others = [d for d in rec.devices if d.kind != "gpu"]
    copies: dict[str, list[str]] = {d.key: [] for d in gpus}
    devices = []
    for i in range(8):
        src = gpus[i % len(gpus)]
        key = f"gpu{i}"
        copies[src.key].append(key)
        uid = src.uuid[:-4] + f"{i:04d}" if src.uuid else None
        devices.append(dataclasses.replace(src, key=key, index=i, uuid=uid))
    devices += others
    writer = RecordingWriter(out, devices, interval_s=rec.interval_s, vendors=[], synthetic=True,
                             note="SYNTHETIC: bench/bench_tui.py, the synthetic H100/A100 recording's GPUs copied "
                                  "into eight", header={"vendors": rec.header.get("vendors") or []})
    for tick, rows in enumerate(rec.ticks):
        samples = []
        for row in rows:
            keys = copies.get(row["device"], [row["device"]])
            for key in keys:
                samples.append(Sample(device=key, ts_ns=int(row["ts_ns"]), values=dict(row.get("values") or {}),
                                      lost=bool(row.get("lost"))))
        writer.write_tick(tick, samples)
    writer.close()
    load_recording(out)  # it reads back
    return out


# --- children: one fresh process per measurement -------------------------------------------------


def _busy_workers(app: Any, screen: Any) -> list[Any]:
    from textual.worker import WorkerState

    return [w for w in app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)
            and (w.node is screen or screen in getattr(w.node, "ancestors_with_self", ()))]


async def _settle(app: Any, pilot: Any, timeout_s: float = 120) -> None:
    """Wait until the current screen has no worker running, twice in a row, and has repainted."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:
        await pilot.pause()
        quiet = quiet + 1 if not _busy_workers(app, app.screen) else 0
        if quiet < 2:
            await asyncio.sleep(0.005)


def child_first_paint(db: str) -> dict[str, Any]:
    out: dict[str, Any] = {"t_start": time.time()}
    from gpuscope.tui.app import GpuscopeApp

    out["t_imported"] = time.time()
    app = GpuscopeApp(db=Path(db), replay=None, interval_s=1.0)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            out["t_first_frame"] = time.time()
            await pilot.press("2")
            await _settle(app, pilot)
            out["t_runs_filled"] = time.time()
            from textual.widgets import DataTable

            tables = list(app.screen.query(DataTable))
            out["rows_shown"] = max((t.row_count for t in tables), default=0)

    asyncio.run(go())
    return out


def child_run_screen(db: str) -> dict[str, Any]:
    from gpuscope.tui import data
    from gpuscope.tui.app import GpuscopeApp

    out: dict[str, Any] = {}
    run_id = data.runs(Path(db))[0]["id"]
    t0 = time.perf_counter()
    doc = data.analysis(Path(db), run_id)
    out["analysis_alone_s"] = time.perf_counter() - t0
    out["kernels"] = sum(k.get("count") or 0 for k in doc.get("kernels") or [])
    app = GpuscopeApp(db=Path(db), replay=None, interval_s=1.0)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await _settle(app, pilot)
            t1 = time.perf_counter()
            app.open_run(run_id)
            await _settle(app, pilot)
            out["run_screen_s"] = time.perf_counter() - t1
            out["mode"] = app.current_mode

    asyncio.run(go())
    return out


def child_live_headless(recording: str, seconds: float) -> dict[str, Any]:
    from gpuscope.tui.app import GpuscopeApp

    out: dict[str, Any] = {}
    app = GpuscopeApp(db=Path(tempfile.mkdtemp()) / "none.duckdb", replay=Path(recording), interval_s=0.1)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            await asyncio.sleep(3.0)
            c0, w0 = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            out["cpu_s"], out["wall_s"] = time.process_time() - c0, time.monotonic() - w0
            out["mode"] = app.current_mode

    asyncio.run(go())
    out["core_pct"] = 100 * out["cpu_s"] / out["wall_s"]
    return out


def _run_child(kind: str, *args: str) -> dict[str, Any]:
    t_spawn = time.time()
    p = subprocess.run([PY, __file__, "--child", kind, *args], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"bench_tui: the {kind} child failed:\n{p.stderr.strip()[-2000:]}")
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    doc["t_spawn"] = t_spawn
    return doc


# --- the measurements ----------------------------------------------------------------------------


def first_paint(cache: Path, repeat: int) -> dict[str, Any]:
    db = store_of_100_runs(cache)
    runs = []
    for _ in range(repeat):
        d = _run_child("first-paint", str(db))
        runs.append({"imports_s": d["t_imported"] - d["t_spawn"], "first_frame_s": d["t_first_frame"] - d["t_spawn"],
                     "runs_filled_s": d["t_runs_filled"] - d["t_spawn"], "rows_shown": d["rows_shown"]})
    return {"runs_in_store": N_RUNS, "repeats": runs,
            "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
            "goal_s": GOALS["first_paint_s"], "value_s": statistics.median(r["runs_filled_s"] for r in runs)}


def run_screen(cache: Path, repeat: int) -> dict[str, Any]:
    db = store_of_big_run(cache)
    if db is None:
        return {"skipped": f"{BIG_SOURCE} not available (the shared traces checkout is absent)"}
    runs = [_run_child("run-screen", str(db)) for _ in range(repeat)]
    import gzip

    with gzip.open(BIG_SOURCE, "rt", encoding="utf-8") as f:
        events = BIG_COPIES * len(json.load(f)["traceEvents"])  # what scale_trace wrote
    return {"events_in_run": events, "kernels_in_run": runs[0]["kernels"], "repeats": runs,
            "analysis_alone_s": statistics.median(r["analysis_alone_s"] for r in runs),
            "goal_s": GOALS["run_screen_s"], "value_s": statistics.median(r["run_screen_s"] for r in runs)}


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def live_in_tmux(recording: Path, seconds: float, interval_s: float = 0.1) -> dict[str, Any]:
    if shutil.which("tmux") is None:
        return {"skipped": "tmux is not installed"}
    sock = f"gpuscope-bench-{uuid.uuid4().hex[:8]}"
    db = Path(tempfile.mkdtemp()) / "none.duckdb"
    cmd = shlex.join([PY, "-m", "gpuscope", "tui", "--db", str(db), "--replay", str(recording), "--interval", f"{interval_s:g}"])
    tmux = ["tmux", "-L", sock]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "160", "-y", "48", "-e", "TERM=xterm-256color",
                        "-c", str(REPO), f"exec {cmd}"], check=True, capture_output=True)
        pid = int(subprocess.run([*tmux, "display-message", "-p", "-t", "b", "#{pane_pid}"], check=True,
                                 capture_output=True, text=True).stdout.strip())
        time.sleep(3.0)
        c0, w0 = _proc_cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = _proc_cpu_s(pid), time.monotonic()
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True).stdout
        subprocess.run([*tmux, "send-keys", "-t", "b", "q"], capture_output=True)
        time.sleep(0.5)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    return {"cpu_s": c1 - c0, "wall_s": w1 - w0, "core_pct": 100 * (c1 - c0) / (w1 - w0),
            "gpus_on_screen": sum(f"gpu{i}" in screen or f"GPU {i}" in screen or f"[{i}]" in screen for i in range(8))}


def live(cache: Path, seconds: float) -> dict[str, Any]:
    rec = recording_of_8_gpus(cache)
    headless = _run_child("live-headless", str(rec), str(seconds))
    term = live_in_tmux(rec, seconds)
    # context: the same at the default 1 s refresh, to tell the per-tick cost from the idle app's
    term_1hz = live_in_tmux(rec, seconds, interval_s=1.0)
    value = term.get("core_pct", headless["core_pct"])
    return {"gpus": 8, "hz": 10, "headless": headless, "tmux": term, "tmux_1hz": term_1hz,
            "goal_pct": GOALS["live_core_pct"], "value_pct": value}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("first-paint", "run-screen", "live"), action="append")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuscope-bench" / "tui",
                    help="where the stores, the scaled trace and the 8-GPU recording are built once")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="live: how long the CPU is measured")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        fn = {"first-paint": child_first_paint, "run-screen": child_run_screen,
              "live-headless": lambda r, s: child_live_headless(r, float(s))}[kind]
        print(json.dumps(fn(*rest)))
        return 0

    a.cache.mkdir(parents=True, exist_ok=True)
    only = a.only or ["first-paint", "run-screen", "live"]
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    if "first-paint" in only:
        log("first paint, 100 runs ...")
        result["first_paint"] = first_paint(a.cache, a.repeat)
    if "run-screen" in only:
        log("run screen, 1.2M events ...")
        result["run_screen"] = run_screen(a.cache, a.repeat)
    if "live" in only:
        log("live, 8 GPUs at 10 Hz ...")
        result["live"] = live(a.cache, a.seconds)
    result["peers"] = ("none: nvitop and nvtop read a real GPU's NVML and cannot play a recording, and no other "
                       "tool opens gpuscope's store")
    missed = []
    lines = []
    if "first_paint" in result:
        fp = result["first_paint"]
        m = fp["median"]
        ok = fp["value_s"] < fp["goal_s"]
        missed += [] if ok else ["first paint"]
        lines.append(f"first paint, {N_RUNS} runs:   {fp['value_s']:.2f} s to the filled runs table   goal < "
                     f"{fp['goal_s']:g} s   {'met' if ok else 'MISSED'}")
        lines.append(f"    (from spawn: imports {m['imports_s']:.2f} s, first frame {m['first_frame_s']:.2f} s, "
                     f"rows shown {m['rows_shown']:.0f}; median of {len(fp['repeats'])})")
    if "run_screen" in result:
        rs = result["run_screen"]
        if "skipped" in rs:
            lines.append(f"run screen, 1.2M events: skipped: {rs['skipped']}")
        else:
            ok = rs["value_s"] < rs["goal_s"]
            missed += [] if ok else ["run screen"]
            lines.append(f"run screen, 1.2M events:  {rs['value_s']:.2f} s from open_run to settled   goal < "
                         f"{rs['goal_s']:g} s   {'met' if ok else 'MISSED'}")
            lines.append(f"    (the run: {rs['events_in_run']} trace events, {rs['kernels_in_run']} kernels; the analysis read alone "
                         f"{rs['analysis_alone_s']:.2f} s; median of {len(rs['repeats'])})")
    if "live" in result:
        lv = result["live"]
        ok = lv["value_pct"] < lv["goal_pct"]
        missed += [] if ok else ["live"]
        t = lv["tmux"]
        where = (f"tmux 160x48 {t['core_pct']:.1f} %, {t['gpus_on_screen']} GPUs on screen; at 1 Hz "
                 f"{lv['tmux_1hz']['core_pct']:.1f} %" if "core_pct" in t else f"tmux: {t.get('skipped')}")
        lines.append(f"live, 8 GPUs at 10 Hz:    {lv['value_pct']:.1f} % of one core   goal < {lv['goal_pct']:g} %   "
                     f"{'met' if ok else 'MISSED'}")
        lines.append(f"    ({where}; headless {lv['headless']['core_pct']:.1f} %; over {a.seconds:g} s after 3 s)")
    lines.append(f"peers: {result['peers']}")
    result["missed"] = missed
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(lines))
    return 1 if (a.check and missed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
