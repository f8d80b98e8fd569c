"""The sampler: drives collectors at a fixed cadence and hands batches of rows to sinks.

    from gpuscope.collectors import default_collectors, ProcessTree
    from gpuscope.sampler import Sampler, StoreSink

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
sampling thread, and wall time) and the sinks' CPU time; :class:`SamplerStats` reports them
and :class:`StoreSink` stores them with the run (table ``sampler_stats``).

A collector whose vendor is not on this machine is left out at :meth:`Sampler.start` (its
reason is in :attr:`Sampler.unavailable`); a degraded metric is None and reported once
(:attr:`SamplerStats.degradations`, and each batch's ``degradations``).
"""
from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .redact import redact_command
from .collectors.base import Collector, CollectorUnavailable, Degradation, DeviceInfo, Sample, VendorStatus
from .errors import GpuscopeError, StoreError
from .metrics import METRICS

__all__ = [
    "MAX_RATE_HZ",
    "MemorySink",
    "RecordingSink",
    "SampleBatch",
    "Sampler",
    "SamplerInfo",
    "SamplerStats",
    "Sink",
    "StoreSink",
]

DEFAULT_INTERVAL_S = 0.1
MAX_RATE_HZ = 100.0


@dataclass
class SampleBatch:
    """Rows handed to sinks together: ``ticks`` is a list of (tick index, rows of that tick).
    Tick indexes count schedule slots from 0, so a skipped tick leaves a gap."""

    ticks: list[tuple[int, list[Sample]]]
    degradations: list[Degradation] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(r) for _, r in self.ticks)


@dataclass
class SamplerInfo:
    """What sinks learn at start: the cadence, the sources and when it began."""

    interval_s: float
    started_ns: int
    vendors: list[VendorStatus]
    devices: list[DeviceInfo]


@dataclass
class SamplerStats:
    """The sampler's cadence and its own cost over a session."""

    interval_s: float
    started_ns: int = 0
    ended_ns: int = 0
    ticks: int = 0
    missed_ticks: int = 0
    rows: int = 0
    devices: int = 0
    #: means and maxima are over the whole session; p50/p99 over its newest
    #: :data:`PERCENTILE_WINDOW` ticks (an hour at 10 Hz), so a long run holds bounded memory
    tick_cpu_ns_mean: float | None = None
    tick_cpu_ns_p99: float | None = None
    tick_cpu_ns_max: float | None = None
    tick_wall_ns_mean: float | None = None
    tick_wall_ns_p99: float | None = None
    tick_wall_ns_max: float | None = None
    #: the sampling thread's CPU time per tick, divided by the devices sampled
    cpu_ns_per_tick_per_device: float | None = None
    lateness_ns_p50: float | None = None
    lateness_ns_p99: float | None = None
    lateness_ns_max: float | None = None
    #: how late the last tick started against its slot (no cumulative drift: stays small)
    drift_ns: int = 0
    #: CPU time the sinks spent (the dispatch thread), whole session
    sink_cpu_ns: int = 0
    sink_errors: int = 0
    degradations: list[Degradation] = field(default_factory=list)
    #: devices whose own timestamps failed their collector's check (not monotonic, or far from
    #: the host clock) and whose rows use the host clock instead: ``"source/device"`` -> why
    clock_fallbacks: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["degradations"] = [g.to_dict() for g in self.degradations]
        return d


class Sink:
    """Where batches go. The sampler calls :meth:`start` (in the caller's thread, so errors
    reach the caller), then :meth:`write` from its dispatch thread, then :meth:`close` (caller's
    thread, after the last write). Sinks need not be thread-safe towards the sampler."""

    def start(self, info: SamplerInfo) -> None:
        """Called once before the first batch."""

    def write(self, batch: SampleBatch) -> None:
        """One batch of rows."""

    def close(self, stats: SamplerStats) -> None:
        from .store import runs

        """Called once after the last batch."""


#: Ticks whose cost and lateness are kept for the percentiles of :class:`SamplerStats`.
PERCENTILE_WINDOW = 36_000


