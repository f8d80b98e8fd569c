"""The read layer's queries for the timeline export (``gpuscope export --format
perfetto|chrome``): one run's rows as Chrome trace-event JSON texts, built by DuckDB so that
the exporter streams them without touching each row in Python. Kineto's shapes and names (cat
``kernel``/``gpu_memcpy``/``gpu_memset``/``cpu_op``/``cuda_runtime``, ``ac2g`` flows, its args
spelling) so that ``gpuscope ingest`` and other tools read the file back. Queries take the run
id as their one parameter; ``_ka`` / ``_oa`` (per-kernel and per-op analysis) are registered by
the caller on the cursor.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The ``samples`` columns that are not metrics (every other column is written as a counter track).
SAMPLE_KEY_COLUMNS = ("run_id", "device_id", "ts_ns")
#: GPU-GPU link utilization tracks: track name -> the stored byte rate (both over every NVLink /
#: XGMI link of the device), shown as a percent of the spec's link bandwidth in that direction.
LINK_COUNTERS = (("link_tx_util_pct", "xgmi_nvlink_tx_bytes_per_s"), ("link_rx_util_pct", "xgmi_nvlink_rx_bytes_per_s"))
#: pids of the tracks gpuscope adds (Kineto's GPU tracks use the device index as pid).
GPUSCOPE_PID = 1_000_000
TELEMETRY_PID = 1_000_001
#: The key under ``otherData`` that marks a file as gpuscope's own timeline export and holds what
#: ``gpuscope ingest`` needs to rebuild the run from it (:func:`export_metadata`).
EXPORT_KEY = "gpuscope_export"
#: The annotations gpuscope itself records (``run``, ``monitor``), written on :data:`GPUSCOPE_PID`.
GPUSCOPE_KINDS = ("profiler_window", "mark", "device_lost")
#: The version of that block's shape.
EXPORT_FORMAT = 1
#: The pid of captured graph launches that no op claims (their capture windows go there too).
GRAPH_CAPTURE_PID = "graph capture"
#: The pid of launches of kernels whose launch has no op of its own (graph replays, unlinked).
LAUNCH_PID = "launches"


def sample_columns(cur: Any) -> tuple[str, ...]:
    """The metric columns of ``samples`` as the store ``cur`` reads it: every one is exported
    as a counter track and read back, so that columns a later schema adds need no change here."""
    cols = cur.execute("SELECT * FROM samples LIMIT 0").description
    return tuple(c[0] for c in cols if c[0] not in SAMPLE_KEY_COLUMNS)


def base_ns(cur: Any, run_id: int) -> int:
    row = cur.execute(
        "SELECT least((SELECT min(ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM ops WHERE run_id = $1), "
        "(SELECT min(launch_ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM samples WHERE run_id = $1), "
        "(SELECT min(ts_ns) FROM annotations WHERE run_id = $1))", [run_id]).fetchone()
    return int(row[0] // 1000 * 1000) if row and row[0] is not None else 0


def device_properties(cur: Any, run_id: int) -> str:
    """Kineto's ``deviceProperties``: each trace device's properties as its trace gave them (every
    field, which the spec matching reads), else built from its columns."""
    rows = cur.execute(
        "SELECT json_group_array(coalesce(json_merge_patch(TRY_CAST(properties AS JSON), json_object('id', device_index)), "
        "json_object('id', device_index, 'name', name, 'totalGlobalMem', memory_total_bytes, "
        "'computeMajor', TRY_CAST(split_part(compute_capability, '.', 1) AS INTEGER), "
        "'computeMinor', TRY_CAST(split_part(compute_capability, '.', 2) AS INTEGER), 'numSms', num_sms, "
        "'warpSize', warp_size))) FROM (SELECT DISTINCT ON (device_index) * FROM devices "
        "WHERE run_id = ? AND source <> 'telemetry' AND device_index IS NOT NULL ORDER BY device_index)",
        [run_id]).fetchone()
    return rows[0] if rows and rows[0] else "[]"


def distributed_info(cur: Any, run_id: int) -> str | None:
    """Kineto's ``distributedInfo`` for a run of one trace (its rank, else 0), None for several:
    tools that read one rank per file (Holistic Trace Analysis) want it."""
    rows = cur.execute("SELECT rank, metadata FROM traces WHERE run_id = ?", [run_id]).fetchall()
    if len(rows) > 1:
        return None
    import json

    info: dict[str, Any] = {}
    if rows and rows[0][1]:
        try:
            meta = json.loads(rows[0][1])
            info = dict(meta.get("distributedInfo") or {}) if isinstance(meta, dict) else {}
        except (ValueError, TypeError):
            info = {}
    info.setdefault("rank", int(rows[0][0]) if rows and rows[0][0] is not None else 0)
    return json.dumps(info)


def export_metadata(cur: Any, run_id: int) -> tuple[dict[str, Any], list[tuple[int, str, str]]]:
    """What ``gpuscope ingest`` needs, besides the events, to rebuild the run from its timeline
    export (the ``otherData.gpuscope_export`` block, :data:`EXPORT_KEY`), and the pid map the
    event queries use (``_pm``: trace id, stored pid, exported pid).

    - ``traces``: each trace of the run (path, rank, and its header as stored: device
      properties, distributed info, the graph events counted at ingest), in trace order;
    - ``cpu_pids`` / ``gpu_pids``: [exported pid, index in ``traces``, original pid or device
      label], so that ingest gives each event back to its trace (a run of several traces is
      one file; a CPU pid two traces share is written ``traceN:PID`` to keep them apart);
    - ``devices``: the run's devices that are not a trace's (telemetry), every column;
    - ``sample_columns``: the metric columns written as counter tracks, ``samples`` the number
      of stored sample rows they hold, ``annotations`` the profiler windows, marks and lost
      devices on the ``gpuscope`` process (each event's stored pid, tid and device under its
      ``gpuscope_origin`` key);
    - ``run``: its name, start and end; ``model``: the model spec stored with it (``--model``).
    """
    import json

    traces = []
    for trace_id, path, rank, metadata in cur.execute(
            "SELECT trace_id, path, rank, metadata FROM traces WHERE run_id = ? ORDER BY trace_id", [run_id]).fetchall():
        try:
            meta = json.loads(metadata) if metadata else {}
        except (ValueError, TypeError):
            meta = {}
        traces.append({"trace_id": int(trace_id), "path": path, "rank": rank,
                       "metadata": meta if isinstance(meta, dict) else {}})
    index = {t["trace_id"]: i for i, t in enumerate(traces)}
    pairs = cur.execute(
        "SELECT DISTINCT trace_id, pid FROM ops WHERE run_id = $1 AND pid IS NOT NULL "
        "UNION SELECT DISTINCT trace_id, pid FROM annotations WHERE run_id = $1 AND pid IS NOT NULL "
        "AND trace_id IS NOT NULL ORDER BY ALL", [run_id]).fetchall()
    pairs += [(t["trace_id"], pid) for t in traces for pid in (LAUNCH_PID, GRAPH_CAPTURE_PID)]
    owners: dict[str, set[int]] = {}
    for t, pid in pairs:
        owners.setdefault(pid, set()).add(int(t))
    pm = [(int(t), pid, pid if len(owners[pid]) == 1 else f"trace{index.get(int(t), int(t))}:{pid}") for t, pid in pairs]
    cpu_pids = [[x, index[t], pid] for t, pid, x in pm if t in index]
    gpu_pids = []
    for pid, trace_id, device_index, key in cur.execute(
            f"WITH {_gpu_map('$1')} SELECT gm.pid, d.trace_id, d.device_index, d.key FROM gm "
            "JOIN devices d ON d.run_id = $1 AND d.device_id = gm.device_id ORDER BY gm.device_id", [run_id]).fetchall():
        label = str(device_index) if device_index is not None else str(key).split("device:", 1)[-1]
        if trace_id in index:
            gpu_pids.append([str(pid), index[trace_id], label])
    res = cur.execute("SELECT * FROM devices WHERE run_id = ? AND source <> 'trace' ORDER BY device_id", [run_id])
    names = [c[0] for c in res.description]
    devices = [{k: v for k, v in zip(names, row) if k != "run_id"} for row in res.fetchall()]
    counts = cur.execute(
        "SELECT (SELECT count(*) FROM samples WHERE run_id = $1), (SELECT count(*) FROM annotations WHERE run_id = $1 "
        f"AND kind IN ({', '.join(repr(k) for k in GPUSCOPE_KINDS)}))", [run_id]).fetchone() or (0, 0)
    run = cur.execute("SELECT name, started_ns, ended_ns FROM runs WHERE id = ?", [run_id]).fetchone()
    model = cur.execute("SELECT spec_json, source FROM run_models WHERE run_id = ?", [run_id]).fetchone()
    try:
        spec = json.loads(model[0]) if model else None
    except (ValueError, TypeError):
        spec = None
    doc = {"format": EXPORT_FORMAT,
           "run": {"name": run[0], "started_ns": run[1], "ended_ns": run[2]} if run else {},
           "model": {"spec": spec, "source": model[1]} if isinstance(spec, dict) else None,
           "traces": traces, "cpu_pids": cpu_pids, "gpu_pids": gpu_pids, "devices": devices,
           "sample_columns": list(sample_columns(cur)), "samples": int(counts[0]), "annotations": int(counts[1])}
    return doc, pm


def _us(col: str, base: int) -> str:
    return f"round(({col} - {base}) / 1000.0, 3)"


def _gpu_map(run_id_param: str = "$1") -> str:
    """A CTE ``gm``: each trace device's pid (its device index when those are unique in the
    run, else the store's device id), its process label (``rank R GPU N (name)`` when the run
    holds several ranked traces) and its sort index (by rank, then device)."""
    return f"""gm AS (
        SELECT d.device_id,
               CASE WHEN (SELECT count(DISTINCT device_index) FROM devices
                          WHERE run_id = {run_id_param} AND source <> 'telemetry') =
                         (SELECT count(*) FROM devices WHERE run_id = {run_id_param} AND source <> 'telemetry')
                    THEN coalesce(d.device_index, d.device_id) ELSE d.device_id END AS pid,
               CASE WHEN (SELECT count(rank) FROM traces WHERE run_id = {run_id_param}) > 1
                    THEN coalesce('rank ' || t.rank || ' ', '') ELSE '' END
                 || 'GPU ' || coalesce(d.device_index, d.device_id) || coalesce(' (' || d.name || ')', '') AS label,
               coalesce(t.rank, 0) * 1000 + coalesce(d.device_index, d.device_id) AS sort_index
        FROM devices d LEFT JOIN traces t ON t.run_id = d.run_id AND t.trace_id = d.trace_id
        WHERE d.run_id = {run_id_param} AND d.source <> 'telemetry')"""


def _within(col: str, lo: int | None, hi: int | None) -> str:
    out = ""
    if lo is not None:
        out += f" AND {col} >= {int(lo)}"
    if hi is not None:
        out += f" AND {col} < {int(hi)}"
    return out


#: Kineto's args of a collective (``kernels.comm_args`` / ``ops.comm_args`` key -> arg), as
#: :data:`gpuscope.ingest.parse.COMM_ARG_KEYS` reads them.
COMM_ARGS = (("collective", "Collective name"), ("in_nelems", "In msg nelems"), ("out_nelems", "Out msg nelems"),
             ("dtype", "dtype"), ("group_size", "Group size"), ("pg_name", "Process Group Name"),
             ("pg_ranks", "Process Group Ranks"), ("seq", "Seq"))


def _with_comm_args(args: str, col: str) -> str:
    """``args`` (a JSON object expression) with the collective's Kineto args added from ``col``
    (a stored ``comm_args``) where it has them: the other rows carry no such keys."""
    pairs = ", ".join(f"'{arg}', json_extract({col}, '$.{key}')" for key, arg in COMM_ARGS)
    return f"CASE WHEN {col} IS NULL THEN {args} ELSE json_merge_patch({args}, json_object({pairs})) END"


def event_queries(run_id: int, base: int, lo_ns: int | None = None, hi_ns: int | None = None,
                  metrics: Sequence[str] = ()) -> list[tuple[str, str, list[Any]]]:
    """(kind, SQL yielding one JSON event text per row, parameters), in writing order; only
    what starts in ``[lo_ns, hi_ns)`` when given; ``metrics``: the ``samples`` columns written
    as counter tracks (:func:`sample_columns`). The link utilization tracks need ``_lk``
    (``device_id``, ``link_bytes_per_s``: the device's scale-up links together, one direction)
    registered on the cursor; a device without a row there has none; ``_pm`` (trace id, pid,
    exported pid: :func:`export_metadata`) maps the CPU pids. The rows come in the store's order, not
    sorted by time: trace viewers and ingest sort for themselves, and a sort would hold every
    event's JSON in memory at once (+130 MiB on a 1.2M-event run, bench/README.md)."""
    ts, dur = _us("k.ts_ns", base), "round(k.dur_ns / 1000.0, 3)"
    gpu_pid = "coalesce(gm.pid, k.device_id)"
    kwin = _within("k.ts_ns", lo_ns, hi_ns)
    meta = f"""
        WITH {_gpu_map()}
        SELECT json_object('ph', 'M', 'name', 'process_name', 'pid', pid, 'tid', 0,
                           'args', json_object('name', label))::VARCHAR
        FROM (SELECT pid, label FROM gm
              UNION ALL SELECT {GPUSCOPE_PID}, 'gpuscope: profiler windows and marks'
              UNION ALL SELECT {TELEMETRY_PID}, 'gpuscope: telemetry')
        UNION ALL
        SELECT json_object('ph', 'M', 'name', 'process_sort_index', 'pid', pid, 'tid', 0,
                           'args', json_object('sort_index', sort_index))::VARCHAR
        FROM gm"""
    kargs = _with_comm_args(
        f"""json_object('device', {gpu_pid}, 'stream', k.stream, 'correlation', k.correlation,
                                'External id', k.external_id, 'grid', k.grid, 'block', k.block,
                                'registers per thread', k.registers_per_thread, 'shared memory', k.shared_memory_bytes,
                                'est. achieved occupancy %', k.occupancy * 100, 'bytes', k.bytes,
                                'gpuscope.category', k.category, 'gpuscope.bound', ka.bound,
                                'gpuscope.pct_of_roof', round(ka.pct_of_roof * 100, 3))""", "k.comm_args")
    kernels = f"""
        WITH {_gpu_map()}
        SELECT json_object(
            'ph', 'X', 'cat', CASE k.kind WHEN 'memcpy' THEN 'gpu_memcpy' WHEN 'memset' THEN 'gpu_memset' ELSE 'kernel' END,
            'name', k.name, 'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts}, 'dur', {dur},
            'args', {kargs})::VARCHAR
        FROM kernels k LEFT JOIN gm ON gm.device_id = k.device_id
        LEFT JOIN _ka ka ON ka.name = k.name
        WHERE k.run_id = $1{kwin}"""
    launch_ts, launch_dur = _us("k.launch_ts_ns", base), "round(coalesce(k.launch_dur_ns, 0) / 1000.0, 3)"
    where_launch = "k.run_id = $1 AND k.launch_ts_ns IS NOT NULL AND k.correlation IS NOT NULL" + kwin
    # A launch goes on its op's thread when the op is the launch's own; a kernel replayed from a
    # graph (its op is the one that captured it, maybe in another trace) or without an op has its
    # launch on a thread of its own trace that no op encloses, as it linked to none.
    own_op = "o.op_id IS NOT NULL AND coalesce(k.attribution, 'launch') = 'launch'"
    launch_src = f"""(SELECT k.*, CASE WHEN {own_op} THEN o.pid ELSE '{LAUNCH_PID}' END AS lpid,
                             CASE WHEN {own_op} THEN o.tid ELSE '{LAUNCH_PID}' END AS ltid
                      FROM kernels k LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id WHERE {where_launch}) k
                     LEFT JOIN _pm pm ON pm.trace_id = k.trace_id AND pm.pid = k.lpid"""
    launches = f"""
        SELECT json_object('ph', 'X', 'cat', 'cuda_runtime', 'name', coalesce(k.launch_name, 'launch'),
                           'pid', coalesce(pm.xpid, k.lpid), 'tid', k.ltid,
                           'ts', {launch_ts}, 'dur', {launch_dur},
                           'args', json_object('correlation', k.correlation, 'External id', k.external_id))::VARCHAR
        FROM {launch_src}"""
    flows = f"""
        SELECT json_object('ph', 's', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', coalesce(pm.xpid, k.lpid), 'tid', k.ltid, 'ts', {launch_ts})::VARCHAR
        FROM {launch_src}
        UNION ALL
        (WITH {_gpu_map()}
        SELECT json_object('ph', 'f', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts})::VARCHAR
        FROM kernels k LEFT JOIN gm ON gm.device_id = k.device_id WHERE {where_launch})"""
    # Launches recorded while a CUDA/HIP graph was captured (graph_launches), in Kineto's shape:
    # a *StreamBeginCapture .. *StreamEndCapture window on the capturing process, each launch
    # naming its kernel (args.kernel) and running none then; ingest maps the graph's replayed
    # kernels to the ops that captured them from these, as from the trace they came from.
    gl_src = f"""(SELECT g.*, coalesce(o.pid, '{GRAPH_CAPTURE_PID}') AS gpid, coalesce(o.tid, '{GRAPH_CAPTURE_PID}') AS gtid,
                         o.external_id AS gext,
                         CASE WHEN g.launch_name ILIKE 'hip%' THEN 'hip' ELSE 'cuda' END AS api
                  FROM graph_launches g LEFT JOIN ops o ON o.run_id = g.run_id AND o.op_id = g.op_id
                  WHERE g.run_id = $1{_within("g.graph_ns", lo_ns, hi_ns)}) g
                 LEFT JOIN _pm pm ON pm.trace_id = g.trace_id AND pm.pid = g.gpid"""
    captures = f"""
        SELECT json_object('ph', 'X', 'cat', 'cuda_runtime', 'name', w.api || w.what, 'pid', w.pid,
                           'tid', '{GRAPH_CAPTURE_PID}', 'ts', {_us('w.ts_ns', base)}, 'dur', 0)::VARCHAR
        FROM (SELECT DISTINCT coalesce(pm.xpid, g.gpid) AS pid, g.api, 'StreamBeginCapture' AS what, g.graph_ns AS ts_ns
              FROM {gl_src}
              UNION ALL
              SELECT coalesce(pm.xpid, g.gpid), min(g.api), 'StreamEndCapture', max(g.ts_ns) + 1
              FROM {gl_src} GROUP BY g.trace_id, g.graph_ns, coalesce(pm.xpid, g.gpid)) w
        UNION ALL
        SELECT json_object('ph', 'X', 'cat', 'cuda_runtime', 'name', coalesce(g.launch_name, 'launch'),
                           'pid', coalesce(pm.xpid, g.gpid), 'tid', g.gtid, 'ts', {_us('g.ts_ns', base)}, 'dur', 0,
                           'args', json_object('correlation', g.correlation, 'External id', g.gext, 'kernel', g.kernel_name,
                                               'grid', g.grid, 'block', g.block))::VARCHAR
        FROM {gl_src}"""
    ots = _us("o.ts_ns", base)
    oargs = _with_comm_args("""json_object('External id', o.external_id, 'Sequence number', o.sequence_number,
                                               'Input Dims', TRY_CAST(o.input_dims AS JSON),
                                               'Input type', TRY_CAST(o.input_types AS JSON),
                                               'Input Strides', TRY_CAST(o.input_strides AS JSON),
                                               'Concrete Inputs', TRY_CAST(o.concrete_inputs AS JSON),
                                               'gpuscope.bound', oa.bound, 'gpuscope.intensity_flop_per_byte', oa.intensity,
                                               'gpuscope.achieved_flops_per_s', oa.flops_per_s,
                                               'gpuscope.achieved_bytes_per_s', oa.bytes_per_s,
                                               'gpuscope.pct_of_roof', round(oa.pct_of_roof * 100, 3))""", "o.comm_args")
    ops = f"""
        SELECT json_object('ph', 'X', 'cat', 'cpu_op', 'name', o.name, 'pid', coalesce(pm.xpid, o.pid), 'tid', o.tid,
                           'ts', {ots}, 'dur', round(o.dur_ns / 1000.0, 3),
                           'args', {oargs})::VARCHAR
        FROM ops o LEFT JOIN _oa oa ON oa.name = o.name AND oa.input_dims IS NOT DISTINCT FROM o.input_dims
                                    AND oa.input_types IS NOT DISTINCT FROM o.input_types
        LEFT JOIN _pm pm ON pm.trace_id = o.trace_id AND pm.pid = o.pid
        WHERE o.run_id = $1{_within("o.ts_ns", lo_ns, hi_ns)}"""
    # every metric column of the schema, each value in its own type (a BIGINT stays exact), one
    # arg per event as Kineto's counters: a viewer (and ingest) sees one series per track
    unpivot = " UNION ALL ".join(
        f"SELECT device_id, ts_ns, '{c}' AS metric, json_object('{c}', {c}) AS args FROM samples "
        f"WHERE run_id = $1 AND {c} IS NOT NULL{_within('ts_ns', lo_ns, hi_ns)}" for c in metrics) or \
        "SELECT NULL::INTEGER AS device_id, NULL::BIGINT AS ts_ns, NULL AS metric, NULL::JSON AS args LIMIT 0"
    counters = f"""
        SELECT json_object('ph', 'C', 'name', d.key || ' ' || c.metric, 'pid', {TELEMETRY_PID}, 'tid', 0,
                           'ts', {_us('c.ts_ns', base)}, 'args', c.args)::VARCHAR
        FROM ({unpivot}) c JOIN devices d ON d.run_id = $1 AND d.device_id = c.device_id"""
    # one arg per event, as the other tracks: a viewer (and a reader of this file) sees one
    # series per track; percent of the links' one-direction bandwidth, not capped (a reading
    # above 100 says the spec entry is wrong, not the counter)
    link_unpivot = " UNION ALL ".join(
        f"SELECT device_id, ts_ns, '{track}' AS metric, CAST({col} AS DOUBLE) AS value FROM samples "
        f"WHERE run_id = $1 AND {col} IS NOT NULL{_within('ts_ns', lo_ns, hi_ns)}" for track, col in LINK_COUNTERS)
    links = f"""
        SELECT json_object('ph', 'C', 'name', d.key || ' ' || c.metric, 'pid', {TELEMETRY_PID}, 'tid', 0,
                           'ts', {_us('c.ts_ns', base)},
                           'args', json_object(c.metric, round(100.0 * c.value / lk.link_bytes_per_s, 3)))::VARCHAR
        FROM ({link_unpivot}) c JOIN devices d ON d.run_id = $1 AND d.device_id = c.device_id
        JOIN _lk lk ON lk.device_id = c.device_id WHERE lk.link_bytes_per_s > 0"""
    origin = "'gpuscope_origin', json_object('pid', a.pid, 'tid', a.tid, 'device', d.key)"
    notes = f"""
        SELECT CASE WHEN a.kind = 'mark'
            THEN json_object('ph', 'i', 's', 'p', 'cat', 'gpuscope.mark', 'name', a.name, 'pid', {GPUSCOPE_PID},
                             'tid', 'marks', 'ts', {_us('a.ts_ns', base)}, 'args', TRY_CAST(a.value AS JSON), {origin})
            ELSE json_object('ph', 'X', 'cat', 'gpuscope.' || a.kind, 'name', coalesce(a.name, a.kind), 'pid', {GPUSCOPE_PID},
                             'tid', a.kind, 'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                             'args', TRY_CAST(a.value AS JSON), {origin}) END::VARCHAR
        FROM annotations a LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id
        WHERE a.run_id = $1 AND a.kind IN ('profiler_window', 'mark', 'device_lost'){_within("a.ts_ns", lo_ns, hi_ns)}
        UNION ALL
        (WITH {_gpu_map()}
        SELECT json_object('ph', 'X', 'cat', CASE WHEN a.kind = 'gpu_user_annotation' OR a.device_id IS NOT NULL
                                          THEN 'gpu_user_annotation' ELSE 'user_annotation' END,
                           'name', a.name, 'pid', coalesce(pm.xpid, a.pid, '{GPUSCOPE_PID}'), 'tid', coalesce(a.tid, a.kind),
                           'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                           'args', json_object('device', coalesce(gm.pid, a.device_id)))::VARCHAR
        FROM annotations a LEFT JOIN _pm pm ON pm.trace_id = a.trace_id AND pm.pid = a.pid
        LEFT JOIN gm ON gm.device_id = a.device_id
        WHERE a.run_id = $1 AND a.kind NOT IN ('profiler_window', 'mark', 'device_lost'){_within("a.ts_ns", lo_ns, hi_ns)})"""
    return [("metadata", meta, [run_id]), ("kernels", kernels, [run_id]), ("launches", launches, [run_id]),
            ("flows", flows, [run_id]), ("graph_captures", captures, [run_id]), ("ops", ops, [run_id]),
            ("counters", counters, [run_id]), ("link_counters", links, [run_id]),
            ("annotations", notes, [run_id])]
