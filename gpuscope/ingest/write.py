"""Write a staged run into the store in one transaction: the run itself only through the run
lifecycle (:func:`gpuscope.store.runs.add_ingested` for a new run,
:func:`~gpuscope.store.runs.merge_info` when the traces join a recorded one), then its
``traces``, ``devices``, ``kernels``, ``ops``, ``graph_launches`` and ``annotations`` rows
straight from the staging tables. A failure leaves the store exactly as it was.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .progress import Progress
from .stage import STAGING_TABLES, TraceInfo

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: The key of ``traces.metadata`` under which ingest records the trace's graph capture and
#: launch events (analyzers/scope.py reads it).
GRAPH_EVENTS_KEY = "gpuscope_graph_events"


def write_run(
    con: duckdb.DuckDBPyConnection, db_path: Path | str, *, name: str, files: Sequence[Path],
    span: tuple[int | None, int | None], info_doc: dict[str, Any], notes: list[str], infos: list[TraceInfo],
    devices: list[dict[str, Any]], all_ops: bool, into_run: int | None, keep_open: bool, progress: Progress,
) -> tuple[int, str, duckdb.DuckDBPyConnection | None]:
    """Attach the store at ``db_path`` to the staging connection ``con`` and write the run.

    Returns (run id, run name, the connection handed over): with ``keep_open`` that is ``con``,
    its current database the store and its staging tables dropped; otherwise None, and the store
    is detached again (the caller closes ``con`` either way unless it is handed over). With
    ``into_run`` the traces join that run, their trace, device and op ids after its own.
    """
    from .. import store
    from ..store import read, runs

    handed_over: duckdb.DuckDBPyConnection | None = None
    run_name = name
    progress(f"writing run to {db_path}")
    store.open_attached(con, db_path)
    # Checkpoint at commit: the run is written once, compressed, into the file's blocks,
    # instead of into the WAL first and the blocks again at DETACH (bench/README.md).
    con.execute("SET checkpoint_threshold = '0KB'")
    try:
        con.execute("USE store")
        store.migrate(con)
        with store.transaction(con):
            offsets = (0, 0, 0)
            if into_run is None:
                run_id = runs.add_ingested(con, name=run_name, started_ns=span[0], ended_ns=span[1],
                                           command=["gpuscope", "ingest", *(str(f) for f in files)], info=info_doc)
            else:
                run_name = read.run_name(con, into_run)
                if run_name is None:
                    raise InputError(f"run {into_run}", "no such run")
                run_id = into_run
                runs.merge_info(con, run_id, {"ingest": info_doc["ingest"]}, append_notes=notes)
                offsets = con.execute(
                    "SELECT (SELECT coalesce(max(trace_id) + 1, 0) FROM traces WHERE run_id = $1), "
                    "(SELECT coalesce(max(device_id) + 1, 0) FROM devices WHERE run_id = $1), "
                    "(SELECT coalesce(max(op_id) + 1, 0) FROM ops WHERE run_id = $1)",
                    [run_id],
                ).fetchone()
                taken = {r[0] for r in con.execute("SELECT key FROM devices WHERE run_id = ?", [run_id]).fetchall()}
                for d in devices:  # e.g. telemetry's gpu0 and the trace's gpu0: keep keys unique
                    if d["key"] in taken:
                        d["key"] = f"trace{d['trace_id'] + offsets[0]}/{d['key']}"
            _write_rows(con, run_id, infos, devices, all_ops, *offsets)
        if keep_open:
            # By name: listing the catalog costs more than the drops (bench/README.md); a test
            # checks that none is left.
            con.execute("".join(f"DROP TABLE IF EXISTS temp.{t};" for t in STAGING_TABLES))
            handed_over = con
    finally:
        if handed_over is None:
            con.execute("USE memory")
            con.execute("DETACH store")
    return run_id, run_name, handed_over


def _write_rows(
    con: duckdb.DuckDBPyConnection, run_id: int, infos: list[TraceInfo], devices: list[dict[str, Any]], all_ops: bool,
    t0: int = 0, d0: int = 0, o0: int = 0,
) -> None:
    """Write the staged run; trace, device and op ids are shifted by ``t0``, ``d0``, ``o0``
    when the traces join an existing run."""
    t0, d0, o0 = int(t0), int(d0), int(o0)
    for i in infos:
        meta = {k: v for k, v in i.header.items() if k != "traceEvents"}
        if i.graph_events:
            meta[GRAPH_EVENTS_KEY] = i.graph_events
        con.execute(
            "INSERT INTO traces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, i.trace_id + t0, i.path, i.rank, i.base_time_ns, i.ts_relative, i.events, i.size_bytes,
             json.dumps(meta, default=str)],
        )
    if devices:
        con.executemany(
            "INSERT INTO devices (run_id, device_id, key, source, trace_id, device_index, vendor, kind, name, "
            "memory_total_bytes, compute_capability, num_sms, warp_size, properties, spec_key) "
            "VALUES (?, ?, ?, 'trace', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_id, d["device_id"] + d0, d["key"], d["trace_id"] + t0, d["device_index"], d["vendor"], d["kind"], d["name"],
              d["memory_total_bytes"], d["compute_capability"], d["num_sms"], d["warp_size"], d["properties"],
              d["spec_key"])
             for d in devices],
        )
    con.execute(
        f"""INSERT INTO kernels
        SELECT {run_id}, k.trace_id + {t0}, m.device_id + {d0}, k.stream, k.kind, k.category, k.name, k.ts_ns, k.dur_ns,
               k.correlation, k.external_id, k.op_id + {o0}, k.launch_name, k.launch_ts_ns, k.launch_dur_ns,
               k.grid, k.block, k.registers_per_thread, k.shared_memory_bytes, k.occupancy, k.bytes,
               k.attribution
        FROM temp.kernel_stage k JOIN temp.dev_map m ON m.trace_id = k.trace_id AND m.dev_label = k.dev_label
        ORDER BY m.device_id, k.ts_ns"""
    )
    con.execute(
        f"""INSERT INTO ops
        SELECT {run_id}, op_id + {o0}, p.parent_op_id + {o0}, trace_id + {t0}, pid, tid, name, ts_ns, dur_ns, external_id, sequence_number,
               input_dims, input_types, input_strides, concrete_inputs
        FROM temp.op_stage o LEFT JOIN temp.op_parent p USING (op_id)
        {'' if all_ops else 'WHERE NOT EXISTS (SELECT 1 FROM temp.kernel_stage) OR op_id IN (SELECT op_id FROM temp.op_launching)'}
        ORDER BY op_id"""
    )
    con.execute(
        f"""INSERT INTO graph_launches
        SELECT {run_id}, trace_id + {t0}, graph_begin_ns, seq, kernel_name, launch_name, ts_ns, correlation, op_id + {o0}, grid, block
        FROM temp.graph_stage ORDER BY trace_id, graph_begin_ns, seq"""
    )
    con.execute(
        f"""INSERT INTO annotations
        SELECT {run_id}, a.trace_id + {t0}, a.kind, a.name, a.ts_ns, a.dur_ns, m.device_id + {d0}, a.pid, a.tid, NULL
        FROM temp.annotation_stage a LEFT JOIN temp.dev_map m ON m.trace_id = a.trace_id AND m.dev_label = a.dev_label
        ORDER BY a.ts_ns"""
    )

