"""Progress of an ingest on stderr: one line per stage (reading a file, linking, writing the
run) and, while a file is parsed, a live line with the file, the events so far, the rate and
the time left (rewritten in place on a terminal; a line a second when asked for elsewhere)."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..textsafe import raw_stream, visible

Progress = Callable[[str], None]

#: The live line appears only once an ingest has run this long: short ones stay silent.
LIVE_AFTER_S = 1.0
#: Linking and writing the run take about this share of the time spent reading and parsing
#: the files (0.4-0.5 on the 1.2M-event trace of bench/README.md): the time left counts them.
AFTER_PARSE_SHARE = 0.45


def quiet(_: str) -> None:
    """The progress reporter that reports nothing."""
    return None


class ProgressLine:
    """A progress reporter: called with a stage message, it prints that line; :meth:`tick`
    updates the live line of the file being parsed. ``live`` is True on a terminal (the line
    is rewritten in place); otherwise a line is printed at most once a second."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.start = clock()
        self._shown = False  # a live line is on screen (not yet ended by a newline)
        self._last = 0.0
        self.total_bytes = 0  # the inputs' bytes on disk, when known (for the time left)
        self.done_bytes = 0.0

    def __call__(self, msg: str) -> None:
        self._end_line()
        print(f"gpuscope: {visible(msg)}", file=self.stream, flush=True)

    def tick(self, name: str, events: int, fraction_of_file: float, file_bytes: int) -> None:
        """``events`` parsed so far of file ``name`` (``file_bytes`` on disk), of which
        ``fraction_of_file`` is done."""
        now = self.clock()
        elapsed = now - self.start
        if elapsed < LIVE_AFTER_S or (not self.live and now - self._last < 1.0):
            return
        self._last = now
        rate = events / max(elapsed, 1e-9)
        done = self.done_bytes + fraction_of_file * file_bytes
        text = f"gpuscope: {visible(name)}: {events:,} events, {rate:,.0f} events/s"
        if self.total_bytes and done > 0:
            share = min(done / self.total_bytes, 1.0)
            left = elapsed * (1 - share + AFTER_PARSE_SHARE) / share
            text += f", {share:.0%} read, about {_duration(left)} left"
        if self.live:
            # gpuscope's own sequence (back to the line's start, erase it), past the CLI's
            # VisibleStream; the file name in it is shown visible above
            raw_stream(self.stream).write("\r\x1b[2K" + text)
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def file_done(self, file_bytes: int) -> None:
        """A file is parsed: its bytes count as done."""
        self.done_bytes += file_bytes

    def _end_line(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self._shown = False


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 90 else f"{s // 60} min {s % 60:02d} s"


def stderr_progress(enabled: bool, live: bool | None = None) -> Progress:
    """A progress reporter on stderr when ``enabled`` (else :func:`quiet`); ``live`` as in
    :class:`ProgressLine` (default: whether stderr is a terminal)."""
    if not enabled:
        return quiet
    return ProgressLine(sys.stderr, live)
