"""`gpuscope profile [RUN] [--duration S]`: open a profiler window now in a running `gpuscope run`."""
from __future__ import annotations

import argparse
import shlex
import time
from typing import Any

from .common import positive_float, print_json

HELP = "open a profiler window now in a running `gpuscope run` (from another terminal)"
DESCRIPTION = (
    "Ask the Python processes of a run that is recording to open a profiler window now: its GPU processes (those "
    "the run's telemetry saw on a GPU; every process that imported torch when it saw none). Prints which "
    "processes opened a window (pid, name) and which skipped it and why, then waits until the windows are "
    "written (--no-wait: does not). RUN is a run id or name; default: the newest run that is recording. A "
    "program that is a vLLM or SGLang server is asked through its own profiler endpoint instead, when gpuscope "
    "knows how. Exit 2 for a run that is not recording, whose gpuscope is gone, or that runs with --no-profile; "
    "1 when no process opened a window."
)
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("run", nargs="?", metavar="RUN", help="run id or name (default: the newest run recording)")
    parser.add_argument("--duration", type=positive_float, default=None, metavar="S",
                        help="seconds the window stays open (default: the run's --profile-duration)")
    parser.add_argument("--no-wait", action="store_true",
                        help="return once the processes answered, without waiting for the windows to be written")


def _engine_endpoint(command: str | None, pids: list[int]) -> Any:
    """The serving engine's own profiler endpoint when the program is such a server and
    :mod:`gpuscope.run.engines` (optional) knows it; None otherwise."""
    try:
        from ..run import engines
    except ImportError:
        return None
    find = getattr(engines, "find_engine", None)
    if find is None or not command:
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = command.split()
    try:
        return find(argv, pids)
    except Exception:  # an engine that cannot be reached is asked through the request file
        return None


def _run_processes(owner_pid: int | None) -> list[int]:
    """The run's processes (the wrapper's descendants, the program's root first), [] when
    psutil cannot list them."""
    if owner_pid is None:
        return []
    try:
        import psutil

        return [p.pid for p in psutil.Process(owner_pid).children(recursive=True)]
    except Exception:  # no psutil, the wrapper gone, access denied
        return []


def run(args: argparse.Namespace) -> int:
    """Ask for the window, print the answers; 0 when a window opened."""
    from pathlib import Path

    from ..errors import GpuscopeError
    from ..run import requests
    from ..textsafe import visible
    from .common import db_path

    db = Path(db_path(args))
    target = requests.recording_run(db, args.run)
    duration = args.duration if args.duration is not None else float(target.profile.get("duration_s") or 3.0)
    label = f"run {target.id} ({target.name})"
    armed = requests.armed_processes(target.run_dir)
    engine = _engine_endpoint(target.command, _run_processes(target.owner_pid) or [a.pid for a in armed])
    doc: dict[str, Any] = {"run_id": target.id, "run_name": target.name, "run_dir": str(target.run_dir),
                           "duration_s": duration}
    if engine is not None:
        name = str(getattr(engine, "name", None) or type(engine).__name__)
        url = str(getattr(engine, "url", "") or "")
        try:
            started = engine.start_profile()
            time.sleep(duration)  # the engine's window: it records until stop_profile
            stopped = engine.stop_profile()
        except Exception as exc:
            raise GpuscopeError(f"{label}: {name}'s own profiler did not answer ({exc}); no window") from None
        doc.update({"via": "engine", "engine": {"name": name, "url": url, "start_answer": str(started),
                                                "stop_answer": str(stopped)},
                    "request": None, "asked": None, "opened": [], "skipped": [], "silent": [], "written": []})
        if args.json:
            print_json(doc)
        else:
            print(visible(f"{label}: the program is a {name} server: its own profiler ({url}) recorded {duration:g} s "
                          "(gpuscope starts no second profiler in its processes)"))
            print(visible(f"{name} answered: {stopped}"))
        return 0
    if not armed:
        raise GpuscopeError(f"{label}: no process of the run has imported torch yet (windows open in Python processes "
                            "once they import torch): no window")
    request, asked = requests.ask_window(target.run_dir, duration, "gpuscope profile")
    if not args.json:
        whom = ("every process that imported torch" if request.pids is None
                else f"its GPU process{'es' if len(asked) != 1 else ''}")
        print(visible(f"{label}: asked {whom} ({len(asked)}) for a {duration:g} s window"), flush=True)
    answers, silent = requests.wait_for_answers(target.run_dir, request, asked)
    names = {p: requests.process_name(p) for p in set(asked) | answers.answered}
    waited = False
    if answers.opened and not args.no_wait:
        if not args.json:
            print(f"{len(answers.opened)} window(s) opened; waiting until written (--no-wait does not)", flush=True)
        answers = requests.wait_for_windows(target.run_dir, request, answers)
        waited = True
    doc.update({
        "via": "request", "request": request.to_json(), "asked": asked,
        "opened": [{"pid": p, "name": names.get(p, "?"), "ts_ns": e.get("ts_ns"), "path": e.get("path")}
                   for p, e in sorted(answers.opened.items())],
        "skipped": [{"pid": p, "name": names.get(p, "?"), "reason": why} for p, why in sorted(answers.skipped.items())],
        "silent": [{"pid": p, "name": names.get(p, "?")} for p in sorted(silent)],
        "written": [{"pid": p, "name": names.get(p, "?"), "path": w.get("path"), "start_ns": w.get("start_ns"),
                     "end_ns": w.get("end_ns")} for p, w in sorted(answers.written.items())],
        "waited_for_windows": waited,
    })
    if args.json:
        print_json(doc)
    else:
        for line in render_answers(doc):
            print(visible(line))
    return 0 if answers.opened else 1


def render_answers(doc: dict[str, Any]) -> list[str]:
    """The text answer: a line per process that opened, skipped or did not answer, and per
    window written."""
    lines = []
    for o in doc["opened"]:
        lines.append(f"opened: pid {o['pid']} ({o['name']})")
    for s in doc["skipped"]:
        lines.append(f"skipped: pid {s['pid']} ({s['name']}): {s['reason']}")
    for s in doc["silent"]:
        lines.append(f"no answer: pid {s['pid']} ({s['name']}) (busy outside Python, or stuck)")
    for w in doc["written"]:
        dur = (w["end_ns"] - w["start_ns"]) / 1e9 if isinstance(w.get("end_ns"), int) and isinstance(
            w.get("start_ns"), int) else None
        lines.append(f"written: pid {w['pid']} ({w['name']}): {w['path']}" + (f" ({dur:.1f} s)" if dur is not None else ""))
    if doc["waited_for_windows"]:
        unwritten = sorted({o["pid"] for o in doc["opened"]} - {w["pid"] for w in doc["written"]})
        for p in unwritten:
            lines.append(f"not written yet: pid {p} (it is written when the window ends, or at the process's exit)")
    elif doc["opened"]:
        lines.append("the traces are stored when the run ends")
    if not doc["opened"]:
        lines.append("no window opened")
    return lines

