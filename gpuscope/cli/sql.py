"""`gpuscope sql QUERY`: the user's read-only SQL over the store."""
from __future__ import annotations

import argparse

from .common import EXIT_OK, db_path, print_json

HELP = "run a read-only SQL query over the store"
DESCRIPTION = ("Run a SQL query over the store. The query reads the store and nothing else: only "
               "reading statements run (SELECT, EXPLAIN, informational PRAGMA and CALL); it "
               "cannot change the store, read or write other files (COPY, read_csv, ATTACH, "
               "EXPORT), load extensions or change settings. Tables: runs, traces, devices, samples, kernels, ops, "
               "annotations, graph_launches, ceilings, sampler_stats, meta (docs/store.md). Example: gpuscope sql \"SELECT name, sum(dur_ns)/1e3 AS us "
               "FROM kernels GROUP BY name ORDER BY us DESC LIMIT 5\"")
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("query", metavar="QUERY")
    parser.add_argument("--wide", action="store_true", help="show values whole (text output cuts them at 60 characters)")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import user_query
    from ..render.rows import render_rows

    columns, rows = user_query.run(db_path(args), args.query)
    if args.json:
        print_json([dict(zip(columns, r)) for r in rows])
    else:
        print(render_rows(columns, rows, max_width=None if args.wide else 60) if columns else "ok")
        if len(rows) > 20:
            print(f"({len(rows)} rows)")
    return EXIT_OK
