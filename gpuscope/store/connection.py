"""Opening the store: one DuckDB file, created and migrated on first write.

DuckDB allows one writing process per file and no reader from another process while it
writes, so writers keep their connection short: ingest stages everything in memory and
attaches the store only for its final transaction; a busy store is retried, then named.
"""
from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import GpuscopeError, StoreBusyError, StoreError, StoreReadOnlyError, StoreWriteError
from ..fileio import describe_mode
from ..machine import hostname, now_ns  # noqa: F401 - re-exported with the store API
from .tx import transaction  # noqa: F401 - re-exported with the store API
from . import schema
from .schema import STORE_BLOCK_SIZE, migrate, schema_version

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

T = TypeVar("T")


def attach_sql(path: Path | str, alias: str = "store") -> str:
    """The ``ATTACH`` statement for the store at ``path`` (new files get :data:`STORE_BLOCK_SIZE`)."""
    from .._db import sql_literal

    quoted = sql_literal(str(path))
    options = "" if Path(path).exists() else f" (BLOCK_SIZE {STORE_BLOCK_SIZE})"
    return f"ATTACH {quoted} AS {alias}{options}"


#: Bytes 8-11 of every DuckDB database file.
_DUCKDB_MAGIC = b"DUCK"


def _target(path: Path | str) -> tuple[os.stat_result | None, os.stat_result | None]:
    """``(lstat, stat)`` of ``path``: the name itself and what it leads to (a link's target).
    Neither opens the file, so a FIFO or a device cannot block. ``stat`` is None for a link
    whose target is missing; both are None when nothing is there."""
    try:
        own = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except NotADirectoryError:  # a parent is a file: no store there, and none can be made
        raise StoreError(f"{path}: cannot use the store: a folder on its path is a file") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store: {exc.strerror or exc}") from None
    if not stat.S_ISLNK(own.st_mode):
        return own, own
    try:
        return own, os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return own, None
    except OSError as exc:  # a link loop (ELOOP), a target in a folder we may not enter
        raise StoreError(f"{path}: cannot read the store: {exc.strerror or exc}") from None


def _refuse_not_a_file(path: Path | str, own: os.stat_result | None, target: os.stat_result | None) -> None:
    """A :class:`StoreError` when what is at ``path`` cannot be a store file: a directory, a
    device, FIFO or socket (directly or behind a link), or a link to nothing (creating the store
    through it would make a file wherever the link points)."""
    if own is None:
        return
    if target is None:
        raise StoreError(f"{path}: is a symbolic link to {os.readlink(path)!s}, which does not exist; gpuscope "
                         "does not create a store through a link (make the store there, or name a real path)")
    if stat.S_ISDIR(target.st_mode):
        raise StoreError(f"{path}: is a directory, not a store file (pass --db DIR/gpuscope.duckdb)")
    if not stat.S_ISREG(target.st_mode):
        via = " (behind a symbolic link)" if stat.S_ISLNK(own.st_mode) else ""
        raise StoreError(f"{path}: is {describe_mode(target.st_mode)}{via}, not a store file; gpuscope opens, "
                         "creates or replaces only a regular file there")


def store_exists(path: Path | str) -> bool:
    """Whether a store file is at ``path`` (a link to one counts). An empty regular file
    (``--db "$(mktemp)"``) is no store yet: it holds nothing, and the first write makes the
    store there. Anything that is not a regular file (a device such as /dev/null, a FIFO, a
    socket, a directory, a link to nothing) is a :class:`StoreError`, never "no store yet":
    it must not be replaced by one."""
    own, target = _target(path)
    if own is None:
        return False
    _refuse_not_a_file(path, own, target)
    assert target is not None
    return target.st_size > 0


