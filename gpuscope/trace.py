"""Kineto / Chrome-trace ingest.

A trace file is one JSON object whose ``traceEvents`` array holds the events (or, in the
JSON-array form of the Chrome trace format, just that array). Files run to gigabytes, so the
events never become Python objects:

1. :func:`spool_events` streams the (optionally gzipped) file once, parses the small top-level
   keys around ``traceEvents`` in Python, and copies the bytes of the ``traceEvents`` array into
   a spool file, holding at most a few MiB in memory at any time. :class:`SpoolAhead` runs it
   in a thread one file ahead of the parse.
2. :func:`load_trace` lets DuckDB's JSON reader parse that array (in C++, in parts of a few
   MiB cut between events by :func:`split_spool`) into a staging table, one row per event,
   with the fields gpuscope uses pulled out of ``args``. Malformed events (not an object, no
   numeric ``ts``/``dur``, negative ``dur``) are counted and skipped.
3. :func:`stage_traces` links kernels to their launch (``correlation``) and their CPU op
   (``External id``) with SQL joins and produces the rows of ``kernels``, ``ops``,
   ``annotations``, ``devices`` and ``traces``.

:func:`ingest` ties these together and writes one run in one transaction.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .kernel_names import COMMUNICATION_KERNEL_RE, MEMCPY_KERNEL_RE, MEMORY_KERNEL_RE, MEMSET_KERNEL_RE, category_sql
from .errors import GpuscopeError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

CHUNK_BYTES = 1 << 20
HEAD_LIMIT_BYTES = 64 << 20
#: How much of a trace's end is searched for the close of ``traceEvents`` (and the keys after).
TAIL_WINDOWS = (1 << 20, 64 << 20)
TRACE_SUFFIXES = (".json", ".json.gz")
#: Nesting deeper than this is refused as bad input rather than parsed.
MAX_NESTING = 512
_DEEP_RE = re.compile(rb"(?:\[\s*){%d}" % MAX_NESTING)
#: Absolute Kineto timestamps are epoch microseconds (> 1e15 since 2001); smaller values
#: without ``baseTimeNanoseconds`` are relative to an unknown base.
ABSOLUTE_US_THRESHOLD = 1e14

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# --------------------------------------------------------------------------------------------
# Step 1: stream the file, keep the header, spool the traceEvents array
# --------------------------------------------------------------------------------------------


@dataclass
class SpooledTrace:
    """One trace file after :func:`spool_events`.

    ``spool`` holds exactly the JSON text of the ``traceEvents`` array; ``header`` every other
    top-level key (``deviceProperties``, ``baseTimeNanoseconds``, ``distributedInfo``, ...).
    """

    source: Path
    spool: Path
    header: dict[str, Any]
    form: str  # "object" (Kineto) or "array" (JSON-array form of the Chrome trace format)
    size_bytes: int
    json_bytes: int


class InflateLimitError(InputError):
    """A ``.gz`` input inflates past :data:`MAX_INFLATE_RATIO`: refused, never skipped."""


#: Gzip-bomb guard: a ``.gz`` trace is refused once what it has inflated to passes both
#: :data:`INFLATE_MIN_BYTES` and :data:`MAX_INFLATE_RATIO` times the compressed bytes read so far.
#: Real Kineto traces inflate 7-21x (every trace in bench/README.md's table); whitespace or
#: zeros inflate ~1000x. 200x leaves real traces ten times the room they need, and the absolute
#: floor keeps small, highly repetitive files (which cost nothing) out of the rule.
MAX_INFLATE_RATIO = 200.0
INFLATE_MIN_BYTES = 256 << 20


class _Input:
    """A file read in chunks, transparently gunzipped, with errors named after the file, and
    refused as soon as it inflates like a gzip bomb (:data:`MAX_INFLATE_RATIO`)."""

    def __init__(self, path: Path, max_inflate_ratio: float = MAX_INFLATE_RATIO) -> None:
        self.path = path
        self.max_inflate_ratio = max_inflate_ratio
        self.inflated_bytes = 0
        try:
            raw = open(path, "rb")
        except IsADirectoryError:
            raise InputError(str(path), "is a directory") from None
        except OSError as exc:
            raise InputError(str(path), f"cannot be read ({exc.strerror or exc})") from None
        magic = raw.read(2)
        raw.seek(0)
        self.gzipped = magic == b"\x1f\x8b"
        self._f = gzip.GzipFile(fileobj=raw, mode="rb") if self.gzipped else raw
        self._raw = raw
        self.eof = False

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        try:
            data = self._f.read(n)
        except EOFError:
            raise InputError(str(self.path), "truncated gzip file (it ends before the end of its compressed stream)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(str(self.path), f"corrupt gzip data ({exc})") from None
        except OSError as exc:
            raise InputError(str(self.path), f"read error ({exc})") from None
        if not data:
            self.eof = True
        elif self.gzipped:
            self.inflated_bytes += len(data)
            if self.inflated_bytes > INFLATE_MIN_BYTES:
                compressed = max(self._raw.tell(), 1)
                if self.inflated_bytes > self.max_inflate_ratio * compressed:
                    raise InflateLimitError(
                        str(self.path),
                        f"refused: its first {compressed / 1e6:.1f} MB of gzip inflate to "
                        f"{self.inflated_bytes / 1e6:.0f} MB, more than {self.max_inflate_ratio:g}x "
                        f"(the limit; real traces inflate about 20x): a gzip bomb? "
                        f"Raise the limit with --max-inflate-ratio N")
        return data

    def close(self) -> None:
        self._f.close()
        self._raw.close()


_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


class _NeedMore(Exception):
    """The buffered head ends inside a value: read more and parse again."""


def _parse_head(text: str, at_eof: bool, source: str) -> tuple[str, dict[str, Any], int]:
    """Parse the start of a trace up to the ``[`` of its events.

    Returns ``(form, header, index of '[')``; raises :class:`_NeedMore` when ``text`` ends
    before that point and more input exists.
    """

    def need(i: int) -> None:
        if i >= len(text):
            if at_eof:
                raise InputError(source, "truncated JSON (the file ends inside the trace header)")
            raise _NeedMore

    i = _skip_ws(text, 1 if text.startswith("\ufeff") else 0)
    if i >= len(text):
        if at_eof:
            raise InputError(source, "empty file (no JSON in it)")
        raise _NeedMore
    if text[i] == "[":
        return "array", {}, i
    if text[i] != "{":
        if "\x00" in text[:512] or not text[i].isprintable():
            raise InputError(source, "not a JSON trace (binary data)")
        snippet = text[i : i + 20].splitlines()[0] if text[i:].strip() else ""
        raise InputError(source, f"not JSON (starts with {snippet!r})")
    header: dict[str, Any] = {}
    i += 1
    first = True
    while True:
        i = _skip_ws(text, i)
        need(i)
        if text[i] == "}":
            keys = ", ".join(sorted(header)[:8]) or "none"
            raise InputError(source, f"JSON but not a trace: no 'traceEvents' array (top-level keys: {keys})")
        if not first:
            if text[i] != ",":
                raise InputError(source, f"malformed JSON in the trace header (expected ',' at character {i})")
            i = _skip_ws(text, i + 1)
            need(i)
        first = False
        try:
            key, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            if not at_eof and exc.pos >= len(text) - 1:
                raise _NeedMore from None
            raise InputError(source, f"malformed JSON in the trace header ({exc.msg} at character {exc.pos})") from None
        if not isinstance(key, str):
            raise InputError(source, "malformed JSON in the trace header (an object key is not a string)")
        i = _skip_ws(text, i)
        need(i)
        if text[i] != ":":
            raise InputError(source, f"malformed JSON in the trace header (expected ':' at character {i})")
        i = _skip_ws(text, i + 1)
        need(i)
        if key == "traceEvents":
            if text[i] != "[":
                raise InputError(source, "'traceEvents' is not a list")
            return "object", header, i
        try:
            value, i = _DECODER.raw_decode(text, i)
        except RecursionError:
            raise InputError(source, f"JSON nested too deeply in the top-level key {key!r}") from None
        except json.JSONDecodeError as exc:
            if not at_eof and exc.pos >= len(text) - 1:
                raise _NeedMore from None
            raise InputError(source, f"malformed JSON in the trace header ({exc.msg} at character {exc.pos})") from None
        header[key] = value


def _parse_rest(text: str, i: int) -> dict[str, Any] | None:
    """Parse ``text[i:]`` as what follows the closing ``]`` of ``traceEvents``:
    ``(, "key": value)* }`` and nothing else. Returns the keys found, or None when it is not
    such a remainder."""
    out: dict[str, Any] = {}
    n = len(text)
    i = _skip_ws(text, i)
    try:
        while True:
            if i >= n:
                return None
            c = text[i]
            if c == "}":
                return out if _skip_ws(text, i + 1) == n else None
            if c != ",":
                return None
            i = _skip_ws(text, i + 1)
            key, i = _DECODER.raw_decode(text, i)
            if not isinstance(key, str):
                return None
            i = _skip_ws(text, i)
            if i >= n or text[i] != ":":
                return None
            value, i = _DECODER.raw_decode(text, _skip_ws(text, i + 1))
            out[key] = value
            i = _skip_ws(text, i)
    except (json.JSONDecodeError, RecursionError, IndexError):
        return None


def _find_events_end(tail: bytes, source: str) -> tuple[int, dict[str, Any]]:
    """Find the ``]`` closing ``traceEvents`` in the last bytes of an object-form trace.

    Returns its byte offset in ``tail`` and the top-level keys after it. Only a ``]`` right
    after ``}`` (the last event) or ``[`` (no events) can close the array, and the text after
    the right one parses as the rest of the top-level object; a ``]`` inside an event never
    does (the remainder would hold unbalanced closers). Of the candidates that parse, the true
    one is followed by the most keys (a later one closes a top-level array such as
    ``deviceProperties``).
    """
    text = tail.decode("utf-8", "surrogateescape")
    best: tuple[int, dict[str, Any]] | None = None
    for strict in (True, False):  # the lax pass only for a last element that is not an object
        pos = len(text)
        checks = 0
        while checks < 4096:
            pos = text.rfind("]", 0, pos)
            if pos < 0:
                break
            j = pos - 1
            while j >= 0 and text[j] in _WS:
                j -= 1
            if not strict or (j >= 0 and text[j] in "}["):
                checks += 1
                rest = _parse_rest(text, pos + 1)
                if rest is not None and (best is None or len(rest) >= len(best[1])):
                    best = (pos, rest)
        if best is not None:
            break
    if best is None:
        raise InputError(source, "truncated or malformed JSON (cannot find the end of the 'traceEvents' array)")
    return len(text[: best[0]].encode("utf-8", "surrogateescape")), best[1]


def _events_end(out: Any, size: int, form: str, header: dict[str, Any], source: str) -> int:
    """Byte offset just past the events array in the spool file ``out`` (``size`` bytes long),
    found by reading its end back from disk; the keys after the array go into ``header``."""
    for window in TAIL_WINDOWS:
        start = max(0, size - window)
        out.seek(start)
        tail = out.read(size - start)
        if form == "array":
            stripped = tail.rstrip()
            if not stripped.endswith(b"]"):
                raise InputError(source, "truncated or malformed JSON (the event array has no closing ']')")
            return start + len(stripped)
        try:
            pos, rest = _find_events_end(tail, source)
        except InputError:
            if start == 0:
                raise
            continue
        header.update(rest)
        return start + pos + 1
    raise InputError(source, "truncated or malformed JSON (cannot find the end of the 'traceEvents' array)")


class SpoolStopped(Exception):
    """:func:`spool_events` was asked to stop before it finished."""


def spool_events(path: Path, spool_dir: Path, stop: threading.Event | None = None,
                 max_inflate_ratio: float = MAX_INFLATE_RATIO) -> SpooledTrace:
    """Stream ``path`` once and write the JSON text of its events array to a file in
    ``spool_dir``. Memory stays within a few MiB whatever the size of the trace. Setting
    ``stop`` (from another thread) ends it at the next MiB with :class:`SpoolStopped`."""
    source = str(path)
    inp = _Input(path, max_inflate_ratio)
    try:
        head = bytearray()
        while True:
            chunk = inp.read(CHUNK_BYTES)
            head += chunk
            text = head.decode("utf-8", "surrogateescape")
            try:
                form, header, start = _parse_head(text, inp.eof, source)
                break
            except _NeedMore:
                if len(head) > HEAD_LIMIT_BYTES:
                    raise InputError(source, f"no 'traceEvents' array in the first {HEAD_LIMIT_BYTES >> 20} MiB") from None
        start_byte = len(text[:start].encode("utf-8", "surrogateescape"))
        try:
            fd, spool_name = tempfile.mkstemp(prefix="events-", suffix=".json", dir=spool_dir)
            spool = Path(spool_name)
            written = 0
            with os.fdopen(fd, "w+b") as out:
                data = bytes(head[start_byte:])
                del head, text
                while data:
                    if stop is not None and stop.is_set():
                        raise SpoolStopped(source)
                    if b"[[[[[[[[[[[[[[[[" in data and _DEEP_RE.search(data):
                        raise InputError(source, f"JSON nested more than {MAX_NESTING} levels deep")
                    out.write(data)
                    written += len(data)
                    data = inp.read(CHUNK_BYTES)
                end = _events_end(out, written, form, header, source)
                out.truncate(end)
        except OSError as exc:  # the temporary folder is full or not writable
            raise GpuscopeError(
                f"{source}: cannot write a temporary copy of its events in {spool_dir} "
                f"({exc.strerror or exc}); set TMPDIR to a folder with room for the uncompressed trace"
            ) from None
        json_bytes = start_byte + written
    finally:
        inp.close()
    return SpooledTrace(path, spool, header, form, path.stat().st_size, json_bytes)


def inputs_digest(files: Sequence[Path]) -> str:
    """A digest of the trace files' contents (not their names or times): the same traces give
    the same digest wherever they were copied. SHA-256 over each file's bytes, in order."""
    import hashlib

    whole = hashlib.sha256()
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        whole.update(h.digest())
    return whole.hexdigest()


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; directories expanded to every ``*.json`` / ``*.json.gz`` inside
    (recursively, sorted). Raises :class:`InputError` for a missing path or an empty directory."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise InputError(str(path), "no such file or directory")
        if path.is_dir():
            found = sorted(
                f for f in path.rglob("*") if f.is_file() and f.name.lower().endswith(TRACE_SUFFIXES)
            )
            if not found:
                raise InputError(str(path), "directory holds no trace files (*.json, *.json.gz, *.pt.trace.json[.gz])")
            out.extend(found)
        else:
            out.append(path)
    if not out:
        raise InputError("ingest", "no trace files given")
    seen: set[Path] = set()
    unique = []
    for f in out:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


