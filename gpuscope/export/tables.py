"""``gpuscope export RUN --format parquet|csv``: one file per table of one run, for notebooks
(pandas, Polars, DuckDB) and other tools.

Every table that holds the run's rows is copied by DuckDB's ``COPY`` (the store's read layer
names the rows: :func:`gpuscope.store.read.run_rows_sql`), plus the analysis per op and per
kernel (``gpuscope analyze``'s rows, with bound class and percent of roof). A ``README.md``
in the directory names every file's columns with their types and units. The directory is
built in a fresh private directory beside it and renamed into place
(:func:`gpuscope.fileio.atomic_directory`), so a reader never sees half of it; an existing one
is replaced only when asked (``force``) and only when it is an untouched earlier export
(:func:`gpuscope.export.is_export_dir`): --force never deletes a directory of the user's.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..fileio import atomic_directory
from . import README_TITLE, is_export_dir, prepare_output

FORMATS = ("parquet", "csv")

#: Columns of the analysis tables, in order: (name, DuckDB type, unit or meaning).
OP_COLUMNS = [
    ("name", "VARCHAR", "op name"), ("input_dims", "VARCHAR", "input shapes as stored (JSON)"),
    ("input_types", "VARCHAR", "input dtypes (JSON)"), ("count", "BIGINT", "calls"),
    ("kernel_us", "DOUBLE", "µs of GPU activity the calls launched (CPU time on a CPU-only run)"),
    ("cpu_us", "DOUBLE", "µs on the CPU"), ("kernels", "BIGINT", "GPU activities launched"),
    ("bound", "VARCHAR", "compute_bound, memory_bound, latency_bound or unknown"),
    ("dtype", "VARCHAR", "the dtype the roof is taken for"), ("flops", "DOUBLE", "FLOP per call (cost model)"),
    ("bytes", "DOUBLE", "bytes moved per call (cost model)"),
    ("intensity_flop_per_byte", "DOUBLE", "arithmetic intensity"),
    ("ridge_flop_per_byte", "DOUBLE", "the roofline's ridge point for this dtype"),
    ("achieved_flops_per_s", "DOUBLE", "FLOP/s achieved"), ("achieved_bytes_per_s", "DOUBLE", "bytes/s achieved"),
    ("pct_of_roof", "DOUBLE", "fraction of the roof reached at this intensity, 0-1 (analyze prints it x 100 as %)"),
    ("roof_us", "DOUBLE", "µs the calls would take at the roof"), ("saved_us", "DOUBLE", "µs saved at the roof"),
    ("confidence", "VARCHAR", "how the bound was decided"), ("reason", "VARCHAR", "why"),
]
KERNEL_COLUMNS = [
    ("name", "VARCHAR", "kernel (or memcpy / memset) name"), ("kind", "VARCHAR", "kernel, memcpy or memset"),
    ("category", "VARCHAR", "compute, communication or memory"), ("count", "BIGINT", "activities"),
    ("total_us", "DOUBLE", "µs"), ("mean_us", "DOUBLE", "µs"), ("min_us", "DOUBLE", "µs"), ("max_us", "DOUBLE", "µs"),
    ("devices", "BIGINT", "devices it ran on"), ("with_op", "BIGINT", "activities linked to an op"),
    ("bound", "VARCHAR", "compute_bound, memory_bound, latency_bound or unknown"),
    ("flops", "DOUBLE", "FLOP, from the ops it belongs to"), ("bytes", "DOUBLE", "bytes, from the ops it belongs to"),
    ("achieved_flops_per_s", "DOUBLE", "FLOP/s achieved (over its calls with a cost estimate)"),
    ("achieved_bytes_per_s", "DOUBLE", "bytes/s achieved (over its calls with a cost estimate; a copy's own bytes)"),
    ("pct_of_roof", "DOUBLE", "fraction of the roof reached, 0-1 (analyze prints it x 100 as %)"),
    ("roof_us", "DOUBLE", "µs at the roof"),
    ("saved_us", "DOUBLE", "µs saved at the roof"),
]

_UNIT_SUFFIXES = (("_ns", "ns since the Unix epoch (a time) or a duration in ns"), ("_us", "µs"),
                  ("_bytes", "bytes"), ("_w", "W"), ("_j", "J"), ("_c", "°C"), ("_mhz", "MHz"),
                  ("_per_s", "per second"), ("_util", "ratio 0-1"), ("_pct", "percent"))


def export_tables(db: Path, run: str | None, out: Path, fmt: str, force: bool = False) -> dict[str, Any]:
    """Write the run's tables under ``out`` (a directory); returns what was written."""
    from .._db import one_row
    from .. import store
    from .._db import sql_literal
    from ..analyzers.breakdown import analyze_run
    from ..store import read

    if fmt not in FORMATS:
        raise ParameterError("format", "unknown format {value} (parquet or csv)", {"value": repr(fmt)})
    out = Path(out)
    prepare_output(db, out, force, directory=True, what="a table export")
    con = store.connect(db, read_only=True)
    try:
        ref = read.resolve_run(con, run, db)
        with atomic_directory(out, replace=force, recognise=is_export_dir) as tmp, _refused_writes(out):
            written: dict[str, int] = {}
            described: dict[str, list[tuple[str, str]]] = {}
            opts = "(FORMAT parquet, COMPRESSION zstd)" if fmt == "parquet" else "(FORMAT csv, HEADER)"
            for table in read.RUN_TABLES:
                sql = read.run_rows_sql(table)
                path = tmp / f"{table}.{fmt}"
                con.execute(f"COPY ({sql}) TO {sql_literal(str(path))} {opts}", [ref.id]).fetchall()
                written[table] = int(one_row(con.execute(f"SELECT count(*) FROM ({sql})", [ref.id]).fetchone())[0])
                described[table] = [(r[0], r[1]) for r in con.execute(f"DESCRIBE {sql}", [ref.id]).fetchall()]
            doc = analyze_run(con, ref.id, top=None)
            for table, rows, columns in (("op_analysis", doc["ops"], OP_COLUMNS), ("kernel_analysis", doc["kernels"], KERNEL_COLUMNS)):
                written[table] = _write_rows(con, tmp / f"{table}.{fmt}", rows, columns, opts)
                described[table] = [(c, t) for c, t, _ in columns]
            (tmp / "README.md").write_text(_readme(ref, fmt, written, described))  # in our fresh 0700 directory
    finally:
        con.close()
    return {"run": {"id": ref.id, "name": ref.name}, "format": fmt, "out": str(out), "tables": written}


