"""Read trace files: find them, digest them, open them (gunzipped, with the gzip-bomb guard)
and spool the JSON text of their ``traceEvents`` array in parts, handed to the parse as they
are written.

A trace file is one JSON object whose ``traceEvents`` array holds the events (or, in the
JSON-array form of the Chrome trace format, just that array). Files run to gigabytes, so the
events never become Python objects here: :func:`spool_events` streams the file once, parses the
small top-level keys around ``traceEvents`` in Python, and copies the bytes of the array into a
spool file, holding at most a few MiB in memory at any time. :class:`SpoolAhead` runs it in a
thread per file, ahead of the parse (:mod:`.parse`), each file's parts going to the parse
through a :class:`PartStream`.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import fileio
from ..errors import GpuscopeError, InputError
from ..fileio import describe_mode, not_regular_words
from ..textsafe import visible

CHUNK_BYTES = 1 << 20
#: The most JSON a trace may hold before its ``traceEvents`` array (its header: Kineto writes
#: ``schemaVersion``, ``deviceProperties``, ``distributedInfo``, a few KB even for 8 GPUs), and
#: after it (``traceName``, ``baseTimeNanoseconds``). The header becomes Python objects, so an
#: unbounded one was a way to make ingest take minutes and gigabytes from a small ``.gz``
#: (a 60 MB array in 58 KB of gzip: 82 s, 840 MB); past this it is refused, in one line.
MAX_HEADER_BYTES = 4 << 20
#: How much of a trace's end is searched for the close of ``traceEvents`` (and the keys after).
TAIL_WINDOWS = (1 << 20, MAX_HEADER_BYTES + (1 << 20))
TRACE_SUFFIXES = (".json", ".json.gz")
#: Nesting deeper than this is refused as bad input rather than parsed.
MAX_NESTING = 512
_DEEP_RE = re.compile(rb"(?:\[\s*){%d}" % MAX_NESTING)


def shown(path: Path | str) -> str:
    """A path as error messages and notes name it: its control characters (a newline, an ESC in
    a file name someone else chose) as visible escapes, so that a message stays one readable line."""
    return visible(str(path))


def _kind(mode: int) -> str:
    return describe_mode(mode)


def not_regular(path: Path, mode: int) -> InputError:
    """The error for a trace path that is not a regular file (a FIFO, a device, a socket, a pipe
    behind ``/dev/stdin`` or ``/proc/self/fd/N``): reading one could block forever or never end."""
    return InputError(shown(path), not_regular_words(mode, "trace"))


def open_regular(path: Path) -> Any:
    """``path`` opened for binary reading, refused (:class:`InputError`) unless it is a regular
    file, without ever blocking (:func:`gpuscope.fileio.open_regular`)."""
    return fileio.open_regular(path, "trace", shown=shown(path))


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
    #: The spool's parts in order, each a JSON array (``[spool]`` when it was not cut).
    parts: list[Path] = field(default_factory=list)
    #: JSON decodes the header took (a handful, whatever its size up to :data:`MAX_HEADER_BYTES`).
    header_decodes: int = 0


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
        self.source = shown(path)
        raw = open_regular(path)
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
            raise InputError(self.source, "truncated gzip file (it ends before the end of its compressed stream)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(self.source, f"corrupt gzip data ({exc})") from None
        except OSError as exc:
            raise InputError(self.source, f"read error ({exc})") from None
        if not data:
            self.eof = True
        elif self.gzipped:
            self.inflated_bytes += len(data)
            if self.inflated_bytes > INFLATE_MIN_BYTES:
                compressed = max(self._raw.tell(), 1)
                if self.inflated_bytes > self.max_inflate_ratio * compressed:
                    raise InflateLimitError(
                        self.source,
                        f"refused: its first {compressed / 1e6:.1f} MB of gzip inflate to "
                        f"{self.inflated_bytes / 1e6:.0f} MB, more than {self.max_inflate_ratio:g}x "
                        f"(the limit; real traces inflate about 20x): a gzip bomb? "
                        f"Raise the limit with --max-inflate-ratio N")
        return data

    def raw_offset(self) -> int:
        """Bytes of the file (compressed, for ``.gz``) read so far."""
        return self._raw.tell()

    def close(self) -> None:
        self._f.close()
        self._raw.close()


_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


_WS_RE = re.compile(r"[ \t\r\n]*")


def _skip_ws(text: str, i: int) -> int:
    return _WS_RE.match(text, i).end()  # type: ignore[union-attr]  # (matches the empty string)


class _NeedMore(Exception):
    """The buffered head ends inside a value: read more and parse again."""


@dataclass
class _HeadState:
    """How far :func:`_parse_head` got in an unfinished head: the keys parsed so far and the
    index just after the last whole key-value pair, so that the next try goes on from there
    instead of decoding the header again from its start."""

    header: dict[str, Any] = field(default_factory=dict)
    resume: int | None = None
    first: bool = True
    #: JSON decodes run (what the tests count: each one is a pass over part of the header).
    decodes: int = 0


def _incomplete(exc: json.JSONDecodeError, text: str, at_eof: bool) -> bool:
    """Whether a decode error may only mean that the buffered text ends inside the value: a
    string still open (Python names the string's start, which may be megabytes back) or an
    error within the last characters (``tru``, ``-Infinit``, half a ``\\u`` escape)."""
    return not at_eof and (exc.msg.startswith("Unterminated string") or exc.pos >= len(text) - 16)


def _parse_head(text: str, at_eof: bool, source: str, state: _HeadState | None = None) -> tuple[str, dict[str, Any], int]:
    """Parse the start of a trace up to the ``[`` of its events.

    Returns ``(form, header, index of '[')``; raises :class:`_NeedMore` when ``text`` ends
    before that point and more input exists. With ``state``, a second call on a longer
    ``text`` goes on after the last whole key-value pair of the first.
    """
    state = state if state is not None else _HeadState()

    def need(i: int) -> None:
        if i >= len(text):
            if at_eof:
                raise InputError(source, "truncated JSON (the file ends inside the trace header)")
            raise _NeedMore

    header = state.header
    if state.resume is not None:
        i, first = state.resume, state.first
    else:
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
            raise InputError(source, f"not JSON (starts with {visible(repr(snippet))})")
        i += 1
        first = True
        state.resume, state.first = i, first
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
            state.decodes += 1
            key, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            if _incomplete(exc, text, at_eof):
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
            state.decodes += 1
            value, i = _DECODER.raw_decode(text, i)
        except RecursionError:
            raise InputError(source, f"JSON nested too deeply in the top-level key {visible(repr(key))}") from None
        except json.JSONDecodeError as exc:
            if _incomplete(exc, text, at_eof):
                raise _NeedMore from None
            raise InputError(source, f"malformed JSON in the trace header ({exc.msg} at character {exc.pos})") from None
        header[key] = value
        state.resume, state.first = i, False


#: What :func:`_parse_rest` found from a position on: None (not a remainder), or the key-value
#: pairs from there to the end (a shared list and the index of the first).
_RestMemo = dict[int, "tuple[list[tuple[str, Any]], int] | None"]


def _parse_rest(text: str, i: int, memo: _RestMemo | None = None) -> dict[str, Any] | None:
    """Parse ``text[i:]`` as what follows the closing ``]`` of ``traceEvents``:
    ``(, "key": value)* }`` and nothing else. Returns the keys found, or None when it is not
    such a remainder.

    ``memo`` (shared by the calls on one ``text``) keeps what each position between two pairs
    turned out to be: the candidates for the close of the array may be thousands of ``]`` in a
    row of pairs before one large value (``"a1": [{}], "a2": [{}], ..., "big": [...]``), and
    without it each would decode the large value again (minutes for a 3 MB file)."""
    memo = {} if memo is None else memo
    pairs: list[tuple[str, Any]] = []
    visited: list[tuple[int, int]] = []
    n = len(text)
    i = _skip_ws(text, i)
    result: list[tuple[str, Any]] | None = None
    try:
        while True:
            if i in memo:
                known = memo[i]
                result = None if known is None else pairs + known[0][known[1]:]
                break
            visited.append((i, len(pairs)))
            if i >= n:
                break
            c = text[i]
            if c == "}":
                result = pairs if _skip_ws(text, i + 1) == n else None
                break
            if c != ",":
                break
            i = _skip_ws(text, i + 1)
            key, i = _DECODER.raw_decode(text, i)
            if not isinstance(key, str):
                break
            i = _skip_ws(text, i)
            if i >= n or text[i] != ":":
                break
            value, i = _DECODER.raw_decode(text, _skip_ws(text, i + 1))
            pairs.append((key, value))
            i = _skip_ws(text, i)
    except (json.JSONDecodeError, RecursionError, IndexError):
        result = None
    for pos, k in visited:
        memo[pos] = None if result is None else (result, k)
    return None if result is None else dict(result)


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
    memo: _RestMemo = {}
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
                rest = _parse_rest(text, pos + 1, memo)
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
    # Trailing whitespace (any amount: it costs nothing in a .gz) is not part of the windows.
    while size > 0:
        start = max(0, size - CHUNK_BYTES)
        out.seek(start)
        kept = out.read(size - start).rstrip(b" \t\r\n")
        size = start + len(kept)
        if kept:
            break
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


#: A separator between two objects that holds a newline. JSON strings cannot hold a raw
#: newline, so every match is structural; it separates two events when the objects are at the
#: array's top level, which the parse checks (a part cut elsewhere fails to parse, and the
#: trace is then read again whole). Compact one-line JSON has none and is never cut.
PART_CUT_RE = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
_CARRY = 256  # bytes held back from each write, so that a separator across two reads is found


class _PartWriter:
    """The events array written as parts of about ``part_bytes`` (None: one file), each a JSON
    array: a part ends after an event's ``}`` with ``]`` and the next starts with ``[``.
    ``on_part`` gets each part as it is closed (all but the last)."""

    def __init__(self, spool_dir: Path, part_bytes: int | None, on_part: Callable[[Path], None] | None) -> None:
        self.dir = spool_dir
        self.part_bytes = part_bytes
        self.on_part = on_part
        self.parts: list[Path] = []
        self.carry = b""
        self.out: Any = None
        self.size = 0
        self._open()

    def _open(self) -> None:
        suffix = f".part{len(self.parts)}.json" if self.part_bytes else ".json"
        fd, name = tempfile.mkstemp(prefix="events-", suffix=suffix, dir=self.dir)
        self.out = os.fdopen(fd, "w+b")
        self.parts.append(Path(name))
        self.size = 0
        if len(self.parts) > 1:
            self.out.write(b"[")
            self.size = 1

    def write(self, data: bytes) -> None:
        buf = self.carry + data
        while self.part_bytes and self.size + len(buf) >= self.part_bytes:
            m = PART_CUT_RE.search(buf, max(0, self.part_bytes - self.size - _CARRY))
            if m is None:
                break
            self.out.write(buf[: m.start() + 1])
            self.out.write(b"]")
            self.out.close()
            done = self.parts[-1]
            self._open()
            if self.on_part is not None:
                self.on_part(done)
            buf = buf[m.end() - 1:]
        keep = min(len(buf), _CARRY)
        self.out.write(buf[: len(buf) - keep])
        self.size += len(buf) - keep
        self.carry = buf[len(buf) - keep:]

    def finish(self, form: str, header: dict[str, Any], source: str) -> None:
        """Write what is held back and end the last part at the close of the events array."""
        self.out.write(self.carry)
        self.size += len(self.carry)
        self.carry = b""
        self.out.truncate(_events_end(self.out, self.size, form, header, source))
        self.out.close()

    def close(self) -> None:
        if self.out is not None and not self.out.closed:
            self.out.close()


def spool_events(path: Path, spool_dir: Path, stop: threading.Event | None = None,
                 max_inflate_ratio: float = MAX_INFLATE_RATIO, part_bytes: int | None = None,
                 on_part: Callable[[Path], None] | None = None, progress: PartStream | None = None) -> SpooledTrace:
    """Stream ``path`` once and write the JSON text of its events array to files in
    ``spool_dir``: one file, or with ``part_bytes`` parts of about that size cut between two
    events, each handed to ``on_part`` as soon as it is written (but the last, which is known
    only at the end of the file). Memory stays within a few MiB whatever the size of the trace.
    Setting ``stop`` (from another thread) ends it at the next MiB with :class:`SpoolStopped`.
    ``progress`` is told the share of the file read so far."""
    source = shown(path)
    inp = _Input(path, max_inflate_ratio)
    size = max(path.stat().st_size, 1)
    writer: _PartWriter | None = None
    try:
        head = bytearray()
        state = _HeadState()
        try_at = 0
        too_big = InputError(source, f"the trace header (the JSON before its 'traceEvents' array) is over "
                                     f"{MAX_HEADER_BYTES >> 20} MiB, the most gpuscope reads (a Kineto header is a few KB)")
        while True:
            head += inp.read(CHUNK_BYTES)
            if not inp.eof and len(head) < try_at:
                continue
            text = head.decode("utf-8", "surrogateescape")
            try:
                form, header, start = _parse_head(text, inp.eof, source, state)
                break
            except _NeedMore:
                if len(head) > MAX_HEADER_BYTES:
                    raise too_big from None
                # Try again once the head has doubled: a value that spans many reads (a long
                # string, a large array) is decoded a few times, not once per MiB.
                try_at = min(2 * len(head), MAX_HEADER_BYTES + CHUNK_BYTES)
        start_byte = len(text[:start].encode("utf-8", "surrogateescape"))
        if start_byte > MAX_HEADER_BYTES:
            raise too_big
        header_decodes = state.decodes
        written = 0
        try:
            writer = _PartWriter(spool_dir, part_bytes, on_part)
            data = bytes(head[start_byte:])
            del head, text
            while data:
                if stop is not None and stop.is_set():
                    raise SpoolStopped(source)
                if b"[[[[[[[[[[[[[[[[" in data and _DEEP_RE.search(data):
                    raise InputError(source, f"JSON nested more than {MAX_NESTING} levels deep")
                if progress is not None:
                    progress.read_share = inp.raw_offset() / size
                writer.write(data)
                written += len(data)
                data = inp.read(CHUNK_BYTES)
            writer.finish(form, header, source)
        except OSError as exc:  # the temporary folder is full or not writable
            raise GpuscopeError(
                f"{source}: cannot write a temporary copy of its events in {spool_dir} "
                f"({exc.strerror or exc}); set TMPDIR to a folder with room for the uncompressed trace"
            ) from None
        json_bytes = start_byte + written
    finally:
        inp.close()
        if writer is not None:
            writer.close()
    return SpooledTrace(path, writer.parts[-1], header, form, path.stat().st_size, json_bytes, list(writer.parts),
                        header_decodes)


def inputs_digest(files: Sequence[Path]) -> str:
    """A digest of the trace files' contents (not their names or times): the same traces give
    the same digest wherever they were copied. SHA-256 over each file's bytes, in order."""
    import hashlib

    whole = hashlib.sha256()
    for f in files:
        h = hashlib.sha256()
        with open_regular(f) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        whole.update(h.digest())
    return whole.hexdigest()


