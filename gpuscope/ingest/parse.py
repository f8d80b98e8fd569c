"""Parse spooled events into rows: DuckDB's JSON reader turns the ``traceEvents`` array of one
trace (spooled by :mod:`.read`) into the temporary table ``ev``, one row per event, classified
(GPU activity, CPU op, runtime call, annotation, ignored, malformed), with the fields gpuscope
uses pulled out of ``args`` and times in ns.

The array is parsed in C++, in parts of a few MiB cut between events as it is spooled
(:func:`~.read.spool_events`), a batch of parts at a time.
Malformed events (not an object, no numeric ``ts``/``dur``, negative ``dur``) are counted and
skipped; :func:`count_events` reports them and the events gpuscope ignores.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError, InputError
from ..kernel_names import MEMCPY_KERNEL_RE, MEMSET_KERNEL_RE
from ..textsafe import visible
from .read import MAX_INFLATE_RATIO, PartStream, SpooledTrace, shown, spool_events

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

# (column, key in the event or in its args, SQL conversion of the extracted text `{x}`)
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("ph", "ph", "{x}"),
    ("cat", "cat", "{x}"),
    ("name", "name", "{x}"),
    ("ts_us", "ts", "TRY_CAST({x} AS DOUBLE)"),
    ("dur_us", "dur", "TRY_CAST({x} AS DOUBLE)"),
    ("pid", "pid", "{x}"),
    ("tid", "tid", "{x}"),
    ("ext_a", "args.External id", "TRY_CAST({x} AS BIGINT)"),
    ("ext_b", "args.external id", "TRY_CAST({x} AS BIGINT)"),
    ("correlation", "args.correlation", "TRY_CAST({x} AS BIGINT)"),
    ("device", "args.device", "{x}"),
    ("stream", "args.stream", "TRY_CAST({x} AS BIGINT)"),
    ("grid", "args.grid", "TRY_CAST({x} AS INTEGER[])"),
    ("block", "args.block", "TRY_CAST({x} AS INTEGER[])"),
    ("registers", "args.registers per thread", "TRY_CAST({x} AS INTEGER)"),
    ("shared_memory", "args.shared memory", "TRY_CAST({x} AS BIGINT)"),
    ("occupancy_pct", "args.est. achieved occupancy %", "TRY_CAST({x} AS DOUBLE)"),
    ("bytes", "args.bytes", "TRY_CAST({x} AS BIGINT)"),
    ("input_dims", "args.Input Dims", "{x}"),
    ("input_types", "args.Input type", "{x}"),
    ("input_strides", "args.Input Strides", "{x}"),
    ("concrete_inputs", "args.Concrete Inputs", "{x}"),
    ("sequence_number", "args.Sequence number", "TRY_CAST({x} AS BIGINT)"),
    ("launch_kernel", "args.kernel", "{x}"),
)
#: What Kineto writes about a collective on its NCCL/RCCL kernel and its ``record_param_comms``
#: op (PyTorch's ParamCommsDebugInfo): kept together as one JSON object, ``comm_args`` (the keys
#: below; absent args are null), so that collectives with no op above them (graph replays, the
#: send/recv kernels) or whose op lacks sizes (a TensorList) can still be judged (issue 31).
#: ``Seq`` and ``seq`` are both spellings seen: DuckDB's typed reader matches keys by case and
#: cannot hold both (struct field names are case-insensitive), so it reads ``Seq``; the lenient
#: reader (a trace the typed one refuses) reads each.
_COMM_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("c_collective", "args.Collective name", "{x}"),
    ("c_in_nelems", "args.In msg nelems", "TRY_CAST({x} AS BIGINT)"),
    ("c_out_nelems", "args.Out msg nelems", "TRY_CAST({x} AS BIGINT)"),
    ("c_dtype", "args.dtype", "{x}"),
    ("c_group_size", "args.Group size", "TRY_CAST({x} AS BIGINT)"),
    ("c_pg_name", "args.Process Group Name", "{x}"),
    ("c_pg_ranks", "args.Process Group Ranks", "{x}"),
    ("c_seq_a", "args.Seq", "TRY_CAST({x} AS BIGINT)"),
    ("c_seq_b", "args.seq", "TRY_CAST({x} AS BIGINT)"),
)
#: The keys of ``comm_args`` (kernels.comm_args, ops.comm_args), in the order of :data:`_COMM_FIELDS`.
COMM_ARG_KEYS = ("collective", "in_nelems", "out_nelems", "dtype", "group_size", "pg_name", "pg_ranks", "seq")
_COMM_NAMES = tuple(f[0] for f in _COMM_FIELDS)
_FIELDS = _FIELDS + _COMM_FIELDS
_FIELD_NAMES = tuple(f[0] for f in _FIELDS)
#: The parsed fields as the staging table ``ev`` keeps them (the two spellings of External id
#: are one column there; times are ``ts_ns`` / ``dur_ns``).
_EV_COLUMNS = tuple(
    "ext_id" if n == "ext_a" else n for n in _FIELD_NAMES if n not in ("ext_b", "ts_us", "dur_us", *_COMM_NAMES)
) + ("comm_args",)


def _comm_args_sql() -> str:
    """The ``comm_args`` JSON text of an event from its collective args, NULL when it has none."""
    from .._db import sql_literal

    values = [*_COMM_NAMES[:-2], "coalesce(c_seq_a, c_seq_b)"]
    pairs = ", ".join(f"{sql_literal(k)}, {v}" for k, v in zip(COMM_ARG_KEYS, values))
    present = " OR ".join(f"{n} IS NOT NULL" for n in _COMM_NAMES)
    return f"CASE WHEN {present} THEN CAST(json_object({pairs}) AS VARCHAR) END"
#: Read as JSON text, so that only JSON numbers count as times: a string ("200") or a boolean
#: ``ts``/``dur`` makes the event malformed, as the reference definition has it.
_NUMERIC_TOP = ("ts", "dur")
#: The staged events gpuscope uses (the others are only counted): they alone get times.
USABLE_EVENTS = "cls IN ('gpu', 'op', 'runtime', 'annotation')"

#: The times gpuscope stores, in ns, before and after the trace's ``baseTimeNanoseconds``: from
#: -2^60 (36 years before the epoch) to 2^62 (the year 2116), durations under 2^60. Within these,
#: a start plus a duration, and an end minus a start, always fit the 64-bit integers the store
#: and its queries use; an event outside them (``"ts": 1e300``, ``"dur": 2**63``) is skipped as
#: malformed, counted under its reason, rather than failing the ingest with an overflow.
TS_MIN_NS = -(1 << 60)
TS_MAX_NS = 1 << 62
DUR_MAX_NS = 1 << 60


def _sql_ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


#: The index of the part (:func:`~.read.spool_events`) an event was read from; 0 for a whole spool.
#: With ``rowid`` it gives the event's position in the trace: several threads may insert
#: the parts' rows interleaved, but each part's rows in order.
_PART_SQL = r"coalesce(TRY_CAST(regexp_extract(filename, '\.part(\d+)\.json$', 1) AS INTEGER), 0)"


def _file_list(files: Sequence[Path]) -> str:
    from .._db import sql_literal

    return "[" + ", ".join(sql_literal(str(f)) for f in files) + "]"


#: DuckDB's JSON reader reads one JSON object whole, up to ``maximum_object_size``: its
#: default (16 MiB) first, then, for a trace with a larger event (valid JSON all the same),
#: :data:`MAX_EVENT_BYTES`. An event is a few hundred bytes in real traces; one larger than that
#: is refused in words, not as malformed JSON. Reading a 40 MB event costs about 150 MB.
EVENT_BYTES = 16 << 20
MAX_EVENT_BYTES = 64 << 20


def _typed_source(files: Sequence[Path], object_bytes: int = EVENT_BYTES) -> str:
    """Events read by DuckDB into typed columns: the fast path. It fails on events that do not
    fit the types (a non-object element, a string ``ts``, duplicate keys in ``args``, ...)."""
    from .._db import sql_literal

    top = [k for _, k, _ in _FIELDS if not k.startswith("args.")]
    arg_keys: list[str] = []
    seen: set[str] = set()
    for _, k, _ in _FIELDS:
        # DuckDB struct fields are case-insensitive: "external id" comes from the lenient path.
        if k.startswith("args.") and k[5:].lower() not in seen:
            seen.add(k[5:].lower())
            arg_keys.append(k[5:])
    cols = [f"{k}: {sql_literal('JSON' if k in _NUMERIC_TOP else 'VARCHAR')}" for k in top]
    struct = ", ".join(f"{_sql_ident(k)} VARCHAR" for k in arg_keys)
    cols.append(f"args: {sql_literal(f'STRUCT({struct})')}")
    sel = []
    for name, key, _ in _FIELDS:
        if not key.startswith("args."):
            sel.append(f"{key} AS {name}")
        elif key[5:] in arg_keys:
            sel.append(f"args.{_sql_ident(key[5:])} AS {name}")
        else:
            sel.append(f"NULL AS {name}")
    return (
        f"SELECT 'OBJECT' AS jtype, {', '.join(sel)}, {_PART_SQL} AS part FROM read_json({_file_list(files)}, "
        f"format='array', columns={{{', '.join(cols)}}}, maximum_object_size={int(object_bytes)}, filename=true)"
    )


def _lenient_source(files: Sequence[Path], object_bytes: int = EVENT_BYTES) -> str:
    """Events read as JSON text with every field pulled out by path: never fails on an event
    that is valid JSON, whatever its shape."""
    from .._db import sql_literal

    paths, sel = [], []
    for name, key, _ in _FIELDS:
        if key in _NUMERIC_TOP:  # as JSON text: a string "200" keeps its quotes and is no number
            sel.append(f"json_extract(json, {sql_literal('$.' + key)}) AS {name}")
            continue
        paths.append("$.args." + _sql_ident(key[5:]) if key.startswith("args.") else "$." + key)
        sel.append(f"v[{len(paths)}] AS {name}")
    plist = "[" + ", ".join(sql_literal(p) for p in paths) + "]"
    return (
        f"SELECT json_type(json) AS jtype, {', '.join(sel)}, part FROM (SELECT json, json_extract_string(json, {plist}) "
        f"AS v, {_PART_SQL} AS part FROM read_json_objects({_file_list(files)}, format='array', "
        f"maximum_object_size={int(object_bytes)}, filename=true))"
    )


#: Categories of GPU activity, lower-cased. ``memcpy`` and ``memset`` are the names older
#: Kineto (PyTorch 1.8-1.9) gave ``gpu_memcpy`` and ``gpu_memset`` (as ``Memcpy``/``Memset``,
#: next to ``Kernel`` and ``Runtime``); Holistic Trace Analysis counts them as memory kernels.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
OP_CATEGORIES = ("cpu_op", "operator")
ANNOTATION_CATEGORIES = ("user_annotation", "gpu_user_annotation")


def _ns(ts: str, base: int) -> str:
    # Split whole and fractional microseconds: absolute epoch µs (~1.7e15) times 1000 does not
    # fit a double's 53 bits exactly, but each part does.
    return (
        f"({int(base)} + CAST(floor({ts}) AS BIGINT) * 1000 + "
        f"CAST(round(({ts} - floor({ts})) * 1000) AS BIGINT))"
    )


def _insert_sql(trace_id: int, base_ns: int, source: str) -> str:
    from .._db import sql_literal

    gpu = ", ".join(sql_literal(c) for c in GPU_CATEGORIES)
    ops = ", ".join(sql_literal(c) for c in OP_CATEGORIES)
    ann = ", ".join(sql_literal(c) for c in ANNOTATION_CATEGORIES)
    conv = ", ".join(c.format(x=name) + f" AS {name}" for name, _, c in _FIELDS if name not in ("ts_us", "dur_us"))
    kept = ["coalesce(ext_a, ext_b) AS ext_id" if n == "ext_id" else
            f"{_comm_args_sql()} AS comm_args" if n == "comm_args" else n for n in _EV_COLUMNS]
    return f"""
