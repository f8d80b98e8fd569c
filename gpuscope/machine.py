"""This machine's identity and clock as gpuscope records them (host names in runs and
calibrations, wall-clock nanoseconds): one definition for the store, the collectors and the
recordings."""
from __future__ import annotations

import os
import time


def now_ns() -> int:
    """Wall-clock nanoseconds since the Unix epoch."""
    return time.time_ns()


def hostname() -> str:
    """This machine's host name."""
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - Windows
        import socket

        return socket.gethostname()
