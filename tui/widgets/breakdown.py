"""The time breakdown of a run (compute, communication, memory, idle) as one horizontal bar
with each category's share, the shares of busy + idle as ``gpuscope analyze`` gives them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from gpuscope.render.table import fmt_pct, fmt_us

#: (time_us key, label, colour, fill glyph for NO_COLOR)
CATEGORIES = (
    ("compute", "compute", "green", "█"),
    ("communication", "communication", "magenta", "▓"),
    ("memory", "memory", "dodger_blue1", "▒"),
    ("idle", "idle", "grey50", "░"),
)


@dataclass(frozen=True)
class Share:
    key: str
    label: str
    us: float
    pct: float  # 0..100 of busy + idle


def shares(time_us: dict[str, Any]) -> list[Share]:
    """Each category's time and percent of the whole (busy + idle), in the analysis' order."""
    total = sum(float(time_us.get(k) or 0.0) for k, *_ in CATEGORIES)
    return [Share(k, label, float(time_us.get(k) or 0.0),
                  100.0 * float(time_us.get(k) or 0.0) / total if total else 0.0)
            for k, label, *_ in CATEGORIES]


def bar_cells(parts: list[Share], width: int) -> list[int]:
    """How many of ``width`` cells each share fills (largest remainders, summing to ``width``
    when anything is there; a non-zero share gets at least one cell when there is room)."""
    if width <= 0 or not any(p.pct > 0 for p in parts):
        return [0] * len(parts)
    raw = [p.pct / 100.0 * width for p in parts]
    cells = [int(r) for r in raw]
    for i in sorted(range(len(parts)), key=lambda i: raw[i] - cells[i], reverse=True)[: width - sum(cells)]:
        cells[i] += 1
    for i, p in enumerate(parts):  # a visible sliver for a small non-zero share
        if p.pct > 0 and cells[i] == 0:
            j = max(range(len(cells)), key=lambda j: cells[j])
            if cells[j] > 1:
                cells[j] -= 1
                cells[i] = 1
    return cells


class BreakdownBar(Widget):
    """The bar and a legend line with each category's time and share."""

    DEFAULT_CSS = """
    BreakdownBar { height: auto; min-height: 2; }
    """

    def __init__(self, *, color: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.color = color
        self.parts: list[Share] = []

    def set_time(self, time_us: dict[str, Any]) -> None:
        self.parts = shares(time_us)
        self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return 1 + len(self._legend(width))

    def _legend(self, width: int) -> list[list[Share]]:
        """The legend items, wrapped to ``width``."""
        lines: list[list[Share]] = [[]]
        used = 0
        for p in self.parts:
            n = len(self.item(p)) + 5  # glyph, space, separator
            if lines[-1] and used + n > width:
                lines.append([])
                used = 0
            lines[-1].append(p)
            used += n
        return lines if lines[-1] else []

    def item(self, p: Share) -> str:
        total = sum(q.us for q in self.parts)
        return f"{p.label} {fmt_us(p.us)} {fmt_pct(p.us, total).strip()}"

    def render(self) -> Text:
        width = self.size.width
        text = Text(no_wrap=True, overflow="crop")
        if not self.parts:
            return text
        styles = {k: (color, glyph) for k, _, color, glyph in CATEGORIES}
        for p, n in zip(self.parts, bar_cells(self.parts, width)):
            color, glyph = styles[p.key]
            text.append(glyph * n, style=color if self.color else None)
        for line in self._legend(width):
            text.append("\n")
            for j, p in enumerate(line):
                color, glyph = styles[p.key]
                text.append(("   " if j else "") + glyph, style=color if self.color else None)
                text.append(" " + self.item(p))
        return text