# --------------------------------------------------------------------------------------------
# Step 2: DuckDB parses the events array into a staging table
# --------------------------------------------------------------------------------------------

# (column, key in the event or in its args, SQL conversion of the extracted text `{x}`)
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("ph", "ph", "{x}"),
    ("cat", "cat", "{x}"),
    ("name", "name", "{x}"),
    ("ts_us", "ts", "TRY_CAST({x} AS DOUBLE)"),
    ("dur_us", "dur", "TRY_CAST({x} AS DOUBLE)"),
    ("pid", "pid", "{x}"),
    ("tid", "tid", "{x}"),
    ("ext_a", "args.External id", "TRY_CAST({x} AS BIGINT)"),
    ("ext_b", "args.external id", "TRY_CAST({x} AS BIGINT)"),
    ("correlation", "args.correlation", "TRY_CAST({x} AS BIGINT)"),
    ("device", "args.device", "{x}"),
    ("stream", "args.stream", "TRY_CAST({x} AS BIGINT)"),
    ("grid", "args.grid", "TRY_CAST({x} AS INTEGER[])"),
    ("block", "args.block", "TRY_CAST({x} AS INTEGER[])"),
    ("registers", "args.registers per thread", "TRY_CAST({x} AS INTEGER)"),
    ("shared_memory", "args.shared memory", "TRY_CAST({x} AS BIGINT)"),
    ("occupancy_pct", "args.est. achieved occupancy %", "TRY_CAST({x} AS DOUBLE)"),
    ("bytes", "args.bytes", "TRY_CAST({x} AS BIGINT)"),
    ("input_dims", "args.Input Dims", "{x}"),
    ("input_types", "args.Input type", "{x}"),
    ("input_strides", "args.Input Strides", "{x}"),
    ("concrete_inputs", "args.Concrete Inputs", "{x}"),
    ("sequence_number", "args.Sequence number", "TRY_CAST({x} AS BIGINT)"),
    ("launch_kernel", "args.kernel", "{x}"),
)
_FIELD_NAMES = tuple(f[0] for f in _FIELDS)
#: The parsed fields as the staging table ``ev`` keeps them (the two spellings of External id
#: are one column there; times are ``ts_ns`` / ``dur_ns``).
_EV_COLUMNS = tuple(
    "ext_id" if n == "ext_a" else n for n in _FIELD_NAMES if n not in ("ext_b", "ts_us", "dur_us")
)
#: Read as JSON text, so that only JSON numbers count as times: a string ("200") or a boolean
#: ``ts``/``dur`` makes the event malformed, as the reference definition has it.
_NUMERIC_TOP = ("ts", "dur")
#: The staged events gpuscope uses (the others are only counted): they alone get times.
_USABLE = "cls IN ('gpu', 'op', 'runtime', 'annotation')"


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _sql_ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


#: The index of the part (:func:`split_spool`) an event was read from; 0 for a whole spool.
#: With ``rowid`` it gives the event's position in the trace: several threads may insert
#: the parts' rows interleaved, but each part's rows in order.
_PART_SQL = r"coalesce(TRY_CAST(regexp_extract(filename, '\.part(\d+)\.json$', 1) AS INTEGER), 0)"


def _file_list(files: Sequence[Path]) -> str:
    return "[" + ", ".join(_sql_str(str(f)) for f in files) + "]"


