"""``_foreach_*`` ops: one launch over lists of tensors (optimizers, SGLang/vLLM's batched copies).

The profiler records each TensorList argument as the list of its tensors' shapes, with the type
``TensorList`` and no dtypes; the attribution reads the element size from the launched kernel's
name (``multi_tensor_apply_kernel<..., UnaryOpFunctor<c10::BFloat16, ...>>``) and gives it as
``call.element_bytes``. Without it, these ops are not costed. Every tensor of every list is
read once; the first list is written (in place for ``_foreach_x_``, a new list of the same
shapes for ``_foreach_x``). FLOPs: one per element of the result per list operation, zero for
copies and fills.
"""
from __future__ import annotations

from ._core import OpCost, _Call, _cost, _numel, _register

_NO_FLOPS = {"copy", "copy_", "zero", "zero_", "clone"}
_WRITE_ONLY = {"zero", "zero_"}


def _foreach(call: _Call) -> OpCost | None:
    eb = call.element_bytes
    if not eb:
        return None
    lists = [lst for lst in (call.tensor_list(i) for i in range(call.n)) if lst is not None]
    if not lists:
        return None
    first = lists[0]
    for lst in lists[1:]:
        if len(lst) != len(first):
            return None
    base = call.name.split("::")[-1][len("_foreach_"):]
    n_out = sum(_numel(s) for s in first)
    reads = 0 if base in _WRITE_ONLY else sum(_numel(s) for lst in (lists[1:] if base.startswith("copy") else lists)
                                           for s in lst)
    # scalars and scalar lists are kernel arguments, not memory traffic
    nbytes = (reads + n_out) * eb
    flops = 0 if base in _NO_FLOPS else n_out
    return _cost(flops, nbytes, "fp32", "copy" if base in _NO_FLOPS else "elementwise",
                 f"foreach {base.rstrip('_')} (element size from the kernel)")


_NAMES = ["copy_", "add", "add_", "mul", "mul_", "sub", "sub_", "div", "div_", "zero_", "addcmul_", "addcdiv_",
          "lerp_", "sqrt", "sqrt_", "neg", "neg_", "exp", "exp_", "abs", "abs_", "clamp_min_", "clamp_max_",
          "maximum_", "minimum_", "pow", "pow_", "sign", "reciprocal_", "norm"]
_register([f"aten::_foreach_{n}" for n in _NAMES if n != "norm"], _foreach)
