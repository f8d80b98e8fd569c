"""`gpuscope calibrate`: measure achievable matmul FLOP/s and memory bandwidth, store them.

Only the standard library is imported here at module level (``gpuscope --help`` stays light);
torch and duckdb are imported inside :func:`run`.
"""
from __future__ import annotations

import argparse
import sys

from .common import db_path, non_negative_int, positive_float

HELP = "measure achievable matmul FLOP/s and memory bandwidth (measured roofs) and store them"
DESCRIPTION = (
    "Measure what this machine's GPU really reaches: matmul FLOP/s per dtype (best median over a "
    "small sweep of large shapes, timed with CUDA/HIP events) and device-memory bandwidth (a large "
    "copy, bytes read + written, and a read-only reduction). Without a GPU, or with --cpu, the same "
    "on the host CPU through torch. Results go into the store's `ceilings` table as one calibration; "
    "`analyze --roof measured` uses the newest calibration of the run's GPU. Needs torch "
    "(pip install 'gpuscope[torch]'). Docs: docs/calibrate.md."
)
NEEDS_DB = True
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--device", type=non_negative_int, metavar="N", help="GPU index as torch numbers it (default: the current one)")
    parser.add_argument("--dtypes", metavar="LIST",
                        help="comma-separated matmul dtypes among fp64, fp32, tf32, fp16, bf16, fp8, int8 "
                             "(default: bf16,fp16,fp32,tf32,fp8 on a GPU, fp32,bf16 on the CPU)")
    parser.add_argument("--quick", action="store_true", help="a tiny sweep: a first look in a few seconds")
    parser.add_argument("--seconds", type=positive_float, metavar="S",
                        help="rough overall time budget (default 60 on a GPU, 20 on the CPU; --quick 12 / 2)")
    parser.add_argument("--cpu", action="store_true", help="calibrate the host CPU even when a GPU is present")
    parser.add_argument("--list", action="store_true", help="list the stored calibrations and measure nothing")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def _progress(line: str) -> None:
    print(f"calibrate: {line}", file=sys.stderr, flush=True)


def _quiet(line: str) -> None:
    pass


def _list(args: argparse.Namespace) -> int:
    from .. import store
    from ..render.calibrate import render_calibrations
    from ..store.read import list_calibrations
    from .common import print_json

    db = db_path(args)
    cals: list[dict] = []
    if db.exists():
        con = store.connect(db, read_only=True)
        try:
            cals = list_calibrations(con)
        finally:
            con.close()
    if args.json:
        print_json(cals)
    else:
        print(render_calibrations(cals))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from .. import calibrate
    from ..errors import GpuscopeError

    if args.list:
        return _list(args)
    # Arguments first: a bad one is exit 2 before anything is measured or opened.
    dtypes = calibrate.parse_dtypes(args.dtypes) if args.dtypes is not None else None
    seconds = calibrate.check_seconds(args.seconds)
    from ..store import check_store_path

    check_store_path(db_path(args))  # a --db that cannot be a store: refused before a minute of measuring
    progress = _quiet if args.quiet else _progress
    cal = calibrate.measure(device=args.device, dtypes=dtypes, quick=args.quick, seconds=seconds,
                            cpu=args.cpu, progress=progress)

    from .. import store
    from .common import print_json

    db = db_path(args)
    host = store.hostname()
    con = store.connect(db)
    try:
        try:
            cid = calibrate.write_calibration(con, cal, host=host)
        except GpuscopeError:
            raise
        except Exception as exc:  # duckdb errors while writing: the transaction rolled back
            raise GpuscopeError(f"{db}: cannot store the calibration: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    doc = calibrate.calibration_json(cal, cid, host)
    if args.json:
        print_json(doc)
    else:
        from ..render.calibrate import render_calibration

        print(render_calibration(doc, str(db)))
    return 0