def _typed_source(files: Sequence[Path]) -> str:
    """Events read by DuckDB into typed columns: the fast path. It fails on events that do not
    fit the types (a non-object element, a string ``ts``, duplicate keys in ``args``, ...)."""
    top = [k for _, k, _ in _FIELDS if not k.startswith("args.")]
    arg_keys: list[str] = []
    seen: set[str] = set()
    for _, k, _ in _FIELDS:
        # DuckDB struct fields are case-insensitive: "external id" comes from the lenient path.
        if k.startswith("args.") and k[5:].lower() not in seen:
            seen.add(k[5:].lower())
            arg_keys.append(k[5:])
    cols = [f"{k}: {_sql_str('JSON' if k in _NUMERIC_TOP else 'VARCHAR')}" for k in top]
    struct = ", ".join(f"{_sql_ident(k)} VARCHAR" for k in arg_keys)
    cols.append(f"args: {_sql_str(f'STRUCT({struct})')}")
    sel = []
    for name, key, _ in _FIELDS:
        if not key.startswith("args."):
            sel.append(f"{key} AS {name}")
        elif key[5:] in arg_keys:
            sel.append(f"args.{_sql_ident(key[5:])} AS {name}")
        else:
            sel.append(f"NULL AS {name}")
    return (
        f"SELECT 'OBJECT' AS jtype, {', '.join(sel)}, {_PART_SQL} AS part FROM read_json({_file_list(files)}, "
        f"format='array', columns={{{', '.join(cols)}}}, maximum_object_size=16777216, filename=true)"
    )


def _lenient_source(files: Sequence[Path]) -> str:
    """Events read as JSON text with every field pulled out by path: never fails on an event
    that is valid JSON, whatever its shape."""
    paths, sel = [], []
    for name, key, _ in _FIELDS:
        if key in _NUMERIC_TOP:  # as JSON text: a string "200" keeps its quotes and is no number
            sel.append(f"json_extract(json, {_sql_str('$.' + key)}) AS {name}")
            continue
        paths.append("$.args." + _sql_ident(key[5:]) if key.startswith("args.") else "$." + key)
        sel.append(f"v[{len(paths)}] AS {name}")
    plist = "[" + ", ".join(_sql_str(p) for p in paths) + "]"
    return (
        f"SELECT json_type(json) AS jtype, {', '.join(sel)}, part FROM (SELECT json, json_extract_string(json, {plist}) "
        f"AS v, {_PART_SQL} AS part FROM read_json_objects({_file_list(files)}, format='array', "
        f"maximum_object_size=16777216, filename=true))"
    )


#: Categories of GPU activity, lower-cased. ``memcpy`` and ``memset`` are the names older
#: Kineto (PyTorch 1.8-1.9) gave ``gpu_memcpy`` and ``gpu_memset`` (as ``Memcpy``/``Memset``,
#: next to ``Kernel`` and ``Runtime``); Holistic Trace Analysis counts them as memory kernels.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
OP_CATEGORIES = ("cpu_op", "operator")
ANNOTATION_CATEGORIES = ("user_annotation", "gpu_user_annotation")


def _ns(ts: str, base: int) -> str:
    # Split whole and fractional microseconds: absolute epoch µs (~1.7e15) times 1000 does not
    # fit a double's 53 bits exactly, but each part does.
    return (
        f"({int(base)} + CAST(floor({ts}) AS BIGINT) * 1000 + "
        f"CAST(round(({ts} - floor({ts})) * 1000) AS BIGINT))"
    )


def _insert_sql(trace_id: int, base_ns: int, source: str) -> str:
    gpu = ", ".join(_sql_str(c) for c in GPU_CATEGORIES)
    ops = ", ".join(_sql_str(c) for c in OP_CATEGORIES)
    ann = ", ".join(_sql_str(c) for c in ANNOTATION_CATEGORIES)
    conv = ", ".join(c.format(x=name) + f" AS {name}" for name, _, c in _FIELDS if name not in ("ts_us", "dur_us"))
    kept = ["coalesce(ext_a, ext_b) AS ext_id" if n == "ext_id" else n for n in _EV_COLUMNS]
    return f"""
INSERT INTO ev
SELECT {trace_id} AS trace_id, cls, {', '.join(kept)},
       CASE WHEN {_USABLE} THEN {_ns('ts_us', base_ns)} END AS ts_ns,
       CASE WHEN {_USABLE} THEN CAST(round(dur_us * 1000) AS BIGINT) END AS dur_ns,
       part
FROM (
  SELECT *,
    CASE
      WHEN jtype <> 'OBJECT' THEN 'malformed:not an object'
      WHEN lc IN ({gpu}) OR lc IN ({ops}) OR lc IN ({ann}) OR lc LIKE '%runtime' OR lc LIKE '%driver' THEN
        CASE WHEN coalesce(ph, 'X') NOT IN ('X', 'x') THEN 'ignored'
             WHEN ts_us IS NULL OR NOT isfinite(ts_us) THEN 'malformed:no numeric ts'
             WHEN dur_us IS NULL OR NOT isfinite(dur_us) THEN 'malformed:no numeric dur'
             WHEN dur_us < 0 THEN 'malformed:negative dur'
             WHEN lc IN ({gpu}) THEN 'gpu'
             WHEN lc IN ({ops}) AND name LIKE 'ProfilerStep#%' THEN 'annotation'
             WHEN lc IN ({ops}) THEN 'op'
             WHEN lc IN ({ann}) THEN 'annotation'
             ELSE 'runtime' END
      ELSE 'ignored' END AS cls
  FROM (
    SELECT jtype, {conv}, TRY_CAST(ts_us::VARCHAR AS DOUBLE) AS ts_us, TRY_CAST(dur_us::VARCHAR AS DOUBLE) AS dur_us,
           lower(cat) AS lc, part
    FROM ({source})
  )
)"""


#: ``cls`` as an ENUM (one byte a row instead of a 16-byte string slot): the parsed events are
#: the largest thing ingest holds (4 MiB less peak on the 131k-event vLLM trace).
_EV_DDL = (
    "CREATE TYPE ev_class AS ENUM ('gpu', 'op', 'runtime', 'annotation', 'ignored', 'malformed:not an object', "
    "'malformed:no numeric ts', 'malformed:no numeric dur', 'malformed:negative dur'); "
    "CREATE TEMP TABLE ev (trace_id INTEGER, cls ev_class, ph VARCHAR, cat VARCHAR, name VARCHAR, "
    "pid VARCHAR, tid VARCHAR, ext_id BIGINT, correlation BIGINT, "
    "device VARCHAR, stream BIGINT, grid INTEGER[], block INTEGER[], registers INTEGER, shared_memory BIGINT, "
    "occupancy_pct DOUBLE, bytes BIGINT, input_dims VARCHAR, input_types VARCHAR, input_strides VARCHAR, "
    "concrete_inputs VARCHAR, sequence_number BIGINT, launch_kernel VARCHAR, ts_ns BIGINT, dur_ns BIGINT, "
    "part INTEGER)"
)


def _time_base(header: dict[str, Any]) -> int:
    base = header.get("baseTimeNanoseconds")
    if isinstance(base, (int, float)) and not isinstance(base, bool) and base > 0:
        return int(base)
    return 0


#: The events are handed to DuckDB's JSON reader as JSON arrays of about this size, cut from
#: the spool. The reader holds a whole input file in its buffer (on the A100 trace, 24 MiB of
#: events raised the peak by 33 MiB); parts bound that to a few MiB whatever the trace size.
SPOOL_PART_BYTES = 4 << 20
#: A separator between two objects that holds a newline. JSON strings cannot hold a raw
#: newline, so every match is structural; it separates two events when the objects are at the
#: array's top level, which a cut checks by parsing (a wrong cut fails and the whole spool is
#: read instead). Compact one-line JSON has none and is read whole.
_PART_CUT_RE = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
_CUT_WINDOW = 1 << 16


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> None:
    """Copy ``count`` bytes at ``offset`` of ``src_fd`` to the end of ``dst_fd``, in the kernel
    where it can."""
    while count > 0:
        try:
            n = os.copy_file_range(src_fd, dst_fd, min(count, 1 << 30), offset)
        except (AttributeError, OSError):
            n = 0
        if n <= 0:  # not supported here (or by this file system): copy through memory
            data = os.pread(src_fd, min(count, CHUNK_BYTES), offset)
            if not data:
                raise OSError(f"unexpected end of spool at byte {offset}")
            n = os.write(dst_fd, data)
        offset += n
        count -= n


def split_spool(spool: Path, part_bytes: int | None = None) -> list[Path]:
    """The events array in ``spool`` as several JSON arrays of about ``part_bytes`` (default
    :data:`SPOOL_PART_BYTES`) each, cut between two events (files next to ``spool``, which is
    left as it is). Returns ``[spool]`` when it is small or has no place to cut."""
    part_bytes = part_bytes or SPOOL_PART_BYTES
    size = spool.stat().st_size
    if size < 2 * part_bytes or not hasattr(os, "pread"):  # (no pread: Windows)
        return [spool]
    cuts: list[tuple[int, int]] = []  # (end of a part: after its '}', start of the next: its '{')
    fd = os.open(spool, os.O_RDONLY)
    try:
        pos = part_bytes
        while pos < size - part_bytes // 2:
            window = os.pread(fd, _CUT_WINDOW, pos)
            m = _PART_CUT_RE.search(window)
            if m is None:
                if len(window) < _CUT_WINDOW:
                    break
                pos += _CUT_WINDOW - 256  # overlap, so a separator across the edge is found
                continue
            cuts.append((pos + m.start() + 1, pos + m.end() - 1))
            pos = pos + m.end() - 1 + part_bytes
        if not cuts:
            return [spool]
        parts: list[Path] = []
        starts = [0] + [b for _, b in cuts]
        ends = [a for a, _ in cuts] + [size]
        try:
            for i, (start, end) in enumerate(zip(starts, ends)):
                path = spool.with_name(f"{spool.stem}.part{i}.json")
                parts.append(path)
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    if i:
                        os.write(out, b"[")
                    _copy_range(fd, out, start, end - start)
                    if i < len(cuts):
                        os.write(out, b"]")
                finally:
                    os.close(out)
        except BaseException as exc:
            for path in parts:
                path.unlink(missing_ok=True)
            if isinstance(exc, OSError):  # no room for the parts (disk full): read the spool whole
                return [spool]
            raise
        return parts
    finally:
        os.close(fd)


