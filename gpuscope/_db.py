"""DuckDB, imported as cheaply as the installed version allows.

Since DuckDB's Python package split into a pure-Python layer (relational API, expression
helpers, version metadata) over the native module ``_duckdb``, ``import duckdb`` costs several
times the time and memory of the native module alone (numbers in bench/README.md). gpuscope uses only ``connect``, the connection object and
the exception classes, which the native module provides itself (they are the very objects
``duckdb`` re-exports), so every command imports that when it exists and falls back to the
package otherwise (older DuckDB versions, where the native module is ``duckdb.duckdb``).

Code that lets DuckDB scan Python objects (Arrow tables, as the sampler's sink does) must
``import duckdb`` itself: those scans are set up by the package's pure-Python layer.
"""

from __future__ import annotations

try:
    import _duckdb as duckdb

    duckdb.connect, duckdb.Error, duckdb.IOException  # noqa: B018 - the API gpuscope needs
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed DuckDB
    import duckdb  # type: ignore[no-redef]

__all__ = ["duckdb"]
