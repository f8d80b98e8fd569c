"""The ``gpuscope`` command line.

Heavy modules (duckdb, torch, textual, exporters) are imported inside the commands that use
them, so ``gpuscope --help`` stays fast and light. Exit codes: 0 success, 1 a failure while
working, 2 unusable input or arguments (one line on stderr naming the input and the problem).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .errors import GpuscopeError, InputError, StoreError
from .argtypes import add_inflate_argument, positive_int
from .paths import default_db_path, private_umask

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with gpuscope's one-line, exit-2 usage errors, and no abbreviated options
    (``--model`` must not silently mean ``--model-bytes``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def print_json(doc: Any) -> None:
    """Print one JSON document on stdout: indented for a terminal, compact (one line, and
    written by the json module's C encoder, several times faster on a large report) for a
    pipe or a file."""
    indent = 1 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(doc, default=_json_default, ensure_ascii=False, indent=indent) + "\n")


def _db(args: argparse.Namespace) -> Path:
    return Path(args.db).expanduser() if args.db else default_db_path()


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


def cmd_ingest(args: argparse.Namespace) -> int:
    from . import trace
    from .report import render_ingest

    progress = trace.stderr_progress(sys.stderr.isatty() and not args.quiet)
    result = trace.ingest(_db(args), args.paths, name=args.name, progress=progress, all_ops=args.all_ops,
                          max_inflate_ratio=args.max_inflate_ratio or trace.MAX_INFLATE_RATIO)
    doc = result.to_json()
    if args.json:
        print_json(doc)
    else:
        print(render_ingest(doc))
    return EXIT_OK


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or ref.lower().endswith((".json", ".gz")) or Path(ref).is_dir()


def _already_ingested(db: Path, ref: str) -> tuple[int, str] | None:
    """The newest complete run ingested from traces with the same content as ``ref``, if any."""
    from . import store, trace

    store.check_store_path(db)  # a --db that cannot be a store is its own error, before any work
    if not store.store_exists(db):
        return None
    try:
        digest = trace.inputs_digest(trace.expand_paths([ref]))
    except (InputError, OSError):
        return None  # the ingest that follows says what is wrong with it
    con = store.connect(db, read_only=True)
    try:
        ref = store.read.find_ingested_run(con, digest)
    finally:
        con.close()
    return (ref.id, ref.name) if ref else None


def run_ref_or_ingest(db: Path, ref: str | None, name: str | None = None, announce: bool = False,
                      max_inflate_ratio: float | None = None) -> str | None:
    """A ``RUN`` argument as a run reference: a trace file or directory is ingested first and
    its new run id returned; a path-like argument that does not exist is an InputError."""
    return open_run_ref(db, ref, name, announce, keep_open=False, max_inflate_ratio=max_inflate_ratio)[0]


def open_run_ref(
    db: Path, ref: str | None, name: str | None = None, announce: bool = False, keep_open: bool = True,
    max_inflate_ratio: float | None = None,
) -> tuple[str | None, Any]:
    """:func:`run_ref_or_ingest`, and with ``keep_open`` the connection that wrote an ingested
    run (None when nothing was ingested): reading the run on it spares opening the store again."""
    if ref is not None and Path(ref).exists() and _looks_like_path(ref):
        from . import trace

        reused = _already_ingested(db, ref)
        if reused is not None:
            print(f"{ref}: already ingested as run {reused[0]} '{reused[1]}' (same content): using it "
                  f"(gpuscope ingest makes a new run)", file=sys.stderr, flush=True)
            return str(reused[0]), None

        result = trace.ingest(db, [ref], name=name, progress=trace.stderr_progress(sys.stderr.isatty()),
                              keep_open=keep_open, max_inflate_ratio=max_inflate_ratio or trace.MAX_INFLATE_RATIO)
        if announce:
            print(f"ingested {ref} as run {result.run_id} '{result.name}'", file=sys.stderr, flush=True)
        return str(result.run_id), result.connection
    if ref is not None and _looks_like_path(ref) and not Path(ref).exists() and os.sep in ref:
        raise InputError(ref, "no such file or directory (and no run of that name)")
    return ref, None


def cmd_analyze(args: argparse.Namespace) -> int:
    from . import store
    from .report import render_analysis

    from .analyzers.breakdown import analyze_run

    db = _db(args)
    ref, con = open_run_ref(db, args.run, name=args.name, announce=not args.json,
                            max_inflate_ratio=args.max_inflate_ratio)
    if con is None:
        con = store.connect(db, read_only=True)
    try:
        run = store.resolve_run(con, ref, db)
        doc = analyze_run(con, run.id, roof=args.roof, gpu=args.gpu, specs_path=args.specs)
    finally:
        con.close()
    if args.json:
        print_json(doc)
    else:
        print(render_analysis(doc, top=args.top, wide=args.wide))
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from . import store
    from .report import render_runs

    db = _db(args)
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
        print(render_runs(runs))
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    from . import user_query
    from .report import render_rows

    columns, rows = user_query.run(_db(args), args.query)
    if args.json:
        print_json([dict(zip(columns, r)) for r in rows])
    else:
        print(render_rows(columns, rows, max_width=None if args.wide else 60) if columns else "ok")
        if len(rows) > 20:
            print(f"({len(rows)} rows)")
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gpuscope`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="PATH", help="the store (default: $GPUSCOPE_DB, else a file in the user data directory)")
    reporting = argparse.ArgumentParser(add_help=False)
    reporting.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of text")

    p = _Parser(
        prog="gpuscope",
        description="GPU profiling and telemetry for LLM inference on NVIDIA and AMD GPUs.",
        epilog="Every report also comes as --json. Docs: README.md and docs/ in the source tree.",
    )
    p.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("ingest", parents=[common, reporting], help="load Kineto traces (files, .gz, directories) as one run",
                       description="Load PyTorch profiler (Kineto) traces as one run: files, .json.gz, or directories "
                                   "(every *.json / *.json.gz inside). Several files (ranks, worker processes) make one run.")
    s.add_argument("paths", nargs="+", metavar="PATH", help="trace file or directory")
    s.add_argument("--name", help="run name (default: the first file's name)")
    s.add_argument("--all-ops", action="store_true",
                   help="keep every CPU op (default: on traces with GPU activity, only ops that launched GPU work and their ancestors)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    add_inflate_argument(s)
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("analyze", parents=[common, reporting], help="time breakdown and attribution of a run (default: the latest)",
                       description="Time breakdown (compute, communication, memory, idle), top kernels and top ops of a run. "
                                   "RUN is a run id or name (default: the newest run); a trace file or directory is ingested first.")
    s.add_argument("run", nargs="?", metavar="RUN", help="run id or name, or a trace path to ingest and analyze")
    s.add_argument("--top", type=positive_int, default=15, help="rows in the text report's top lists (default 15)")
    s.add_argument("--name", help="run name when RUN is a trace path")
    s.add_argument("--wide", action="store_true", help="show kernel names and shapes whole (--json always has them whole)")
    s.add_argument("--roof", choices=("spec", "measured"), default="spec",
                   help="judge against the spec-sheet peaks (default) or the newest `gpuscope calibrate` of the same GPU")
    s.add_argument("--gpu", metavar="KEY", help="the GPU to judge against (spec key or name), overriding identification")
    s.add_argument("--specs", metavar="FILE", help="extra/overriding GPU spec entries (default: $GPUSCOPE_SPECS)")
    add_inflate_argument(s)
    s.set_defaults(func=cmd_analyze)

    s = sub.add_parser("runs", parents=[common, reporting], help="list runs, newest first",
                       description="List the stored runs, newest first: id, name, status (recording, complete, "
                                   "incomplete, failed), source, start, duration, row counts, exit code and the "
                                   "command (secrets redacted). A RUN argument elsewhere is a run id or name.")
    s.add_argument("--limit", type=positive_int, metavar="N", help="show at most this many runs (the newest)")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("sql", parents=[common, reporting], help="run a read-only SQL query over the store",
                       description="Run a SQL query over the store. The query reads the store and nothing else: only "
                                   "reading statements run (SELECT, EXPLAIN, informational PRAGMA and CALL); it "
                                   "cannot change the store, read or write other files (COPY, read_csv, ATTACH, "
                                   "EXPORT), load extensions or change settings. Tables: runs, traces, devices, samples, kernels, ops, "
                                   "annotations, graph_launches, ceilings, sampler_stats, meta (docs/store.md). Example: gpuscope sql \"SELECT name, sum(dur_ns)/1e3 AS us "
                                   "FROM kernels GROUP BY name ORDER BY us DESC LIMIT 5\"")
    s.add_argument("query", metavar="QUERY")
    s.add_argument("--wide", action="store_true", help="show values whole (text output cuts them at 60 characters)")
    s.set_defaults(func=cmd_sql)

    # Commands that live in their own modules (gpuscope/cmd_*.py). Each module imports only the
    # standard library at top level and defines HELP, DESCRIPTION, NEEDS_DB, REPORTS,
    # add_arguments(parser) and run(args) -> exit code.
    for name in _MODULE_COMMANDS:
        mod = importlib.import_module(f"gpuscope.cmd_{name}")
        parents = ([common] if mod.NEEDS_DB else []) + ([reporting] if mod.REPORTS else [])
        s = sub.add_parser(name, parents=parents, help=mod.HELP, description=mod.DESCRIPTION)
        mod.add_arguments(s)
        s.set_defaults(func=mod.run)
    # `gpuscope --help` lists the commands in the README's order, not in the order they are built
    sub._choices_actions.sort(key=lambda a: HELP_ORDER.index(a.dest) if a.dest in HELP_ORDER else len(HELP_ORDER))
    return p


HELP_ORDER = ("run", "ingest", "analyze", "compare", "ceiling", "specs", "calibrate", "devices", "record", "runs", "sql")


_MODULE_COMMANDS = ("run", "compare", "specs", "ceiling", "calibrate", "devices", "record")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuscope`` console script and ``python -m gpuscope``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    # Everything gpuscope creates (the store and its WAL, run directories, recordings, exports,
    # spool files) is owner-only whatever the user's umask: on a shared GPU server a run's
    # commands, kernels and telemetry are nobody else's business. `gpuscope run` hands the
    # user's own umask back to the command it runs (paths.user_umask()).
    previous_umask = private_umask()
    try:
        return _dispatch(args)
    finally:
        os.umask(previous_umask)


def _interrupted_query(exc: Exception) -> bool:
    """Ctrl-C while DuckDB runs a query: DuckDB consumes the KeyboardInterrupt and raises a
    plain RuntimeError ("Query interrupted") or its InterruptException instead."""
    return type(exc).__name__ == "InterruptException" or (
        type(exc) is RuntimeError and str(exc).startswith("Query interrupted"))


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"gpuscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"gpuscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except GpuscopeError as exc:
        print(f"gpuscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"gpuscope {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, traceback on request
        if _interrupted_query(exc):
            print(f"gpuscope {args.command}: interrupted", file=sys.stderr)
            return 130
        if os.environ.get("GPUSCOPE_DEBUG"):
            raise
        print(f"gpuscope {args.command}: internal error: {type(exc).__name__}: {exc} "
              "(set GPUSCOPE_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
