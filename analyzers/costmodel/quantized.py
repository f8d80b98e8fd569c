"""Quantized GEMMs of the serving engines, judged against the roof of the math that ran.

Weight-only kernels (w4a16 / w8a16: Marlin, AWQ, GPTQ, Machete) load packed integer weights,
dequantize them in registers and run fp16/bf16 MMA: their roof is the activation's dtype.
Kernels that quantize both operands run the MMA of that type: w8a8 fp8 -> ``fp8``, int8 ->
``int8``, NVFP4/MXFP4 a4w4 -> ``fp4`` (a GPU without an fp4 rate in the spec database has no
fp4 roof, and the roofline says so).

FLOPs are ``2·M·N·K`` with the **logical** K and N, derived from the packing the trace records
(an int32 holds 8 int4 or 4 int8 values, a uint8 or ``Float4_e2m1fn_x2`` two fp4 values).
Bytes are compulsory traffic: the activations, the packed weights at their stored size, the
scales, zero points, ``g_idx``/``perm`` and bias as recorded, and the output written once.
Scratch buffers (Marlin's ``workspace`` locks) are not traffic. Schemas, argument by argument,
and the source each was read from are in ``docs/costmodel.md`` ("Quantized GEMMs").

Every handler returns ``None`` when the recorded shapes do not fit its schema (a packing that
does not divide, a K that disagrees between operands, a bit width the kernel does not have).
"""
from __future__ import annotations

from typing import Sequence

from ._core import (
    Handler, OpCost, _Call, _cost, _matrix_roof, _numel, _register, _to_int_list, _type_from_code,
    _vector_roof, bytes_per_element, dtype_key,
)

# Roof keys an activation operand may select: the MMA runs in that type.
_MMA_KEYS = ("fp16", "bf16", "fp8", "int8")
_HALF_TYPES = ("c10::BFloat16", "c10::Half")


def _act_roof(type_name: str) -> str | None:
    """The roof of a weight-only (or w4a8) kernel: the MMA runs in the activation's type."""
    key = dtype_key(type_name)
    return key if key in _MMA_KEYS else None


def _packed_bits(packed_bytes: int, k: int, n: int, allowed: Sequence[int]) -> int | None:
    """Bits per weight of a packed ``K x N`` weight stored in ``packed_bytes``; ``None`` unless
    it is a whole width the kernel supports (the packing must account for every byte)."""
    if k <= 0 or n <= 0 or packed_bytes <= 0:
        return None
    total_bits = packed_bytes * 8
    if total_bits % (k * n):
        return None
    bits = total_bits // (k * n)
    return bits if bits in allowed else None


def _out_bytes(m: int, n: int, type_name: str | None) -> int:
    return m * n * (bytes_per_element(type_name or "") or 0)


def _reads(call: _Call, idxs: Sequence[int]) -> int:
    """Bytes of the tensor arguments ``idxs`` read once (absent optionals count 0)."""
    return sum(call.nbytes(i) for i in idxs if call.is_tensor(i))


def _gemm(m: int, n: int, k: int, nbytes: int, roof: str | None, model: str) -> OpCost | None:
    if roof is None or min(m, n, k) < 0:
        return None
    return _cost(2 * m * n * k, nbytes, roof, "gemm", model)


def _trailing_sizes(call: _Call) -> int | None:
    """Index of ``size_m`` in a Marlin-family schema: the three ints before the trailing bools
    (every version of ``gptq_marlin_gemm`` ends ``size_m, size_n, size_k, bool...``)."""
    i = call.n - 1
    while i >= 0 and call.c(i).strip() in ("True", "False"):
        i -= 1
    start = i - 2
    if start < 1 or any(call.c_int(j) is None for j in range(start, i + 1)):
        return None
    return start


# --------------------------------------------------------------------------------------------
# Marlin (vLLM _C::gptq_marlin_gemm / _C::marlin_gemm, SGLang sgl_kernel::gptq_marlin_gemm)
# --------------------------------------------------------------------------------------------

