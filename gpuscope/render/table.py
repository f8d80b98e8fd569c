"""Text tables and numbers with units: the table fitter (columns dropped in a stated order,
one column narrowed, to fit a width), prose wrapped to a width, durations, rates, shares and
times. Plain strings; no terminal library; nothing here prints or asks the terminal (the CLI
measures it and passes the width).

Every cell, shortened name and line of prose goes through :func:`gpuscope.textsafe.visible`
(:func:`one_line`) before it is measured: names come from other people's files, a control
character in one is shown as an escape (``\\x1b``, four columns, counted as four), never handed
to the terminal."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..textsafe import visible

#: The width a report is fitted to when the caller gives none: the CLI's own when no terminal
#: says otherwise (output to a pipe or a file).
DEFAULT_WIDTH = 120


def fmt_us(us: float | None) -> str:
    """A duration in microseconds as a short human string with its unit."""
    if us is None:
        return "-"
    a = abs(us)
    if a >= 1e6:
        return f"{us / 1e6:.3f} s"
    if a >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} µs"


def fmt_pct(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` ("-" when whole is 0)."""
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


#: Epoch nanoseconds below this (one year) cannot be a wall-clock time.
RELATIVE_NS_LIMIT = 365 * 86400 * 10**9


def fmt_ns_time(ns: int | None) -> str:
    """Epoch nanoseconds as local ``YYYY-MM-DD HH:MM:SS``; ``(relative)`` for times from a trace
    with relative timestamps and no ``baseTimeNanoseconds`` (they count from the profiler's start,
    so they fall in the first days of 1970)."""
    if ns is None:
        return "-"
    if abs(ns) < RELATIVE_NS_LIMIT:
        return "(relative)"
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def one_line(text: Any) -> str:
    """``text`` as one line of a report: its control characters shown as escapes
    (:func:`gpuscope.textsafe.visible`; tab and newline too, but as they always were here, a run of
    whitespace is one space)."""
    return " ".join(visible(str(text), layout=True).split())


def shorten(text: str | None, width: int) -> str:
    """``text`` on one line (:func:`one_line`), cut to ``width`` characters with an ellipsis."""
    if text is None:
        return "-"
    text = one_line(text)
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def whole(text: str | None, width: int) -> str:
    """``text`` on one line (:func:`one_line`), whole (``--wide``)."""
    return "-" if text is None else one_line(text)


def fmt_flops(v: float) -> str:
    """FLOP/s in TFLOP/s (GFLOP/s below one TFLOP/s), one decimal."""
    return f"{v / 1e12:.1f} TFLOP/s" if v >= 1e12 else f"{v / 1e9:.1f} GFLOP/s"


def fmt_bw(v: float) -> str:
    """Bytes per second in GB/s, one decimal, thousands separated."""
    return f"{v / 1e9:,.1f} GB/s"


def fmt_rate(value: float | None, unit: str) -> str:
    """A rate (FLOP/s, B/s) with an SI prefix."""
    if value is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def wrap_prose(lines: list[str], width: int | None) -> str:
    """The report's lines, with any line still wider than the terminal (prose: notes, titles;
    tables are fitted already) wrapped, keeping its indent."""
    lines = [visible(block, layout=True) for block in lines]  # no-ops on what is shown already
    if width is None:
        return "\n".join(lines)
    out = []
    for block in lines:
        for line in block.split("\n"):
            if len(line) <= width:
                out.append(line)
            else:
                indent = line[: len(line) - len(line.lstrip())]
                out.append(prose(line.strip(), width, indent, indent + "  "))
    return "\n".join(out)


def prose(text: str, width: int, first: str = "", rest: str = "") -> str:
    """A paragraph wrapped to the terminal."""
    import textwrap

    return textwrap.fill(text, width=max(40, width), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None, *,
          width: int | None = None, drop: Sequence[str] = (), flex: str | None = None,
          flex_fit: Callable[[list[str], int], list[str]] | None = None, flex_min: int = 30) -> str:
    """A plain-text table. ``align`` holds one of ``l``/``r`` per column (numbers right).

    With ``width``, the table fits in it: the columns named in ``drop`` go first, in that order,
    until it fits, the ``flex`` column (names, commands) narrowed to ``flex_min`` before any goes
    and further after the last, by ``flex_fit(values, width)`` or else by keeping the head and
    tail of each value."""
    from .names import fit

    headers = [one_line(h) for h in headers]  # SQL's column names are the user's
    body = [["-" if c is None else one_line(c) for c in r] for r in rows]
    align = align or "l" * len(headers)

    def total(cols: list[int]) -> int:
        return sum(max(len(headers[i]), *(len(r[i]) for r in body)) if body else len(headers[i]) for i in cols) \
            + 2 * (len(cols) - 1)

    cols = list(range(len(headers)))
    fi = headers.index(flex) if flex in headers else None
    full = [r[fi] for r in body] if fi is not None else []

    def narrow(floor: int) -> None:
        # the flex column takes what the others leave, down to `floor`
        if fi is None or width is None or not body or total(cols) <= width:
            return
        others = total([c for c in cols if c != fi]) + 2
        room = max(len(headers[fi]), floor, width - others)
        fitted = flex_fit(full, room) if flex_fit else [fit(v, room) for v in full]
        for r, v in zip(body, fitted):
            r[fi] = v

    if width is not None:
        narrow(flex_min)
        for name in drop:
            if total(cols) <= width:
                break
            if name in headers and headers.index(name) in cols:
                cols.remove(headers.index(name))
                narrow(flex_min)
        narrow(8)
    cells = [[headers[i] for i in cols]] + [[r[i] for i in cols] for r in body]
    aligns = [align[i] for i in cols]
    widths = [max(len(r[k]) for r in cells) for k in range(len(cols))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, aligns)]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