def load_trace(con: duckdb.DuckDBPyConnection, trace_id: int, spooled: SpooledTrace, base_ns: int) -> int:
    """Parse the spooled events of one trace into the temp table ``ev`` (one row per event,
    classified); returns the number of events. Tries DuckDB's typed reader first and falls back
    to the lenient one for traces whose events do not fit its types. The spool is read in parts
    (:func:`split_spool`) when it can be cut; if the parts do not parse, it is read whole."""
    parts = split_spool(spooled.spool)
    try:
        if len(parts) > 1:
            try:
                return _insert_events(con, trace_id, base_ns, spooled, parts)
            except InputError:  # a cut that was not between two events, or malformed JSON
                pass  # (a failed INSERT leaves nothing behind)
        return _insert_events(con, trace_id, base_ns, spooled, [spooled.spool])
    finally:
        for part in parts:
            if part != spooled.spool:
                part.unlink(missing_ok=True)


def _insert_events(
    con: duckdb.DuckDBPyConnection, trace_id: int, base_ns: int, spooled: SpooledTrace, files: Sequence[Path]
) -> int:
    """Read the events in ``files`` (one JSON array each) into ``ev``; returns how many went in."""
    from ._db import duckdb

    for source in (_typed_source, _lenient_source):
        try:
            return int(con.execute(_insert_sql(trace_id, base_ns, source(files))).fetchone()[0])
        except duckdb.OutOfMemoryException:
            raise  # left to stage_traces, which retries without its memory limit
        except (duckdb.IOException, duckdb.InterruptException) as exc:
            raise GpuscopeError(f"{spooled.source}: {str(exc).splitlines()[0]}") from None
        except duckdb.Error as exc:
            if source is _typed_source:
                continue  # events that do not fit the typed reader: read them leniently
            raise InputError(str(spooled.source), f"malformed JSON in the events ({_reader_error(exc, files)})") from None


def _reader_error(exc: Exception, files: Sequence[Path]) -> str:
    """DuckDB's JSON reader error as a user reads it: without the error class, the spool's
    temporary file names or the trailing punctuation, and in words where its own are cryptic."""
    msg = re.sub(r"^[A-Za-z ]*Error: ", "", str(exc).splitlines()[0]).strip().rstrip(".").strip()
    for f in files:
        msg = msg.replace(str(f), "traceEvents")
    # "Malformed JSON in file "<part>", at byte B in record/value N: why": B and N count within
    # one part of the spool, which means nothing to the user; the reason does
    m = re.match(r'^Malformed JSON in file "traceEvents", at byte \d+ in record/value \d+: (.+)$', msg)
    if m:
        msg = m.group(1)
    if msg == "input length is 0":
        msg = "an empty element in the event array (a stray comma?)"
    return msg


# --------------------------------------------------------------------------------------------
# Step 3: link and classify with SQL
# --------------------------------------------------------------------------------------------

#: Categories of accelerators that are not GPUs gpuscope models (their events are ingested).
ACCELERATOR_PREFIXES = {"mtia": "MTIA", "xpu": "Intel XPU", "hpu": "Gaudi HPU", "privateuse1": "PrivateUse1"}
COMM_RE = COMMUNICATION_KERNEL_RE
MEM_KERNEL_RE = MEMORY_KERNEL_RE


@dataclass
class TraceInfo:
    """What ingest learned about one trace file."""

    trace_id: int
    path: str
    form: str
    size_bytes: int
    json_bytes: int
    events: int
    base_time_ns: int
    ts_relative: bool
    rank: int | None
    header: dict[str, Any]
    #: Events named ``*StreamBeginCapture`` and ``*GraphLaunch`` (any category): design.md §4.2
    #: leaves out a trace that only captures graphs beside one that launches them.
    graph_events: dict[str, int] = field(default_factory=dict)


def _rank(header: dict[str, Any]) -> int | None:
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    return None


