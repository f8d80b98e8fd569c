"""Writing files safely: the one atomic-write path of every command that writes a file
(``export``, ``report``, ``record``) and the checks on the place it writes.

The rules (docs/export.md, "Where a file is written"):

- gpuscope never deletes, renames over or truncates anything that is not a regular file: a
  device, FIFO, socket or directory where a file is expected, or a symbolic link (a planted
  link must not make gpuscope write into its target), is refused with one line (exit 2),
  checked with ``lstat`` so that nothing is opened and nothing blocks;
- an existing regular file is replaced only when asked (``--force``); an existing directory
  (table exports) only when it is recognisably one gpuscope wrote (its ``README.md``);
- the data goes to a temporary name beside the target, made with a random part and opened
  ``O_CREAT|O_EXCL|O_NOFOLLOW`` mode 0600 (a name planted in advance, a link or a FIFO, makes
  the open fail, never redirects it), is flushed to disk (``fsync``) and renamed into place: a
  reader sees the old file or the new one, never half of one, and the new file is owner-only
  whatever the old one's mode was;
- the temporary is removed on every way out (an exception, Ctrl-C, SIGTERM: the write turns
  SIGTERM into an exception for its duration), and those left by a writer that was killed
  (``kill -9``) are removed by the next write into the same folder: their name carries the
  host and the process id, and only the user's own, of processes that are gone on this host,
  are removed (as ingest sweeps its spool folders).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .errors import GpuscopeError, InputError

__all__ = [
    "STDOUT", "AtomicWriter", "Terminated", "atomic_directory", "atomic_file", "check_output", "describe_mode",
    "file_kind", "not_regular_words", "open_regular", "read_regular", "sigterm_raises", "sweep_stale_temporaries", "temp_name", "write_refused",
]

#: ``--out -``: the file goes to standard output.
STDOUT = "-"

#: What marks a temporary name (``.NAME.tmp-HOST-PID-RANDOM``: HOST 8 hex digits of a hash of
#: the host name, RANDOM 16 hex digits).
_TEMP_MARK = ".tmp-"
_TEMP_RE = re.compile(r"\..*" + re.escape(_TEMP_MARK) + r"([0-9a-f]{8})-(\d+)-[0-9a-f]{16}", re.DOTALL)
#: How much of the target's name a temporary name keeps (NAME_MAX is 255 bytes).
_NAME_KEEP = 100


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a file was being written: raised so that the write's clean-up runs
    (the command then ends as terminated, exit 128 + the signal, as the shell reports a process
    the signal ended), instead of the process dying with its temporary."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)


#: What each kind of file is called in messages, in the order they are tested.
_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO or pipe"),
          (stat.S_ISSOCK, "a socket"))


def describe_mode(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, as a user reads it."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def file_kind(path: Path | str) -> os.stat_result | None:
    """``lstat`` of ``path`` (the link itself, never what it points to; opens nothing, so a FIFO
    or a device cannot block), or None when there is nothing there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a parent is a file: nothing can be there
        return None


