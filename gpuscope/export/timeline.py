"""``gpuscope export RUN --format perfetto|chrome``: one run as a Chrome trace-event file that
Perfetto UI and ``chrome://tracing`` open, in the shape Kineto writes, with what gpuscope adds.

- GPU activities on their device/stream tracks (``cat`` ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``) with Kineto's args (device, stream, correlation, External id, grid, block,
  ...) and gpuscope's (category, and from the analysis the bound class, intensity, achieved
  FLOP/s and bytes/s, percent of roof of the kernel's name);
- CPU ops on their threads (``cpu_op``, Input Dims / Input type as Kineto has them, plus the
  op's bound class and percent of roof), the launches (``cuda_runtime``) and launch -> kernel
  flows (``ac2g``), so that ``gpuscope ingest`` (and Holistic Trace Analysis) read it back;
- telemetry as counter tracks (``"ph": "C"``) per device, on the same time base;
- profiler windows as slices and ``gpuscope.mark`` marks as instant events on a ``gpuscope``
  process.

Written streaming: DuckDB builds each event's JSON and the rows are written in batches, so
memory does not grow with the run. Times are µs relative to ``baseTimeNanoseconds`` (the run's
first event), as recent Kineto writes them.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

from ..errors import InputError

#: The largest trace the Perfetto web UI opens comfortably in a browser tab.
BROWSER_LIMIT_BYTES = 512 * 1024 * 1024
#: Counter tracks per device: stored metric -> the track's name.
COUNTERS = ("gpu_util", "power_w", "mem_used_bytes", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "sm_active",
            "tensor_active", "dram_bw_util", "host_cpu_util", "host_mem_used_bytes")
#: pids of the tracks gpuscope adds (Kineto's GPU tracks use the device index as pid).
GPUSCOPE_PID = 1_000_000
TELEMETRY_PID = 1_000_001
_BATCH = 20_000


def export_timeline(db: Path, run: str | None, out: Path, fmt: str, force: bool = False) -> dict[str, Any]:
    """Write the run's timeline to ``out`` (``perfetto``: gzip-compressed JSON unless ``out``
    ends in ``.json``; ``chrome``: plain JSON)."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..store import read

    out = Path(out)
    if out.exists() and not force:
        raise InputError(str(out), "already exists (--force replaces it)")
    if out.is_dir():
        raise InputError(str(out), "is a directory; a timeline export writes one file")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise InputError(str(out), f"no such directory: {parent}")
    store.check_store_path(db)
    if not store.store_exists(db):
        raise InputError(str(db), "no store here yet (gpuscope run or gpuscope ingest makes one)")
    gz = fmt == "perfetto" and not out.name.endswith(".json")
    con = store.connect(db, read_only=True)
    tmp = parent / f".{out.name}.tmp-{os.getpid()}"
    counts: dict[str, int] = {}
    try:
        ref = read.resolve_run(con, run, db)
        doc = analyze_run(con, ref.id, top=None)
        cur = con.cursor()
        _register_analysis(cur, doc)
        base = _base_ns(cur, ref.id)
        raw = open(tmp, "wb")  # noqa: SIM115 - closed below, renamed into place
        f: Any = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0) if gz else raw
        size = 0
        try:
            head = ('{"schemaVersion": 1, "displayTimeUnit": "ns", "baseTimeNanoseconds": %d, '
                    '"otherData": {"exported_by": "gpuscope export", "run_id": %d}, '
                    '"deviceProperties": %s, "traceEvents": [\n' % (base, ref.id, _device_properties(cur, ref.id)))
            f.write(head.encode())
            size += len(head)
            first = True
            for kind, sql, params in _event_queries(ref.id, base):
                res = cur.execute(sql, params)
                n = 0
                while True:
                    rows = res.fetchmany(_BATCH)
                    if not rows:
                        break
                    text = ",\n".join(r[0] for r in rows)
                    chunk = (("" if first else ",\n") + text).encode()
                    first = False
                    f.write(chunk)
                    size += len(chunk)
                    n += len(rows)
                counts[kind] = n
            f.write(b"\n]}\n")
            size += 4
        finally:
            if gz:
                f.close()
            raw.close()
        cur.close()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        con.close()
    os.replace(tmp, out)
    note = None
    if size > BROWSER_LIMIT_BYTES:
        note = (f"{size / 2**20:,.0f} MiB of JSON is more than the Perfetto web UI opens comfortably in a browser "
                "tab; open it with Perfetto's trace_processor (trace_processor --httpd FILE, then ui.perfetto.dev) "
                "or export less of the run")
    return {"run": {"id": ref.id, "name": ref.name}, "format": fmt, "out": str(out), "gzip": gz,
            "json_bytes": size, "file_bytes": out.stat().st_size, "events": counts, "note": note}