def _marlin(call: _Call) -> OpCost | None:
    # Newest: marlin_gemm(a, c?, b_q_weight, b_bias?, b_scales, a_scales?, global_scale?,
    #   b_zeros?, g_idx?, perm?, workspace, b_type_id, size_m, size_n, size_k, is_k_full,
    #   use_atomic_add, use_fp32_reduce, is_zp_float). Older versions drop c?/bias?/a_scales?/
    #   global_scale? or the zeros, but all keep a first and (workspace, type, m, n, k, bools...)
    #   last: locate the sizes from the end, the weight from the start.
    start = _trailing_sizes(call)
    if start is None:
        return None
    m, n, k = (call.c_int(start + j) or 0 for j in range(3))
    a = call.shape(0)
    if a is None or not a or m <= 0 or n <= 0 or k <= 0 or a[-1] != k or _numel(a) != m * k:
        return None
    # c_or_none (the output buffer) sits at 1 when present or recorded as None; otherwise the
    # packed weight does.
    c_given = call.shape(1) is not None and call.shape(1) != () and call.type(1) in _HALF_TYPES
    c_slot = c_given or (call.type(1) == "" and call.shape(1) is None)
    bq = 2 if c_slot else 1
    bq_shape = call.shape(bq)
    if bq_shape is None or call.bpe(bq) != 4:  # Marlin packs every weight type into int32
        return None
    bits = _packed_bits(call.nbytes(bq), k, n, (4, 8))
    if bits is None:
        return None
    # workspace (int32 lock flags) is the tensor two before size_m (before the type id).
    workspace = start - 2
    reads = [i for i in range(0, workspace) if not (c_given and i == 1)]
    out_t = call.type(1) if c_given else None
    if out_t is None:
        out_t = call.type(0) if call.type(0) in _HALF_TYPES else None
    if out_t is None:
        # w4a8 (int8/fp8 activations): the output has the scales' half type.
        out_t = next((call.type(i) for i in range(bq + 1, workspace) if call.type(i) in _HALF_TYPES),
                     "c10::BFloat16")
    a_bits = 8 * call.bpe(0)
    nbytes = _reads(call, reads) + _out_bytes(m, n, out_t)
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)),
                 f"{call.name.split('::')[-1]} w{bits}a{a_bits}")


def _fp8_marlin(call: _Call) -> OpCost | None:
    # fp8_marlin_gemm(a, b_q_weight, b_scales, workspace, num_bits, size_m, size_n, size_k)
    m, n, k = (call.c_int(i) or 0 for i in (5, 6, 7))
    a = call.shape(0)
    if call.n < 8 or a is None or not a or m <= 0 or a[-1] != k or _numel(a) != m * k:
        return None
    if call.shape(1) is None or _packed_bits(call.nbytes(1), k, n, (8,)) is None:
        return None
    nbytes = _reads(call, [0, 1, 2]) + _out_bytes(m, n, call.type(0))
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)), "fp8_marlin_gemm w8a16")


def _marlin_qqq(call: _Call) -> OpCost | None:
    # marlin_qqq_gemm(a int8 [M,K], b_q_weight int32 [K/16, 2N], s_tok [M,1] f32,
    #   s_ch [1,N] f32, s_group [K/G,N] f16, workspace, size_m, size_n, size_k) -> [M,N] f16
    m, n, k = (call.c_int(i) or 0 for i in (6, 7, 8))
    a = call.shape(0)
    if call.n < 9 or a is None or len(a) != 2 or tuple(a) != (m, k) or n <= 0:
        return None
    if call.shape(1) is None or _packed_bits(call.nbytes(1), k, n, (4,)) is None:
        return None
    nbytes = _reads(call, [0, 1, 2, 3, 4]) + _out_bytes(m, n, "c10::Half")
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)), "marlin_qqq_gemm w4a8")


def _marlin_repack(call: _Call) -> OpCost | None:
    # awq_marlin_repack(b_q_weight, size_k, size_n, num_bits[, is_a_8bit]) and
    # gptq_marlin_repack(b_q_weight, perm, size_k, size_n, num_bits[, is_a_8bit]): a one-off
    # relayout at load time, no GEMM; the repacked weight has the same size.
    gptq = call.name.endswith("gptq_marlin_repack")
    base = 2 if gptq else 1
    k, n, bits = (call.c_int(base + j) for j in range(3))
    w = call.shape(0)
    if w is None or k is None or n is None or bits not in (2, 3, 4, 8) or k <= 0 or n <= 0:
        return None
    if _packed_bits(call.nbytes(0), k, n, (bits,)) is None:
        return None
    nbytes = _reads(call, [0, 1] if gptq else [0]) + k * n * bits // 8
    return _cost(0, nbytes, _vector_roof(call, [0]), "copy",
                 f"{call.name.split('::')[-1]} (relayout, no GEMM)")


# --------------------------------------------------------------------------------------------
# AWQ, GPTQ (exllama), Machete
# --------------------------------------------------------------------------------------------

