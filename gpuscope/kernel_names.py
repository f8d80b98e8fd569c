"""What a GPU activity is, from its name: the one definition that ingest (``kernels.category``)
and the analyzers (kernel families, the breakdown, the roofline) share, so that a kernel is never
communication for one and compute for the other (design.md §4.2), and the direction of a copy,
which decides the link it is judged against.

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
#: Every name COMMUNICATION_KERNEL_RE matches holds one of these words: a cheap ILIKE test spares
#: most kernel names (~300 characters long on average) the regular expression.
_COMMUNICATION_WORDS = ("ccl", "all", "scatter", "multimem", "cross_device")

#: Activities recorded as kernels that are really copies: Kineto's ``Memcpy ...`` and HIP's
#: ``hipMemcpy...``, and the copy names of roctracer / rocprof (``CopyHostToDevice``,
#: ``CopyDeviceToHost``, ``CopyDeviceToDevice``, ``CopyHostToHost``).
MEMCPY_KERNEL_RE = r"^(hip)?memcpy|^copy(host|device)to(host|device)$"
#: ... and fills.
MEMSET_KERNEL_RE = r"^(hip)?memset"
#: Kernels (category ``kernel``) that are really copies or fills: counted as ``memory``.
MEMORY_KERNEL_RE = f"{MEMCPY_KERNEL_RE}|{MEMSET_KERNEL_RE}"

_COMMUNICATION = re.compile(COMMUNICATION_KERNEL_RE, re.I)


def is_communication_kernel(name: str | None) -> bool:
    """True when the kernel ``name`` is a collective or point-to-point transfer."""
    if not name:
        return False
    return _COMMUNICATION.search(name) is not None


def category_sql(kind: str = "kind", name: str = "name") -> str:
    """A SQL expression over the ``kernels`` columns ``kind`` and ``name`` that gives an
    activity's category (``memory``, ``communication``, ``compute``) from the definition above.

    The analyzers derive the category with it rather than reading ``kernels.category``, so that
    a store written before the definition last changed is analyzed by today's definition without
    a migration (the column stays for ``gpuscope sql`` users; ingest fills it with this same
    expression).
    """
    mem_words = f"{name} ILIKE '%mem%' OR {name} ILIKE 'copy%'"
    comm_words = " OR ".join(f"{name} ILIKE '%{w}%'" for w in _COMMUNICATION_WORDS)
    return (
        f"(CASE WHEN {kind} <> 'kernel' "
        f"OR coalesce(CASE WHEN {mem_words} THEN regexp_matches({name}, '{MEMORY_KERNEL_RE}', 'i') END, false) "
        f"THEN 'memory' "
        f"WHEN coalesce(CASE WHEN {comm_words} THEN regexp_matches({name}, '{COMMUNICATION_KERNEL_RE}', 'i') END, "
        f"false) THEN 'communication' "
        f"ELSE 'compute' END)"
    )


# --------------------------------------------------------------------------------------------
# Copy direction
# --------------------------------------------------------------------------------------------

#: Kineto's (CUPTI's and ROCm's) copy kinds: ``Memcpy HtoD (Pinned -> Device)``,
#: ``Memcpy DtoD (Device -> Device)``, ``Memcpy PtoP (Device -> Device)``; ``A`` is a CUDA array,
#: which lives in device memory. HIP's API names glue the kind on: ``hipMemcpyHtoDAsync``.
_KINETO_KIND = re.compile(r"(?:(?<![A-Za-z])|(?<=memcpy)|(?<=Memcpy))(HtoD|DtoH|DtoD|HtoH|PtoP|HtoA|AtoH|AtoD|DtoA|AtoA)(?![a-z])")
#: roctracer / rocprof names and rocprofiler-sdk's ``MEMORY_COPY_HOST_TO_DEVICE``.
_AMD_KIND = re.compile(r"copy_?(host|device)_?to_?(host|device)", re.I)
#: The memory kinds Kineto writes in parentheses: ``(Pageable -> Device)``.
_ENDPOINTS = re.compile(r"\(\s*([A-Za-z ]+?)\s*->\s*([A-Za-z ]+?)\s*\)")
_HOST_MEMORY = {"pageable", "pinned", "host"}
_DEVICE_MEMORY = {"device", "array", "device static"}

#: Where a copy goes: the link it crosses and so the bandwidth that bounds it.
COPY_LINK = {
    "HtoD": "host_link", "DtoH": "host_link",  # PCIe or NVLink-C2C to the CPU's memory
    "DtoD": "device_memory",  # read and written in the same device memory
    "PtoP": "peer",  # to another GPU (NVLink, xGMI or PCIe): not in the spec database
    "HtoH": None,  # host memory only: no GPU roof
}


def copy_direction(name: str | None) -> str | None:
    """The direction of a copy activity from its name: ``HtoD``, ``DtoH``, ``DtoD``, ``PtoP`` or
    ``HtoH``; None when the name does not say.

    Recognised: Kineto's ``Memcpy HtoD (Pinned -> Device)`` (CUDA and ROCm traces alike;
    array copies count as device memory), the endpoints in parentheses when the kind is missing,
    and AMD's ``CopyHostToDevice`` / ``CopyDeviceToHost`` / ``CopyDeviceToDevice`` (roctracer,
    rocprof) and ``MEMORY_COPY_HOST_TO_DEVICE`` (rocprofiler-sdk).
    """
    if not name:
        return None
    m = _KINETO_KIND.search(name)
    if m:
        kind = m.group(1)
        if kind == "PtoP" or kind == "HtoH":
            return kind
        src, dst = ("D" if c in "DA" else "H" for c in (kind[0], kind[-1]))
        return f"{src}to{dst}"
    m = _AMD_KIND.search(name)
    if m:
        return f"{m.group(1)[0].upper()}to{m.group(2)[0].upper()}"
    m = _ENDPOINTS.search(name)
    if m:
        ends = []
        for side in (m.group(1).lower(), m.group(2).lower()):
            if side in _HOST_MEMORY:
                ends.append("H")
            elif side in _DEVICE_MEMORY:
                ends.append("D")
            else:  # managed / unknown memory: the link is not known
                return None
        return f"{ends[0]}to{ends[1]}"
    return None


def copy_link(name: str | None) -> str | None:
    """``host_link``, ``device_memory`` or ``peer`` for a copy activity's name; None when unknown."""
    d = copy_direction(name)
    return COPY_LINK.get(d) if d else None


