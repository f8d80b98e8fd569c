"""The sampler: drives collectors at a fixed cadence and hands batches of rows to sinks
(collectors -> rows -> sinks; the sinks are in :mod:`gpuscope.sinks`).

It lives at the top of the package, not in :mod:`gpuscope.run`, because ``gpuscope run`` is
only one of its users: ``gpuscope record`` samples without any wrapped program, and a live
view (the TUI, ``monitor``) will sample with a :class:`~gpuscope.sinks.LiveBuffer` alone.

    from gpuscope.collectors import default_collectors, ProcessTree
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink

    tree = ProcessTree([child.pid])
    sampler = Sampler(default_collectors(tree), [StoreSink(db, name="llama", command="...")],
                      interval_s=0.1, tree=tree)
    sampler.start()          # opens the collectors, creates the run (status 'recording')
    ...                      # the workload runs
    stats = sampler.stop()   # last rows flushed, run 'complete', sampler_stats written

Cadence: tick ``k`` is due at ``t0 + k * interval`` on the monotonic clock, so the schedule
never drifts; a tick that starts late is late only by its own delay, and ticks that could not
be taken at all (the machine stalled longer than an interval) are skipped and counted, never
bunched up. Default 10 Hz; 100 Hz at most.

Threads: one samples (it only calls collectors and appends rows); one dispatches batches
(every ``batch_s``, default 0.5 s) to the sinks, so a slow sink (the store's short write
transaction) never delays a tick. The sampler measures its own cost per tick (CPU time of the
sampling thread, and wall time) and the sinks' CPU time; :class:`~gpuscope.sinks.SamplerStats`
reports them and :class:`~gpuscope.sinks.StoreSink` stores them with the run (table ``sampler_stats``).

A collector whose vendor is not on this machine is left out at :meth:`Sampler.start` (its
reason is in :attr:`Sampler.unavailable`); a degraded metric is None and reported once
(:attr:`SamplerStats.degradations`, and each batch's ``degradations``).

Hangs: a vendor call can block for good (NVML on a wedged GPU, a driver waiting on a reset,
``amd-smi`` stuck), and a thread blocked in C cannot be interrupted. So a collector that does
not open within :data:`OPEN_TIMEOUT_S` is left out (``gpuscope run`` starts the program after
the sampler: a hang there would hold the program back), and a watchdog thread watches every
``sample()``: one that has not returned after ``hang_s`` (:data:`HANG_S`, or five ticks if
longer) is left behind in its thread, said once, and a fresh sampling thread goes on with the
other collectors from the next slot; the stuck collector's devices have no rows until its call
returns, then it is said again and sampled as before. At most the stuck tick's rows are lost.
``stop()`` never waits on a hung call, and closing a collector is bounded the same way.
"""
from __future__ import annotations

import math
import queue
from array import array
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .collectors.base import (
    Collector,
    CollectorUnavailable,
    Degradation,
    DeviceInfo,
    Sample,
    VendorStatus,
    WatchedProcesses,
)
from .errors import GpuscopeError
from .sinks.base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = [
    "DEFAULT_INTERVAL_S",
    "MAX_RATE_HZ",
    "Sampler",
]

DEFAULT_INTERVAL_S = 0.1
MAX_RATE_HZ = 100.0

#: A ``sample()`` running longer than this (or five ticks, if longer) is taken for a hang. The
#: slowest call a healthy driver makes is tens of milliseconds (NVML's PCIe throughput samples
#: for 20 ms, the process list takes a few ms: bench/README.md), so 2 s is far past any of them.
HANG_S = 2.0
#: A collector that has not opened after this long is left out (``nvmlInit`` on a wedged driver
#: can block for good; a healthy open takes well under a second, amd-smi's CLI a few seconds).
OPEN_TIMEOUT_S = 15.0
#: How long ``stop()`` waits for a collector's ``close()`` (a hung driver can block it too).
CLOSE_TIMEOUT_S = 5.0


