"""Stage traces: spool (:mod:`.read`), parse (:mod:`.parse`) and link (:mod:`.link`) a run's
trace files on one in-memory DuckDB, within a memory limit, with more threads for large inputs.
Nothing here touches the store; :mod:`.write` writes what the staging tables hold.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError, InputError
from .exported import GRAPH_EVENTS_KEY, export_block, make_extra_tables, split_traces, stage_extras
from .link import link_kernels, split_events
from .parse import (
    DUR_MAX_NS, TS_MAX_NS, TS_MIN_NS, Batches, IngestCounts, count_events, count_graph_events, header_value,
    load_trace, time_base, usable_events,
)
from .progress import Progress, ProgressLine, quiet
from .read import (
    MAX_INFLATE_RATIO, SPOOL_DIR_PREFIX, InflateLimitError, PartStream, SpoolAhead, open_regular, shown,
)

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: Absolute Kineto timestamps are epoch microseconds (> 1e15 since 2001); smaller values
#: without ``baseTimeNanoseconds`` are relative to an unknown base.
ABSOLUTE_US_THRESHOLD = 1e14

#: Every temporary table ingest creates on its staging connection.
STAGING_TABLES = (
    "ev", "ev_counts", "gpu", "rt", "capture_window", "captured", "op_stage", "annotation_stage", "op_by_ext", "rt_link",
    "op_depth", "kernel_stage", "op_parent", "graph_stage", "op_launching", "graph_map", "dev_map", "sample_stage",
    "export_annotation_stage", "_xev", "_xcpu", "_xgpu",
)


@dataclass
class TraceInfo:
    """What ingest learned about one trace file."""

    trace_id: int
    path: str
    form: str
    size_bytes: int
    json_bytes: int
    events: int
    base_time_ns: int
    ts_relative: bool
    rank: int | None
    header: dict[str, Any]
    #: Events named ``*StreamBeginCapture`` and ``*GraphLaunch`` (any category): design.md §4.2
    #: leaves out a trace that only captures graphs beside one that launches them.
    graph_events: dict[str, int] = field(default_factory=dict)
    #: What the user should know about this trace's header: fields out of range, ignored.
    notes: list[str] = field(default_factory=list)
    #: For gpuscope's own timeline export, the first of the traces it holds carries the export's
    #: block (:func:`.exported.export_block`); each of them is ``from_export`` (its header and
    #: graph events are the stored trace's, not counted again from the file).
    export: dict[str, Any] | None = None
    from_export: bool = False


#: A rank is stored as a 32-bit integer (``traces.rank``); torch.distributed's are from 0.
MAX_RANK = (1 << 31) - 1


def _rank(header: dict[str, Any], notes: list[str] | None = None, source: str = "") -> int | None:
    """``distributedInfo.rank``: a whole number from 0 to :data:`MAX_RANK`; anything else
    (``2**70``, ``-1``, ``"0"``, ``true``) is ignored, and said in ``notes``."""
    info = header.get("distributedInfo")
    if not isinstance(info, dict) or info.get("rank") is None:
        return None
    rank = info["rank"]
    if isinstance(rank, float) and rank.is_integer():
        rank = int(rank)
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank <= MAX_RANK:
        return rank
    if notes is not None:
        notes.append(f"{source}: distributedInfo.rank {header_value(rank)} is not a rank (a whole number from 0 "
                     f"to {MAX_RANK}): ignored")
    return None


#: Inputs with at least this much JSON are parsed and linked with several threads (the parts of
#: :func:`~.read.spool_events` are parsed several at once); smaller ones with one. Below ~50 MB
#: a second thread only costs memory; above it, it saves time (measurements in bench/README.md,
#: "Where ingest's constants come from").
PARALLEL_JSON_BYTES = 48 << 20


class StagingConnection:
    """The in-memory staging DuckDB and the spill folder it writes to (its ``temp_directory``),
    owned together: :meth:`close` closes the connection, then removes the folder.

    DuckDB removes a spilled block's file when the block is freed, which can be long after
    staging (the write to the store reads the staged tables back; ``analyze TRACE`` keeps the
    connection to read the run), so the folder must outlive the spools of
    :class:`~.read.SpoolAhead` and live exactly as long as the connection (issue 30, point 2).
    Everything else (``execute``, ``sql``, ...) is the connection's; :attr:`con` is the
    connection itself, for code typed against it.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, spill_dir: Path) -> None:
        self.con = con
        self.spill_dir = spill_dir
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        # only reached for what this class does not define: the connection's own methods
        return getattr(self.con, name)

    def close(self) -> None:
        """Close the connection, then remove its spill folder (in that order: DuckDB removes
        its spill files at close). Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.con.close()
        finally:
            shutil.rmtree(self.spill_dir, ignore_errors=True)

    def __enter__(self) -> StagingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _staging_connection() -> StagingConnection:
    """A new in-memory staging database, spilling into a folder of its own (named like the
    spools, so that :func:`~.read.sweep_stale_spools` removes those of a killed ingest, and
    concurrent ingests never share spill files)."""
    from .._db import duckdb, sql_literal

    spill_dir = Path(tempfile.mkdtemp(prefix=f"{SPOOL_DIR_PREFIX}{os.getpid()}-spill-"))
    try:
        con = duckdb.connect(":memory:", config={"threads": 1})
    except BaseException:
        shutil.rmtree(spill_dir, ignore_errors=True)
        raise
    staging = StagingConnection(con, spill_dir)
    try:
        con.execute(f"SET temp_directory = {sql_literal(str(spill_dir))}")
    except BaseException:
        staging.close()
        raise
    return staging


#: DuckDB memory limit while staging with one thread (inputs under
#: :data:`PARALLEL_JSON_BYTES`). Above it the staged events spill to a temporary
#: directory instead of growing the process: a lower peak at no measurable cost in time, where
#: tighter limits cost time (bench/README.md). An input that cannot be staged within it
#: (DuckDB cannot spill everything) is staged again without a limit.
STAGING_MEMORY_LIMIT = "100MB"
#: The memory limit once the input reaches :data:`PARALLEL_JSON_BYTES`.
LARGE_STAGING_MEMORY_LIMIT = "512MB"


def default_threads() -> int:
    """Threads for a large ingest: the cores this process may use, at most 8 (each holds a few
    parts of the spool at once)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def stage_traces(
    paths: Sequence[Path], progress: Progress = quiet, optional: Collection[Path] = (),
    max_inflate_ratio: float = MAX_INFLATE_RATIO, threads: int | None = None,
) -> tuple[StagingConnection, list[TraceInfo], IngestCounts]:
    """Spool, parse and link ``paths`` into staging tables of an in-memory DuckDB.

    Files in ``optional`` (found by scanning a directory) that turn out not to be traces are
    skipped with a note instead of failing the ingest. Returns the staging connection (tables
    ``kernel_stage``, ``op_stage``, ``annotation_stage``) with its spill folder, which the
    caller closes (:meth:`StagingConnection.close`), per-file information, and
    :class:`~.parse.IngestCounts`.
    Nothing touches the store. ``threads`` (default :func:`default_threads`) is the most
    DuckDB threads and files spooled at once; inputs under :data:`PARALLEL_JSON_BYTES` are
    parsed on one.
    """
    from .._db import duckdb

    threads = max(1, threads or default_threads())
    try:
        staged = _stage_traces(paths, progress, optional, STAGING_MEMORY_LIMIT, max_inflate_ratio, threads)
        try:
            staged[0].con.execute("RESET memory_limit")  # the write to the store is not bounded
        except BaseException:
            staged[0].close()
            raise
        return staged
    except duckdb.OutOfMemoryException:
        progress(f"staging needs more than {STAGING_MEMORY_LIMIT} of memory: staging again without a limit")
    try:
        return _stage_traces(paths, progress, optional, None, max_inflate_ratio, threads)
    except duckdb.OutOfMemoryException as exc:
        what = ", ".join(shown(p) for p in paths)
        raise GpuscopeError(f"{what}: {str(exc).splitlines()[0]}") from None


