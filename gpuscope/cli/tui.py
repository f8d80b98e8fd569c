"""`gpuscope tui`: the terminal UI (live devices, runs, one run, compare)."""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import EXIT_OK, db_path, float_between

HELP = "terminal UI: live GPUs, runs, a run's roofline, compare"
DESCRIPTION = ("The terminal UI: live telemetry of every GPU (NVML, AMD SMI) and the host; the stored "
               "runs; one run's time breakdown, top ops and kernels, roofline plot, telemetry timeline "
               "and advice; two runs compared. Keys: ? help, q quit, 1-4 or Tab switch screens. "
               "docs/tui.md.")
NEEDS_DB = True
REPORTS = False
#: --interval's bounds in seconds: 0.1 s is the fastest refresh that stays light over SSH.
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--replay", metavar="FILE",
                        help="play a recording (gpuscope record) as the live telemetry, e.g. on a machine without a GPU")
    parser.add_argument("--interval", type=float_between(MIN_INTERVAL_S, MAX_INTERVAL_S, "seconds"), default=1.0,
                        metavar="SECONDS",
                        help=f"live refresh in seconds (default 1, at least {MIN_INTERVAL_S:g})")


def run(args: argparse.Namespace) -> int:
    """Check the arguments before the screen is taken over, then run the UI."""
    from ..errors import ParameterError
    from ..store import check_store_path

    interval = args.interval
    if not (interval == interval and MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):
        raise ParameterError("interval", "must be between {low} and {high} seconds, not {value}",
                             {"low": f"{MIN_INTERVAL_S:g}", "high": f"{MAX_INTERVAL_S:g}", "value": f"{interval:g}"})
    replay = Path(args.replay) if args.replay else None
    if replay is not None:
        from ..collectors.replay import load_recording

        load_recording(replay)  # a bad file is one line and exit 2, before the UI starts
    db = db_path(args)
    check_store_path(db)
    from ..tui.app import GpuscopeApp

    GpuscopeApp(db=db, replay=replay, interval_s=interval).run()
    return EXIT_OK
