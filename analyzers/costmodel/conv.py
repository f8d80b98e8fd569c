"""Convolution of every backend and its backward; ``NEEDS_CONCRETE_INPUTS``."""
from __future__ import annotations

from ._core import (
    OpCost, Shape, _Call, _cost, _matrix_roof, _numel, _register, _to_bool, _to_int_list,
)


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
