"""Roofline coverage: the share of a run's GPU time whose op or kernel is judged against a roof
(design.md §4.2, the ``coverage`` key of ``analyze --json``), and the largest unjudged work
with the reason it is not judged.

Pure functions; they never print. What counts, exactly (also in ``docs/roofline.md``):

- ``total_us`` is every GPU activity the analysis counts: kernels (compute and communication),
  memcpys and memsets, over all devices, capture traces set aside beside their replay
  excluded (the sum of ``time_us.compute + communication + memory``).
- A compute kernel's time is **judged** when the call that launched it has a cost model (FLOPs
  and bytes from its shapes) and the device a roof for it: the verdict has a time at the roof
  (``roof_us``). ``latency_bound`` by a model counts (its roof time is known); ``cache_bound``
  counts (it was measured against a cache). A kernel placed by its name family or by its
  duration alone (``confidence`` "family" / "duration") is **not** judged: it has no roof it is
  measured against. Neither is an op or kernel flagged ``model_error`` (its percent is withheld).
- A compute kernel no recorded op launched (or a graph replay no capture maps) is judged when
  it borrowed the cost of identical twins (same name, grid and block, launched by costed ops,
  all agreeing: ``confidence`` "estimate"); when its costed twins disagree it is unjudged with
  the reason ``twin_ambiguous``.
- A memcpy / memset is judged when :func:`gpuscope.analyzers.roofline.classify_copy` gave it a
  roof time (host link or device memory).
- A communication kernel is judged when :mod:`gpuscope.analyzers.comm` found its collective,
  message size and group size in the trace and the spec database gives its GPU's scale-up link
  (NVLink / Infinity Fabric, or PCIe peer-to-peer): it has a link roof time
  (``communication_bound`` or ``latency_bound``). One shown faster than its link is
  ``model_error``; the others are unjudged with the reason ``communication`` (the
  ``communication`` block's entry says which part is missing).

Each unjudged microsecond carries one reason from :data:`REASONS`.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

#: Every reason an unjudged microsecond can carry, and what it means (in the text output).
REASONS: dict[str, str] = {
    "no_cost_model": "no cost model",
    # a fused MoE op without --model, or with a config whose experts do not match the op's
    "needs_model": "expert weights not in the trace: pass --model CONFIG.json",
    "no_shapes": "no shapes recorded: profile with record_shapes=True",
    "no_concrete_inputs": "no Concrete Inputs recorded (stride, padding...)",
    "shapes_not_modelled": "its shapes or dtypes are outside the cost model",
    "no_op": "kernel launched by no recorded op",
    "graph_replay_unmapped": "graph-replayed kernel, no capture maps it to an op",
    # an op-less kernel whose identical launches (same name, grid, block) by costed ops give
    # different costs: which one it was is not known, so it borrows none
    "twin_ambiguous": "no op; its identical launches differ in cost",
    "no_spec": "GPU not in the spec database",
    "no_roof_for_dtype": "no peak for its dtype on this GPU",
    "model_error": "cost model overshoots every roof",
    "needs_context": "KV context length not in the trace (no engine step labels): pass --context",
    # a collective whose message size, group size or link roof is not known: the entry of the
    # ``communication`` block says which
    "communication": "communication: message size, group size or link roof not known",
    "copy_not_judged": "copy of unknown link or size",
}

#: Op names of fused mixture-of-experts layers: their expert weights are not op inputs a trace
#: records (vLLM's ``moe_forward``, SGLang / aiter ``fused_moe``), so only a model config can
#: cost them (issue 28, point 3).
NEEDS_MODEL_RE = re.compile(r"moe", re.I)

#: How many unjudged entries ``coverage.unjudged`` lists.
TOP_UNJUDGED = 10

_BLANK_RE = re.compile(r'^\[(\s*(""|\[\]|null)\s*,?)*\]$')


def _blank(text: Any) -> bool:
    """True when a stored ``input_dims`` / ``concrete_inputs`` value records nothing."""
    if text is None:
        return True
    s = str(text).strip()
    return s in ("", "[]", "null") or bool(_BLANK_RE.match(s))


def reason_for_op(name: str, dims: Any, concrete: Any) -> str:
    """Why an op call has no cost: its name has no model, it needs ``--model``, the trace
    records no shapes (or no ``Concrete Inputs``), or its shapes fall outside the model."""
    from .costmodel import NEEDS_CONCRETE_INPUTS, covered_op_names, has_cost_model
    from .costmodel.moe import MODEL_OPS  # costed only with a matching --model

    covered = covered_op_names()
    key = (name or "").strip()
    if key not in covered and "::" not in key and f"aten::{key}" in covered:
        key = f"aten::{key}"
    # a generated kernel (Inductor's triton_poi_fused_..._moe_forward_0) is modelled by its
    # name's pattern: it has a model even when its name contains "moe"
    if key in MODEL_OPS or (key not in covered and not has_cost_model(key)):
        return "needs_model" if key in MODEL_OPS or NEEDS_MODEL_RE.search(key) else "no_cost_model"
    if _blank(dims):
        return "no_shapes"
    if key in NEEDS_CONCRETE_INPUTS and _blank(concrete):
        return "no_concrete_inputs"
    from .costmodel.engine_attention import NEEDS_CONTEXT_OPS  # costed only with --context
    return "needs_context" if key in NEEDS_CONTEXT_OPS else "shapes_not_modelled"


def reason_for_unroofed(roof_source: str | None, verdict_reason: str) -> str:
    """Why work with a cost got no roof time: no spec for the GPU, or no peak for its dtype."""
    if roof_source is None:
        return "no_spec"
    if "peak for this GPU" in verdict_reason:
        return "no_roof_for_dtype"
    return "no_cost_model"


class CoverageTally:
    """Accumulates judged and unjudged GPU time while the attribution walks the run."""

    def __init__(self) -> None:
        self.judged_us = 0.0
        #: (name, kind, reason) -> µs; kind is "op", "kernel", "copy" or "communication".
        self.unjudged: dict[tuple[str, str, str], float] = defaultdict(float)

    def judged(self, us: float) -> None:
        """Count ``us`` of GPU time as judged against a roof."""
        self.judged_us += us

    def unjudged_time(self, name: str, kind: str, reason: str, us: float) -> None:
        """Count ``us`` of GPU time of ``name`` as unjudged, for ``reason``."""
        self.unjudged[(name, kind, reason)] += us

    def document(self, total_us: float, top: int = TOP_UNJUDGED) -> dict[str, Any]:
        """The ``coverage`` block: ``{judged_us, total_us, share, unjudged, unjudged_us,
        by_reason, needs_model}``; ``share`` is null when there is no GPU time."""
        return coverage_document(self.judged_us, total_us, self.unjudged, top)


def coverage_document(judged_us: float, total_us: float, unjudged: dict[tuple[str, str, str], float],
                      top: int = TOP_UNJUDGED) -> dict[str, Any]:
    """Assemble the ``coverage`` block from judged time, total time and unjudged time per
    (name, kind, reason); the largest ``top`` unjudged entries are listed, largest first."""
    items = sorted(((us, name, kind, reason) for (name, kind, reason), us in unjudged.items() if us > 0),
                   key=lambda x: (-x[0], x[1], x[3]))
    by_reason: dict[str, float] = defaultdict(float)
    for us, _, _, reason in items:
        by_reason[reason] += us
    share = (min(max(judged_us / total_us, 0.0), 1.0)) if total_us > 0 else None
    return {
        "judged_us": judged_us,
        "total_us": total_us,
        "share": share,
        "unjudged": [{"name": name, "kind": kind, "kernel_us": us,
                      "share": us / total_us if total_us > 0 else None, "reason": reason}
                     for us, name, kind, reason in items[:top]],
        "unjudged_us": sum(us for us, *_ in items),
        "by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "needs_model": sorted({name for _, name, kind, reason in items if reason == "needs_model"}),
    }


def empty_coverage() -> dict[str, Any]:
    """The ``coverage`` block of a run without GPU activity (a CPU-only trace): nothing to judge."""
    doc = coverage_document(0.0, 0.0, {})
    doc["note"] = "cpu_only: the run has no GPU activity, nothing to judge against a GPU roof"
    return doc


def coverage_line(cov: dict[str, Any] | None, top: int = 3, name_width: int | None = 48) -> str | None:
    """One line for the text outputs: ``roofline coverage: 84.1 % of GPU time judged (12.3 ms of
    14.6 ms); largest unjudged: NAME 67 % (no cost model), ...``. Names from the trace are shown
    with their control characters visible, cut to ``name_width`` (None: whole); the caller wraps
    the line to its width."""
    from ..textsafe import visible

    if not cov:
        return None
    if cov.get("share") is None:
        return "roofline coverage: no GPU time to judge (CPU-only trace)"
    line = (f"roofline coverage: {100 * cov['share']:.1f} % of GPU time judged "
            f"({_ms(cov['judged_us'])} of {_ms(cov['total_us'])})")
    parts = []
    for u in (cov.get("unjudged") or [])[:top]:
        name = visible(str(u["name"]))
        if name_width is not None and len(name) > name_width:
            half = max(name_width // 2 - 1, 1)
            name = name[:half] + "…" + name[-(name_width - half - 1):]
        why = REASONS.get(u["reason"], visible(str(u["reason"]))).split(":")[0]
        parts.append(f"{name} {100 * (u['share'] or 0):.0f} % ({why})")
    if parts:
        line += "; largest unjudged: " + ", ".join(parts)
    return line


def _ms(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.1f} µs"
