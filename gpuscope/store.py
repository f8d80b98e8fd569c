"""The DuckDB store: schema, migrations, opening, run lookup.

One DuckDB file holds every run. The tables that ``gpuscope sql`` users can rely on are
``runs``, ``devices``, ``samples``, ``kernels``, ``ops`` and ``annotations`` (see
``docs/store.md``); ``traces`` and ``meta`` are there too. All timestamps are integer
nanoseconds since the Unix epoch, durations integer nanoseconds.

DuckDB allows one writing process per file and no reader from another process while it
writes, so writers keep their connection short: ingest stages everything in memory and
attaches the store only for its final transaction.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InputError, StoreError
from .metrics import METRICS
from .redact import redact_command

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

SCHEMA_VERSION = 4
#: Block size of new store files. DuckDB's default (256 KiB) makes even an empty store 0.8 MB;
#: 64 KiB blocks keep small runs small at no measurable cost in speed.
STORE_BLOCK_SIZE = 65536

T = TypeVar("T")

RUN_STATUSES = ("recording", "complete", "incomplete", "failed")


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
    # One row per sampled run: the sampler's cadence and its own cost (gpuscope.sampler).
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
    from .kernel_names import COMMUNICATION_KERNEL_RE

    con.execute("UPDATE kernels SET category = 'communication' WHERE kind = 'kernel' AND category = 'compute' "
                "AND regexp_matches(name, ?, 'i')", [COMMUNICATION_KERNEL_RE])
    # Commands stored before secrets were redacted (`--api-key K`) are redacted in place.
    for run_id, command in con.execute("SELECT id, command FROM runs WHERE command IS NOT NULL").fetchall():
        redacted = redact_command(command)
        if redacted != command:
            con.execute("UPDATE runs SET command = ? WHERE id = ?", [redacted, run_id])


MIGRATIONS = (_migration_0_to_1, _migration_1_to_2, _migration_2_to_3, _migration_3_to_4)
assert len(MIGRATIONS) == SCHEMA_VERSION


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version of the store ``con`` currently uses (0 for an empty database).

    Call it outside a transaction: on an empty database its query fails, which would abort one.
    """
    from ._db import duckdb

    try:
        # The table itself, not the catalog: listing the catalog (duckdb_tables(),
        # information_schema) costs 10-15 ms on a freshly opened store, this 1 ms.
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        return 0
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring the store up to :data:`SCHEMA_VERSION`, in one transaction per step."""
    version = schema_version(con)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store uses schema version {version}, newer than this gpuscope understands "
            f"({SCHEMA_VERSION}): upgrade gpuscope"
        )
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


def attach_sql(path: Path | str, alias: str = "store") -> str:
    """The ``ATTACH`` statement for the store at ``path`` (new files get :data:`STORE_BLOCK_SIZE`)."""
    quoted = "'" + str(path).replace("'", "''") + "'"
    options = "" if Path(path).exists() else f" (BLOCK_SIZE {STORE_BLOCK_SIZE})"
    return f"ATTACH {quoted} AS {alias}{options}"


#: Bytes 8-11 of every DuckDB database file.
_DUCKDB_MAGIC = b"DUCK"


def store_exists(path: Path | str) -> bool:
    """Whether a store file is at ``path``. An empty file (``--db "$(mktemp)"``) is no store
    yet: it holds nothing, and the first write makes the store there."""
    try:
        return Path(path).stat().st_size > 0
    except FileNotFoundError:
        return False


def check_store_path(path: Path | str) -> None:
    """Raise :class:`StoreError` when ``path`` cannot be a store: a directory, or an existing
    file that is not a DuckDB database (DuckDB's own errors for these are misleading)."""
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"{p}: is a directory, not a store file (pass --db DIR/gpuscope.duckdb)")
    try:
        with open(p, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"{p}: cannot read the store: {exc.strerror or exc}") from None
    if head and head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(f"{p}: not a gpuscope store (the file is not a DuckDB database)")


