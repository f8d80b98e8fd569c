"""``gpuscope run --profile-when busy[=UTIL]``: open a window once the program's GPUs are busy.

Servers take seconds to minutes to load; a window a fixed time after ``import torch`` catches
the loading, not the serving. Here the wrapper watches the sampler's rows and, once the
program's GPUs have been busy at or above ``UTIL`` for :data:`BUSY_FOR_S` seconds in a row, asks
the processes that use those GPUs for a window through the run directory's requests file
(:mod:`gpuscope.run.requests`).

- :class:`BusyTrigger` is the decision, pure: fed each tick's rows, it says when to ask and whom.
- :class:`BusySink` is the sampler sink that feeds it, writes the requests, and keeps the
  run's GPU processes in :data:`~gpuscope.run.requests.GPU_PROCESSES_FILE` for ``gpuscope
  profile`` (in every mode).
- :func:`busy_notes` says in the run's summary when each window was asked for and who answered.

Whose utilisation: where the vendor reports it per process (NVML's process utilisation, AMD
SMI), the program's own share of a GPU (``proc_gpu_util``: the sum over the run's processes on
it), and only GPUs on which the run's processes were seen count as the program's; otherwise (no
per-process data: a replayed recording, a driver without process utilisation) the device's
utilisation (``gpu_util``) of every GPU.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..sinks.base import SampleBatch, SamplerInfo, SamplerStats, Sink

if TYPE_CHECKING:  # pragma: no cover
    from ..collectors.base import Sample
    from .requests import WindowRequest

__all__ = ["BUSY_FOR_S", "DEFAULT_BUSY_UTIL", "PROCESS_STALE_S", "BusyRequest", "BusySink", "BusyTrigger",
           "busy_notes", "busy_sink"]

#: How long the program's GPUs must stay busy, in a row, before a window is asked for: long
#: enough that a burst (a warm-up batch, one prefill during loading) does not take the window.
BUSY_FOR_S = 3.0
#: ``--profile-when busy`` without ``=UTIL``: 50 %.
DEFAULT_BUSY_UTIL = 0.5
#: A per-process reading older than this no longer says whose a GPU is (the collectors read
#: processes about once a second; a reading that stops coming means they stopped).
PROCESS_STALE_S = 5.0


@dataclass(frozen=True)
class BusyRequest:
    """The trigger's decision: ask for a window now (``ts_ns``, the tick that completed the
    busy stretch) in ``pids`` (None: every armed process, when no GPU names its processes)."""

    ts_ns: int
    pids: tuple[int, ...] | None
    #: the GPUs that were busy for :data:`BUSY_FOR_S`, by key
    devices: tuple[str, ...]


@dataclass
class _Device:
    #: the first tick of the current busy stretch (None: not busy at the last tick)
    busy_since_ns: int | None = None
    #: the newest per-process reading: when, the run's pids on the GPU, their utilisation
    proc_ns: int | None = None
    proc_pids: frozenset[int] = frozenset()
    proc_util: float | None = None


@dataclass
class BusyTrigger:
    """When to ask for a busy window, decided tick by tick (:meth:`feed`); no I/O, no clock.

    A GPU is busy at a tick when its utilisation (the program's share where per-process data
    says it, else the device's) is at least ``util`` (a ratio, 0..1); a reading missing at a
    tick ends the stretch. A window is asked for at the first tick at which some GPU of the
    program's has been busy for ``busy_for_s`` (from the first busy tick of its stretch to this
    one), at most ``windows`` times, the next no sooner than ``interval_s`` after the previous
    window's end (its request plus ``duration_s``) and only while a GPU is busy that long
    again. ``per_process`` False ignores per-process readings (a replay's are another
    machine's)."""

    util: float
    duration_s: float
    windows: int = 1
    interval_s: float = 0.0
    busy_for_s: float = BUSY_FOR_S
    per_process: bool = True
    #: the requests made so far
    requests: list[BusyRequest] = field(default_factory=list)
    #: the longest busy stretch seen, in seconds (for the note when no window was asked for)
    longest_s: float = 0.0
    #: ticks fed
    ticks: int = 0
    _devices: dict[str, _Device] = field(default_factory=dict)
    _not_before_ns: int | None = None

    def _share(self, d: _Device, s: Sample, ts_ns: int, tree: frozenset[int] | None) -> tuple[bool, float | None]:
        """(whether the GPU is the program's, its utilisation) at this tick."""
        if self.per_process and d.proc_ns is not None and ts_ns - d.proc_ns <= PROCESS_STALE_S * 1e9:
            pids = d.proc_pids if tree is None else d.proc_pids & tree
            if not pids:
                return False, None  # the run's processes are not on this GPU: someone else's work
            if d.proc_util is not None:
                return True, d.proc_util
        util = s.get("gpu_util")
        return True, float(util) if isinstance(util, (int, float)) else None

    def feed(self, rows: Sequence[Sample], *, tree: frozenset[int] | None = None, ready: bool = True) -> BusyRequest | None:
        """One tick's rows (every device's; host rows are passed over). ``tree``: the run's
        process tree now (per-process pids outside it are not the program's). ``ready``: a
        process can answer a request now (a due request waits for it, while the GPUs stay
        busy). The request to make now, or None."""
        gpu_rows = [s for s in rows if s.device != "host" and not s.device.startswith("host")]
        if not gpu_rows:
            return None
        self.ticks += 1
        ts_ns = max(s.ts_ns for s in gpu_rows)
        due: list[str] = []
        for s in gpu_rows:
            d = self._devices.setdefault(s.device, _Device())
            if s.lost:
                d.busy_since_ns = None
                continue
            if "proc_gpu_mem_bytes" in s.values or s.processes:
                # the collector read the GPU's processes this tick (the sum it adds says so even
                # when none of the run's was on it)
                d.proc_ns = s.ts_ns
                d.proc_pids = frozenset(p.pid for p in s.processes)
                pu = s.get("proc_gpu_util")
                d.proc_util = float(pu) if isinstance(pu, (int, float)) else None
            ours, util = self._share(d, s, s.ts_ns, tree)
            if not ours or util is None or util < self.util:
                d.busy_since_ns = None
                continue
            if d.busy_since_ns is None:
                d.busy_since_ns = s.ts_ns
            stretch_s = (s.ts_ns - d.busy_since_ns) / 1e9
            self.longest_s = max(self.longest_s, stretch_s)
            if stretch_s >= self.busy_for_s - 1e-9:
                due.append(s.device)
        if not due or not ready or len(self.requests) >= self.windows:
            return None
        if self._not_before_ns is not None and ts_ns < self._not_before_ns:
            return None
        pids: set[int] | None = set()
        for key in due:
            d = self._devices[key]
            if not (self.per_process and d.proc_ns is not None and d.proc_pids):
                pids = None  # a busy GPU that names no process: every armed process is asked
                break
            assert pids is not None
            pids |= d.proc_pids if tree is None else d.proc_pids & tree
        req = BusyRequest(ts_ns, tuple(sorted(pids)) if pids is not None else None, tuple(sorted(due)))
        self.requests.append(req)
        self._not_before_ns = ts_ns + int((self.duration_s + self.interval_s) * 1e9)
        return req

    def gpu_processes(self, tree: frozenset[int] | None = None) -> dict[str, tuple[int, ...]]:
        """The run's pids each GPU's newest per-process reading named (GPUs without one left out)."""
        out = {}
        for key, d in sorted(self._devices.items()):
            if d.proc_ns is not None:
                pids = d.proc_pids if tree is None else d.proc_pids & tree
                if pids:
                    out[key] = tuple(sorted(pids))
        return out


class BusySink(Sink):
    """The sampler sink of ``gpuscope run``: keeps the run's GPU processes in the run directory
    (:func:`~gpuscope.run.requests.write_gpu_processes`, when they change) and, with a
    :class:`BusyTrigger`, writes its requests. The run directory is set once it exists
    (:meth:`attach`, after the sampler has started); ticks before that, and after the run's
    ``stopping`` file appeared, ask for nothing."""

    def __init__(self, trigger: BusyTrigger | None, *, say: Callable[[str], None] | None = None) -> None:
        self.trigger = trigger
        self.say = say or (lambda msg: None)
        self.run_dir: Path | None = None
        #: (the request written, the trigger's decision) in order
        self.written: list[tuple[WindowRequest, BusyRequest]] = []
        #: why a request could not be written (the first failure)
        self.error: str | None = None
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[int, ...]] = {}
        self._ready = False
        # Without --profile-when busy a trigger that never asks (no window allowed) still
        # follows the GPUs' processes for GPU_PROCESSES_FILE.
        self._trigger = trigger if trigger is not None else BusyTrigger(util=float("inf"), duration_s=0.0, windows=0)

    def attach(self, run_dir: Path) -> None:
        """The run directory exists: requests and the GPU processes go there from now on."""
        with self._lock:
            self.run_dir = Path(run_dir)

    def _is_ready(self, run_dir: Path) -> bool:
        """A process can answer (armed, not exited) and exit has not begun."""
        from . import contract
        from .requests import armed_processes

        if (run_dir / contract.STOP_FILE).exists():
            return False
        if not self._ready:  # once one process armed, the run can answer (the child reads requests)
            self._ready = bool(armed_processes(run_dir))
        return self._ready

    def write(self, batch: SampleBatch) -> None:
        """Feed each tick to the trigger; write its requests and the GPU processes when they changed."""
        from .requests import GpuProcesses, new_request, write_gpu_processes, write_request

        with self._lock:
            run_dir = self.run_dir
        trig = self._trigger
        # The rows' processes are the run's already: the sampler hands the collectors the
        # process tree's pids (set_pids), so no tree is passed here (ProcessTree is the sampling
        # thread's, and this is the dispatch thread).
        for _, rows in batch.ticks:
            ready = run_dir is not None and self.trigger is not None and self._is_ready(run_dir)
            decision = trig.feed(rows, ready=ready)
            if decision is None or run_dir is None or self.trigger is None:
                continue
            req = new_request(self.trigger.duration_s, decision.pids, "busy")
            try:
                write_request(run_dir, req)
            except Exception as exc:  # the program runs on; the summary says what happened
                self.error = self.error or str(exc)
                continue
            self.written.append((req, decision))
            self.say(f"the GPUs were busy for {self.trigger.busy_for_s:g} s ({', '.join(decision.devices)}): asked "
                     f"for a {self.trigger.duration_s:g} s profiler window")
        if run_dir is None:
            return
        seen = trig.gpu_processes()
        if seen != self._seen:
            self._seen = seen
            ts = max((s.ts_ns for _, rows in batch.ticks for s in rows), default=0)
            try:
                write_gpu_processes(run_dir, GpuProcesses(ts, seen))
            except OSError:
                pass  # `gpuscope profile` then asks every armed process

    def close(self, stats: SamplerStats) -> None:
        pass

    def start(self, info: SamplerInfo) -> None:
        pass


