"""The "gap to the speed of light" section of the ``gpuscope analyze`` text (analyzers.gap): the
achieved decode tokens/s beside the model's ceiling, and one table of where the gap goes."""
from __future__ import annotations

from typing import Any

from ..textsafe import visible
from .table import fmt_us, prose, table


def _tps(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def _share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def gap_lines(doc: dict[str, Any], width: int) -> list[str]:
    """The section's lines for the analysis ``doc`` (none when it has no ``gap`` and the user
    asked for none: ``gap_reason.code`` ``not_asked``)."""
    gap = doc.get("gap")
    if gap is None:
        reason = doc.get("gap_reason") or {}
        if not reason or reason.get("code") == "not_asked":
            return []
        return ["", prose(f"gap to the decode speed of light: not computed ({visible(str(reason.get('message')))})",
                          width, "", "  ")]
    model = visible(str(gap.get("model") or "the model"))
    head = (f"Gap to the decode speed of light: {model} on {visible(str(gap['gpu']))}"
            f"{' × %d' % gap['num_gpus'] if gap['num_gpus'] > 1 else ''}, batch {gap['batch']}, "
            f"context {gap['context']}")
    out = ["", head]
    achieved, ceiling = gap.get("achieved_tokens_per_s"), gap.get("ceiling_tokens_per_s")
    out.append(prose(f"achieved {_tps(achieved)} tokens/s: {gap['tokens']:,} tokens ({visible(gap['token_source'])}) "
                     f"over {fmt_us(gap['time_us'])} of GPU span (first to last GPU activity, idle included); "
                     f"batch from {visible(gap['batch_source'])}", width, "  ", "    "))
    out.append(prose(f"ceiling  {_tps(ceiling)} tokens/s ({_tps(gap['ceiling_tokens_per_s_per_sequence'])} per "
                     f"sequence): {gap['binding']} binds, {gap['bytes_per_step'] / 1e9:.3g} GB per step at "
                     f"{gap['bandwidth_bytes_per_s'] / 1e12:.3g} TB/s (gpuscope ceiling --model)", width, "  ", "    "))
    frac = gap.get("fraction_of_ceiling")
    if frac is not None:
        out.append(f"  the run reaches {100 * frac:.1f} % of the ceiling: {fmt_us(gap['achieved_step_us'])} per "
                   f"decode step against {fmt_us(gap['ceiling_step_us'])}")
    gap_step = gap["gap_step_us"]
    rows = [(visible(p["label"]), fmt_us(p["step_us"]), _share(p["step_us"], gap_step)) for p in gap["parts"]]
    rows.append(("gap (the sum)", fmt_us(gap_step), _share(gap_step, gap_step)))
    out.append(table(["where the gap goes", "per step", "share of gap"], rows, "lrr", width=width,
                     flex="where the gap goes", flex_min=20))
    for n in gap.get("notes") or []:
        out.append(prose(f"note: {visible(str(n))}", width, "  ", "    "))
    return out
