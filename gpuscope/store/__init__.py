"""The DuckDB store: one file holds every run.

- :mod:`.schema`: the tables and their migrations (``docs/store.md`` for users);
- :mod:`.connection`: opening, creating, migrating, retrying a busy store, transactions;
- :mod:`.runs`: the run lifecycle, the only writer of ``runs``;
- :mod:`.read`: the read layer every face uses (runs, devices, samples, calibrations).

The names most callers need are re-exported here (``from gpuscope import store;
store.connect(...)``). Importing the package imports no DuckDB: that happens on first connect.
"""
from __future__ import annotations

from .connection import (
    attach_sql,
    check_store_path,
    check_writable,
    connect,
    connect_for_user_query,
    hostname,
    now_ns,
    open_attached,
    retry_while_locked,
    store_exists,
    transaction,
    write_error,
    write_failure_reason,
    writing,
)
from .read import RunRef, list_runs, resolve_run
from .runs import RUN_STATUSES, recover_stale_runs, stale_runs
from .schema import SCHEMA_VERSION, STORE_BLOCK_SIZE, migrate, schema_version

__all__ = [
    "RUN_STATUSES", "SCHEMA_VERSION", "STORE_BLOCK_SIZE", "RunRef",
    "attach_sql", "check_store_path", "check_writable", "connect",
    "connect_for_user_query", "hostname", "list_runs", "migrate", "now_ns", "open_attached", "recover_stale_runs",
    "resolve_run", "retry_while_locked", "schema_version", "stale_runs", "store_exists", "transaction", "write_error",
    "write_failure_reason", "writing",
]