def expand_paths(paths: Iterable[str | Path], skipped: list[str] | None = None) -> list[Path]:
    """Files as given; directories expanded to every ``*.json`` / ``*.json.gz`` inside
    (recursively, sorted). Raises :class:`InputError` for a missing path, an empty directory, or
    a path given that is not a regular file (a FIFO, a device, a socket: ``stat``, never opened).
    Entries of a directory with a trace's name that are not regular files are left out, each
    named in ``skipped`` when it is given."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        try:
            mode = path.stat().st_mode  # follows links: a link to a trace is a trace
        except FileNotFoundError:
            raise InputError(shown(path), "no such file or directory") from None
        except OSError as exc:  # a link loop, a name too long, no permission
            raise InputError(shown(path), f"cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISDIR(mode):
            found = []
            for f in path.rglob("*"):
                if not f.name.lower().endswith(TRACE_SUFFIXES):
                    continue
                try:
                    entry = f.stat().st_mode
                except OSError:  # a dangling link or a loop: not a trace
                    entry = None
                if entry is not None and stat.S_ISREG(entry):
                    found.append(f)
                elif skipped is not None and (entry is None or not stat.S_ISDIR(entry)):
                    skipped.append(f"{shown(f)} ({_kind(entry) if entry is not None else 'unreadable'})")
            if not found:
                raise InputError(shown(path), "directory holds no trace files (*.json, *.json.gz, *.pt.trace.json[.gz])")
            out.extend(sorted(found))
        elif stat.S_ISREG(mode):
            out.append(path)
        else:
            raise not_regular(path, mode)
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


class PartStream:
    """The parts of one trace's events, handed from the thread that spools them to the parse
    as each is written. The spool waits while :data:`MAX_PENDING_PARTS` parts are unread, so a
    large trace never sits whole on disk."""

    def __init__(self, source: Path, stop: threading.Event) -> None:
        self.source = source
        self._stop = stop
        self._cond = threading.Condition()
        self._parts: deque[tuple[Path, float]] = deque()
        #: The share of the file the spool has read (set by :func:`spool_events`).
        self.read_share = 0.0
        self._taken_share = 0.0
        self._done = False
        self._result: SpooledTrace | None = None
        self._error: BaseException | None = None

    # the spooling thread
    def put(self, part: Path) -> None:
        with self._cond:
            while len(self._parts) >= MAX_PENDING_PARTS and not self._stop.is_set():
                self._cond.wait(0.1)
            self._parts.append((part, self.read_share))
            self._cond.notify_all()

    def finish(self, result: SpooledTrace | None, error: BaseException | None) -> None:
        with self._cond:
            if result is not None:
                self._parts.append((result.parts[-1], 1.0))  # the last part, known only at the end
            self._result, self._error, self._done = result, error, True
            self._cond.notify_all()

    # the parse
    def next_part(self) -> Path | None:
        """The next part, waiting for it; None once there is none left (see :meth:`result`)."""
        with self._cond:
            while not self._parts and not self._done:
                self._cond.wait()
            if self._parts:
                part, self._taken_share = self._parts.popleft()
                self._cond.notify_all()
                return part
            return None

    def read_fraction(self) -> float:
        """The share of the file that the parts taken so far come from."""
        return self._taken_share

    def result(self) -> SpooledTrace:
        """The spooled trace (its header, size, form) once every part is out, or the error
        spooling it raised."""
        with self._cond:
            while not self._done:
                self._cond.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


#: Parts (of :data:`SPOOL_PART_BYTES`) a spool may write ahead of the parse: 256 MiB of disk.
MAX_PENDING_PARTS = 64
#: The size of the parts spools are cut into (see :func:`spool_events`): DuckDB's JSON reader
#: holds a whole input file in its buffer, so parts bound that to a few MiB whatever the size
#: of the trace (bench/README.md).
SPOOL_PART_BYTES = 4 << 20


#: Spool folders are named after the ingest's process id, so that the next ingest can remove
#: those of an ingest that was killed (``kill -9`` leaves up to 256 MiB of parts behind).
SPOOL_DIR_PREFIX = "gpuscope-ingest-"


def sweep_stale_spools(tmp: Path | None = None) -> list[Path]:
    """Remove the spool folders of ingests that are gone (their process no longer exists),
    the current user's only. Returns what was removed."""
    removed: list[Path] = []
    tmp = Path(tmp or tempfile.gettempdir())
    try:
        entries = list(tmp.glob(f"{SPOOL_DIR_PREFIX}*"))
    except OSError:
        return removed
    for d in entries:
        m = re.fullmatch(re.escape(SPOOL_DIR_PREFIX) + r"(\d+)-.+", d.name)
        if not m:
            continue
        try:
            if not d.is_dir() or d.is_symlink() or d.lstat().st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:  # the ingest that made it is gone
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except (OSError, AttributeError):  # alive under another user, or no such call here
            continue
    return removed