def _make_room(path: Path) -> None:
    """Make the folder of a store about to be created, and remove an empty file in its place
    (DuckDB refuses to open one; it holds nothing). Failures are a :class:`StoreError`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not store_exists(path):
            path.unlink()
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the store: {exc.strerror or exc}") from None


def open_attached(con: duckdb.DuckDBPyConnection, path: Path | str, alias: str = "store", retry_s: float = 2.0) -> None:
    """``ATTACH`` the store at ``path`` (creating its folder and file if needed) to ``con``,
    retried while another process writes to it; any failure is a :class:`StoreError`."""
    from ._db import duckdb

    check_store_path(path)
    _make_room(Path(path))
    try:
        retry_while_locked(path, retry_s, lambda: con.execute(attach_sql(path, alias)))
    except duckdb.Error as exc:
        raise StoreError(f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None


def _create(path: Path) -> None:
    from ._db import duckdb

    _make_room(path)
    con = duckdb.connect(":memory:")
    try:
        con.execute(attach_sql(path))
        con.execute("USE store")
        migrate(con)
        con.execute("USE memory")
        con.execute("DETACH store")
    except duckdb.Error as exc:
        raise StoreError(f"{path}: cannot create the store: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


_LOCK_RE = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


def retry_while_locked(path: Path | str, retry_s: float, open_store: Callable[[], T]) -> T:
    """``open_store()`` (a connect or an ATTACH of the store file), retried for ``retry_s``
    seconds while another process holds the file's write lock; then a :class:`StoreError`
    naming that process. Other I/O errors become a :class:`StoreError` at once."""
    from ._db import duckdb

    deadline = time.monotonic() + retry_s
    while True:
        try:
            return open_store()
        except duckdb.IOException as exc:
            msg = str(exc)
            m = _LOCK_RE.search(msg)
            if m and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if m:
                raise StoreError(f"{path}: the store is busy (held by {m.group(1)}, pid {m.group(2)})") from None
            raise StoreError(f"{path}: cannot open the store: {msg.splitlines()[0]}") from None


def connect_for_user_query(path: Path | str, temp_dir: Path | str) -> duckdb.DuckDBPyConnection:
    """The store opened read-only for a query a user typed (``gpuscope sql``): DuckDB's
    access to any other file (``COPY ... TO``, ``read_csv``, ``ATTACH``, ``EXPORT``,
    extensions) is turned off and the configuration locked, so that on a shared server the
    query interface cannot become a way to read or write other files. The store itself stays
    readable because it is attached before access is turned off. ``temp_dir`` (which the
    caller removes) is where a large query spills: the lockdown leaves DuckDB's temporary
    directory writable, so it must not be the store's shared ``<store>.tmp``."""
    con = connect(path, read_only=True)
    try:
        quoted = str(temp_dir).replace("'", "''")
        con.execute(f"SET temp_directory = '{quoted}'")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except Exception:
        con.close()
        raise
    return con


