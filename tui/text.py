"""Other people's text, made safe for the TUI's widgets (no Textual: plain functions).

Kernel and op names, thread and run names, a recording's device names, process names and the
file names in messages come from files and processes other people made. Rich strips BEL and a
few other C0 controls from a ``Text``, but not ESC, and the TUI's own line widgets (the device
cards) hand their strings to the terminal as segments: ``ESC ] 0 ; ... ESC \\`` would set the
window title, ``ESC ] 52`` write the clipboard. Every such string goes through
:func:`gpuscope.textsafe.visible` here, the function the CLI's renderers use too: the screens
get their documents from :func:`safe_data` (tui/data.py does it for every store read) and their
one-off strings from :func:`safe_text`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from gpuscope.textsafe import visible


def safe_text(value: Any, *, layout: bool = False) -> str:
    """``value`` as a string with its control characters shown as escapes (``\\x1b``); with
    ``layout`` tab and newline are kept (multi-line messages), else they are escaped too."""
    return visible(str(value), layout=layout)


def safe_data(value: Any) -> Any:
    """``value`` with every string in it (dict keys and values, list and tuple items, the
    fields of dataclasses) shown as :func:`safe_text` does; other values as they are. A
    document read for the screens goes through this once, so that no screen shows a raw name."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {safe_data(k): safe_data(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and not isinstance(value[0], (str, dict, list, tuple)) and not dataclasses.is_dataclass(value[0]) \
                and all(isinstance(v, (int, float, type(None))) for v in value):
            return value  # a series of numbers (telemetry): nothing to show, no copy
        return [safe_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(safe_data(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: safe_data(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