def _bounded(fn: Callable[[], Any], timeout_s: float, name: str) -> tuple[bool, Any, BaseException | None]:
    """Call ``fn`` in a daemon thread; ``(finished, result, exception)`` after at most
    ``timeout_s``. A call that has not finished is left running (a thread blocked in C code
    cannot be stopped); being a daemon thread, it does not keep the process alive."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # handed to the caller
            out["exc"] = exc

    t = threading.Thread(target=call, name=name, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return False, None, None
    return True, out.get("result"), out.get("exc")


#: Ticks whose cost and lateness are kept for the percentiles of :class:`SamplerStats`.
PERCENTILE_WINDOW = 36_000


class _Series:
    """Count, sum and maximum of every value added; the newest :data:`PERCENTILE_WINDOW`
    values for percentiles, in a ring allocated once (8 bytes a value). A deque of Python ints
    grew by about 40 bytes a value until it was full: at 100 Hz, three series added 4 MiB over
    the first six minutes, which read as a leak under load (docs/reliability.md, "Load")."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0
        self.max = 0
        self.last = 0
        self._ring = array("q", bytes(8 * PERCENTILE_WINDOW))

    def add(self, value: int) -> None:
        self.n += 1
        self.total += value
        if self.n == 1 or value > self.max:
            self.max = value
        self.last = value
        self._ring[(self.n - 1) % len(self._ring)] = value

    @property
    def recent(self) -> list[int]:
        """The newest values (at most :data:`PERCENTILE_WINDOW`), oldest first."""
        size = len(self._ring)
        if self.n <= size:
            return self._ring[:self.n].tolist()
        i = self.n % size
        return (self._ring[i:] + self._ring[:i]).tolist()


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    i = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return float(s[i])


