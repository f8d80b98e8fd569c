"""The machinery of the cost models: ``OpCost``, dtypes, one call's parsed arguments (``_Call``),
broadcasting, type promotion, the roof rules and the registry every family module adds to."""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from re import Pattern
from typing import Any, Callable, Iterable, Sequence

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
                 strides: list[Any] | None = None, model: Any = None,
                 context_tokens: int | None = None, iteration: Any = None,
                 element_bytes: int | None = None) -> None:
        self.name = name
        self.dims = dims
        self.types = types
        self.conc = conc
        self.strides_ = strides or []
        #: the run's model (``gpuscope.analyzers.modelspec.ModelSpec``) when the user gave
        #: ``--model``: what a fused op hides (expert weights, heads) comes from it
        self.model = model
        #: KV tokens per sequence when the user gave ``--context`` (attention whose trace does
        #: not record context lengths)
        self.context_tokens = context_tokens
        #: the engine step this call ran in (``gpuscope.analyzers.iterations.IterationShape``:
        #: query and KV length sums) when the trace labels its steps
        self.iteration = iteration
        #: bytes per element of TensorList arguments, from the launched kernels' names (the
        #: profiler records a TensorList's shapes but not its dtypes)
        self.element_bytes = element_bytes

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


#: Models for op names that follow a pattern instead of a list: generated kernels such as
#: Inductor's ``triton_poi_fused_add_0`` (their names are made per program). Tried in order,
#: only when no exact name in ``_HANDLERS`` matches.
_PATTERNS: list[tuple[Pattern[str], Handler]] = []


def _register_pattern(pattern: Pattern[str], handler: Handler) -> None:
    _PATTERNS.append((pattern, handler))


def _handler_for(name: str) -> Handler | None:
    """The model of op ``name``: its exact name's, else the first pattern's that matches."""
    handler = _HANDLERS.get(name)
    if handler is not None:
        return handler
    for pattern, h in _PATTERNS:
        if pattern.match(name):
            return h
    return None
