"""`gpuscope calibrate` (work in progress)."""
from __future__ import annotations

import argparse

from .errors import GpuscopeError

HELP = "calibrate (not implemented yet)"
DESCRIPTION = HELP
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    raise GpuscopeError("not implemented yet")
