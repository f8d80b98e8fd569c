"""Files for other tools: ``gpuscope export`` (tables: :mod:`.tables`; the timeline:
:mod:`.timeline`) and ``gpuscope report`` (:mod:`.report`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError


def prepare_output(db: Path, out: Path, force: bool, directory: bool, what: str) -> Path:
    """Check, before any work, that the store ``db`` is there and that ``out`` may be written
    (``directory``: the export writes a directory, else one file; ``what`` names it in the
    message); returns the temporary path beside ``out`` to write first and rename into place."""
    from .. import store

    if out.exists() and not force:
        raise InputError(str(out), "already exists (--force replaces it)")
    if out.exists() and out.is_dir() != directory:
        raise InputError(str(out), f"is a {'file' if directory else 'directory'}; {what} "
                                   f"{'writes a directory' if directory else 'is one file'}")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise InputError(str(out), f"no such directory: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(str(out), f"cannot write in {parent}")
    store.check_store_path(db)
    if not store.store_exists(db):
        raise InputError(str(db), "no store here yet (gpuscope run or gpuscope ingest makes one)")
    return parent / f".{out.name}.tmp-{os.getpid()}"
