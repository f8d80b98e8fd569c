"""Read trace files: find them, digest them, open them (gunzipped, with the gzip-bomb guard)
and spool the JSON text of their ``traceEvents`` array to a file, one file ahead of the parse.

A trace file is one JSON object whose ``traceEvents`` array holds the events (or, in the
JSON-array form of the Chrome trace format, just that array). Files run to gigabytes, so the
events never become Python objects here: :func:`spool_events` streams the file once, parses the
small top-level keys around ``traceEvents`` in Python, and copies the bytes of the array into a
spool file, holding at most a few MiB in memory at any time. :class:`SpoolAhead` runs it in a
thread one file ahead of the parse (:mod:`.parse`).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tempfile
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import GpuscopeError, InputError

CHUNK_BYTES = 1 << 20
HEAD_LIMIT_BYTES = 64 << 20
#: How much of a trace's end is searched for the close of ``traceEvents`` (and the keys after).
TAIL_WINDOWS = (1 << 20, 64 << 20)
TRACE_SUFFIXES = (".json", ".json.gz")
#: Nesting deeper than this is refused as bad input rather than parsed.
MAX_NESTING = 512
_DEEP_RE = re.compile(rb"(?:\[\s*){%d}" % MAX_NESTING)


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


class SpoolAhead:
    """Spools trace files in order, ahead of the caller, in threads: the first files while the
    staging database starts, the next ones while DuckDB parses the current one (the parse
    releases the GIL, and so do gunzip and the writes). ``workers`` files are spooled at once
    (a directory of rank traces gunzips several ranks on as many cores). Spools go to a
    temporary folder that :meth:`close` removes.

    Starting DuckDB thus hides behind the first file's gunzip, and a directory of rank traces
    gunzips the next ranks while the current one is parsed (times in bench/README.md,
    "Where ingest's constants come from" and "Ingest at scale").
    """

    def __init__(self, paths: Sequence[Path], max_inflate_ratio: float = MAX_INFLATE_RATIO, workers: int = 1) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpuscope-ingest-"))
        self._paths = list(paths)
        self._max_inflate_ratio = max_inflate_ratio
        self._workers = max(1, workers)
        self._stop = threading.Event()
        self._pending: dict[int, tuple[threading.Thread, dict[str, Any]]] = {}
        self._next = 0  # the next index to start
        self._taken = 0  # the next index to take
        self._fill()

    def _fill(self) -> None:
        while self._next < len(self._paths) and len(self._pending) < self._workers:
            self._start(self._next)
            self._next += 1

    def _start(self, index: int) -> None:
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["spooled"] = spool_events(self._paths[index], self.dir, self._stop, self._max_inflate_ratio)
            except BaseException as exc:  # handed to the caller by take()
                box["error"] = exc

        thread = threading.Thread(target=work, name=f"gpuscope-spool-{index}", daemon=True)
        thread.start()
        self._pending[index] = (thread, box)

    def take(self, index: int) -> SpooledTrace:
        """The spool of the ``index``-th path (taken in order: 0, 1, 2, ...), or the error
        spooling it raised; starts on the next paths either way."""
        if index != self._taken or index not in self._pending:
            raise ValueError(f"spools are taken in order: {index} is not the next one")
        thread, box = self._pending.pop(index)
        thread.join()
        self._taken += 1
        self._fill()
        if "error" in box:
            raise box["error"]
        return box["spooled"]

    def close(self) -> None:
        """Stop the spools under way (at their next MiB) and remove every spool."""
        self._stop.set()
        for thread, _ in self._pending.values():
            thread.join()
        self._pending.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