INSERT INTO ev
SELECT {trace_id} AS trace_id, cls, {', '.join(kept)},
       CASE WHEN {USABLE_EVENTS} THEN {_ns('ts_us', base_ns)} END AS ts_ns,
       CASE WHEN {USABLE_EVENTS} THEN CAST(round(dur_us * 1000) AS BIGINT) END AS dur_ns,
       part
FROM (
  SELECT *,
    CASE
      WHEN jtype <> 'OBJECT' THEN 'malformed:not an object'
      WHEN lc IN ({gpu}) OR lc IN ({ops}) OR lc IN ({ann}) OR lc LIKE '%runtime' OR lc LIKE '%driver' THEN
        CASE WHEN coalesce(ph, 'X') NOT IN ('X', 'x') THEN 'ignored'
             WHEN ts_us IS NULL OR NOT isfinite(ts_us) THEN 'malformed:no numeric ts'
             WHEN dur_us IS NULL OR NOT isfinite(dur_us) THEN 'malformed:no numeric dur'
             WHEN dur_us < 0 THEN 'malformed:negative dur'
             WHEN ts_us < {TS_MIN_NS / 1000!r} OR ts_us >= {TS_MAX_NS / 1000!r} THEN 'malformed:ts out of range'
             WHEN dur_us >= {DUR_MAX_NS / 1000!r} THEN 'malformed:dur out of range'
             WHEN lc IN ({gpu}) THEN 'gpu'
             WHEN lc IN ({ops}) AND name LIKE 'ProfilerStep#%' THEN 'annotation'
             WHEN lc IN ({ops}) THEN 'op'
             WHEN lc IN ({ann}) THEN 'annotation'
             ELSE 'runtime' END
      ELSE 'ignored' END AS cls
  FROM (
    SELECT jtype, {conv}, TRY_CAST(ts_us::VARCHAR AS DOUBLE) AS ts_us, TRY_CAST(dur_us::VARCHAR AS DOUBLE) AS dur_us,
           lower(cat) AS lc, part
    FROM ({source})
  )
)"""


#: ``cls`` as an ENUM (one byte a row instead of a 16-byte string slot).
EV_DDL = (
    "CREATE TYPE ev_class AS ENUM ('gpu', 'op', 'runtime', 'annotation', 'ignored', 'malformed:not an object', "
    "'malformed:no numeric ts', 'malformed:no numeric dur', 'malformed:negative dur', 'malformed:ts out of range', "
    "'malformed:dur out of range')"
)
_EV_TABLE_DDL = (
    "CREATE TEMP TABLE ev (trace_id INTEGER, cls ev_class, ph VARCHAR, cat VARCHAR, name VARCHAR, "
    "pid VARCHAR, tid VARCHAR, ext_id BIGINT, correlation BIGINT, "
    "device VARCHAR, stream BIGINT, grid INTEGER[], block INTEGER[], registers INTEGER, shared_memory BIGINT, "
    "occupancy_pct DOUBLE, bytes BIGINT, input_dims VARCHAR, input_types VARCHAR, input_strides VARCHAR, "
    "concrete_inputs VARCHAR, sequence_number BIGINT, launch_kernel VARCHAR, comm_args VARCHAR, ts_ns BIGINT, "
    "dur_ns BIGINT, "
    "part INTEGER)"
)

#: One batch's events (``ev``) routed into tables of their own class, each with only the
#: columns its events use, and counted. ``part, pos`` (the event's part of the spool and its
#: row in ``ev``, where each part's rows are in order) give an event's position in its trace.
#: Runtime calls are kept when they can link (a correlation id) or open or close a graph
#: capture. A table per batch (``gpu_3``): creating a table from a query is 2-3x faster in
#: DuckDB than appending to one (bench/README.md, "Ingest at scale").
_ROUTE_SQL = """
CREATE TEMP TABLE gpu_{k} AS
SELECT trace_id, coalesce(device, pid, '?') AS dev_label, TRY_CAST(coalesce(device, pid) AS INTEGER) AS device_index,
       stream,
       CASE WHEN lower(cat) IN ('gpu_memcpy', 'memcpy') THEN 'memcpy'
            WHEN lower(cat) IN ('gpu_memset', 'memset') THEN 'memset'
            WHEN regexp_matches(coalesce(name, ''), '{memcpy}', 'i') THEN 'memcpy'
            WHEN regexp_matches(coalesce(name, ''), '{memset}', 'i') THEN 'memset'
            ELSE 'kernel' END AS kind,
       name, ts_ns, dur_ns, correlation, ext_id, grid, block, registers, shared_memory, occupancy_pct, bytes,
       comm_args
