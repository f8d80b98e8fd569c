"""A SQL result (``gpuscope sql``) as a text table."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .table import shorten, table, whole


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int | None = 60) -> str:
    """A SQL result as a text table: numbers right-aligned, NULL as ``-``, values cut at
    ``max_width`` characters (None: whole, ``sql --wide``)."""
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
               and any(r[i] is not None for r in rows) for i in range(len(columns))]
    cut = whole if max_width is None else shorten
    return table(list(columns), [[cut(str(c), max_width or 0) if c is not None else None for c in r] for r in rows],
                 "".join("r" if n else "l" for n in numeric))
