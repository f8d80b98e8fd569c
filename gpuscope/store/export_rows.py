"""The writer of what a timeline export holds besides trace rows (issue 33): the exported run's
telemetry devices, its samples (read back from the counter tracks), its profiler windows,
marks and lost devices, and its model spec. Ingest stages them (``gpuscope/ingest/exported.py``:
``temp.sample_stage``, ``temp.export_annotation_stage``) and calls :func:`write_extras` inside
its one transaction, after :mod:`.trace_rows` wrote the trace devices.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


def write_extras(con: duckdb.DuckDBPyConnection, run_id: int, exports: list[tuple[int, dict[str, Any]]],
                 devices: list[dict[str, Any]], d0: int, new_run: bool) -> None:
    """Inside ingest's transaction: the exports' telemetry devices (after the trace devices,
    ids from ``d0``), their samples (``sample_stage`` pivoted to the store's ``samples``
    columns, each value cast to its column's type; a column the store lacks is left out), their
    profiler windows, marks and lost devices, and for a ``new_run`` the model spec stored with
    the exported run."""
    from .._db import sql_literal
    from . import runs

    have = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                            "AND schema_name = 'main' AND table_name = 'devices'").fetchall())
    keys = {d["key"]: d["device_id"] + d0 for d in devices}
    next_id = d0 + len(devices)
    key_map: list[tuple[int, str, int]] = []
    for trace_id, block in exports:
        own: dict[str, int] = dict(keys)  # a counter may name a trace device: by its key
        for dev in block["devices"]:
            key = dev.get("key")
            if not isinstance(key, str) or not key:
                continue
            stored = key if key not in keys else f"trace{trace_id}/{key}"
            # the file's header is not trusted to hold what gpuscope wrote: a value that does not
            # fit its column (text for a number, a number past its range) is stored null
            cols = {c: _text(v) for c, v in dev.items() if c in have and c not in ("run_id", "device_id", "trace_id", "key")
                    and (v is None or isinstance(v, (str, int, float))) and not isinstance(v, bool)}
            if not isinstance(cols.get("source"), str):
                cols["source"] = "telemetry"
            values = ", ".join(f"TRY_CAST(? AS {have[c]})" for c in cols)
            con.execute(f"INSERT INTO devices (run_id, device_id, key, {', '.join(cols)}) VALUES (?, ?, ?, {values})",
                        [run_id, next_id, _text(stored), *(None if v is None else str(v) for v in cols.values())])
            keys[stored] = own[key] = next_id
            next_id += 1
        key_map += [(trace_id, k, i) for k, i in own.items()]
        if new_run and block["model"] is not None:
            source = block["model"].get("source")
            runs.set_model(con, run_id, block["model"]["spec"], source if isinstance(source, str) else None)
    con.execute("CREATE TEMP TABLE _xdev (trace_id INTEGER, key VARCHAR, device_id INTEGER)")
    try:
        if key_map:
            con.executemany("INSERT INTO _xdev VALUES (?, ?, ?)", key_map)
        con.execute(f"""INSERT INTO annotations (run_id, trace_id, kind, name, ts_ns, dur_ns, device_id, pid, tid, value)
            SELECT {int(run_id)}, NULL, a.kind, a.name, a.ts_ns, a.dur_ns, m.device_id, a.pid, a.tid, a.value
            FROM temp.export_annotation_stage a LEFT JOIN _xdev m ON m.trace_id = a.trace_id AND m.key = a.device_key
            ORDER BY a.ts_ns""")
        types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                                 "AND schema_name = 'main' AND table_name = 'samples'").fetchall())
        metrics = [c for c in types if c not in ("run_id", "device_id", "ts_ns")]
        pivot = ", ".join(f"max(CASE WHEN s.metric = {sql_literal(c)} THEN TRY_CAST(s.value AS {types[c]}) END)"
                          for c in metrics)
        con.execute(f"""INSERT INTO samples (run_id, device_id, ts_ns, {', '.join(f'"{c}"' for c in metrics)})
            SELECT {int(run_id)}, m.device_id, s.ts_ns, {pivot}
            FROM temp.sample_stage s JOIN _xdev m ON m.trace_id = s.trace_id AND m.key = s.key
            GROUP BY m.device_id, s.ts_ns ORDER BY m.device_id, s.ts_ns""")
    finally:
        con.execute("DROP TABLE _xdev")


def _text(v: Any) -> Any:
    """Text as DuckDB takes it (a lone surrogate, which JSON can escape, replaced); else ``v``."""
    return v.encode("utf-8", "replace").decode("utf-8") if isinstance(v, str) else v
