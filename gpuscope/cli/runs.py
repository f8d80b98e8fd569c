"""`gpuscope runs`: the stored runs, newest first."""
from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_OK, db_path, positive_int, print_json, terminal_width

HELP = "list runs, newest first"
DESCRIPTION = ("List the stored runs, newest first: id, name, status (recording, complete, "
               "incomplete, failed), source, start, duration, row counts, exit code and the "
               "command (secrets redacted). A RUN argument elsewhere is a run id or name.")
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--limit", type=positive_int, metavar="N", help="show at most this many runs (the newest)")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import store
    from ..render.runs import render_runs

    db = db_path(args)
    store.check_store_path(db)
    if not store.store_exists(db):
        runs: list[dict[str, Any]] = []
    else:
        con = store.connect(db, read_only=True)
        try:
            runs = store.list_runs(con)
        finally:
            con.close()
    if args.limit is not None:
        runs = runs[: args.limit]
    if args.json:
        print_json(runs)
    else:
        print(render_runs(runs, width=terminal_width()))
    return EXIT_OK
