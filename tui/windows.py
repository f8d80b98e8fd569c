"""The ``p`` key of the live and run screens: open a profiler window now in a run that is
recording, through :mod:`gpuscope.run.requests` (the same request ``gpuscope profile`` writes),
and say which processes opened one. Runs in a worker thread: the answer takes up to a minute
(a process answers once its main thread runs Python again and its profiler has started)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscope.errors import GpuscopeError, InputError

#: the source the request carries (``window-requests.jsonl``)
SOURCE = "gpuscope tui"


def ask_window_now(db: Path, run_id: int | None, answer_timeout_s: float | None = None) -> tuple[str, str]:
    """Ask run ``run_id`` (None: the newest run that is recording) for a window of its own
    ``--profile-duration`` now and wait for the answers (not for the traces); (the message for a
    notification, its severity: ``information``, ``warning`` or ``error``)."""
    from gpuscope.run import requests

    try:
        run = requests.recording_run(db, run_id)
    except (InputError, GpuscopeError) as exc:
        return f"no window: {exc}", "warning"
    label = f"run {run.id} ({run.name})"
    if not requests.armed_processes(run.run_dir):
        return (f"{label}: no process has imported torch yet (windows open in Python processes once they import "
                "torch): no window", "warning")
    duration = float(run.profile.get("duration_s") or 3.0)
    try:
        request, asked = requests.ask_window(run.run_dir, duration, SOURCE)
    except InputError as exc:
        return f"{label}: no window: {exc}", "error"
    timeout = requests.ANSWER_TIMEOUT_S if answer_timeout_s is None else answer_timeout_s
    answers, silent = requests.wait_for_answers(run.run_dir, request, asked, timeout_s=timeout)
    parts = []
    if answers.opened:
        parts.append(f"a {duration:g} s window opened in " + ", ".join(
            f"pid {p} ({requests.process_name(p)})" for p in sorted(answers.opened)))
    if answers.skipped:
        parts.append("skipped by " + ", ".join(
            f"pid {p} ({requests.process_name(p)}): {why}" for p, why in sorted(answers.skipped.items())))
    if silent:
        parts.append("no answer from " + ", ".join(f"pid {p}" for p in sorted(silent)))
    if not parts:
        parts.append("no process answered (each one asked has ended)")
    return f"{label}: " + "; ".join(parts), "information" if answers.opened else "warning"


def start_window_request(screen: Any, run_id: int | None) -> None:
    """The ``p`` key on ``screen``: a notification now, the request and its answer in a worker
    thread, and a notification with the answer (from the worker, through the app's thread)."""
    app = screen.app
    which = f"run {run_id}" if run_id is not None else "the newest run recording"
    app.notify(f"asking {which} for a profiler window…")

    def work() -> None:
        message, severity = ask_window_now(app.db, run_id)
        try:
            app.call_from_thread(app.notify, message, severity=severity, timeout=10)
        except Exception:  # the app has gone meanwhile: nothing to tell
            pass

    screen.run_worker(work, thread=True, group="profile-window", exit_on_error=False, name="profile window")