def _stage_traces(
    paths: Sequence[Path], progress: Progress, optional: Collection[Path], memory_limit: str | None,
    max_inflate_ratio: float = MAX_INFLATE_RATIO, threads: int = 1,
) -> tuple[StagingConnection, list[TraceInfo], IngestCounts]:
    from .._db import sql_literal

    ahead = SpoolAhead(paths, max_inflate_ratio, workers=threads)
    try:
        staging = _staging_connection()
        try:
            if memory_limit:
                staging.con.execute(f"SET memory_limit = {sql_literal(memory_limit)}")
            infos, counts = _stage_into(staging.con, paths, progress, optional, memory_limit, ahead, threads)
            return staging, infos, counts
        except BaseException:
            staging.close()
            raise
    finally:
        ahead.close()  # the spools only: the spill folder is the staging connection's


def _stage_into(
    con: duckdb.DuckDBPyConnection, paths: Sequence[Path], progress: Progress, optional: Collection[Path],
    memory_limit: str | None, ahead: SpoolAhead, max_threads: int = 1,
) -> tuple[list[TraceInfo], IngestCounts]:
    from .._db import sql_literal

    batches = Batches(con)
    infos: list[TraceInfo] = []
    not_traces: list[str] = []
    json_total = 0
    line = progress if isinstance(progress, ProgressLine) else None  # (the live line, when shown)
    if line is not None:
        line.total_bytes = sum(p.stat().st_size for p in paths)
    state = {"threads": 1}

    def go_parallel() -> None:
        # Large inputs: the staged rows of a million events outgrow the small limit and would
        # spill to disk, which doubles the parse (bench/README.md, "Ingest at scale"); past
        # the large limit they spill, which keeps 5M events under 1 GiB.
        if state["threads"] == 1 and max_threads > 1:
            state["threads"] = max_threads
            con.execute(f"SET threads = {max_threads}")
        con.execute(f"SET memory_limit = {sql_literal(LARGE_STAGING_MEMORY_LIMIT)}" if memory_limit is not None
                    else "RESET memory_limit")

    if sum(_json_estimate(p) for p in paths) >= PARALLEL_JSON_BYTES:
        go_parallel()
    for index, path in enumerate(paths):
        trace_id = len(infos)
        progress(f"reading {path}")
        stream = ahead.take(index)
        size = path.stat().st_size
        on_batch = None
        if line is not None:
            def on_batch(events: int, name: str = path.name, size: int = size, stream: PartStream = stream) -> None:
                line.tick(name, events, stream.read_fraction(), size)
        try:
            n, spooled = load_trace(batches, trace_id, stream, ahead.dir, state["threads"], on_batch=on_batch,
                                    max_inflate_ratio=ahead.max_inflate_ratio)
        except InputError as exc:
            if path in optional and len(paths) > 1 and not isinstance(exc, InflateLimitError):
                batches.delete_trace(trace_id)
                not_traces.append(f"{shown(path.name)} ({exc.message})")
                continue
            raise
        json_total += spooled.json_bytes
        if json_total >= PARALLEL_JSON_BYTES:
            go_parallel()
        if line is not None:
            line.file_done(size)
        usable, min_ts = usable_events(batches, trace_id)
        if path in optional and len(paths) > 1 and not usable:
            batches.delete_trace(trace_id)
            not_traces.append(f"{shown(path.name)} (no trace events)")
            continue
        header_notes: list[str] = []
        base = time_base(spooled.header, header_notes, shown(path))
        # (no base: ts_ns is ts in µs times 1000)
        relative = base > 0 or (min_ts is not None and min_ts < ABSOLUTE_US_THRESHOLD * 1000)
        info = TraceInfo(trace_id, str(path), spooled.form, spooled.size_bytes, spooled.json_bytes, n,
                         base, relative, _rank(spooled.header, header_notes, shown(path)), spooled.header,
                         notes=header_notes)
        block = export_block(spooled.header)
        if block is None:
            infos.append(info)
            continue
        # gpuscope's own export: its events go back to the traces they came from, each with the
        # header it was stored with, and its counter tracks become samples
        ids = split_traces(batches, trace_id, block, trace_id + 1)
        for j, (tid, stored) in enumerate(zip(ids, block["traces"])):
            meta = dict(stored.get("metadata") or {})
            graph = meta.pop(GRAPH_EVENTS_KEY, None)
            infos.append(replace(
                info, trace_id=tid, header=meta, rank=_rank({"distributedInfo": {"rank": stored.get("rank")}}),
                graph_events=graph if isinstance(graph, dict) else {}, export=block if j == 0 else None,
                from_export=True, notes=header_notes if j == 0 else [], events=n if j == 0 else 0,
                size_bytes=info.size_bytes if j == 0 else 0, json_bytes=info.json_bytes if j == 0 else 0))
        if not any(i.export is not None for i in infos[:-len(ids)]):
            make_extra_tables(con)
        stage_extras(con, trace_id, path, block, base, ahead.dir, ahead.max_inflate_ratio)
    progress("linking kernels to launches and ops")
    batches.ensure_shape()
    for name in ("gpu", "annotation_stage", "ev_counts"):  # small next to the ops and launches
        batches.materialize(name)
    split_events(batches)
    event_counts = count_events(con)
    graph_events = count_graph_events(con)
    for info in infos:
        if not info.from_export:  # (an export's file mixes its traces' events: their stored counts stand)
            info.graph_events = graph_events.get(info.trace_id, {"stream_begin_capture": 0, "graph_launch": 0})
    con.execute("DROP TABLE ev_counts")
    replayed, mapped = link_kernels(con)
    counts = replace(event_counts, not_traces=not_traces, graph_replayed_kernels=replayed, graph_mapped_kernels=mapped)
    apply_time_bases(con, infos)
    return infos, counts


