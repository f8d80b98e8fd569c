"""The read layer's queries for the timeline export (``gpuscope export --format
perfetto|chrome``): one run's rows as Chrome trace-event JSON texts, built by DuckDB so that
the exporter streams them without touching each row in Python. Kineto's shapes and names (cat
``kernel``/``gpu_memcpy``/``gpu_memset``/``cpu_op``/``cuda_runtime``, ``ac2g`` flows, its args
spelling) so that ``gpuscope ingest`` and other tools read the file back. Queries take the run
id as their one parameter; ``_ka`` / ``_oa`` (per-kernel and per-op analysis) are registered by
the caller on the cursor.
"""
from __future__ import annotations

from typing import Any

#: Counter tracks per device: the stored metrics written as counters.
COUNTERS = ("gpu_util", "power_w", "mem_used_bytes", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "sm_active",
            "tensor_active", "dram_bw_util", "host_cpu_util", "host_mem_used_bytes")
#: GPU-GPU link utilization tracks: track name -> the stored byte rate (both over every NVLink /
#: XGMI link of the device), shown as a percent of the spec's link bandwidth in that direction.
LINK_COUNTERS = (("link_tx_util_pct", "xgmi_nvlink_tx_bytes_per_s"), ("link_rx_util_pct", "xgmi_nvlink_rx_bytes_per_s"))
#: pids of the tracks gpuscope adds (Kineto's GPU tracks use the device index as pid).
GPUSCOPE_PID = 1_000_000
TELEMETRY_PID = 1_000_001