def open_regular(path: Path | str, what: str, *, shown: str | None = None) -> IO[bytes]:
    """Open ``path`` for binary reading when it is (or links to) a regular file; an
    :class:`InputError` naming it otherwise ("is a FIFO or pipe, not a regular file"). Never
    blocks: opened with ``O_NONBLOCK`` (opening a FIFO without it waits for a writer) and judged
    by ``fstat`` on the open descriptor, so that nothing can be swapped in between a check of the
    path and the open; reads are blocking again once it is known to be a file. ``what`` names
    the file in messages ("spec file", "recording file", "trace"); ``shown`` is the path as
    messages show it (default: the path with its control characters visible)."""
    from .textsafe import visible

    name = shown if shown is not None else visible(str(path))
    try:  # judged before it is opened too: opening some devices acts (a watchdog arms, a tape rewinds)
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(name, f"no such {what}") from None
    except OSError as exc:
        raise InputError(name, f"cannot read the {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise InputError(name, f"is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        raise InputError(name, not_regular_words(mode, what))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise InputError(name, f"is a directory, not a {what}") from None
    except FileNotFoundError:
        raise InputError(name, f"no such {what}") from None
    except OSError as exc:
        raise InputError(name, f"cannot read the {what} ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(name, not_regular_words(mode, what))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def not_regular_words(mode: int, what: str) -> str:
    """Why a file of ``mode`` is refused as a ``what``: reading a FIFO, a device or a socket
    could block for ever or never end."""
    return f"is {describe_mode(mode)}, not a regular file: a {what} is read from a file only"


def read_regular(path: Path | str, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), at most ``max_bytes``: a
    larger file is an :class:`InputError` saying so (a user's JSON file is small; a link to a huge
    log or a sparse file must not fill the memory)."""
    with open_regular(path, what) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        from .textsafe import visible

        raise InputError(visible(str(path)), f"is larger than {max_bytes // 2**20} MiB: not a {what}")
    return data


def read_jsonl(path: Path | str, *, live: bool = False) -> list[dict[str, Any]]:
    """The JSON objects of a ``.jsonl`` file that a program writes (a run folder's marks,
    windows, events, samples), one a line. A line that is not one (cut short by a killed writer)
    is passed over; ``live``: the part after the last newline is still being written and is
    left for the next read. Never follows a link and never blocks: a link, a FIFO, a folder or a
    missing file in its place reads as no lines (the run is still stored, without them)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    out: list[dict[str, Any]] = []
    for raw in lines[:-1] if live else lines:
        try:
            v = json.loads(raw)
        except ValueError:
            continue
        if isinstance(v, dict):
            out.append(v)
    return out


def _host_tag() -> str:
    # the host, hashed to fixed width: on shared storage another host's live writer has a pid
    # that means nothing here, so only this host's temporaries are ever swept
    return hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def temp_name(target: Path) -> Path:
    """A fresh temporary name beside ``target``: hidden, carrying this host and process (for
    :func:`sweep_stale_temporaries`) and a random part (so that no one can plant it in advance)."""
    return target.parent / f".{target.name[:_NAME_KEEP]}{_TEMP_MARK}{_host_tag()}-{os.getpid()}-{secrets.token_hex(8)}"


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive under another user
        return False
    return False


def sweep_stale_temporaries(folder: Path | str) -> list[Path]:
    """Remove from ``folder`` the temporaries (files or directories named by :func:`temp_name`)
    of writers on this host whose process is gone, the current user's only; links and anything
    else are left alone. Returns what was removed."""
    removed: list[Path] = []
    folder = Path(folder)
    host = _host_tag()
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _TEMP_RE.fullmatch(name)
        if not m or m.group(1) != host or int(m.group(2)) == os.getpid():
            continue
        path = folder / name
        st = file_kind(path)
        if st is None or st.st_uid != os.getuid() or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            continue
        if not _pid_gone(int(m.group(2))):
            continue
        try:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path)  # never follows links inside (the fd-based rmtree)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def check_output(out: Path, *, force: bool, directory: bool, what: str,
                 recognise: Callable[[Path], bool] | None = None, check_folder: bool = True,
                 stdout_ok: bool = True) -> None:
    """Refuse, with an :class:`InputError` naming ``out``, a place a command may not write:
    a link, a device, FIFO, socket (anything not a regular file or directory), a directory where
    a file is written or a file where a directory is, an existing one without ``force``, an
    existing directory that ``recognise`` does not accept, or (``check_folder``) a folder that
    is missing or not writable. ``what`` names the output in messages ("the report");
    ``stdout_ok``: the command takes ``--out -`` (the messages say so). Opens nothing."""
    name = str(out)
    stdout_ok = stdout_ok and not directory
    st = file_kind(out)
    if st is not None:
        kind = describe_mode(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            raise InputError(name, f"is a symbolic link; gpuscope does not write through links (remove it, or name "
                                   f"the file itself{', or --out - for standard output' if stdout_ok else ''})")
        if directory and not stat.S_ISDIR(st.st_mode):
            raise InputError(name, f"is {kind}; {what} writes a directory")
        if not directory and not stat.S_ISREG(st.st_mode):
            hint = " (--out - writes to standard output)" if stdout_ok and not stat.S_ISDIR(st.st_mode) else ""
            raise InputError(name, f"is {kind}, not a regular file; {what} is one file and gpuscope replaces only "
                                   f"a regular file{hint}")
        if not force:
            raise InputError(name, "already exists (--force replaces it)")
        if directory and recognise is not None and not recognise(out):
            raise InputError(name, "is a directory that is not an untouched gpuscope export (only the files an "
                                   "export writes, with its README.md); --force replaces only such a directory: "
                                   "remove it or choose another --out")
    if not check_folder:
        return
    parent = out.absolute().parent
    pst = None
    try:
        pst = os.stat(parent)
    except OSError:
        pass
    if pst is None or not stat.S_ISDIR(pst.st_mode):
        raise InputError(name, f"no such directory: {parent}")
    effective = os.access in os.supports_effective_ids
    if not os.access(parent, os.W_OK | os.X_OK, effective_ids=effective):
        raise InputError(name, f"cannot write in {parent}")


def _still_replaceable(out: Path, directory: bool) -> None:
    """Just before the rename: ``out`` is still absent, a regular file, or (``directory``) a
    directory; a link or device put there meanwhile is refused, not renamed over."""
    st = file_kind(out)
    if st is None:
        return
    ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not ok:
        raise InputError(str(out), f"became {describe_mode(st.st_mode)} while gpuscope wrote it; left as it is")


#: The signals that end a command while it writes, turned into :class:`Terminated` so that its
#: temporary is removed: SIGTERM (``kill``, a service manager), SIGHUP (the terminal closed).
_STOP_SIGNALS = ("SIGTERM", "SIGHUP")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM (and SIGHUP) raise :class:`Terminated` in the main thread, so that
    ``finally`` clauses and clean-ups run, instead of ending the process at once. A signal the
    process ignores (``nohup`` ignores SIGHUP) or handles itself is left as it is; outside the
    main thread this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    previous: dict[int, Any] = {}
    try:
        for name in _STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _raise)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: errno values that mean "the file system refused the write", and how a user reads them.
