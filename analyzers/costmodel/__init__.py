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

Map of this package: one registry (``_core``) of small models, one module per op family; each
family module ends its models with ``_register([...op names...], handler)`` lines, so the names a
family covers sit next to its formulas. Importing the package imports every family.

================  ==============================================================================
module            what it holds
================  ==============================================================================
``_core``         ``OpCost``, trace type names -> bytes per element and roof key, ``_Call`` (one
                  call's shapes, types, scalars, and the run's model spec / context when given),
                  broadcasting, promotion, ``_vector_roof`` / ``_matrix_roof``, ``_cost``,
                  ``_register``
``views``         ``VIEW_OPS``, allocations: no data moved
``gemm``          mm, addmm, bmm, baddbmm, matmul, linear, scaled/int/cutlass mm, vLLM's GEMM
``conv``          conv of every backend, conv backward, ``NEEDS_CONCRETE_INPUTS``
``attention``     SDPA variants, flash/efficient/cuDNN/aiter/FA3, causal masking
                  (``flops_executed``)
``elementwise``   unary/binary/ternary tables, fills, factories
``movement``      copy_, clone, to, cat, index/gather/scatter, pad
``reductions``    sum/mean/max..., topk, sort, softmax
``norms``         layer/rms/group/batch norm
``engines``       vLLM / AITER / SGLang custom ops: fused rms+add(+quant), act-and-mul, GELUs,
                  rotary, fused QK-norm+rope, KV-cache writes, fp8 quant, AITER bf16 GEMM, MoE
                  routing (triton_kernels TopK / SortTokens, topk_softmax, moe_align)
``engine_attn..`` ``engine_attention``: paged / MLA decode attention (with ``--context``:
                  ``NEEDS_CONTEXT_OPS``), AITER batch prefill
``triton``        Inductor's generated Triton kernels (``triton_poi_fused_add_0``...), matched
                  by name pattern (``_register_pattern``): estimates from the launch arguments
``moe``           fused MoE: vLLM ``moe_forward`` from the ``--model`` config, fused-expert ops
                  that record their weights (estimates: uniform routing)
``quantized``     weight-only and low-precision GEMMs (Marlin, AWQ, GPTQ, machete, fp8, fp4)
``foreach``       ``_foreach_*`` over TensorLists (element size from the launched kernel)
``steps``         fused engine attention (vLLM ``unified_attention``) from the engine step's
                  query/KV sums (``call.iteration``) or ``--context``: ``STEP_OPS``
``__init__``      the entry point: ``covered_op_names``, :func:`op_cost`
================  ==============================================================================

To add a model: write ``def _name(call: _Call) -> OpCost | None`` in its family's module (a new
family gets its own module, imported below), read shapes and dtypes through ``call``,
return ``None`` whenever they are missing or inconsistent, build the result with ``_cost(flops,
bytes, roof_dtype, kind, model)``, register it under every op name it models with
``_register``, then add a row to ``docs/costmodel.md`` and a hand-computed case to
``tests/test_costmodel.py`` (check FLOPs against ``FlopCounterMode`` where torch has a formula).
"""
from __future__ import annotations

import math
from typing import Any

# Every family module registers its models on import; the order does not matter.
from . import (  # noqa: F401
    attention, conv, elementwise, engine_attention, engines, foreach, gemm, moe, movement, norms, quantized,
    reductions, triton, views,
)
from . import steps  # noqa: F401  (after the families: the step model wins for the ops it names)
from ._core import OpCost, _Call, _HANDLERS, _parse_list, bytes_per_element, dtype_key, storage_elements
from ._core import _handler_for
from .conv import NEEDS_CONCRETE_INPUTS
from .steps import STEP_OPS
from .views import VIEW_OPS, _alloc, _view

__all__ = [
    "OpCost",
    "op_cost",
    "dtype_key",
    "bytes_per_element",
    "storage_elements",
    "covered_op_names",
    "has_cost_model",
    "VIEW_OPS",
    "NEEDS_CONCRETE_INPUTS",
    "STEP_OPS",
]


def covered_op_names() -> frozenset[str]:
    """Every op name :func:`op_cost` has a model for (views and allocations included)."""
    return frozenset(_HANDLERS)


def has_cost_model(name: str) -> bool:
    """True when :func:`op_cost` has a model for op ``name``: a name of
    :func:`covered_op_names` (``aten::`` may be left out) or a generated kernel's name that a
    family models by its pattern (Inductor's ``triton_poi_fused_add_0``)."""
    key = name.strip() if isinstance(name, str) else ""
    return bool(key) and (_handler_for(key) is not None
                          or ("::" not in key and _handler_for("aten::" + key) is not None))


def op_cost(name: str, input_dims: list | str | None, input_types: list | str | None,
            concrete_inputs: list | str | None = None, input_strides: list | str | None = None, *,
            model: Any = None, context_tokens: int | None = None, iteration: Any = None,
            element_bytes: int | None = None) -> OpCost | None:
    """The cost of one call of op ``name`` from its trace arguments.

    ``input_dims``, ``input_types`` and ``concrete_inputs`` are the trace's ``Input Dims``,
    ``Input type`` and ``Concrete Inputs`` (the store's ``ops`` columns), either as JSON text
    or already parsed; ``input_strides`` the trace's ``Input Strides``: with them, the bytes an
    input costs to read are those of its storage (a broadcast or expanded input counts once,
    :func:`storage_elements`), not of its view; outputs count what is written. FLOPs do not
    depend on strides. ``model`` (a ``ModelSpec`` from the user's ``--model`` config) and
    ``context_tokens`` (``--context``) fill in what fused engine ops do not record, as does
    ``iteration``: the engine step the call ran in (``IterationShape``, from the trace's step
    labels, :mod:`gpuscope.analyzers.iterations`); ``element_bytes`` the element size of
    TensorList arguments, which the profiler does not record (the attribution reads it from
    the launched kernels' names). Returns ``None`` when the op has no cost model or its shapes are
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
        handler = _handler_for(key)
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
        call = _Call(key, dims, types, conc, strides, model, context_tokens, iteration, element_bytes)
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
