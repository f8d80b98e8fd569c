"""DuckDB, imported as cheaply as the installed version allows.

Since DuckDB's Python package split into a pure-Python layer (relational API, expression
helpers, version metadata) over the native module ``_duckdb``, ``import duckdb`` costs several
times the time and memory of the native module alone (numbers in bench/README.md). gpuscope uses only ``connect``, the connection object and
the exception classes, which the native module provides itself (they are the very objects
``duckdb`` re-exports), so every command imports that when it exists and falls back to the
package otherwise (older DuckDB versions, where the native module is ``duckdb.duckdb``).

Code that lets DuckDB scan Python objects (Arrow tables, as the sampler's sink does) must
``import duckdb`` itself: those scans are set up by the package's pure-Python layer.

:func:`sql_literal` is the one way gpuscope writes a value into SQL text, where DuckDB takes no
parameter (``ATTACH``, ``SET``, ``COPY ... TO``, ``read_json``'s file list); everywhere else
values go as ``?`` parameters. Like every user of this module, callers import it inside the
function that needs it.
"""

from __future__ import annotations

try:
    import _duckdb as duckdb

    duckdb.connect, duckdb.Error, duckdb.IOException  # noqa: B018 - the API gpuscope needs
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed DuckDB
    import duckdb  # type: ignore[no-redef]

__all__ = ["duckdb", "one_row", "sql_literal"]


def sql_literal(text: str) -> str:
    """``text`` as a SQL string literal: in single quotes, each quote doubled.

    DuckDB's ``'...'`` strings are standard SQL: a backslash is an ordinary character (only
    ``E'...'`` strings read escapes), so doubling the quote is the whole job and a path with
    backslashes or any Unicode character comes back as it was. A NUL character is refused
    (``ValueError``): the literals gpuscope writes are file names and settings, and no file
    name holds one (the OS ends a path at NUL, so the SQL would name another file than the one
    given); refused here, the mistake is named instead of being passed on.
    """
    if "\x00" in text:
        raise ValueError(f"a NUL character cannot be written in a SQL string: {text!r}")
    return "'" + text.replace("'", "''") + "'"


def one_row(row: tuple | None) -> tuple:
    """The row of a query that always returns one (an aggregate without GROUP BY, a lookup of a
    key the caller just wrote). A missing row there is a bug or a store changed under us: it is
    named, not left to fail later as ``None[0]``."""
    if row is None:
        from .errors import StoreError

        raise StoreError("the store returned no row where one was certain; was it changed by another program?")
    return row