def busy_sink(profile: Any, say: Callable[[str], None], *, replay: bool) -> BusySink:
    """The sink of a ``gpuscope run`` with these profiler settings (its
    :class:`~gpuscope.run.wrapper.ProfileConfig`): a :class:`BusyTrigger` under ``--profile-when
    busy``, else none (the GPU processes are kept in every mode). A replay's per-process
    readings are another machine's processes: there the devices' utilisation counts."""
    trigger = None
    if profile.enabled and profile.when == "busy":
        trigger = BusyTrigger(util=profile.busy_util, duration_s=profile.duration_s, windows=profile.windows,
                              interval_s=profile.interval_s if profile.interval_s is not None else profile.delay_s,
                              per_process=not replay)
    return BusySink(trigger, say=say)


def busy_notes(sink: BusySink, run_dir: Path, started_ns: int) -> list[str]:
    """The summary's sentences on the busy windows: when each was asked for, for whom, which
    processes opened one (pid, name) or skipped it (why) and whether it was written; or why
    none was asked for."""
    from .requests import read_answers

    trig = sink.trigger
    if trig is None:
        return []
    util = f"{100 * trig.util:g} %"
    if not sink.written:
        if sink.error:
            return [f"--profile-when busy: the window request could not be written ({sink.error})"]
        longest = f" (the longest stretch at or above it: {trig.longest_s:.1f} s)" if trig.longest_s > 0 else ""
        return [f"the GPUs never stayed above {util} for {trig.busy_for_s:g} s: no window{longest}"]
    notes = []
    for n, (req, decision) in enumerate(sink.written, start=1):
        when = max(decision.ts_ns - started_ns, 0) / 1e9
        whom = ("every armed process" if decision.pids is None
                else "pid" + ("s " if len(decision.pids) > 1 else " ") + ", ".join(str(p) for p in decision.pids))
        ans = read_answers(run_dir, req.id)
        parts = []
        if ans.opened:
            parts.append("opened by " + ", ".join(
                f"pid {p}" + (" (written)" if p in ans.written else " (not written)") for p in sorted(ans.opened)))
        if ans.skipped:
            parts.append("skipped by " + ", ".join(f"pid {p} ({why})" for p, why in sorted(ans.skipped.items())))
        answer = "; ".join(parts) if parts else "no process answered (it ended first, or its main thread never ran Python again)"
        notes.append(f"busy window {n}: asked for {when:.1f} s into the run, once {', '.join(decision.devices)} had "
                     f"been at or above {util} for {trig.busy_for_s:g} s, of {whom}: {answer}")
    return notes
