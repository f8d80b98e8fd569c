"""`gpuscope specs [GPU]`: the GPU spec database, one table or one entry in full."""
from __future__ import annotations

import argparse

HELP = "the GPU spec database (peaks, bandwidth, ridge points, sources)"
DESCRIPTION = (
    "Without GPU: a table of every entry. With GPU (a key or any listed name, e.g. mi300x, h100-sxm, "
    "'NVIDIA H100 80GB HBM3'): that entry in full, with ridge points per dtype and the sources of its numbers. "
    "User entries from --specs FILE, else $GPUSCOPE_SPECS, else ~/.config/gpuscope/gpus.json add to or "
    "override the built-in ones (docs/specs.md)."
)
NEEDS_DB = False
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("gpu", nargs="?", metavar="GPU", help="spec key or name (default: list every entry)")
    parser.add_argument("--specs", metavar="FILE", help="extra/overriding GPU spec entries (default: $GPUSCOPE_SPECS)")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from ..render.specs import entry_document, render_entry, render_table
    from ..specs import load_specs
    from .common import print_json

    db = load_specs(args.specs)
    if args.gpu is None:
        if args.json:
            print_json({"schema": "gpuscope.specs/1", "gpus": [s.to_json() for s in db.all()]})
        else:
            print(render_table(db))
        return 0
    spec = db.find(args.gpu)
    if args.json:
        print_json(entry_document(spec, db))
    else:
        print(render_entry(spec, db))
    return 0
