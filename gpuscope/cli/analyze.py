"""`gpuscope analyze [RUN]`: time breakdown and attribution of a run (default: the latest)."""
from __future__ import annotations

import argparse

from .common import EXIT_OK, add_inflate_argument, db_path, open_run_ref, positive_int, print_json, terminal_width

HELP = "time breakdown and attribution of a run (default: the latest)"
DESCRIPTION = ("Time breakdown (compute, communication, memory, idle), top kernels and top ops of a run. "
               "RUN is a run id or name (default: the newest run); a trace file or directory is ingested first.")
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("run", nargs="?", metavar="RUN", help="run id or name, or a trace path to ingest and analyze")
    parser.add_argument("--top", type=positive_int, default=15, help="rows in the text report's top lists (default 15)")
    parser.add_argument("--name", help="run name when RUN is a trace path")
    parser.add_argument("--wide", action="store_true", help="show kernel names and shapes whole (--json always has them whole)")
    parser.add_argument("--roof", choices=("spec", "measured"), default="spec",
                        help="judge against the spec-sheet peaks (default) or the newest `gpuscope calibrate` of the same GPU")
    parser.add_argument("--gpu", metavar="KEY", help="the GPU to judge against (spec key or name), overriding identification")
    parser.add_argument("--specs", metavar="FILE", help="extra/overriding GPU spec entries (default: $GPUSCOPE_SPECS)")
    add_inflate_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..render.analysis import render_analysis

    db = db_path(args)
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
        print(render_analysis(doc, top=args.top, wide=args.wide, width=terminal_width()))
    return EXIT_OK
