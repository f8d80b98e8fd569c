"""Ingest of gpuscope's own timeline export (``gpuscope export --format perfetto|chrome``): the
file is a Kineto-shaped trace that ordinary ingest reads, plus a block in its header
(``otherData.gpuscope_export``, :data:`gpuscope.store.timeline.EXPORT_KEY`) that says what a
trace file cannot: which of the run's traces each event came from (a run of several traces,
e.g. a CUDA-graph capture trace beside the trace that replays the graphs, is one file), each
trace's own header (device properties, rank, graph events), the run's telemetry devices, and
that the counter tracks are the run's samples. Their rows are written by
:mod:`gpuscope.store.export_rows`.

Only files with that block take these steps; an ordinary trace pays one dictionary look-up.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from .parse import Batches

#: The key of ``traces.metadata`` under which ingest records the trace's graph capture and
#: launch events (analyzers/scope.py reads it; an export carries it in each trace's header).
GRAPH_EVENTS_KEY = "gpuscope_graph_events"


def export_block(header: dict[str, Any]) -> dict[str, Any] | None:
    """The gpuscope export block of a trace header, checked for shape; None for any other trace
    (or a block that is not one gpuscope writes: the file is then ingested as an ordinary
    trace)."""
    from ..store.timeline import EXPORT_FORMAT, EXPORT_KEY

    other = header.get("otherData")
    block = other.get(EXPORT_KEY) if isinstance(other, dict) else None
    if not isinstance(block, dict) or block.get("format") != EXPORT_FORMAT:
        return None
    traces = block.get("traces")
    if not isinstance(traces, list) or not all(
            isinstance(t, dict) and isinstance(t.get("metadata", {}), dict) for t in traces):
        return None
    # a run of telemetry alone (`gpuscope run --no-profile`) has no trace: the file is its one
    traces = traces or [{"metadata": {}}]
    n = len(traces)

    def pid_map(key: str) -> list[tuple[str, int, str]] | None:
        rows = block.get(key, [])
        if not isinstance(rows, list):
            return None
        out = []
        for r in rows:
            if not (isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and isinstance(r[2], str)
                    and isinstance(r[1], int) and not isinstance(r[1], bool) and 0 <= r[1] < n):
                return None
            out.append((r[0], r[1], r[2]))
        return out

    cpu, gpu = pid_map("cpu_pids"), pid_map("gpu_pids")
    devices = block.get("devices", [])
    columns = block.get("sample_columns", [])
    counts = [block.get("samples", 0), block.get("annotations", 0)]
    if cpu is None or gpu is None or not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices) \
            or not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) \
            or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    found = block.get("run")
    run: dict[str, Any] = found if isinstance(found, dict) else {}
    model = block.get("model")
    return {"traces": traces, "cpu_pids": cpu, "gpu_pids": gpu, "devices": devices, "sample_columns": columns,
            "samples": counts[0], "annotations": counts[1],
            "run": {k: v for k, v in (("name", run.get("name")), ("started_ns", _ns_or_none(run.get("started_ns"))),
                                      ("ended_ns", _ns_or_none(run.get("ended_ns"))))},
            "model": model if isinstance(model, dict) and isinstance(model.get("spec"), dict) else None}


def _ns_or_none(v: Any) -> int | None:
    from .parse import TS_MAX_NS, TS_MIN_NS

    return v if isinstance(v, int) and not isinstance(v, bool) and TS_MIN_NS <= v < TS_MAX_NS else None


def split_traces(batches: Batches, trace_id: int, block: dict[str, Any], first_new_id: int) -> list[int]:
    """Give the parsed events of the export file ``trace_id`` back to the traces they came from:
    the export's trace ``j`` becomes ``trace_id`` for j = 0, ``first_new_id + j - 1`` after;
    pids and device labels get their stored values back (the file keeps them apart where two
    traces share one). Returns the trace ids in the export's trace order."""
    ids = [trace_id] + [first_new_id + j - 1 for j in range(1, len(block["traces"]))]
    con = batches.con
    con.execute("CREATE TEMP TABLE _xcpu (xpid VARCHAR, trace_id INTEGER, pid VARCHAR)")
    con.execute("CREATE TEMP TABLE _xgpu (xpid VARCHAR, trace_id INTEGER, label VARCHAR)")
    try:
        if block["cpu_pids"]:
            con.executemany("INSERT INTO _xcpu VALUES (?, ?, ?)", [(x, ids[j], p) for x, j, p in block["cpu_pids"]])
        if block["gpu_pids"]:
            con.executemany("INSERT INTO _xgpu VALUES (?, ?, ?)", [(x, ids[j], lb) for x, j, lb in block["gpu_pids"]])
        t = int(trace_id)
        for k in range(batches.count):
            con.execute(
                f"UPDATE gpu_{k} g SET trace_id = m.trace_id, dev_label = m.label, "
                f"device_index = TRY_CAST(m.label AS INTEGER) FROM _xgpu m WHERE g.trace_id = {t} AND g.dev_label = m.xpid;"
                f"UPDATE rt_ev_{k} e SET trace_id = m.trace_id, pid = m.pid FROM _xcpu m "
                f"WHERE e.trace_id = {t} AND e.pid = m.xpid;"
                f"UPDATE op_ev_{k} e SET trace_id = m.trace_id, pid = m.pid FROM _xcpu m "
                f"WHERE e.trace_id = {t} AND e.pid = m.xpid;"
                f"UPDATE annotation_stage_{k} a SET trace_id = m.trace_id, pid = m.pid FROM _xcpu m "
                f"WHERE a.trace_id = {t} AND a.pid = m.xpid AND a.dev_label IS NULL;"
                f"UPDATE annotation_stage_{k} a SET trace_id = m.trace_id, dev_label = m.label FROM _xgpu m "
                f"WHERE a.trace_id = {t} AND a.dev_label = m.xpid;"
                f"UPDATE annotation_stage_{k} a SET pid = m.pid FROM _xcpu m "
                f"WHERE a.pid = m.xpid AND a.trace_id = m.trace_id AND a.dev_label IS NOT NULL;")
    finally:
        con.execute("DROP TABLE _xcpu; DROP TABLE _xgpu")
    return ids


