"""The text of a JSON document: the CLI only writes it out. Whole values always (names, shapes,
commands are never shortened in JSON)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    return str(o)


def document(doc: Any, indent: int | None = None) -> str:
    """A report's JSON text, UTF-8 as is. ``indent`` None gives one compact line, written by the
    json module's C encoder, several times faster on a large report (for a pipe or a file)."""
    return json.dumps(doc, default=_default, ensure_ascii=False, indent=indent)


def ascii_document(doc: Any) -> str:
    """The JSON text of ``devices`` and ``record``: always indented, non-ASCII escaped."""
    return json.dumps(doc, indent=1, default=str)
