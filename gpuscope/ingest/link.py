"""Link the parsed events with SQL: each kernel to its launch (runtime event, by
``correlation``) and to its CPU op (by ``External id``, else the innermost op on the launching
thread that encloses the launch), the op tree, the launches captured into CUDA/HIP graphs, and
the kernels replayed from those graphs back to the ops that captured them.

:func:`split_events` builds the tables linking works on from the class tables :mod:`.parse`
fills; :func:`link_kernels` leaves ``kernel_stage``, ``op_stage``,
``op_parent``, ``op_launching``, ``graph_stage`` and ``annotation_stage`` for the writer.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..kernel_names import category_sql

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from .parse import Batches

#: What linking needs of the whole run, built from the class tables :mod:`.parse` fills
#: (``gpu``, ``rt_ev``, ``op_ev``, ``annotation_stage``). Orderings end with ``part, rowid``,
#: the event's position in the trace, so that events with equal times (an op and the op it
#: wraps, both 5 µs long at µs resolution; Kineto writes the outer one first) come out the
#: same way on one thread or several.
_EXTRACT_SQL = """
CREATE TEMP TABLE rt AS
SELECT trace_id, correlation, name, ts_ns, dur_ns, ext_id, pid, tid
FROM {rt_ev} WHERE correlation IS NOT NULL
  AND (trace_id, correlation) IN (SELECT trace_id, correlation FROM gpu WHERE correlation IS NOT NULL)
QUALIFY row_number() OVER (PARTITION BY trace_id, correlation ORDER BY ts_ns, part, pos) = 1;

-- Kernel launches made while a CUDA/HIP graph was being captured: inside a
-- *StreamBeginCapture .. *StreamEndCapture window of their process, naming their kernel
-- (args.kernel), with no GPU activity of their own. Each window is one graph.
CREATE TEMP TABLE capture_window AS
SELECT trace_id, pid, ts_ns AS begin_ns,
       lead(ts_ns) OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, part, pos) AS end_ns,
       name LIKE '%EndCapture%' AS is_end,
       lead(name LIKE '%EndCapture%') OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, part, pos) AS next_is_end
FROM {rt_ev} WHERE name LIKE '%StreamBeginCapture%' OR name LIKE '%StreamEndCapture%';

CREATE TEMP TABLE captured AS
SELECT e.trace_id, w.begin_ns AS graph_begin_ns, e.correlation, e.name AS launch_name,
       e.launch_kernel AS kernel_name, e.ts_ns, e.dur_ns, e.ext_id, e.pid, e.tid,
       e.grid, e.block
FROM {rt_ev} e JOIN capture_window w
  ON w.trace_id = e.trace_id AND w.pid = e.pid AND NOT w.is_end AND w.next_is_end
 AND e.ts_ns BETWEEN w.begin_ns AND w.end_ns
WHERE e.launch_kernel IS NOT NULL AND e.correlation IS NOT NULL
  AND (e.trace_id, e.correlation) NOT IN (SELECT trace_id, correlation FROM gpu WHERE correlation IS NOT NULL);
DROP TABLE capture_window;

INSERT INTO rt SELECT trace_id, correlation, launch_name, ts_ns, dur_ns, ext_id, pid, tid FROM captured;

CREATE TEMP TABLE op_stage AS
SELECT row_number() OVER (ORDER BY trace_id, ts_ns, dur_ns DESC, part, pos) - 1 AS op_id,
       trace_id, pid, tid, name, ts_ns, dur_ns, ext_id AS external_id, sequence_number,
       input_dims, input_types, input_strides, concrete_inputs, comm_args
FROM {op_ev};
"""

#: Linking, on the tables above.
_LINK_SQL = """
CREATE TEMP TABLE op_by_ext AS
SELECT trace_id, external_id, op_id, ts_ns, dur_ns FROM op_stage WHERE external_id IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY trace_id, external_id ORDER BY dur_ns, op_id) = 1;

-- A launch belongs to the op whose External id it carries, if that op encloses it in time
-- (some Kineto versions wrote the correlation id there instead).
CREATE TEMP TABLE rt_link AS
SELECT r.trace_id, r.correlation, o.op_id
FROM rt r JOIN op_by_ext o ON o.trace_id = r.trace_id AND o.external_id = r.ext_id
WHERE r.ts_ns BETWEEN o.ts_ns - 1000 AND o.ts_ns + o.dur_ns + 1000;

