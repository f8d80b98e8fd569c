"""Views and allocations: no data moved (``VIEW_OPS``, the allocation ops)."""
from __future__ import annotations

from ._core import OpCost, _Call, _cost, _register


VIEW_OPS: frozenset[str] = frozenset(f"aten::{n}" for n in (
    "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "reshape_as", "flatten",
    "unflatten", "transpose", "transpose_", "t", "t_", "permute", "movedim", "moveaxis",
    "swapaxes", "swapdims", "expand", "expand_as", "broadcast_to", "broadcast_tensors", "slice",
    "select", "narrow", "as_strided", "as_strided_", "unsqueeze", "unsqueeze_", "squeeze",
    "squeeze_", "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes",
    "chunk", "unsafe_chunk", "tensor_split", "unbind", "diagonal", "detach", "detach_", "alias",
    "lift_fresh", "lift", "real", "imag", "view_as_real", "view_as_complex", "numpy_T", "T",
    "mT", "mH", "H", "adjoint", "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view",
    "result_type", "is_nonzero", "size", "stride", "dim", "numel", "is_contiguous",
    "is_same_size", "_shape_as_tensor", "unfold", "split_copy", "record_stream", "set_",
    "_has_compatible_shallow_copy_type", "align_as", "refine_names", "rename", "to_dense",
    "contiguous_format", "_assert_async", "sym_size", "sym_stride", "sym_numel",
    "_nested_tensor_size", "dropout", "feature_dropout", "alpha_dropout",
)) | frozenset({"detach", "detach_", "_C::weak_ref_tensor"})

_ALLOC_OPS: frozenset[str] = frozenset(f"aten::{n}" for n in (
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "resize_", "resize_as_", "_resize_output_", "_empty_affine_quantized", "empty_quantized",
))


def _view(call: _Call) -> OpCost:
    # dropout in eval mode returns its input; in training it would be elementwise work, but
    # inference traces never see that, and aten::native_dropout carries it when they do.
    return _cost(0, 0, None, "view", "view (no data moved)")


def _alloc(call: _Call) -> OpCost:
    return _cost(0, 0, None, "alloc", "allocation (no data moved)")


_register(VIEW_OPS, _view)
_register(_ALLOC_OPS, _alloc)
