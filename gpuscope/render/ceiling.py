"""The ``gpuscope ceiling`` text, from the decode-ceiling result (analyzers.ceiling)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..textsafe import visible

if TYPE_CHECKING:
    from ..analyzers.ceiling import CeilingResult


def render_ceiling(r: CeilingResult) -> str:
    """The ``gpuscope ceiling`` text: the arithmetic line by line, then the verdict and notes."""
    head = f"decode ceiling: {r.gpu_name} ({r.gpu})"
    if r.num_gpus > 1:
        head += f" × {r.num_gpus}"
    head += f", batch {r.batch}, context {r.context} tokens"
    out = [head]
    width = max(len(k) for k, _ in r.explanation)
    for k, v in r.explanation:
        out.append(f"  {k:<{width}}  {v}")
    if r.verdict:
        out.append("")
        out.append(f"verdict: {r.verdict.upper()}")
    if r.notes:
        out.append("")
        out.extend(f"note: {n}" for n in r.notes)
    return "\n".join(visible(line, layout=True) for line in out)  # GPU names: control characters shown