def _awq(call: _Call) -> OpCost | None:
    # awq_gemm(_in_feats [M,K] f16, _kernel [K, N/8] int32, _scaling_factors [K/G, N] f16,
    #   _zeros [K/G, N/8] int32, split_k_iters) -> [M, N]: 8 int4 per int32 along N.
    a, w = call.shape(0), call.shape(1)
    if a is None or w is None or len(a) != 2 or len(w) != 2 or call.bpe(1) != 4 or w[0] != a[1]:
        return None
    m, k, n = a[0], a[1], w[1] * 8
    s = call.shape(2)
    if s is not None and len(s) == 2 and s[1] != n:
        return None
    nbytes = _reads(call, [0, 1, 2, 3]) + _out_bytes(m, n, call.type(0))
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)), "awq_gemm w4a16")


def _gptq(call: _Call) -> OpCost | None:
    # gptq_gemm(a [M,K], b_q_weight [K*bit/32, N] int32, b_gptq_qzeros, b_gptq_scales [G, N],
    #   b_g_idx, use_exllama[, use_v2_format], bit) -> [M, N]: packed along K.
    a, w = call.shape(0), call.shape(1)
    if a is None or w is None or len(a) != 2 or len(w) != 2 or call.bpe(1) != 4:
        return None
    m, k, n = a[0], a[1], w[1]
    bits = call.c_int(call.n - 1)
    derived = _packed_bits(call.nbytes(1), k, n, (2, 3, 4, 8))
    if derived is None or (bits is not None and bits != derived):
        return None
    nbytes = _reads(call, [0, 1, 2, 3, 4]) + _out_bytes(m, n, call.type(0))
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)), f"gptq_gemm w{derived}a16")


def _machete(call: _Call) -> OpCost | None:
    # machete_mm(A [M,K], B [K*bits/32, N] int32 prepacked, b_type, out_type?, group_scales?,
    #   group_zeros?, group_size?, channel_scales?, token_scales?, schedule?) -> [M, N]
    a, w = call.shape(0), call.shape(1)
    if a is None or w is None or len(a) != 2 or len(w) != 2:
        return None
    m, k, n = a[0], a[1], w[1]
    bits = _packed_bits(call.nbytes(1), k, n, (4, 8))
    if bits is None:
        return None
    out_t = _type_from_code(call.c(3)) or call.type(0)
    nbytes = _reads(call, [0, 1, 4, 5, 7, 8]) + _out_bytes(m, n, out_t)
    return _gemm(m, n, k, nbytes, _act_roof(call.type(0)),
                 f"machete_mm w{bits}a{8 * call.bpe(0)}")


# --------------------------------------------------------------------------------------------
# w8a8 / a4w4 CUTLASS (vLLM, SGLang)
# --------------------------------------------------------------------------------------------

def _cutlass_azp(call: _Call) -> OpCost | None:
    # cutlass_scaled_mm_azp(out [M,N], a [M,K] int8, b [K,N] int8, a_scales, b_scales,
    #   azp_adj [N] int32, azp? [M] int32, bias?): the zero-point correction is an epilogue.
    out, a, b = call.shape(0), call.shape(1), call.shape(2)
    if out is None or a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    if tuple(out) != (m, n):
        return None
    nbytes = _reads(call, range(1, call.n)) + call.written(0)
    return _gemm(m, n, k, nbytes, _matrix_roof([call.type(1), call.type(2)]), "cutlass_scaled_mm_azp")


def _cutlass_fp4(call: _Call) -> OpCost | None:
    # cutlass_scaled_fp4_mm(out [M,N], a [M,K/2] u8, b [N,K/2] u8, block_scale_a,
    #   block_scale_b, alpha): two fp4 per byte, K = 2 * a.size(1) (vLLM nvfp4_scaled_mm).
    out, a, b = call.shape(0), call.shape(1), call.shape(2)
    if out is None or a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[1]:
        return None
    if call.bpe(1) != 1 or call.bpe(2) != 1:
        return None
    m, n, k = a[0], b[0], 2 * a[1]
    if tuple(out) != (m, n):
        return None
    nbytes = _reads(call, range(1, call.n)) + call.written(0)
    return _gemm(m, n, k, nbytes, "fp4", "cutlass_scaled_fp4_mm nvfp4")


