"""`gpuscope ingest PATH...`: load Kineto traces (files, .gz, directories) as one run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, add_inflate_argument, add_model_arguments, db_path, load_model, print_json, store_model

HELP = "load Kineto traces (files, .gz, directories) as one run"
DESCRIPTION = ("Load PyTorch profiler (Kineto) traces as one run: files, .json.gz, or directories "
               "(every *.json / *.json.gz inside). Several files (ranks, worker processes) make one run. "
               "A run folder that `gpuscope run` kept because the store was unavailable "
               "(gpuscope-runs/pending-...) is stored as the run it recorded: samples, traces, marks, "
               "windows, command and exit code. Afterwards, the pending runs beside the store are stored too.")
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
    folder = _pending_folder(args.paths)
    if folder is not None:
        return _store_folder(args, folder, given)
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
    _store_pending(args)
    return EXIT_OK


def _pending_folder(paths: list[str]) -> Path | None:
    """The one path given when it is a run folder ``gpuscope run`` kept for later (its
    ``run.json`` says so); None for traces. A run folder among other paths is bad input."""
    from ..errors import InputError
    from ..run.pending import KIND
    from ..sinks.rundir import RUN_FILE, read_run_file
    from ..textsafe import visible

    found = []
    for p in paths:
        path = Path(p)
        if path.is_dir() and (path / RUN_FILE).is_file():
            try:
                doc = read_run_file(path)
            except ValueError:
                continue  # not gpuscope's: read as a folder of traces (which says what is wrong)
            if doc is not None and doc.get("kind") == KIND:
                found.append(path)
    if not found:
        return None
    if len(paths) > 1:
        raise InputError(visible(str(found[0])), "a pending run folder is stored on its own: give it alone "
                                                 "(gpuscope ingest RUN_DIR)")
    return found[0]


def _store_folder(args: argparse.Namespace, folder: Path, given: Any) -> int:
    """``gpuscope ingest RUN_DIR``: store a pending run folder as its run."""
    from ..errors import InputError
    from ..run.pending import store_run_folder
    from ..textsafe import visible

    if args.name:
        raise InputError("--name", "a run folder is stored under its own run's name")
    db = db_path(args)
    stored = store_run_folder(db, folder)
    if given is not None:
        store_model(db, stored.run_id, given)
    doc = {"run_id": stored.run_id, "name": stored.name, "run_dir": str(folder), "samples": stored.samples,
           "traces": stored.traces, "notes": stored.notes}
    if args.json:
        print_json(doc)
    else:
        print(f"stored the run folder {visible(str(folder))} as run {stored.run_id} '{visible(stored.name)}': "
              f"{stored.samples} samples, {stored.traces} traces")
        for note in stored.notes:
            print(f"  note: {visible(note)}")
    _store_pending(args)
    return EXIT_OK


def _store_pending(args: argparse.Namespace) -> None:
    """The store took a write: store the other pending run folders beside it, one line each on stderr."""
    from ..errors import GpuscopeError
    from ..run.pending import store_pending_runs

    def say(line: str) -> None:
        print(f"gpuscope ingest: {line}", file=sys.stderr, flush=True)

    try:
        store_pending_runs(db_path(args), say)
    except (GpuscopeError, OSError) as exc:  # what was asked for is stored: a note, not a failure
        say(f"pending runs beside the store were not stored ({exc})")