def _register_analysis(cur: Any, doc: dict[str, Any]) -> None:
    import duckdb  # noqa: F401  (the full package: its Arrow scans need duckdb._sources)
    import pyarrow as pa

    ks = doc.get("kernels") or []
    cur.register("_ka", pa.table({
        "name": pa.array([k.get("name") for k in ks], pa.string()),
        "bound": pa.array([k.get("bound") for k in ks], pa.string()),
        "pct_of_roof": pa.array([_f(k.get("pct_of_roof")) for k in ks], pa.float64()),
    }))
    ops = doc.get("ops") or []
    cur.register("_oa", pa.table({
        "name": pa.array([o.get("name") for o in ops], pa.string()),
        "input_dims": pa.array([_text(o.get("input_dims")) for o in ops], pa.string()),
        "input_types": pa.array([_text(o.get("input_types")) for o in ops], pa.string()),
        "bound": pa.array([o.get("bound") for o in ops], pa.string()),
        "intensity": pa.array([_f(o.get("intensity_flop_per_byte")) for o in ops], pa.float64()),
        "flops_per_s": pa.array([_f(o.get("achieved_flops_per_s")) for o in ops], pa.float64()),
        "bytes_per_s": pa.array([_f(o.get("achieved_bytes_per_s")) for o in ops], pa.float64()),
        "pct_of_roof": pa.array([_f(o.get("pct_of_roof")) for o in ops], pa.float64()),
    }))


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _text(v: Any) -> str | None:
    import json

    return v if v is None or isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _base_ns(cur: Any, run_id: int) -> int:
    row = cur.execute(
        "SELECT least((SELECT min(ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM ops WHERE run_id = $1), "
        "(SELECT min(launch_ts_ns) FROM kernels WHERE run_id = $1), (SELECT min(ts_ns) FROM samples WHERE run_id = $1), "
        "(SELECT min(ts_ns) FROM annotations WHERE run_id = $1))", [run_id]).fetchone()
    return int(row[0] // 1000 * 1000) if row and row[0] is not None else 0


def _device_properties(cur: Any, run_id: int) -> str:
    rows = cur.execute(
        "SELECT json_group_array(json_object('id', device_index, 'name', name, 'totalGlobalMem', memory_total_bytes, "
        "'computeMajor', TRY_CAST(split_part(compute_capability, '.', 1) AS INTEGER), "
        "'computeMinor', TRY_CAST(split_part(compute_capability, '.', 2) AS INTEGER), 'numSms', num_sms, "
        "'warpSize', warp_size)) FROM (SELECT DISTINCT ON (device_index) * FROM devices "
        "WHERE run_id = ? AND source <> 'telemetry' AND device_index IS NOT NULL ORDER BY device_index)",
        [run_id]).fetchone()
    return rows[0] if rows and rows[0] else "[]"


def _us(col: str, base: int) -> str:
    return f"round(({col} - {base}) / 1000.0, 3)"


def _event_queries(run_id: int, base: int) -> list[tuple[str, str, list[Any]]]:
    """(kind, SQL yielding one JSON event text per row, parameters), in writing order."""
    ts, dur = _us("k.ts_ns", base), "round(k.dur_ns / 1000.0, 3)"
    gpu_pid = "coalesce(d.device_index, k.device_id)"
    meta = f"""
        SELECT json_object('ph', 'M', 'name', 'process_name', 'pid', pid, 'tid', 0,
                           'args', json_object('name', label))::VARCHAR
        FROM (SELECT DISTINCT {gpu_pid} AS pid,
                     'GPU ' || {gpu_pid} || coalesce(' (' || d.name || ')', '') AS label
              FROM kernels k LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
              WHERE k.run_id = $1
              UNION ALL SELECT {GPUSCOPE_PID}, 'gpuscope: profiler windows and marks'
              UNION ALL SELECT {TELEMETRY_PID}, 'gpuscope: telemetry')
        UNION ALL
        SELECT json_object('ph', 'M', 'name', 'process_sort_index', 'pid', pid, 'tid', 0,
                           'args', json_object('sort_index', pid))::VARCHAR
        FROM (SELECT DISTINCT {gpu_pid} AS pid FROM kernels k
              LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id WHERE k.run_id = $1)"""
    kernels = f"""
        SELECT json_object(
            'ph', 'X', 'cat', CASE k.kind WHEN 'memcpy' THEN 'gpu_memcpy' WHEN 'memset' THEN 'gpu_memset' ELSE 'kernel' END,
            'name', k.name, 'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts}, 'dur', {dur},
            'args', json_object('device', {gpu_pid}, 'stream', k.stream, 'correlation', k.correlation,
                                'External id', k.external_id, 'grid', k.grid, 'block', k.block,
                                'registers per thread', k.registers_per_thread, 'shared memory', k.shared_memory_bytes,
                                'est. achieved occupancy %', k.occupancy, 'bytes', k.bytes,
                                'gpuscope.category', k.category, 'gpuscope.bound', ka.bound,
                                'gpuscope.pct_of_roof', ka.pct_of_roof))::VARCHAR
        FROM kernels k LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
        LEFT JOIN _ka ka ON ka.name = k.name
        WHERE k.run_id = $1 ORDER BY k.ts_ns"""
    launch_ts, launch_dur = _us("k.launch_ts_ns", base), "round(coalesce(k.launch_dur_ns, 0) / 1000.0, 3)"
    where_launch = "k.run_id = $1 AND k.launch_ts_ns IS NOT NULL AND k.correlation IS NOT NULL"
    launches = f"""
        SELECT json_object('ph', 'X', 'cat', 'cuda_runtime', 'name', coalesce(k.launch_name, 'launch'),
                           'pid', coalesce(o.pid, 'launches'), 'tid', coalesce(o.tid, 'launches'),
                           'ts', {launch_ts}, 'dur', {launch_dur},
                           'args', json_object('correlation', k.correlation, 'External id', k.external_id))::VARCHAR
        FROM kernels k LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id
        WHERE {where_launch} ORDER BY k.launch_ts_ns"""
    flows = f"""
        SELECT json_object('ph', 's', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', coalesce(o.pid, 'launches'), 'tid', coalesce(o.tid, 'launches'), 'ts', {launch_ts})::VARCHAR
        FROM kernels k LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id WHERE {where_launch}
        UNION ALL
        SELECT json_object('ph', 'f', 'cat', 'ac2g', 'name', 'ac2g', 'id', k.correlation, 'bp', 'e',
                           'pid', {gpu_pid}, 'tid', k.stream, 'ts', {ts})::VARCHAR
        FROM kernels k LEFT JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id WHERE {where_launch}"""
    ots = _us("o.ts_ns", base)
    ops = f"""
        SELECT json_object('ph', 'X', 'cat', 'cpu_op', 'name', o.name, 'pid', o.pid, 'tid', o.tid,
                           'ts', {ots}, 'dur', round(o.dur_ns / 1000.0, 3),
                           'args', json_object('External id', o.external_id, 'Sequence number', o.sequence_number,
                                               'Input Dims', TRY_CAST(o.input_dims AS JSON),
                                               'Input type', TRY_CAST(o.input_types AS JSON),
                                               'gpuscope.bound', oa.bound, 'gpuscope.intensity_flop_per_byte', oa.intensity,
                                               'gpuscope.achieved_flops_per_s', oa.flops_per_s,
                                               'gpuscope.achieved_bytes_per_s', oa.bytes_per_s,
                                               'gpuscope.pct_of_roof', oa.pct_of_roof))::VARCHAR
        FROM ops o LEFT JOIN _oa oa ON oa.name = o.name AND oa.input_dims IS NOT DISTINCT FROM o.input_dims
                                    AND oa.input_types IS NOT DISTINCT FROM o.input_types
        WHERE o.run_id = $1 ORDER BY o.ts_ns"""
    unpivot = " UNION ALL ".join(
        f"SELECT device_id, ts_ns, '{c}' AS metric, CAST({c} AS DOUBLE) AS value FROM samples "
        f"WHERE run_id = $1 AND {c} IS NOT NULL" for c in COUNTERS)
    counters = f"""
        SELECT json_object('ph', 'C', 'name', d.key || ' ' || c.metric, 'pid', {TELEMETRY_PID}, 'tid', 0,
                           'ts', {_us('c.ts_ns', base)}, 'args', json_object(c.metric, c.value))::VARCHAR
        FROM ({unpivot}) c JOIN devices d ON d.run_id = $1 AND d.device_id = c.device_id
        ORDER BY c.ts_ns, d.key, c.metric"""
    notes = f"""
        SELECT CASE WHEN a.kind = 'mark'
            THEN json_object('ph', 'i', 's', 'p', 'cat', 'gpuscope.mark', 'name', a.name, 'pid', {GPUSCOPE_PID},
                             'tid', 'marks', 'ts', {_us('a.ts_ns', base)}, 'args', TRY_CAST(a.value AS JSON))
            ELSE json_object('ph', 'X', 'cat', 'gpuscope.' || a.kind, 'name', coalesce(a.name, a.kind), 'pid', {GPUSCOPE_PID},
                             'tid', a.kind, 'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                             'args', TRY_CAST(a.value AS JSON)) END::VARCHAR
        FROM annotations a WHERE a.run_id = $1 AND a.kind IN ('profiler_window', 'mark', 'device_lost')
        UNION ALL
        SELECT json_object('ph', 'X', 'cat', CASE WHEN a.kind = 'gpu_user_annotation' THEN a.kind ELSE 'user_annotation' END,
                           'name', a.name, 'pid', coalesce(a.pid, '{GPUSCOPE_PID}'), 'tid', coalesce(a.tid, a.kind),
                           'ts', {_us('a.ts_ns', base)}, 'dur', round(coalesce(a.dur_ns, 0) / 1000.0, 3),
                           'args', json_object('device', a.device_id))::VARCHAR
        FROM annotations a WHERE a.run_id = $1 AND a.kind NOT IN ('profiler_window', 'mark', 'device_lost')"""
    return [("metadata", meta, [run_id]), ("kernels", kernels, [run_id]), ("launches", launches, [run_id]),
            ("flows", flows, [run_id]), ("ops", ops, [run_id]), ("counters", counters, [run_id]),
            ("annotations", notes, [run_id])]