#: The staged times (table, its columns in ns) that count from a trace's time base.
_TIMED_COLUMNS = (("kernel_stage", ("ts_ns", "launch_ts_ns")), ("op_stage", ("ts_ns",)),
                  ("annotation_stage", ("ts_ns",)), ("graph_stage", ("graph_begin_ns", "ts_ns")))


def apply_time_bases(con: duckdb.DuckDBPyConnection, infos: Sequence[TraceInfo]) -> None:
    """Add each trace's ``baseTimeNanoseconds`` to its staged times (they were parsed before
    the base, which Kineto writes after the events, was read). Linking compares times within a
    trace only, so it does not need them. A base that would take a trace's times out of the
    range the store keeps (:data:`~.parse.TS_MIN_NS` to :data:`~.parse.TS_MAX_NS`) is ignored,
    with a note, instead of overflowing."""
    for info in infos:
        if info.base_time_ns and not _base_fits(con, info.trace_id, info.base_time_ns):
            info.notes.append(f"{shown(info.path)}: baseTimeNanoseconds {info.base_time_ns} takes the trace's times "
                              f"past 2^62 ns (the year 2116): ignored")
            info.base_time_ns = 0
    based = [(i.trace_id, i.base_time_ns) for i in infos if i.base_time_ns]
    if not based:
        return
    case = "CASE trace_id " + " ".join(f"WHEN {int(t)} THEN {int(b)}" for t, b in based) + " ELSE 0 END"
    ids = ", ".join(str(int(t)) for t, _ in based)
    con.execute("".join(
        f"UPDATE {table} SET " + ", ".join(f"{c} = {c} + {case}" for c in cols) + f" WHERE trace_id IN ({ids});"
        for table, cols in _TIMED_COLUMNS))


