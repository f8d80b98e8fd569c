"""The writer of a trace's rows: ``traces``, trace ``devices``, ``kernels``, ``ops``,
``graph_launches`` and trace ``annotations``. Ingest (``gpuscope/ingest/``) stages a run in
temporary tables on the connection that has the store attached, and calls
:func:`write_staged_rows` inside its one transaction; the run row itself goes through
:mod:`gpuscope.store.runs`.

The staging tables are the contract between ingest and this writer (their columns are the
store's, minus the run id and the id offsets): ``temp.kernel_stage``, ``temp.op_stage``,
``temp.op_parent``, ``temp.op_launching``, ``temp.graph_stage``, ``temp.annotation_stage`` and
``temp.dev_map`` (trace and device label to device id).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


def next_ids(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[int, int, int]:
    """The first free trace, device and op ids of a run (0, 0, 0 for a new one): traces that
    join a recorded run get ids after its own."""
    row = con.execute(
        "SELECT (SELECT coalesce(max(trace_id) + 1, 0) FROM traces WHERE run_id = $1), "
        "(SELECT coalesce(max(device_id) + 1, 0) FROM devices WHERE run_id = $1), "
        "(SELECT coalesce(max(op_id) + 1, 0) FROM ops WHERE run_id = $1)",
        [run_id],
    ).fetchone()
    assert row is not None  # an aggregate without GROUP BY gives one row
    return int(row[0]), int(row[1]), int(row[2])


def device_keys(con: duckdb.DuckDBPyConnection, run_id: int) -> set[str]:
    """The device keys a run already has (telemetry's ``gpu0``, ...)."""
    return {r[0] for r in con.execute("SELECT key FROM devices WHERE run_id = ?", [run_id]).fetchall()}


def write_staged_rows(
    con: duckdb.DuckDBPyConnection, run_id: int, traces: Sequence[Sequence[Any]], devices: list[dict[str, Any]],
    all_ops: bool, t0: int = 0, d0: int = 0, o0: int = 0,
) -> None:
    """Write the staged run. ``traces`` are the ``traces`` rows without the run id (trace id,
    path, rank, base time, relative timestamps, events, size, metadata JSON); trace, device and
    op ids are shifted by ``t0``, ``d0``, ``o0`` when the traces join an existing run. Ops that
    launched no GPU work (nor contain one that did) are left out unless ``all_ops``.
    """
    t0, d0, o0 = int(t0), int(d0), int(o0)
    for t in traces:
        con.execute("INSERT INTO traces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [run_id, t[0] + t0, *t[1:]])
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
               k.attribution, k.comm_args
        FROM temp.kernel_stage k JOIN temp.dev_map m ON m.trace_id = k.trace_id AND m.dev_label = k.dev_label
        ORDER BY m.device_id, k.ts_ns"""
    )
    con.execute(
        f"""INSERT INTO ops
        SELECT {run_id}, op_id + {o0}, p.parent_op_id + {o0}, trace_id + {t0}, pid, tid, name, ts_ns, dur_ns, external_id, sequence_number,
               input_dims, input_types, input_strides, concrete_inputs, comm_args
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