FROM ev WHERE cls = 'gpu';
CREATE TEMP TABLE rt_ev_{k} AS
SELECT trace_id, name, ts_ns, dur_ns, correlation, ext_id, pid, tid, launch_kernel, grid, block, part, rowid AS pos
FROM ev WHERE cls = 'runtime' AND (correlation IS NOT NULL OR name LIKE '%StreamBeginCapture%'
                                   OR name LIKE '%StreamEndCapture%');
CREATE TEMP TABLE op_ev_{k} AS
SELECT trace_id, pid, tid, name, ts_ns, dur_ns, ext_id, sequence_number, input_dims, input_types, input_strides,
       concrete_inputs, comm_args, part, rowid AS pos
FROM ev WHERE cls = 'op';
CREATE TEMP TABLE annotation_stage_{k} AS
SELECT trace_id, CASE WHEN name LIKE 'ProfilerStep#%' THEN 'profiler_step' ELSE lower(cat) END AS kind, name,
       ts_ns, dur_ns, CASE WHEN lower(cat) = 'gpu_user_annotation' THEN coalesce(device, pid) END AS dev_label,
       pid, tid
FROM ev WHERE cls = 'annotation';
CREATE TEMP TABLE ev_counts_{k} AS
SELECT trace_id, cls::VARCHAR AS cls, CASE WHEN cls IN ('gpu', 'op', 'annotation') THEN NULL ELSE cat END AS cat,
       CASE WHEN cls IN ('gpu', 'op', 'annotation') THEN NULL ELSE ph END AS ph, count(*) AS n,
       count(*) FILTER (WHERE cls = 'runtime' AND name LIKE 'hip%') AS hip,
       count(*) FILTER (WHERE cls = 'runtime' AND name LIKE 'cu%') AS cuda,
       count(*) FILTER (WHERE name LIKE '%StreamBeginCapture%') AS begin_capture,
       count(*) FILTER (WHERE name LIKE '%GraphLaunch%') AS graph_launch,
       min(ts_ns) AS min_ts_ns
