"""Inductor's generated Triton kernels (``torch.compile``): ``triton_poi_*``, ``triton_red_*``,
``triton_per_*``, ``triton_spl_*``, ``triton_for_*`` and the GEMM templates ``triton_tem_*``.

What the trace records. Inductor launches each kernel through its ``CachingAutotuner``, which
(with the profiler on) opens a ``RecordFunctionFast`` named after the kernel, with the launch's
positional arguments as the op's inputs (``torch/_inductor/runtime/triton_heuristics.py``,
``_pre_launch``). The arguments come in the order of ``KernelArgs.python_argdefs``
(``torch/_inductor/codegen/common.py``): in-place buffers (``in_out_ptr*``), inputs
(``in_ptr*``), outputs (``out_ptr*``), symbolic sizes (``ks*``), workspaces; then, for
pointwise and reduction kernels, one ``numel`` per iteration range
(``add_numel_to_call_args`` in ``codegen/triton.py``: ``[z][y]x`` then ``r0_[r1_]``), recorded
as ``Scalar`` arguments with their values in ``Concrete Inputs``. Templates pass no numels.
Combo kernels (several kernels in one launch) with static sizes hard-code their numels and
pass none. The profiler records neither the argument names nor which buffers a kernel
reads or writes, so every tensor argument counts once: read or written.

The name is ``triton_<category>_<fused name>_<n>`` (``define_kernel`` in ``codegen/triton.py``):
``poi`` pointwise, ``red`` reduction, ``per`` persistent reduction, ``spl`` split scan, ``for``
foreach/combo, ``tem`` template; the fused name is ``fused_`` and the sorted, distinct names of
the aten ops fused into it (``get_fused_kernel_name`` in ``torch/_inductor/utils.py``), whose
own names may hold underscores (``bitwise_and``, ``_to_copy``).

The model (every number an estimate, ``docs/costmodel.md``):

- iteration space: the product of the trailing numels. Which trailing scalars are numels and
  which are ``ks`` sizes is not recorded: the shortest run of trailing scalars (1 for
  pointwise, 2 for reductions: ``x`` and ``r0_``) is taken, lengthened (a tiled ``y, x``
  pointwise kernel) only when the longer product equals the size of a tensor argument.
- bytes: each tensor argument's storage (from its strides: a broadcast input counts once),
  capped at the iteration space: a kernel touches at most that many elements of a buffer per
  access, and the cap keeps a gather from a large table or a slice of a large buffer from
  counting the whole buffer. In-place (``in_out_ptr``) buffers are read and written but
  count once: an under-count of at most 2x for them. Never an over-count of what a kernel
  reading each element once must move.
- FLOPs: iteration space x the per-element FLOPs of the arithmetic ops named in the kernel
  name (the elementwise tables, 1 per reduction or normalisation name); data movement and
  unrecognised names count 0; a reduction at least 1 per element.
- templates: ``mm`` / ``addmm`` / ``_int_mm`` / ``bmm`` / ``baddbmm``: ``2·M·N·K`` from the
  argument shapes when they fix ``M, N, K`` unambiguously, bytes the storage of every tensor.
- roof: vector (fp32, fp64 with a double argument); templates the matrix roof of A and B, fp32
  judged against TF32 (Inductor's template runs TF32 when the program allows it, which the
  trace does not say: the higher roof is never exceeded).
"""
from __future__ import annotations

import re

from ._core import (
    OpCost, Shape, _Call, _cost, _matrix_roof, _numel, _register_pattern, _to_int,
    _vector_roof, storage_elements,
)
from .elementwise import _BINARY, _TERNARY, _UNARY

#: ``[prefix_]triton_<category>_<fused name>_<n>``; an AOTInductor build may prefix the model's
#: name. ``unk`` (a category Inductor could not tell) is not modelled.
KERNEL_RE = re.compile(r"^(?:\w*?_)?triton_(?P<cat>poi|red|per|spl|for|tem)_(?P<body>\w*?)_?(?P<idx>\d+)$")

_CATEGORY = {"poi": "pointwise", "for": "foreach", "red": "reduction",
             "per": "persistent reduction", "spl": "split scan", "tem": "template"}
