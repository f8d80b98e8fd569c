"""Elementwise ops: unary/binary/ternary tables, fills, factories."""
from __future__ import annotations

from ._core import (
    Handler, OpCost, _Call, _broadcast, _category, _cost, _numel, _register, _result_type,
    _to_int_list, _type_from_code, _vector_roof, bytes_per_element,
)


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