FROM ev GROUP BY ALL;
DROP TABLE ev;
"""

#: The tables each batch makes (``{name}_{k}``).
BATCH_TABLES = ("gpu", "rt_ev", "op_ev", "annotation_stage", "ev_counts")


class Batches:
    """The batches parsed so far on one staging connection: :func:`load_trace` adds them, the
    later stages read each class as one table (:meth:`union`) and drop the parts
    (:meth:`drop`)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.count = 0
        con.execute(EV_DDL)

    def route(self) -> None:
        """Route the current ``ev`` into this batch's tables (and drop ``ev``)."""
        self.con.execute(_ROUTE_SQL.replace("{memcpy}", MEMCPY_KERNEL_RE).replace("{memset}", MEMSET_KERNEL_RE)
                         .replace("{k}", str(self.count)))
        self.count += 1

    def union(self, name: str) -> str:
        """Every batch's ``name`` table as one relation (a subquery)."""
        if not self.count:
            return f"(SELECT * FROM {name}_empty)"
        return "(" + " UNION ALL ".join(f"SELECT * FROM {name}_{k}" for k in range(self.count)) + ")"

    def materialize(self, name: str) -> None:
        """``name`` as one table of every batch's rows (in batch order); the parts dropped."""
        self.con.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM {self.union(name)}")
        self.drop(name)

    def drop(self, name: str) -> None:
        self.con.execute("".join(f"DROP TABLE IF EXISTS {name}_{k};" for k in range(self.count))
                         + f"DROP TABLE IF EXISTS {name}_empty;")

    def delete_trace(self, trace_id: int) -> None:
        """Remove one trace's rows from every batch (a trace read again, or skipped)."""
        self.con.execute("".join(f"DELETE FROM {t}_{k} WHERE trace_id = {int(trace_id)};"
                                 for t in BATCH_TABLES for k in range(self.count)))

    def ensure_shape(self) -> None:
        """With no batch at all (every file skipped), empty tables of each class's shape."""
        if self.count:
            return
        self.con.execute(_EV_TABLE_DDL)
        self.con.execute(_ROUTE_SQL.replace("{memcpy}", MEMCPY_KERNEL_RE).replace("{memset}", MEMSET_KERNEL_RE)
                         .replace("{k}", "empty"))