_REFUSED = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted", errno.EIO: "input/output error",
            errno.EFBIG: "file too large", errno.ENAMETOOLONG: "file name too long"}


def write_refused(target: Path | str, exc: BaseException) -> GpuscopeError | None:
    """The one-line error for ``exc`` when it is the file system refusing to write ``target``
    (no space, quota, read-only, permission, I/O error): exit 2 when the place cannot be written
    at all, 1 when it failed while writing. None for any other error."""
    if not isinstance(exc, OSError) or exc.errno not in _REFUSED:
        return None
    reason = _REFUSED[exc.errno]
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG):
        return InputError(str(target), f"cannot write it ({reason}); nothing was changed")
    return GpuscopeError(f"{target}: cannot write it ({reason}); nothing was changed")


def _open_exclusive(path: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask (an API caller's): owner-only
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _AtomicFile:
    """The state of one :func:`atomic_file`: its target, its temporary and the open file."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.tmp = temp_name(target)
        self.file: IO[bytes] | None = None

    def open(self) -> IO[bytes]:
        sweep_stale_temporaries(self.target.absolute().parent)
        try:
            fd = _open_exclusive(self.tmp)
        except FileExistsError:  # a random name taken: someone planted it; never written through
            raise InputError(str(self.tmp), "exists already (planted?); gpuscope makes its temporaries "
                                            "fresh and does not write through them") from None
        self.file = os.fdopen(fd, "wb")
        return self.file

    def commit(self) -> None:
        assert self.file is not None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        _still_replaceable(self.target, directory=False)
        os.rename(self.tmp, self.target)
        _fsync_dir(self.target.absolute().parent)

    def discard(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass
        except OSError:
            pass


@contextmanager
def atomic_file(target: Path | str) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``target`` whole when the block ends without an error (see
    the module's rules; check the place first with :func:`check_output`), and leaves nothing
    behind otherwise. SIGTERM inside the block raises :class:`Terminated`."""
    state = _AtomicFile(Path(target))
    with sigterm_raises():
        try:
            f = state.open()
        except OSError as exc:
            raise write_refused(state.target, exc) or exc from None
        try:
            yield f
            state.commit()
        except OSError as exc:  # a full disk while writing, a folder that turned read-only: one line
            state.discard()
            raise write_refused(state.target, exc) or exc from None
        except BaseException:
            state.discard()
            raise


class AtomicWriter:
    """:func:`atomic_file` for a writer that outlives one block (a recording written tick by
    tick): :meth:`commit` renames it into place, :meth:`discard` removes it. Not tied to a
    signal handler: its user decides what SIGTERM means (``record`` stops early and keeps).
    OSErrors reach the caller as they are (``record`` words them as its own)."""

    def __init__(self, target: Path | str) -> None:
        self._state = _AtomicFile(Path(target))
        self.file = self._state.open()
        self.tmp = self._state.tmp

    def commit(self) -> None:
        """Flush, fsync and rename into place (on failure the temporary is removed)."""
        try:
            self._state.commit()
        except BaseException:
            self._state.discard()
            raise

    def discard(self) -> None:
        """Remove the temporary; the target is untouched."""
        self._state.discard()


def _fsync_tree(folder: Path) -> None:
    for name in os.listdir(folder):
        p = folder / name
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                os.fchmod(fd, 0o600)
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


@contextmanager
def atomic_directory(target: Path | str, *, replace: bool = False,
                     recognise: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A fresh private directory (0700, made by ``mkdir``: never an existing one) beside
    ``target`` to fill; when the block ends without an error its files are flushed and made
    0600 and it is renamed to ``target``. An existing ``target`` (``replace``; check with
    :func:`check_output` that it is one gpuscope may replace; ``recognise`` is asked again just
    before, in case files were added meanwhile) is first renamed aside under a temporary name and
    removed once the new one is in place. Nothing is left on any error."""
    target = Path(target)
    folder = target.absolute().parent
    sweep_stale_temporaries(folder)
    tmp = temp_name(target)
    with sigterm_raises():
        try:
            os.mkdir(tmp, 0o700)
        except FileExistsError:
            raise InputError(str(tmp), "exists already (planted?); gpuscope makes its temporaries fresh") from None
        except OSError as exc:
            raise write_refused(target, exc) or exc from None
        old: Path | None = None
        try:
            yield tmp
            _fsync_tree(tmp)
            _still_replaceable(target, directory=True)
            if file_kind(target) is not None:
                if not replace:
                    raise InputError(str(target), "already exists (--force replaces it)")
                if recognise is not None and not recognise(target):
                    raise InputError(str(target), "changed while gpuscope wrote the export (it is no longer an "
                                                  "untouched export); left as it is")
                old = temp_name(target)
                os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                if old is not None:
                    os.rename(old, target)
                    old = None
                raise
            _fsync_dir(folder)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise write_refused(target, exc) or exc from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
