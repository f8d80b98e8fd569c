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

#: C0 controls (0x00-0x1f), DEL (0x7f) and C1 controls (0x80-0x9f), which include the one-byte
#: CSI (0x9b), OSC (0x9d), DCS (0x90) and ST (0x9c); and the Unicode format characters that
#: reorder or hide text on screen (bidirectional embeddings, overrides and isolates, the line and
#: paragraph separators), which make a name read as another ("Trojan source").
_UNSAFE_CLASS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_UNSAFE_CLASS}]")


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


#: Everything :data:`_UNSAFE` matches except tab (0x09) and newline (0x0a).
_LAYOUT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def has_control(text: str, *, layout: bool = False) -> bool:
    """Whether :func:`visible` would change ``text``."""
    return (_LAYOUT if layout else _UNSAFE).search(text) is not None