def time_base(header: dict[str, Any], notes: list[str] | None = None, source: str = "") -> int:
    """The trace's ``baseTimeNanoseconds`` (what its ``ts`` count from), 0 when it has none.
    A value that is not a whole number of ns from 1 to :data:`TS_MAX_NS` (``2**63``, ``1e30``,
    ``-5``, ``Infinity``, a string) is ignored, and said in ``notes``: the times stay relative
    rather than the ingest failing on an overflow."""
    base = header.get("baseTimeNanoseconds")
    if base is None or base == 0:
        return 0
    if isinstance(base, (int, float)) and not isinstance(base, bool) and 0 < base <= TS_MAX_NS \
            and float(base).is_integer():
        return int(base)
    if notes is not None:
        notes.append(f"{source}: baseTimeNanoseconds {header_value(base)} is not a time in ns "
                     f"(a whole number from 1 to 2^62): ignored")
    return 0


def header_value(value: Any, limit: int = 40) -> str:
    """A header value as notes quote it: its JSON, shortened, control characters visible."""
    import json

    from ..textsafe import visible

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return visible(text if len(text) <= limit else text[: limit - 3] + "...")


#: Parts parsed by one statement (at least two per DuckDB thread): the batch's rows are
#: routed into the class tables and its ``ev`` dropped before the next, so what staging holds
#: grows with the events gpuscope keeps, not with every event of the trace (bench/README.md,
#: "Ingest at scale").
PARTS_PER_BATCH = 8

