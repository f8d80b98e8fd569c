"""`gpuscope compare RUN_A RUN_B`: two runs side by side, op by op (e.g. H100 vs MI300X)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import add_inflate_argument, add_model_arguments, positive_int

HELP = "two runs side by side, op by op (e.g. H100 vs MI300X)"
DESCRIPTION = (
    "Compare two runs: ops matched by name, input shapes and dtypes, with GPU time, bound class and percent of "
    "roof on each side and the ratio B/A; totals; ops found on one side only; time by op name and by kernel "
    "family; where a run has collectives, their time, bus bandwidth and percent of link roof per collective kind "
    "and the exposed communication of each side. RUN is a run id or name; a trace file or directory is ingested first."
)
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run (id, name, or trace path)")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    parser.add_argument("--top", type=positive_int, default=15, help="rows per list in the text report (default 15)")
    parser.add_argument("--roof", choices=("spec", "measured"), default="spec",
                        help="judge against the spec-sheet peaks (default) or the newest `gpuscope calibrate` of each GPU")
    parser.add_argument("--gpu-a", metavar="KEY", help="override the GPU of RUN_A (spec key or name)")
    parser.add_argument("--gpu-b", metavar="KEY", help="override the GPU of RUN_B (spec key or name)")
    parser.add_argument("--specs", metavar="FILE", help="extra/overriding GPU spec entries")
    parser.add_argument("--wide", action="store_true", help="show names and shapes whole (--json always has them whole)")
    add_model_arguments(parser, context=True)
    add_inflate_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..analyzers.comm_compare import communication_timing, compare_communication
    from ..analyzers.compare import compare_docs
    from ..render.compare import render_compare
    from ..textsafe import visible
    from .common import db_path, load_model, print_json, run_ref_or_ingest, terminal_width

    db = db_path(args)
    given = load_model(args.model) if args.model else None  # a bad file stops here, before any work
    ref_a = run_ref_or_ingest(db, args.run_a, announce=not args.json, max_inflate_ratio=args.max_inflate_ratio)
    ref_b = run_ref_or_ingest(db, args.run_b, announce=not args.json, max_inflate_ratio=args.max_inflate_ratio)
    con = store.connect(db, read_only=True)
    try:
        ra = store.resolve_run(con, ref_a, db)
        rb = store.resolve_run(con, ref_b, db)
        if ra.id == rb.id:
            print(f"gpuscope compare: RUN_A and RUN_B are the same run ({ra.id} '{visible(ra.name)}'): every ratio is 1",
                  file=sys.stderr)
        # --model applies to both sides; without it each run uses the model stored with it
        model = given[0] if given else None
        source = f"--model {given[1]}" if given else None
        doc_a = analyze_run(con, ra.id, roof=args.roof, gpu=args.gpu_a, specs_path=args.specs, model=model,
                            context_tokens=args.context, model_source=source)
        doc_b = analyze_run(con, rb.id, roof=args.roof, gpu=args.gpu_b, specs_path=args.specs, model=model,
                            context_tokens=args.context, model_source=source)
        # exposed communication as `analyze` computes it (issue 31): each side's collectives
        communication_timing(con, ra.id, doc_a)
        communication_timing(con, rb.id, doc_b)
    finally:
        con.close()
    doc: dict[str, Any] = compare_docs(doc_a, doc_b)
    comm = compare_communication(doc_a, doc_b)
    if comm is not None:  # only where a run has collectives: other comparisons stay as they were
        doc["communication"] = comm
    if args.json:
        print_json(doc)
    else:
        print(render_compare(doc, top=args.top, wide=args.wide, width=terminal_width()))
    return 0