@contextmanager
def _refused_writes(out: Path) -> Iterator[None]:
    """DuckDB's ``COPY`` failing because the file system refused it (a full disk, a quota): one
    line naming ``out`` (exit 1), not DuckDB's error; the temporary directory is removed."""
    from .._db import duckdb
    from ..errors import GpuscopeError
    from ..store import write_failure_reason

    try:
        yield
    except duckdb.Error as exc:
        reason = write_failure_reason(exc)
        if reason is None:
            raise
        raise GpuscopeError(f"{out}: cannot write it ({reason}); nothing was changed") from None


def _write_rows(con: Any, path: Path, rows: list[dict[str, Any]], columns: list[tuple[str, str, str]], opts: str) -> int:
    import duckdb  # noqa: F401  (the full package: its Arrow scans need duckdb._sources)
    import pyarrow as pa

    from .._db import sql_literal

    types = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64()}
    data = {}
    for name, typ, _ in columns:
        vals = [r.get(name) for r in rows]
        if name in ("input_dims", "input_types"):
            vals = [v if v is None or isinstance(v, str) else _json(v) for v in vals]
        if typ == "DOUBLE":
            vals = [None if v is None else float(v) for v in vals]
        elif typ == "BIGINT":
            vals = [None if v is None else int(v) for v in vals]
        elif typ == "VARCHAR":
            vals = [None if v is None else str(v) for v in vals]
        data[name] = pa.array(vals, type=types[typ])
    cur = con.cursor()  # its own: the analysis may leave a result open on the connection
    try:
        cur.register("_gpuscope_export", pa.table(data))
        cur.execute(f"COPY (SELECT * FROM _gpuscope_export) TO {sql_literal(str(path))} {opts}").fetchall()
        cur.unregister("_gpuscope_export")
    finally:
        cur.close()
    return len(rows)


def _json(v: Any) -> str:
    import json

    return json.dumps(v, separators=(",", ":"))


def _unit(table: str, column: str) -> str:
    from ..metrics import METRICS_BY_NAME

    if table == "samples" and column in METRICS_BY_NAME:
        m = METRICS_BY_NAME[column]
        return f"{m.otel_unit}: {m.description}"
    for name, _, meaning in (OP_COLUMNS if table == "op_analysis" else KERNEL_COLUMNS if table == "kernel_analysis" else []):
        if name == column:
            return meaning
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix):
            return unit
    return ""


def _readme(ref: Any, fmt: str, written: dict[str, int], described: dict[str, list[tuple[str, str]]]) -> str:
    lines = [f"{README_TITLE}{ref.id} ({ref.name!r})", "",
             f"One {fmt} file per table, written by `gpuscope export {ref.id} --format {fmt}` (DuckDB `COPY`).",
             "Times are integer ns since the Unix epoch (`*_ns`), durations ns or µs as the name says;",
             "ratios are 0-1; `run_id` joins the tables; `device_id` joins devices to samples and kernels;",
             "`op_id` joins kernels to ops. The analysis tables are `gpuscope analyze --json`'s ops and kernels.",
             "", "| file | rows |", "|---|---|"]
    lines += [f"| `{t}.{fmt}` | {n:,} |" for t, n in written.items()]
    for table, cols in described.items():
        lines += ["", f"## {table}.{fmt}", "", "| column | type | unit / meaning |", "|---|---|---|"]
        lines += [f"| `{c}` | {t} | {_unit(table, c)} |" for c, t in cols]
    return "\n".join(lines) + "\n"