#: Called after each batch with the events parsed so far in this trace.
BatchCallback = Callable[[int], None]


def load_trace(batches: Batches, trace_id: int, stream: PartStream, spool_dir: Path, threads: int = 1,
               on_batch: BatchCallback | None = None, max_inflate_ratio: float = MAX_INFLATE_RATIO,
               ) -> tuple[int, SpooledTrace]:
    """Parse one trace's events, part by part as ``stream`` hands them over, into batches of
    class tables (:class:`Batches`), classified and counted. Returns the number of events and
    the spooled trace (its header, form, sizes); raises what spooling it raised.

    Times are staged without the trace's ``baseTimeNanoseconds`` (Kineto writes it after the
    events, so it is known only once they are read): :func:`~.stage.apply_time_bases` adds
    it at the end. If a part does not parse (a cut that was not between two events, or
    malformed JSON), the trace's rows are removed and the file is spooled again and read whole
    (which names the error, if the JSON is malformed)."""
    try:
        n = _insert_stream(batches, trace_id, stream, threads, on_batch)
    except InputError:
        while (part := stream.next_part()) is not None:  # let the spool end; its parts are not needed
            part.unlink(missing_ok=True)
        stream.result()  # an error spooling the file is the one to report
        batches.delete_trace(trace_id)
        whole = spool_events(stream.source, spool_dir, max_inflate_ratio=max_inflate_ratio)
        try:
            return _insert_batch(batches, trace_id, whole.source, [whole.spool]), whole
        finally:
            whole.spool.unlink(missing_ok=True)
    return n, stream.result()


