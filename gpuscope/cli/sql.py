"""`gpuscope sql QUERY`: the user's read-only SQL over the store."""
from __future__ import annotations

import argparse
import math

from ..errors import InputError
from .common import EXIT_OK, db_path, print_json

HELP = "run a read-only SQL query over the store"
DESCRIPTION = ("Run a SQL query over the store. The query reads the store and nothing else: only "
               "reading statements run (SELECT, EXPLAIN of one, informational PRAGMA and CALL); it "
               "cannot change the store, read or write other files (COPY, read_csv, ATTACH, "
               "EXPORT), load extensions or change settings. Tables: runs, traces, devices, samples, kernels, ops, "
               "annotations, graph_launches, ceilings, sampler_stats, run_models, meta (docs/store.md). Example: gpuscope sql \"SELECT name, sum(dur_ns)/1e3 AS us "
               "FROM kernels GROUP BY name ORDER BY us DESC LIMIT 5\". A query has --timeout seconds "
               "(default 60) and --memory-limit of memory (default 25% of the machine's).")
NEEDS_DB = True
REPORTS = True


def _timeout(text: str) -> float:
    """``--timeout``: seconds, a finite number >= 0 (0: no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds of at least 0 (0: no limit)")
    return value


def _memory_limit(text: str) -> int:
    """``--memory-limit``: a size (``4GB``, ``512MiB``) or a share of the machine's memory (``25%``)."""
    from ..user_query import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("query", metavar="QUERY")
    parser.add_argument("--wide", action="store_true", help="show values whole (text output cuts them at 60 characters)")
    parser.add_argument("--timeout", type=_timeout, default=60.0, metavar="S",
                        help="stop a query still running after S seconds, exit 2 (default 60; 0: no limit)")
    parser.add_argument("--memory-limit", type=_memory_limit, default=None, metavar="SIZE",
                        help="memory a query may use before it spills to disk, e.g. 4GB or 10%% "
                             "(default 25%% of the machine's memory); a query that does not fit even so ends with exit 2")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import user_query
    from ..render.rows import render_rows

    try:
        columns, rows = user_query.run(db_path(args), args.query, timeout_s=args.timeout or None,
                                       memory_limit_bytes=args.memory_limit)
    except user_query.QueryLimitError as exc:  # the limit named as the flag that sets it
        flag = {"timeout_s": "--timeout", "memory_limit_bytes": "--memory-limit"}[exc.limit]
        raise InputError("query", exc.render(flag).removeprefix("query: ")) from None
    if args.json:
        # every column kept (a repeated name gets _2, _3...), every value strict JSON (docs/store.md)
        print_json(user_query.json_rows(columns, rows))
    else:
        print(render_rows(columns, rows, max_width=None if args.wide else 60) if columns else "ok")
        if len(rows) > 20:
            print(f"({len(rows)} rows)")
    return EXIT_OK
