"""Where gpuscope keeps its store by default."""
from __future__ import annotations

import os
import sys
from pathlib import Path

DB_ENV = "GPUSCOPE_DB"
DB_FILENAME = "gpuscope.duckdb"


def user_data_dir() -> Path:
    """The per-user data directory: ``$XDG_DATA_HOME/gpuscope`` (``~/.local/share/gpuscope``),
    ``~/Library/Application Support/gpuscope`` on macOS, ``%LOCALAPPDATA%\\gpuscope`` on Windows."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_DATA_HOME")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "gpuscope"


def default_db_path() -> Path:
    """``--db`` default: ``$GPUSCOPE_DB`` if set, else ``gpuscope.duckdb`` in :func:`user_data_dir`."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env).expanduser()
    return user_data_dir() / DB_FILENAME


#: The mode bits gpuscope's own files and directories never grant beyond the owner.
PRIVATE_UMASK = 0o077
_user_umask: int | None = None


def private_umask() -> int:
    """Make files this process creates from now on owner-only (0600 files, 0700 directories)
    and return the umask that was in force, which :func:`user_umask` also remembers."""
    global _user_umask
    previous = os.umask(PRIVATE_UMASK)
    if _user_umask is None or previous != PRIVATE_UMASK:
        _user_umask = previous
    return previous


def user_umask() -> int:
    """The user's own umask (before :func:`private_umask`), for processes gpuscope starts."""
    if _user_umask is not None:
        return _user_umask
    current = os.umask(0)
    os.umask(current)
    return current