def _device_properties(header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    props = header.get("deviceProperties")
    items: list[Any]
    if isinstance(props, dict):
        # dict form: {"0": {...}} or a single device's properties
        if "name" in props or "id" in props:
            items = [props]
        else:
            items = []
            for k, v in props.items():
                if isinstance(v, dict):
                    v = dict(v)
                    v.setdefault("id", int(k) if str(k).isdigit() else k)
                    items.append(v)
    elif isinstance(props, list):
        items = props
    else:
        items = []
    out: dict[int, dict[str, Any]] = {}
    for n, p in enumerate(items):
        if isinstance(p, dict):
            idx = p.get("id", n)
            if isinstance(idx, int):
                out[idx] = p
    return out


def _vendor(props: dict[str, Any] | None, runtime_hip: int, runtime_cuda: int, accel: str | None) -> tuple[str, str]:
    """(vendor, kind) of a device from its properties and the trace's runtime names."""
    if accel:
        return {"MTIA": "meta", "Intel XPU": "intel", "Gaudi HPU": "intel"}.get(accel, "unknown"), "accelerator"
    name = str((props or {}).get("name") or "")
    lname = name.lower()
    if any(s in lname for s in ("amd", "radeon", "instinct", " mi2", " mi3")):
        return "amd", "gpu"
    if any(s in lname for s in ("nvidia", "tesla", "geforce", "quadro", "rtx", "a100", "h100", "h200", "b200", "l40", "l4")):
        return "nvidia", "gpu"
    if props and props.get("warpSize") == 64:
        return "amd", "gpu"
    if runtime_hip > runtime_cuda:
        return "amd", "gpu"
    if runtime_cuda > 0 or (props and props.get("warpSize") == 32):
        return "nvidia", "gpu"
    return "unknown", "gpu"


#: The key of ``traces.metadata`` under which ingest records the trace's graph capture and
#: launch events (analyzers/scope.py reads it).
GRAPH_EVENTS_KEY = "gpuscope_graph_events"

#: Every temporary table ingest creates on its staging connection.
STAGING_TABLES = (
    "ev", "gpu", "rt", "capture_window", "captured", "op_stage", "annotation_stage", "op_by_ext", "rt_link",
    "op_depth", "kernel_stage", "op_parent", "graph_stage", "op_launching", "graph_map", "dev_map",
)

#: Step 3a: split the parsed events (``ev``) into the tables linking works on. Orderings end
#: with ``part, rowid``, the event's position in the trace, so that events with equal times (an
#: op and the op it wraps, both 5 µs long at µs resolution; Kineto writes the outer one first)
#: come out the same way on one thread or several.
_EXTRACT_SQL = """
CREATE TEMP TABLE gpu AS
SELECT e.trace_id,
       coalesce(e.device, e.pid, '?') AS dev_label,
       TRY_CAST(coalesce(e.device, e.pid) AS INTEGER) AS device_index,
       e.stream,
       CASE WHEN lower(e.cat) IN ('gpu_memcpy', 'memcpy') THEN 'memcpy'
            WHEN lower(e.cat) IN ('gpu_memset', 'memset') THEN 'memset'
            WHEN regexp_matches(coalesce(e.name, ''), '{memcpy}', 'i') THEN 'memcpy'
            WHEN regexp_matches(coalesce(e.name, ''), '{memset}', 'i') THEN 'memset'
            ELSE 'kernel' END AS kind,
       e.name, e.ts_ns, e.dur_ns, e.correlation,
       e.ext_id,
       e.grid, e.block, e.registers, e.shared_memory, e.occupancy_pct, e.bytes
FROM ev e
WHERE e.cls = 'gpu';

CREATE TEMP TABLE rt AS
SELECT trace_id, correlation, name, ts_ns, dur_ns, ext_id, pid, tid
FROM ev WHERE cls = 'runtime' AND correlation IS NOT NULL
  AND (trace_id, correlation) IN (SELECT trace_id, correlation FROM gpu WHERE correlation IS NOT NULL)
QUALIFY row_number() OVER (PARTITION BY trace_id, correlation ORDER BY ts_ns, part, rowid) = 1;

-- Kernel launches made while a CUDA/HIP graph was being captured: inside a
-- *StreamBeginCapture .. *StreamEndCapture window of their process, naming their kernel
-- (args.kernel), with no GPU activity of their own. Each window is one graph.
CREATE TEMP TABLE capture_window AS
SELECT trace_id, pid, ts_ns AS begin_ns,
       lead(ts_ns) OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, part, rowid) AS end_ns,
       name LIKE '%EndCapture%' AS is_end,
       lead(name LIKE '%EndCapture%') OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, part, rowid) AS next_is_end
FROM ev WHERE cls = 'runtime' AND (name LIKE '%StreamBeginCapture%' OR name LIKE '%StreamEndCapture%');

CREATE TEMP TABLE captured AS
SELECT e.trace_id, w.begin_ns AS graph_begin_ns, e.correlation, e.name AS launch_name,
       e.launch_kernel AS kernel_name, e.ts_ns, e.dur_ns, e.ext_id, e.pid, e.tid,
       e.grid, e.block
FROM ev e JOIN capture_window w
  ON w.trace_id = e.trace_id AND w.pid = e.pid AND NOT w.is_end AND w.next_is_end
 AND e.ts_ns BETWEEN w.begin_ns AND w.end_ns
WHERE e.cls = 'runtime' AND e.launch_kernel IS NOT NULL AND e.correlation IS NOT NULL
  AND (e.trace_id, e.correlation) NOT IN (SELECT trace_id, correlation FROM gpu WHERE correlation IS NOT NULL);

INSERT INTO rt SELECT trace_id, correlation, launch_name, ts_ns, dur_ns, ext_id, pid, tid FROM captured;

CREATE TEMP TABLE op_stage AS
SELECT row_number() OVER (ORDER BY trace_id, ts_ns, dur_ns DESC, part, rowid) - 1 AS op_id,
       trace_id, pid, tid, name, ts_ns, dur_ns, ext_id AS external_id, sequence_number,
       input_dims, input_types, input_strides, concrete_inputs
FROM ev WHERE cls = 'op';

CREATE TEMP TABLE annotation_stage AS
SELECT trace_id,
       CASE WHEN name LIKE 'ProfilerStep#%' THEN 'profiler_step' ELSE lower(cat) END AS kind,
       name, ts_ns, dur_ns,
       CASE WHEN lower(cat) = 'gpu_user_annotation' THEN coalesce(device, pid) END AS dev_label,
       pid, tid
FROM ev WHERE cls = 'annotation';
"""

#: Linking, on the tables above only (``ev`` is dropped before it runs, to keep memory low).
_LINK_SQL = """
CREATE TEMP TABLE op_by_ext AS
SELECT trace_id, external_id, op_id, ts_ns, dur_ns FROM op_stage WHERE external_id IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY trace_id, external_id ORDER BY dur_ns, op_id) = 1;

-- A launch belongs to the op whose External id it carries, if that op encloses it in time
-- (some Kineto versions wrote the correlation id there instead).
CREATE TEMP TABLE rt_link AS
SELECT r.trace_id, r.correlation, o.op_id
FROM rt r JOIN op_by_ext o ON o.trace_id = r.trace_id AND o.external_id = r.ext_id
WHERE r.ts_ns BETWEEN o.ts_ns - 1000 AND o.ts_ns + o.dur_ns + 1000;

-- Otherwise to the innermost op on its thread that encloses it (as HTA's call stacks do):
-- depth of every op from a sweep over op boundaries, the number of ops open at each launch
-- from a second sweep, then an ASOF join to the latest op started at depth open - 1.
CREATE TEMP TABLE op_depth AS
WITH b AS (
    SELECT trace_id, pid, tid, op_id, ts_ns AS t, 1 AS delta, 1 AS ord, dur_ns FROM op_stage
    UNION ALL
    SELECT trace_id, pid, tid, op_id, ts_ns + dur_ns, -1, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END, dur_ns FROM op_stage
), s AS (
    SELECT *, sum(delta) OVER (PARTITION BY trace_id, pid, tid ORDER BY t, ord, dur_ns DESC, op_id
                               ROWS UNBOUNDED PRECEDING) AS running
    FROM b
)
SELECT s.trace_id, s.pid, s.tid, s.op_id, s.t AS ts_ns, s.running - 1 AS depth FROM s WHERE delta = 1;

"""

#: Launches that no op claims by External id, linked to the innermost op on their thread
#: that encloses them (run only when there are such launches: the sweep costs ~30 ms per
#: 100k events even when it finds nothing to do).
_UNCLAIMED_LAUNCHES = "FROM rt WHERE (trace_id, correlation) NOT IN (SELECT trace_id, correlation FROM rt_link)"
_ENCLOSING_LINK_SQL = f"""
INSERT INTO rt_link
WITH q AS (
    SELECT trace_id, pid, tid, correlation, ts_ns {_UNCLAIMED_LAUNCHES}
), b AS (
    SELECT trace_id, pid, tid, NULL::BIGINT AS correlation, ts_ns AS t, 1 AS delta, 0 AS ord FROM op_stage
    UNION ALL SELECT trace_id, pid, tid, NULL, ts_ns + dur_ns, -1, 2 FROM op_stage
    UNION ALL SELECT trace_id, pid, tid, correlation, ts_ns, 0, 1 FROM q
), s AS (
    SELECT *, sum(delta) OVER (PARTITION BY trace_id, pid, tid ORDER BY t, ord ROWS UNBOUNDED PRECEDING) AS open
    FROM b
), launches AS (
    SELECT trace_id, pid, tid, correlation, t AS ts_ns, open FROM s WHERE ord = 1 AND open > 0
)
SELECT l.trace_id, l.correlation, d.op_id
FROM launches l ASOF JOIN op_depth d
  ON d.trace_id = l.trace_id AND d.pid = l.pid AND d.tid = l.tid AND d.depth = l.open - 1 AND l.ts_ns >= d.ts_ns;
"""

#: Linking, after the launches are all claimed: kernels with their launch and op, the op tree.
_FINISH_LINK_SQL = """
CREATE TEMP TABLE kernel_stage AS
SELECT g.trace_id, g.dev_label, g.device_index, g.stream, g.kind,
       {category} AS category,
       g.name, g.ts_ns, g.dur_ns, g.correlation, coalesce(g.ext_id, r.ext_id) AS external_id,
       CASE WHEN r.name ILIKE '%GraphLaunch%' THEN NULL
            ELSE coalesce(l.op_id, CASE WHEN r.correlation IS NULL THEN o.op_id END) END AS op_id,
       r.name AS launch_name, r.ts_ns AS launch_ts_ns, r.dur_ns AS launch_dur_ns,
       g.grid, g.block, g.registers AS registers_per_thread, g.shared_memory AS shared_memory_bytes,
       g.occupancy_pct / 100.0 AS occupancy, g.bytes,
       CASE WHEN r.name ILIKE '%GraphLaunch%' THEN 'graph_replay'
            WHEN coalesce(l.op_id, CASE WHEN r.correlation IS NULL THEN o.op_id END) IS NOT NULL
            THEN 'launch' END AS attribution
FROM gpu g
LEFT JOIN rt r ON r.trace_id = g.trace_id AND r.correlation = g.correlation
LEFT JOIN rt_link l ON l.trace_id = g.trace_id AND l.correlation = g.correlation
LEFT JOIN op_by_ext o ON o.trace_id = g.trace_id AND o.external_id = g.ext_id;

-- Each op's parent: the latest op one level up on its thread that started no later.
CREATE TEMP TABLE op_parent AS
SELECT c.op_id, p.op_id AS parent_op_id
FROM op_depth c ASOF JOIN op_depth p
  ON p.trace_id = c.trace_id AND p.pid = c.pid AND p.tid = c.tid AND p.depth = c.depth - 1 AND c.ts_ns >= p.ts_ns
WHERE c.depth > 0;

-- Ops that launched GPU activity, and their ancestors.
CREATE TEMP TABLE graph_stage AS
SELECT c.trace_id, c.graph_begin_ns,
       row_number() OVER (PARTITION BY c.trace_id, c.graph_begin_ns ORDER BY c.ts_ns, c.correlation) - 1 AS seq,
       c.kernel_name, c.launch_name, c.ts_ns, c.correlation, l.op_id, c.grid, c.block
FROM captured c LEFT JOIN rt_link l ON l.trace_id = c.trace_id AND l.correlation = c.correlation;

CREATE TEMP TABLE op_launching AS
WITH RECURSIVE anc(op_id) AS (
    SELECT DISTINCT op_id FROM kernel_stage WHERE op_id IS NOT NULL
    UNION
    SELECT DISTINCT op_id FROM graph_stage WHERE op_id IS NOT NULL
    UNION
    SELECT p.parent_op_id FROM anc JOIN op_parent p ON p.op_id = anc.op_id
)
SELECT op_id FROM anc;

"""


@dataclass
class IngestResult:
    """What :func:`ingest` did: the run it wrote and the counts of what it loaded and skipped."""

    run_id: int
    name: str
    files: list[dict[str, Any]]
    events: int
    loaded: dict[str, int]
    skipped: dict[str, int]
    ignored: dict[str, int]
    linked: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: With ``ingest(..., keep_open=True)``: an open connection whose current database is the
    #: store (the caller closes it); None otherwise.
    connection: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``ingest --json`` document."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "files": self.files,
            "events": self.events,
            "loaded": self.loaded,
            "skipped": {"malformed": sum(self.skipped.values()), "reasons": self.skipped},
            "ignored": self.ignored,
            "linked": self.linked,
            "notes": self.notes,
        }


