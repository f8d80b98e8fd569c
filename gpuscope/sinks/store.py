"""The store sink: :class:`StoreSink` buffers a run's samples and writes them, with its
devices, device-lost annotations and sampler stats, through the store's telemetry writer
(:mod:`gpuscope.store.telemetry`) in short transactions. The run itself (its row in ``runs``,
its info, its status) belongs to the run's orchestrator, through :mod:`gpuscope.store.runs`:
a sink given a run id never writes it (only a sink used on its own, given none, creates and
finishes its own run, in :meth:`StoreSink._begin_own_run` and :meth:`StoreSink._end_own_run`).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..collectors.base import Sample
from ..errors import StoreBusyError, StoreError, StoreWriteError
from ..metrics import METRICS
from ..redact import redact_command
from .base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = ["StoreSink"]


_ARROW_TYPES = {"DOUBLE": "float64", "BIGINT": "int64", "INTEGER": "int32"}

#: Samples held in memory while the store cannot take them (a full disk, a read-only store, a
#: busy one), as Arrow columns: 300 bytes a sample (36 metric columns of 8 bytes and the keys),
#: so 30 MB at most: an hour of 3 devices at 10 Hz, three hours of 9 at 1 Hz. Beyond it the oldest
#: are dropped and counted: a monitor that runs for days on a full disk must not grow.
MAX_HELD_ROWS = 100_000


def _as_int(v: Any) -> int | None:
    if v is None:
        return None
    i = int(v)
    return i - 2**64 if i >= 2**63 else i  # 64-bit vendor bit masks: stored as their signed twin


class StoreSink(Sink):
    """Writes samples (and the devices, and the sampler's stats) into the DuckDB store.

    Given a ``run_id`` (what the orchestrators of a run do: ``gpuscope run``'s wrapper, the
    monitor) the run must exist and the sink writes under it devices, samples, device-lost
    annotations and the sampler's stats, and nothing else: the run's row, its info and its end
    are its orchestrator's, through :mod:`gpuscope.store.runs`. Samples the store never took
    are said in :attr:`missing_note`, which the orchestrator writes with the run's end.

    With ``run_id=None`` (a sampler used on its own: the API, tests, benchmarks) the sink
    stands in for an orchestrator, through the same run API: it creates the run (``source``,
    ``name``, ``command``) ``recording`` at start and at close finishes it ``final_status``
    (default ``complete``; None records its end and leaves the status to the caller) with the
    note of what is missing.

    DuckDB allows one writing process per file and no readers meanwhile, so rows are kept in
    memory and written in one short transaction at most every ``flush_s`` seconds, and readers
    in other processes (``gpuscope runs``) get in between. The store is attached to a
    long-lived in-memory connection only for each flush, because attaching and detaching costs
    far less CPU than opening a new connection (bench/README.md, "the store sink's flush"). A
    store held by another writer is retried at the next flush.

    A store that refuses the write (its disk full, its file system read-only) never stops the
    sampler or what it watches: the rows are held in memory, up to ``max_held_rows`` (the oldest
    dropped beyond that), and written at the next flush that succeeds. ``report`` gets one line
    when the store starts refusing (why, and how many samples wait), one when it takes them
    again, and at close one with the samples that never reached it; the default writes them
    on stderr as ``gpuscope SOURCE: ...``. At close a refusing store is retried for
    ``close_retry_s`` seconds, then given up on without an exception: the run keeps what was
    written, and its recorder, gone, leaves it ``incomplete``.
    """

    def __init__(self, db: str | Path, *, run_id: int | None = None, name: str = "telemetry",
                 command: str | None = None, source: str = "run", final_status: str | None = "complete",
                 flush_s: float = 1.0, lock_retry_s: float = 0.5, retention_s: float | None = None,
                 prune_every_s: float = 3600.0, max_held_rows: int = MAX_HELD_ROWS, close_retry_s: float = 3.0,
                 report: Callable[[str], None] | None = None) -> None:
        self.db = Path(db)
        self.run_id = run_id
        self.name = name
        # The store sink is where a run's command is written: redacted here too, whatever the caller did.
        self.command = redact_command(command)
        self.source = source
        self.final_status = final_status
        self.flush_s = flush_s
        self.lock_retry_s = lock_retry_s
        #: samples of this source's runs older than this are deleted at the first flush and then
        #: every ``prune_every_s`` (``gpuscope monitor --retention``)
        self.retention_s = retention_s
        self.prune_every_s = prune_every_s
        self._last_prune = -1e18
        self.pruned = 0
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
        self.max_held_rows = max(1, int(max_held_rows))
        self.close_retry_s = close_retry_s
        self.report = report or self._say
        #: samples not in the store yet, oldest first: Arrow tables (a sample's dict of Python
        #: floats costs several times its columns), one per failed flush
        self._held: list[Any] = []
        self.held_rows = 0
        #: the most samples held at once, and those dropped (oldest first) beyond ``max_held_rows``
        self.held_rows_max = 0
        self.rows_dropped = 0
        #: flushes the store refused (a full disk, read-only), and why, while it still refuses
        self.refused_flushes = 0
        self.refusing: str | None = None
        self._refused_reasons: set[str] = set()
        #: samples that never reached the store (dropped, or still held at close)
        self.rows_not_stored = 0
        self.missing_note: str | None = None
        #: commits whose checkpoint at detach failed (a full disk): the rows are in the store's
        #: write-ahead log, which DuckDB replays and checkpoints at a later open
        self.checkpoint_failures = 0

    def _say(self, line: str) -> None:
        print(f"gpuscope {self.source}: {line}", file=sys.stderr, flush=True)

    # -- helpers -----------------------------------------------------------------------
    @contextmanager
    def _attached(self, retry_s: float) -> Iterator[Any]:
        """The store attached as ``gs`` (and made the default) on the in-memory connection, in
        one transaction; detached afterwards so that other processes can open the file."""
        import duckdb  # the full package: its Arrow scans need duckdb._sources

        from .. import store

        if self._mem is None:
            self._mem = duckdb.connect(":memory:", config={"threads": 1})
        con = self._mem
        store.check_writable(self.db)  # a store made read-only under a running sampler: say that, not DuckDB's I/O error
        store.retry_while_locked(self.db, retry_s, lambda: con.execute(store.attach_sql(self.db, "gs")))
        committed = False
        try:
            con.execute("USE gs")
            with store.transaction(con):
                yield con
            committed = True
        finally:
            try:
                con.execute("USE memory")
                con.execute("DETACH gs")
            except duckdb.Error:
                # DETACH checkpoints the write-ahead log into the file; on a full disk that fails
                # after the commit, whose rows are safe in the log (DuckDB replays it at the next
                # open). Raising here would keep them and write them twice; when the body or the
                # commit failed, its own error is the one to see.
                if committed:
                    self.checkpoint_failures += 1

    def start(self, info: SamplerInfo) -> None:
        from .. import store
        from ..store import read, telemetry

        # imported here, before sampling starts: a first import in the dispatch thread would
        # hold the GIL long enough to delay ticks
        import pyarrow  # noqa: F401

        # a store the file system refuses (full, read-only) is one line here, before anything runs
        with store.writing(self.db, retry_s=5.0) as con:
            if self.run_id is None:
                self.run_id = self._begin_own_run(con, info)
                self.created_run = True
            elif read.run_name(con, self.run_id) is None:
                raise StoreError(f"{self.db}: run {self.run_id} does not exist")
            base = telemetry.next_device_id(con, self.run_id)
            for i, d in enumerate(info.devices):
                did = int(base) + i
                self.device_ids[d.key] = did
                props = dict(d.properties)
                props.update({"supported": list(d.supported), "unsupported": d.unsupported, "parent": d.parent,
                              "pci_device_id": d.pci_device_id, "spec_exact": d.spec_exact})
                telemetry.insert_device(
                    con, self.run_id, did, key=d.key, index=d.index, vendor=d.vendor, kind=d.kind, name=d.name,
                    spec_key=d.spec_key, memory_total_bytes=d.memory_total_bytes,
                    compute_capability=d.compute_capability, num_sms=d.num_sms, warp_size=d.warp_size,
                    uuid=d.uuid, pci_bus_id=d.pci_bus_id, properties=props)
        import duckdb  # the full package: its Arrow scans need duckdb._sources

        self._mem = duckdb.connect(":memory:", config={"threads": 1})
        self._last_flush = time.monotonic()

    def _run_id(self) -> int:
        """The run written under (set by the caller, or by :meth:`start` for a run of its own)."""
        if self.run_id is None:
            raise StoreError(f"{self.db}: the store sink was not started: it has no run to write under")
        return self.run_id

    # -- a run of its own (a sink used without an orchestrator) ---------------------------
    def _begin_own_run(self, con: Any, info: SamplerInfo) -> int:
        """Create the run this sink records on its own, naming this process as its recorder."""
        from ..store import runs
        from ..store.run_info import RunInfo, SamplerProcess

        meta = RunInfo(sampler=SamplerProcess(pid=os.getpid(), interval_s=info.interval_s),
                       vendors=[v.to_dict() for v in info.vendors])
        return runs.begin_recording(con, name=self.name, source=self.source, started_ns=info.started_ns,
                                    command=self.command, info=meta)

    def _end_own_run(self, con: Any, ended_ns: int | None, note: str | None) -> None:
        """Finish the run this sink created (``final_status``, the note of what is missing), or
        with ``final_status=None`` record its end and the note, leaving its status to the caller."""
        from ..store import runs
        from ..store.run_info import RunInfo

        run_id = self.run_id
        if run_id is None:  # never started: there is no run to end
            return
        if self.final_status is not None:
            runs.finish(con, run_id, self.final_status, ended_ns, notes=[note] if note else ())
            return
        if note:
            runs.merge_info(con, run_id, RunInfo(), append_notes=[note])
        if ended_ns is not None:
            runs.set_ended(con, run_id, ended_ns)

    def write(self, batch: SampleBatch) -> None:
        for _, rows in batch.ticks:
            for s in rows:
                (self._lost if s.lost else self._pending).append(s)
        if time.monotonic() - self._last_flush >= self.flush_s:
            self.flush(retry_s=self.lock_retry_s)

    def flush(self, retry_s: float = 2.0) -> bool:
        """Write the rows held so far in one transaction; False (rows kept, up to
        ``max_held_rows``) when the store is busy or refuses the write."""
        prune = self.retention_s is not None and time.monotonic() - self._last_prune >= self.prune_every_s
        if self._pending:
            self._hold(self._samples_table(self._pending))
            self._pending = []
        if not self._held and not self._lost and not prune:
            self._last_flush = time.monotonic()
            return True
        from .. import store
        from ..store import telemetry

        w0 = time.perf_counter_ns()
        lost = self._lost
        if len(self._held) > 1:  # one statement for all held rows, without copying them
            import pyarrow as pa

            self._held = [pa.concat_tables(self._held)]
        try:
            with self._attached(retry_s) as con:
                for table in self._held:
                    telemetry.append_samples(con, table, table.column_names)
                for s in lost:
                    telemetry.insert_device_lost(con, self._run_id(), s.device, int(s.ts_ns), self.device_ids.get(s.device))
                if prune:
                    cutoff = time.time_ns() - int(self.retention_s * 1e9)  # type: ignore[operator]
                    self.pruned += telemetry.prune_samples(con, self.source, cutoff)
                    self._last_prune = time.monotonic()
        except StoreBusyError as exc:
            self.last_error = str(exc)
            return False
        except Exception as exc:
            reason = store.write_failure_reason(exc)
            if reason is None and not isinstance(exc, StoreError):
                raise
            self.last_error = str(exc)
            if reason is not None:
                self._refused(reason)
                # next try at the next flush, not at every batch: each try writes every held sample
                self._last_flush = time.monotonic()
            return False
        stored = self.held_rows
        self._held, self.held_rows, self._lost = [], 0, []
        self.rows_written += stored
        self.flushes += 1
        self.flush_wall_ns.append(time.perf_counter_ns() - w0)
        self._last_flush = time.monotonic()
        if self.refusing is not None:
            self.refusing = None
            dropped = f" ({self.rows_dropped:,} dropped while it could not)" if self.rows_dropped else ""
            self.report(f"{self.db}: the store takes writes again: {stored:,} held samples stored{dropped}")
        return True

    def _hold(self, table: Any) -> None:
        """Keep ``table`` until a flush succeeds; beyond ``max_held_rows`` drop the oldest."""
        if table.num_rows:
            self._held.append(table)
            self.held_rows += table.num_rows
        excess = self.held_rows - self.max_held_rows
        while excess > 0 and self._held:
            first = self._held[0]
            cut = min(excess, first.num_rows)
            if cut == first.num_rows:
                self._held.pop(0)
            else:
                self._held[0] = first.slice(cut)
            self.held_rows -= cut
            self.rows_dropped += cut
            excess -= cut
        self.held_rows_max = max(self.held_rows_max, self.held_rows)

    def _refused(self, reason: str) -> None:
        """The store refused a flush: one line when it starts (not at every retry)."""
        self.refused_flushes += 1
        self._refused_reasons.add(reason)
        if self.refusing is None:
            self.refusing = reason
            self.report(f"{self.db}: cannot write to the store ({reason}): {self.held_rows:,} samples not stored yet, "
                        f"held in memory (at most {self.max_held_rows:,}, the oldest dropped beyond) and retried "
                        f"every {self.flush_s:g} s")

    def _samples_table(self, rows: list[Sample]) -> Any:
        """The rows as an Arrow table in the ``samples`` table's columns."""
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
        return pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in fields})

    def close(self, stats: SamplerStats) -> None:
        from .. import store
        from .._db import duckdb
        from ..store import telemetry

        deadline = time.monotonic() + 30.0
        refused_deadline = time.monotonic() + self.close_retry_s
        gave_up = False
        while not self.flush(retry_s=2.0):
            if self.refusing is not None:
                # A full disk or a read-only store: retried a little (space may come back), then
                # given up on. Never an exception: what the sampler watched (gpuscope run's
                # program) has its own outcome, and the run keeps what was written.
                if time.monotonic() > refused_deadline:
                    gave_up = True
                    break
                time.sleep(min(0.5, self.flush_s))
                continue
            if time.monotonic() > deadline:
                raise StoreError(f"{self.db}: could not write the last samples ({self.last_error})")
        self.rows_not_stored = self.held_rows + self.rows_dropped if gave_up else self.rows_dropped
        if gave_up:
            before = f"the {self.rows_written:,} written before are in it" if self.rows_written \
                else "none was written before"
            self.report(f"{self.db}: {self.rows_not_stored:,} samples could not be stored ({self.refusing}); {before}")
        st = stats
        stats_row = [
            st.started_ns, st.ended_ns, int(st.interval_s * 1e9), st.ticks, st.missed_ticks,
            st.rows, st.devices, st.tick_cpu_ns_mean, st.tick_cpu_ns_p99, st.tick_cpu_ns_max,
            st.tick_wall_ns_mean, st.tick_wall_ns_p99, st.tick_wall_ns_max, st.cpu_ns_per_tick_per_device,
            st.lateness_ns_p50, st.lateness_ns_p99, st.lateness_ns_max, st.drift_ns, st.sink_cpu_ns,
            json.dumps([g.to_dict() for g in st.degradations]),
            json.dumps({"flushes": self.flushes, "rows_written": self.rows_written,
                        "flush_wall_ns_max": max(self.flush_wall_ns) if self.flush_wall_ns else None,
                        "sink_errors": st.sink_errors, "clock_fallbacks": st.clock_fallbacks,
                        "refused_flushes": self.refused_flushes, "held_rows_max": self.held_rows_max,
                        "rows_dropped": self.rows_dropped, "rows_not_stored": self.rows_not_stored,
                        "refused_reasons": sorted(self._refused_reasons)})]

        note = None
        if self.rows_not_stored:
            why = "before the recording ended" if gave_up else \
                f"while more waited than the newest {self.max_held_rows} held in memory"
            note = (f"{self.rows_not_stored} samples were not stored: the store could not be written "
                    f"({', '.join(sorted(self._refused_reasons))}) {why}")
        #: the note of what is missing while it is not in the store: the run's orchestrator
        #: (gpuscope run's wrapper, the monitor) writes it with the run's end, so a run never
        #: reads complete without it
        self.missing_note = note

        def end_of_run(con: Any) -> None:
            # a run this sink did not create is not its to touch: the note waits for its orchestrator
            if self.created_run:
                self._end_own_run(con, st.ended_ns, note)

        ended = not self.created_run  # (the end of a run it did not create is not the sink's to store)
        try:
            with _refused_as_error(self.db, duckdb):
                if not self.rows_not_stored:
                    with self._attached(retry_s=10.0) as con:
                        telemetry.insert_sampler_stats(con, self._run_id(), stats_row)
                        end_of_run(con)
                    if self.created_run:  # written with its run's end
                        self.missing_note = None
                else:
                    # On a disk that had no room for the samples: the note of what is missing
                    # and the run's end first, a few hundred bytes that may fit where the
                    # samples did not; then the sampler's figures (its degradations can be
                    # kilobytes).
                    if self.created_run:
                        with self._attached(retry_s=10.0) as con:
                            end_of_run(con)
                        ended = True
                        self.missing_note = None
                    with self._attached(retry_s=10.0) as con:
                        telemetry.insert_sampler_stats(con, self._run_id(), stats_row)
        except (StoreError, StoreWriteError) as exc:
            reason = store.write_failure_reason(exc)
            if reason is None:
                raise
            if not gave_up:  # (after giving up, the line above said that the store refuses)
                what = "the sampler's figures" if ended else "the run's end and the sampler's figures"
                self.report(f"{self.db}: {what} could not be stored ({reason})")
        finally:
            self._close_memory()

    def _close_memory(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None


@contextmanager
def _refused_as_error(db: Path, duckdb: Any) -> Iterator[None]:
    """A write the store's file system refuses, as one line (:func:`gpuscope.store.write_error`)
    instead of DuckDB's error naming its log file."""
    from .. import store

    try:
        yield
    except duckdb.Error as exc:
        raise store.write_error(db, exc) or exc from None
