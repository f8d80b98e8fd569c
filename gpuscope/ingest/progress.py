"""Progress of an ingest: one line per stage (reading a file, linking, writing the run)."""
from __future__ import annotations

import sys
from collections.abc import Callable

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The progress reporter that reports nothing."""
    return None


def stderr_progress(enabled: bool) -> Progress:
    """A progress reporter that writes one line per stage to stderr when ``enabled``."""
    if not enabled:
        return quiet

    def report(msg: str) -> None:
        print(f"gpuscope: {msg}", file=sys.stderr, flush=True)

    return report