def _sgl_scaled(call: _Call) -> OpCost | None:
    # sgl_kernel {fp8,int8}_scaled_mm(mat_a [M,K], mat_b [K,N], scales_a, scales_b,
    #   ScalarType out_dtype, Tensor? bias); fp8_blockwise_scaled_mm(..., out_dtype) -> [M,N]
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    m, k, n = a[0], a[1], b[1]
    out_t = _type_from_code(call.c(4)) or "c10::BFloat16"
    nbytes = _reads(call, [0, 1, 2, 3, 5]) + _out_bytes(m, n, out_t)
    return _gemm(m, n, k, nbytes, _matrix_roof([call.type(0), call.type(1)]),
                 call.name.split("::")[-1])


# --------------------------------------------------------------------------------------------
# AITER (ROCm): weights are [N, K] (row per output channel); a4w4 packs two fp4 per byte
# --------------------------------------------------------------------------------------------

# The Python-level entry ops return a new tensor whose dtype is an argument (index here);
# the backend ops (``*_ck``, ``*_cktile``, ``_*_asm``) take an ``Out`` tensor instead.
_AITER_DTYPE_ARG = {
    "aiter::gemm_a8w8": 5, "aiter::gemm_a8w8_bpreshuffle": 5, "aiter::gemm_a8w8_blockscale": 4,
    "aiter::gemm_a8w8_blockscale_bpreshuffle": 4, "aiter::gemm_a4w4": 5,
}


def _aiter(fp4: bool) -> Handler:
    def handler(call: _Call) -> OpCost | None:
        x, w = call.shape(0), call.shape(1)
        if x is None or w is None or not x or len(w) != 2 or x[-1] != w[1]:
            return None
        m, n = _numel(x[:-1]), w[0]
        k = x[-1] * 2 if fp4 else x[-1]
        if fp4 and (call.bpe(0) != 1 or call.bpe(1) != 1):
            return None
        # An output tensor ([M, N], or [..., N] for an N-D input) after the two scales is
        # written; other tensors are read. A [1, N] bias of the entry ops looks the same when
        # M is 1, and those ops return their output, so there only M > 1 decides.
        entry = call.name in _AITER_DTYPE_ARG
        out_i = next((i for i in range(4, call.n)
                      if (s := call.shape(i)) is not None and len(s) >= 2 and s[-1] == n
                      and _numel(s) == m * n and (m > 1 or not entry)), None)
        reads = [i for i in range(call.n) if i != out_i]
        if out_i is not None:
            out = call.written(out_i)
        else:
            idx = _AITER_DTYPE_ARG.get(call.name)
            t = _type_from_code(call.c(idx)) if idx is not None else None
            out = _out_bytes(m, n, t if t in _HALF_TYPES else "c10::BFloat16")
        roof = "fp4" if fp4 else _matrix_roof([call.type(0), call.type(1)])
        name = call.name.split("::")[-1]
        return _gemm(m, n, k, _reads(call, reads) + out, roof,
                     f"{name} {'mxfp4' if fp4 else dtype_key(call.type(0)) or ''}".strip())

    return handler


# --------------------------------------------------------------------------------------------
# PyTorch's own (torchao, gpt-fast): int8/int4 weight-only mm and the v2 scaled mm
# --------------------------------------------------------------------------------------------

def _int8pack(call: _Call) -> OpCost | None:
    # _weight_int8pack_mm(self [M,K], mat2 [N,K] int8, scales [N]) -> [M, N] in self's dtype
    a, w = call.shape(0), call.shape(1)
    if a is None or w is None or len(a) != 2 or len(w) != 2 or a[1] != w[1] or call.bpe(1) != 1:
        return None
    m, k, n = a[0], a[1], w[0]
    roof = _matrix_roof([call.type(0)])
    nbytes = _reads(call, [0, 1, 2]) + _out_bytes(m, n, call.type(0))
    return _gemm(m, n, k, nbytes, roof if roof in ("fp32",) + _MMA_KEYS else None,
                 "_weight_int8pack_mm w8a16")


def _int4pack(call: _Call) -> OpCost | None:
    # _weight_int4pack_mm[_for_cpu](self [M,K], mat2 (packed int4, layout per device),
    #   qGroupSize, qScaleAndZeros [K/G, N, 2]) -> [M, N]: N from the scales, and the packed
    #   weight must hold exactly K*N int4 (CUDA's 4-D int32 tile layout or CPU's [N, K/2] uint8)
    a, qsz = call.shape(0), call.shape(3)
    if a is None or qsz is None or len(a) != 2 or len(qsz) != 3 or qsz[2] != 2:
        return None
    m, k, n = a[0], a[1], qsz[1]
    if call.shape(1) is None or _packed_bits(call.nbytes(1), k, n, (4,)) is None:
        return None
    roof = _matrix_roof([call.type(0)])
    nbytes = _reads(call, [0, 1, 3]) + _out_bytes(m, n, call.type(0))
    return _gemm(m, n, k, nbytes, roof if roof in ("fp32",) + _MMA_KEYS else None,
                 "_weight_int4pack_mm w4a16")


