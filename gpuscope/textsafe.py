"""Text that came from other people, made safe to show on a terminal.

Kernel and op names, thread names, run names taken from file names, device names in a recording,
command lines and file names in error messages are written by whoever made the trace or the
file. A terminal obeys control characters in them: ``ESC ] 0 ; ... BEL`` sets the window title,
``ESC [ 2 J`` clears the screen, ``ESC ] 52 ; c ; ...`` writes the clipboard, and the one-byte C1
form ``0x9b`` is a CSI on many terminals. :func:`visible` is the one function that turns them
into visible escapes (``\\x1b``) for every text face: the CLI's text reports and error lines, the
TUI's widgets, Prometheus label values. ``--json`` keeps the exact string: JSON escapes it
(gpuscope.render.json).

Only imports the standard library: every face may import it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: C0 controls (0x00-0x1f), DEL (0x7f) and C1 controls (0x80-0x9f), which include the one-byte
#: CSI (0x9b), OSC (0x9d), DCS (0x90) and ST (0x9c); the Unicode format characters that reorder
#: or hide text on screen (bidirectional marks, embeddings, overrides and isolates, the line and
#: paragraph separators), which make a name read as another ("Trojan source"); and lone
#: surrogates, which is how Python holds the bytes of a file name that are not UTF-8
#: (``surrogateescape``): written out under that error handler, ``\udc9b`` is the raw byte 0x9b,
#: a CSI, and under the strict one it is an exception in the middle of a report.
_FORMAT_CLASS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_CLASS = "\x00-\x1f\x7f-\x9f" + _FORMAT_CLASS
_UNSAFE = re.compile(f"[{_UNSAFE_CLASS}]")
#: Everything :data:`_UNSAFE` matches except tab (0x09) and newline (0x0a).
_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT_CLASS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, layout: bool = False) -> str:
    """``text`` with every control character shown as a visible escape (``\\x1b``, ``\\x9b``,
    ``\\u202e``). With ``layout`` the tab and the newline are kept (prose, multi-line output);
    without it they are escaped too (a name in a table cell is one line). Idempotent: an
    escape is plain text, so ``visible(visible(s)) == visible(s)``."""
    pattern = _LAYOUT if layout else _UNSAFE
    if pattern.search(text) is None:  # the common case: nothing to do, no copy
        return text
    return pattern.sub(_escape, text)


class VisibleStream:
    """A text stream that shows control characters as visible escapes: what is written to it
    goes out through :func:`visible` (``layout``: tab and newline kept). The CLI puts its stdout
    (text reports only: ``--json`` and data written to stdout stay byte-exact) and its stderr
    behind one for the length of a command, a safety net under the renderers' own calls of
    :func:`visible`: a name that reaches a ``print`` the renderers did not see is still shown, not
    obeyed. gpuscope's own terminal sequences (the progress line's ``\\r\\x1b[2K``) are written
    to :func:`raw_stream`. Everything but writing is the wrapped stream's (``fileno``,
    ``isatty``, ``buffer``: bytes written there are not looked at)."""

    def __init__(self, stream: Any) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(visible(text, layout=True))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "raw":  # not set yet (a copy being made): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.raw, name)


def raw_stream(stream: Any) -> Any:
    """The stream under a :class:`VisibleStream` (``stream`` itself if it is not one): for
    gpuscope's own terminal sequences, whose text is made visible by the caller."""
    while isinstance(stream, VisibleStream):
        stream = stream.raw
    return stream


def has_control(text: str, *, layout: bool = False) -> bool:
    """Whether :func:`visible` would change ``text``."""
    return (_LAYOUT if layout else _UNSAFE).search(text) is not None