def default_run_name(paths: Sequence[Path]) -> str:
    """A run name from the first input: its file name without trace suffixes."""
    name = paths[0].name
    if len(paths) > 1 and all(p.parent == paths[0].parent for p in paths):
        return paths[0].parent.name or name
    for suffix in (".gz", ".json", ".pt.trace", ".trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


#: Inputs with at least this much JSON are parsed and linked with several threads (the parts of
#: :func:`split_spool` are parsed several at once); smaller ones with one. Measured on the
#: 2-core benchmark VM (whole ingest, two threads against one, 3 runs each): 26 MB (A100 trace)
#: 0.66 s against 0.66 s and 151 against 110 MiB; 34 MB (vLLM) 0.55 against 0.56 s, 139
#: against 105 MiB; 59 MB (217k events) 0.94 against 1.11 s, 175 against 144 MiB; 326 MB (1.2M
#: events) 3.33 against 5.89 s, 558 against 284 MiB. Below ~50 MB a second thread only costs
#: memory.
PARALLEL_JSON_BYTES = 48 << 20


def _staging_connection() -> duckdb.DuckDBPyConnection:
    from ._db import duckdb

    con = duckdb.connect(":memory:", config={"threads": 1})
    tmp = Path(tempfile.gettempdir()) / "gpuscope-duckdb-spill"
    con.execute(f"SET temp_directory = {_sql_str(str(tmp))}")
    return con


#: DuckDB memory limit while staging with one thread (inputs under
#: :data:`PARALLEL_JSON_BYTES`). Above it the staged events spill to a temporary
#: directory instead of growing the process: on the 2-core benchmark VM this cut the peak of
#: ingesting the A100 trace from 139 to 121 MiB (217k events: 165 to 146 MiB) at no measurable
#: cost in time (tighter limits cost 15-20 % more time). An input that cannot be staged
#: within it (DuckDB cannot spill everything) is staged again without a limit.
STAGING_MEMORY_LIMIT = "100MB"


def stage_traces(
    paths: Sequence[Path], progress: Progress = _quiet, optional: Collection[Path] = (),
    max_inflate_ratio: float = MAX_INFLATE_RATIO,
) -> tuple[duckdb.DuckDBPyConnection, list[TraceInfo], dict[str, Any]]:
    """Spool, parse and link ``paths`` into staging tables of an in-memory DuckDB.

    Files in ``optional`` (found by scanning a directory) that turn out not to be traces are
    skipped with a note instead of failing the ingest. Returns the staging connection (tables
    ``kernel_stage``, ``op_stage``, ``annotation_stage``), per-file information, and counts.
    Nothing touches the store.
    """
    from ._db import duckdb

    try:
        staged = _stage_traces(paths, progress, optional, STAGING_MEMORY_LIMIT, max_inflate_ratio)
        staged[0].execute("RESET memory_limit")  # the write to the store is not bounded
        return staged
    except duckdb.OutOfMemoryException:
        progress(f"staging needs more than {STAGING_MEMORY_LIMIT} of memory: staging again without a limit")
    try:
        return _stage_traces(paths, progress, optional, None, max_inflate_ratio)
    except duckdb.OutOfMemoryException as exc:
        what = ", ".join(str(p) for p in paths)
        raise GpuscopeError(f"{what}: {str(exc).splitlines()[0]}") from None


class SpoolAhead:
    """Spools trace files in order, one file ahead of the caller, in a thread: the first file
    while the staging database starts, the next one while DuckDB parses the current one (the
    parse releases the GIL, and so do gunzip and the writes). Spools go to a temporary folder
    that :meth:`close` removes.

    On the 2-core benchmark VM this hides the 20 ms of starting DuckDB behind the A100 trace's
    45 ms of gunzip, and a directory of rank traces gunzips each next rank while the current
    one is parsed.
    """

    def __init__(self, paths: Sequence[Path], max_inflate_ratio: float = MAX_INFLATE_RATIO) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpuscope-ingest-"))
        self._paths = list(paths)
        self._max_inflate_ratio = max_inflate_ratio
        self._stop = threading.Event()
        self._pending: tuple[int, threading.Thread, dict[str, Any]] | None = None
        self._start(0)

    def _start(self, index: int) -> None:
        self._pending = None
        if index >= len(self._paths):
            return
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["spooled"] = spool_events(self._paths[index], self.dir, self._stop, self._max_inflate_ratio)
            except BaseException as exc:  # handed to the caller by take()
                box["error"] = exc

        thread = threading.Thread(target=work, name="gpuscope-spool", daemon=True)
        thread.start()
        self._pending = (index, thread, box)

    def take(self, index: int) -> SpooledTrace:
        """The spool of the ``index``-th path (taken in order: 0, 1, 2, ...), or the error
        spooling it raised; starts on the next path either way."""
        if self._pending is None or self._pending[0] != index:
            raise ValueError(f"spools are taken in order: {index} is not the next one")
        _, thread, box = self._pending
        thread.join()
        self._start(index + 1)
        if "error" in box:
            raise box["error"]
        return box["spooled"]

    def close(self) -> None:
        """Stop the spool under way (at its next MiB) and remove every spool."""
        self._stop.set()
        if self._pending is not None:
            self._pending[1].join()
            self._pending = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _stage_traces(
    paths: Sequence[Path], progress: Progress, optional: Collection[Path], memory_limit: str | None,
    max_inflate_ratio: float = MAX_INFLATE_RATIO,
) -> tuple[duckdb.DuckDBPyConnection, list[TraceInfo], dict[str, Any]]:
    ahead = SpoolAhead(paths, max_inflate_ratio)
    try:
        con = _staging_connection()
        try:
            if memory_limit:
                con.execute(f"SET memory_limit = {_sql_str(memory_limit)}")
            return _stage_into(con, paths, progress, optional, memory_limit, ahead)
        except BaseException:
            con.close()
            raise
    finally:
        ahead.close()


def _limit_bytes(limit: str) -> int:
    """Bytes in a DuckDB memory limit written as ``100MB``, ``1.5GiB``, ..."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?)B?\s*", limit, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a memory size: {limit!r}")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)


def _stage_into(
    con: duckdb.DuckDBPyConnection, paths: Sequence[Path], progress: Progress, optional: Collection[Path],
    memory_limit: str | None, ahead: SpoolAhead,
) -> tuple[duckdb.DuckDBPyConnection, list[TraceInfo], dict[str, Any]]:
    con.execute(_EV_DDL)
    infos: list[TraceInfo] = []
    not_traces: list[str] = []
    json_total, parallel = 0, False
    for index, path in enumerate(paths):
        trace_id = len(infos)
        progress(f"reading {path}")
        try:
            spooled = ahead.take(index)
        except InputError as exc:
            if path in optional and len(paths) > 1 and not isinstance(exc, InflateLimitError):
                not_traces.append(f"{path.name} ({exc.message})")
                continue
            raise
        base = _time_base(spooled.header)
        json_total += spooled.json_bytes
        if json_total >= PARALLEL_JSON_BYTES:
            if not parallel:
                con.execute(f"SET threads = {max(1, min(4, os.cpu_count() or 1))}")
                parallel = True
            # Several threads hold more at once than one: the one-thread limit plus the
            # input's size, rather than DuckDB's default (a share of RAM). 217k events:
            # ~160 against ~193 MiB peak at the same speed; 1.2M events: 476 against
            # 556 MiB, 6 % slower.
            if memory_limit is not None:
                con.execute(f"SET memory_limit = '{(_limit_bytes(memory_limit) + json_total) >> 20}MiB'")
            else:
                con.execute("RESET memory_limit")
        try:
            n = load_trace(con, trace_id, spooled, base)
        finally:
            spooled.spool.unlink(missing_ok=True)
        if path in optional and len(paths) > 1:
            usable = con.execute(
                f"SELECT count(*) FROM ev WHERE trace_id = ? AND {_USABLE}",
                [trace_id],
            ).fetchone()[0]
            if not usable:
                con.execute("DELETE FROM ev WHERE trace_id = ?", [trace_id])
                not_traces.append(f"{path.name} (no trace events)")
                continue
        relative = base > 0
        if not relative:
            min_ts = con.execute(
                # (no base: ts_ns is ts in µs times 1000)
                f"SELECT min(ts_ns) FROM ev WHERE trace_id = ? AND {_USABLE}",
                [trace_id],
            ).fetchone()[0]
            relative = min_ts is not None and min_ts < ABSOLUTE_US_THRESHOLD * 1000
        infos.append(
            TraceInfo(trace_id, str(path), spooled.form, spooled.size_bytes, spooled.json_bytes, n,
                      base, relative, _rank(spooled.header), spooled.header)
        )
    progress("linking kernels to launches and ops")
    con.execute(_EXTRACT_SQL.replace("{memcpy}", MEMCPY_KERNEL_RE).replace("{memset}", MEMSET_KERNEL_RE))
    counts = _counts(con)
    graph_events = {int(t): {"stream_begin_capture": int(c), "graph_launch": int(g)} for t, c, g in con.execute(
        "SELECT trace_id, count(*) FILTER (WHERE name LIKE '%StreamBeginCapture%'), "
        "count(*) FILTER (WHERE name LIKE '%GraphLaunch%') FROM ev GROUP BY trace_id").fetchall()}
    for info in infos:
        info.graph_events = graph_events.get(info.trace_id, {"stream_begin_capture": 0, "graph_launch": 0})
    # The parsed events are the largest thing held: free them before linking builds its own.
    con.execute("DROP TABLE ev; DROP TABLE capture_window")
    con.execute(_LINK_SQL)
    if con.execute(f"SELECT count(*) {_UNCLAIMED_LAUNCHES}").fetchone()[0]:
        con.execute(_ENCLOSING_LINK_SQL)
    # the one definition of a category (kernel_names), which the analyzers use too
    con.execute(_FINISH_LINK_SQL.replace("{category}", category_sql("g.kind", "g.name")))
    counts["not_traces"] = not_traces
    counts["graph_replayed_kernels"], counts["graph_mapped_kernels"] = map_graph_replays(con)
    con.execute("DROP TABLE gpu; DROP TABLE rt; DROP TABLE rt_link; DROP TABLE op_depth; DROP TABLE op_by_ext; "
                "DROP TABLE captured")
    return con, infos, counts


#: A replayed graph launch is mapped to a captured graph only when at least this share of its
#: kernels align, by name and in order, with that graph's captured launches.
GRAPH_MATCH_MIN = 0.8


def _align(replay: Sequence[str], captured: Sequence[str]) -> list[int | None]:
    """For each replayed kernel name, the index of the captured launch it matches: an in-order
    (greedy subsequence) alignment by kernel name; None where no launch matches."""
    out: list[int | None] = []
    j = 0
    for name in replay:
        k = j
        while k < len(captured) and captured[k] != name:
            k += 1
        if k < len(captured):
            out.append(k)
            j = k + 1
        else:
            out.append(None)
    return out


def map_graph_replays(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Attribute kernels replayed from CUDA/HIP graphs to the ops that captured them.

    Each graph launch (one correlation id, many kernels) is aligned by kernel names, in order,
    with every captured graph (``graph_stage``); the best graph with at least
    :data:`GRAPH_MATCH_MIN` of the kernels aligned gives each kernel the op of its captured
    launch (``attribution = 'graph_capture'``). Returns (replayed kernels, mapped kernels).
    """
    replay = con.execute(
        "SELECT trace_id, correlation, ts_ns, name FROM kernel_stage WHERE attribution = 'graph_replay' "
        "ORDER BY trace_id, correlation, ts_ns, name"
    ).fetchall()
    if not replay:
        return 0, 0
    graph_rows = con.execute(
        "SELECT trace_id, graph_begin_ns, kernel_name, op_id FROM graph_stage ORDER BY trace_id, graph_begin_ns, seq"
    ).fetchall()
    graphs: dict[tuple[int, int], tuple[list[str], list[int | None]]] = {}
    for trace_id, begin, kname, op_id in graph_rows:
        names, ops = graphs.setdefault((trace_id, begin), ([], []))
        names.append(kname)
        ops.append(op_id)
    if not graphs:
        return len(replay), 0
    cache: dict[tuple[str, ...], list[int | None]] = {}
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    i = 0
    while i < len(replay):
        j = i
        while j < len(replay) and replay[j][:2] == replay[i][:2]:
            j += 1
        group = replay[i:j]
        names = tuple(r[3] for r in group)
        if names not in cache:
            best: list[int | None] = [None] * len(names)
            best_n = 0
            for g_names, g_ops in graphs.values():
                idx = _align(names, g_names)
                n = sum(x is not None for x in idx)
                if n > best_n:
                    best_n, best = n, [g_ops[x] if x is not None else None for x in idx]
            cache[names] = best if best_n >= GRAPH_MATCH_MIN * len(names) else [None] * len(names)
        for row, op_id in zip(group, cache[names]):
            if op_id is not None:
                for col, v in zip(cols, (row[0], row[1], row[2], row[3], op_id)):
                    col.append(v)
        i = j
    if not cols[0]:
        return len(replay), 0
    con.execute(
        "CREATE TEMP TABLE graph_map AS SELECT unnest(?::INTEGER[]) AS trace_id, unnest(?::BIGINT[]) AS correlation, "
        "unnest(?::BIGINT[]) AS ts_ns, unnest(?::VARCHAR[]) AS name, unnest(?::BIGINT[]) AS op_id",
        list(cols),
    )
    con.execute(
        "UPDATE kernel_stage k SET op_id = m.op_id, attribution = 'graph_capture' FROM graph_map m "
        "WHERE k.trace_id = m.trace_id AND k.correlation = m.correlation AND k.ts_ns = m.ts_ns AND k.name = m.name "
        "AND k.attribution = 'graph_replay'"
    )
    con.execute("DROP TABLE graph_map")
    return len(replay), len(cols[0])


def _counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    skipped: dict[str, int] = {}
    ignored: dict[str, int] = {}
    accel: dict[str, int] = {}
    for cls, cat, ph, n in con.execute(
        "SELECT cls, cat, ph, count(*) FROM ev WHERE cls NOT IN ('gpu', 'op', 'annotation') GROUP BY ALL"
    ).fetchall():
        if cls.startswith("malformed:"):
            reason = cls.split(":", 1)[1]
            skipped[reason] = skipped.get(reason, 0) + n
            continue
        if cls == "ignored":
            label = cat if cat is not None else f"ph={ph}" if ph is not None else "no category"
            ignored[label] = ignored.get(label, 0) + n
        pretty = next((v for k, v in ACCELERATOR_PREFIXES.items() if cat and cat.lower().startswith(k)), None)
        if pretty:
            accel[pretty] = accel.get(pretty, 0) + n
    hip, cuda = con.execute(
        "SELECT count(*) FILTER (WHERE name LIKE 'hip%'), count(*) FILTER (WHERE name LIKE 'cu%') FROM ev WHERE cls = 'runtime'"
    ).fetchone()
    return {"skipped": skipped, "ignored": ignored, "accelerators": accel, "runtime_hip": hip, "runtime_cuda": cuda}


def _device_rows(
    con: duckdb.DuckDBPyConnection, infos: list[TraceInfo], counts: dict[str, Any]
) -> list[dict[str, Any]]:
    labels = con.execute(
        "SELECT DISTINCT trace_id, dev_label, device_index FROM kernel_stage "
        "UNION SELECT DISTINCT trace_id, dev_label, TRY_CAST(dev_label AS INTEGER) FROM annotation_stage WHERE dev_label IS NOT NULL "
        "ORDER BY 1, 3, 2"
    ).fetchall()
    multi = len(infos) > 1
    ranks = [i.rank for i in infos]
    use_rank = multi and None not in ranks and len(set(ranks)) == len(ranks)
    accel = next(iter(counts["accelerators"]), None)
    specs = _spec_db() if labels else None
    rows = []
    per_trace: dict[int, list[int | None]] = {}
    for trace_id, _, index in labels:
        per_trace.setdefault(trace_id, []).append(index)
    for device_id, (trace_id, label, index) in enumerate(labels):
        info = infos[trace_id]
        all_props = _device_properties(info.header)
        props = all_props.get(index) if index is not None else None
        indices = per_trace[trace_id]
        if props is None and index is not None and len(all_props) == len(indices):
            # ROCm traces may number kernels by physical GPU (pid/device 2) while
            # deviceProperties lists the visible ones (id 0): match them in order.
            props = all_props[sorted(all_props)[sorted(i for i in indices if i is not None).index(index)]] \
                if None not in indices else None
        vendor, kind = _vendor(props, counts["runtime_hip"], counts["runtime_cuda"], accel)
        dev = f"gpu{index}" if index is not None else f"device:{label}"
        prefix = (f"rank{info.rank}/" if use_rank else f"trace{trace_id}/") if multi else ""
        cc = None
        if props and props.get("computeMajor") is not None:
            cc = f"{props.get('computeMajor')}.{props.get('computeMinor', 0)}"
        rows.append({
            "device_id": device_id, "key": prefix + dev, "trace_id": trace_id, "label": label,
            "device_index": index, "vendor": vendor, "kind": kind,
            "name": (props or {}).get("name") or None,
            "memory_total_bytes": (props or {}).get("totalGlobalMem"),
            "compute_capability": cc,
            "num_sms": (props or {}).get("numSms"),
            "warp_size": (props or {}).get("warpSize"),
            "properties": json.dumps(props) if props else None,
            "spec_key": _spec_key(specs, props, kind),
        })
    return rows


def _spec_db() -> Any:
    """The GPU spec database, or None when a user spec file does not load: that must not stop
    an ingest (analysis reports the broken file)."""
    try:
        from .specs import load_specs

        return load_specs()
    except Exception:
        return None


def _spec_key(specs: Any, props: dict[str, Any] | None, kind: str) -> str | None:
    """The spec-database key of a trace device when its properties identify it exactly."""
    if specs is None or not props or kind != "gpu":
        return None
    ident = specs.identify_trace_device(props)
    return ident.spec.key if ident.spec is not None and ident.exact else None


def ingest(
    db_path: Path | str,
    paths: Sequence[str | Path],
    name: str | None = None,
    progress: Progress = _quiet,
    all_ops: bool = False,
    into_run: int | None = None,
    keep_open: bool = False,
    max_inflate_ratio: float = MAX_INFLATE_RATIO,
) -> IngestResult:
    """Load Kineto traces (files, ``.gz``, directories) as one run of the store at ``db_path``.

    With ``keep_open``, the connection that wrote the run is handed over in the result's
    ``connection`` (its current database is the store, its staging tables dropped), so that a
    caller that goes on to read the run (``analyze TRACE``) does not open the store again.

    With ``into_run``, the traces join that existing run (``gpuscope run`` uses this at the end
    of a recording) instead of making a new one; their ids follow the run's existing ones.

    Everything is parsed and linked before the store is opened; the run is then written in one
    transaction, so a bad input leaves the store exactly as it was.

    Of the CPU ops, a trace with GPU activity keeps those that launched GPU work and their
    ancestors (``all_ops`` keeps every one); a CPU-only trace keeps every op.
    """
    from . import store
    from .store import read, runs

    store.check_store_path(db_path)  # before the parse: a bad --db should not cost a long ingest
    files = expand_paths(paths)
    explicit = {Path(p) for p in paths}
    con, infos, counts = stage_traces(files, progress, optional=[f for f in files if f not in explicit],
                                      max_inflate_ratio=max_inflate_ratio)
    handed_over: duckdb.DuckDBPyConnection | None = None
    try:
        total_events = sum(i.events for i in infos)
        gpu_rows, op_rows = con.execute(
            "SELECT (SELECT count(*) FROM kernel_stage), (SELECT count(*) FROM op_stage)"
        ).fetchone()
        ann_rows = con.execute("SELECT count(*) FROM annotation_stage").fetchone()[0]
        if gpu_rows == 0 and op_rows == 0 and ann_rows == 0:
            what = ", ".join(str(f) for f in files)
            if counts.get("not_traces") and not infos:
                # a folder of broken files: each file's own reason, not one summary that hides them
                folders = ", ".join(str(p) for p in paths)
                raise InputError(folders, "no usable trace: " + "; ".join(counts["not_traces"]))
            if total_events == 0:
                raise InputError(what, "the trace holds no events")
            raise InputError(what, f"no trace events gpuscope can use among {total_events} entries (not a Kineto/Chrome trace?)")
        devices = _device_rows(con, infos, counts)
        con.execute(
            "CREATE TEMP TABLE dev_map (trace_id INTEGER, dev_label VARCHAR, device_id INTEGER)"
        )
        if devices:
            con.executemany(
                "INSERT INTO dev_map VALUES (?, ?, ?)",
                [(d["trace_id"], d["label"], d["device_id"]) for d in devices],
            )
        span = con.execute(
            "SELECT min(s), max(e) FROM (SELECT min(ts_ns) s, max(ts_ns + dur_ns) e FROM kernel_stage "
            "UNION ALL SELECT min(ts_ns), max(ts_ns + dur_ns) FROM op_stage "
            "UNION ALL SELECT min(ts_ns), max(ts_ns + dur_ns) FROM annotation_stage)"
        ).fetchone()
        linked = dict(zip(
            ("kernels_with_op", "kernels_without_op", "kernels_with_launch"),
            con.execute(
                "SELECT count(*) FILTER (WHERE op_id IS NOT NULL), count(*) FILTER (WHERE op_id IS NULL), "
                "count(*) FILTER (WHERE launch_name IS NOT NULL) FROM kernel_stage"
            ).fetchone(),
        ))
        loaded = dict(zip(
            ("kernels", "memcpy", "memset"),
            con.execute(
                "SELECT count(*) FILTER (WHERE kind = 'kernel'), count(*) FILTER (WHERE kind = 'memcpy'), "
                "count(*) FILTER (WHERE kind = 'memset') FROM kernel_stage"
            ).fetchone(),
        ))
        kept_ops = op_rows if (all_ops or gpu_rows == 0) else con.execute("SELECT count(*) FROM op_launching").fetchone()[0]
        loaded.update(ops=kept_ops, annotations=ann_rows, devices=len(devices))
        ignored_ops = op_rows - kept_ops
        notes = _notes(infos, counts, gpu_rows, op_rows)
        if ignored_ops:
            notes.append(f"{ignored_ops} CPU ops that launched no GPU work (nor contain one that did) were not stored; "
                         "ingest with --all-ops to keep them")
        run_name = name or default_run_name(files)
        info_doc = {
            "ingest": {"skipped": counts["skipped"], "ignored": counts["ignored"], "linked": linked,
                       "accelerators": counts["accelerators"]},
            "notes": notes,
            # what `analyze PATH` / `compare PATH` look for to reuse this run instead of ingesting again
            "inputs_digest": inputs_digest(files),
        }
        progress(f"writing run to {db_path}")
        store.open_attached(con, db_path)
        # Checkpoint at commit: the run is written once, compressed, into the file's blocks,
        # instead of into the WAL first and the blocks again at DETACH (~45 ms per 100k events).
        con.execute("SET checkpoint_threshold = '0KB'")
        try:
            con.execute("USE store")
            store.migrate(con)
            with store.transaction(con):
                offsets = (0, 0, 0)
                if into_run is None:
                    run_id = runs.add_ingested(con, name=run_name, started_ns=span[0], ended_ns=span[1],
                                               command=["gpuscope", "ingest", *(str(f) for f in files)], info=info_doc)
                else:
                    run_name = read.run_name(con, into_run)
                    if run_name is None:
                        raise InputError(f"run {into_run}", "no such run")
                    run_id = into_run
                    runs.merge_info(con, run_id, {"ingest": info_doc["ingest"]}, append_notes=notes)
                    offsets = con.execute(
                        "SELECT (SELECT coalesce(max(trace_id) + 1, 0) FROM traces WHERE run_id = $1), "
                        "(SELECT coalesce(max(device_id) + 1, 0) FROM devices WHERE run_id = $1), "
                        "(SELECT coalesce(max(op_id) + 1, 0) FROM ops WHERE run_id = $1)",
                        [run_id],
                    ).fetchone()
                    taken = {r[0] for r in con.execute("SELECT key FROM devices WHERE run_id = ?", [run_id]).fetchall()}
                    for d in devices:  # e.g. telemetry's gpu0 and the trace's gpu0: keep keys unique
                        if d["key"] in taken:
                            d["key"] = f"trace{d['trace_id'] + offsets[0]}/{d['key']}"
                _write_rows(con, run_id, infos, devices, all_ops, *offsets)
            if keep_open:
                # By name: listing the catalog costs ~10 ms; a test checks that none is left.
                con.execute("".join(f"DROP TABLE IF EXISTS temp.{t};" for t in STAGING_TABLES))
                handed_over = con
        finally:
            if handed_over is None:
                con.execute("USE memory")
                con.execute("DETACH store")
    finally:
        if handed_over is None:
            con.close()
    file_docs = [
        {"path": i.path, "form": i.form, "size_bytes": i.size_bytes, "json_bytes": i.json_bytes, "events": i.events,
         "ts_relative": i.ts_relative, "base_time_ns": i.base_time_ns, "rank": i.rank}
        for i in infos
    ]
    return IngestResult(run_id, run_name, file_docs, total_events, loaded, counts["skipped"],
                        counts["ignored"], linked, notes, connection=handed_over)


def _write_rows(
    con: duckdb.DuckDBPyConnection, run_id: int, infos: list[TraceInfo], devices: list[dict[str, Any]], all_ops: bool,
    t0: int = 0, d0: int = 0, o0: int = 0,
) -> None:
    """Write the staged run; trace, device and op ids are shifted by ``t0``, ``d0``, ``o0``
    when the traces join an existing run."""
    t0, d0, o0 = int(t0), int(d0), int(o0)
    for i in infos:
        meta = {k: v for k, v in i.header.items() if k != "traceEvents"}
        if i.graph_events:
            meta[GRAPH_EVENTS_KEY] = i.graph_events
        con.execute(
            "INSERT INTO traces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, i.trace_id + t0, i.path, i.rank, i.base_time_ns, i.ts_relative, i.events, i.size_bytes,
             json.dumps(meta, default=str)],
        )
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
               k.attribution
        FROM temp.kernel_stage k JOIN temp.dev_map m ON m.trace_id = k.trace_id AND m.dev_label = k.dev_label
        ORDER BY m.device_id, k.ts_ns"""
    )
    con.execute(
        f"""INSERT INTO ops
        SELECT {run_id}, op_id + {o0}, p.parent_op_id + {o0}, trace_id + {t0}, pid, tid, name, ts_ns, dur_ns, external_id, sequence_number,
               input_dims, input_types, input_strides, concrete_inputs
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


