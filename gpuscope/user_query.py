"""``gpuscope sql``: a query a user typed, run so that it reads the store and nothing else.

Two layers. DuckDB's own lockdown does the enforcing: the store is opened read-only, then
external access is turned off and the configuration locked (:func:`store.connect_for_user_query`),
so no statement or function can reach another file, load an extension or turn access back on.
In front of it, every statement is classified before any runs: only reading statements
(SELECT and its forms, EXPLAIN, PRAGMA, CALL, PIVOT, transactions) pass, so that a refusal
names the statement a user wrote ("COPY ... TO is refused") rather than the file DuckDB
stopped at, and so that nothing is written even where DuckDB's lockdown leaves a directory
open (its temporary directory, a private folder here that is removed afterwards).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    import duckdb

READS_ONLY = "gpuscope sql reads the store only"

#: Statement types that read. Each of PRAGMA, CALL and MULTI also covers statements that do
#: not read (IMPORT DATABASE, CHECKPOINT, ...), so those pass only under their own first word.
_READING_TYPES = {"SELECT": None, "EXPLAIN": None, "TRANSACTION": None,
                  "PRAGMA": "PRAGMA", "CALL": "CALL", "MULTI": "PIVOT"}

#: Table functions that read files, to name the one a refused SELECT used.
_FILE_FUNCTION = re.compile(r"\b(read_\w+|glob|sniff_csv|parquet_\w+|\w+_scan|iceberg_\w+|delta_\w+)\s*\(", re.IGNORECASE)

_TOKEN = re.compile(
    r"--[^\n]*|/\*.*?(?:\*/|$)|'(?:[^']|'')*(?:'|$)|\"(?:[^\"]|\"\")*(?:\"|$)|\$(\w*)\$.*?(?:\$\1\$|$)"
    r"|(?P<open>\()|(?P<close>\))|(?P<word>[A-Za-z_][A-Za-z_0-9]*)|.",
    re.DOTALL,
)


def top_level_words(text: str) -> list[str]:
    """The keywords and names of ``text`` outside comments, quotes and parentheses, upper case."""
    words: list[str] = []
    depth = 0
    for m in _TOKEN.finditer(text):
        if m.group("open"):
            depth += 1
        elif m.group("close"):
            depth = max(0, depth - 1)
        elif m.group("word") and depth == 0:
            words.append(m.group("word").upper())
    return words


#: ``EXPLAIN [ANALYZE] [(options)]`` and what follows it (ANALYZE runs the statement it explains).
_EXPLAIN = re.compile(r"^(?:\s+|--[^\n]*|/\*.*?\*/)*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?(?P<inner>.*)$",
                      re.IGNORECASE | re.DOTALL)
_SCOPES = ("GLOBAL", "SESSION", "LOCAL", "VARIABLE")


def statement_kind(type_name: str, text: str) -> str:
    """What a user would call the statement: ``COPY ... TO``, ``EXPORT DATABASE``, ``INSTALL``,
    ``SET enable_external_access``, ``read_csv()``..."""
    words = top_level_words(text)
    if not words:
        return type_name
    first = words[0]
    m = _EXPLAIN.match(text)
    if first == "EXPLAIN" and m:
        return f"EXPLAIN {statement_kind('', m.group('inner'))}"
    if first == "COPY" and len(words) > 1 and words[1] == "FROM":
        return "COPY FROM DATABASE"
    if first == "COPY":
        direction = next((w for w in words[1:] if w in ("TO", "FROM")), None)
        return f"COPY ... {direction}" if direction else "COPY"
    if first in ("EXPORT", "IMPORT", "FORCE") and len(words) > 1:
        return f"{first} {words[1]}"
    if first in ("SET", "RESET", "PRAGMA", "CALL") and len(words) > 1:
        scoped = words[1] in _SCOPES and len(words) > 2
        return " ".join([first, *(w if w in _SCOPES else w.lower() for w in words[1:3 if scoped else 2])])
    if first == "SELECT" or type_name == "SELECT":
        m = _FILE_FUNCTION.search(text)
        return f"{m.group(1).lower()}()" if m else "reading a file"
    return first


def _type_name(statement: Any) -> str:
    try:
        return str(statement.type.name)
    except ValueError:  # a statement type newer than the Python enum knows
        return "UNKNOWN"


def _refused_statement(con: duckdb.DuckDBPyConnection, statements: list[Any]) -> str | None:
    """The kind of the first statement that does not only read, or None."""
    for statement in statements:
        type_name, text = _type_name(statement), statement.query
        if type_name == "EXPLAIN":
            m = _EXPLAIN.match(text)
            try:
                inner = con.extract_statements(m.group("inner")) if m else []
            except Exception:  # an EXPLAIN with options DuckDB parses and this does not
                inner = []
            if _refused_statement(con, inner) is not None:
                return statement_kind(type_name, text)
            continue
        first_word = _READING_TYPES.get(type_name, "")
        if first_word is None:
            continue
        words = top_level_words(text)
        if not (first_word and words and words[0] == first_word):
            return statement_kind(type_name, text)
    return None


def _reason(exc: BaseException) -> str:
    """DuckDB's message, first line, without its "... Error: " prefix."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return first.split("Error: ", 1)[1] if "Error: " in first else first


def run(db_path: Path | str, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Columns and rows of the last statement of ``query`` over the store at ``db_path``.

    A statement that would write, read another file, load an extension or change a setting
    is refused with an :class:`InputError` naming it; so is bad SQL (DuckDB's message)."""
    from ._db import duckdb

    from . import store

    # DuckDB's temporary directory is the one place its lockdown still lets a query write
    # (it is always an allowed directory): a private folder of this query, removed with it.
    temp_dir = tempfile.mkdtemp(prefix="gpuscope-sql-")
    try:
        con = store.connect_for_user_query(db_path, temp_dir)
        try:
            return _run(con, query, duckdb)
        finally:
            con.close()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _run(con: duckdb.DuckDBPyConnection, query: str, duckdb: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise InputError("query", _reason(exc)) from None
    except ValueError:  # a statement type the Python enum does not know: not one that reads
        kind = " ".join(top_level_words(query)[:2]) or "this statement"
        raise InputError("query", f"{kind} is refused: {READS_ONLY}") from None
    if not statements:
        raise InputError("query", "no SQL statement")
    refused = _refused_statement(con, statements)
    if refused is not None:
        raise InputError("query", f"{refused} is refused: {READS_ONLY}")
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    for statement in statements:
        kind = statement_kind(_type_name(statement), statement.query)
        try:
            cur = con.execute(statement)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchall() if columns else []
        except duckdb.InterruptException:
            raise  # Ctrl-C: the command ends as interrupted, not as bad SQL
        except duckdb.PermissionException as exc:
            raise InputError("query", f"{kind} is refused: {READS_ONLY} ({_reason(exc)})") from None
        except duckdb.Error as exc:
            reason = _reason(exc)
            if "configuration has been locked" in reason:
                raise InputError("query", f"{kind} is refused: gpuscope sql cannot change settings ({reason})") from None
            if "read-only" in reason.lower():
                raise InputError("query", f"{kind} is refused: {READS_ONLY} ({reason})") from None
            raise InputError("query", reason) from None
    return columns, rows
