"""Op cost models: FLOPs and compulsory bytes of one PyTorch op call from its trace shapes.

The profiler (Kineto) records, for every CPU op, the shapes (``Input Dims``), the dtypes
(``Input type``) and the scalar arguments (``Concrete Inputs``) of its arguments. From these
:func:`op_cost` derives, per call:

- ``flops``: floating-point operations. Wherever ``torch.utils.flop_counter.FlopCounterMode``
  has a formula (mm, addmm, bmm, baddbmm, matmul's GEMM children, convolution, the SDPA
  kernels, ``_scaled_mm``) the count is the same number, exactly; it counts a multiply-add as
  2 and ignores bias adds and causal masking.
- ``flops_executed``: the FLOPs a kernel has to execute. The same as ``flops`` except for causal
  attention, whose masked-out score blocks flash kernels skip (the convention of
  flash-attention's benchmarks and of AMD TraceLens).
- ``bytes``: compulsory memory traffic: each input tensor read once (its storage, from the
  recorded strides when the trace has them: a broadcast or expanded input counts once, see
  :func:`storage_elements`), each output written once, with output shapes inferred from the
  op's semantics. Views and allocations move nothing.
- ``dtype``: the roofline to judge the op against (a key of the GPU spec database:
  ``fp64 fp32 tf32 fp16 bf16 fp8 int8 fp4``).

Everything here is a pure function of its arguments, imports only the standard library, and
never raises on odd input: a call it cannot model (unknown op, missing or inconsistent shapes,
unparsable JSON) gives ``None``. ``docs/costmodel.md`` lists every formula and convention.

Map of this file: one registry of small models, read top to bottom. Each part starts with a
``# <title>`` banner between two dashed lines (search for it); the first two are the machinery,
the rest one op family each, and every family ends with its ``_register([...op names...],
handler)`` lines, so the names a family covers sit next to its formulas.

==========================================  ================================================
banner                                      what it holds
==========================================  ================================================
``# dtypes``                                trace type names -> bytes per element, roof key
``# parsing``                               ``_Call`` (one call's shapes, types, scalars),
                                            broadcasting, promotion, ``_vector_roof`` /
                                            ``_matrix_roof``, ``_cost``, ``_register``
``# views, allocations``                    ``VIEW_OPS``, allocations: no data moved
``# GEMM family``                           mm, addmm, bmm, baddbmm, matmul, linear,
                                            scaled/int/cutlass mm, vLLM's GEMM
``# convolution``                           conv of every backend, conv backward
``# attention``                             SDPA variants, flash/efficient/aiter/FA3, causal
                                            masking (``flops_executed``)
``# elementwise``                           unary/binary/ternary tables, fills, factories
``# copies, conversions, data movement``    copy_, clone, to, cat, index/gather/scatter, pad
``# reductions``                            sum/mean/max..., topk, sort
``# softmax``                               softmax, log_softmax, _safe_softmax
``# norms``                                 layer/rms/group/batch norm
``# vLLM / AITER / SGLang custom ops``      fused rms+add(+quant), act-and-mul, rotary,
                                            KV-cache writes, fp8 quant
``# entry point``                           ``covered_op_names``, :func:`op_cost`
==========================================  ================================================

To add a model: write ``def _name(call: _Call) -> OpCost | None`` in its family's part (a new
family gets its own banner before ``# entry point``), read shapes and dtypes through ``call``,
return ``None`` whenever they are missing or inconsistent, build the result with ``_cost(flops,
bytes, roof_dtype, kind, model)``, register it under every op name it models with
``_register``, then add a row to ``docs/costmodel.md`` and a hand-computed case to
``tests/test_costmodel.py`` (check FLOPs against ``FlopCounterMode`` where torch has a formula).
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

__all__ = [
    "OpCost",
    "op_cost",
    "dtype_key",
    "bytes_per_element",
    "storage_elements",
    "covered_op_names",
    "VIEW_OPS",
    "NEEDS_CONCRETE_INPUTS",
]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpCost:
    """The cost of one call of an op.

    ``flops`` and ``bytes`` are per call; ``None`` where that part cannot be derived from the
    trace (for example ``bytes`` of ``aten::cat``, whose TensorList element dtypes are not
    recorded). ``dtype`` is the roof to judge the op against (see :func:`op_cost`), ``kind``
    the op family (``gemm``, ``attention``, ``conv``, ``elementwise``, ``reduction``, ``norm``,
    ``softmax``, ``embedding``, ``copy``, ``fill``, ``view``, ``alloc``) and ``model`` a short
    name of the formula used (``"addmm"``, ``"sdpa causal"``, ...). ``flops_executed`` is the
    work a kernel must do: ``flops`` scaled by the unmasked fraction for causal attention,
    equal to ``flops`` otherwise.
    """

    flops: float | None
    bytes: float | None
    dtype: str | None
    kind: str
    model: str
    flops_executed: float | None = None


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

# normalised type name -> (bytes per element, roof key, category)
# category: "bool" < "int" < "float" < "complex" for type promotion.
_DTYPES: dict[str, tuple[int, str | None, str]] = {}


def _reg_dtype(names: Iterable[str], nbytes: int, key: str | None, cat: str) -> None:
    for n in names:
        _DTYPES[n] = (nbytes, key, cat)


_reg_dtype(("double", "float64", "fp64", "f64"), 8, "fp64", "float")
_reg_dtype(("float", "float32", "fp32", "f32"), 4, "fp32", "float")
_reg_dtype(("tf32", "tensorfloat32"), 4, "tf32", "float")
_reg_dtype(("half", "float16", "fp16", "f16"), 2, "fp16", "float")
_reg_dtype(("bfloat16", "bf16"), 2, "bf16", "float")
_reg_dtype(("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
            "float8_e8m0fnu", "float8_e4m3", "fp8", "f8", "fp8_e4m3", "fp8_e5m2"), 1, "fp8", "float")
# Float4_e2m1fn_x2 packs two fp4 values in one element: the recorded shape counts bytes.
_reg_dtype(("float4_e2m1fn_x2", "fp4", "mxfp4", "nvfp4"), 1, "fp4", "float")
_reg_dtype(("signed char", "int8", "char", "qint8"), 1, "int8", "int")
_reg_dtype(("unsigned char", "uint8", "byte", "quint8", "quint4x2", "quint2x4", "bits8"), 1, "int8", "int")
_reg_dtype(("short", "short int", "int16", "bits16"), 2, None, "int")
_reg_dtype(("short unsigned int", "unsigned short", "uint16"), 2, None, "int")
_reg_dtype(("int", "int32", "qint32"), 4, None, "int")
_reg_dtype(("unsigned int", "uint32"), 4, None, "int")
_reg_dtype(("long", "long int", "int64", "long long", "long long int", "int64_t"), 8, None, "int")
_reg_dtype(("long unsigned int", "unsigned long", "uint64"), 8, None, "int")
_reg_dtype(("bool",), 1, None, "bool")
_reg_dtype(("complex<half>", "complex32", "chalf"), 4, "fp16", "complex")
_reg_dtype(("complex<float>", "complex64", "cfloat"), 8, "fp32", "complex")
_reg_dtype(("complex<double>", "complex128", "cdouble"), 16, "fp64", "complex")

# c10::ScalarType codes, as Concrete Inputs record a dtype argument ("6" is float).
_SCALAR_TYPE_CODES: dict[int, str] = {
    0: "unsigned char", 1: "signed char", 2: "short int", 3: "int", 4: "long int",
    5: "c10::Half", 6: "float", 7: "double", 8: "c10::complex<c10::Half>",
    9: "c10::complex<float>", 10: "c10::complex<double>", 11: "bool", 12: "c10::qint8",
    13: "c10::quint8", 14: "c10::qint32", 15: "c10::BFloat16", 16: "c10::quint4x2",
    23: "c10::Float8_e5m2", 24: "c10::Float8_e4m3fn", 25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz", 27: "short unsigned int", 28: "unsigned int",
    29: "long unsigned int", 44: "c10::Float8_e8m0fnu", 45: "c10::Float4_e2m1fn_x2",
}

_CAT_RANK = {"bool": 0, "int": 1, "float": 2, "complex": 3}


def _norm_type(torch_type: str) -> str:
    t = torch_type.strip().lower()
    for prefix in ("torch.", "c10::", "at::", "std::"):
        if t.startswith(prefix):
            t = t[len(prefix):]
    # c10::complex<c10::Half> -> complex<half>
    t = t.replace("c10::", "")
    return t


def _dtype_info(torch_type: Any) -> tuple[int, str | None, str] | None:
    if not isinstance(torch_type, str):
        return None
    return _dtype_info_str(torch_type)


@functools.lru_cache(maxsize=1024)
def _dtype_info_str(torch_type: str) -> tuple[int, str | None, str] | None:
    # A trace names a handful of types thousands of times: normalise each once.
    if not torch_type.strip():
        return None
    return _DTYPES.get(_norm_type(torch_type))


def dtype_key(torch_type: str) -> str | None:
    """The roofline key of a trace dtype: ``"c10::BFloat16"`` -> ``"bf16"``, ``"float"`` ->
    ``"fp32"``, ``"double"`` -> ``"fp64"``, ``"c10::Half"`` -> ``"fp16"``, any float8 ->
    ``"fp8"``, ``"c10::Float4_e2m1fn_x2"`` -> ``"fp4"``, 8-bit integers -> ``"int8"``.

    ``None`` for types without a roof of their own (wider integers, bool) and for non-tensor
    entries (``"Scalar"``, ``"TensorList"``, ``""``). Also accepts the short names
    (``"bf16"``, ``"float32"``, ``"torch.float16"``).
    """
    info = _dtype_info(torch_type)
    return info[1] if info else None


def bytes_per_element(torch_type: str) -> int | None:
    """Bytes per element of a trace dtype (``"c10::BFloat16"`` -> 2, ``"long int"`` -> 8);
    ``None`` for non-tensor entries such as ``"Scalar"``, ``"ScalarList"``, ``"TensorList"``
    or ``""``. ``Float4_e2m1fn_x2`` is 1: its recorded shape counts packed pairs."""
    info = _dtype_info(torch_type)
    return info[0] if info else None


def _category(torch_type: str) -> str | None:
    info = _dtype_info(torch_type)
    return info[2] if info else None


def _type_from_code(text: str) -> str | None:
    v = _to_int(text)
    if v is None:
        return None
    return _SCALAR_TYPE_CODES.get(v)


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------

def _parse_list(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return list(parsed) if isinstance(parsed, list) else None
    return None


def _is_shape(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value)


def _to_int(text: Any) -> int | None:
    if isinstance(text, bool):
        return int(text)
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        return int(text) if text.is_integer() else None
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s:
        return None
    try:
        return int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            return None
        return int(f) if math.isfinite(f) and f.is_integer() else None


def _to_bool(text: Any) -> bool | None:
    if isinstance(text, bool):
        return text
    if isinstance(text, int):
        return bool(text)
    if not isinstance(text, str):
        return None
    s = text.strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    return None


def _to_int_list(text: Any) -> list[int] | None:
    """``"[1, 1]"`` -> ``[1, 1]``; a bare ``"2"`` -> ``[2]``; ``None`` when unparsable."""
    if isinstance(text, (list, tuple)):
        vals = [_to_int(v) for v in text]
        return None if any(v is None for v in vals) else [int(v) for v in vals if v is not None]
    if isinstance(text, str):
        s = text.strip()
        if s.startswith("["):
            try:
                parsed = json.loads(s)
            except ValueError:
                return None
            return _to_int_list(parsed) if isinstance(parsed, list) else None
    v = _to_int(text)
    return None if v is None else [v]


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def storage_elements(shape: Sequence[int], strides: Sequence[int] | None = None) -> int:
    """The elements of memory a tensor view of ``shape`` with element ``strides`` occupies: what
    reading it costs, as opposed to its logical size.

    The smallest of three counts, each an upper bound of the distinct elements the view
    touches: its logical size; the product of the dims whose stride is not 0 (a stride-0,
    broadcast or ``expand``-ed, dim repeats the same elements, so it contributes 1: an
    ``expand`` of a [4096, 1] int64 index to [4096, 2048], strides [1, 0], is 4096 elements,
    32 KB, not 67 MB); and the span from the first element to the last, ``1 + sum((d - 1) * |s|)``
    (tight for overlapping windows such as ``unfold``, whose dims share elements). A gappy slice
    (strides larger than the dims below them) keeps its logical size: its gaps are not read.
    Without strides (or with strides that do not fit the shape) the logical size."""
    n = _numel(shape)
    if strides is None or len(strides) != len(shape) or n == 0 or not shape:
        return n
    product = math.prod(d for d, st in zip(shape, strides) if st != 0)
    span = 1 + sum((d - 1) * abs(st) for d, st in zip(shape, strides))
    return max(min(n, product, span), 1)


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    if not shapes:
        return None
    ndim = max(len(s) for s in shapes)
    out: list[int] = []
    for axis in range(ndim):
        size = 1
        for s in shapes:
            d = s[axis - ndim + len(s)] if axis - ndim + len(s) >= 0 else 1
            if d == 1:
                continue
            if size not in (1, d):
                return None
            size = d
        # a zero-size dim broadcasts against 1 to 0
        if any((s[axis - ndim + len(s)] if axis - ndim + len(s) >= 0 else 1) == 0 for s in shapes):
            size = 0
        out.append(size)
    return tuple(out)


class _Call:
    """One op call: its argument shapes, dtypes and concrete values, with safe accessors."""

    def __init__(self, name: str, dims: list[Any], types: list[Any], conc: list[Any],
                 strides: list[Any] | None = None) -> None:
        self.name = name
        self.dims = dims
        self.types = types
        self.conc = conc
        self.strides_ = strides or []

    @property
    def n(self) -> int:
        return len(self.dims)

    def type(self, i: int) -> str:
        if 0 <= i < len(self.types) and isinstance(self.types[i], str):
            return self.types[i]
        return ""

    def shape(self, i: int) -> Shape | None:
        """The shape of argument ``i`` when it is a tensor (0-dim tensors give ``()``)."""
        if not 0 <= i < len(self.dims):
            return None
        d = self.dims[i]
        if not _is_shape(d) or bytes_per_element(self.type(i)) is None:
            return None
        return tuple(d)

    def is_tensor(self, i: int) -> bool:
        return self.shape(i) is not None

    def nd_tensor(self, i: int) -> bool:
        """A tensor with at least one dimension (0-dim tensors are usually wrapped scalars)."""
        s = self.shape(i)
        return s is not None and len(s) > 0

    def bpe(self, i: int) -> int:
        return bytes_per_element(self.type(i)) or 0

    def stride(self, i: int) -> tuple[int, ...] | None:
        """The recorded element strides of tensor argument ``i`` (None when not recorded or
        not matching its shape)."""
        s = self.shape(i)
        if s is None or not 0 <= i < len(self.strides_):
            return None
        st = self.strides_[i]
        if not isinstance(st, (list, tuple)) or len(st) != len(s):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in st):
            return None
        return tuple(st)

    def nbytes(self, i: int) -> int:
        """Bytes of memory argument ``i`` occupies: what reading it costs (its storage, from the
        recorded strides: a broadcast or expanded input counts once, see
        :func:`storage_elements`)."""
        s = self.shape(i)
        return 0 if s is None else storage_elements(s, self.stride(i)) * self.bpe(i)

    def written(self, i: int) -> int:
        """Bytes written when argument ``i``'s shape is produced: its logical size."""
        s = self.shape(i)
        return 0 if s is None else _numel(s) * self.bpe(i)

    def c(self, i: int) -> str:
        if 0 <= i < len(self.conc):
            v = self.conc[i]
            if v is None:
                return ""
            return v if isinstance(v, str) else str(v)
        return ""

    def c_int(self, i: int) -> int | None:
        return _to_int(self.c(i))

    def c_bool(self, i: int, default: bool | None = None) -> bool | None:
        b = _to_bool(self.c(i))
        return default if b is None else b

    def tensor_list(self, i: int) -> list[Shape] | None:
        if not 0 <= i < len(self.dims):
            return None
        d = self.dims[i]
        if not isinstance(d, (list, tuple)) or not d or not all(_is_shape(s) for s in d):
            return None
        if not all(isinstance(s, (list, tuple)) for s in d):
            return None
        return [tuple(s) for s in d]


