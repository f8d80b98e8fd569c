"""`gpuscope record`: sample the real devices into a recording file for the replay collector."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import positive_float, positive_int

from ..errors import GpuscopeError, InputError

HELP = "record telemetry samples to a file (for replay in tests and demos)"
DESCRIPTION = (
    "Sample every device found here (NVIDIA, AMD, the host) for --seconds at the sampler's cadence "
    "and write the device descriptions and samples to --out: JSON Lines, gzip-compressed when the "
    "name ends in .gz (format gpuscope.recording/1, see docs/telemetry.md). The replay collector "
    "plays such a file back. Ctrl-C or SIGTERM stops early and keeps what was recorded. The file appears "
    "whole at the end (written under a fresh temporary name beside it, then renamed), owner-only; an "
    "existing --out is replaced only with --force, and never a link, a device, a FIFO or a directory."
)
NEEDS_DB = False
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--seconds", type=positive_float, required=True, metavar="N", help="how long to record")
    parser.add_argument("--out", required=True, metavar="FILE", help="the recording to write (.jsonl or .jsonl.gz)")
    parser.add_argument("--force", action="store_true", help="replace --out when it is a regular file (never a "
                        "link, a device, a FIFO or a directory)")
    parser.add_argument("--interval", type=positive_float, default=0.1, metavar="S",
                        help="seconds between samples (default 0.1 = 10 Hz; at least 0.01 = 100 Hz)")
    parser.add_argument("--pid", type=positive_int, action="append", default=[], metavar="PID",
                        help="also watch this process and its children (repeatable)")
    parser.add_argument("--no-host", action="store_true", help="leave the host's CPU and memory out")
    parser.add_argument("--note", help="a note stored in the recording's header")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    if not args.seconds > 0:
        raise InputError("--seconds", f"must be a positive number of seconds, not {args.seconds}")
    if not 0.01 <= args.interval <= 3600:
        raise InputError("--interval", f"must be between 0.01 and 3600 seconds, not {args.interval}")
    from pathlib import Path

    from ..collectors import ProcessTree, default_collectors
    from ..fileio import STDOUT, check_output, sigterm_raises
    from ..sampling import Sampler
    from ..sinks import RecordingSink

    if args.out == STDOUT:
        raise InputError("--out -", "record writes a file (.jsonl or .jsonl.gz), not standard output")
    # before sampling: a link, device, FIFO or directory at --out, or a file without --force, is
    # refused here (the folder itself is tried by the first write, whose error says why)
    check_output(Path(args.out), force=args.force, directory=False, what="a recording", check_folder=False,
                 stdout_ok=False)

    tree = ProcessTree(args.pid) if args.pid else None
    sink = RecordingSink(args.out, note=args.note)
    sampler = Sampler(default_collectors(tree, host=not args.no_host), [sink], interval_s=args.interval, tree=tree)
    sampler.open()
    if not sampler.devices:
        reasons = "; ".join(f"{v.vendor}: {v.reason}" for v in sampler.unavailable)
        raise InputError("record", f"no device to record ({reasons})")
    for v in sampler.unavailable:
        print(f"gpuscope record: {v.vendor}: {v.reason}", file=sys.stderr)
    interrupted = False
    try:
        sampler.start()
    except OSError as exc:  # --out cannot be created (a read-only folder or file system): nothing was recorded
        raise InputError(str(args.out), f"cannot write the recording ({_reason(exc)})") from None
    try:
        with sigterm_raises():  # SIGTERM stops early like Ctrl-C: the recording so far is kept, renamed into place
            sampler.wait(args.seconds)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        try:
            stats = sampler.stop()
        except OSError as exc:  # the disk filled up while recording: the file lacks its end
            raise GpuscopeError(f"{args.out}: cannot write the recording ({_reason(exc)}); nothing was kept, "
                                "record again where there is room") from None
    gpus = [d for d in sampler.devices if d.kind != "host"]
    doc: dict[str, Any] = {
        "out": str(args.out),
        "devices": [d.key for d in sampler.devices],
        "gpus": len(gpus),
        "ticks": stats.ticks,
        "rows": stats.rows,
        "missed_ticks": stats.missed_ticks,
        "interval_s": stats.interval_s,
        "seconds": round((stats.ended_ns - stats.started_ns) / 1e9, 3),
        "tick_cpu_us_mean": round(stats.tick_cpu_ns_mean / 1e3, 1) if stats.tick_cpu_ns_mean else None,
        "degradations": [str(g) for g in stats.degradations if g.phase != "probe"],
        "interrupted": interrupted,
        "unavailable": {v.vendor: v.reason for v in sampler.unavailable},
    }
    if args.json:
        from ..render.json import ascii_document

        sys.stdout.write(ascii_document(doc) + "\n")
    else:
        from ..textsafe import visible

        what = visible(", ".join(f"{d.key} ({d.name or d.vendor})" for d in sampler.devices))
        print(f"recorded {stats.ticks} ticks, {stats.rows} rows of {what} to {args.out}")
        if not gpus:
            print("no GPU found: the recording holds the host only")
        for line in doc["degradations"]:
            print(f"  {line}")
    return 130 if interrupted else 0


def _reason(exc: OSError) -> str:
    from ..store import write_failure_reason  # the store's wording: "no space left on the device"

    return write_failure_reason(exc) or (exc.strerror or str(exc)).lower()
