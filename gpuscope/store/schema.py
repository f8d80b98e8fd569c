"""The store's schema: its tables, one migration per schema version, and ``migrate``.

The tables that ``gpuscope sql`` users can rely on are ``runs``, ``devices``, ``samples``,
``kernels``, ``ops`` and ``annotations`` (see ``docs/store.md``); ``traces``, ``calibrations``,
``sampler_stats``, ``run_models`` and ``meta`` are there too. All timestamps are integer nanoseconds since the
Unix epoch, durations integer nanoseconds. Who writes each table: ``docs/architecture.md``.
"""
from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

from ..errors import StoreError
from ..metrics import METRICS
from ..redact import redact_command

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

SCHEMA_VERSION = 10
#: Block size of new store files: DuckDB's default (256 KiB) makes even an empty store large;
#: 64 KiB blocks keep small runs small at no measurable cost in speed (bench/README.md).
STORE_BLOCK_SIZE = 65536



def _samples_ddl() -> str:
    cols = ",\n  ".join(f"{m.name} {m.sql_type}" for m in METRICS)
    return f"""CREATE TABLE samples (
  run_id BIGINT NOT NULL,
  device_id INTEGER NOT NULL,
  ts_ns BIGINT NOT NULL,
  {cols}
)"""


# Migration i takes a store from version i to i+1. Never edit a released step: add one.
def _migration_0_to_1(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE SEQUENCE run_id_seq START 1")
    con.execute(
        """CREATE TABLE runs (
  id BIGINT PRIMARY KEY,
  name VARCHAR NOT NULL,
  status VARCHAR NOT NULL,
  source VARCHAR NOT NULL,
  started_ns BIGINT,
  ended_ns BIGINT,
  created_ns BIGINT NOT NULL,
  command VARCHAR,
  exit_code INTEGER,
  host VARCHAR,
  info VARCHAR
)"""
    )
    con.execute(
        """CREATE TABLE traces (
  run_id BIGINT NOT NULL,
  trace_id INTEGER NOT NULL,
  path VARCHAR,
  rank INTEGER,
  base_time_ns BIGINT,
  ts_relative BOOLEAN,
  events BIGINT,
  size_bytes BIGINT,
  metadata VARCHAR
)"""
    )
    con.execute(
        """CREATE TABLE devices (
  run_id BIGINT NOT NULL,
  device_id INTEGER NOT NULL,
  key VARCHAR NOT NULL,
  source VARCHAR NOT NULL,
  trace_id INTEGER,
  device_index INTEGER,
  vendor VARCHAR,
  kind VARCHAR,
  name VARCHAR,
  spec_key VARCHAR,
  memory_total_bytes BIGINT,
  compute_capability VARCHAR,
  num_sms INTEGER,
  warp_size INTEGER,
  uuid VARCHAR,
  pci_bus_id VARCHAR,
  properties VARCHAR
)"""
    )
    con.execute(
        """CREATE TABLE kernels (
  run_id BIGINT NOT NULL,
  trace_id INTEGER NOT NULL,
  device_id INTEGER NOT NULL,
  stream BIGINT,
  kind VARCHAR NOT NULL,
  category VARCHAR NOT NULL,
  name VARCHAR,
  ts_ns BIGINT NOT NULL,
  dur_ns BIGINT NOT NULL,
  correlation BIGINT,
  external_id BIGINT,
  op_id BIGINT,
  launch_name VARCHAR,
  launch_ts_ns BIGINT,
  launch_dur_ns BIGINT,
  grid INTEGER[],
  block INTEGER[],
  registers_per_thread INTEGER,
  shared_memory_bytes BIGINT,
  occupancy DOUBLE,
  bytes BIGINT
)"""
    )
    con.execute(
        """CREATE TABLE ops (
  run_id BIGINT NOT NULL,
  op_id BIGINT NOT NULL,
  parent_op_id BIGINT,
  trace_id INTEGER NOT NULL,
  pid VARCHAR,
  tid VARCHAR,
  name VARCHAR,
  ts_ns BIGINT NOT NULL,
  dur_ns BIGINT NOT NULL,
  external_id BIGINT,
  sequence_number BIGINT,
  input_dims VARCHAR,
  input_types VARCHAR,
  input_strides VARCHAR,
  concrete_inputs VARCHAR
)"""
    )
    con.execute(
        """CREATE TABLE annotations (
  run_id BIGINT NOT NULL,
  trace_id INTEGER,
  kind VARCHAR NOT NULL,
  name VARCHAR,
  ts_ns BIGINT NOT NULL,
  dur_ns BIGINT,
  device_id INTEGER,
  pid VARCHAR,
  tid VARCHAR,
  value VARCHAR
)"""
    )
    con.execute(_samples_ddl())


def _migration_1_to_2(con: duckdb.DuckDBPyConnection) -> None:
    # Kernels replayed from a CUDA/HIP graph are attributed to the op that captured them; the
    # column says how each kernel got its op ('launch': its own launch's op; 'graph_capture':
    # matched to a captured launch; NULL: no op).
    con.execute("ALTER TABLE kernels ADD COLUMN attribution VARCHAR")
    # Launches recorded while a CUDA/HIP graph was being captured: they ran no kernel then, so
    # they are kept here to map the graph's replayed kernels back to the ops that captured them.
    con.execute(
        """CREATE TABLE graph_launches (
  run_id BIGINT NOT NULL,
  trace_id INTEGER NOT NULL,
  graph_ns BIGINT NOT NULL,
  seq INTEGER NOT NULL,
  kernel_name VARCHAR,
  launch_name VARCHAR,
  ts_ns BIGINT NOT NULL,
  correlation BIGINT,
  op_id BIGINT,
  grid INTEGER[],
  block INTEGER[]
)"""
    )
    # Measured ("achievable") ceilings from `gpuscope calibrate`, per device and dtype.
    con.execute(
        """CREATE TABLE ceilings (
  id BIGINT NOT NULL,
  measured_ns BIGINT NOT NULL,
  host VARCHAR,
  device_name VARCHAR,
  device_uuid VARCHAR,
  spec_key VARCHAR,
  backend VARCHAR NOT NULL,
  metric VARCHAR NOT NULL,
  dtype VARCHAR,
  value DOUBLE NOT NULL,
  unit VARCHAR NOT NULL,
  method VARCHAR,
  info VARCHAR
)"""
    )


# Sample columns added by schema version 3 (telemetry collectors): name and type, fixed here
# so that this step never changes when later steps add metrics.
_SAMPLE_COLUMNS_V3 = (
    ("xgmi_nvlink_rx_bytes_per_s", "DOUBLE"),
    ("pcie_bytes_per_s", "DOUBLE"),
    ("power_limit_w", "DOUBLE"),
    ("proc_gpu_mem_bytes", "BIGINT"),
    ("proc_gpu_util", "DOUBLE"),
    ("host_cpu_util", "DOUBLE"),
    ("host_mem_used_bytes", "BIGINT"),
    ("host_mem_total_bytes", "BIGINT"),
    ("proc_cpu_cores", "DOUBLE"),
    ("proc_rss_bytes", "BIGINT"),
    ("proc_count", "INTEGER"),
)


def _migration_2_to_3(con: duckdb.DuckDBPyConnection) -> None:
    # Step 0->1 creates `samples` from the current metric table, so a new store already has
    # these columns: IF NOT EXISTS makes this step a no-op there.
    for name, sql_type in _SAMPLE_COLUMNS_V3:
        con.execute(f"ALTER TABLE samples ADD COLUMN IF NOT EXISTS {name} {sql_type}")
    # One row per sampled run: the sampler's cadence and its own cost (gpuscope.sampling).
    con.execute(
        """CREATE TABLE sampler_stats (
  run_id BIGINT NOT NULL,
  started_ns BIGINT,
  ended_ns BIGINT,
  interval_ns BIGINT,
  ticks BIGINT,
  missed_ticks BIGINT,
  rows BIGINT,
  devices INTEGER,
  tick_cpu_ns_mean DOUBLE,
  tick_cpu_ns_p99 DOUBLE,
  tick_cpu_ns_max DOUBLE,
  tick_wall_ns_mean DOUBLE,
  tick_wall_ns_p99 DOUBLE,
  tick_wall_ns_max DOUBLE,
  cpu_ns_per_tick_per_device DOUBLE,
  lateness_ns_p50 DOUBLE,
  lateness_ns_p99 DOUBLE,
  lateness_ns_max DOUBLE,
  drift_ns BIGINT,
  sink_cpu_ns BIGINT,
  degradations VARCHAR,
  info VARCHAR
)"""
    )


def _migration_3_to_4(con: duckdb.DuckDBPyConnection) -> None:
    # NVML's v2 memory query separates what the driver reserves from what is used.
    con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS mem_reserved_bytes BIGINT")
    # Collectives that inference stacks write themselves (vLLM's custom all-reduce, symmetric
    # memory's multimem_*) were stored as compute: one definition now (kernel_names).
    from ..kernel_names import COMMUNICATION_KERNEL_RE

    con.execute("UPDATE kernels SET category = 'communication' WHERE kind = 'kernel' AND category = 'compute' "
                "AND regexp_matches(name, ?, 'i')", [COMMUNICATION_KERNEL_RE])
    # Commands stored before secrets were redacted (`--api-key K`) are redacted in place.
    _redact_stored_commands(con, "runs")


def _redact_stored_commands(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Redact ``table``'s stored commands again with today's rule (a rule that learns a new form
    of secret must not leave the old runs showing it through ``sql`` and the exports)."""
    for run_id, command in con.execute(f"SELECT id, command FROM {table} WHERE command IS NOT NULL").fetchall():
        redacted = redact_command(command)
        if redacted != command:
            con.execute(f"UPDATE {table} SET command = ? WHERE id = ?", [redacted, run_id])


def _migration_4_to_5(con: duckdb.DuckDBPyConnection) -> None:
    # memory ECC error counters (hw.errors for monitor)
    con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS ecc_corrected_errors BIGINT")
    con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS ecc_uncorrected_errors BIGINT")
    # XID errors (NVML events)
    con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS xid_errors BIGINT")
    con.execute("ALTER TABLE samples ADD COLUMN IF NOT EXISTS last_xid INTEGER")


def _migration_5_to_6(con: duckdb.DuckDBPyConnection) -> None:
    # The redaction learned the forms an adversarial review found stored as typed (URL fragments,
    # `;`-separated parameters, JSON values, curl -u, --pass/--pw/--creds, ...): commands stored
    # by an earlier rule are redacted again.
    _redact_stored_commands(con, "runs")


def _migration_6_to_7(con: duckdb.DuckDBPyConnection) -> None:
    # The model a run served (`--model CONFIG.json` on ingest / run, issue 28 point 3): the
    # parsed spec only (gpuscope.analyzers.modelspec.ModelSpec.to_json), never the user's file;
    # `source` says where it came from. One row per run at most. IF NOT EXISTS: a store marked
    # older than it is (by hand, or a test) may hold the table already.
    con.execute(
        """CREATE TABLE IF NOT EXISTS run_models (
  run_id BIGINT PRIMARY KEY,
  spec_json VARCHAR NOT NULL,
  source VARCHAR
)"""
    )


def _migration_7_to_8(con: duckdb.DuckDBPyConnection) -> None:
    # dcgm-exporter's default counters that NVML gives (issue 32): video engines, PCIe
    # replays, remapped rows. Names and types fixed here, not read from gpuscope.metrics.
    for name, sql_type in (("enc_util", "DOUBLE"), ("dec_util", "DOUBLE"), ("pcie_replays", "BIGINT"),
                           ("remapped_rows_corrected", "BIGINT"), ("remapped_rows_uncorrected", "BIGINT"),
                           ("row_remap_pending", "INTEGER"), ("row_remap_failed", "INTEGER")):
        con.execute(f"ALTER TABLE samples ADD COLUMN IF NOT EXISTS {name} {sql_type}")


def _migration_8_to_9(con: duckdb.DuckDBPyConnection) -> None:
    # What Kineto writes about a collective on its NCCL/RCCL kernel and record_param_comms op
    # (Collective name, In/Out msg nelems, dtype, Group size, Process Group Name/Ranks, Seq),
    # as one JSON object (keys: gpuscope.ingest.parse.COMM_ARG_KEYS); NULL for other rows and for
    # runs ingested before (issue 31). IF NOT EXISTS: idempotent.
    con.execute("ALTER TABLE kernels ADD COLUMN IF NOT EXISTS comm_args VARCHAR")
    con.execute("ALTER TABLE ops ADD COLUMN IF NOT EXISTS comm_args VARCHAR")


#: Sample columns added by schema version 10: the host's CPU time by OpenTelemetry cpu.mode
#: (issue 32), names and types fixed here, not read from gpuscope.metrics.
_SAMPLE_COLUMNS_V10 = (
    ("host_cpu_user_util", "DOUBLE"),
    ("host_cpu_system_util", "DOUBLE"),
    ("host_cpu_nice_util", "DOUBLE"),
    ("host_cpu_idle_util", "DOUBLE"),
    ("host_cpu_iowait_util", "DOUBLE"),
    ("host_cpu_interrupt_util", "DOUBLE"),
    ("host_cpu_steal_util", "DOUBLE"),
)


def _migration_9_to_10(con: duckdb.DuckDBPyConnection) -> None:
    # Each cpu.mode's fraction of the host's CPU time (collectors/host.py); NULL in rows stored
    # before, which held only the busy total (host_cpu_util, unchanged). IF NOT EXISTS: a new
    # store's samples table already has them (step 0->1 reads the current metric table), and a
    # second run changes nothing.
    for name, sql_type in _SAMPLE_COLUMNS_V10:
        con.execute(f"ALTER TABLE samples ADD COLUMN IF NOT EXISTS {name} {sql_type}")


MIGRATIONS = (_migration_0_to_1, _migration_1_to_2, _migration_2_to_3, _migration_3_to_4, _migration_4_to_5,
              _migration_5_to_6, _migration_6_to_7, _migration_7_to_8, _migration_8_to_9, _migration_9_to_10)
assert len(MIGRATIONS) == SCHEMA_VERSION


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version of the store ``con`` currently uses (0 for an empty database).

    Call it outside a transaction: on an empty database its query fails, which would abort one.
    """
    from .._db import duckdb

    try:
        # The table itself, not the catalog: listing the catalog (duckdb_tables(),
        # information_schema) is an order of magnitude slower on a freshly opened store
        # (bench/README.md, "Numbers behind the code").
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        return 0
    return int(row[0]) if row else 0


def _refuse_foreign_database(con: duckdb.DuckDBPyConnection, prefix: str = "") -> None:
    """A DuckDB database without gpuscope's ``meta`` table that holds tables or views is
    another program's: refuse it rather than add gpuscope's tables to it. (An empty one becomes
    a store.) Listing the catalog costs ~10 ms, paid only when no ``meta`` table was found."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = current_database() "
        "AND NOT temporary AND NOT internal ORDER BY 1"
    ).fetchall()
    if rows:
        names = ", ".join(r[0] for r in rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
        raise StoreError(f"{prefix}not a gpuscope store: a DuckDB database of another program (tables {names}); "
                         "gpuscope leaves it as it is")


def migrate(con: duckdb.DuckDBPyConnection, where: str | None = None) -> None:
    """Bring the store up to :data:`SCHEMA_VERSION`, in one transaction per step. ``where``
    (the store's path) starts the message of a store refused. Only a write migrates (a reading
    command presents an older store as the current schema instead: :func:`present_as_current`);
    migrating an existing store says so, one line on stderr."""
    prefix = f"{where}: " if where else ""
    version = schema_version(con)
    started = version
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{prefix}the store uses schema version {version}, newer than this gpuscope understands "
            f"({SCHEMA_VERSION}): upgrade gpuscope"
        )
    if version == 0:
        _refuse_foreign_database(con, prefix)
    while version < SCHEMA_VERSION:
        # A new store gets every step in one transaction (one commit instead of one per step);
        # an existing one is upgraded a step per transaction.
        last = SCHEMA_VERSION if version == 0 else version + 1
        con.execute("BEGIN TRANSACTION")
        try:
            if version == 0:
                con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            while version < last:
                MIGRATIONS[version](con)
                version += 1
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(version)]
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    if 0 < started < version:
        # the file changed under a command the user ran to write something else: say so once
        print(f"gpuscope: {prefix}migrated the store from schema {started} to {version}", file=sys.stderr, flush=True)


def current_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """The tables of the current schema and their columns (name, SQL type) in the order a new
    store has them: the migrations run once per process on an in-memory database (~80 ms)."""
    return _columns_of(SCHEMA_VERSION, tuple(m.name for m in METRICS))


@functools.lru_cache(maxsize=4)
def _columns_of(version: int, metrics: tuple[str, ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    # keyed by what the migrations depend on, so that a test making an older store is not cached
    from .._db import duckdb

    con = duckdb.connect(":memory:")
    try:
        migrate(con)
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = 'main' ORDER BY table_name, column_index"
        ).fetchall()
    finally:
        con.close()
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, sql_type in rows:
        tables.setdefault(table, []).append((column, sql_type))
    return {t: tuple(cols) for t, cols in tables.items()}


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def present_as_current(con: duckdb.DuckDBPyConnection, version: int, where: str | None = None) -> None:
    """Make the store that ``con`` opened read-only, of the older schema ``version``, read as
    the current one without writing to it: each table of the current schema becomes a
    temporary view of the same name (temporary objects come first in DuckDB's search path)
    over the store's table, with the columns added since filled with NULL (as a migration
    leaves them for old rows) and the tables added since empty. The data a migration changes is
    changed in the view as well: step 3->4's category of the inference stacks' collectives
    and the redaction of stored commands (steps 3->4 and 5->6) (``runs`` becomes a temporary copy, being small).
    ``meta`` stays the file's: its ``schema_version`` says what the file holds.

    Views cost nothing per row: DuckDB plans through them (filters and projections reach the
    store's tables), so a large store is read as fast as a migrated one."""
    prefix = f"{where}: " if where else ""
    if version == 0:
        _refuse_foreign_database(con, prefix)
    row = con.execute("SELECT current_database()").fetchone()
    assert row is not None  # a SELECT without FROM gives one row
    catalog = row[0]
    have: dict[str, list[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' ORDER BY table_name, column_index"
    ).fetchall():
        have.setdefault(table, []).append(column)
    for table, columns in current_columns().items():
        if table == "meta" and table in have:
            continue
        types = dict(columns)
        old = have.get(table)
        if old is None:
            select = ", ".join(f"CAST(NULL AS {sql_type}) AS {_ident(name)}" for name, sql_type in columns)
            con.execute(f"CREATE TEMP VIEW {_ident(table)} AS SELECT {select} LIMIT 0")
            continue
        exprs = []
        for name in old:
            expr = _ident(name)
            if version < 4 and table == "kernels" and name == "category":
                from .._db import sql_literal
                from ..kernel_names import _COMMUNICATION_WORDS, COMMUNICATION_KERNEL_RE

                # step 3->4's UPDATE, per row read; the words (ILIKE) spare most names the
                # regular expression: 10M kernels GROUP BY category took 1.7 s, 5.3 s with the
                # expression alone, 0.3 s once migrated (a write migrates it for good)
                pattern = sql_literal(COMMUNICATION_KERNEL_RE)
                words = " OR ".join(f"name ILIKE '%{w}%'" for w in _COMMUNICATION_WORDS)
                expr = (f"CASE WHEN kind = 'kernel' AND category = 'compute' AND coalesce(CASE WHEN {words} "
                        f"THEN regexp_matches(name, {pattern}, 'i') END, false) THEN 'communication' ELSE category END")
            exprs.append(f"{expr} AS {_ident(name)}")
        exprs += [f"CAST(NULL AS {types[name]}) AS {_ident(name)}" for name, _ in columns if name not in old]
        source = f"{_ident(catalog)}.main.{_ident(table)}"
        if version < 6 and table == "runs":  # steps 3->4 and 5->6 redact stored commands
            con.execute(f"CREATE TEMP TABLE runs AS SELECT {', '.join(exprs)} FROM {source}")
            _redact_stored_commands(con, "temp.runs")
            continue
        con.execute(f"CREATE TEMP VIEW {_ident(table)} AS SELECT {', '.join(exprs)} FROM {source}")