#: the fewest and the most trailing numels each category passes
_NUMELS = {"poi": (1, 3), "for": (1, 3), "red": (2, 4), "per": (2, 4), "spl": (2, 4)}

#: one FLOP per element (an estimate: the name says which ops were fused, not how often)
_REDUCE_NAMES = frozenset({
    "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "aminmax", "max", "min",
    "argmax", "argmin", "all", "any", "var", "std", "var_mean", "std_mean", "logsumexp", "norm",
    "linalg_vector_norm", "cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "softmax",
    "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "layer_norm", "native_layer_norm",
    "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm", "batch_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional",
})
#: data movement: 0 FLOPs; listed so that their underscores do not split them into other names
_MOVE_NAMES = frozenset({
    "_to_copy", "copy_", "clone", "constant_pad_nd", "cat", "index", "_unsafe_index",
    "index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_put",
    "_unsafe_index_put", "index_add", "slice_scatter", "select_scatter", "diagonal_scatter",
    "as_strided", "as_strided_scatter", "_unsafe_view", "view", "reshape", "permute",
    "transpose", "expand", "squeeze", "unsqueeze", "embedding", "full", "fill", "zeros", "ones",
    "new_zeros", "new_ones", "new_empty", "new_full", "full_like", "zeros_like", "ones_like",
    "empty_like", "split_with_sizes", "repeat_interleave", "lift_fresh_copy", "view_as_real",
    "view_as_complex", "convert_element_type", "masked_scatter", "moe_forward", "alias",
    "select", "slice", "split", "unbind", "stack", "repeat", "flip", "roll", "narrow", "iota",
    "arange", "detach", "t", "mm", "addmm", "bmm", "baddbmm", "_int_mm",
})
_GEMMS = {"mm": 2, "addmm": 2, "_int_mm": 2, "bmm": 3, "baddbmm": 3}


def _flops_per_name(name: str) -> float:
    if name in _TERNARY:
        return float(_TERNARY[name])
    if name in _UNARY or name in _BINARY or name in _REDUCE_NAMES:
        return 1.0
    return 0.0


# Every known name with an underscore, as its "_"-split tokens: the segmenter's dictionary.
_MULTI: dict[int, set[tuple[str, ...]]] = {}
for _n in set(_UNARY) | set(_BINARY) | set(_TERNARY) | _REDUCE_NAMES | _MOVE_NAMES:
    _toks = tuple(_n.split("_"))
    if len(_toks) > 1:
        _MULTI.setdefault(len(_toks), set()).add(_toks)
_LONGEST = max(_MULTI) if _MULTI else 1


def fused_op_names(kernel_name: str) -> list[str] | None:
    """The aten op names fused into Inductor kernel ``kernel_name``, in the order the name lists
    them: ``triton_poi_fused_add_bitwise_and_0`` -> ``["add", "bitwise_and"]``. Names with
    underscores are recognised from the cost model's tables (longest match first); an unknown
    name comes back one ``_``-separated word at a time. ``None`` when ``kernel_name`` is not an
    Inductor kernel name."""
    m = KERNEL_RE.match(kernel_name.strip()) if isinstance(kernel_name, str) else None
    if m is None:
        return None
    body = m.group("body")
    if body == "fused" or not body:
        return []
    if body.startswith("fused_"):
        body = body[len("fused_"):]
    toks = body.split("_")
    out: list[str] = []
    i = 0
    while i < len(toks):
        for size in range(min(_LONGEST, len(toks) - i), 1, -1):
            if tuple(toks[i:i + size]) in _MULTI.get(size, ()):
                out.append("_".join(toks[i:i + size]))
                i += size
                break
        else:
            if toks[i]:
                out.append(toks[i])
            i += 1
    return out


def _tensor_args(call: _Call) -> list[int] | None:
    """Indices of the tensor arguments; ``None`` when an argument has dims but no known dtype
    (its bytes could not be counted)."""
    idxs: list[int] = []
    for i in range(call.n):
        if call.is_tensor(i):
            idxs.append(i)
        elif isinstance(call.dims[i], (list, tuple)) and call.dims[i]:
            return None
    return idxs


