"""What a GPU activity is, from its name: the one definition that ingest (``kernels.category``)
and the analyzers (kernel families) share, so that a kernel is never communication for one and
compute for the other (design.md §4.2).

Patterns are written for both Python's ``re`` and DuckDB's RE2, matched case-insensitively.
"""
from __future__ import annotations

import re

#: Collective and point-to-point kernels: the vendor libraries (NCCL, RCCL, MSCCL, HCCL) and the
#: collectives inference stacks write themselves (vLLM's custom all-reduce
#: ``cross_device_reduce``, PyTorch symmetric memory's ``multimem_*`` and ``*all_reduce*``,
#: all-gather, reduce-scatter, all-to-all).
COMMUNICATION_KERNEL_RE = (
    r"nccl|rccl|msccl|hccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|multimem"
)
#: Kernels (category ``kernel``) that are really copies or fills.
MEMORY_KERNEL_RE = r"^(hip)?(memcpy|memset)"

_COMMUNICATION = re.compile(COMMUNICATION_KERNEL_RE, re.I)


def is_communication_kernel(name: str | None) -> bool:
    """True when the kernel ``name`` is a collective or point-to-point transfer."""
    return bool(name) and _COMMUNICATION.search(name) is not None
