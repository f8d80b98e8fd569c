"""`gpuscope report RUN [--compare RUN_B] --out FILE.html`: one self-contained HTML page."""
from __future__ import annotations

import argparse

from .common import db_path

HELP = "write one self-contained HTML page about a run (summary, breakdown, roofline, tables, telemetry, advice)"
DESCRIPTION = (
    "Write one HTML file that needs no network to open (styles inline, charts as inline SVG, no "
    "script): the run's summary (command with secrets redacted, devices, duration, tokens/s where "
    "marks give them), the time breakdown, the roofline chart (log-log, the GPU's roofs, ops sized by "
    "time and coloured by bound class, with hover titles), the top ops and kernels with bound and percent "
    "of roof, the telemetry over time with the profiler windows shaded, the advice, and with --compare "
    "RUN_B the two runs op by op (RUN as A, RUN_B as B, as `gpuscope compare RUN RUN_B` shows them). Prints readably and follows dark mode. The file "
    "is written whole (a fresh temporary renamed into place) and owner-only; an existing --out is replaced "
    "only with --force, and never when it is a link, a device, a FIFO or a directory; --out - writes the "
    "page to standard output."
)
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("run", nargs="?", metavar="RUN", help="run id or name (default: the newest run)")
    parser.add_argument("--compare", metavar="RUN_B", help="also compare with this run (shown as B, RUN as A: the order of `gpuscope compare RUN RUN_B`)")
    parser.add_argument("--out", required=True, metavar="FILE.html", help="the page to write; - writes it to "
                        "standard output (the summary, text or --json, then goes to standard error)")
    parser.add_argument("--force", action="store_true", help="replace --out when it is a regular file (never a "
                        "link, a device, a FIFO or a directory)")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from pathlib import Path

    from ..export.report import build_report
    from ..textsafe import visible  # run names come from other people's file names

    from ..export import print_summary_json, summary_stream

    doc = build_report(db_path(args), args.run, Path(args.out), compare=args.compare, force=args.force)
    if args.json:
        print_summary_json(doc, args.out)  # with --out -, stdout holds the page: the summary goes to stderr
    else:
        where = "standard output" if doc["out"] == "-" else doc["out"]
        vs = f" compared with run {doc['compare']['id']}" if doc["compare"] else ""
        print(f"run {doc['run']['id']} ({visible(str(doc['run']['name']))}){vs}: {visible(where)} ({doc['bytes'] / 1024:,.0f} KiB, "
              f"{doc['roofline_points']} ops on the roofline); open it in a browser", file=summary_stream(args.out))
    return 0