def _trailing_scalars(call: _Call, tensors: list[int]) -> list[int | None]:
    """The recorded values of the non-tensor arguments after the last tensor (``None`` where a
    value is not recorded)."""
    start = (tensors[-1] + 1) if tensors else 0
    return [_to_int(call.c(i)) if call.c(i).strip() else None for i in range(start, call.n)]


def _iteration_space(call: _Call, cat: str, tensors: list[int]) -> int | None:
    """Elements the launch iterates over: the product of its trailing numels (module doc)."""
    lo, hi = _NUMELS[cat]
    scalars = _trailing_scalars(call, tensors)
    if len(scalars) < lo:
        return None  # a combo kernel with hard-coded sizes, or numels not recorded
    numels = {_numel(call.shape(i) or ()) for i in tensors}
    chosen: int | None = None
    product = 1
    for size in range(1, min(hi, len(scalars)) + 1):
        v = scalars[-size]
        if v is None or v <= 0:
            break
        product *= v
        if size < lo:
            continue
        if size == lo:
            chosen = product
        if product in numels:
            chosen = product
            break
    return chosen


def _simd_kernel(call: _Call, cat: str, names: list[str]) -> OpCost | None:
    tensors = _tensor_args(call)
    if not tensors:
        return None
    space = _iteration_space(call, cat, tensors)
    if space is None or space <= 0:
        return None
    nbytes = 0
    for i in tensors:
        s = call.shape(i) or ()
        nbytes += min(storage_elements(s, call.stride(i)), space) * call.bpe(i)
    per_element = sum(_flops_per_name(n) for n in names)
    if cat in ("red", "per", "spl"):
        per_element = max(per_element, 1.0)
    model = f"triton {_CATEGORY[cat]} (estimate)"
    return _cost(space * per_element, nbytes, _vector_roof(call, tensors), "triton", model)


def _gemm_sizes(call: _Call, tensors: list[int],
                rank: int) -> tuple[tuple[int, int, int, int], list[int]] | None:
    """``(batch, M, N, K)`` of the one product ``A·B -> C`` the tensor arguments (in order: A,
    then B, then C: inputs come before outputs) can form, and the indices of every A and B
    that fit; ``None`` when none or several different products fit."""
    shapes: list[tuple[int, Shape]] = [(i, s) for i in tensors
                                       if (s := call.shape(i)) is not None and len(s) == rank]
    found: set[tuple[int, int, int, int]] = set()
    operands: list[int] = []
    for a in range(len(shapes)):
        ia, sa = shapes[a]
        for b in range(a + 1, len(shapes)):
            ib, sb = shapes[b]
            if sa[-1] != sb[-2] or sa[:-2] != sb[:-2]:
                continue
            want = (*sa[:-1], sb[-1])
            if any(sc == want for _, sc in shapes[b + 1:]):
                found.add((_numel(sa[:-2]), sa[-2], sb[-1], sa[-1]))
                operands += [ia, ib]
    if len(found) != 1:
        return None
    return found.pop(), operands


def _template(call: _Call, names: list[str]) -> OpCost | None:
    gemms = {n for n in names if n in _GEMMS}
    if len(gemms) != 1:
        return None  # a convolution, attention or other template, or two GEMM names
    gemm = gemms.pop()
    tensors = _tensor_args(call)
    if not tensors:
        return None
    fit = _gemm_sizes(call, tensors, _GEMMS[gemm])
    if fit is None:
        return None
    (batch, m, n, k), operands = fit
    if min(batch, m, n, k) <= 0:
        return None
    roof = _matrix_roof([call.type(i) for i in operands], fp32_as="tf32")
    if roof is None:
        return None
    nbytes = sum(storage_elements(call.shape(i) or (), call.stride(i)) * call.bpe(i) for i in tensors)
    flops = 2.0 * batch * m * n * k
    return _cost(flops, nbytes, roof, "triton", f"triton template {gemm} (estimate)")


def _triton_kernel(call: _Call) -> OpCost | None:
    """The cost of one launch of an Inductor-generated Triton kernel (see the module doc)."""
    m = KERNEL_RE.match(call.name)
    if m is None:
        return None
    names = fused_op_names(call.name)
    if names is None:
        return None
    cat = m.group("cat")
    if cat == "tem":
        return _template(call, names)
    return _simd_kernel(call, cat, names)


_register_pattern(KERNEL_RE, _triton_kernel)