def _notes(infos: list[TraceInfo], counts: dict[str, Any], gpu_rows: int, op_rows: int) -> list[str]:
    notes = []
    if counts["accelerators"]:
        kinds = ", ".join(f"{k} ({n} events)" for k, n in counts["accelerators"].items())
        notes.append(
            f"trace of a non-GPU accelerator: {kinds}; its events are ingested, but gpuscope models only "
            "NVIDIA and AMD GPUs"
        )
    if counts.get("not_traces"):
        notes.append("skipped files that are not traces: " + ", ".join(counts["not_traces"]))
    if counts.get("graph_replayed_kernels"):
        mapped, replayed = counts["graph_mapped_kernels"], counts["graph_replayed_kernels"]
        notes.append(
            f"{mapped} of {replayed} kernels replayed from CUDA/HIP graphs were mapped to the ops that captured them"
            + ("" if mapped else " (ingest the graph-capture trace in the same run to map them)")
        )
    if gpu_rows == 0:
        notes.append("no GPU activity in the trace (CPU-only): ops are reported with their CPU time")
    elif op_rows == 0:
        notes.append("no CPU side in the trace: kernels cannot be attributed to ops")
    for i in infos:
        if i.ts_relative and i.base_time_ns == 0:
            notes.append(f"{i.path}: relative timestamps without baseTimeNanoseconds; absolute times are unknown")
    if counts["skipped"]:
        total = sum(counts["skipped"].values())
        reasons = ", ".join(f"{n} {r}" for r, n in counts["skipped"].items())
        notes.append(f"skipped {total} malformed events ({reasons})")
    return notes


def stderr_progress(enabled: bool) -> Progress:
    """A progress reporter that writes one line per stage to stderr when ``enabled``."""
    if not enabled:
        return _quiet

    def report(msg: str) -> None:
        print(f"gpuscope: {msg}", file=sys.stderr, flush=True)

    return report
