"""`gpuscope export RUN --format perfetto|chrome|parquet|csv --out PATH`: a run as a timeline or as tables."""
from __future__ import annotations

import argparse
import sys

from .common import db_path, finite_float, positive_int, print_json

FLAGS = {"from_s": "--from", "to_s": "--to", "window": "--window", "format": "--format"}
#: Every format the export writes: the timelines first (its headline), then the tables.
FORMATS = ("perfetto", "chrome", "parquet", "csv")

HELP = ("write a run as a timeline (perfetto for ui.perfetto.dev, chrome for chrome://tracing) or as tables "
        "(parquet, csv: one file per table)")
DESCRIPTION = (
    "Write the run's rows of every table (runs, traces, devices, samples, kernels, ops, annotations, "
    "graph_launches, sampler_stats, run_models) and the analysis per op and per kernel (bound class, percent of roof) "
    "into the directory --out, one file per table, with a README.md naming every column, its type and "
    "unit. Row counts equal the store's. The file or directory appears whole (written under a fresh "
    "temporary name, then renamed) and owner-only; an existing --out is replaced only with --force, and "
    "never a link, device, FIFO or a directory gpuscope did not write. --out - writes a timeline to "
    "standard output. RUN is a run id or name (default: the newest)."
)
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("run", nargs="?", metavar="RUN", help="run id or name (default: the newest run)")
    parser.add_argument("--format", required=True, metavar="FORMAT",
                        help="perfetto (a .json.gz timeline for ui.perfetto.dev), chrome (plain .json, also for "
                             "chrome://tracing), parquet or csv (one file per table in a directory)")
    parser.add_argument("--out", required=True, metavar="PATH", help="the file (perfetto, chrome) or directory "
                        "(parquet, csv) to write; - writes a timeline to standard output (the summary, text or "
                        "--json, then goes to standard error)")
    parser.add_argument("--force", action="store_true", help="replace --out when it is a regular file (perfetto, "
                        "chrome) or an untouched earlier export directory (parquet, csv); links, devices, FIFOs "
                        "and other directories are never replaced")
    parser.add_argument("--from", dest="from_s", type=finite_float, default=None, metavar="S",
                        help="timeline only: keep what starts S seconds or more after the run's first event")
    parser.add_argument("--to", dest="to_s", type=finite_float, default=None, metavar="S",
                        help="timeline only: keep what starts before S seconds after the run's first event")
    parser.add_argument("--window", type=positive_int, default=None, metavar="N",
                        help="timeline only: keep the Nth profiler window (from 1)")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from pathlib import Path

    from ..export.tables import export_tables
    from ..textsafe import visible  # run names come from other people's file names

    if args.format not in FORMATS:
        from ..errors import ParameterError

        # name them all: the table exporter alone knows only parquet and csv
        raise ParameterError("format", "unknown format {value} (" + ", ".join(FORMATS[:-1]) + f" or {FORMATS[-1]})",
                             {"value": repr(args.format)})
    if args.format in ("perfetto", "chrome"):
        from ..export.timeline import export_timeline

        doc = export_timeline(db_path(args), args.run, Path(args.out), args.format, force=args.force,
                              from_s=args.from_s, to_s=args.to_s, window=args.window)
        from ..export import print_summary_json, summary_stream

        out = summary_stream(args.out)  # with --out -, stdout holds the trace: the summary goes to stderr
        if args.json:
            print_summary_json(doc, args.out)
            return 0
        ev = doc["events"]
        where = "standard output" if doc["out"] == "-" else doc["out"]
        print(f"run {doc['run']['id']} ({visible(str(doc['run']['name']))}): {ev.get('kernels', 0):,} GPU activities, "
              f"{ev.get('ops', 0):,} CPU ops, {ev.get('counters', 0):,} counter values, "
              f"{ev.get('annotations', 0):,} windows and marks to {visible(where)} "
              f"({doc['file_bytes'] / 2**20:,.1f} MiB{', gzip' if doc['gzip'] else ''}); open it in ui.perfetto.dev",
              file=out)
        if doc["note"]:
            print(f"note: {doc['note']}", file=sys.stderr)
        return 0
    if args.from_s is not None or args.to_s is not None or args.window is not None:
        from ..errors import InputError

        raise InputError("--from/--to/--window", f"cut the timeline formats only, not {args.format}")
    doc = export_tables(db_path(args), args.run, Path(args.out), args.format, force=args.force)
    if args.json:
        print_json(doc)
    else:
        total = sum(doc["tables"].values())
        print(f"run {doc['run']['id']} ({visible(str(doc['run']['name']))}): {total:,} rows in {len(doc['tables'])} {doc['format']} "
              f"files under {doc['out']} (README.md names the columns)", file=sys.stdout)
        for table, n in doc["tables"].items():
            print(f"  {table:<16} {n:>12,}")
    return 0