def base_ns(cur: Any, run_id: int) -> int:
    row = cur.execute(
        "SELECT least((SELECT min(ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM ops WHERE run_id = $1), "
        "(SELECT min(launch_ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM samples WHERE run_id = $1), "
        "(SELECT min(ts_ns) FROM annotations WHERE run_id = $1))", [run_id]).fetchone()
    return int(row[0] // 1000 * 1000) if row and row[0] is not None else 0


def device_properties(cur: Any, run_id: int) -> str:
    rows = cur.execute(
        "SELECT json_group_array(json_object('id', device_index, 'name', name, 'totalGlobalMem', memory_total_bytes, "
        "'computeMajor', TRY_CAST(split_part(compute_capability, '.', 1) AS INTEGER), "
        "'computeMinor', TRY_CAST(split_part(compute_capability, '.', 2) AS INTEGER), 'numSms', num_sms, "
        "'warpSize', warp_size)) FROM (SELECT DISTINCT ON (device_index) * FROM devices "
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


def event_queries(run_id: int, base: int, lo_ns: int | None = None, hi_ns: int | None = None
                  ) -> list[tuple[str, str, list[Any]]]:
    """(kind, SQL yielding one JSON event text per row, parameters), in writing order; only
    what starts in ``[lo_ns, hi_ns)`` when given. The link utilization tracks need ``_lk``
    (``device_id``, ``link_bytes_per_s``: the device's scale-up links together, one direction)
    registered on the cursor; a device without a row there has none. The rows come in the store's order, not
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
    kernels = f"""
        WITH {_gpu_map()}
        SELECT json_object(
            'ph', 'X', 'cat', CASE k.kind WHEN 'memcpy' THEN 'gpu_memcpy' WHEN 'memset' THEN 'gpu_memset' ELSE 'kernel' END,
            'name', k.name, 'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts}, 'dur', {dur},
            'args', json_object('device', {gpu_pid}, 'stream', k.stream, 'correlation', k.correlation,
                                'External id', k.external_id, 'grid', k.grid, 'block', k.block,
                                'registers per thread', k.registers_per_thread, 'shared memory', k.shared_memory_bytes,
                                'est. achieved occupancy %', k.occupancy, 'bytes', k.bytes,
                                'gpuscope.category', k.category, 'gpuscope.bound', ka.bound,
                                'gpuscope.pct_of_roof', round(ka.pct_of_roof * 100, 3)))::VARCHAR
        FROM kernels k LEFT JOIN gm ON gm.device_id = k.device_id
        LEFT JOIN _ka ka ON ka.name = k.name
        WHERE k.run_id = $1{kwin}"""
    launch_ts, launch_dur = _us("k.launch_ts_ns", base), "round(coalesce(k.launch_dur_ns, 0) / 1000.0, 3)"
    where_launch = "k.run_id = $1 AND k.launch_ts_ns IS NOT NULL AND k.correlation IS NOT NULL" + kwin
    launches = f"""
        SELECT json_object('ph', 'X', 'cat', 'cuda_runtime', 'name', coalesce(k.launch_name, 'launch'),
                           'pid', coalesce(o.pid, 'launches'), 'tid', coalesce(o.tid, 'launches'),
                           'ts', {launch_ts}, 'dur', {launch_dur},
                           'args', json_object('correlation', k.correlation, 'External id', k.external_id))::VARCHAR
        FROM kernels k LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id
        WHERE {where_launch}"""
    flows = f"""
        WITH {_gpu_map()}
        SELECT json_object('ph', 's', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', coalesce(o.pid, 'launches'), 'tid', coalesce(o.tid, 'launches'), 'ts', {launch_ts})::VARCHAR
        FROM kernels k LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id WHERE {where_launch}
        UNION ALL
        SELECT json_object('ph', 'f', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts})::VARCHAR
        FROM kernels k LEFT JOIN gm ON gm.device_id = k.device_id WHERE {where_launch}"""
    ots = _us("o.ts_ns", base)
    ops = f"""
        SELECT json_object('ph', 'X', 'cat', 'cpu_op', 'name', o.name, 'pid', o.pid, 'tid', o.tid,
                           'ts', {ots}, 'dur', round(o.dur_ns / 1000.0, 3),
                           'args', json_object('External id', o.external_id, 'Sequence number', o.sequence_number,
                                               'Input Dims', TRY_CAST(o.input_dims AS JSON),
                                               'Input type', TRY_CAST(o.input_types AS JSON),
                                               'Input Strides', TRY_CAST(o.input_strides AS JSON),
                                               'gpuscope.bound', oa.bound, 'gpuscope.intensity_flop_per_byte', oa.intensity,
                                               'gpuscope.achieved_flops_per_s', oa.flops_per_s,
                                               'gpuscope.achieved_bytes_per_s', oa.bytes_per_s,
                                               'gpuscope.pct_of_roof', round(oa.pct_of_roof * 100, 3)))::VARCHAR
        FROM ops o LEFT JOIN _oa oa ON oa.name = o.name AND oa.input_dims IS NOT DISTINCT FROM o.input_dims
                                    AND oa.input_types IS NOT DISTINCT FROM o.input_types
        WHERE o.run_id = $1{_within("o.ts_ns", lo_ns, hi_ns)}"""
    unpivot = " UNION ALL ".join(
        f"SELECT device_id, ts_ns, '{c}' AS metric, CAST({c} AS DOUBLE) AS value FROM samples "
        f"WHERE run_id = $1 AND {c} IS NOT NULL{_within('ts_ns', lo_ns, hi_ns)}" for c in COUNTERS)
    counters = f"""
        SELECT json_object('ph', 'C', 'name', d.key || ' ' || c.metric, 'pid', {TELEMETRY_PID}, 'tid', 0,
                           'ts', {_us('c.ts_ns', base)}, 'args', json_object(c.metric, c.value))::VARCHAR
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
    notes = f"""
        SELECT CASE WHEN a.kind = 'mark'
            THEN json_object('ph', 'i', 's', 'p', 'cat', 'gpuscope.mark', 'name', a.name, 'pid', {GPUSCOPE_PID},
                             'tid', 'marks', 'ts', {_us('a.ts_ns', base)}, 'args', TRY_CAST(a.value AS JSON))
            ELSE json_object('ph', 'X', 'cat', 'gpuscope.' || a.kind, 'name', coalesce(a.name, a.kind), 'pid', {GPUSCOPE_PID},
                             'tid', a.kind, 'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                             'args', TRY_CAST(a.value AS JSON)) END::VARCHAR
        FROM annotations a WHERE a.run_id = $1 AND a.kind IN ('profiler_window', 'mark', 'device_lost'){_within("a.ts_ns", lo_ns, hi_ns)}
        UNION ALL
        SELECT json_object('ph', 'X', 'cat', CASE WHEN a.kind = 'gpu_user_annotation' THEN a.kind ELSE 'user_annotation' END,
                           'name', a.name, 'pid', coalesce(a.pid, '{GPUSCOPE_PID}'), 'tid', coalesce(a.tid, a.kind),
                           'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                           'args', json_object('device', a.device_id))::VARCHAR
        FROM annotations a WHERE a.run_id = $1 AND a.kind NOT IN ('profiler_window', 'mark', 'device_lost'){_within("a.ts_ns", lo_ns, hi_ns)}"""
    return [("metadata", meta, [run_id]), ("kernels", kernels, [run_id]), ("launches", launches, [run_id]),
            ("flows", flows, [run_id]), ("ops", ops, [run_id]), ("counters", counters, [run_id]),
            ("link_counters", links, [run_id]),
            ("annotations", notes, [run_id])]
