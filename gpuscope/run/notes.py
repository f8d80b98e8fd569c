"""What the run's summary says about its profiler windows, in sentences: why a window never
opened, was dropped, recorded nothing, or caught no GPU work. Pure: from the bootstrap's events
(``profiler.jsonl``), the windows written (``windows.jsonl``) and the run's summary."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..textsafe import visible
from .summary import RunSummary

if TYPE_CHECKING:  # pragma: no cover
    from .wrapper import ProfileConfig

__all__ = ["profiler_notes", "window_missed_gpu_note"]


def window_missed_gpu_note(profile: ProfileConfig, summary: RunSummary | Mapping[str, Any]) -> str | None:
    """A sentence when the traces hold no GPU kernel while the machine's GPUs were sampled: the
    window opened where the program did no GPU work yet (a model still loading on the CPU, as the
    README's command did on an H100 machine whose model took longer than the delay to build),
    and the analysis alone would only say that the trace is CPU-only."""
    if isinstance(summary, RunSummary):  # (or its document's keys)
        summary = {"analysis": summary.analysis, "telemetry": summary.telemetry, "traces": summary.traces,
                   "windows": summary.windows}
    analysis = summary.get("analysis") or {}
    gpus = (summary.get("telemetry") or {}).get("gpus") or []
    if not summary.get("traces") or analysis.get("gpu_activity", True) or not gpus:
        return None
    n = len(summary.get("windows") or []) or 1
    if profile.when != "time":  # busy or marks: the window came when the program said or showed
        return (f"the profiler window{'s' if n > 1 else ''} recorded no GPU kernel, yet {len(gpus)} GPU(s) were "
                "sampled: the program did no GPU work in its Python processes while it was open")
    end = profile.delay_s + profile.duration_s
    return (f"the profiler window{'s' if n > 1 else ''} recorded no GPU kernel, yet {len(gpus)} GPU(s) were "
            f"sampled: the window ({profile.delay_s:g}-{end:g} s after the program imported torch) came while "
            "it did no GPU work (still loading its model, say); open it once the GPUs are busy with "
            "--profile-when busy, later with --profile-delay, or add windows with --profile-windows")



def profiler_notes(profile: ProfileConfig, events: list[dict[str, Any]], windows: list[dict[str, Any]],
                   traces: int, started_ns: int, stopped_ns: int | None,
                   empty_traces: Collection[str] = ()) -> list[str]:
    """What happened to the profiler windows, in sentences, when it is not simply "each
    window was written": profiling off, a program that never imported torch, a process that
    ended or was interrupted before its window was due, a window opened and never written, a
    window dropped unwritten (its ``window_discarded`` event's reason), a window written that
    recorded no activity (``empty_traces``: the trace files ingest found metadata only in)."""
    if not profile.enabled:
        return ["profiling off (--no-profile or --profile-windows 0): telemetry only, no trace"]
    armed = {e.get("pid"): e for e in events if e.get("event") == "armed"}
    by_kind: dict[str, dict[Any, dict[str, Any]]] = {}
    for e in events:
        by_kind.setdefault(str(e.get("event")), {}).setdefault(e.get("pid"), e)
    opened = [e for e in events if e.get("event") == "window_open"]
    discarded = {e.get("path") for e in events if e.get("event") == "window_discarded"}
    written_paths = {w.get("path") for w in windows}

    def after(ns: Any, since: int) -> str:
        return f"{max(((ns if isinstance(ns, int) else since) - since) / 1e9, 0.0):.1f} s"

    notes: list[str] = []
    empty = set(empty_traces)
    if not armed:
        if traces:
            # traces the program wrote itself (gpuscope.profile, vLLM's profiler)
            return [f"{visible(Path(t).name)}: the trace recorded no activity" for t in sorted(empty)]
        if stopped_ns is not None:
            notes.append(f"no profiler window: interrupted {after(stopped_ns, started_ns)} after the start, before "
                         "the program imported torch (windows open in Python processes once they import torch)")
        else:
            notes.append("no profiler window: the program never imported torch (windows open in Python processes "
                         "once they import torch)")
        return notes
    opened_pids = {e.get("pid") for e in opened if e.get("path") not in discarded}
    ended_early = []
    # --profile-when busy: the wrapper asks, and busy.busy_notes says whom and what came of it
    for pid, e in (armed.items() if profile.when != "busy" else ()):
        if pid in opened_pids:
            continue
        armed_ts = e.get("ts_ns")
        armed_ns: int = armed_ts if isinstance(armed_ts, int) else started_ns
        exit_ns = (by_kind.get("exit", {}).get(pid) or {}).get("ts_ns")
        # why its own (scheduled) window did not open, as the bootstrap said it
        skipped = next((str(x.get("reason")) for x in events if x.get("event") == "window_skipped"
                        and x.get("pid") == pid and not x.get("request") and x.get("reason") not in (None, "exiting")),
                       None)
        if stopped_ns is not None and (not isinstance(exit_ns, int) or stopped_ns <= exit_ns):
            if pid in by_kind.get("window_discarded", {}):
                due = ", while its window was starting (dropped, nothing recorded)"
            elif profile.when == "time" and stopped_ns < armed_ns + int(profile.delay_s * 1e9):
                due = f", before its window was due (--profile-delay {profile.delay_s:g} s)"
            else:
                due = ""
            notes.append(f"pid {pid}: no profiler window: interrupted {after(stopped_ns, armed_ns)} after it imported "
                         f"torch{due}")
        elif pid in by_kind.get("window_waiting", {}):
            notes.append(f"pid {pid}: no profiler window: it never used a GPU (on a machine with GPUs a process "
                         "opens its windows once it uses one; an engine's API server or tokenizer never does)")
        elif skipped is not None:
            notes.append(f"pid {pid}: no profiler window: {visible(skipped)}")
        elif profile.when == "marks":
            notes.append(f"pid {pid}: no profiler window: fewer than --profile-after-marks {profile.after_marks} "
                         "gpuscope.mark() calls in this process")
        elif isinstance(exit_ns, int) and exit_ns < armed_ns + int(profile.delay_s * 1e9):
            ended_early.append(pid)
        else:
            notes.append(f"pid {pid}: no profiler window opened (its gpuscope[{pid}] lines on stderr say why)")
    if ended_early:
        who = f"pid {ended_early[0]}" if len(ended_early) == 1 else f"{len(ended_early)} processes"
        notes.append(f"{who}: no profiler window: ended within --profile-delay ({profile.delay_s:g} s) of importing "
                     "torch, before the window was due")
    for e in opened:
        path = e.get("path")
        if path in empty:
            empty.discard(path)
            interrupted = (" (closed at exit, after the interrupt)" if stopped_ns is not None
                           and isinstance(e.get("ts_ns"), int) and e["ts_ns"] < stopped_ns else "")
            notes.append(f"pid {e.get('pid')}: the profiler window opened {after(e.get('ts_ns'), started_ns)} into the "
                         f"run recorded no activity{interrupted}: the program ran no ops while it was open (it waited, "
                         "slept, or sat in a long import); open it later with --profile-delay")
        elif path in discarded and e.get("pid") in opened_pids:
            # (a process whose only window was dropped has its note above)
            reason = next((str(d.get("reason")) for d in events if d.get("event") == "window_discarded"
                           and d.get("path") == path and d.get("reason")), "no reason given")
            notes.append(f"pid {e.get('pid')}: the profiler window opened {after(e.get('ts_ns'), started_ns)} into the "
                         f"run was dropped unwritten{' by the interrupt' if stopped_ns is not None else ''} ({reason})")
        elif path not in written_paths and path not in discarded:
            notes.append(f"pid {e.get('pid')}: the profiler window opened {after(e.get('ts_ns'), started_ns)} into the "
                         "run was never written (the process ended without closing it: killed?)")
    notes.extend(f"{visible(Path(t).name)}: the trace recorded no activity" for t in sorted(empty))
    return notes