def _promote(types: Sequence[str]) -> str | None:
    """PyTorch-style result type of tensor operands (highest category, then widest)."""
    best: str | None = None
    best_rank = (-1, -1)
    for t in types:
        info = _dtype_info(t)
        if info is None:
            continue
        rank = (_CAT_RANK[info[2]], info[0])
        if best is not None and rank == best_rank and _norm_type(t) != _norm_type(best):
            # same width, different floats (half vs bfloat16) promote to float
            if info[2] == "float":
                best, best_rank = "float", (2, 4)
            continue
        if rank > best_rank:
            best, best_rank = t, rank
    return best


def _result_type(call: _Call, idxs: Sequence[int]) -> str | None:
    """Result dtype of the tensor operands ``idxs``: dimensioned tensors decide; 0-dim tensors
    (wrapped Python scalars such as the ``double`` in ``x * 0.5``) only raise the category."""
    nd = [call.type(i) for i in idxs if call.nd_tensor(i)]
    zd = [call.type(i) for i in idxs if call.is_tensor(i) and not call.nd_tensor(i)]
    if not nd:
        return _promote(zd)
    res = _promote(nd)
    if res is None:
        return None
    res_cat = _category(res) or "float"
    for t in zd:
        cat = _category(t)
        if cat is not None and _CAT_RANK[cat] > _CAT_RANK[res_cat]:
            res = "float" if cat == "float" else t
            res_cat = cat
    return res


