"""Copies, conversions and data movement: copy_, clone, to, cat, index/gather/scatter, pad."""
from __future__ import annotations

from ._core import (
    OpCost, _Call, _broadcast, _cost, _is_shape, _norm_type, _numel, _register, _to_int_list,
    _type_from_code, _vector_roof, bytes_per_element,
)


def _copy_(call: _Call) -> OpCost | None:
    dst, src = call.shape(0), call.shape(1)
    if dst is None or src is None or _broadcast([src, dst]) != dst:
        return None
    return _cost(0, call.nbytes(1) + call.written(0), _vector_roof(call, [0, 1]), "copy", "copy_")


def _clone(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None:
        return None
    name = call.name.split("::", 1)[-1]
    return _cost(0, call.nbytes(0) + call.written(0), _vector_roof(call, [0]), "copy", name)


def _to_dtype_index(call: _Call) -> int | None:
    """Where aten::to keeps its dtype: to.dtype(self, dtype, non_blocking, copy, fmt),
    to.device(self, device, dtype, ...), to.dtype_layout(self, dtype, layout, device, ...)."""
    if call.name == "aten::_to_copy":
        return 1
    if call.n == 6:
        return 2
    return 1


def _to_copy(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None:
        return None
    src_t = call.type(0)
    if call.name == "aten::to" and call.is_tensor(1):  # to.other(self, other, ...)
        dst_t = call.type(1)
        copy_flag = call.c_bool(3, False)
    else:
        di = _to_dtype_index(call)
        dst_t = (_type_from_code(call.c(di)) if di is not None else None) or src_t
        copy_flag = call.c_bool({5: 3, 6: 4, 8: 6}.get(call.n, 3), False)
    if call.name == "aten::type_as":
        dst_t = call.type(1) or src_t
        copy_flag = False
    same = _norm_type(dst_t) == _norm_type(src_t)
    if call.name in ("aten::to", "aten::type_as") and same and not copy_flag:
        # aten::to without a dtype change returns self; a device transfer, when there is one,
        # is done (and costed) by its child aten::_to_copy
        return _cost(0, 0, None, "view", "to (no-op)")
    n = _numel(s)
    nbytes = call.nbytes(0) + n * (bytes_per_element(dst_t) or 0)
    model = "convert" if not same else "copy"
    return _cost(0, nbytes, _vector_roof(call, [0]), "copy", f"{call.name.split('::')[-1]} ({model})")


def _local_scalar(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None or _numel(s) != 1:
        return None
    return _cost(0, call.nbytes(0), None, "copy", "item (device to host)")


def _cat(call: _Call) -> OpCost | None:
    shapes = call.tensor_list(0)
    if shapes is None:
        return None
    # cat skips legacy empty 1-D tensors
    shapes = [s for s in shapes if s != (0,)]
    if not shapes:
        return _cost(0, 0, None, "copy", "cat")
    n = sum(_numel(s) for s in shapes)
    stack = call.name in ("aten::stack", "aten::hstack", "aten::vstack")
    if not stack:
        ndim = len(shapes[0])
        if any(len(s) != ndim for s in shapes):
            return None
    out_t = None
    outs = [i for i in range(1, call.n) if call.is_tensor(i)]
    if outs:
        out_t = call.type(outs[0])
    # Kineto records a TensorList without its element dtypes: bytes are unknown unless an
    # out= tensor shows the dtype.
    bpe = bytes_per_element(out_t) if out_t else None
    nbytes = 2 * n * bpe if bpe else None
    model = call.name.split("::")[-1]
    if nbytes is None and call.element_bytes:
        # the element size the launched cat kernel was instantiated for (CatArrayBatchedCopy<OpaqueType<2>>)
        nbytes = 2 * n * call.element_bytes
        model += " (element size from the kernel)"
    return _cost(0, nbytes, "fp32", "copy", model + (
        "" if nbytes is not None else " (TensorList dtypes not recorded)"))


def _index_select(call: _Call) -> OpCost | None:
    s, idx = call.shape(0), call.shape(2)
    dim = call.c_int(1)
    if s is None or idx is None or dim is None or len(idx) > 1:
        return None
    out: tuple[int, ...]
    if not s:
        out = (_numel(idx),) if idx else ()
    else:
        d = dim + len(s) if dim < 0 else dim
        if not 0 <= d < len(s):
            return None
        out = tuple(s[:d]) + (_numel(idx),) + tuple(s[d + 1:])
    n = _numel(out)
    return _cost(0, call.nbytes(2) + 2 * n * call.bpe(0), "fp32", "embedding", "index_select")


def _embedding(call: _Call) -> OpCost | None:
    w, idx = call.shape(0), call.shape(1)
    if w is None or idx is None or len(w) != 2:
        return None
    n = _numel(idx) * w[1]
    # compulsory: the indices, the rows they select (read once each) and the output
    return _cost(0, call.nbytes(1) + 2 * n * call.bpe(0), "fp32", "embedding", "embedding")


def _gather(call: _Call) -> OpCost | None:
    s, idx = call.shape(0), call.shape(2)
    if s is None or idx is None:
        return None
    n = _numel(idx)
    return _cost(0, call.nbytes(2) + 2 * n * call.bpe(0), "fp32", "embedding", "gather")


def _scatter(call: _Call) -> OpCost | None:
    # scatter(self, dim, index, src|value[, reduce]); scatter_add(self, dim, index, src)
    s, idx = call.shape(0), call.shape(2)
    if s is None or idx is None:
        return None
    name = call.name.split("::", 1)[-1]
    inplace = name.endswith("_")
    n = _numel(idx)
    bpe = call.bpe(0)
    src = n * call.bpe(3) if call.is_tensor(3) and call.nd_tensor(3) else 0
    nbytes = call.nbytes(2) + src + n * bpe  # index, updates, the written elements
    if "add" in name or "reduce" in name or call.c(4).strip():
        nbytes += n * bpe  # read-modify-write of the targets
    if not inplace:
        nbytes += call.nbytes(0) + call.written(0)  # the copy of self into the result
    return _cost(n if "add" in name else 0, nbytes, "fp32", "copy", name)


def _index(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None or call.n < 2:
        return None
    idx = call.dims[1]
    if not isinstance(idx, list) or not idx or not all(_is_shape(i) and isinstance(i, list) for i in idx):
        return None  # the index list is not recorded (typical): output size unknown
    shapes = [tuple(i) for i in idx]
    if len(shapes) > len(s):
        return None
    b = _broadcast(shapes)
    if b is None:
        return None
    out = b + tuple(s[len(shapes):])
    n = _numel(out)
    return _cost(0, sum(_numel(i) for i in shapes) * 8 + 2 * n * call.bpe(0), "fp32",
                 "embedding", "index")


def _index_put(call: _Call) -> OpCost | None:
    # index_put_(self, indices, values, accumulate[, unsafe])
    s, vals = call.shape(0), call.shape(2)
    if s is None or vals is None:
        return None
    n = _numel(vals)
    bpe = call.bpe(0)
    idx = call.dims[1] if call.n > 1 else None
    idx_bytes = 0
    if isinstance(idx, list) and idx and all(_is_shape(i) and isinstance(i, list) for i in idx):
        idx_bytes = sum(_numel(i) for i in idx) * 8
    accumulate = bool(call.c_bool(3, False))
    nbytes = call.nbytes(2) + idx_bytes + n * bpe * (2 if accumulate else 1)
    name = call.name.split("::", 1)[-1]
    if not name.endswith("_"):
        nbytes += call.nbytes(0) + call.written(0)  # out-of-place: copy of self
    return _cost(n if accumulate else 0, nbytes, "fp32", "copy", name)


def _pad(call: _Call) -> OpCost | None:
    s = call.shape(0)
    pads = _to_int_list(call.c(1))
    if s is None or pads is None or len(pads) % 2 or len(pads) // 2 > len(s):
        return None
    if call.name == "aten::pad" and call.c(2).strip() not in ("", "constant"):
        return None
    out = list(s)
    for j in range(len(pads) // 2):
        out[len(s) - 1 - j] += pads[2 * j] + pads[2 * j + 1]
    if min(out, default=1) < 0:
        return None
    return _cost(0, call.nbytes(0) + _numel(out) * call.bpe(0), "fp32", "copy", "constant_pad_nd")


def _repeat(call: _Call) -> OpCost | None:
    s = call.shape(0)
    reps = _to_int_list(call.c(1))
    if s is None or reps is None or len(reps) < len(s):
        return None
    padded = (1,) * (len(reps) - len(s)) + tuple(s)
    out = _numel([r * d for r, d in zip(reps, padded)])
    return _cost(0, call.nbytes(0) + out * call.bpe(0), "fp32", "copy", "repeat")


def _same_shape_copy(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None:
        return None
    return _cost(0, call.nbytes(0) + call.written(0), "fp32", "copy", call.name.split("::")[-1])


_register(["aten::copy_", "aten::copy"], _copy_)
_register(["aten::clone", "aten::contiguous"], _clone)
_register(["aten::to", "aten::_to_copy", "aten::type_as"], _to_copy)
_register(["aten::_local_scalar_dense", "aten::item"], _local_scalar)
_register(["aten::cat", "aten::concat", "aten::concatenate", "aten::stack", "aten::_cat"], _cat)
_register(["aten::index_select"], _index_select)
_register(["aten::embedding"], _embedding)
_register(["aten::gather"], _gather)
_register(["aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_",
           "aten::scatter_reduce", "aten::scatter_reduce_"], _scatter)
_register(["aten::index", "aten::_unsafe_index"], _index)
_register(["aten::index_put_", "aten::index_put", "aten::_index_put_impl_",
           "aten::_unsafe_index_put"], _index_put)
_register(["aten::constant_pad_nd", "aten::pad"], _pad)
_register(["aten::repeat", "aten::tile"], _repeat)
_register(["aten::flip", "aten::roll", "aten::fliplr", "aten::flipud"], _same_shape_copy)
