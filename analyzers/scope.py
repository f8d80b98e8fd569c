"""Which GPU activity of a run an analysis counts (design.md §4.2).

One place for the rule, used by the breakdown and the roofline attribution alike: in a run of
several traces where one only captures CUDA/HIP graphs and another launches them, the capture
trace maps replayed kernels to ops and its own activity is not counted.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


def graph_capture_exclusions(con: duckdb.DuckDBPyConnection, run_id: int) -> list[dict[str, Any]]:
    """The traces of ``run_id`` that only captured CUDA/HIP graphs while another trace of the run
    launches graphs (design.md §4.2): they map the replayed kernels to ops and are not counted.

    A trace captures when it has a ``*StreamBeginCapture`` event and launches graphs when it has
    a ``*GraphLaunch`` event (counted at ingest, ``traces.metadata``). Stores ingested before
    ingest counted them fall back to what the tables show: launches recorded inside a capture
    (``graph_launches``), kernels launched by ``*GraphLaunch``. Alone, a capture trace counts.
    """
    from ..ingest import GRAPH_EVENTS_KEY

    rows = con.execute(
        f"""
        SELECT t.trace_id, t.path,
               coalesce(TRY_CAST(json_extract(t.metadata, '$.{GRAPH_EVENTS_KEY}.stream_begin_capture') AS BIGINT) > 0,
                        EXISTS (SELECT 1 FROM graph_launches g WHERE g.run_id = t.run_id AND g.trace_id = t.trace_id)),
               coalesce(TRY_CAST(json_extract(t.metadata, '$.{GRAPH_EVENTS_KEY}.graph_launch') AS BIGINT) > 0,
                        EXISTS (SELECT 1 FROM kernels k WHERE k.run_id = t.run_id AND k.trace_id = t.trace_id
                                AND k.launch_name ILIKE '%GraphLaunch%'))
        FROM traces t WHERE t.run_id = ? ORDER BY t.trace_id
        """,
        [run_id],
    ).fetchall()
    if not any(launches for *_, launches in rows):
        return []
    return [{"trace_id": int(tid), "path": path,
             "reason": "captures CUDA/HIP graphs and launches none: it maps the replayed kernels of the run's "
                       "other traces to their ops, and its own activity (capture-time warm-up) is not counted "
                       "in the breakdown, the roofline, the kernel list or the advice"}
            for tid, path, captures, launches in rows if captures and not launches]


def counted_kernels(excluded: Sequence[int]) -> str:
    """A condition on ``kernels`` that leaves out the activity of ``excluded`` trace ids."""
    return f" AND trace_id NOT IN ({', '.join(str(int(t)) for t in excluded)})" if excluded else ""
