"""The store sink: :class:`StoreSink` buffers a run's samples and writes them, with its
devices, device-lost annotations and sampler stats, through the store's telemetry writer
(:mod:`gpuscope.store.telemetry`) in short transactions. The run itself (its row in ``runs``,
its status) is created and finished only through :mod:`gpuscope.store.runs`.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..collectors.base import Sample
from ..errors import StoreError
from ..metrics import METRICS
from ..redact import redact_command
from .base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = ["StoreSink"]


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
    long-lived in-memory connection only for each flush, because attaching and detaching costs
    far less CPU than opening a new connection (bench/README.md, "the store sink's flush"). A
    store held by another writer is retried at the next flush; no row is dropped.
    """

    def __init__(self, db: str | Path, *, run_id: int | None = None, name: str = "telemetry",
                 command: str | None = None, source: str = "run", final_status: str | None = "complete",
                 flush_s: float = 1.0, lock_retry_s: float = 0.5, retention_s: float | None = None,
                 prune_every_s: float = 3600.0) -> None:
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

    # -- helpers -----------------------------------------------------------------------
    def _connect(self, retry_s: float) -> Any:
        from .. import store

        return store.connect(self.db, retry_s=retry_s)

    @contextmanager
    def _attached(self, retry_s: float) -> Iterator[Any]:
        """The store attached as ``gs`` (and made the default) on the in-memory connection, in
        one transaction; detached afterwards so that other processes can open the file."""
        import duckdb  # the full package: its Arrow scans need duckdb._sources

        from .. import store

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
        from .. import store
        from ..store import read, runs, telemetry

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
        prune = self.retention_s is not None and time.monotonic() - self._last_prune >= self.prune_every_s
        if not self._pending and not self._lost and not prune:
            self._last_flush = time.monotonic()
            return True
        from ..store import telemetry

        w0 = time.perf_counter_ns()
        rows, lost = self._pending, self._lost
        try:
            with self._attached(retry_s) as con:
                if rows:
                    self._insert_samples(con, rows)
                for s in lost:
                    telemetry.insert_device_lost(con, self.run_id, s.device, int(s.ts_ns), self.device_ids.get(s.device))
                if prune:
                    cutoff = time.time_ns() - int(self.retention_s * 1e9)  # type: ignore[operator]
                    self.pruned += telemetry.prune_samples(con, self.source, cutoff)
                    self._last_prune = time.monotonic()
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

        from ..store import telemetry

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
        telemetry.append_samples(con, table, [f.name for f in fields])

    def close(self, stats: SamplerStats) -> None:
        from ..store import runs, telemetry

        deadline = time.monotonic() + 30.0
        while not self.flush(retry_s=2.0):
            if time.monotonic() > deadline:
                raise StoreError(f"{self.db}: could not write the last samples ({self.last_error})")
        try:
            with self._attached(retry_s=10.0) as con:
                st = stats
                telemetry.insert_sampler_stats(con, self.run_id, [
                    st.started_ns, st.ended_ns, int(st.interval_s * 1e9), st.ticks, st.missed_ticks,
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