class SpoolAhead:
    """Spools trace files in order, ahead of the caller, in threads, each as a
    :class:`PartStream`: the parse reads a file's parts while the file is still being
    gunzipped, and the next files are spooled meanwhile (``workers`` of them at once: a
    directory of rank traces gunzips several ranks on as many cores). Spools go to a temporary
    folder that :meth:`close` removes.

    Starting DuckDB thus hides behind the first file's gunzip, and a large file's gunzip
    behind its own parse (times in bench/README.md, "Ingest at scale").
    """

    def __init__(self, paths: Sequence[Path], max_inflate_ratio: float = MAX_INFLATE_RATIO, workers: int = 1,
                 part_bytes: int | None = None) -> None:
        sweep_stale_spools()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{SPOOL_DIR_PREFIX}{os.getpid()}-"))
        self._paths = list(paths)
        self.max_inflate_ratio = max_inflate_ratio
        self._part_bytes = part_bytes
        self._workers = max(1, workers)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pending: dict[int, PartStream] = {}
        self._next = 0  # the next index to start
        self._taken = 0  # the next index to take
        self._fill()

    def _fill(self) -> None:
        while self._next < len(self._paths) and len(self._pending) < self._workers:
            self._start(self._next)
            self._next += 1

    def _start(self, index: int) -> None:
        stream = PartStream(self._paths[index], self._stop)
        part_bytes = self._part_bytes or SPOOL_PART_BYTES

        def work() -> None:
            try:
                spooled = spool_events(self._paths[index], self.dir, self._stop, self.max_inflate_ratio,
                                       part_bytes=part_bytes, on_part=stream.put, progress=stream)
            except BaseException as exc:  # handed to the caller by the stream
                stream.finish(None, exc)
            else:
                stream.finish(spooled, None)

        thread = threading.Thread(target=work, name=f"gpuscope-spool-{index}", daemon=True)
        thread.start()
        self._threads.append(thread)
        self._pending[index] = stream

    def take(self, index: int) -> PartStream:
        """The stream of the ``index``-th path (taken in order: 0, 1, 2, ...); starts on the
        next paths."""
        if index != self._taken or index not in self._pending:
            raise ValueError(f"spools are taken in order: {index} is not the next one")
        stream = self._pending.pop(index)
        self._taken += 1
        self._fill()
        return stream

    def close(self) -> None:
        """Stop the spools under way (at their next MiB) and remove every spool."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._pending.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