-- Otherwise to the innermost op on its thread that encloses it (as HTA's call stacks do):
-- depth of every op from a sweep over op boundaries, the number of ops open at each launch
-- from a second sweep, then an ASOF join to the latest op started at depth open - 1.
CREATE TEMP TABLE op_depth AS
WITH b AS (
    SELECT trace_id, pid, tid, op_id, ts_ns AS t, 1 AS delta, 1 AS ord, dur_ns FROM op_stage
    UNION ALL
    SELECT trace_id, pid, tid, op_id, ts_ns + dur_ns, -1, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END, dur_ns FROM op_stage
), s AS (
    SELECT *, sum(delta) OVER (PARTITION BY trace_id, pid, tid ORDER BY t, ord, dur_ns DESC, op_id
                               ROWS UNBOUNDED PRECEDING) AS running
    FROM b
)
SELECT s.trace_id, s.pid, s.tid, s.op_id, s.t AS ts_ns, s.running - 1 AS depth FROM s WHERE delta = 1;

"""

#: Launches that no op claims by External id, linked to the innermost op on their thread
#: that encloses them (run only when there are such launches: the sweep costs time in
#: proportion to the ops even when it finds nothing to do; bench/README.md).
_UNCLAIMED_LAUNCHES = "FROM rt WHERE (trace_id, correlation) NOT IN (SELECT trace_id, correlation FROM rt_link)"
_ENCLOSING_LINK_SQL = f"""
INSERT INTO rt_link
WITH q AS (
    SELECT trace_id, pid, tid, correlation, ts_ns {_UNCLAIMED_LAUNCHES}
), b AS (
    SELECT trace_id, pid, tid, NULL::BIGINT AS correlation, ts_ns AS t, 1 AS delta, 0 AS ord FROM op_stage
    UNION ALL SELECT trace_id, pid, tid, NULL, ts_ns + dur_ns, -1, 2 FROM op_stage
    UNION ALL SELECT trace_id, pid, tid, correlation, ts_ns, 0, 1 FROM q
), s AS (
    SELECT *, sum(delta) OVER (PARTITION BY trace_id, pid, tid ORDER BY t, ord ROWS UNBOUNDED PRECEDING) AS open
    FROM b
), launches AS (
    SELECT trace_id, pid, tid, correlation, t AS ts_ns, open FROM s WHERE ord = 1 AND open > 0
)
SELECT l.trace_id, l.correlation, d.op_id
FROM launches l ASOF JOIN op_depth d
  ON d.trace_id = l.trace_id AND d.pid = l.pid AND d.tid = l.tid AND d.depth = l.open - 1 AND l.ts_ns >= d.ts_ns;
"""

#: Linking, after the launches are all claimed: kernels with their launch and op, the op tree.
_FINISH_LINK_SQL = """
CREATE TEMP TABLE kernel_stage AS
SELECT g.trace_id, g.dev_label, g.device_index, g.stream, g.kind,
       {category} AS category,
       g.name, g.ts_ns, g.dur_ns, g.correlation, coalesce(g.ext_id, r.ext_id) AS external_id,
       CASE WHEN r.name ILIKE '%GraphLaunch%' THEN NULL
            ELSE coalesce(l.op_id, CASE WHEN r.correlation IS NULL THEN o.op_id END) END AS op_id,
       r.name AS launch_name, r.ts_ns AS launch_ts_ns, r.dur_ns AS launch_dur_ns,
       g.grid, g.block, g.registers AS registers_per_thread, g.shared_memory AS shared_memory_bytes,
       g.occupancy_pct / 100.0 AS occupancy, g.bytes,
       CASE WHEN r.name ILIKE '%GraphLaunch%' THEN 'graph_replay'
            WHEN coalesce(l.op_id, CASE WHEN r.correlation IS NULL THEN o.op_id END) IS NOT NULL
            THEN 'launch' END AS attribution,
       g.comm_args
FROM gpu g
LEFT JOIN rt r ON r.trace_id = g.trace_id AND r.correlation = g.correlation
LEFT JOIN rt_link l ON l.trace_id = g.trace_id AND l.correlation = g.correlation
LEFT JOIN op_by_ext o ON o.trace_id = g.trace_id AND o.external_id = g.ext_id;

-- Each op's parent: the latest op one level up on its thread that started no later.
CREATE TEMP TABLE op_parent AS
SELECT c.op_id, p.op_id AS parent_op_id
FROM op_depth c ASOF JOIN op_depth p
  ON p.trace_id = c.trace_id AND p.pid = c.pid AND p.tid = c.tid AND p.depth = c.depth - 1 AND c.ts_ns >= p.ts_ns
WHERE c.depth > 0;

-- Ops that launched GPU activity, and their ancestors.
CREATE TEMP TABLE graph_stage AS
SELECT c.trace_id, c.graph_begin_ns,
       row_number() OVER (PARTITION BY c.trace_id, c.graph_begin_ns ORDER BY c.ts_ns, c.correlation) - 1 AS seq,
       c.kernel_name, c.launch_name, c.ts_ns, c.correlation, l.op_id, c.grid, c.block
FROM captured c LEFT JOIN rt_link l ON l.trace_id = c.trace_id AND l.correlation = c.correlation;

CREATE TEMP TABLE op_launching AS
WITH RECURSIVE anc(op_id) AS (
    SELECT DISTINCT op_id FROM kernel_stage WHERE op_id IS NOT NULL
    UNION
    SELECT DISTINCT op_id FROM graph_stage WHERE op_id IS NOT NULL
    UNION
    SELECT p.parent_op_id FROM anc JOIN op_parent p ON p.op_id = anc.op_id
)
SELECT op_id FROM anc;

"""


def split_events(batches: Batches) -> None:
    """From the class tables of the whole run: the launches that link (with those captured
    into graphs) and the ops numbered in trace order; the batches' ``rt_ev`` and ``op_ev``
    are dropped."""
    batches.con.execute(_EXTRACT_SQL.replace("{rt_ev}", batches.union("rt_ev"))
                        .replace("{op_ev}", batches.union("op_ev")))
    batches.drop("rt_ev")
    batches.drop("op_ev")


def link_kernels(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Link kernels to launches and ops, build the op tree and map graph replays (the tables of
    :func:`split_events`). Returns (replayed kernels, mapped kernels)."""
    from .._db import one_row
    con.execute(_LINK_SQL)
    if one_row(con.execute(f"SELECT count(*) {_UNCLAIMED_LAUNCHES}").fetchone())[0]:
        con.execute(_ENCLOSING_LINK_SQL)
    # the one definition of a category (kernel_names), which the analyzers use too
    con.execute(_FINISH_LINK_SQL.replace("{category}", category_sql("g.kind", "g.name")))
    replayed, mapped = map_graph_replays(con)
    con.execute("DROP TABLE gpu; DROP TABLE rt; DROP TABLE rt_link; DROP TABLE op_depth; DROP TABLE op_by_ext; "
                "DROP TABLE captured")
    return replayed, mapped


#: A replayed graph launch is mapped to a captured graph only when at least this share of its
#: kernels align, by name and in order, with that graph's captured launches.
GRAPH_MATCH_MIN = 0.8


def _align(replay: Sequence[str], captured: Sequence[str]) -> list[int | None]:
    """For each replayed kernel name, the index of the captured launch it matches: an in-order
    (greedy subsequence) alignment by kernel name; None where no launch matches."""
    out: list[int | None] = []
    j = 0
    for name in replay:
        k = j
        while k < len(captured) and captured[k] != name:
            k += 1
        if k < len(captured):
            out.append(k)
            j = k + 1
        else:
            out.append(None)
    return out


def map_graph_replays(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Attribute kernels replayed from CUDA/HIP graphs to the ops that captured them.

    Each graph launch (one correlation id, many kernels) is aligned by kernel names, in order,
    with every captured graph (``graph_stage``); the best graph with at least
    :data:`GRAPH_MATCH_MIN` of the kernels aligned gives each kernel the op of its captured
    launch (``attribution = 'graph_capture'``). Returns (replayed kernels, mapped kernels).
    """
    replay = con.execute(
        "SELECT trace_id, correlation, ts_ns, name FROM kernel_stage WHERE attribution = 'graph_replay' "
        "ORDER BY trace_id, correlation, ts_ns, name"
    ).fetchall()
    if not replay:
        return 0, 0
    graph_rows = con.execute(
        "SELECT trace_id, graph_begin_ns, kernel_name, op_id FROM graph_stage ORDER BY trace_id, graph_begin_ns, seq"
    ).fetchall()
    graphs: dict[tuple[int, int], tuple[list[str], list[int | None]]] = {}
    for trace_id, begin, kname, op_id in graph_rows:
        names, ops = graphs.setdefault((trace_id, begin), ([], []))
        names.append(kname)
        ops.append(op_id)
    if not graphs:
        return len(replay), 0
    cache: dict[tuple[str, ...], list[int | None]] = {}
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    i = 0
    while i < len(replay):
        j = i
        while j < len(replay) and replay[j][:2] == replay[i][:2]:
            j += 1
        group = replay[i:j]
        launched = tuple(r[3] for r in group)
        if launched not in cache:
            best: list[int | None] = [None] * len(launched)
            best_n = 0
            for g_names, g_ops in graphs.values():
                idx = _align(launched, g_names)
                n = sum(x is not None for x in idx)
                if n > best_n:
                    best_n, best = n, [g_ops[x] if x is not None else None for x in idx]
            cache[launched] = best if best_n >= GRAPH_MATCH_MIN * len(launched) else [None] * len(launched)
        for row, op_id in zip(group, cache[launched]):
            if op_id is not None:
                for col, v in zip(cols, (row[0], row[1], row[2], row[3], op_id)):
                    col.append(v)
        i = j
    if not cols[0]:
        return len(replay), 0
    con.execute(
        "CREATE TEMP TABLE graph_map AS SELECT unnest(?::INTEGER[]) AS trace_id, unnest(?::BIGINT[]) AS correlation, "
        "unnest(?::BIGINT[]) AS ts_ns, unnest(?::VARCHAR[]) AS name, unnest(?::BIGINT[]) AS op_id",
        list(cols),
    )
    con.execute(
        "UPDATE kernel_stage k SET op_id = m.op_id, attribution = 'graph_capture' FROM graph_map m "
        "WHERE k.trace_id = m.trace_id AND k.correlation = m.correlation AND k.ts_ns = m.ts_ns AND k.name = m.name "
        "AND k.attribution = 'graph_replay'"
    )
    con.execute("DROP TABLE graph_map")
    return len(replay), len(cols[0])

