"""`gpuscope run [options] -- CMD ARGS...`: run any command as a recorded, analyzed run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import (add_model_arguments, check_otel_installed, db_path, load_model, non_negative_float,
                     non_negative_int, otlp_target, positive_float, positive_int, print_json, terminal_width)

HELP = "run CMD with telemetry and profiler windows; store, analyze and summarize it"
DESCRIPTION = (
    "Run CMD (everything after --, no shell) with telemetry sampling (NVML, AMD SMI, host) and, in its Python "
    "processes, bounded PyTorch profiler windows (no change to its code: a bootstrap on its PYTHONPATH opens "
    "them once the program imports torch). Everything is stored as one run, analyzed and summarized. "
    "Exits with CMD's exit code. With --json, stdout carries only the summary document: CMD's own stdout "
    "goes to stderr."
)
NEEDS_DB = True
REPORTS = True


def profile_when(text: str) -> tuple[str, float]:
    """``--profile-when``: ``time``, ``busy`` or ``busy=UTIL`` (percent, 0 < UTIL <= 100, a
    trailing ``%`` allowed); (the mode, the utilisation as a ratio)."""
    mode, sep, value = text.strip().partition("=")
    if mode == "time" and not sep:
        return "time", 0.5
    if mode != "busy":
        raise argparse.ArgumentTypeError(f"{text!r} is not busy or busy=UTIL (UTIL in percent, 50 by default)")
    if not sep:
        return "busy", 0.5
    try:
        pct = float(value.strip().removesuffix("%"))
    except ValueError:
        pct = float("nan")
    if not (0 < pct <= 100):  # (nan fails too)
        raise argparse.ArgumentTypeError(f"{text!r}: UTIL must be a percentage above 0 and at most 100")
    return "busy", pct / 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--name", help="run name (default: the script or program name)")
    parser.add_argument("--hz", type=positive_float, default=10.0, help="telemetry samples per second (default 10, at most 100)")
    parser.add_argument("--profile-delay", type=non_negative_float, default=None, metavar="S",
                        help="windows in time (the default): seconds after the program imports torch before the "
                             "first profiler window (default 5)")
    parser.add_argument("--profile-when", type=profile_when, default=None, metavar="busy[=UTIL]",
                        help="busy: open each window once the program's GPUs have been busy at or above UTIL %% "
                             "(default 50) for 3 s in a row (their per-process utilisation where NVML / AMD SMI "
                             "give it, else the devices'), in the processes that use those GPUs; the next one "
                             "--profile-interval after the previous ended, when busy again. Default: time "
                             "(--profile-delay)")
    parser.add_argument("--profile-after-marks", type=positive_int, default=None, metavar="N",
                        help="open each process's window at its N-th gpuscope.mark() (a step), then every "
                             "--profile-interval; not with --profile-when")
    parser.add_argument("--profile-duration", type=non_negative_float, default=3.0, metavar="S",
                        help="seconds each profiler window stays open (default 3)")
    parser.add_argument("--profile-windows", type=positive_int, default=1, metavar="N",
                        help="number of profiler windows per process (default 1)")
    parser.add_argument("--profile-interval", type=non_negative_float, default=None, metavar="S",
                        help="seconds between windows (default: the delay)")
    parser.add_argument("--no-profile", action="store_true", help="telemetry only: no profiler windows")
    parser.add_argument("--tokens", type=non_negative_int,
                        help="tokens the program generated (output tokens, not the prompt), for tokens/s and J per "
                             "generated token over the whole run; else they come from gpuscope.mark(tokens=...)")
    parser.add_argument("--no-analyze", action="store_true", help="store the run but do not analyze it")
    parser.add_argument("--top", type=positive_int, default=10, help="rows in the summary's top lists (default 10)")
    parser.add_argument("--replay", metavar="FILE", help="play a recording (gpuscope record) back as the GPU telemetry, "
                        "looping, instead of reading the GPUs: for demos and tests")
    parser.add_argument("--otlp", nargs="?", const="", default=None, metavar="URL",
                        help="export the run's telemetry over OTLP while it runs and, at the end, its spans (the "
                             "run, its profiler windows, its marks as events), inside the caller's trace when "
                             "TRACEPARENT is set; URL as for `gpuscope monitor --otlp` (docs/otel.md)")
    parser.add_argument("--otlp-protocol", default=None, metavar="PROTOCOL", help="grpc or http/protobuf (default: "
                        "OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
    add_model_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no status line or progress on stderr")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    shared = parser._option_string_actions.get("--json")
    if shared is not None:
        # The --json flag comes from a parent parser that every reporting command shares (the same
        # Action object): say what it does to the command's output on a copy, for `run` only.
        import copy

        own = copy.copy(shared)
        own.help = ("print one JSON document on stdout instead of the text summary; the command's own stdout goes "
                    "to stderr")
        parser._actions[parser._actions.index(shared)] = own
        parser._option_string_actions["--json"] = own
        for group in parser._action_groups:
            if shared in group._group_actions:
                group._group_actions[group._group_actions.index(shared)] = own


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the child's exit code."""
    from .. import store
    from ..errors import InputError
    from ..render.run_summary import render_run_summary
    from ..run.wrapper import ProfileConfig, RunOptions, execute

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    delay = 5.0 if args.profile_delay is None else args.profile_delay
    for flag, value, low in (("--profile-delay", delay, 0.0), ("--profile-duration", args.profile_duration, 0.0),
                             ("--profile-windows", args.profile_windows, 0)):
        if value < low:
            raise InputError(flag, f"must be at least {low:g}, not {value:g}")
    when, busy_util = args.profile_when if args.profile_when is not None else ("time", 0.5)
    if args.profile_after_marks is not None:
        if args.profile_when is not None:
            raise InputError("--profile-after-marks", "cannot be used with --profile-when: windows open either at a "
                                                      "mark or when the GPUs are busy")
        when = "marks"
    if when != "time" and args.profile_delay is not None:
        flag = "--profile-after-marks" if when == "marks" else "--profile-when busy"
        raise InputError("--profile-delay", f"is for windows in time; with {flag} the window opens "
                                            f"{'at a mark' if when == 'marks' else 'when the GPUs are busy'}")
    if args.tokens is not None and args.tokens <= 0:
        raise InputError("--tokens", "must be a positive count")
    profile = ProfileConfig(enabled=not args.no_profile and args.profile_windows > 0, delay_s=delay,
                            duration_s=args.profile_duration, windows=args.profile_windows,
                            interval_s=args.profile_interval, when=when, after_marks=args.profile_after_marks or 0,
                            busy_util=busy_util)
    otlp = None
    if args.otlp is not None:
        otlp = otlp_target(args.otlp, args.otlp_protocol)
        check_otel_installed(otlp.protocol, False)
    elif args.otlp_protocol is not None:
        raise InputError("--otlp-protocol", "given without --otlp")
    given = load_model(args.model) if args.model else None  # a bad file stops here, before the program starts
    db = Path(db_path(args))
    # A store that cannot be written (a read-only file system, file or folder) is refused before
    # anything starts, in one line (exit 2): the program was meant to be recorded into it.
    store.check_store_path(db)
    store.check_writable(db)
    tty = sys.stderr.isatty() and not args.quiet
    opts = RunOptions(command=cmd, db=db, name=args.name, hz=args.hz, profile=profile,
                      tokens=args.tokens, status_line=tty, analyze=not args.no_analyze,
                      replay=Path(args.replay) if args.replay else None, child_stdout_to_stderr=bool(args.json),
                      otlp=otlp, model=given)
    progress = None if args.quiet else (lambda msg: print(f"gpuscope run: {msg}", file=sys.stderr, flush=True))
    outcome = execute(opts, progress)
    summary: dict[str, Any] = outcome.summary.to_json()  # the run's summary becomes JSON here, once
    if args.json:
        print_json(summary)
    else:
        print(render_run_summary(summary, top=args.top, width=terminal_width()))
    return outcome.exit_code
