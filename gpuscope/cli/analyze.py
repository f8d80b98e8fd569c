"""`gpuscope analyze [RUN]`: time breakdown and attribution of a run (default: the latest)."""
from __future__ import annotations

import argparse

from .common import (EXIT_OK, add_inflate_argument, add_model_arguments, db_path, load_model, open_run_ref, positive_int,
                     print_json, terminal_width)

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
    add_model_arguments(parser, context=True)
    # the gap to the decode speed of light (analyzers/gap.py): needs --model and the tokens
    parser.add_argument("--tokens", type=positive_int, metavar="N",
                        help="tokens generated in the analyzed window, all sequences (default: the run's decode marks)")
    parser.add_argument("--batch", type=positive_int, metavar="N",
                        help="sequences decoded together (default: from the marks or the trace's decode ops, else 1)")
    add_inflate_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..analyzers.gap import add_gap
    from ..analyzers.stragglers import add_communication_timing
    from ..render.analysis import render_analysis

    db = db_path(args)
    given = load_model(args.model) if args.model else None  # a bad file stops here, before any work
    ref, con = open_run_ref(db, args.run, name=args.name, announce=not args.json,
                            max_inflate_ratio=args.max_inflate_ratio)
    if con is None:
        con = store.connect(db, read_only=True)
    try:
        run = store.resolve_run(con, ref, db)
        # without --model, analyze_run uses the model stored with the run
        model = given[0] if given else None
        doc = analyze_run(con, run.id, roof=args.roof, gpu=args.gpu, specs_path=args.specs,
                          model=model, context_tokens=args.context,
                          model_source=f"--model {given[1]}" if given else None)
        if model is None and (doc.get("model") or {}).get("spec"):
            from ..analyzers.modelspec import ModelSpec

            model = ModelSpec.from_json(doc["model"]["spec"])  # the one stored with the run
        add_gap(con, run.id, doc, model, tokens=args.tokens, batch=args.batch, context=args.context,
                specs_path=args.specs)
        # exposed communication and stragglers (issue 31): the `communication` block's timing half
        add_communication_timing(con, run.id, doc, tensor_parallel=getattr(model, "tensor_parallel", None))
    finally:
        con.close()
    if args.json:
        print_json(doc)
    else:
        print(render_analysis(doc, top=args.top, wide=args.wide, width=terminal_width()))
    return EXIT_OK