def _insert_stream(batches: Batches, trace_id: int, stream: PartStream, threads: int,
                   on_batch: BatchCallback | None) -> int:
    """Parse the stream's parts a batch at a time; returns the number of events."""
    step = max(PARTS_PER_BATCH, 2 * threads)
    events = 0
    batch: list[Path] = []
    while True:
        part = stream.next_part()
        if part is not None:
            batch.append(part)
        if batch and (part is None or len(batch) >= step):
            try:
                events += _insert_batch(batches, trace_id, stream.source, batch)
            finally:
                for f in batch:  # parsed (or failed): its disk space back now
                    f.unlink(missing_ok=True)
            batch = []
            if on_batch is not None:
                on_batch(events)
        if part is None:
            return events


def _insert_batch(batches: Batches, trace_id: int, source: Path, batch: Sequence[Path]) -> int:
    """One batch of parts into ``ev``, routed into the batch's class tables."""
    con = batches.con
    con.execute(_EV_TABLE_DDL)
    try:
        n = _insert_events(con, trace_id, source, batch)
        batches.route()
    except BaseException:
        con.execute("DROP TABLE IF EXISTS ev")
        raise
    return n


def _insert_events(con: duckdb.DuckDBPyConnection, trace_id: int, source: Path, files: Sequence[Path]) -> int:
    """Read the events in ``files`` (one JSON array each) into ``ev``; returns how many went in."""
    from .._db import one_row
    from .._db import duckdb

    for object_bytes in (EVENT_BYTES, MAX_EVENT_BYTES):
        for reader in (_typed_source, _lenient_source):
            try:
                return int(one_row(con.execute(_insert_sql(trace_id, 0, reader(files, object_bytes))).fetchone())[0])
            except duckdb.OutOfMemoryException:
                raise  # left to stage_traces, which retries without its memory limit
            except (duckdb.IOException, duckdb.InterruptException) as exc:
                raise GpuscopeError(f"{shown(source)}: {visible(str(exc).splitlines()[0])}") from None
            except duckdb.Error as exc:
                if "maximum_object_size" in str(exc):
                    break  # an event larger than the reader's buffer: valid JSON, read with a larger one
                if reader is _typed_source:
                    continue  # events that do not fit the typed reader: read them leniently
                raise InputError(shown(source), f"malformed JSON in the events ({_reader_error(exc, files)})") from None
    raise InputError(shown(source), f"an event is over {MAX_EVENT_BYTES >> 20} MiB of JSON, the most gpuscope reads "
                                    "in one event (real events are a few hundred bytes)")


def _reader_error(exc: Exception, files: Sequence[Path]) -> str:
    """DuckDB's JSON reader error as a user reads it: without the error class, the spool's
    temporary file names or the trailing punctuation, and in words where its own are cryptic."""
    msg = re.sub(r"^[A-Za-z ]*Error: ", "", str(exc).splitlines()[0]).strip().rstrip(".").strip()
    for f in files:
        msg = msg.replace(str(f), "traceEvents")
    # "Malformed JSON in file "<part>", at byte B in record/value N: why": B and N count within
    # one part of the spool, which means nothing to the user; the reason does
    m = re.match(r'^Malformed JSON in file "traceEvents", at byte \d+ in record/value \d+: (.+)$', msg)
    if m:
        msg = m.group(1)
    if msg == "input length is 0":
        msg = "an empty element in the event array (a stray comma?)"
    return visible(msg)