def _vector_roof(call: _Call, idxs: Iterable[int] | None = None) -> str:
    """Vector (non-matrix) ops run on the SIMD units; PyTorch computes fp16/bf16 in fp32
    ("opmath"), so they are judged against the fp32 vector roof, fp64 against fp64."""
    rng = range(call.n) if idxs is None else idxs
    for i in rng:
        if call.nd_tensor(i) and dtype_key(call.type(i)) == "fp64":
            return "fp64"
    return "fp32"


def _matrix_roof(types: Sequence[str], fp32_as: str = "fp32") -> str | None:
    """The roof of the widest operand dtype of a matrix op."""
    best: tuple[int, str] | None = None
    for t in types:
        info = _dtype_info(t)
        if info is None or info[1] is None:
            continue
        if best is None or info[0] > best[0]:
            best = (info[0], info[1])
    if best is None:
        return None
    return fp32_as if best[1] == "fp32" else best[1]


def _cost(flops: float | None, nbytes: float | None, dtype: str | None, kind: str, model: str,
          executed: float | None = None) -> OpCost:
    f = None if flops is None else float(flops)
    b = None if nbytes is None else float(nbytes)
    e = f if executed is None else float(executed)
    return OpCost(flops=f, bytes=b, dtype=dtype, kind=kind, model=model, flops_executed=e)


Handler = Callable[[_Call], "OpCost | None"]
_HANDLERS: dict[str, Handler] = {}


def _register(names: Iterable[str], handler: Handler) -> None:
    for n in names:
        _HANDLERS[n] = handler


# --------------------------------------------------------------------------------------------
# views, allocations
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# GEMM family
# --------------------------------------------------------------------------------------------

def _gemm(flops: float, nbytes: float, types: Sequence[str], model: str) -> OpCost:
    return _cost(flops, nbytes, _matrix_roof(types), "gemm", model)


def _mm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    out = m * n * call.bpe(0)
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + out,
                 [call.type(0), call.type(1)], "mm")


def _addmm(call: _Call) -> OpCost | None:
    c, a, b = call.shape(0), call.shape(1), call.shape(2)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    if c is not None and _broadcast([c, (m, n)]) != (m, n):
        return None
    name = call.name.split("::")[-1].rstrip("_")
    out_t = call.type(1)
    out = m * n * (bytes_per_element(out_t) or 0)
    # FlopCounterMode counts addmm as its mm (the bias add is not counted); the bias is read.
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], name)


def _bmm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    bt, m, k, n = a[0], a[1], a[2], b[2]
    out = bt * m * n * call.bpe(0)
    return _gemm(2 * bt * m * n * k, call.nbytes(0) + call.nbytes(1) + out,
                 [call.type(0), call.type(1)], "bmm")


def _baddbmm(call: _Call) -> OpCost | None:
    c, a, b = call.shape(0), call.shape(1), call.shape(2)
    if a is None or b is None or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    bt, m, k, n = a[0], a[1], a[2], b[2]
    if c is not None and _broadcast([c, (bt, m, n)]) != (bt, m, n):
        return None
    out = bt * m * n * call.bpe(1)
    return _gemm(2 * bt * m * n * k, call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], "baddbmm")


def _matmul_shapes(a: Shape, b: Shape) -> tuple[float, Shape] | None:
    """FLOPs and output shape of torch.matmul semantics (1-D, 2-D, batched, broadcast)."""
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return (2 * a[0], ()) if a[0] == b[0] else None
    if len(a) == 2 and len(b) == 1:
        return (2 * a[0] * a[1], (a[0],)) if a[1] == b[0] else None
    if len(a) == 1:
        k, n = b[-2], b[-1]
        if a[0] != k:
            return None
        return 2 * _numel(b[:-2]) * k * n, tuple(b[:-2]) + (n,)
    if len(b) == 1:
        if a[-1] != b[0]:
            return None
        return 2 * _numel(a[:-1]) * a[-1], tuple(a[:-1])
    m, k = a[-2], a[-1]
    k2, n = b[-2], b[-1]
    if k != k2:
        return None
    batch = _broadcast([tuple(a[:-2]), tuple(b[:-2])])
    if batch is None:
        return None
    return 2 * _numel(batch) * m * n * k, batch + (m, n)


