"""Kernel-name families: what a GPU kernel probably does, from its name alone.

Used for kernels that carry no shapes (CUDA/HIP graph replays without a capture trace, custom
and Triton kernels, traces without a CPU side). A family is a hint, not a measurement: the
analysis reports it with ``confidence = "family"`` and never mixes it up with a cost model.

Both vendors' library names are recognised: cuBLAS / cuBLASLt (``sm90_xmma``, ``nvjet``,
``ampere_*gemm``), CUTLASS, rocBLAS/Tensile (``Cijk_``), hipBLASLt, Composable Kernel
(``ck::``/``ck_tile``), vLLM's ROCm skinny GEMMs (``wvSplitK``, ``LLMM1``), FlashAttention,
FlashInfer, AITER, PyTorch's ATen kernels and Triton/Inductor (``triton_poi_``, ``triton_red_``,
``triton_per_``, ``triton_tem_``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..kernel_names import COMMUNICATION_KERNEL_RE, MEMORY_KERNEL_RE

#: Families, in the order they are tried. ``bound_hint`` is where a kernel of the family
#: usually sits when nothing else is known (None: no hint).
FAMILIES = (
    "communication", "memory", "attention", "gemm", "conv", "norm", "softmax", "embedding",
    "moe_routing", "sort", "reduction", "elementwise", "other",
)


@dataclass(frozen=True)
class KernelFamily:
    """The family of a kernel name and the bound class its family suggests."""

    family: str
    #: "compute_bound", "memory_bound" or None (no hint).
    bound_hint: str | None
    #: The name pattern that decided it, for the report.
    reason: str


# (family, bound_hint, regex) — first match wins. Patterns match the lower-cased name.
_RULES: tuple[tuple[str, str | None, str], ...] = (
    ("communication", None, COMMUNICATION_KERNEL_RE),
    ("memory", "memory_bound", MEMORY_KERNEL_RE + r"|memcpy[dh]to[dh]"),
    # Before the attention rules: these names mention "flash" or "embedding" but move data.
    ("elementwise", "memory_bound",
     r"reshape_and_cache|concat_and_cache|cache_kernel|rotary|apply_rope|quantiz|multi_tensor_apply"),
    ("moe_routing", None, r"topk|top_k|moe_align|sort_tokens|sorttokens|routing|bitmatrix"),
    # Decode-time attention reads the whole KV cache for a few query tokens: memory-bound.
    ("attention", "memory_bound",
     r"paged_?attention|decode|split_?kv|splitkv|flash_?decod|unified_attention|single_query|mla_decode|pa_fwd"),
    ("attention", "compute_bound",
     r"flash|fmha|attention|attn|sdpa|mha_|_mha|fwd_kernel.*softmax|ck_tile.*fmha"),
    # Skinny GEMM / GEMV kernels are built for memory-bound shapes (decode).
    ("gemm", "memory_bound", r"gemv|wvsplitk|llmm1|skinny|splitk_reduce|splitkreduce|dot_?kernel"),
    ("gemm", "compute_bound",
     r"gemm|fused_moe|xmma|nvjet|cutlass|cublas|^cijk_|hipblaslt|matmul|_mm_|triton_tem_|mm_kernel|sgemm|hgemm|"
     r"wmma|mfma|tensorop|s16816|h16816|s1688|h1688|bmm|kernel_gemm|devicegemm"),
    ("conv", "compute_bound", r"(?<![a-z])conv|convolution|implicit_?gemm|winograd|miopen.*(fwd|bwd)|cudnn.*(fprop|dgrad|wgrad)"),
    ("norm", "memory_bound", r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|normaliz"),
    ("softmax", "memory_bound", r"softmax"),
    ("embedding", "memory_bound", r"embedding|gather|index_select|indexselect|scatter|index_kernel|take_along"),
    ("sort", None, r"sort|radix|cub::|bitonic|argsort"),
    ("reduction", "memory_bound", r"reduce|reduction|pool|triton_red_|triton_per_|sum_kernel|argmax|argmin|norm_kernel|cumsum|scan"),
    ("elementwise", "memory_bound",
     r"elementwise|triton_poi_|vectorized|unrolled|pointwise|fill|copy|cast|convert|rotary|rope|silu|gelu|relu|"
     r"act_and_mul|and_mul|add_kernel|mul_kernel|cat_|catarray|reshape_and_cache|cache_kernel|where|clamp|"
     r"dropout|bias|scale|quant"),
)
_COMPILED = tuple((fam, hint, re.compile(pat)) for fam, hint, pat in _RULES)


@lru_cache(maxsize=65536)
def kernel_family(name: str | None) -> KernelFamily:
    """The family of a kernel from its name (case-insensitive); ``other`` when nothing matches."""
    text = (name or "").lower()
    for fam, hint, rx in _COMPILED:
        m = rx.search(text)
        if m:
            return KernelFamily(fam, hint, f"name matches {m.group(0)!r}")
    return KernelFamily("other", None, "no known name pattern")