class _Series:
    """Count, sum and maximum of every value added; the newest :data:`PERCENTILE_WINDOW`
    values for percentiles. Constant memory however long the session runs."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0
        self.max = 0
        self.recent: deque[int] = deque(maxlen=PERCENTILE_WINDOW)

    def add(self, value: int) -> None:
        self.n += 1
        self.total += value
        if self.n == 1 or value > self.max:
            self.max = value
        self.recent.append(value)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    i = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return float(s[i])


class Sampler:
    """Drives ``collectors`` at ``interval_s`` and hands the rows to ``sinks``.

    ``tree``: the watched process tree; its pids go to every collector (per-process GPU memory
    and utilisation). ``on_degradation`` is called (from the sampling thread) once per new
    degradation, e.g. to print it. Collectors are opened by :meth:`start` unless already open,
    and closed by :meth:`stop`.
    """

    def __init__(self, collectors: Sequence[Collector], sinks: Sequence[Sink] = (), *,
                 interval_s: float = DEFAULT_INTERVAL_S, batch_s: float = 0.5, tree: Any = None,
                 on_degradation: Callable[[Degradation], None] | None = None,
                 max_ticks: int | None = None) -> None:
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
        self._pids: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> list[DeviceInfo]:
        """Open every collector (probe once); vendors that are not here are left out."""
        if self.active or self.unavailable:
            return self.devices
        from .collectors import attach_specs

        keys: set[str] = set()
        for ci, c in enumerate(self.collectors):
            try:
                found = c.open()
            except CollectorUnavailable as exc:
                self.unavailable.append(VendorStatus(exc.vendor, False, None, exc.reason))
                self.vendors.append(self.unavailable[-1])
                c.close()
                continue
            except Exception as exc:  # a vendor library misbehaving must not stop the run
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
                c._degrade(None, None, f"sampled every {self.interval_s:g} s, but this source refreshes at most "
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
        self._thread = threading.Thread(target=self._sample_loop, name="gpuscope-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> SamplerStats:
        """Stop sampling, flush the last rows to the sinks, close sinks and collectors."""
        if self._stopped:
            return self.stats
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
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
        for c in self.active:
            try:
                c.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ sampling thread
    def _sample_loop(self) -> None:
        interval = self.interval_s
        t0 = time.monotonic()
        k = 0
        pending: list[tuple[int, list[Sample]]] = []
        pending_deg: list[Degradation] = []
        last_handoff = t0
        try:
            while not self._stop.is_set():
                deadline = t0 + k * interval
                delay = deadline - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                start = time.monotonic()
                self._lateness.add(int((start - deadline) * 1e9))
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                rows, degr = self._tick()
                self._tick_cpu.add(time.thread_time_ns() - c0)
                self._tick_wall.add(time.perf_counter_ns() - w0)
                pending.append((k, rows))
                pending_deg.extend(degr)
                self.stats.ticks += 1
                self.stats.rows += len(rows)
                now = time.monotonic()
                if now - last_handoff >= self.batch_s:
                    self._queue.put(SampleBatch(pending, pending_deg))
                    pending, pending_deg, last_handoff = [], [], now
                if self.max_ticks is not None and self.stats.ticks >= self.max_ticks:
                    break
                if self._exhausted():
                    break
                # the next slot after now: late ticks are skipped and counted, never bunched
                nxt = k + 1
                if now > t0 + nxt * interval:
                    late_slot = int((now - t0) / interval) + 1
                    self.stats.missed_ticks += late_slot - nxt
                    nxt = late_slot
                k = nxt
        finally:
            if pending or pending_deg:
                self._queue.put(SampleBatch(pending, pending_deg))
            self.stats.drift_ns = self._lateness.recent[-1] if self._lateness.n else 0
            self._done.set()

    def _exhausted(self) -> bool:
        return bool(self.active) and all(getattr(c, "done", False) for c in self.active)

    def _tick(self) -> tuple[list[Sample], list[Degradation]]:
        if self.tree is not None:
            try:
                pids = self.tree.pids()
            except Exception:
                pids = self._pids
            if pids != self._pids:
                self._pids = pids
                for c in self.active:
                    c.set_pids(pids)
        rows: list[Sample] = []
        degr: list[Degradation] = []
        for ci, c in enumerate(self.active):
            try:
                got = c.sample()
            except Exception as exc:  # a collector bug must not stop the others
                c._degrade(None, None, f"sample() failed: {type(exc).__name__}: {exc}")
                got = []
            if self._rename:
                for s in got:
                    s.device = self._rename.get((ci, s.device), s.device)
            rows.extend(got)
            new = c.take_degradations()
            if new:
                degr.extend(new)
        if degr:
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


# ---------------------------------------------------------------------- sinks


class MemorySink(Sink):
    """Keeps the newest ``maxlen`` rows per device in memory (the TUI's live buffer; tests).
    Safe to read from another thread through :meth:`rows` / :meth:`latest`."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self.maxlen = maxlen
        self.info: SamplerInfo | None = None
        self.stats: SamplerStats | None = None
        self.batches = 0
        self.ticks: list[int] = []
        self.degradations: list[Degradation] = []
        self._rows: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()

    def start(self, info: SamplerInfo) -> None:
        self.info = info

    def write(self, batch: SampleBatch) -> None:
        with self._lock:
            self.batches += 1
            self.degradations.extend(batch.degradations)
            for k, rows in batch.ticks:
                self.ticks.append(k)
                for s in rows:
                    self._rows.setdefault(s.device, deque(maxlen=self.maxlen)).append(s)

    def close(self, stats: SamplerStats) -> None:
        from .store import runs

        self.stats = stats

    def rows(self, device: str) -> list[Sample]:
        with self._lock:
            return list(self._rows.get(device, ()))

    def latest(self) -> dict[str, Sample]:
        with self._lock:
            return {k: v[-1] for k, v in self._rows.items() if v}


class RecordingSink(Sink):
    """Writes a recording file for :class:`~gpuscope.collectors.replay.ReplayCollector`
    (``gpuscope record``). The file is flushed after every batch."""

    def __init__(self, path: str | Path, *, synthetic: bool = False, note: str | None = None) -> None:
        self.path = Path(path)
        self.synthetic = synthetic
        self.note = note
        self.writer: Any = None

    def start(self, info: SamplerInfo) -> None:
        from .collectors.replay import RecordingWriter

        self.writer = RecordingWriter(self.path, info.devices, interval_s=info.interval_s, vendors=info.vendors,
                                      synthetic=self.synthetic, note=self.note)

    def write(self, batch: SampleBatch) -> None:
        for k, rows in batch.ticks:
            self.writer.write_tick(k, rows)
        self.writer._f.flush()

    def close(self, stats: SamplerStats) -> None:
        from .store import runs

        d = stats.to_dict()
        d["degradations"] = [str(g) for g in stats.degradations]
        self.writer.close(d)


_ARROW_TYPES = {"DOUBLE": "float64", "BIGINT": "int64", "INTEGER": "int32"}


def _as_int(v: Any) -> int | None:
    if v is None:
        return None
    i = int(v)
    return i - 2**64 if i >= 2**63 else i  # 64-bit vendor bit masks: stored as their signed twin


class StoreSink(Sink):
    """Writes samples (and the devices, and the sampler's stats) into the DuckDB store.

    With ``run_id=None`` it creates the run (``source``, ``name``, ``command``) with status
    ``recording`` at start and sets ``final_status`` (default ``complete``; None leaves the
    status to the caller, e.g. the run wrapper) and ``ended_ns`` at close. With a ``run_id``
    the run must exist; only devices, samples and stats are added.

    DuckDB allows one writing process per file and no readers meanwhile, so rows are kept in
    memory and written in one short transaction at most every ``flush_s`` seconds, and readers
    in other processes (``gpuscope runs``) get in between. The store is attached to a
    long-lived in-memory connection only for each flush (``ATTACH`` ... ``DETACH`` costs about
    1 ms of CPU, opening a new connection 20-40 ms). A store held by another writer is retried
    at the next flush; no row is dropped.
    """

    def __init__(self, db: str | Path, *, run_id: int | None = None, name: str = "telemetry",
                 command: str | None = None, source: str = "run", final_status: str | None = "complete",
                 flush_s: float = 1.0, lock_retry_s: float = 0.5) -> None:
        self.db = Path(db)
        self.run_id = run_id
        self.name = name
        # The store sink is where a run's command is written: redacted here too, whatever the caller did.
        self.command = redact_command(command)
        self.source = source
        self.final_status = final_status
        self.flush_s = flush_s
        self.lock_retry_s = lock_retry_s
        self.created_run = False
        self.device_ids: dict[str, int] = {}
        self.flushes = 0
        self.rows_written = 0
        self.flush_wall_ns: list[int] = []
        self._pending: list[Sample] = []
        self._lost: list[Sample] = []
        self._last_flush = 0.0
        self._mem: Any = None
        self.last_error: str | None = None

    # -- helpers -----------------------------------------------------------------------
    def _connect(self, retry_s: float) -> Any:
        from . import store

        return store.connect(self.db, retry_s=retry_s)

    @contextmanager
    def _attached(self, retry_s: float) -> Iterator[Any]:
        """The store attached as ``gs`` (and made the default) on the in-memory connection, in
        one transaction; detached afterwards so that other processes can open the file."""
        import duckdb  # the full package: its Arrow scans need duckdb._sources

        from . import store

        if self._mem is None:
            self._mem = duckdb.connect(":memory:", config={"threads": 1})
        con = self._mem
        store.retry_while_locked(self.db, retry_s, lambda: con.execute(store.attach_sql(self.db, "gs")))
        try:
            con.execute("USE gs")
            with store.transaction(con):
                yield con
        finally:
            con.execute("USE memory")
            con.execute("DETACH gs")

    def start(self, info: SamplerInfo) -> None:
        from . import store
        from .store import read, runs

        # imported here, before sampling starts: a first import in the dispatch thread would
        # hold the GIL long enough to delay ticks
        import pyarrow  # noqa: F401

        con = self._connect(retry_s=5.0)
        try:
            with store.transaction(con):
                if self.run_id is None:
                    meta = {"sampler": {"pid": os.getpid(), "interval_s": info.interval_s},
                            "vendors": [v.to_dict() for v in info.vendors]}
                    self.run_id = runs.begin_recording(con, name=self.name, source=self.source,
                                                       started_ns=info.started_ns, command=self.command, info=meta)
                    self.created_run = True
                elif read.run_name(con, self.run_id) is None:
                    raise StoreError(f"{self.db}: run {self.run_id} does not exist")
                base = con.execute("SELECT coalesce(max(device_id) + 1, 0) FROM devices WHERE run_id = ?",
                                   [self.run_id]).fetchone()[0]
                for i, d in enumerate(info.devices):
                    did = int(base) + i
                    self.device_ids[d.key] = did
                    props = dict(d.properties)
                    props.update({"supported": list(d.supported), "unsupported": d.unsupported, "parent": d.parent,
                                  "pci_device_id": d.pci_device_id, "spec_exact": d.spec_exact})
                    con.execute(
                        "INSERT INTO devices (run_id, device_id, key, source, trace_id, device_index, vendor, kind, "
                        "name, spec_key, memory_total_bytes, compute_capability, num_sms, warp_size, uuid, "
                        "pci_bus_id, properties) VALUES (?, ?, ?, 'telemetry', NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [self.run_id, did, d.key, d.index, d.vendor, d.kind, d.name, d.spec_key, d.memory_total_bytes,
                         d.compute_capability, d.num_sms, d.warp_size, d.uuid, d.pci_bus_id,
                         json.dumps(props, default=str)])
        finally:
            con.close()
        import duckdb  # the full package: its Arrow scans need duckdb._sources

        self._mem = duckdb.connect(":memory:", config={"threads": 1})
        self._last_flush = time.monotonic()

    def write(self, batch: SampleBatch) -> None:
        for _, rows in batch.ticks:
            for s in rows:
                (self._lost if s.lost else self._pending).append(s)
        if time.monotonic() - self._last_flush >= self.flush_s:
            self.flush(retry_s=self.lock_retry_s)

    def flush(self, retry_s: float = 2.0) -> bool:
        """Write the rows held so far in one transaction; False (rows kept) when the store is
        busy."""
        if not self._pending and not self._lost:
            self._last_flush = time.monotonic()
            return True
        w0 = time.perf_counter_ns()
        rows, lost = self._pending, self._lost
        try:
            with self._attached(retry_s) as con:
                if rows:
                    self._insert_samples(con, rows)
                for s in lost:
                    con.execute(
                        "INSERT INTO annotations (run_id, trace_id, kind, name, ts_ns, dur_ns, device_id, pid, tid, "
                        "value) VALUES (?, NULL, 'device_lost', ?, ?, NULL, ?, NULL, NULL, ?)",
                        [self.run_id, s.device, int(s.ts_ns), self.device_ids.get(s.device),
                         json.dumps({"reason": "device lost while sampling"})])
        except StoreError as exc:
            self.last_error = str(exc)
            return False
        self._pending, self._lost = [], []
        self.rows_written += len(rows)
        self.flushes += 1
        self.flush_wall_ns.append(time.perf_counter_ns() - w0)
        self._last_flush = time.monotonic()
        return True

    def _insert_samples(self, con: Any, rows: list[Sample]) -> None:
        import pyarrow as pa

        cols: dict[str, list[Any]] = {"run_id": [], "device_id": [], "ts_ns": []}
        for m in METRICS:
            cols[m.name] = []
        ints = {m.name for m in METRICS if m.sql_type in ("BIGINT", "INTEGER")}
        for s in rows:
            did = self.device_ids.get(s.device)
            if did is None:
                continue
            cols["run_id"].append(self.run_id)
            cols["device_id"].append(did)
            cols["ts_ns"].append(int(s.ts_ns))
            v = s.values
            for m in METRICS:
                x = v.get(m.name)
                if x is not None:
                    x = _as_int(x) if m.name in ints else float(x)
                cols[m.name].append(x)
        fields = [pa.field("run_id", pa.int64()), pa.field("device_id", pa.int32()), pa.field("ts_ns", pa.int64())]
        fields += [pa.field(m.name, getattr(pa, _ARROW_TYPES.get(m.sql_type, "float64"))()) for m in METRICS]
        table = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in fields})
        names = ", ".join(f.name for f in fields)
        con.register("_gpuscope_samples", table)
        try:
            con.execute(f"INSERT INTO gs.samples ({names}) SELECT {names} FROM _gpuscope_samples")
        finally:
            con.unregister("_gpuscope_samples")

    def close(self, stats: SamplerStats) -> None:
        from .store import runs

        deadline = time.monotonic() + 30.0
        while not self.flush(retry_s=2.0):
            if time.monotonic() > deadline:
                raise StoreError(f"{self.db}: could not write the last samples ({self.last_error})")
        try:
            with self._attached(retry_s=10.0) as con:
                st = stats
                con.execute(
                    "INSERT INTO sampler_stats (run_id, started_ns, ended_ns, interval_ns, ticks, missed_ticks, rows, "
                    "devices, tick_cpu_ns_mean, tick_cpu_ns_p99, tick_cpu_ns_max, tick_wall_ns_mean, tick_wall_ns_p99, "
                    "tick_wall_ns_max, cpu_ns_per_tick_per_device, lateness_ns_p50, lateness_ns_p99, lateness_ns_max, "
                    "drift_ns, sink_cpu_ns, degradations, info) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [self.run_id, st.started_ns, st.ended_ns, int(st.interval_s * 1e9), st.ticks, st.missed_ticks,
                     st.rows, st.devices, st.tick_cpu_ns_mean, st.tick_cpu_ns_p99, st.tick_cpu_ns_max,
                     st.tick_wall_ns_mean, st.tick_wall_ns_p99, st.tick_wall_ns_max, st.cpu_ns_per_tick_per_device,
                     st.lateness_ns_p50, st.lateness_ns_p99, st.lateness_ns_max, st.drift_ns, st.sink_cpu_ns,
                     json.dumps([g.to_dict() for g in st.degradations]),
                     json.dumps({"flushes": self.flushes, "rows_written": self.rows_written,
                                 "flush_wall_ns_max": max(self.flush_wall_ns) if self.flush_wall_ns else None,
                                 "sink_errors": st.sink_errors, "clock_fallbacks": st.clock_fallbacks})])
                if self.created_run:
                    if self.final_status is not None:
                        runs.finish(con, self.run_id, self.final_status, st.ended_ns)
                    else:
                        runs.set_ended(con, self.run_id, st.ended_ns)
        finally:
            if self._mem is not None:
                self._mem.close()
                self._mem = None