def make_extra_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The staging tables :func:`stage_extras` fills, made once per ingest (before the first
    export's)."""
    con.execute("CREATE TEMP TABLE sample_stage (trace_id INTEGER, key VARCHAR, ts_ns BIGINT, "
                "metric VARCHAR, value VARCHAR)")
    con.execute("CREATE TEMP TABLE export_annotation_stage (trace_id INTEGER, kind VARCHAR, name VARCHAR, "
                "ts_ns BIGINT, dur_ns BIGINT, device_key VARCHAR, pid VARCHAR, tid VARCHAR, value VARCHAR)")


def stage_extras(con: duckdb.DuckDBPyConnection, trace_id: int, path: Path, block: dict[str, Any], base_ns: int,
                 spool_dir: Path, max_inflate_ratio: float) -> None:
    """What the event parse keeps nothing of, from a second read of the file that only
    gpuscope's exports holding it take: the telemetry counter tracks as rows of
    ``sample_stage`` (trace id, device key, time, metric, value as text) and the profiler
    windows, marks and lost devices as rows of ``export_annotation_stage``
    (:func:`make_extra_tables`). Counter tracks that
    are not a stored metric (the link utilization percentages, derived from the byte rates) are
    left out."""
    from .._db import sql_literal
    from ..store.timeline import GPUSCOPE_KINDS, GPUSCOPE_PID, TELEMETRY_PID
    from .parse import DUR_MAX_NS, TS_MAX_NS, TS_MIN_NS, _ns
    from .read import spool_events

    metrics = [c for c in block["sample_columns"] if c.isidentifier()]
    if not (metrics and block["samples"] > 0) and block["annotations"] <= 0:
        return
    whole = spool_events(path, spool_dir, max_inflate_ratio=max_inflate_ratio)
    try:
        con.execute(f"""
            CREATE TEMP TABLE _xev AS
            SELECT json_extract_string(json, '$.pid') AS pid, json_extract_string(json, '$.ph') AS ph,
                   json_extract_string(json, '$.cat') AS cat, json_extract_string(json, '$.name') AS name,
                   TRY_CAST(json_extract(json, '$.ts') AS DOUBLE) AS ts_us, TRY_CAST(json_extract(json, '$.dur') AS DOUBLE) AS dur_us,
                   json_extract(json, '$.args') AS args, json_extract(json, '$.gpuscope_origin') AS origin
            FROM read_json_objects({sql_literal(str(whole.spool))}, format='array')
            WHERE json_extract_string(json, '$.pid') IN ('{TELEMETRY_PID}', '{GPUSCOPE_PID}')""")
    finally:
        whole.spool.unlink(missing_ok=True)
    try:
        # within the times the store keeps (as the event parse: parse.TS_MIN_NS .. TS_MAX_NS)
        ok = f"ts_us IS NOT NULL AND isfinite(ts_us) AND ts_us >= {TS_MIN_NS / 1000!r} AND ts_us < {TS_MAX_NS / 1000!r}"
        listed = ", ".join(sql_literal(m) for m in metrics) or "NULL"
        con.execute(f"""
            INSERT INTO sample_stage
            SELECT {int(trace_id)}, key, {_ns('ts_us', base_ns)}, metric, json_extract_string(args, '$.' || metric)
            FROM (SELECT regexp_extract(name, '^(.*) ([^ ]+)$', 1) AS key, regexp_extract(name, '^(.*) ([^ ]+)$', 2) AS metric,
                         ts_us, args FROM _xev WHERE pid = '{TELEMETRY_PID}' AND ph = 'C' AND {ok})
            WHERE metric IN ({listed}) AND key <> ''""")
        kinds = ", ".join(sql_literal("gpuscope." + k) for k in GPUSCOPE_KINDS)
        con.execute(f"""
            INSERT INTO export_annotation_stage
            SELECT {int(trace_id)}, substr(cat, 10), name, {_ns('ts_us', base_ns)},
                   CASE WHEN ph = 'X' AND dur_us >= 0 AND dur_us * 1000 < {DUR_MAX_NS} THEN CAST(round(dur_us * 1000) AS BIGINT) END,
                   json_extract_string(origin, '$.device'), json_extract_string(origin, '$.pid'),
                   json_extract_string(origin, '$.tid'), CASE WHEN json_type(args) <> 'NULL' THEN args::VARCHAR END
            FROM _xev WHERE pid = '{GPUSCOPE_PID}' AND cat IN ({kinds}) AND ph IN ('X', 'i') AND {ok}""")
    finally:
        con.execute("DROP TABLE _xev")


def staged_extras(con: duckdb.DuckDBPyConnection) -> int:
    """The rows :func:`stage_extras` staged (samples and annotations of gpuscope's exports)."""
    from .._db import duckdb, one_row

    try:
        return int(one_row(con.execute(
            "SELECT (SELECT count(*) FROM temp.sample_stage) + (SELECT count(*) FROM temp.export_annotation_stage)"
        ).fetchone())[0])
    except duckdb.CatalogException:  # no export among the inputs: the tables were never made
        return 0


def export_span(infos: list[Any], span: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    """The run's span from the events, widened to the exported run's own start and end (a
    recorded run starts with its sampler, before its first event)."""
    lo, hi = span
    for i in infos:
        if i.export is not None:
            s, e = i.export["run"].get("started_ns"), i.export["run"].get("ended_ns")
            lo = s if lo is None or (s is not None and s < lo) else lo
            hi = e if hi is None or (e is not None and e > hi) else hi
    return lo, hi
