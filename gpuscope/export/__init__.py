"""Files for other tools: ``gpuscope export`` (tables: :mod:`.tables`; the timeline:
:mod:`.timeline`) and ``gpuscope report`` (:mod:`.report`).

Where they write follows :mod:`gpuscope.fileio`'s rules: a link, device, FIFO or socket at
``--out`` is refused, an existing file or directory is replaced only with ``force`` (a directory
only when it is an untouched earlier export), the data is written under a fresh temporary name
and renamed into place; ``--out -`` sends a one-file output (a timeline, a report) to standard
output instead.
"""
from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..errors import InputError, ParameterError
from ..fileio import STDOUT, atomic_file, check_output, file_kind

#: The first line of the README.md of every table export: what makes a directory one that
#: ``export --force`` may replace.
README_TITLE = "# gpuscope export of run "
#: The files a table export writes (and an untouched one holds nothing else).
_EXPORT_FILE_RE = re.compile(r"[a-z_]+\.(parquet|csv)|README\.md")


def is_stdout(out: Path | str) -> bool:
    """Whether ``--out`` names standard output (``-``)."""
    return str(out) == STDOUT


def is_export_dir(path: Path) -> bool:
    """Whether the directory ``path`` is an untouched table export: only regular files with the
    names an export writes, and its README.md starting with :data:`README_TITLE`. A directory
    holding anything else (a notebook the user added, a link, a subfolder) is not, so that
    ``--force`` never deletes what gpuscope did not write."""
    try:
        names = [e.name for e in path.iterdir()]
    except OSError:
        return False
    if "README.md" not in names:
        return False
    for name in names:
        st = file_kind(path / name)
        if not _EXPORT_FILE_RE.fullmatch(name) or st is None or not stat.S_ISREG(st.st_mode):
            return False
    try:
        with open(path / "README.md", "rb") as f:
            return f.read(len(README_TITLE)).decode("utf-8", "replace") == README_TITLE
    except OSError:
        return False


def prepare_output(db: Path, out: Path, force: bool, directory: bool, what: str) -> None:
    """Check, before any work, that the store ``db`` is there and that ``out`` may be written
    (``directory``: the export writes a directory, else one file; ``what`` names it in the
    message). ``-`` is standard output, for one file only."""
    from .. import store

    if is_stdout(out):
        if sys.stdout is None or not hasattr(sys.stdout, "buffer"):
            raise ParameterError("out", "{value}: standard output is closed", {"value": STDOUT})
        if directory:
            raise ParameterError("out", "{value}: {what} writes a directory, which cannot go to standard output; "
                                        "name a directory", {"value": STDOUT, "what": what})
    else:
        check_output(out, force=force, directory=directory, what=what, recognise=is_export_dir if directory else None)
    store.check_store_path(db)
    if not store.store_exists(db):
        raise InputError(str(db), "no store here yet (gpuscope run or gpuscope ingest makes one)")
    if not is_stdout(out) and _same_file(out, db):
        raise InputError(str(out), "is the store itself (or a link to it); --force would replace the store "
                                   "with the export: choose another --out")


def _same_file(out: Path, db: Path) -> bool:
    """Whether ``out`` is the store ``db`` or its write-ahead log (a hard link counts)."""
    for path in (db, Path(f"{db}.wal")):
        try:
            if os.path.samestat(os.lstat(out), os.stat(path)):
                return True
        except OSError:
            continue
    return False


class _Counting:
    """Standard output's binary stream, counting the bytes written (a pipe has no size)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.bytes = 0

    def write(self, data: bytes) -> int:
        n = self.raw.write(data)
        self.bytes += len(data)
        return n if n is not None else len(data)

    def flush(self) -> None:
        self.raw.flush()


@contextmanager
def output_file(out: Path) -> Iterator[IO[bytes]]:
    """Where a one-file output is written: standard output for ``-``, else a temporary that
    becomes ``out`` whole when the block ends without an error (:func:`gpuscope.fileio.atomic_file`)."""
    if is_stdout(out):
        stream = _Counting(sys.stdout.buffer)
        yield stream  # type: ignore[misc]
        stream.flush()
        return
    with atomic_file(out) as f:
        yield f


def written_bytes(out: Path, f: IO[bytes]) -> int:
    """The size of what :func:`output_file` wrote (``f`` the stream it gave)."""
    if isinstance(f, _Counting):
        return f.bytes
    return out.stat().st_size


def summary_stream(out: Path | str) -> IO[str]:
    """Where a command's summary (text or ``--json``) goes: standard error when ``--out -``
    puts the file itself on standard output (which then holds the file and nothing else)."""
    return sys.stderr if is_stdout(out) else sys.stdout


def print_summary_json(doc: object, out: Path | str) -> None:
    """``--json``'s document on :func:`summary_stream` (indented for a terminal)."""
    from ..render.json import document

    stream = summary_stream(out)
    stream.write(document(doc, indent=1 if stream.isatty() else None) + "\n")