def _base_fits(con: duckdb.DuckDBPyConnection, trace_id: int, base_ns: int) -> bool:
    """Whether ``base_ns`` added to the trace's staged times keeps them within the store's range."""
    starts, ends = [], []
    for table, cols in _TIMED_COLUMNS:
        for c in cols:
            starts.append(f"SELECT min({c}) AS v FROM {table} WHERE trace_id = {int(trace_id)}")
            dur = {"ts_ns": "dur_ns", "launch_ts_ns": "launch_dur_ns"}.get(c) if table != "graph_stage" else None
            end = f"{c}::HUGEINT + coalesce({dur}, 0)" if dur else f"{c}::HUGEINT"
            ends.append(f"SELECT max({end}) AS v FROM {table} WHERE trace_id = {int(trace_id)}")
    from .._db import one_row

    lo, hi = one_row(con.execute(f"SELECT (SELECT min(v) FROM ({' UNION ALL '.join(starts)})), "
                                 f"(SELECT max(v) FROM ({' UNION ALL '.join(ends)}))").fetchone())
    return (lo is None or int(lo) + base_ns >= TS_MIN_NS) and (hi is None or int(hi) + base_ns < TS_MAX_NS + DUR_MAX_NS)


def _json_estimate(path: Path) -> int:
    """The JSON a trace file holds, guessed before reading it: its size, or 20 times that for
    gzip (real traces inflate 7-21x; bench/README.md, "Gzip inflation ratios")."""
    try:
        with open_regular(path) as f:
            gz = f.read(2) == b"\x1f\x8b"
        return path.stat().st_size * (20 if gz else 1)
    except (OSError, InputError):
        return 0
