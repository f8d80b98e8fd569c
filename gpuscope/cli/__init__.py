"""The ``gpuscope`` command line: the parser, dispatch and exit codes.

One module per command (gpuscope/cli/<command>.py), each defining HELP, DESCRIPTION, NEEDS_DB,
REPORTS, add_arguments(parser) and run(args) -> exit code. A command computes its result once
(analyzers, the store's read layer), hands it to a renderer in gpuscope/render/ (text) or to
cli/common.print_json (--json), and prints. At top level a command module imports only the
standard library, cli/common.py and gpuscope's light modules (errors, paths): heavy ones (duckdb,
torch, textual, exporters) are imported inside run(), so ``gpuscope --help`` stays fast and
light. No command module imports this one. Exit codes: 0 success, 1 a failure while working,
2 unusable input or arguments (one line on stderr naming the input and the problem).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import GpuscopeError, InputError, ParameterError, StoreError
from ..paths import private_umask
from .common import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, _Parser

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

    # Built in this order (argparse's "invalid choice" message lists them so), listed by --help
    # in HELP_ORDER.
    for name in _COMMANDS:
        mod = importlib.import_module(f"gpuscope.cli.{name}")
        # Any: typeshed wants the parents of the sub-parsers' class; a parent only lends its arguments
        parents: list[Any] = ([common] if mod.NEEDS_DB else []) + ([reporting] if mod.REPORTS else [])
        s = sub.add_parser(name, parents=parents, help=mod.HELP, description=mod.DESCRIPTION)
        mod.add_arguments(s)
        s.set_defaults(func=mod.run)
    # `gpuscope --help` lists the commands in the README's order, not in the order they are built
    sub._choices_actions.sort(key=lambda a: HELP_ORDER.index(a.dest) if a.dest in HELP_ORDER else len(HELP_ORDER))
    return p


HELP_ORDER = ("run", "profile", "tui", "monitor", "ingest", "analyze", "compare", "export", "report", "ceiling", "specs", "calibrate", "devices", "record", "runs",
              "sql")


_COMMANDS = ("ingest", "analyze", "runs", "sql", "run", "compare", "specs", "ceiling", "calibrate", "devices", "record",
             "tui", "monitor", "export", "report", "profile")


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
    streams = sys.stdout, sys.stderr
    _show_controls(args)
    try:
        return _dispatch(args)
    finally:
        sys.stdout, sys.stderr = streams
        os.umask(previous_umask)


def _show_controls(args: argparse.Namespace) -> None:
    """Put the command's text output behind :class:`textsafe.VisibleStream`: names in it come
    from files other people made (kernels, ops, threads, run and file names, a recording's
    devices), and a control character in one must be shown, never obeyed by the terminal
    (``ESC ] 52`` writes the clipboard). The renderers show them already; this catches a line
    they did not draw. stdout stays as it is for ``--json`` and for data written to stdout
    (``--out -``): the exact text, which JSON escapes itself."""
    from ..textsafe import VisibleStream

    if not getattr(args, "json", False) and getattr(args, "out", None) not in ("-", "/dev/stdout"):
        sys.stdout = VisibleStream(sys.stdout)
    sys.stderr = VisibleStream(sys.stderr)


def _say(command: str, message: str) -> None:
    """The command's one error line on stderr: ``message`` quotes file names, run names and
    arguments, shown with their control characters (a newline too: it is one line) visible."""
    from ..textsafe import visible

    print(f"gpuscope {command}: {visible(message)}", file=sys.stderr)


def _interrupted_query(exc: Exception) -> bool:
    """Ctrl-C while DuckDB runs a query: DuckDB consumes the KeyboardInterrupt and raises a
    plain RuntimeError ("Query interrupted") or its InterruptException instead."""
    return type(exc).__name__ == "InterruptException" or (
        type(exc) is RuntimeError and str(exc).startswith("Query interrupted"))


def _as_flags(command: str, exc: ParameterError) -> str:
    """The error's line with each quantity spelled as the command's flag: its module's ``FLAGS``
    table where it has one, else ``--`` and the quantity with dashes (``kv_heads`` -> ``--kv-heads``)."""
    module = sys.modules.get(f"{__name__}.{command}")
    source, message = exc.render(getattr(module, "FLAGS", None), default=lambda q: "--" + q.replace("_", "-"))
    return f"{source}: {message}"


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except ParameterError as exc:  # quantities spelled as the command's flags
        _say(args.command, _as_flags(args.command, exc))
        return EXIT_USAGE
    except InputError as exc:
        _say(args.command, str(exc))
        return EXIT_USAGE
    except StoreError as exc:
        _say(args.command, str(exc))
        return EXIT_USAGE
    except GpuscopeError as exc:
        _say(args.command, str(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None)  # fileio.Terminated: SIGTERM/SIGHUP while writing a file
        if signum:
            _say(args.command, "terminated")
            return 128 + signum
        _say(args.command, "interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, traceback on request
        if _interrupted_query(exc):
            _say(args.command, "interrupted")
            return 130
        if os.environ.get("GPUSCOPE_DEBUG"):
            raise
        _say(args.command, f"internal error: {type(exc).__name__}: {exc} (set GPUSCOPE_DEBUG=1 for the traceback)")
        return EXIT_FAILURE

