"""Argument types shared by the commands: a value out of range is refused by the parser, with
exit 2 and one line (``--limit -1`` must not drop the oldest run, ``--top -3`` must not print
"Top 25 of 28"). Imports no command module."""
from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """A whole number >= 1 (``--top``, ``--limit``, counts)."""
    return _int(text, 1, "a whole number of at least 1")


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (indexes, token counts)."""
    return _int(text, 0, "a whole number of at least 0")


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, rates, ratios)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number greater than 0")
    return value


def _int(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
    return value


def add_inflate_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-inflate-ratio``, for every command that ingests trace files."""
    parser.add_argument("--max-inflate-ratio", type=positive_float, default=None, metavar="N",
                        help="refuse a .gz trace that inflates more than N times its compressed size once past "
                             "256 MiB (default 200; real traces inflate about 20x: a gzip bomb ~1000x)")
