"""The text of a JSON document: the CLI only writes it out. Whole values always (names, shapes,
commands are never shortened in JSON).

Strict JSON (RFC 8259), whatever the values: a number that is not finite (NaN, an infinity:
an average over no reading, a ratio of zero time) is written ``null``, never the ``NaN`` or
``Infinity`` that Python's json module writes by default and that ``jq`` and most parsers
reject. Strings keep their exact text; the control characters JSON leaves raw (DEL and the C1
range, 0x7f-0x9f, which include the one-byte CSI 0x9b) are written as ``\\u00XX`` escapes so
that a document printed on a terminal cannot drive it.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any


def _default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    return str(o)


def finite(doc: Any) -> Any:
    """``doc`` with every float that is not finite replaced by None (lists, tuples and dicts
    walked; other values as they are). Only called when a document has such a number."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite(v) for v in doc]
    if hasattr(doc, "item") and not isinstance(doc, (str, bytes)):  # numpy scalars
        try:
            return finite(doc.item())
        except (TypeError, ValueError):
            return doc
    return doc


_RAW_CONTROL = re.compile("[\x7f-\x9f]")


def _escape_raw_control(text: str) -> str:
    if _RAW_CONTROL.search(text) is None:
        return text
    return _RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(doc: Any, *, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False,
          separators: tuple[str, str] | None = None, default: Any = _default) -> str:
    """``json.dumps`` that always writes strict JSON (see the module's docstring)."""
    kwargs: dict[str, Any] = {"default": default, "ensure_ascii": ensure_ascii, "indent": indent,
                              "sort_keys": sort_keys, "separators": separators, "allow_nan": False}
    try:
        text = json.dumps(doc, **kwargs)
    except ValueError as exc:  # a NaN or an infinity somewhere: rare, so only then is it walked
        if "Out of range float" not in str(exc):
            raise
        text = json.dumps(finite(doc), **{**kwargs, "default": lambda o: finite(default(o))})
    return text if ensure_ascii else _escape_raw_control(text)


def document(doc: Any, indent: int | None = None) -> str:
    """A report's JSON text, UTF-8 as is. ``indent`` None gives one compact line, written by the
    json module's C encoder, several times faster on a large report (for a pipe or a file)."""
    return dumps(doc, indent=indent)


def ascii_document(doc: Any) -> str:
    """The JSON text of ``devices`` and ``record``: always indented, non-ASCII escaped."""
    return dumps(doc, indent=1, ensure_ascii=True, default=str)