def _matmul(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None:
        return None
    res = _matmul_shapes(a, b)
    if res is None:
        return None
    flops, out = res
    out_t = _result_type(call, [0, 1]) or call.type(0)
    nbytes = call.nbytes(0) + call.nbytes(1) + _numel(out) * (bytes_per_element(out_t) or 0)
    model = {"aten::dot": "dot", "aten::vdot": "dot", "aten::mv": "mv"}.get(call.name, "matmul")
    return _gemm(flops, nbytes, [call.type(0), call.type(1)], model)


def _addmv(call: _Call) -> OpCost | None:
    c, a, x = call.shape(0), call.shape(1), call.shape(2)
    if a is None or x is None or len(a) != 2 or len(x) != 1 or a[1] != x[0]:
        return None
    if c is not None and _broadcast([c, (a[0],)]) != (a[0],):
        return None
    out = a[0] * call.bpe(1)
    return _gemm(2 * a[0] * a[1], call.nbytes(0) + call.nbytes(1) + call.nbytes(2) + out,
                 [call.type(1), call.type(2)], "addmv")


def _linear_like(call: _Call, x_i: int, w_i: int, b_i: int | None, model: str,
                 out_type: str | None = None) -> OpCost | None:
    """y = x @ w.T (+ b) with w of shape [N, K] and x of shape [..., K]."""
    x, w = call.shape(x_i), call.shape(w_i)
    if x is None or w is None or len(x) < 1 or len(w) != 2 or x[-1] != w[1]:
        return None
    n, k = w
    m = _numel(x[:-1])
    out_t = out_type or call.type(x_i)
    out = m * n * (bytes_per_element(out_t) or 0)
    bias = call.nbytes(b_i) if b_i is not None else 0
    if b_i is not None and call.is_tensor(b_i):
        bshape = call.shape(b_i) or ()
        if _broadcast([bshape, tuple(x[:-1]) + (n,)]) is None:
            return None
    return _gemm(2 * m * n * k, call.nbytes(x_i) + call.nbytes(w_i) + bias + out,
                 [call.type(x_i), call.type(w_i)], model)


def _linear(call: _Call) -> OpCost | None:
    has_bias = call.nd_tensor(2)
    return _linear_like(call, 0, 1, 2 if has_bias else None,
                        "linear+bias" if has_bias else "linear")


def _scaled_mm(call: _Call) -> OpCost | None:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    out_t = _type_from_code(call.c(6)) or call.type(0)
    reads = sum(call.nbytes(i) for i in range(min(call.n, 6)))
    out = m * n * (bytes_per_element(out_t) or 0)
    return _gemm(2 * m * n * k, reads + out, [call.type(0), call.type(1)], "_scaled_mm")


def _int_mm(call: _Call) -> OpCost | None:
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    return _gemm(2 * m * n * k, call.nbytes(0) + call.nbytes(1) + m * n * 4,
                 [call.type(0), call.type(1)], "_int_mm")


def _cutlass_scaled_mm(call: _Call) -> OpCost | None:
    # vLLM _C::cutlass_scaled_mm(out[M,N], a[M,K], b[K,N], a_scales, b_scales, bias?)
    out, a, b = call.shape(0), call.shape(1), call.shape(2)
    if out is None or a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    reads = sum(call.nbytes(i) for i in range(1, call.n))
    return _gemm(2 * m * n * k, reads + m * n * call.bpe(0), [call.type(1), call.type(2)],
                 "cutlass_scaled_mm")


_register(["aten::mm"], _mm)
_register(["aten::addmm", "aten::addmm_", "aten::_addmm_activation"], _addmm)
_register(["aten::bmm"], _bmm)
_register(["aten::baddbmm", "aten::baddbmm_"], _baddbmm)
_register(["aten::matmul", "aten::dot", "aten::vdot", "aten::mv"], _matmul)
_register(["aten::addmv", "aten::addmv_"], _addmv)
_register(["aten::linear"], _linear)
_register(["aten::_scaled_mm"], _scaled_mm)
_register(["aten::_int_mm"], _int_mm)
_register(["_C::cutlass_scaled_mm"], _cutlass_scaled_mm)
_register(["vllm::rocm_unquantized_gemm"],
          lambda c: _linear_like(c, 0, 1, 2 if c.nd_tensor(2) else None, "rocm_unquantized_gemm"))


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------

# name -> (bias index or None, stride, padding, dilation, transposed (index | bool),
#          output_padding index or None, groups index or None)
_CONV_LAYOUTS: dict[str, tuple[int | None, int, int, int | None, int | bool, int | None, int | None]] = {
    "aten::convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::convolution_overrideable": (2, 3, 4, 5, 6, 7, 8),
    "aten::conv1d": (2, 3, 4, 5, False, None, 6),
    "aten::conv2d": (2, 3, 4, 5, False, None, 6),
    "aten::conv3d": (2, 3, 4, 5, False, None, 6),
    "aten::_convolution_mode": (2, 3, 4, 5, False, None, 6),
    "aten::conv_transpose1d": (2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose2d": (2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose3d": (2, 3, 4, 7, True, 5, 6),
    "aten::cudnn_convolution": (None, 3, 2, 4, False, None, 5),
    "aten::cudnn_convolution_transpose": (None, 4, 2, 5, True, 3, 6),
    "aten::miopen_convolution": (2, 4, 3, 5, False, None, 6),
    "aten::miopen_depthwise_convolution": (2, 4, 3, 5, False, None, 6),
    "aten::miopen_convolution_transpose": (2, 5, 3, 6, True, 4, 7),
    "aten::mkldnn_convolution": (2, 4, 3, 5, False, None, 6),
    # fused conv + (add +) ReLU of frozen TorchScript graphs: (self, weight, [z, alpha,] bias, ...)
    "aten::cudnn_convolution_relu": (2, 3, 4, 5, False, None, 6),
    "aten::cudnn_convolution_add_relu": (4, 5, 6, 7, False, None, 8),
    "aten::miopen_convolution_relu": (2, 3, 4, 5, False, None, 6),
    "aten::miopen_convolution_add_relu": (4, 5, 6, 7, False, None, 8),
    # CUDA's own depthwise kernels, which _convolution runs for depthwise shapes it does not
    # give cuDNN (conv1d included, viewed as 2-D): (self, weight, kernel_size, bias, stride,
    # padding, dilation); no groups argument, see _GROUPS_FROM_SHAPES
    "aten::_conv_depthwise2d": (3, 4, 5, 6, False, None, None),
    "aten::conv_depthwise3d": (3, 4, 5, 6, False, None, None),
    "aten::_nnpack_spatial_convolution": (2, 4, 3, None, False, None, None),
    # CPU fallbacks: (self, weight, kernel_size, bias, stride, padding[, dilation | output_padding])
    "aten::_slow_conv2d_forward": (3, 4, 5, None, False, None, None),
    "aten::thnn_conv2d": (3, 4, 5, None, False, None, None),
    "aten::slow_conv_dilated2d": (3, 4, 5, 6, False, None, None),
    "aten::slow_conv_dilated3d": (3, 4, 5, 6, False, None, None),
    "aten::slow_conv3d": (3, 4, 5, None, False, None, None),
    "aten::slow_conv3d_forward": (3, 4, 5, None, False, None, None),
    "aten::slow_conv_transpose2d": (3, 4, 5, 7, True, 6, None),
    "aten::slow_conv_transpose3d": (3, 4, 5, 7, True, 6, None),
}
#: Depthwise backends without a groups argument: groups is the input's channel count.
_GROUPS_FROM_SHAPES = frozenset({"aten::_conv_depthwise2d", "aten::conv_depthwise3d"})
#: Tensor arguments read besides input, weight and bias (the residual ``z`` of add_relu).
_CONV_EXTRA_READS = {"aten::cudnn_convolution_add_relu": 2, "aten::miopen_convolution_add_relu": 2}


def _conv(call: _Call) -> OpCost | None:
    layout = _CONV_LAYOUTS.get(call.name)
    x, w = call.shape(0), call.shape(1)
    if layout is None or x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    b_i, s_i, p_i, d_i, t_i, op_i, g_i = layout
    nsp = len(x) - 2

    def spatial(i: int | None, default: int) -> list[int] | None:
        # an unrecorded value (no Concrete Inputs, or conv2d's string padding "same") is
        # unknown, not the default: the child aten::convolution records the resolved one
        if i is None:
            return [default] * nsp
        vals = _to_int_list(call.c(i))
        if vals is None:
            return None
        if len(vals) == 1:
            vals = vals * nsp
        return vals if len(vals) == nsp else None

    stride, padding, dilation = spatial(s_i, 1), spatial(p_i, 0), spatial(d_i, 1)
    transposed = t_i if isinstance(t_i, bool) else bool(call.c_bool(t_i, False))
    out_pad = spatial(op_i, 0) if transposed else [0] * nsp
    if call.name in _GROUPS_FROM_SHAPES:
        groups: int | None = x[1] if w[1] == 1 else None
    else:
        groups = call.c_int(g_i) if g_i is not None and call.c(g_i).strip() else 1
    if stride is None or padding is None or dilation is None or out_pad is None or not groups:
        return None
    if min(stride) <= 0 or groups <= 0:
        return None
    ksz = w[2:]
    if transposed:
        if x[1] != w[0]:
            return None
        c_out = w[1] * groups
        sp = [(x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ksz[i] - 1)
              + out_pad[i] + 1 for i in range(nsp)]
    else:
        if x[1] != w[1] * groups:
            return None
        c_out = w[0]
        sp = [(x[2 + i] + 2 * padding[i] - dilation[i] * (ksz[i] - 1) - 1) // stride[i] + 1
              for i in range(nsp)]
    if min(sp) <= 0:
        return None
    out = (x[0], c_out, *sp)
    # torch.utils.flop_counter.conv_flop_count: bias ignored; transposed counts input positions
    conv_shape = x[2:] if transposed else tuple(sp)
    flops = 2 * _numel(conv_shape) * _numel(ksz) * x[0] * w[0] * w[1]
    bias = call.nbytes(b_i) if b_i is not None else 0
    extra = call.nbytes(_CONV_EXTRA_READS[call.name]) if call.name in _CONV_EXTRA_READS else 0
    nbytes = call.nbytes(0) + call.nbytes(1) + bias + extra + _numel(out) * call.bpe(0)
    # cuDNN runs fp32 convolutions in TF32 by default (torch.backends.cudnn.allow_tf32=True)
    dtype = _matrix_roof([call.type(0), call.type(1)], fp32_as="tf32")
    model = ("conv_transpose" if transposed else "conv") + f"{nsp}d"
    if call.name.endswith("_relu"):
        # the add and the ReLU are not counted, as FlopCounterMode leaves out addmm's bias add
        model += " add_relu" if call.name in _CONV_EXTRA_READS else " relu"
    return _cost(flops, nbytes, dtype, "conv", model)


_register(_CONV_LAYOUTS, _conv)


def _conv_flop_count(x: Shape, w: Shape, out: Shape, transposed: bool) -> int:
    """``torch.utils.flop_counter.conv_flop_count``: 2 * output (or, transposed, input)
    positions * kernel positions * batch * weight's two channel dimensions."""
    conv_shape = x[2:] if transposed else out[2:]
    return 2 * _numel(conv_shape) * _numel(w[2:]) * x[0] * w[0] * w[1]


def _t(shape: Shape) -> Shape:
    return (shape[1], shape[0], *shape[2:])


def _conv_backward(call: _Call) -> OpCost | None:
    """``aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)``: the FLOPs of the gradients
    ``output_mask`` asks for, counted as ``FlopCounterMode``'s ``conv_backward_flop`` does
    (grad_input as the transposed convolution, grad_weight as a convolution of the input with
    grad_output; for grouped convolutions that formula counts every input channel). Bytes:
    grad_output, input and weight read once; the requested gradients written once."""
    go, x, w = call.shape(0), call.shape(1), call.shape(2)
    if go is None or x is None or w is None or not (len(go) == len(x) == len(w) >= 3):
        return None
    transposed = call.c_bool(7)
    # recorded as Python's repr: "[True, True, False]"
    mask = [_to_bool(m) for m in call.c(10).strip().strip("[]").split(",")]
    if transposed is None or len(mask) != 3:
        return None
    if any(m is None for m in mask):
        return None
    flops = 0
    if mask[0]:
        flops += _conv_flop_count(go, w, x, not transposed)
    if mask[1]:
        flops += (_conv_flop_count(_t(go), _t(x), _t(w), False) if transposed
                  else _conv_flop_count(_t(x), _t(go), _t(w), False))
    bpe = call.bpe(0)
    nbytes = (call.nbytes(0) + call.nbytes(1) + call.nbytes(2)
              + (call.nbytes(1) if mask[0] else 0) + (call.nbytes(2) if mask[1] else 0)
              + (go[1] * bpe if mask[2] else 0))  # grad_bias: one value per output channel
    dtype = _matrix_roof([call.type(0), call.type(2)], fp32_as="tf32")
    model = ("conv_transpose" if transposed else "conv") + f"{len(x) - 2}d backward"
    return _cost(float(flops), float(nbytes), dtype, "conv", model)


_register(["aten::convolution_backward", "aten::convolution_backward_overrideable"], _conv_backward)

#: Ops whose cost needs the trace's ``Concrete Inputs`` (stride, padding, dilation, groups...):
#: without them the model does not guess, and the analysis says why once.
NEEDS_CONCRETE_INPUTS: frozenset[str] = frozenset(
    (*_CONV_LAYOUTS, "aten::convolution_backward", "aten::convolution_backward_overrideable"))


# --------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------

def _unmasked(lq: int, lk: int, align: str) -> int:
    """Score entries a causal mask keeps: ``top_left`` (torch SDPA ``is_causal``: query i sees
    keys 0..i) or ``bottom_right`` (flash-attn: query i sees keys 0..i+lk-lq)."""
    if lq <= 0 or lk <= 0:
        return 0
    if align == "bottom_right":
        if lk >= lq:
            return lq * (lk - lq) + lq * (lq + 1) // 2
        return lk * (lk + 1) // 2
    if lq <= lk:
        return lq * (lq + 1) // 2
    return lk * (lk + 1) // 2 + (lq - lk) * lk


def _attention_core(call: _Call, q: Shape, k: Shape, v: Shape, q_i: int, k_i: int, v_i: int,
                    mask_i: int | None, causal: bool, align: str, model: str,
                    nbytes_qkvo: float | None = None) -> OpCost | None:
    """Dense attention on [batch..., heads, L, E] shapes (GQA: fewer key/value heads)."""
    if len(q) < 3 or len(k) != len(q) or len(v) != len(q):
        return None
    lq, e = q[-2], q[-1]
    lk, ev = k[-2], v[-1]
    if k[-1] != e or v[-2] != lk:
        return None
    hq, hk, hv = q[-3], k[-3], v[-3]
    if hk != hv or hk == 0 or hq % hk != 0:
        return None
    if _broadcast([tuple(q[:-3]), tuple(k[:-3])]) != tuple(q[:-3]) or tuple(k[:-3]) != tuple(v[:-3]):
        return None
    bh = _numel(q[:-2])
    # torch.utils.flop_counter.sdpa_flop_count: Q@K^T plus P@V, causal masking not counted
    flops = 2 * bh * lq * lk * e + 2 * bh * lq * lk * ev
    executed = flops
    if causal and lq and lk:
        executed = flops * _unmasked(lq, lk, align) / (lq * lk)
    if nbytes_qkvo is None:
        out = _numel(q[:-1]) * ev * call.bpe(q_i)
        mask = call.nbytes(mask_i) if mask_i is not None else 0
        nbytes_qkvo = call.nbytes(q_i) + call.nbytes(k_i) + call.nbytes(v_i) + mask + out
    dtype = _matrix_roof([call.type(q_i), call.type(k_i), call.type(v_i)])
    full_model = model + (" causal" if causal else "") + (" gqa" if hq != hk else "")
    return _cost(flops, nbytes_qkvo, dtype, "attention", full_model, executed)


def _bhle(call: _Call, qkv: tuple[int, int, int], transpose: bool) -> tuple[Shape, Shape, Shape] | None:
    shapes = [call.shape(i) for i in qkv]
    if any(s is None or len(s) < 3 for s in shapes):
        return None
    out = []
    for s in shapes:
        assert s is not None
        out.append(tuple(s[:-3]) + (s[-2], s[-3], s[-1]) if transpose else tuple(s))
    return out[0], out[1], out[2]


def _sdpa_factory(causal_i: int | None, mask_i: int | None, model: str) -> Handler:
    """aten SDPA ops on [B, H, L, E] tensors: q, k, v are arguments 0, 1, 2."""

    def handler(call: _Call) -> OpCost | None:
        shapes = _bhle(call, (0, 1, 2), transpose=False)
        if shapes is None:
            return None
        causal = bool(call.c_bool(causal_i, False)) if causal_i is not None else False
        m_i = mask_i if mask_i is not None and call.is_tensor(mask_i) else None
        return _attention_core(call, *shapes, 0, 1, 2, m_i, causal, "top_left", model)

    return handler


_register(["aten::scaled_dot_product_attention"], _sdpa_factory(5, 3, "sdpa"))
_register(["aten::_scaled_dot_product_attention_math"], _sdpa_factory(5, 3, "sdpa math"))
_register(["aten::_scaled_dot_product_flash_attention"], _sdpa_factory(4, None, "sdpa flash"))
_register(["aten::_scaled_dot_product_flash_attention_for_cpu"],
          _sdpa_factory(4, 5, "sdpa flash cpu"))
_register(["aten::_scaled_dot_product_efficient_attention"],
          _sdpa_factory(6, 3, "sdpa efficient"))
_register(["aten::_scaled_dot_product_cudnn_attention"], _sdpa_factory(6, 3, "sdpa cudnn"))
_register(["aten::_scaled_dot_product_fused_attention_overrideable"],
          _sdpa_factory(5, 3, "sdpa overrideable"))


def _varlen_pairs(total_q: int, total_k: int, nseq: int, max_q: int | None,
                  max_k: int | None) -> list[tuple[float, float, float]]:
    """(count, Lq, Lk) groups for packed sequences whose individual lengths are not recorded:
    one sequence at the recorded maximum, the rest sharing the remainder evenly (TraceLens's
    estimate); all equal when no maximum is recorded."""
    if nseq <= 1:
        return [(1, total_q, total_k)]
    if max_q is None or max_k is None or max_q > total_q or max_k > total_k:
        return [(nseq, total_q / nseq, total_k / nseq)]
    rest = nseq - 1
    return [(1, max_q, max_k), (rest, (total_q - max_q) / rest, (total_k - max_k) / rest)]


def _flash_blhe_factory(qkv: tuple[int, int, int], causal_i: int | None, align: str, model: str,
                        cu_i: tuple[int, int] | None = None, max_i: tuple[int, int] | None = None,
                        mask_type_i: int | None = None, bias_i: int | None = None) -> Handler:
    """Flash/efficient-style kernels on [B, L, H, E] tensors (packed [T, H, E] when varlen)."""

    def handler(call: _Call) -> OpCost | None:
        q_i, k_i, v_i = qkv
        causal = bool(call.c_bool(causal_i, False)) if causal_i is not None else False
        al = align
        if mask_type_i is not None:
            mt = call.c_int(mask_type_i) or 0
            causal = mt in (1, 2)
            al = "bottom_right" if mt == 2 else "top_left"
        cu_q = call.shape(cu_i[0]) if cu_i else None
        cu_k = call.shape(cu_i[1]) if cu_i else None
        q, k, v = call.shape(q_i), call.shape(k_i), call.shape(v_i)
        if q is None or k is None or v is None:
            return None
        if cu_q is not None and cu_k is not None and len(cu_q) == 1 and cu_q == cu_k:
            # varlen: packed [T, H, E] (efficient attention: [1, T, H, E])
            q3, k3, v3 = (tuple(s[-3:]) for s in (q, k, v))
            if any(len(s) < 3 for s in (q, k, v)):
                return None
            if k3[-1] != q3[-1] or v3[0] != k3[0] or k3[1] != v3[1] or k3[1] == 0 \
                    or q3[1] % k3[1] != 0:
                return None
            nseq = max(cu_q[0] - 1, 1)
            mq = call.c_int(max_i[0]) if max_i else None
            mk = call.c_int(max_i[1]) if max_i else None
            hq, e, ev = q3[1], q3[2], v3[2]
            flops = executed = 0.0
            for count, lq, lk in _varlen_pairs(q3[0], k3[0], nseq, mq, mk):
                f = count * (2 * hq * lq * lk * e + 2 * hq * lq * lk * ev)
                flops += f
                if causal and lq > 0 and lk > 0:
                    executed += f * _unmasked(round(lq), round(lk), al) / (round(lq) * round(lk) or 1)
                else:
                    executed += f
            out = _numel(q[:-1]) * ev * call.bpe(q_i)
            nbytes = (call.nbytes(q_i) + call.nbytes(k_i) + call.nbytes(v_i) + out
                      + call.nbytes(cu_i[0]) + call.nbytes(cu_i[1]))
            dtype = _matrix_roof([call.type(q_i), call.type(k_i), call.type(v_i)])
            return _cost(flops, nbytes, dtype, "attention",
                         model + " varlen" + (" causal" if causal else "")
                         + (" gqa" if hq != k3[1] else "") + " (estimated lengths)", executed)
        shapes = _bhle(call, qkv, transpose=True)
        if shapes is None or len(q) != 4:
            return None
        b_i = bias_i if bias_i is not None and call.is_tensor(bias_i) else None
        return _attention_core(call, *shapes, q_i, k_i, v_i, b_i, causal, al, model)

    return handler


# aten::_flash_attention_forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
#   is_causal, return_debug_mask, scale, window_size_left, window_size_right, seqused_k, ...)
_register(["aten::_flash_attention_forward"],
          _flash_blhe_factory((0, 1, 2), 8, "bottom_right", "flash_attention_forward",
                              cu_i=(3, 4), max_i=(5, 6)))
# aten::_efficient_attention_forward(q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#   max_seqlen_k, dropout_p, custom_mask_type, compute_log_sumexp, scale, seqlen_k, ...)
_register(["aten::_efficient_attention_forward"],
          _flash_blhe_factory((0, 1, 2), None, "top_left", "efficient_attention_forward",
                              cu_i=(4, 5), max_i=(6, 7), mask_type_i=9, bias_i=3))
# aten::_cudnn_attention_forward(q, k, v, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
#   compute_log_sumexp, dropout_p, is_causal, return_debug_mask, *, scale): cuDNN SDPA's own op
# (under _scaled_dot_product_cudnn_attention, and alone in torch 2.11's traces). Batched inputs
# are head-major [B, H, L, E] like SDPA's; packed ones (cum_seq_q given) are [T, H, E] like the
# flash varlen contract. Causal masking is SDPA's (top-left).
_CUDNN_BATCHED = _sdpa_factory(10, 3, "cudnn_attention_forward")
_CUDNN_PACKED = _flash_blhe_factory((0, 1, 2), 10, "top_left", "cudnn_attention_forward", cu_i=(4, 5), max_i=(6, 7))


def _cudnn_attention_forward(call: _Call) -> OpCost | None:
    q, cu_q = call.shape(0), call.shape(4)
    if q is not None and len(q) == 3 and cu_q is not None and len(cu_q) == 1:
        return _CUDNN_PACKED(call)
    return _CUDNN_BATCHED(call)


_register(["aten::_cudnn_attention_forward"], _cudnn_attention_forward)
# flash-attn (Dao-AILab) and AITER python ops: (q, k, v, dropout_p, softmax_scale, causal, ...)
_register(["flash_attn::_flash_attn_forward", "aiter::_flash_attn_forward", "aiter::mha_fwd",
           "aiter::fmha_v3_fwd"],
          _flash_blhe_factory((0, 1, 2), 5, "bottom_right", "flash_attn"))
# flash_attn::_flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#   max_seqlen_k, dropout_p, softmax_scale, causal, ...)
_register(["flash_attn::_flash_attn_varlen_forward"],
          _flash_blhe_factory((0, 1, 2), 9, "bottom_right", "flash_attn",
                              cu_i=(3, 4), max_i=(5, 6)))
# aiter::wrapper_fmha_v3_fwd(out?, q, k, v, dropout_p, softmax_scale, is_causal, ...) (TraceLens)
_register(["aiter::wrapper_fmha_v3_fwd"],
          _flash_blhe_factory((1, 2, 3), 6, "bottom_right", "fmha_v3"))
# flash_attn_3::fwd: q, k, v first, is_causal at 24 (TraceLens flash_attn_v3_forward)
_register(["flash_attn_3::fwd"], _flash_blhe_factory((0, 1, 2), 24, "bottom_right", "flash_attn_3"))


# --------------------------------------------------------------------------------------------
# elementwise
# --------------------------------------------------------------------------------------------

_UNARY = {
    "abs", "absolute", "neg", "negative", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "logit", "silu", "gelu", "relu",
    "relu6", "leaky_relu", "elu", "selu", "celu", "mish", "softplus", "softsign", "hardswish",
    "hardsigmoid", "hardtanh", "hardshrink", "softshrink", "tanhshrink", "threshold", "erf",
    "erfc", "erfinv", "floor", "ceil", "round", "trunc", "fix", "frac", "sign", "sgn", "square",
    "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "signbit", "clamp_min", "clamp_max", "nan_to_num", "deg2rad", "rad2deg", "lgamma",
    "digamma", "i0", "sinc", "tril", "triu", "positive", "conj_physical", "prelu",
    "_prelu_kernel", "rrelu", "log_sigmoid", "gelu_tanh",
}
_BINARY = {
    "add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide",
    "floor_divide", "remainder", "fmod", "pow", "float_power", "maximum", "minimum", "fmax",
    "fmin", "atan2", "arctan2", "hypot", "copysign", "xlogy", "eq", "ne", "lt", "le", "gt",
    "ge", "greater", "greater_equal", "less", "less_equal", "not_equal", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "__and__", "__or__", "__xor__", "__lshift__",
    "__rshift__", "threshold_backward", "sigmoid_backward", "tanh_backward", "silu_backward",
    "gelu_backward", "heaviside", "nextafter", "ldexp", "logaddexp", "logaddexp2",
    "masked_fill", "xlog1py", "special_xlog1py", "isclose", "_add_relu",
}
# name -> FLOPs per output element (three tensor operands: condition/self/other, self/t1/t2, ...)
_TERNARY = {"where": 1, "lerp": 2, "addcmul": 2, "addcdiv": 2, "clamp": 1, "clip": 1}
_PREDICATES = {
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal",
    "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf",
    "isfinite", "isposinf", "isneginf", "signbit", "isclose",
}
_INT_TO_FLOAT = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "logit", "erf", "erfc", "erfinv", "div", "divide", "true_divide",
    "atan2", "arctan2", "hypot", "float_power", "lgamma", "digamma", "sinc",
}
# ops whose first argument is written but not read
_WRITE_ONLY_SELF = {"fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_",
                    "exponential_", "geometric_", "cauchy_", "log_normal_"}


def _elementwise(call: _Call, base: str, n_in: int, flops_per: float, inplace: bool) -> OpCost | None:
    ins = [i for i in range(min(n_in, call.n)) if call.is_tensor(i)]
    if not ins:
        return None
    outs = [i for i in range(n_in, call.n) if call.is_tensor(i)]
    if base == "masked_fill":
        out_shape = call.shape(0)
        out_t: str | None = call.type(0)
    elif inplace:
        out_shape = call.shape(0)
        out_t = call.type(0)
        if out_shape is None:
            return None
        if _broadcast([call.shape(i) or () for i in ins] + [out_shape]) != out_shape:
            return None
    else:
        out_shape = _broadcast([call.shape(i) or () for i in ins])
        if base == "where":
            out_t = _result_type(call, [i for i in ins if i != 0]) or call.type(1)
        else:
            out_t = _result_type(call, ins)
        if outs:
            out_t = call.type(outs[0])
        elif base in _PREDICATES:
            out_t = "bool"
        elif out_t is not None and _category(out_t) in ("int", "bool") and base in _INT_TO_FLOAT:
            out_t = "float"
    if out_shape is None or not out_t or bytes_per_element(out_t) is None:
        return None
    n_out = _numel(out_shape)
    reads = sum(call.nbytes(i) for i in ins)
    nbytes = reads + n_out * (bytes_per_element(out_t) or 0)
    model = base + ("_" if inplace else "")
    return _cost(flops_per * n_out, nbytes, _vector_roof(call, ins), "elementwise", model)


def _elementwise_handler(call: _Call) -> OpCost | None:
    name = call.name.split("::", 1)[-1]
    inplace = name.endswith("_") and not name.endswith("__")
    base = name[:-1] if inplace else name
    if base in _TERNARY:
        return _elementwise(call, base, 3, _TERNARY[base], inplace)
    if base in _BINARY:
        return _elementwise(call, base, 2, 1, inplace)
    if base in _UNARY:
        return _elementwise(call, base, 1, 1, inplace)
    return None


for _n in _UNARY | _BINARY | set(_TERNARY):
    _register([f"aten::{_n}"] + ([] if _n.startswith("__") else [f"aten::{_n}_"]),
              _elementwise_handler)


def _fill(call: _Call) -> OpCost | None:
    s = call.shape(0)
    if s is None:
        return None
    value = call.nbytes(1) if call.is_tensor(1) else 0  # fill_.Tensor reads a 0-dim value
    name = call.name.split("::", 1)[-1]
    flops = _numel(s) if name in ("normal_", "uniform_", "bernoulli_", "exponential_",
                                  "random_", "log_normal_", "cauchy_", "geometric_") else 0
    return _cost(flops, call.written(0) + value, _vector_roof(call), "fill", name)


_register([f"aten::{n}" for n in _WRITE_ONLY_SELF], _fill)


def _factory_fill(size_i: int, dtype_i: int | None, model: str) -> Handler:
    """zeros/ones/full/rand*(size, ..., dtype, ...): writes the new tensor."""

    def handler(call: _Call) -> OpCost | None:
        size = _to_int_list(call.c(size_i)) if call.c(size_i).strip().startswith("[") else None
        if size is None or any(v < 0 for v in size):
            return None
        t = (_type_from_code(call.c(dtype_i)) if dtype_i is not None else None) or "float"
        return _cost(0, _numel(size) * (bytes_per_element(t) or 4), "fp32", "fill", model)

    return handler


_register(["aten::zeros", "aten::ones", "aten::rand", "aten::randn"],
          _factory_fill(0, 1, "fill (new tensor)"))
_register(["aten::full"], _factory_fill(0, 2, "fill (new tensor)"))


def _like_fill(dtype_i: int) -> Handler:
    def handler(call: _Call) -> OpCost | None:
        s = call.shape(0)
        if s is None:
            return None
        t = _type_from_code(call.c(dtype_i)) or call.type(0)
        return _cost(0, _numel(s) * (bytes_per_element(t) or 0), "fp32", "fill",
                     "fill (new tensor)")
    return handler


_register(["aten::zeros_like", "aten::ones_like", "aten::rand_like", "aten::randn_like"],
          _like_fill(1))
_register(["aten::full_like"], _like_fill(2))


# --------------------------------------------------------------------------------------------
# copies, conversions, data movement
# --------------------------------------------------------------------------------------------

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
    nbytes = 2 * n * bytes_per_element(out_t) if out_t and bytes_per_element(out_t) else None
    return _cost(0, nbytes, "fp32", "copy", call.name.split("::")[-1] + (
        "" if nbytes is not None else " (TensorList dtypes not recorded)"))


def _index_select(call: _Call) -> OpCost | None:
    s, idx = call.shape(0), call.shape(2)
    dim = call.c_int(1)
    if s is None or idx is None or dim is None or len(idx) > 1:
        return None
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


# --------------------------------------------------------------------------------------------
# reductions
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------------

def _layer_norm_flops(n: int, c: int) -> int:
    # TraceLens Normalization (training=True: statistics computed): 5 per element + 6 per channel
    return 5 * n + 6 * c


def _rms_norm_flops(n: int, c: int, affine: bool) -> float:
    # TraceLens RMSNorm: rows * (2C + 2) for the rsqrt of the mean square, then 1 (2 with weight)
    rows = n / c if c else 0
    return rows * (2 * c + 2) + n * (2 if affine else 1)


def _norm_sizes(call: _Call) -> tuple[int, int] | None:
    """(elements, normalized size) of a norm's input from its normalized_shape argument (else
    the weight's shape, else the last dim); None when they do not divide."""
    s = call.shape(0)
    if s is None:
        return None
    ns = _to_int_list(call.c(1))
    c = _numel(ns) if ns else (_numel(call.shape(2) or ()) if call.is_tensor(2) else (s[-1] if s else 1))
    n = _numel(s)
    if c <= 0 or n % c:
        return None
    return n, c


def _layer_norm(call: _Call) -> OpCost | None:
    # layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable)
    sizes = _norm_sizes(call)
    if sizes is None:
        return None
    n, c = sizes
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(2) + call.nbytes(3)
    return _cost(_layer_norm_flops(n, c), nbytes, _vector_roof(call, [0]), "norm", "layer_norm")


def _rms_norm(call: _Call) -> OpCost | None:
    # rms_norm(input, normalized_shape, weight?, eps) ; _fused_rms_norm(input, shape, weight, eps)
    sizes = _norm_sizes(call)
    if sizes is None:
        return None
    n, c = sizes
    affine = call.nd_tensor(2)
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(2)
    return _cost(_rms_norm_flops(n, c, affine), nbytes, _vector_roof(call, [0]), "norm", "rms_norm")


def _group_norm(call: _Call) -> OpCost | None:
    # group_norm(input, num_groups, weight?, bias?, eps, cudnn) ;
    # native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
    s = call.shape(0)
    if s is None or len(s) < 2:
        return None
    w_i, b_i = (1, 2) if call.name == "aten::native_group_norm" else (2, 3)
    nbytes = call.nbytes(0) + call.written(0) + call.nbytes(w_i) + call.nbytes(b_i)
    return _cost(_layer_norm_flops(_numel(s), s[1]), nbytes, _vector_roof(call, [0]), "norm",
                 "group_norm")


def _batch_norm(call: _Call) -> OpCost | None:
    # batch_norm / native_batch_norm / _native_batch_norm_legit / cudnn_ / miopen_batch_norm:
    # (input, weight, bias, running_mean, running_var, training, ...);
    # _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, ...)
    s = call.shape(0)
    if s is None or len(s) < 2:
        return None
    training = False if call.name.endswith("no_training") else bool(call.c_bool(5, False))
    c = s[1]
    n = _numel(s)
    params = sum(call.nbytes(i) for i in range(1, 5))
    nbytes = call.nbytes(0) + call.written(0) + params
    if training:
        nbytes += call.nbytes(3) + call.nbytes(4)  # running statistics updated
    flops = (5 * n if training else 2 * n) + 6 * c
    return _cost(flops, nbytes, _vector_roof(call, [0]), "norm", "batch_norm")


_register(["aten::layer_norm", "aten::native_layer_norm"], _layer_norm)
_register(["aten::rms_norm", "aten::_fused_rms_norm"], _rms_norm)
_register(["aten::group_norm", "aten::native_group_norm"], _group_norm)
_register(["aten::batch_norm", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
           "aten::_native_batch_norm_legit_no_training", "aten::cudnn_batch_norm",
           "aten::miopen_batch_norm"], _batch_norm)


# --------------------------------------------------------------------------------------------
# vLLM / AITER / SGLang custom ops
# --------------------------------------------------------------------------------------------

def _custom_rms(x_i: int, w_i: int, reads: Sequence[int], writes: Sequence[tuple[int, int | None]],
                add: bool, model: str, out_type: str | None = None) -> Handler:
    """A fused RMSNorm: ``reads`` are argument indices read; ``writes`` are (argument or -1 for
    a returned tensor, index of the argument whose shape and dtype it has)."""

    def handler(call: _Call) -> OpCost | None:
        x, w = call.shape(x_i), call.shape(w_i)
        if x is None or w is None or len(w) != 1 or not x or x[-1] != w[0]:
            return None
        n, c = _numel(x), w[0]
        nbytes = sum(call.nbytes(i) for i in reads)
        for arg, like in writes:
            if arg >= 0 and call.is_tensor(arg):
                nbytes += call.written(arg)
            elif like is not None:
                t = out_type or call.type(like)
                nbytes += _numel(call.shape(like) or ()) * (bytes_per_element(t) or 0)
        flops = _rms_norm_flops(n, c, True) + (n if add else 0)
        return _cost(flops, nbytes, _vector_roof(call, [x_i]), "norm", model)

    return handler


# vLLM _C::rms_norm(out, input, weight, eps)
_register(["_C::rms_norm", "aiter::rmsnorm", "sgl_kernel::rmsnorm"],
          _custom_rms(1, 2, [1, 2], [(0, 1)], False, "rms_norm"))
# vLLM _C::fused_add_rms_norm(input, residual, weight, eps): both updated in place
_register(["_C::fused_add_rms_norm", "sgl_kernel::fused_add_rmsnorm"],
          _custom_rms(0, 2, [0, 1, 2], [(0, 0), (1, 1)], True, "fused_add_rms_norm"))
# vLLM ROCm wrappers: rocm_aiter_rms_norm(x, weight, eps) -> out
_register(["vllm::rocm_aiter_rms_norm", "aiter::rms_norm", "aiter::rmsnorm2d_fwd",
           "aiter::rmsnorm2d_fwd_ck"],
          _custom_rms(0, 1, [0, 1], [(-1, 0)], False, "rms_norm"))
# rocm_aiter_rmsnorm2d_fwd_with_add(x, residual, weight, eps) -> (out, residual_out)
_register(["vllm::rocm_aiter_rmsnorm2d_fwd_with_add"],
          _custom_rms(0, 2, [0, 1, 2], [(-1, 0), (-1, 1)], True, "fused_add_rms_norm"))
# aiter::rmsnorm2d_fwd_with_add_ck(out, input, residual_in, residual_out, weight, eps, ...)
_register(["aiter::rmsnorm2d_fwd_with_add_ck", "aiter::rmsnorm2d_fwd_with_add",
           "aiter::add_rmsnorm"],
          _custom_rms(1, 4, [1, 2, 4], [(0, 1), (3, 2)], True, "fused_add_rms_norm"))
# _C::rms_norm_static_fp8_quant(out, input, weight, scale, eps)
_register(["_C::rms_norm_static_fp8_quant", "_C::rms_norm_dynamic_per_token_quant"],
          _custom_rms(1, 2, [1, 2, 3], [(0, 1)], False, "rms_norm+quant"))
# _C::fused_add_rms_norm_static_fp8_quant(out, input, residual, weight, scale, eps)
_register(["_C::fused_add_rms_norm_static_fp8_quant"],
          _custom_rms(1, 3, [1, 2, 3, 4], [(0, 1), (2, 2)], True, "fused_add_rms_norm+quant"))


def _act_and_mul(flops_per: int, model: str) -> Handler:
    """vLLM/AITER/SGLang gated activations: (out[..., d], input[..., 2d])."""

    def handler(call: _Call) -> OpCost | None:
        out, x = call.shape(0), call.shape(1)
        if out is None or x is None or not out or not x or x[-1] != 2 * out[-1] \
                or tuple(x[:-1]) != tuple(out[:-1]):
            return None
        n = _numel(out)
        return _cost(flops_per * n, call.nbytes(1) + call.written(0), _vector_roof(call, [1]),
                     "elementwise", model)

    return handler


# FLOPs per output element as in TraceLens (aiter_silu_and_mul 5, gelu 8, gelu_tanh 10)
_register(["_C::silu_and_mul", "_C::mul_and_silu", "aiter::silu_and_mul",
           "sgl_kernel::silu_and_mul"], _act_and_mul(5, "silu_and_mul"))
_register(["_C::gelu_and_mul", "aiter::gelu_and_mul", "sgl_kernel::gelu_and_mul"],
          _act_and_mul(8, "gelu_and_mul"))
_register(["_C::gelu_tanh_and_mul", "aiter::gelu_tanh_and_mul",
           "sgl_kernel::gelu_tanh_and_mul"], _act_and_mul(10, "gelu_tanh_and_mul"))


def _rotary(call: _Call) -> OpCost | None:
    # rotary_embedding(positions, query, key?, head_size, cos_sin_cache, is_neox, ...)
    pos, q, cache = call.shape(0), call.shape(1), call.shape(4)
    head = call.c_int(3)
    if pos is None or q is None or cache is None or not q or len(cache) != 2:
        return None
    tokens = _numel(pos)
    head = head or q[-1]
    rot = cache[1]
    if tokens <= 0 or head <= 0 or rot > head:
        return None
    k = call.shape(2)
    heads = _numel(q) / (tokens * head)
    if k is not None:
        heads += _numel(k) / (tokens * head)
    if heads != int(heads):
        return None
    rotated = tokens * int(heads) * rot
    # the rotated slice of q and k is read and written in place; positions and the cache rows
    # they select are read once
    nbytes = 2 * rotated * call.bpe(1) + call.nbytes(0) + tokens * rot * call.bpe(4)
    return _cost(3 * rotated, nbytes, _vector_roof(call, [1]), "elementwise", "rotary_embedding")


_register(["_C::rotary_embedding", "_C::batched_rotary_embedding", "sgl_kernel::rotary_embedding"],
          _rotary)


def _kv_cache_write(call: _Call) -> OpCost | None:
    # reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, dtype, k_scale, v_scale)
    k, v = call.shape(0), call.shape(1)
    if k is None or v is None:
        return None
    kc_bpe = call.bpe(2) if call.is_tensor(2) else call.bpe(0)
    vc_bpe = call.bpe(3) if call.is_tensor(3) else call.bpe(1)
    nbytes = call.nbytes(0) + call.nbytes(1) + call.nbytes(4) \
        + _numel(k) * kc_bpe + _numel(v) * vc_bpe
    model = call.name.split("::")[-1]
    if not call.is_tensor(2):
        model += " (cache dtype taken as key dtype)"
    return _cost(0, nbytes, "fp32", "copy", model)


_register(["_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache",
           "vllm::unified_kv_cache_update"], _kv_cache_write)


def _quant(out_i: int, in_i: int, model: str) -> Handler:
    """vLLM fp8 quantisation: (out, input, scale, ...): reads input and scales, writes out."""

    def handler(call: _Call) -> OpCost | None:
        out, x = call.shape(out_i), call.shape(in_i)
        if out is None or x is None or _numel(out) != _numel(x):
            return None
        n = _numel(x)
        extra = sum(call.nbytes(i) for i in range(call.n) if i not in (out_i, in_i))
        return _cost(2 * n, call.nbytes(in_i) + call.written(out_i) + extra,
                     _vector_roof(call, [in_i]), "elementwise", model)

    return handler


_register(["_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
           "_C::dynamic_per_token_scaled_fp8_quant", "_C::static_scaled_int8_quant",
           "_C::dynamic_scaled_int8_quant"], _quant(0, 1, "quant"))


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------

def covered_op_names() -> frozenset[str]:
    """Every op name :func:`op_cost` has a model for (views and allocations included)."""
    return frozenset(_HANDLERS)


def op_cost(name: str, input_dims: list | str | None, input_types: list | str | None,
            concrete_inputs: list | str | None = None, input_strides: list | str | None = None) -> OpCost | None:
    """The cost of one call of op ``name`` from its trace arguments.

    ``input_dims``, ``input_types`` and ``concrete_inputs`` are the trace's ``Input Dims``,
    ``Input type`` and ``Concrete Inputs`` (the store's ``ops`` columns), either as JSON text
    or already parsed; ``input_strides`` the trace's ``Input Strides``: with them, the bytes an
    input costs to read are those of its storage (a broadcast or expanded input counts once,
    :func:`storage_elements`), not of its view; outputs count what is written. FLOPs do not
    depend on strides. Returns ``None`` when the op has no cost model or its shapes are
    missing or inconsistent; never raises.

    Roof (``dtype``) rule: matrix ops (GEMM, attention, convolution) take the widest dtype of
    their matrix operands (bias and scales excluded): bf16 GEMM -> ``"bf16"``, fp8
    ``_scaled_mm`` -> ``"fp8"``, fp32 GEMM -> ``"fp32"`` (PyTorch leaves TF32 off for matmul
    by default), fp32 convolution -> ``"tf32"`` (cuDNN's TF32 is on by default). Every other op
    runs on the vector units, where PyTorch computes fp16/bf16 in fp32: ``"fp32"``, or
    ``"fp64"`` when a dimensioned input is double. Views and allocations have ``None``.
    """
    try:
        if not isinstance(name, str) or not name.strip():
            return None
        key = name.strip()
        handler = _HANDLERS.get(key)
        if handler is None and "::" not in key:
            key = "aten::" + key
            handler = _HANDLERS.get(key)
        if handler is None:
            return None
        dims = _parse_list(input_dims)
        if dims is None:
            dims = []
        types = _parse_list(input_types) or []
        conc = _parse_list(concrete_inputs) or []
        strides = _parse_list(input_strides) if input_strides is not None else None
        call = _Call(key, dims, types, conc, strides)
        if handler in (_view, _alloc):
            return handler(call)
        if not dims:
            return None
        result = handler(call)
        if result is None:
            return None
        for v in (result.flops, result.bytes, result.flops_executed):
            if v is not None and (not math.isfinite(v) or v < 0):
                return None
        return result
    except Exception:  # noqa: BLE001 - odd input must give None, never an exception
        return None
