"""Reductions (sum/mean/max..., topk, sort) and softmax."""
from __future__ import annotations

from ._core import (
    OpCost, Shape, _Call, _category, _cost, _numel, _register, _to_int_list, _type_from_code,
    _vector_roof, bytes_per_element,
)
from .elementwise import _elementwise


def _reduced_shape(s: Shape, dims: list[int] | None, keepdim: bool) -> Shape | None:
    """The output shape of a reduction over ``dims`` (``None`` or ``[]``: every dim)."""
    if not dims:
        return tuple(1 for _ in s) if keepdim else ()
    nd = max(len(s), 1)
    reduced: set[int] = set()
    for d in dims:
        dd = d + nd if d < 0 else d
        if not 0 <= dd < nd:
            return None
        reduced.add(dd)
    out: list[int] = []
    for i, v in enumerate(s):
        if i not in reduced:
            out.append(v)
        elif keepdim:
            out.append(1)
    return tuple(out)


# name -> (dim index, keepdim index, minimum args for a dim reduction, output kind)
# output kind: "same" (input dtype), "index" (int64), "bool", "values+index", "scan", "pair"
_REDUCTIONS: dict[str, tuple[int, int, int, str]] = {
    "sum": (1, 2, 3, "same"), "nansum": (1, 2, 3, "same"), "mean": (1, 2, 3, "same"),
    "nanmean": (1, 2, 3, "same"), "prod": (1, 2, 3, "same"),
    "amax": (1, 2, 2, "same"), "amin": (1, 2, 2, "same"),
    "max": (1, 2, 3, "values+index"), "min": (1, 2, 3, "values+index"),
    "argmax": (1, 2, 2, "index"), "argmin": (1, 2, 2, "index"),
    "all": (1, 2, 2, "bool"), "any": (1, 2, 2, "bool"),
    "var": (1, 3, 3, "same"), "std": (1, 3, 3, "same"),
    "var_mean": (1, 3, 3, "pair"), "std_mean": (1, 3, 3, "pair"),
    "logsumexp": (1, 2, 2, "same"), "norm": (2, 3, 3, "same"),
    "linalg_vector_norm": (2, 3, 3, "same"), "count_nonzero": (1, 99, 2, "index"),
    "cumsum": (1, 99, 2, "scan"), "cumprod": (1, 99, 2, "scan"),
    "logcumsumexp": (1, 99, 2, "scan"), "cummax": (1, 99, 2, "scan"),
    "cummin": (1, 99, 2, "scan"), "aminmax": (1, 2, 2, "pair"),
}


def _reduction(call: _Call) -> OpCost | None:
    name = call.name.split("::", 1)[-1]
    s = call.shape(0)
    if s is None:
        return None
    if name in ("max", "min") and call.is_tensor(1) and call.nd_tensor(1):
        return _elementwise(call, "maximum" if name == "max" else "minimum", 2, 1, False)
    dim_i, keep_i, min_args, out_kind = _REDUCTIONS[name]
    in_t = call.type(0)
    n_in = _numel(s)
    if out_kind == "scan":
        out_shape: Shape | None = s
    else:
        dims: list[int] | None = None
        keepdim = False
        if call.n >= min_args:
            text = call.c(dim_i).strip()
            if text:
                dims = _to_int_list(text)
                if dims is None:
                    return None
            keepdim = bool(call.c_bool(keep_i, False))
        elif name in ("max", "min"):
            out_kind = "same"  # max(self): the value only
        out_shape = _reduced_shape(s, dims, keepdim)
    if out_shape is None:
        return None
    n_out = _numel(out_shape)
    bpe = bytes_per_element(in_t) or 0
    if out_kind == "index":
        out_bytes = n_out * 8
    elif out_kind == "bool":
        out_bytes = n_out
    elif out_kind == "values+index":
        out_bytes = n_out * (bpe + 8)
    elif out_kind == "pair":
        out_bytes = 2 * n_out * bpe
    else:
        out_bytes = n_out * bpe
        if name in ("sum", "prod", "cumsum", "cumprod") and _category(in_t) in ("int", "bool"):
            out_bytes = n_out * 8  # integer sums accumulate to int64
    return _cost(n_in, call.nbytes(0) + out_bytes, _vector_roof(call, [0]), "reduction", name)


def _topk(call: _Call) -> OpCost | None:
    s = call.shape(0)
    k = call.c_int(1)
    dim = call.c_int(2) if call.c(2).strip() else -1
    if s is None or k is None or dim is None or not s:
        return None
    d = dim + len(s) if dim < 0 else dim
    if not 0 <= d < len(s) or k > s[d]:
        return None
    n_out = _numel(s) // max(s[d], 1) * k
    return _cost(_numel(s), call.nbytes(0) + n_out * (call.bpe(0) + 8), "fp32", "reduction", "topk")


def _sort(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None:
        return None
    n = _numel(s)
    vals = 0 if call.name == "aten::argsort" else n * call.bpe(0)
    return _cost(n, call.nbytes(0) + vals + n * 8, "fp32", "reduction", call.name.split("::")[-1])


_register([f"aten::{n}" for n in _REDUCTIONS], _reduction)
_register(["aten::topk"], _topk)
_register(["aten::sort", "aten::argsort"], _sort)


# --------------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------------

def _softmax(call: _Call) -> OpCost | None:
    # softmax(self, dim, dtype?) ; _softmax(self, dim, half_to_float) ; _safe_softmax(self, dim, dtype?)
    s = call.shape(0)
    if s is None:
        return None
    name = call.name.split("::", 1)[-1]
    out_t = call.type(0)
    if name.startswith("_") and name in ("_softmax", "_log_softmax"):
        if call.c_bool(2, False):
            out_t = "float"
    else:
        out_t = _type_from_code(call.c(2)) or out_t
    n = _numel(s)
    # TraceLens's Softmax model: 3 FLOPs per element (exp, sum, divide)
    return _cost(3 * n, call.nbytes(0) + n * (bytes_per_element(out_t) or 0),
                 _vector_roof(call, [0]), "softmax", name.lstrip("_"))


_register(["aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
           "aten::_safe_softmax", "aten::special_softmax"], _softmax)