def connect(path: Path | str, read_only: bool = False, retry_s: float = 2.0) -> duckdb.DuckDBPyConnection:
    """Open the store at ``path`` and migrate it. ``read_only`` opens never create a file.

    A store held by another writing process is retried for ``retry_s`` seconds (writers keep
    their transactions short), then reported as a :class:`StoreError` naming that process.
    """
    from ._db import duckdb

    path = Path(path)
    check_store_path(path)
    if read_only and not store_exists(path):
        raise StoreError(f"{path}: no store here yet (run `gpuscope ingest` or `gpuscope run` first)")
    if not read_only and not store_exists(path):
        _create(path)
    try:
        con = retry_while_locked(path, retry_s, lambda: duckdb.connect(str(path), read_only=read_only))
    except duckdb.Error as exc:
        raise StoreError(f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None
    try:
        if read_only:
            version = schema_version(con)
            if version != SCHEMA_VERSION:
                con.close()
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{path}: the store uses schema version {version}, newer than this gpuscope "
                        f"understands ({SCHEMA_VERSION}): upgrade gpuscope"
                    )
                rw = connect(path, read_only=False, retry_s=retry_s)
                rw.close()
                return connect(path, read_only=True, retry_s=retry_s)
        else:
            migrate(con)
            if con.execute("SELECT count(*) FROM runs WHERE status = 'recording'").fetchone()[0]:
                with transaction(con):
                    recover_stale_runs(con)
    except StoreError:
        raise
    except Exception as exc:
        con.close()
        raise StoreError(f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None
    return con


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``BEGIN`` ... ``COMMIT``, or ``ROLLBACK`` on any exception: all or nothing."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@dataclass(frozen=True)
class RunRef:
    """A resolved run: its id and name."""

    id: int
    name: str


def resolve_run(con: duckdb.DuckDBPyConnection, ref: str | int | None, db_path: Path | str | None = None) -> RunRef:
    """A ``RUN`` argument: a run id, or a run name (the newest run of that name), or None for
    the newest run. Raises :class:`InputError` when nothing matches."""
    if ref is None:
        row = con.execute("SELECT id, name FROM runs ORDER BY created_ns DESC, id DESC LIMIT 1").fetchone()
        if row is None:
            raise InputError(str(db_path or "store"), "the store holds no runs yet")
        return RunRef(int(row[0]), str(row[1]))
    text = str(ref).strip()
    if text.isdigit():
        row = con.execute("SELECT id, name FROM runs WHERE id = ?", [int(text)]).fetchone()
        if row is not None:
            return RunRef(int(row[0]), str(row[1]))
    row = con.execute(
        "SELECT id, name FROM runs WHERE name = ? ORDER BY created_ns DESC, id DESC LIMIT 1", [text]
    ).fetchone()
    if row is None:
        raise InputError(f"run {text!r}", "no such run id or name (see `gpuscope runs`)")
    return RunRef(int(row[0]), str(row[1]))


def _owner_alive(info_text: str | None) -> bool:
    """Whether the process recording a run (``runs.info`` owner or sampler pid) still runs.
    A run recorded on another host is assumed alive (nothing here can tell)."""
    import json

    try:
        info = json.loads(info_text) if info_text else {}
    except ValueError:
        return False
    owner = info.get("owner") or info.get("sampler") or {}
    pid = owner.get("pid")
    host = owner.get("host")
    if not isinstance(pid, int):
        return False
    if host and host != hostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_runs(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Runs still marked ``recording`` whose recording process is gone (e.g. killed with
    SIGKILL): they hold everything written up to their last flush and are ``incomplete``."""
    rows = con.execute("SELECT id, info FROM runs WHERE status = 'recording'").fetchall()
    return [int(r[0]) for r in rows if not _owner_alive(r[1])]


def recover_stale_runs(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Mark :func:`stale_runs` ``incomplete`` (with ``ended_ns`` at their last sample)."""
    ids = stale_runs(con)
    for run_id in ids:
        con.execute(
            "UPDATE runs SET status = 'incomplete', ended_ns = coalesce(ended_ns, "
            "(SELECT max(ts_ns) FROM samples WHERE run_id = $1)) WHERE id = $1", [run_id])
    return ids


def list_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every run, newest first, with the row counts of its samples, kernels and ops."""
    rows = con.execute(
        """
        SELECT r.id, r.name, r.status, r.source, r.started_ns, r.ended_ns, r.command, r.exit_code,
               r.created_ns,
               coalesce(s.n, 0) AS samples, coalesce(k.n, 0) AS kernels, coalesce(o.n, 0) AS ops,
               coalesce(d.n, 0) AS devices
        FROM runs r
        LEFT JOIN (SELECT run_id, count(*) n FROM samples GROUP BY run_id) s ON s.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM kernels GROUP BY run_id) k ON k.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM ops GROUP BY run_id) o ON o.run_id = r.id
        LEFT JOIN (SELECT run_id, count(*) n FROM devices GROUP BY run_id) d ON d.run_id = r.id
        ORDER BY r.created_ns DESC, r.id DESC
        """
    ).fetchall()
    cols = ["id", "name", "status", "source", "started_ns", "ended_ns", "command", "exit_code",
            "created_ns", "samples", "kernels", "ops", "devices"]
    out = [dict(zip(cols, r)) for r in rows]
    for r in out:
        r["command"] = redact_command(r["command"])
    if any(r["status"] == "recording" for r in out):
        stale = set(stale_runs(con))
        for r in out:
            if r["id"] in stale:
                r["status"] = "incomplete"
    return out


def now_ns() -> int:
    """Wall-clock nanoseconds since the Unix epoch."""
    return time.time_ns()


def hostname() -> str:
    """This machine's host name."""
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - Windows
        import socket

        return socket.gethostname()