def check_store_path(path: Path | str) -> None:
    """Raise :class:`StoreError` when ``path`` cannot be a store: a directory, a device, FIFO
    or socket (seen with ``lstat``/``stat``, never opened, so nothing blocks), a link to nothing,
    an existing file that is not a DuckDB database (DuckDB's own errors for these are
    misleading), a write-ahead log beside it (``NAME.wal``) that is not a regular file or a spill
    folder (``NAME.tmp``) that is not a directory (DuckDB would write through them). A link to a
    regular store is fine: what it points to is judged."""
    p = Path(path)
    own, target = _target(p)
    _refuse_not_a_file(p, own, target)
    wal_own, _ = _target(f"{p}.wal")
    if wal_own is not None and not stat.S_ISREG(wal_own.st_mode):
            raise StoreError(f"{p}.wal: is {describe_mode(wal_own.st_mode)}, not the store's write-ahead log; "
                         "gpuscope writes the log only as a regular file (remove it)")
    spill_own, _ = _target(f"{p}.tmp")  # DuckDB's default folder for what a large query spills
    if spill_own is not None and not stat.S_ISDIR(spill_own.st_mode):
            raise StoreError(f"{p}.tmp: is {describe_mode(spill_own.st_mode)}, not the store's folder for temporary "
                         "data; DuckDB would write the store's data through it (remove it)")
    if own is None:
        return
    try:
        # O_NONBLOCK: were it swapped for a FIFO since the stat, the open must not wait for a writer
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"{p}: cannot read the store: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        _refuse_not_a_file(p, st, st)
        head = os.read(fd, 12)
    except OSError as exc:
        raise StoreError(f"{p}: cannot read the store: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if head and head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(f"{p}: not a gpuscope store (the file is not a DuckDB database)")


#: What DuckDB (or the OS) says when a write to the store's file system fails, and the reason as
#: a user reads it. DuckDB has no error class for these: a failed commit is a
#: TransactionException, a failed checkpoint an IOException or a FatalException, each quoting the
#: OS error's text.
_WRITE_FAILURES = (
    ("No space left", "no space left on the device"),
    ("Disk quota exceeded", "disk quota exceeded"),
    ("Read-only file system", "read-only file system"),
    ("Permission denied", "permission denied"),
    ("Operation not permitted", "operation not permitted"),
    ("Input/output error", "input/output error"),
)
#: Reasons that say the store cannot be written as given (exit 2, like any unusable --db); the
#: others are a failure of the machine while working (exit 1, as ingest on a full disk).
_UNWRITABLE = {"read-only file system", "permission denied", "operation not permitted"}


def write_failure_reason(exc: BaseException) -> str | None:
    """The reason, as a user reads it, when ``exc`` says that the store's file system refused a
    write ("no space left on the device", "read-only file system", ...); None for any other error."""
    if isinstance(exc, (StoreWriteError, StoreReadOnlyError)):
        return exc.reason
    if isinstance(exc, OSError) and exc.errno is not None:
        text = os.strerror(exc.errno)
    else:
        text = str(exc)
    for needle, reason in _WRITE_FAILURES:
        if needle in text:
            return reason
    return None


def write_error(path: Path | str, exc: BaseException) -> GpuscopeError | None:
    """The error to raise for ``exc`` when it is a refused write (:func:`write_failure_reason`):
    :class:`StoreReadOnlyError` or :class:`StoreWriteError`; None for any other error."""
    reason = write_failure_reason(exc)
    if reason is None:
        return None
    return (StoreReadOnlyError if reason in _UNWRITABLE else StoreWriteError)(path, reason)


def check_writable(path: Path | str) -> None:
    """Raise :class:`StoreReadOnlyError` when the store at ``path`` (or the file to be made there)
    cannot be written: a read-only file system, a read-only (or immutable) file, or a folder
    where DuckDB cannot create the store's write-ahead log (``NAME.wal``) beside it. Checked
    before the first write, because DuckDB finds out only at commit, as an internal error
    quoting the log file. Asks the kernel (``access``), so root, who may write whatever the
    mode bits say, is refused only where root cannot write either."""
    p = Path(path).absolute()
    folder = p.parent
    while not folder.exists() and folder != folder.parent:  # made by the first write: ask its first existing ancestor
        folder = folder.parent
    targets = ([(p, os.W_OK, "the file is read-only")] if p.exists() else []) + \
        [(folder, os.W_OK | os.X_OK, "the folder is read-only")]
    effective = os.access in os.supports_effective_ids
    for target, mode, reason in targets:
        if os.access(target, mode, effective_ids=effective):
            continue
        try:
            if os.statvfs(target).f_flag & os.ST_RDONLY:
                reason = "read-only file system"
        except OSError:
            pass
        if reason == "the folder is read-only":
            reason = f"the folder {folder} is read-only, and the store writes {p.name}.wal beside it" \
                if p.exists() else f"the folder {folder} is read-only"
        raise StoreReadOnlyError(path, reason, new=not p.exists())


def _make_room(path: Path) -> None:
    """Make the folder of a store about to be created, and remove an empty regular file of the
    user's in its place (``--db "$(mktemp)"``: DuckDB refuses to open an empty file, and it holds
    nothing). Nothing else is ever removed: a device, FIFO, socket or directory is refused
    (:func:`check_store_path`), and so are an empty file behind a link (removing the link would
    break it) and another user's empty file. Failures are a :class:`StoreError`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        own, target = _target(path)
        _refuse_not_a_file(path, own, target)
        if own is None or target is None or target.st_size > 0:
            return
        if stat.S_ISLNK(own.st_mode):
            raise StoreError(f"{path}: is a symbolic link to an empty file; gpuscope does not replace a file "
                             "through a link (name the file itself, or make the store first at a real path)")
        if own.st_uid != os.getuid():
            raise StoreError(f"{path}: is an empty file of another user (uid {own.st_uid}); gpuscope replaces "
                             "only the user's own empty file with a new store")
        os.unlink(path)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the store: {exc.strerror or exc}") from None


def open_attached(con: duckdb.DuckDBPyConnection, path: Path | str, alias: str = "store", retry_s: float = 2.0) -> None:
    """``ATTACH`` the store at ``path`` (creating its folder and file if needed) to ``con``,
    retried while another process writes to it; any failure is a :class:`StoreError`."""
    from .._db import duckdb

    check_store_path(path)
    check_writable(path)
    _make_room(Path(path))
    try:
        retry_while_locked(path, retry_s, lambda: con.execute(attach_sql(path, alias)))
    except duckdb.Error as exc:
        raise write_error(path, exc) or StoreError(
            f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None


#: How long a writer waits for a store that another process holds (creating or migrating it,
#: or writing): two ``gpuscope run`` started at once on a store that does not exist yet both
#: create it, and one waits for the other (issue 30, point 3).
CREATE_RETRY_S = 10.0


def _create(path: Path, retry_s: float = CREATE_RETRY_S) -> None:
    """Create (and migrate) the store at ``path``. Another process creating or migrating it at
    the same moment holds the file's lock: waited for (``retry_s``), and a store it made
    meanwhile is not made again."""
    from .._db import duckdb

    con = duckdb.connect(":memory:")
    try:
        def attach() -> None:
            if not _claim_empty_file(path):
                raise _BeingCreated(path)
            con.execute(attach_sql(path))

        retry_while_locked(path, retry_s, attach)
        con.execute("USE store")
        migrate(con, str(path))
        con.execute("USE memory")
        con.execute("DETACH store")
    except duckdb.Error as exc:
        raise write_error(path, exc) or StoreError(
            f"{path}: cannot create the store: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def _claim_empty_file(path: Path) -> bool:
    """Make room for a new store at ``path`` (:func:`_make_room`), unless what is there is an
    empty file another process holds locked (DuckDB creating the store in it this very moment,
    before its first block is written): False then, to wait for it instead of removing it."""
    own, target = _target(path)
    if own is not None and target is not None and target.st_size == 0 and stat.S_ISREG(own.st_mode):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no POSIX locks here
            fcntl = None  # type: ignore[assignment]
        if fcntl is not None:
            try:
                fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    # DuckDB locks its file with fcntl; a lock we can take is held by nobody
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return False
                finally:
                    # (releases the probe's lock; it would also release a lock this process held on
                    # the file, but a process that is creating this store is not creating it again)
                    os.close(fd)
    _make_room(path)
    return True


_LOCK_RE = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


_IN_USE_HERE = "Unique file handle conflict"


class _BeingCreated(Exception):
    """An empty store file another process holds locked: DuckDB is creating the store in it."""


def retry_while_locked(path: Path | str, retry_s: float, open_store: Callable[[], T]) -> T:
    """``open_store()`` (a connect or an ATTACH of the store file), retried for ``retry_s``
    seconds while another process holds the file's write lock; then a :class:`StoreError`
    naming that process. Other I/O errors become a :class:`StoreError` at once."""
    from .._db import duckdb

    deadline = time.monotonic() + retry_s
    pause_s = 0.02
    while True:
        try:
            return open_store()
        except (duckdb.Error, _BeingCreated) as exc:
            msg = str(exc)
            m = _LOCK_RE.search(msg)
            # (in this process: a thread's connection has the file attached, as the store sink's
            # flush does for a moment; DuckDB says so as a "Resource In Use" error)
            here = _IN_USE_HERE in msg
            if not isinstance(exc, (duckdb.IOException, _BeingCreated)) and not here:
                raise
            busy = m is not None or here or isinstance(exc, _BeingCreated)
            if busy and time.monotonic() < deadline:
                # backing off: a writer that holds the store for seconds (a migration, a large
                # ingest's write) is not polled 20 times a second by every waiter
                time.sleep(min(pause_s, max(0.0, deadline - time.monotonic())))
                pause_s = min(pause_s * 2, 0.25)
                continue
            if m:
                raise StoreBusyError(f"{path}: the store is busy (held by {m.group(1)}, pid {m.group(2)})") from None
            if here:
                raise StoreBusyError(f"{path}: the store is busy (held by another connection of this process)") from None
            if busy:
                raise StoreBusyError(f"{path}: the store is busy (another process is creating it)") from None
            raise write_error(path, exc) or StoreError(
                f"{path}: cannot open the store: {msg.splitlines()[0]}") from None


def connect_for_user_query(path: Path | str, temp_dir: Path | str,
                           memory_limit_bytes: int | None = None) -> duckdb.DuckDBPyConnection:
    """The store opened read-only for a query a user typed (``gpuscope sql``): DuckDB's
    access to any other file (``COPY ... TO``, ``read_csv``, ``ATTACH``, ``EXPORT``,
    extensions) is turned off and the configuration locked, so that on a shared server the
    query interface cannot become a way to read or write other files. The store itself stays
    readable because it is attached before access is turned off. ``temp_dir`` (which the
    caller removes) is where a large query spills: the lockdown leaves DuckDB's temporary
    directory writable, so it must not be the store's shared ``<store>.tmp``.
    ``memory_limit_bytes`` lowers DuckDB's memory limit (never raises it) before the lock."""
    from .._db import sql_literal

    con = connect(path, read_only=True)
    try:
        con.execute(f"SET temp_directory = {sql_literal(str(temp_dir))}")
        if memory_limit_bytes is not None:
            current = con.execute("SELECT value FROM duckdb_settings() WHERE name = 'memory_limit'").fetchone()
            now = _setting_bytes(current[0]) if current is not None else None
            if now is None or memory_limit_bytes < now:
                con.execute(f"SET memory_limit = '{int(memory_limit_bytes)}B'")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except Exception:
        con.close()
        raise
    return con


def _setting_bytes(text: str) -> float | None:
    """Bytes of a size as DuckDB shows a setting (``32.0 MiB``, ``1.5 GB``); None if unreadable."""
    units = {"bytes": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
             "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "TiB": 1024.0**4}
    parts = str(text).split()
    try:
        return float(parts[0]) * units[parts[1]] if len(parts) == 2 else None
    except (ValueError, KeyError):
        return None


def connect(path: Path | str, read_only: bool = False, retry_s: float = 2.0) -> duckdb.DuckDBPyConnection:
    """Open the store at ``path`` and migrate it. ``read_only`` opens never create, migrate or
    otherwise change a file: a store of an older schema is read as the current schema through
    temporary views (:func:`schema.present_as_current`), so reading commands work on a
    read-only store of any version this gpuscope can read.

    A store held by another writing process is retried for ``retry_s`` seconds (writers keep
    their transactions short), then reported as a :class:`StoreError` naming that process.
    """
    from .._db import duckdb

    path = Path(path)
    check_store_path(path)
    if read_only and not store_exists(path):
        raise StoreError(f"{path}: no store here yet (run `gpuscope ingest` or `gpuscope run` first)")
    if not read_only:
        check_writable(path)
    if not read_only and not store_exists(path):
        _create(path, max(retry_s, CREATE_RETRY_S))
    try:
        con = retry_while_locked(path, retry_s, lambda: duckdb.connect(str(path), read_only=read_only))
    except duckdb.Error as exc:
        raise write_error(path, exc) or StoreError(
            f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None
    try:
        if read_only:
            version = schema_version(con)
            if version != schema.SCHEMA_VERSION:
                if version > schema.SCHEMA_VERSION:
                    raise StoreError(
                        f"{path}: the store uses schema version {version}, newer than this gpuscope "
                        f"understands ({schema.SCHEMA_VERSION}): upgrade gpuscope"
                    )
                # a reading command never writes: the older store is read as the current
                # schema (temporary views over its tables); only a write migrates it
                schema.present_as_current(con, version, str(path))
        else:
            migrate(con, str(path))
            from .runs import recover_stale_runs  # the lifecycle finishes runs whose recorder died

            recover_stale_runs(con)
    except GpuscopeError:
        con.close()
        raise
    except Exception as exc:
        con.close()
        # migrating, or finishing a dead recorder's run, on a full disk: say so, not "not usable"
        raise write_error(path, exc) or StoreError(
            f"{path}: not a usable gpuscope store: {str(exc).splitlines()[0]}") from None
    return con


@contextmanager
def writing(path: Path | str, retry_s: float = 2.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """One short write transaction on the store at ``path`` (opened, and closed afterwards). A
    write the file system refuses (a full disk, a read-only store), at any statement or at the
    commit, is a :class:`StoreWriteError` or :class:`StoreReadOnlyError` with one line, and the
    transaction is rolled back: the store is as it was."""
    from .._db import duckdb

    con = connect(path, retry_s=retry_s)
    try:
        with transaction(con):
            yield con
    except duckdb.Error as exc:
        raise write_error(path, exc) or exc from None
    finally:
        try:
            con.close()
        except duckdb.Error:  # the checkpoint at close failed on a full disk: the commit is in the log
            pass
