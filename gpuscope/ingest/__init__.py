"""Kineto / Chrome-trace ingest: trace files in, one run of the store out.

Files run to gigabytes, so the events never become Python objects. One room per job, in the
order the data flows:

- :mod:`.read`: find the files (:func:`expand_paths`), digest them (:func:`inputs_digest`),
  open them gunzipped behind the gzip-bomb guard (:data:`MAX_INFLATE_RATIO`), and spool the
  JSON text of each ``traceEvents`` array in parts of a few MiB, handed to the parse as each
  is written (several files at once in threads).
- :mod:`.parse`: DuckDB's JSON reader turns a batch of parts into rows of the staging table
  ``ev``, one per event, classified, then routed into the batch's tables of each class;
  malformed events are counted and skipped.
- :mod:`.link`: SQL joins link each kernel to its launch and its CPU op, build the op tree and
  map kernels replayed from CUDA/HIP graphs to the ops that captured them.
- :mod:`.stage`: runs read, parse and link for a run's files on one in-memory DuckDB (memory
  limit, threads); :mod:`.devices` names the devices the staged rows ran on.
- :mod:`.write`: writes the staged run into the store in one transaction, the ``runs`` row only
  through :mod:`gpuscope.store.runs`.
- :mod:`.progress`: one line per stage on stderr, and a live line (file, events, rate, time
  left) while a file is parsed.

:func:`ingest` ties them together. Nothing touches the store before everything is parsed and
linked, so a bad input leaves the store exactly as it was.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .devices import device_rows, map_devices
from .exported import export_span, staged_extras
from .parse import IngestCounts
from .progress import Progress, ProgressLine, quiet, stderr_progress
from .read import MAX_HEADER_BYTES, MAX_INFLATE_RATIO, InflateLimitError, expand_paths, inputs_digest, shown
from .stage import STAGING_TABLES, StagingConnection, TraceInfo, stage_traces
from .write import GRAPH_EVENTS_KEY, write_run

__all__ = [
    "GRAPH_EVENTS_KEY", "MAX_HEADER_BYTES", "MAX_INFLATE_RATIO", "STAGING_TABLES", "InflateLimitError", "IngestResult",
    "NoActivityError", "Progress", "ProgressLine",
    "StagingConnection", "TraceInfo", "default_run_name", "expand_paths", "ingest", "inputs_digest", "stage_traces", "stderr_progress",
]


class NoActivityError(InputError):
    """The traces are valid Kineto/Chrome traces that recorded nothing: metadata only (a
    profiler window open while the program ran no ops: asleep, waiting, inside a long import).
    An :class:`InputError` like any unusable input; its own class so that ``gpuscope run`` can
    say what happened to the window instead of doubting the file."""


#: What a trace that recorded nothing still holds: metadata events (``ph`` M: process and
#: thread names), instants (``ph`` i/I: Kineto's iteration start and window end) and the
#: profiler's own span (category ``Trace``, "PyTorch Profiler (0)"), as labelled in
#: :attr:`IngestCounts.ignored` (the category, else ``ph=...``).
_NO_ACTIVITY_LABELS = frozenset({"ph=M", "ph=i", "ph=I", "Trace"})


def _metadata_only(counts: IngestCounts) -> bool:
    """Whether every event of traces that gave no rows is metadata (:data:`_NO_ACTIVITY_LABELS`):
    a valid trace that recorded no activity, not a file that is no trace (entries without a
    ``ph``, malformed events, complete events of unknown categories)."""
    return (not counts.skipped and not counts.accelerators and bool(counts.ignored)
            and all(label in _NO_ACTIVITY_LABELS for label in counts.ignored))


@dataclass
class IngestResult:
    """What :func:`ingest` did: the run it wrote and the counts of what it loaded and skipped."""

    run_id: int
    name: str
    files: list[dict[str, Any]]
    events: int
    loaded: dict[str, int]
    skipped: dict[str, int]
    ignored: dict[str, int]
    linked: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: With ``ingest(..., keep_open=True)``: an open connection whose current database is the
    #: store (a :class:`~.stage.StagingConnection`: the caller closes it, which also removes the
    #: folder it spills to); None otherwise.
    connection: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``ingest --json`` document."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "files": self.files,
            "events": self.events,
            "loaded": self.loaded,
            "skipped": {"malformed": sum(self.skipped.values()), "reasons": self.skipped},
            "ignored": self.ignored,
            "linked": self.linked,
            "notes": self.notes,
        }


def default_run_name(paths: Sequence[Path]) -> str:
    """A run name from the first input: its file name without trace suffixes."""
    name = paths[0].name
    if len(paths) > 1 and all(p.parent == paths[0].parent for p in paths):
        return paths[0].parent.name or name
    for suffix in (".gz", ".json", ".pt.trace", ".trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


def ingest(
    db_path: Path | str,
    paths: Sequence[str | Path],
    name: str | None = None,
    progress: Progress = quiet,
    all_ops: bool = False,
    into_run: int | None = None,
    keep_open: bool = False,
    max_inflate_ratio: float = MAX_INFLATE_RATIO,
    threads: int | None = None,
) -> IngestResult:
    """Load Kineto traces (files, ``.gz``, directories) as one run of the store at ``db_path``.

    With ``keep_open``, the connection that wrote the run is handed over in the result's
    ``connection`` (its current database is the store, its staging tables dropped), so that a
    caller that goes on to read the run (``analyze TRACE``) does not open the store again.

    With ``into_run``, the traces join that existing run (``gpuscope run`` uses this at the end
    of a recording) instead of making a new one; their ids follow the run's existing ones.

    Everything is parsed and linked before the store is opened; the run is then written in one
    transaction, so a bad input leaves the store exactly as it was.

    ``threads`` caps the DuckDB threads and the files spooled at once (default: the cores this
    process may use, at most 8; inputs under 48 MiB of JSON are parsed on one).

    Of the CPU ops, a trace with GPU activity keeps those that launched GPU work and their
    ancestors (``all_ops`` keeps every one); a CPU-only trace keeps every op.
    """
    from .._db import one_row
    from .. import store

    store.check_store_path(db_path)  # before the parse: a bad --db should not cost a long ingest
    left_out: list[str] = []  # directory entries named like traces that are not regular files
    files = expand_paths(paths, left_out)
    explicit = {Path(p) for p in paths}
    staging, infos, counts = stage_traces(files, progress, optional=[f for f in files if f not in explicit],
                                          max_inflate_ratio=max_inflate_ratio, threads=threads)
    con = staging.con
    handed_over: StagingConnection | None = None
    try:
        total_events = sum(i.events for i in infos)
        gpu_rows, op_rows = one_row(con.execute(
            "SELECT (SELECT count(*) FROM kernel_stage), (SELECT count(*) FROM op_stage)"
        ).fetchone())
        ann_rows = one_row(con.execute("SELECT count(*) FROM annotation_stage").fetchone())[0]
        if gpu_rows == 0 and op_rows == 0 and ann_rows == 0 and not staged_extras(con):
            what = ", ".join(shown(f) for f in files)
            if counts.not_traces and not infos:
                # a folder of broken files: each file's own reason, not one summary that hides them
                folders = ", ".join(shown(p) for p in paths)
                raise InputError(folders, "no usable trace: " + "; ".join(counts.not_traces))
            if total_events == 0:
                raise InputError(what, "the trace holds no events")
            if _metadata_only(counts):
                raise NoActivityError(what, f"the trace recorded no activity: only metadata ({total_events} "
                                            "entries: process and thread names, the profiler's own span), not one op, "
                                            "kernel or annotation")
            raise InputError(what, f"no trace events gpuscope can use among {total_events} entries (not a Kineto/Chrome trace?)")
        if infos and all(i.from_export for i in infos):
            # gpuscope's export holds the ops its run kept (with --all-ops, every one): keep them all
            all_ops = True
        devices = device_rows(con, infos, counts)
        map_devices(con, devices)
        span = one_row(con.execute(
            "SELECT min(s), max(e) FROM (SELECT min(ts_ns) s, max(ts_ns + dur_ns) e FROM kernel_stage "
            "UNION ALL SELECT min(ts_ns), max(ts_ns + dur_ns) FROM op_stage "
            "UNION ALL SELECT min(ts_ns), max(ts_ns + dur_ns) FROM annotation_stage)"
        ).fetchone())
        exported = [i.export for i in infos if i.export is not None]
        if exported:
            span = export_span(infos, span)
        # one scan of the staged kernels for both the link counts and the kinds
        counted = one_row(con.execute(
            "SELECT count(*) FILTER (WHERE op_id IS NOT NULL), count(*) FILTER (WHERE op_id IS NULL), "
            "count(*) FILTER (WHERE launch_name IS NOT NULL), count(*) FILTER (WHERE kind = 'kernel'), "
            "count(*) FILTER (WHERE kind = 'memcpy'), count(*) FILTER (WHERE kind = 'memset') FROM kernel_stage"
        ).fetchone())
        linked = dict(zip(("kernels_with_op", "kernels_without_op", "kernels_with_launch"), counted[:3]))
        loaded = dict(zip(("kernels", "memcpy", "memset"), counted[3:]))
        kept_ops = op_rows if (all_ops or gpu_rows == 0) else one_row(con.execute("SELECT count(*) FROM op_launching").fetchone())[0]
        loaded.update(ops=kept_ops, annotations=ann_rows, devices=len(devices))
        ignored_ops = op_rows - kept_ops
        notes = _notes(infos, counts, gpu_rows, op_rows)
        if left_out:
            notes.append("left out what is not a regular file: " + ", ".join(left_out))
        if ignored_ops:
            notes.append(f"{ignored_ops} CPU ops that launched no GPU work (nor contain one that did) were not stored; "
                         "ingest with --all-ops to keep them")
        exported_name = exported[0]["run"].get("name") if len(exported) == 1 and len(files) == 1 else None
        run_name = name or (exported_name if isinstance(exported_name, str) and exported_name else default_run_name(files))
        from ..store.run_info import RunInfo

        info_doc = RunInfo(
            ingest={"skipped": counts.skipped, "ignored": counts.ignored, "linked": linked,
                    "accelerators": counts.accelerators},
            notes=notes,
            # what `analyze PATH` / `compare PATH` look for to reuse this run instead of ingesting again
            inputs_digest=inputs_digest(files),
        )
        run_id, run_name, handed_over = write_run(
            staging, db_path, name=run_name, files=files, span=span, info_doc=info_doc, notes=notes, infos=infos,
            devices=devices, all_ops=all_ops, into_run=into_run, keep_open=keep_open, progress=progress)
    finally:
        if handed_over is None:
            staging.close()  # the connection, then its spill folder
    file_docs = [
        {"path": i.path, "form": i.form, "size_bytes": i.size_bytes, "json_bytes": i.json_bytes, "events": i.events,
         "ts_relative": i.ts_relative, "base_time_ns": i.base_time_ns, "rank": i.rank}
        for i in infos
    ]
    return IngestResult(run_id, run_name, file_docs, total_events, loaded, counts.skipped,
                        counts.ignored, linked, notes, connection=handed_over)


def _notes(infos: list[TraceInfo], counts: IngestCounts, gpu_rows: int, op_rows: int) -> list[str]:
    """What the user should know about the ingest: what was skipped, left out or cannot be known."""
    notes = []
    if counts.accelerators:
        kinds = ", ".join(f"{k} ({n} events)" for k, n in counts.accelerators.items())
        notes.append(
            f"trace of a non-GPU accelerator: {kinds}; its events are ingested, but gpuscope models only "
            "NVIDIA and AMD GPUs"
        )
    if counts.not_traces:
        notes.append("skipped files that are not traces: " + ", ".join(counts.not_traces))
    if counts.graph_replayed_kernels:
        mapped, replayed = counts.graph_mapped_kernels, counts.graph_replayed_kernels
        notes.append(
            f"{mapped} of {replayed} kernels replayed from CUDA/HIP graphs were mapped to the ops that captured them"
            + ("" if mapped else " (ingest the graph-capture trace in the same run to map them)")
        )
    if gpu_rows == 0:
        notes.append("no GPU activity in the trace (CPU-only): ops are reported with their CPU time")
    elif op_rows == 0:
        notes.append("no CPU side in the trace: kernels cannot be attributed to ops")
    for i in infos:
        notes.extend(i.notes)
        if i.ts_relative and i.base_time_ns == 0:
            notes.append(f"{shown(i.path)}: relative timestamps without baseTimeNanoseconds; absolute times are unknown")
    if counts.skipped:
        total = sum(counts.skipped.values())
        reasons = ", ".join(f"{n} {r}" for r, n in counts.skipped.items())
        notes.append(f"skipped {total} malformed events ({reasons})")
    return notes

