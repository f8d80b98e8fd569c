"""``gpuscope sql``: a query a user typed, run so that it reads the store and nothing else.

Two layers. DuckDB's own lockdown does the enforcing: the store is opened read-only, then
external access is turned off and the configuration locked (:func:`store.connect_for_user_query`),
so no statement or function can reach another file, load an extension or turn access back on.
In front of it, every statement is classified before any runs, by DuckDB's own parser
(``extract_statements`` for the statements and their types, ``tokenize`` for their words): only
reading statements (SELECT and its forms, EXPLAIN of one, informational PRAGMA and CALL, PIVOT,
transactions) pass, so that a refusal names the statement a user wrote ("COPY ... TO is
refused") rather than the file DuckDB stopped at, and so that nothing is written even where
DuckDB's lockdown leaves a place open (temporary tables, its temporary directory: a private
folder here that is removed afterwards, on SIGTERM too).

The classifier uses no regular expression over the query: the previous one backtracked
exponentially on a run of spaces (``"<28 spaces>SELECT 1"`` took 23 s). DuckDB's tokenizer and
statement splitter are linear.

A query runs under a time limit (``timeout_s``; the connection is interrupted from a timer) and
a memory limit (DuckDB's ``memory_limit``, set before the configuration is locked; a larger
query spills to the private folder).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    import duckdb

READS_ONLY = "gpuscope sql reads the store only"

#: Default of ``sql --timeout``, seconds.
DEFAULT_TIMEOUT_S = 60.0
#: Default of ``sql --memory-limit``: a share of the machine's memory (DuckDB's own default is
#: 80 %, too much for one query on a shared GPU server); a query larger than this spills.
DEFAULT_MEMORY_SHARE = 0.25
#: The memory limit where the machine's memory is unknown.
FALLBACK_MEMORY_LIMIT_BYTES = 4 << 30

#: The private temporary folders of queries: ``gpuscope-sql-<pid>-<random>`` in the temporary
#: directory, so that the next query removes those of a query that was killed.
TEMP_DIR_PREFIX = "gpuscope-sql-"

#: PRAGMAs that only show something (DuckDB's pragma functions less those that change a
#: setting, checkpoint, import a database or copy one).
INFORMATIONAL_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
    "database_size", "version", "platform", "functions", "collations", "storage_info", "metadata_info",
    "user_agent", "extension_versions",
})

#: Functions with an effect beyond their result (a checkpoint, a log file, a parser extension,
#: running a serialized statement the classifier never saw, a sequence step): refused in any
#: statement, before it runs.
EFFECT_FUNCTIONS = frozenset({
    "checkpoint", "force_checkpoint", "enable_logging", "disable_logging", "truncate_duckdb_logs",
    "enable_profiling", "disable_profiling", "add_grammar_extension", "remove_grammar_extension",
    "create_external_resource", "register_external_resource", "register_external_resource_type",
    "deregister_external_resource", "destroy_external_resource", "json_execute_serialized_sql",
    "nextval", "setval", "write_log",
})

_SCOPES = ("GLOBAL", "SESSION", "LOCAL", "VARIABLE")


class QueryLimitError(InputError):
    """A query stopped at one of its limits (exit 2: the query is the input). ``limit`` is the
    quantity (``timeout_s``, ``memory_limit_bytes``); ``problem`` holds ``{limit}`` where a
    front end names it its own way (the CLI: its flag); ``str()`` says "the time limit"."""

    NAMES = {"timeout_s": "the time limit", "memory_limit_bytes": "the memory limit"}

    def __init__(self, limit: str, problem: str) -> None:
        super().__init__("query", problem.format(limit=self.NAMES[limit]))
        self.limit = limit
        self.problem = problem

    def render(self, name: str) -> str:
        """The one line with the limit called ``name``."""
        return f"query: {self.problem.format(limit=name)}"
_WORD_KINDS = ("keyword", "identifier")


@dataclass(frozen=True)
class Token:
    """One token of a statement, comments left out: DuckDB's kind (``keyword``, ``identifier``,
    ``operator``, ``string_const``, ``numeric_const``), its text, where it starts in the
    statement, and how many parentheses enclose it."""

    kind: str
    text: str
    pos: int
    depth: int

    @property
    def word(self) -> str:
        """A keyword or a name, upper case, quotes removed; "" for any other token."""
        if self.kind not in _WORD_KINDS:
            return ""
        text = self.text
        if len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1].replace('""', '"')
        return text.upper()


def tokens(text: str) -> list[Token]:
    """The tokens of ``text`` by DuckDB's tokenizer, comments left out, each with its depth in
    parentheses. Linear in the text (no regular expression)."""
    from ._db import duckdb

    raw = duckdb.tokenize(text)
    out: list[Token] = []
    depth = 0
    for i, (pos, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(text)
        name = kind.name
        if name == "comment":
            continue
        piece = text[pos:end].strip()
        if name == "operator":
            # an operator token may hold several characters ("((", ");"): count each parenthesis
            for ch in piece:
                if ch == "(":
                    out.append(Token(name, ch, pos, depth))
                    depth += 1
                elif ch == ")":
                    depth = max(0, depth - 1)
                    out.append(Token(name, ch, pos, depth))
            if "(" not in piece and ")" not in piece:
                out.append(Token(name, piece, pos, depth))
            continue
        out.append(Token(name, piece, pos, depth))
    return out


def top_level_words(text: str) -> list[str]:
    """The keywords and names of ``text`` outside comments, quotes and parentheses, upper case."""
    return [t.word for t in tokens(text) if t.depth == 0 and t.word]


def called_functions(toks: Sequence[Token]) -> Iterator[str]:
    """The names (lower case, schema left off) of the functions a statement calls: each name
    directly followed by an opening parenthesis."""
    for prev, tok in zip(toks, toks[1:]):
        if tok.text == "(" and prev.word:
            yield prev.word.lower()


def is_file_function(name: str) -> bool:
    """Whether the table function ``name`` reads files (``read_csv``, ``glob``, ``parquet_scan``...)."""
    return (name.startswith(("read_", "parquet_", "iceberg_", "delta_")) or name.endswith("_scan")
            or name in ("glob", "sniff_csv"))


#: Statements that DuckDB runs inside a reading one: a data-modifying WITH clause
#: (``WITH x AS (DELETE FROM t RETURNING *) SELECT ...`` is of type SELECT).
_NESTED_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "CREATE", "DROP", "ALTER", "TRUNCATE"})


def _refused_function(toks: Sequence[Token]) -> str | None:
    """What a statement does beyond reading inside itself: a function of :data:`EFFECT_FUNCTIONS`
    or one that reads files (``read_csv()``), or a write in parentheses (``WITH ... DELETE``)."""
    for prev, tok in zip(toks, toks[1:]):
        if prev.text == "(" and tok.kind == "keyword" and tok.word in _NESTED_WRITES:
            return f"WITH ... {tok.word}"
    for name in called_functions(toks):
        if name in EFFECT_FUNCTIONS or is_file_function(name):
            return f"{name}()"
    for i, tok in enumerate(toks[:-1]):
        if tok.word == "QUERY" and toks[i + 1].text == "(":
            refused = _refused_query_call(toks[i + 2:i + 4])
            if refused is not None:
                return refused
    return None


def _refused_query_call(args: Sequence[Token]) -> str | None:
    """``query('SELECT ...')`` runs the statement in its string: the string is classified like
    the query itself; a string computed at run time cannot be, and is refused."""
    from ._db import duckdb

    inner = _string_value(args[0].text) if len(args) == 2 and args[0].kind == "string_const" and \
        args[1].text == ")" else None
    if inner is None:
        return "query() of a computed string"
    try:
        statements = duckdb.extract_statements(inner)
    except (duckdb.Error, ValueError):
        return None  # DuckDB's own parse of it fails the same way, when it runs
    for statement in statements:
        refused = refused_kind(_type_name(statement), statement.query)
        if refused is not None:
            return f"{refused} in query()"
    return None


def _string_value(text: str) -> str | None:
    """The value of a SQL string literal token (``'it''s'``, ``$$...$$``, ``$tag$...$tag$``);
    None for other forms (``E'...'`` escapes), which are not read here."""
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text.startswith("$"):
        tag_end = text.find("$", 1)
        tag = text[:tag_end + 1]
        if tag_end > 0 and text.endswith(tag) and len(text) >= 2 * len(tag):
            return text[len(tag):-len(tag)]
    return None


def statement_kind(type_name: str, text: str) -> str:
    """What a user would call the statement: ``COPY ... TO``, ``EXPORT DATABASE``, ``INSTALL``,
    ``SET enable_external_access``, ``read_csv()``..."""
    toks = tokens(text)
    words = [t.word for t in toks if t.depth == 0 and t.word]
    if not words:
        return type_name or "this statement"
    first = words[0]
    if first == "EXPLAIN":
        inner = _explained(text, toks)
        return f"EXPLAIN {statement_kind('', inner[-1])}" if inner else "EXPLAIN"
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
    if first in ("SELECT", "FROM", "WITH") or type_name == "SELECT":
        refused = _refused_function(toks)
        return refused or "reading a file"
    return first


def _explained(text: str, toks: Sequence[Token]) -> list[str]:
    """The texts that ``EXPLAIN [ANALYZE] [(options)] statement`` may explain, found by tokens:
    the rest after EXPLAIN and ANALYZE, and, where that starts with a parenthesis, also the rest
    after the matching one (options, or a parenthesized query: both are classified)."""
    i = 0
    while i < len(toks) and toks[i].word in ("EXPLAIN", "ANALYZE", "ANALYSE", "VERBOSE") and toks[i].depth == 0:
        i += 1
    if i >= len(toks):
        return []
    candidates = [text[toks[i].pos:]]
    if toks[i].text == "(":
        close = next((j for j in range(i + 1, len(toks)) if toks[j].text == ")" and toks[j].depth == 0), None)
        if close is not None:
            candidates.append(text[toks[close].pos + 1:])
    return candidates


def _type_name(statement: Any) -> str:
    try:
        return str(statement.type.name)
    except ValueError:  # a statement type newer than the Python enum knows
        return "UNKNOWN"


def refused_kind(type_name: str, text: str, depth: int = 0) -> str | None:
    """The kind of the statement (its DuckDB type ``type_name``, its ``text``) when it does not
    only read, else None. Fails closed: what cannot be classified is refused."""
    from ._db import duckdb

    toks = tokens(text)
    words = [t.word for t in toks if t.depth == 0 and t.word]
    first = words[0] if words else ""
    refused = _refused_function(toks)
    if refused is not None:
        return refused if type_name == "SELECT" else statement_kind(type_name, text)
    if type_name == "EXPLAIN" or (type_name == "MULTI" and first == "EXPLAIN"):  # EXPLAIN of a PIVOT is MULTI
        # EXPLAIN ANALYZE runs the statement it explains: what it explains must read, whatever
        # comments, newlines or options stand between EXPLAIN and the statement.
        parsed = []
        for candidate in _explained(text, toks):
            try:
                statements = duckdb.extract_statements(candidate)
            except (duckdb.Error, ValueError):
                continue
            if len(statements) == 1:
                parsed.append(statements[0])
        if not parsed or depth > 2:
            return statement_kind(type_name, text)
        for inner in parsed:
            if refused_kind(_type_name(inner), inner.query, depth + 1) is not None:
                return statement_kind(type_name, text)
        return None
    if type_name in ("SELECT", "TRANSACTION"):
        return None
    if type_name == "PRAGMA" and first == "PRAGMA" and len(words) > 1 and words[1].lower() in INFORMATIONAL_PRAGMAS:
        return None
    if type_name == "CALL" and first == "CALL":
        called = next(called_functions(toks), "")
        if called.startswith("duckdb_") or called.removeprefix("pragma_") in INFORMATIONAL_PRAGMAS and \
                called.startswith("pragma_"):
            return None
    if type_name == "MULTI" and first == "PIVOT":  # PIVOT makes its enum types first
        return None
    return statement_kind(type_name, text)


def classify(query: str) -> list[Any]:
    """The statements of ``query`` (DuckDB's parser), when every one only reads; else an
    :class:`InputError` naming the first that does not (or DuckDB's syntax error)."""
    from ._db import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise InputError("query", _reason(exc)) from None
    except ValueError:  # a statement type the Python enum does not know: not one that reads
        kind = " ".join(top_level_words(query)[:2]) or "this statement"
        raise InputError("query", f"{kind} is refused: {READS_ONLY}") from None
    if not statements:
        raise InputError("query", "no SQL statement")
    for statement in statements:
        refused = refused_kind(_type_name(statement), statement.query)
        if refused is not None:
            raise InputError("query", f"{refused} is refused: {READS_ONLY}")
    return statements


def _reason(exc: BaseException) -> str:
    """DuckDB's message, first line, without its "... Error: " prefix."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return first.split("Error: ", 1)[1] if "Error: " in first else first


# -- sizes -----------------------------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "BYTES": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}
_SIZE = re.compile(r"(\d{1,15}(?:\.\d{1,6})?)\s{0,3}([A-Za-z]{0,5}|%)")


def memory_bytes() -> int | None:
    """The machine's physical memory, bytes (None where unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_limit_bytes() -> int:
    """``sql``'s memory limit unless ``--memory-limit`` says: a quarter of the machine's memory."""
    total = memory_bytes()
    return int(total * DEFAULT_MEMORY_SHARE) if total else FALLBACK_MEMORY_LIMIT_BYTES


def parse_size(text: str) -> int:
    """Bytes of a size as a user or DuckDB writes it: ``4GB``, ``512 MiB``, ``25%`` (of the
    machine's memory), ``1.5 GiB``; ValueError for anything else or for zero."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a size (e.g. 4GB, 512MiB, 25%)")
    number, unit = float(m.group(1)), m.group(2).upper()
    if unit == "%":
        total = memory_bytes()
        if total is None:
            raise ValueError(f"{text!r}: the machine's memory is unknown here; give a size (e.g. 4GB)")
        if not 0 < number <= 100:
            raise ValueError(f"{text!r} must be a share of memory above 0 % and at most 100 %")
        value = total * number / 100
    elif unit in _UNITS:
        value = number * _UNITS[unit]
    else:
        raise ValueError(f"{text!r} has an unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)")
    if value < 1 << 20:
        raise ValueError(f"{text!r} is too small: give at least 1MiB")
    return int(value)


def human_bytes(n: int) -> str:
    """``n`` bytes as the message of a limit shows them (``4.0 GiB``)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# -- the private temporary folder --------------------------------------------------------------------

def sweep_stale_temp_dirs(tmp: Path | str | None = None) -> list[Path]:
    """Remove the temporary folders of queries whose process is gone (``kill -9``), the current
    user's only; links and anything not a folder are left alone. Returns what was removed."""
    removed: list[Path] = []
    folder = Path(tmp or tempfile.gettempdir())
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(TEMP_DIR_PREFIX):
            continue
        pid_text = name[len(TEMP_DIR_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or not pid_text.isascii() or int(pid_text) == os.getpid():
            continue
        path = folder / name
        try:
            st = path.lstat()
            if not _is_dir(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:  # the query that made it is gone
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (OSError, OverflowError):  # alive under another user, gone already, a pid out of range
            continue
    return removed


def _is_dir(mode: int) -> bool:
    return stat.S_ISDIR(mode)


class _Terminated(BaseException):
    """SIGTERM (or SIGHUP) while a query ran: unwinds like Ctrl-C, so that the temporary folder
    is removed, then the process ends with 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """While a query runs: SIGTERM and SIGHUP interrupt it and unwind (the temporary folder is
    removed on the way out). Only in the main thread (the only one that may set handlers)."""

    def __init__(self) -> None:
        self.con: Any = None
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if self.con is not None:
            try:
                self.con.interrupt()
            except Exception:  # closed already: nothing runs
                pass
        raise _Terminated(signum)

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


# -- running ---------------------------------------------------------------------------------------

def run(db_path: Path | str, query: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S,
        memory_limit_bytes: int | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Columns and rows of the last statement of ``query`` over the store at ``db_path``.

    A statement that would write, read another file, load an extension or change a setting
    is refused with an :class:`InputError` naming it; so is bad SQL (DuckDB's message), a query
    still running after ``timeout_s`` seconds (None or 0: no limit) and one that needs more
    memory than ``memory_limit_bytes`` (default :func:`default_memory_limit_bytes`) even with
    spilling. SIGTERM ends it with its temporary folder removed (exit 143)."""
    from . import store

    statements = classify(query)  # before the store is opened: a refusal costs nothing
    limit = memory_limit_bytes or default_memory_limit_bytes()
    sweep_stale_temp_dirs()
    signals = _Signals()
    try:
        with signals:
            # DuckDB's temporary directory is the one place its lockdown still lets a query write
            # (it is always an allowed directory): a private folder of this query, removed with it.
            temp_dir = tempfile.mkdtemp(prefix=f"{TEMP_DIR_PREFIX}{os.getpid()}-")
            try:
                con = store.connect_for_user_query(db_path, temp_dir, memory_limit_bytes=limit)
                signals.con = con
                try:
                    return _run(con, statements, timeout_s, limit)
                finally:
                    signals.con = None
                    con.close()
            finally:
                shutil.rmtree(temp_dir, ignore_errors=True)
    except _Terminated as exc:
        raise SystemExit(128 + exc.signum) from None
    except BaseException:
        if signals.received is not None:  # DuckDB turned the signal's exception into its own
            raise SystemExit(128 + signals.received) from None
        raise


def _run(con: duckdb.DuckDBPyConnection, statements: list[Any], timeout_s: float | None,
         memory_limit_bytes: int) -> tuple[list[str], list[tuple[Any, ...]]]:
    from ._db import duckdb

    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        con.interrupt()

    # beyond what a lock's wait accepts (~292 years) there is no limit in practice
    timer = threading.Timer(timeout_s, stop) if timeout_s and timeout_s < threading.TIMEOUT_MAX else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        for statement in statements:
            kind = statement_kind(_type_name(statement), statement.query)
            try:
                cur = con.execute(statement)
                columns = [d[0] for d in cur.description] if cur.description else []
                rows = _fetch(cur, len(columns), timed_out, memory_limit_bytes) if columns else []
            except _OutOfTime:
                raise QueryLimitError("timeout_s", f"stopped after {_seconds(timeout_s)} s ({{limit}})") from None
            except (duckdb.Error, RuntimeError) as exc:
                if timed_out.is_set():
                    raise QueryLimitError("timeout_s", f"stopped after {_seconds(timeout_s)} s ({{limit}})") from None
                if isinstance(exc, duckdb.InterruptException) or type(exc) is RuntimeError:
                    raise  # Ctrl-C: the command ends as interrupted, not as bad SQL
                raise _query_error(exc, kind, memory_limit_bytes) from None
    finally:
        if timer is not None:
            timer.cancel()
    return columns, rows


#: Rows are turned into Python objects this many at a time, the limits checked in between:
#: DuckDB's interrupt does not reach the conversion, and its memory limit does not cover it.
FETCH_ROWS = 10_000
#: Bytes a value of a result costs in Python, printed (an object, its slot in a row, its text
#: in the output): a result of more values than the memory limit holds at this rate is refused.
PYTHON_BYTES_PER_VALUE = 200


class _OutOfTime(Exception):
    pass


def _fetch(cur: Any, width: int, timed_out: threading.Event, memory_limit_bytes: int) -> list[tuple[Any, ...]]:
    """The rows of ``cur``, fetched in parts so that the time limit holds while they are
    converted, and refused (one line) when there are more than the memory limit holds."""
    max_rows = max(1, memory_limit_bytes // (PYTHON_BYTES_PER_VALUE * max(1, width)))
    rows: list[tuple[Any, ...]] = []
    while True:
        if timed_out.is_set():
            raise _OutOfTime
        part = cur.fetchmany(FETCH_ROWS)
        if not part:
            return rows
        rows.extend(part)
        if len(rows) > max_rows:
            raise QueryLimitError("memory_limit_bytes", f"its result has more than {max_rows:,} rows of {width} "
                                  f"column(s), more than {{limit}} {human_bytes(memory_limit_bytes)} holds once "
                                  f"printed (add a LIMIT, or aggregate)")


def _query_error(exc: Exception, kind: str, memory_limit_bytes: int) -> InputError:
    from ._db import duckdb

    reason = _reason(exc)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return QueryLimitError("memory_limit_bytes", f"needs more memory than {{limit}} {human_bytes(memory_limit_bytes)} "
                                                     f"allows, even spilling to disk ({_braces(reason)})")
    if isinstance(exc, duckdb.PermissionException):
        return InputError("query", f"{kind} is refused: {READS_ONLY} ({reason})")
    if "configuration has been locked" in reason:
        return InputError("query", f"{kind} is refused: gpuscope sql cannot change settings ({reason})")
    if "read-only" in reason.lower():
        return InputError("query", f"{kind} is refused: {READS_ONLY} ({reason})")
    return InputError("query", reason)


def _braces(text: str) -> str:
    """``text`` kept as it is through ``str.format`` (DuckDB's message may hold braces)."""
    return text.replace("{", "{{").replace("}", "}}")


def _seconds(value: float | None) -> str:
    return f"{value:g}" if value is not None else "?"


# -- JSON ------------------------------------------------------------------------------------------

def unique_columns(columns: Sequence[str]) -> list[str]:
    """The column names made distinct for JSON objects: the first of a name keeps it, a later
    one gets ``_2``, ``_3``... (skipping names the result already has), so no column is lost."""
    taken = set(columns)
    seen: set[str] = set()
    out: list[str] = []
    for name in columns:
        if name not in seen:
            seen.add(name)
            out.append(name)
            continue
        n = 2
        while f"{name}_{n}" in taken:
            n += 1
        new = f"{name}_{n}"
        taken.add(new)
        seen.add(new)
        out.append(new)
    return out


def blob_text(data: bytes) -> str:
    """A BLOB as DuckDB writes it: printable ASCII as is, every other byte (and the backslash)
    as ``\\xNN``."""
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}" for b in data)


def interval_text(value: _dt.timedelta) -> str:
    """An INTERVAL as an ISO 8601 duration in days and seconds (``P1DT3.5S``, ``-PT1S``)."""
    micros = (value.days * 86400 + value.seconds) * 10**6 + value.microseconds
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), 86400 * 10**6)
    seconds = f"{rest // 10**6}" + (f".{rest % 10**6:06d}".rstrip("0") if rest % 10**6 else "")
    return sign + "P" + (f"{days}D" if days else "") + (f"T{seconds}S" if rest or not days else "")


def json_value(value: Any) -> Any:
    """A value of a result as JSON holds it (docs/store.md): numbers as numbers (NaN and the
    infinities null, DECIMAL as a number), text, BLOB as text with ``\\xNN`` escapes, dates and
    times in ISO 8601, INTERVAL as an ISO 8601 duration, UUID as text, lists and structs as
    arrays and objects, a MAP as an object keyed by its keys' text."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(bytes(value))
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return interval_text(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = json_value(k)
            out[key if isinstance(key, str) else _key_text(key)] = json_value(v)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    return str(value)


def _key_text(key: Any) -> str:
    from .render.json import dumps

    return dumps(key)


def json_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """A result as the ``--json`` list of objects: one per row, every column kept."""
    names = unique_columns(columns)
    return [{name: json_value(v) for name, v in zip(names, row)} for row in rows]