# torch.nn.functional.ScalingType -> bytes per scale element: TensorWise, RowWise and the
# DeepSeek blocks (1x128, 128x128) take fp32 scales, NVFP4's 1x16 blocks e4m3, MX's 1x32 e8m0.
_RECIPE_SCALE_BYTES = {0: 4, 1: 4, 2: 1, 3: 1, 4: 4, 5: 4}


def _scaled_mm_v2(call: _Call) -> OpCost | None:
    # _scaled_mm_v2(self, mat2, Tensor[] scale_a, int[] recipe_a, int[] swizzle_a,
    #   Tensor[] scale_b, int[] recipe_b, int[] swizzle_b, Tensor? bias, ScalarType? out_dtype,
    #   int[] contraction_dim=[], bool use_fast_accum=False): the profiler records the scale
    #   lists' shapes but not their dtypes; the recipe says what each scale is.
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    fp4 = _matrix_roof([call.type(0)]) == "fp4"
    m, k, n = a[0], a[1] * (2 if fp4 else 1), b[1]
    scale_bytes = 0
    for scales_i, recipe_i in ((2, 3), (5, 6)):
        scales = call.tensor_list(scales_i)
        recipes = _to_int_list(call.c(recipe_i))
        if scales is None or recipes is None or len(recipes) != len(scales):
            return None
        for shape, recipe in zip(scales, recipes):
            if recipe not in _RECIPE_SCALE_BYTES:
                return None
            scale_bytes += _numel(shape) * _RECIPE_SCALE_BYTES[recipe]
    out_t = _type_from_code(call.c(9)) or "c10::BFloat16"
    nbytes = _reads(call, [0, 1, 8]) + scale_bytes + _out_bytes(m, n, out_t)
    return _gemm(m, n, k, nbytes, _matrix_roof([call.type(0), call.type(1)]), "_scaled_mm_v2")


_register(["_C::gptq_marlin_gemm", "_C::marlin_gemm", "sgl_kernel::gptq_marlin_gemm"], _marlin)
_register(["_C::fp8_marlin_gemm"], _fp8_marlin)
_register(["_C::marlin_qqq_gemm"], _marlin_qqq)
_register(["_C::awq_marlin_repack", "_C::gptq_marlin_repack", "sgl_kernel::awq_marlin_repack",
           "sgl_kernel::gptq_marlin_repack"], _marlin_repack)
_register(["_C::awq_gemm"], _awq)
_register(["_C::gptq_gemm", "sgl_kernel::gptq_gemm"], _gptq)
_register(["_C::machete_mm"], _machete)
_register(["_C::cutlass_scaled_mm_azp"], _cutlass_azp)
_register(["_C::cutlass_scaled_fp4_mm", "sgl_kernel::cutlass_scaled_fp4_mm"], _cutlass_fp4)
_register(["sgl_kernel::fp8_scaled_mm", "sgl_kernel::int8_scaled_mm",
           "sgl_kernel::fp8_blockwise_scaled_mm"], _sgl_scaled)
_register(["aiter::gemm_a8w8", "aiter::gemm_a8w8_ck", "aiter::gemm_a8w8_bpreshuffle",
           "aiter::gemm_a8w8_bpreshuffle_ck", "aiter::gemm_a8w8_bpreshuffle_cktile",
           "aiter::_gemm_a8w8_asm", "aiter::gemm_a8w8_blockscale", "aiter::gemm_a8w8_blockscale_ck",
           "aiter::gemm_a8w8_blockscale_cktile", "aiter::gemm_a8w8_blockscale_bpreshuffle",
           "aiter::gemm_a8w8_blockscale_bpreshuffle_ck",
           "aiter::gemm_a8w8_blockscale_bpreshuffle_cktile"], _aiter(False))
_register(["aiter::gemm_a4w4", "aiter::gemm_a4w4_blockscale", "aiter::_gemm_a4w4_asm"], _aiter(True))
_register(["aten::_weight_int8pack_mm"], _int8pack)
_register(["aten::_weight_int4pack_mm", "aten::_weight_int4pack_mm_for_cpu"], _int4pack)
_register(["aten::_scaled_mm_v2"], _scaled_mm_v2)