class Sampler:
    """Drives ``collectors`` at ``interval_s`` and hands the rows to ``sinks``.

    ``tree``: which processes to watch (a :class:`~gpuscope.collectors.base.WatchedProcesses`:
    a :class:`~gpuscope.collectors.ProcessTree`, every process, ...); asked each tick, its pids
    go to every collector when they change (per-process GPU memory and utilisation). ``on_degradation`` is called (from the sampling thread) once per new
    degradation, e.g. to print it. Collectors are opened by :meth:`start` unless already open,
    and closed by :meth:`stop`.
    """

    def __init__(self, collectors: Sequence[Collector], sinks: Sequence[Sink] = (), *,
                 interval_s: float = DEFAULT_INTERVAL_S, batch_s: float = 0.5, tree: WatchedProcesses | None = None,
                 on_degradation: Callable[[Degradation], None] | None = None,
                 max_ticks: int | None = None, hang_s: float | None = None,
                 open_timeout_s: float = OPEN_TIMEOUT_S) -> None:
        if not (1.0 / MAX_RATE_HZ - 1e-9 <= interval_s <= 3600):
            raise ValueError(f"interval_s must be between {1 / MAX_RATE_HZ:g} s ({MAX_RATE_HZ:g} Hz) and 3600 s, "
                             f"not {interval_s!r}")
        self.collectors = list(collectors)
        self.sinks = list(sinks)
        self.interval_s = float(interval_s)
        self.batch_s = max(float(batch_s), self.interval_s)
        self.tree = tree
        self.on_degradation = on_degradation
        self.max_ticks = max_ticks
        self.hang_s = float(hang_s) if hang_s is not None else max(HANG_S, 5 * self.interval_s)
        self.open_timeout_s = float(open_timeout_s)
        self.active: list[Collector] = []
        self.devices: list[DeviceInfo] = []
        self.vendors: list[VendorStatus] = []
        self.unavailable: list[VendorStatus] = []
        self.stats = SamplerStats(interval_s=self.interval_s)
        self._rename: dict[tuple[int, str], str] = {}
        self._stop = threading.Event()
        self._done = threading.Event()
        self._queue: queue.Queue[SampleBatch | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._dispatcher: threading.Thread | None = None
        self._tick_cpu = _Series()
        self._tick_wall = _Series()
        self._lateness = _Series()
        self._sinks_started: list[Sink] = []
        self._started = False
        self._stopped = False
        self._pids: frozenset[int] | None = frozenset()
        # shared by the sampling thread of the moment and the watchdog (under _lock): the
        # generation of the sampling thread that owns the schedule, the call in progress, the
        # collectors left behind in a hung call, and the rows not yet handed to the sinks
        self._lock = threading.Lock()
        self._gen = 0
        self._busy: tuple[int, int, float] | None = None  # (generation, collector index, monotonic start)
        self._hung: dict[int, float] = {}  # collector index -> monotonic time its call began
        self._pending: list[tuple[int, list[Sample]]] = []
        self._pending_deg: list[Degradation] = []
        self._last_handoff = 0.0
        self._t0 = 0.0
        self._k = 0
        self._watchdog: threading.Thread | None = None
        self._watch_stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> list[DeviceInfo]:
        """Open every collector (probe once); vendors that are not here are left out."""
        if self.active or self.unavailable:
            return self.devices
        from .collectors import attach_specs

        keys: set[str] = set()
        for ci, c in enumerate(self.collectors):
            finished, found, exc = _bounded(c.open, self.open_timeout_s, f"gpuscope-open-{c.source}")
            if not finished:  # left behind in its thread; never closed (close could hang too)
                self.unavailable.append(VendorStatus(
                    c.source, False, None, f"did not answer within {self.open_timeout_s:g} s when opened "
                                           "(a hung driver or tool call?): left out"))
                self.vendors.append(self.unavailable[-1])
                continue
            if isinstance(exc, CollectorUnavailable):
                self.unavailable.append(VendorStatus(exc.vendor, False, None, exc.reason))
                self.vendors.append(self.unavailable[-1])
                c.close()
                continue
            if exc is not None:
                if not isinstance(exc, Exception):
                    raise exc  # KeyboardInterrupt, SystemExit: not the vendor's doing
                # a vendor library misbehaving must not stop the run
                self.unavailable.append(VendorStatus(c.source, False, None, f"open failed: {type(exc).__name__}: {exc}"))
                self.vendors.append(self.unavailable[-1])
                c.close()
                continue
            self.active.append(c)
            self.vendors.append(c.status or VendorStatus(c.source, True))
            for d in found:
                if d.key in keys:  # e.g. an NVIDIA and an AMD gpu0 on one host
                    new = f"{d.vendor}:{d.key}"
                    self._rename[(ci, d.key)] = new
                    d.key = new
                keys.add(d.key)
                self.devices.append(d)
            if c.min_interval_s > self.interval_s:
                c.degrade(None, None, f"sampled every {self.interval_s:g} s, but this source refreshes at most "
                                       f"every {c.min_interval_s:g} s")
        attach_specs(self.devices)
        self.stats.devices = len(self.devices)
        return self.devices

    def start(self) -> None:
        """Open the collectors, start the sinks, and start sampling in the background."""
        if self._started:
            raise GpuscopeError("the sampler was already started")
        self._started = True
        self.open()
        self.stats.started_ns = time.time_ns()
        info = SamplerInfo(self.interval_s, self.stats.started_ns, list(self.vendors), list(self.devices))
        try:
            for s in self.sinks:
                s.start(info)
                self._sinks_started.append(s)
        except BaseException:
            self._close_collectors()
            raise
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="gpuscope-sink", daemon=True)
        self._dispatcher.start()
        self._t0 = self._last_handoff = time.monotonic()
        self._thread = threading.Thread(target=self._sample_loop, args=(0,), name="gpuscope-sampler", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(target=self._watch_loop, name="gpuscope-watchdog", daemon=True)
        self._watchdog.start()

    def stop(self) -> SamplerStats:
        """Stop sampling, flush the last rows to the sinks, close sinks and collectors."""
        if self._stopped:
            return self.stats
        self._stopped = True
        self._stop.set()
        # the thread of the moment ends at once, unless it is in a hung call: then the
        # watchdog hands over within hang_s to a new one that sees the stop and ends
        while self._thread is not None:
            t = self._thread
            t.join(0.05)
            with self._lock:
                if not t.is_alive() and t is self._thread:
                    break
        self._watch_stop.set()
        if self._watchdog is not None:
            self._watchdog.join()
        self._queue.put(None)
        if self._dispatcher is not None:
            self._dispatcher.join()
        self._finish_stats()
        errors = []
        for s in self._sinks_started:
            try:
                s.close(self.stats)
            except Exception as exc:  # the others still close
                errors.append(exc)
        self._close_collectors()
        if errors:
            raise errors[0]
        return self.stats

    def run(self, seconds: float) -> SamplerStats:
        """Sample for ``seconds`` (or until ``max_ticks``) in the foreground, then stop."""
        self.start()
        try:
            self._done.wait(seconds)
        finally:
            stats = self.stop()
        return stats

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the sampler ends by itself (``max_ticks``, or every source exhausted)."""
        return self._done.wait(timeout)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_collectors(self) -> None:
        for ci, c in enumerate(self.active):
            if ci in self._hung:
                continue  # still inside a call: closing under it could crash or hang the driver
            _bounded(c.close, CLOSE_TIMEOUT_S, f"gpuscope-close-{c.source}")

    # ------------------------------------------------------------------ sampling thread
    def _sample_loop(self, gen: int) -> None:
        """Sample on the schedule until stopped; ``gen`` is this thread's generation: once the
        watchdog has handed the schedule to a newer thread, this one ends without a word."""
        interval = self.interval_s
        current = True
        try:
            while not self._stop.is_set():
                k = self._k
                deadline = self._t0 + k * interval
                delay = deadline - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                start = time.monotonic()
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                tick = self._tick(gen)
                if tick is None:  # left behind in a hung call; the schedule is another thread's
                    current = False
                    return
                rows, degr = tick
                cpu, wall = time.thread_time_ns() - c0, time.perf_counter_ns() - w0
                now = time.monotonic()
                with self._lock:
                    if gen != self._gen:
                        current = False
                        return
                    self._lateness.add(int((start - deadline) * 1e9))
                    self._tick_cpu.add(cpu)
                    self._tick_wall.add(wall)
                    self._pending.append((k, rows))
                    self._pending_deg.extend(degr)
                    self.stats.ticks += 1
                    self.stats.rows += len(rows)
                    if now - self._last_handoff >= self.batch_s:
                        self._queue.put(SampleBatch(self._pending, self._pending_deg))
                        self._pending, self._pending_deg, self._last_handoff = [], [], now
                    # the next slot after now: late ticks are skipped and counted, never bunched
                    nxt = k + 1
                    if now > self._t0 + nxt * interval:
                        late_slot = int((now - self._t0) / interval) + 1
                        self.stats.missed_ticks += late_slot - nxt
                        nxt = late_slot
                    self._k = nxt
                if self.max_ticks is not None and self.stats.ticks >= self.max_ticks:
                    break
                if self._exhausted():
                    break
        finally:
            if current:
                with self._lock:
                    if gen == self._gen:
                        self._gen += 1  # the schedule ends with this thread: the watchdog stands down
                        if self._pending or self._pending_deg:
                            self._queue.put(SampleBatch(self._pending, self._pending_deg))
                            self._pending, self._pending_deg = [], []
                        self.stats.drift_ns = self._lateness.last if self._lateness.n else 0
                        self._done.set()

    def _watch_loop(self) -> None:
        """Every fraction of ``hang_s``: a ``sample()`` of the current generation running past
        ``hang_s`` is a hang. Leave its thread behind and hand the schedule to a new one."""
        while not self._watch_stop.wait(min(0.25, self.hang_s / 4)):
            with self._lock:
                busy = self._busy
                if busy is None or busy[0] != self._gen or self._done.is_set():
                    continue
                gen, ci, since = busy
                if time.monotonic() - since < self.hang_s:
                    continue
                c = self.active[ci]
                self._hung[ci] = since
                self._busy = None
                self._gen += 1
                new_gen = self._gen
                self._k = max(self._k + 1, int((time.monotonic() - self._t0) / self.interval_s) + 1)
                g = Degradation(c.source, None, None,
                                f"sample() has not returned in {self.hang_s:g} s (a hung driver or tool call): "
                                "its devices get no rows until it answers; the other sources go on")
                self._pending_deg.append(g)
                self._thread = threading.Thread(target=self._sample_loop, args=(new_gen,),
                                                name=f"gpuscope-sampler-{new_gen}", daemon=True)
                self._thread.start()
            self._report([g])

    def _report(self, degr: list[Degradation]) -> None:
        self.stats.degradations.extend(degr)
        for g in degr:
            if g.phase == "clock":
                self.stats.clock_fallbacks[f"{g.source}/{g.device or '*'}"] = g.reason
        if self.on_degradation is not None:
            for g in degr:
                try:
                    self.on_degradation(g)
                except Exception:
                    pass

    def _exhausted(self) -> bool:
        return bool(self.active) and all(getattr(c, "done", False) for c in self.active)

    def _tick(self, gen: int) -> tuple[list[Sample], list[Degradation]] | None:
        """One tick of every collector not left behind in a hung call; None when this thread
        itself was left behind during it (its rows are dropped: the schedule went on)."""
        hung = self._hung
        if self.tree is not None:
            try:
                pids = self.tree.pids()
            except Exception:
                pids = self._pids or frozenset()
            if pids != self._pids:
                self._pids = pids
                for ci, c in enumerate(self.active):
                    if ci not in hung:
                        c.set_pids(pids)
        rows: list[Sample] = []
        degr: list[Degradation] = []
        for ci, c in enumerate(self.active):
            if ci in hung:
                continue
            with self._lock:
                self._busy = (gen, ci, time.monotonic())
            try:
                got = c.sample()
            except Exception as exc:  # a collector bug must not stop the others
                c.degrade(None, None, f"sample() failed: {type(exc).__name__}: {exc}")
                got = []
            back = None
            with self._lock:
                left_behind = gen != self._gen  # this call outlived hang_s: the schedule went on
                if not left_behind:
                    self._busy = None
                elif ci in self._hung:  # it answers again: the current thread samples it from now on
                    back = Degradation(c.source, None, None, f"sample() answered again after "
                                       f"{time.monotonic() - self._hung.pop(ci):.1f} s: sampled again")
                    self._pending_deg.append(back)
                    self._pids = None  # hand the watched pids to it again at the next tick
            if left_behind:
                if back is not None:
                    self._report([back])  # outside the lock: the callback may print
                return None
            if self._rename:
                for s in got:
                    s.device = self._rename.get((ci, s.device), s.device)
            rows.extend(got)
            new = c.take_degradations()
            if new:
                degr.extend(new)
        if degr:
            self._report(degr)
        return rows, degr

    # ------------------------------------------------------------------ dispatch thread
    def _dispatch_loop(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            c0 = time.thread_time_ns()
            for s in self._sinks_started:
                try:
                    s.write(batch)
                except Exception as exc:
                    self.stats.sink_errors += 1
                    self.stats.degradations.append(
                        Degradation("sampler", None, None, f"sink {type(s).__name__} failed: {type(exc).__name__}: {exc}"))
            self.stats.sink_cpu_ns += time.thread_time_ns() - c0

    def _finish_stats(self) -> None:
        st = self.stats
        st.ended_ns = time.time_ns()
        cpu, wall, late = self._tick_cpu, self._tick_wall, self._lateness
        if cpu.n:
            st.tick_cpu_ns_mean = cpu.total / cpu.n
            st.tick_cpu_ns_p99 = _percentile(cpu.recent, 0.99)
            st.tick_cpu_ns_max = float(cpu.max)
            st.tick_wall_ns_mean = wall.total / wall.n
            st.tick_wall_ns_p99 = _percentile(wall.recent, 0.99)
            st.tick_wall_ns_max = float(wall.max)
            st.cpu_ns_per_tick_per_device = st.tick_cpu_ns_mean / max(1, st.devices)
        if late.n:
            st.lateness_ns_p50 = _percentile(late.recent, 0.5)
            st.lateness_ns_p99 = _percentile(late.recent, 0.99)
            st.lateness_ns_max = float(late.max)
