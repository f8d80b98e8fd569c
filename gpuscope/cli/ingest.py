"""`gpuscope ingest PATH...`: load Kineto traces (files, .gz, directories) as one run."""
from __future__ import annotations

import argparse
import sys

from .common import EXIT_OK, add_inflate_argument, add_model_arguments, db_path, load_model, print_json, store_model

HELP = "load Kineto traces (files, .gz, directories) as one run"
DESCRIPTION = ("Load PyTorch profiler (Kineto) traces as one run: files, .json.gz, or directories "
               "(every *.json / *.json.gz inside). Several files (ranks, worker processes) make one run.")
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace file or directory")
    parser.add_argument("--name", help="run name (default: the first file's name)")
    parser.add_argument("--all-ops", action="store_true",
                        help="keep every CPU op (default: on traces with GPU activity, only ops that launched GPU work and their ancestors)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--progress", action="store_true",
                        help="progress on stderr even when it is not a terminal or with --json "
                             "(default: only on a terminal, without --json)")
    parser.add_argument("--threads", type=_threads, metavar="N",
                        help="most threads for parsing and files read at once (default: the cores, at most 8)")
    add_model_arguments(parser)
    add_inflate_argument(parser)


def _threads(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"{n} is out of range (1 to 256)")
    return n


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import ingest
    from ..render.ingest import render_ingest

    given = load_model(args.model) if args.model else None  # a bad file stops here, before any work
    shown = args.progress or (sys.stderr.isatty() and not args.quiet and not args.json)
    progress = ingest.stderr_progress(shown)
    result = ingest.ingest(db_path(args), args.paths, name=args.name, progress=progress, all_ops=args.all_ops,
                           max_inflate_ratio=args.max_inflate_ratio or ingest.MAX_INFLATE_RATIO,
                           threads=args.threads)
    if given is not None:
        store_model(db_path(args), result.run_id, given)
    doc = result.to_json()
    if given is not None:
        doc["model"] = {"source": given[1], "name": given[0].name}
    if args.json:
        print_json(doc)
    else:
        print(render_ingest(doc))
    return EXIT_OK