# The element size a kernel's C++ template was instantiated for, where PyTorch's kernel names
# carry it: cat's `CatArrayBatchedCopy<OpaqueType<2u>, ...>` (cat copies bytes, specialised by
# element size only) and the `_foreach_*` kernels' `multi_tensor_apply_kernel<...,
# CopyFunctor<c10::BFloat16, ...>>` (the first template argument of the functor is the scalar
# type). The profiler records a TensorList argument's shapes but not its dtypes ("TensorList"),
# so the launched kernel is the only witness of how many bytes those ops moved.
_OPAQUE = re.compile(r"OpaqueType<(?:\(unsigned int\))?(\d{1,2})u?>")
_FUNCTOR = re.compile(r"multi_tensor_apply_kernel<.*?Functor<\s*([A-Za-z0-9_:]+(?: (?:int|char))?)\s*[,>]")
_SCALAR_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "int": 4, "long": 8, "long int": 8,
    "short": 2, "short int": 2, "bool": 1, "signed char": 1, "unsigned char": 1, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "int64_t": 8, "int32_t": 4,
    "__half": 2, "__nv_bfloat16": 2, "__hip_bfloat16": 2,
}


def kernel_element_bytes(name: str | None) -> int | None:
    """Bytes per element of the data a PyTorch cat / foreach kernel moves, read from its name, or
    None when the name does not say (see the comment above)."""
    if not name or len(name) > 20000:
        return None
    m = _OPAQUE.search(name)
    if m:
        n = int(m.group(1))
        return n if n in (1, 2, 4, 8, 16) else None
    m = _FUNCTOR.search(name)
    if m:
        return _SCALAR_BYTES.get(m.group(1))
    return None