#: Categories of accelerators that are not GPUs gpuscope models (their events are ingested).
ACCELERATOR_PREFIXES = {"mtia": "MTIA", "xpu": "Intel XPU", "hpu": "Gaudi HPU", "privateuse1": "PrivateUse1"}


@dataclass(frozen=True)
class IngestCounts:
    """What an ingest counted besides its rows: :func:`count_events` fills the event counts,
    ``stage_traces`` adds the files it skipped and the graph replays it mapped; ``ingest`` turns
    them into the run's notes and ``info.ingest``, ``devices`` reads the runtime APIs and the
    accelerators to tell a device's vendor."""

    #: malformed events by reason (skipped, never stored)
    skipped: dict[str, int]
    #: events of categories gpuscope does not use, by category (``ph=X`` or "no category" without one)
    ignored: dict[str, int]
    #: events of accelerators that are not GPUs gpuscope models, by name (:data:`ACCELERATOR_PREFIXES`)
    accelerators: dict[str, int]
    #: runtime calls of the HIP API
    runtime_hip: int
    #: runtime calls of the CUDA API
    runtime_cuda: int
    #: files of a scanned folder that were not traces, each as "NAME (why)"
    not_traces: list[str] = field(default_factory=list)
    #: kernels replayed from CUDA/HIP graphs, and how many of them were mapped to an op
    graph_replayed_kernels: int = 0
    graph_mapped_kernels: int = 0


def count_events(con: duckdb.DuckDBPyConnection) -> IngestCounts:
    """Counts of the parsed events gpuscope does not use as rows: malformed ones by reason,
    ignored ones by category, events of non-GPU accelerators, and runtime calls by API (HIP
    or CUDA, which tells the vendor of a device without properties)."""
    from .._db import one_row
    skipped: dict[str, int] = {}
    ignored: dict[str, int] = {}
    accel: dict[str, int] = {}
    for cls, cat, ph, n in con.execute(
        "SELECT cls, cat, ph, sum(n) FROM ev_counts WHERE cls NOT IN ('gpu', 'op', 'annotation') GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        n = int(n)
        if cls.startswith("malformed:"):
            reason = cls.split(":", 1)[1]
            skipped[reason] = skipped.get(reason, 0) + n
            continue
        if cls == "ignored":
            label = cat if cat is not None else f"ph={ph}" if ph is not None else "no category"
            ignored[label] = ignored.get(label, 0) + n
        pretty = next((v for k, v in ACCELERATOR_PREFIXES.items() if cat and cat.lower().startswith(k)), None)
        if pretty:
            accel[pretty] = accel.get(pretty, 0) + n
    hip, cuda = one_row(con.execute("SELECT coalesce(sum(hip), 0), coalesce(sum(cuda), 0) FROM ev_counts").fetchone())
    return IngestCounts(skipped=skipped, ignored=ignored, accelerators=accel, runtime_hip=int(hip),
                        runtime_cuda=int(cuda))


def count_graph_events(con: duckdb.DuckDBPyConnection) -> dict[int, dict[str, int]]:
    """Per trace, its events named ``*StreamBeginCapture`` and ``*GraphLaunch`` (any category)."""
    return {int(t): {"stream_begin_capture": int(c), "graph_launch": int(g)} for t, c, g in con.execute(
        "SELECT trace_id, sum(begin_capture), sum(graph_launch) FROM ev_counts GROUP BY trace_id").fetchall()}


def usable_events(batches: Batches, trace_id: int) -> tuple[int, int | None]:
    """(events gpuscope uses, the earliest of their times in ns) of one parsed trace."""
    from .._db import one_row

    n, first = one_row(batches.con.execute(
        f"SELECT coalesce(sum(n), 0), min(min_ts_ns) FROM {batches.union('ev_counts')} "
        f"WHERE trace_id = ? AND {USABLE_EVENTS}", [trace_id]).fetchone())
    return int(n), first
