"""Quantized GEMMs (analyzers/costmodel/quantized.py, and the fp8/fp4 scaled mms of gemm.py).

No shared trace records one of these ops, so each call is written the way Kineto records a
custom op (``Input Dims`` / ``Input type`` / ``Concrete Inputs``: an absent optional is
``[]`` / ``""``, an int or bool argument is ``"Scalar"`` with its value), argument by argument
from the op's schema in its engine's source (docs/costmodel.md, "Quantized GEMMs"). Every
expected number is computed by hand below: FLOPs ``2·M·N·K`` with the logical K and N that the
packing implies, bytes = activations + packed weights + scales (+ zeros, g_idx, perm, bias) +
output, roof = the MMA that ran.
"""
from __future__ import annotations

import math
from typing import Any

import pytest

from gpuscope.analyzers.costmodel import covered_op_names, op_cost

BF16, F16, F32, I32, I8, U8 = "c10::BFloat16", "c10::Half", "float", "int", "signed char", "unsigned char"
FP8, FP4X2, E8M0 = "c10::Float8_e4m3fn", "c10::Float4_e2m1fn_x2", "c10::Float8_e8m0fnu"
NONE: tuple[list[int], str, str] = ([], "", "")


def T(shape: list[int], dtype: str) -> tuple[list[int], str, str]:
    """A tensor argument."""
    return (shape, dtype, "")


def S(value: Any) -> tuple[list[int], str, str]:
    """A scalar argument (int, bool, ScalarType code) as Concrete Inputs records it."""
    return ([], "Scalar", str(value))


def cost(name: str, *args: tuple[list[int], str, str]):
    return op_cost(name, [a[0] for a in args], [a[1] for a in args], [a[2] for a in args])


# Llama-2-7B's MLP up projection, a decode batch of 16 tokens, group size 128.
M, K, N, G = 16, 4096, 11008, 128
FLOPS = 2 * M * N * K


# --------------------------------------------------------------------------------------------
# Marlin: every version of the schema (vLLM csrc/torch_bindings.cpp history)
# --------------------------------------------------------------------------------------------

def test_marlin_gemm_newest_w4a16() -> None:
    # marlin_gemm(a, c?, b_q_weight, b_bias?, b_scales, a_scales?, global_scale?, b_zeros?,
    #   g_idx?, perm?, workspace, b_type_id, size_m, size_n, size_k, is_k_full,
    #   use_atomic_add, use_fp32_reduce, is_zp_float)
    # Marlin's int4 layout: [K/16, N*16/8] int32 = K*N/2 bytes (8 int4 per int32)
    c = cost("_C::marlin_gemm", T([M, K], BF16), NONE, T([K // 16, N * 2], I32), NONE,
             T([K // G, N], BF16), NONE, NONE, NONE, T([0], I32), T([0], I32), T([528], I32),
             S(5), S(M), S(N), S(K), S(True), S(False), S(True), S(False))
    assert c is not None and c.dtype == "bf16" and c.kind == "gemm"
    assert c.flops == FLOPS == 1_442_840_576
    # a + packed int4 weight + bf16 group scales + bf16 output; the workspace is not traffic
    assert c.bytes == M * K * 2 + K * N // 2 + (K // G) * N * 2 + M * N * 2 == 23_732_224
    assert c.model == "marlin_gemm w4a16"


def test_gptq_marlin_gemm_older_schemas_agree() -> None:
    scales = T([K // G, N], F16)
    w = T([K // 16, N * 2], I32)
    g_idx, perm = T([K], I32), T([K], I32)  # act-order: read once
    expected = M * K * 2 + K * N // 2 + (K // G) * N * 2 + 2 * K * 4 + M * N * 2
    # 2024-05: (a, b_q_weight, b_scales, g_idx, perm, workspace, num_bits, m, n, k, is_k_full)
    v1 = cost("_C::gptq_marlin_gemm", T([M, K], F16), w, scales, g_idx, perm, T([528], I32),
              S(4), S(M), S(N), S(K), S(True))
    # (a, b_q_weight, b_scales, b_zeros, g_idx, perm, workspace, b_q_type, m, n, k,
    #  is_k_full, has_zp, use_fp32_reduce[, is_zp_float])
    v3 = cost("_C::gptq_marlin_gemm", T([M, K], F16), w, scales, T([0], I32), g_idx, perm,
              T([528], I32), S(7), S(M), S(N), S(K), S(True), S(False), S(True), S(False))
    # (a, c?, b_q_weight, b_bias?, b_scales, global_scale?, b_zeros?, g_idx?, perm?,
    #  workspace, b_q_type, m, n, k, 4 bools): SGLang's port has the same
    v5 = cost("sgl_kernel::gptq_marlin_gemm", T([M, K], F16), NONE, w, NONE, scales, NONE,
              NONE, g_idx, perm, T([528], I32), S(7), S(M), S(N), S(K),
              S(True), S(False), S(True), S(False))
    for c in (v1, v3, v5):
        assert c is not None and c.flops == FLOPS and c.bytes == expected and c.dtype == "fp16"


def test_marlin_packing_gives_the_bit_width() -> None:
    # fp8 weight-only (w8a16): 4 fp8 per int32, [K/16, N*16/4]
    c = cost("_C::marlin_gemm", T([M, K], BF16), NONE, T([K // 16, N * 4], I32), NONE,
             T([1, N], BF16), NONE, NONE, NONE, NONE, NONE, T([528], I32), S(9), S(M), S(N),
             S(K), S(True), S(False), S(True), S(False))
    assert c is not None and c.model == "marlin_gemm w8a16" and c.dtype == "bf16"
    assert c.bytes == M * K * 2 + K * N + N * 2 + M * N * 2
    # w4a8 (int8 activations, per-token a_scales): the MMA runs int8; output in the scales' type
    c = cost("_C::marlin_gemm", T([M, K], I8), NONE, T([K // 16, N * 2], I32), NONE,
             T([K // G, N], F16), T([M], F32), NONE, NONE, NONE, NONE, T([528], I32), S(5),
             S(M), S(N), S(K), S(True), S(False), S(True), S(False))
    assert c is not None and c.dtype == "int8" and c.model == "marlin_gemm w4a8"
    assert c.bytes == M * K + K * N // 2 + (K // G) * N * 2 + M * 4 + M * N * 2


def test_marlin_inconsistent_shapes_give_none() -> None:
    def marlin(a_k: int, size_k: int, w: list[int]):
        return cost("_C::marlin_gemm", T([M, a_k], BF16), NONE, T(w, I32), NONE,
                    T([K // G, N], BF16), NONE, NONE, NONE, NONE, NONE, T([528], I32), S(5),
                    S(M), S(N), S(size_k), S(True), S(False), S(True), S(False))

    assert marlin(K, K, [K // 16, N * 2]) is not None
    assert marlin(K, 2 * K, [K // 16, N * 2]) is None        # a's K disagrees with size_k
    assert marlin(K, K, [K // 16, N * 3]) is None             # 6 bits per weight: no such Marlin
    assert marlin(K, K, [K // 16 + 1, N * 2]) is None         # the packing does not divide
    # sizes not recorded (no Concrete Inputs): nothing to derive them from
    assert op_cost("_C::marlin_gemm", [[M, K], [], [K // 16, N * 2]], [BF16, "", I32]) is None


def test_marlin_qqq_and_fp8_marlin() -> None:
    # marlin_qqq_gemm(a int8, b_q_weight, s_tok [M,1] f32, s_ch [1,N] f32, s_group [K/G,N] f16,
    #   workspace, size_m, size_n, size_k) -> [M, N] fp16: W4A8, int8 MMA
    c = cost("_C::marlin_qqq_gemm", T([M, K], I8), T([K // 16, N * 2], I32), T([M, 1], F32),
             T([1, N], F32), T([K // G, N], F16), T([528], I32), S(M), S(N), S(K))
    assert c is not None and c.flops == FLOPS and c.dtype == "int8"
    assert c.bytes == M * K + K * N // 2 + M * 4 + N * 4 + (K // G) * N * 2 + M * N * 2
    # fp8_marlin_gemm(a, b_q_weight, b_scales, workspace, num_bits, size_m, size_n, size_k)
    c = cost("_C::fp8_marlin_gemm", T([M, K], F16), T([K // 16, N * 4], I32), T([1, N], F16),
             T([528], I32), S(8), S(M), S(N), S(K))
    assert c is not None and c.flops == FLOPS and c.dtype == "fp16"
    assert c.bytes == M * K * 2 + K * N + N * 2 + M * N * 2


def test_marlin_repack_is_a_relayout_not_a_gemm() -> None:
    # awq_marlin_repack(b_q_weight [K, N/8] int32, size_k, size_n, num_bits, is_a_8bit)
    c = cost("_C::awq_marlin_repack", T([K, N // 8], I32), S(K), S(N), S(4), S(False))
    assert c is not None and c.flops == 0 and c.kind == "copy" and c.dtype == "fp32"
    assert c.bytes == 2 * (K * N // 2)
    # gptq_marlin_repack(b_q_weight [K/8, N] int32, perm [K] int32, size_k, size_n, num_bits)
    c = cost("_C::gptq_marlin_repack", T([K // 8, N], I32), T([K], I32), S(K), S(N), S(4))
    assert c is not None and c.flops == 0 and c.bytes == 2 * (K * N // 2) + K * 4
    assert cost("_C::awq_marlin_repack", T([K, N // 8], I32), S(K), S(N), S(8)) is None


# --------------------------------------------------------------------------------------------
# AWQ, GPTQ, Machete
# --------------------------------------------------------------------------------------------

def test_awq_gemm_packs_along_n() -> None:
    # awq_gemm(_in_feats [M,K] f16, _kernel [K, N/8] int32, _scaling_factors [K/G, N] f16,
    #   _zeros [K/G, N/8] int32, split_k_iters): num_out_channels = _kernel.size(1) * 8
    c = cost("_C::awq_gemm", T([M, K], F16), T([K, N // 8], I32), T([K // G, N], F16),
             T([K // G, N // 8], I32), S(8))
    assert c is not None and c.flops == FLOPS and c.dtype == "fp16" and c.model == "awq_gemm w4a16"
    assert c.bytes == M * K * 2 + K * N // 2 + (K // G) * N * 2 + (K // G) * N // 2 + M * N * 2
    # kernel rows must equal the activations' K; scales must cover N
    assert cost("_C::awq_gemm", T([M, K], F16), T([K // 2, N // 8], I32), T([K // G, N], F16),
                T([K // G, N // 8], I32), S(8)) is None
    assert cost("_C::awq_gemm", T([M, K], F16), T([K, N // 8], I32), T([K // G, N // 2], F16),
                T([K // G, N // 8], I32), S(8)) is None


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_gptq_gemm_packs_along_k(bits: int) -> None:
    # gptq_gemm(a, b_q_weight [K*bit/32, N] int32, b_gptq_qzeros [K/G, N*bit/32] int32,
    #   b_gptq_scales [K/G, N] f16, b_g_idx [K] int32, use_exllama, use_v2_format, bit)
    rows = K * bits // 32
    c = cost("_C::gptq_gemm", T([M, K], F16), T([rows, N], I32),
             T([K // G, N * bits // 32], I32), T([K // G, N], F16), T([K], I32), S(True),
             S(False), S(bits))
    assert c is not None and c.flops == FLOPS and c.dtype == "fp16"
    assert c.model == f"gptq_gemm w{bits}a16"
    assert c.bytes == (M * K * 2 + rows * N * 4 + (K // G) * (N * bits // 32) * 4
                       + (K // G) * N * 2 + K * 4 + M * N * 2)


def test_gptq_gemm_bit_must_match_the_packing() -> None:
    args = [T([M, K], F16), T([K // 8, N], I32), T([K // G, N // 8], I32), T([K // G, N], F16),
            T([K], I32), S(True)]
    assert cost("_C::gptq_gemm", *args, S(4)) is not None  # the older 7-argument schema
    assert cost("_C::gptq_gemm", *args, S(8)) is None      # an int32 row of 8-bit is K/4


def test_machete_mm() -> None:
    # machete_mm(A [M,K], B [K/8, N] int32 (prepacked, same shape), b_type, out_type?,
    #   group_scales?, group_zeros?, group_size?, channel_scales?, token_scales?, schedule?)
    c = cost("_C::machete_mm", T([M, K], BF16), T([K // 8, N], I32), S(3), NONE,
             T([K // G, N], BF16), NONE, S(G), NONE, NONE, NONE)
    assert c is not None and c.flops == FLOPS and c.dtype == "bf16" and c.model == "machete_mm w4a16"
    assert c.bytes == M * K * 2 + K * N // 2 + (K // G) * N * 2 + M * N * 2
    # 8-bit weights: [K/4, N]; fp16 output asked for by code 5
    c = cost("_C::machete_mm", T([M, K], BF16), T([K // 4, N], I32), S(3), S(5),
             T([K // G, N], BF16), T([K // G, N], BF16), S(G), NONE, NONE, NONE)
    assert c is not None and c.model == "machete_mm w8a16"
    assert c.bytes == M * K * 2 + K * N + 2 * (K // G) * N * 2 + M * N * 2


# --------------------------------------------------------------------------------------------
# w8a8 and a4w4: fp8, int8, NVFP4 / MXFP4
# --------------------------------------------------------------------------------------------

def test_cutlass_scaled_mm_fp8_block_scales_and_int8() -> None:
    # cutlass_scaled_mm(out [M,N], a [M,K], b [K,N], a_scales, b_scales, bias?) (gemm.py):
    # DeepSeek-style blocks: a_scales [M, K/128], b_scales [K/128, N/128], all fp32
    c = cost("_C::cutlass_scaled_mm", T([M, N], BF16), T([M, K], FP8), T([K, N], FP8),
             T([M, K // 128], F32), T([K // 128, N // 128], F32), NONE)
    assert c is not None and c.flops == FLOPS and c.dtype == "fp8"
    assert c.bytes == M * K + K * N + M * (K // 128) * 4 + (K // 128) * (N // 128) * 4 + M * N * 2
    c = cost("_C::cutlass_scaled_mm", T([M, N], F16), T([M, K], I8), T([K, N], I8),
             T([M, 1], F32), T([1, N], F32), T([N], F16))
    assert c is not None and c.dtype == "int8"
    assert c.bytes == M * K + K * N + M * 4 + N * 4 + N * 2 + M * N * 2


def test_cutlass_scaled_mm_azp() -> None:
    # cutlass_scaled_mm_azp(out, a int8 [M,K], b int8 [K,N], a_scales [M,1], b_scales [1,N],
    #   azp_adj [N] int32, azp? [M] int32, bias?)
    c = cost("_C::cutlass_scaled_mm_azp", T([M, N], BF16), T([M, K], I8), T([K, N], I8),
             T([M, 1], F32), T([1, N], F32), T([N], I32), T([M], I32), NONE)
    assert c is not None and c.flops == FLOPS and c.dtype == "int8"
    assert c.bytes == M * K + K * N + M * 4 + N * 4 + N * 4 + M * 4 + M * N * 2
    assert cost("_C::cutlass_scaled_mm_azp", T([M, N + 1], BF16), T([M, K], I8), T([K, N], I8),
                T([M, 1], F32), T([1, N], F32), T([N], I32), NONE, NONE) is None


@pytest.mark.parametrize("name", ["_C::cutlass_scaled_fp4_mm", "sgl_kernel::cutlass_scaled_fp4_mm"])
def test_cutlass_scaled_fp4_mm_unpacks_k(name: str) -> None:
    # cutlass_scaled_fp4_mm(out [M,N], a [M,K/2] u8, b [N,K/2] u8, block_scale_a
    #   [round_up(M,128), round_up(K/16,4)] e4m3, block_scale_b [round_up(N,128), ...], alpha [1])
    sf_k = K // 16
    c = cost(name, T([M, N], BF16), T([M, K // 2], U8), T([N, K // 2], U8),
             T([128, sf_k], FP8), T([N, sf_k], FP8), T([1], F32))
    assert c is not None and c.dtype == "fp4" and c.kind == "gemm"
    assert c.flops == FLOPS  # K = 2 * a.size(1): two fp4 per byte
    assert c.bytes == M * K // 2 + N * K // 2 + 128 * sf_k + N * sf_k + 4 + M * N * 2
    assert cost(name, T([M, N], BF16), T([M, K // 2], U8), T([N, K // 4], U8),
                T([128, sf_k], FP8), T([N, sf_k], FP8), T([1], F32)) is None


def test_aten_scaled_mm_fp8_and_fp4() -> None:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    c = cost("aten::_scaled_mm", T([M, K], FP8), T([K, N], FP8), T([], F32), T([], F32),
             NONE, NONE, S(15), S(False))
    assert c is not None and c.flops == FLOPS and c.dtype == "fp8"
    assert c.bytes == M * K + K * N + 4 + 4 + M * N * 2
    # NVFP4 through torch: Float4_e2m1fn_x2 [M, K/2] x [K/2, N], e4m3 block scales per 16
    c = cost("aten::_scaled_mm", T([M, K // 2], FP4X2), T([K // 2, N], FP4X2),
             T([M * K // 16], FP8), T([N * K // 16], FP8), NONE, NONE, S(15), S(False))
    assert c is not None and c.dtype == "fp4" and c.flops == FLOPS
    assert c.bytes == M * K // 2 + K * N // 2 + M * K // 16 + N * K // 16 + M * N * 2


@pytest.mark.parametrize("name,dtype,roof", [("sgl_kernel::fp8_scaled_mm", FP8, "fp8"),
                                             ("sgl_kernel::int8_scaled_mm", I8, "int8")])
def test_sglang_scaled_mm(name: str, dtype: str, roof: str) -> None:
    # {fp8,int8}_scaled_mm(mat_a [M,K], mat_b [K,N], scales_a [M,1], scales_b [N,1],
    #   ScalarType out_dtype, Tensor? bias)
    c = cost(name, T([M, K], dtype), T([K, N], dtype), T([M, 1], F32), T([N, 1], F32), S(15),
             T([N], BF16))
    assert c is not None and c.flops == FLOPS and c.dtype == roof
    assert c.bytes == M * K + K * N + M * 4 + N * 4 + N * 2 + M * N * 2
    # fp16 output (code 5) without bias
    c = cost(name, T([M, K], dtype), T([K, N], dtype), T([M, 1], F32), T([N, 1], F32), S(5), NONE)
    assert c is not None and c.bytes == M * K + K * N + M * 4 + N * 4 + M * N * 2


def test_sglang_fp8_blockwise_scaled_mm() -> None:
    # fp8_blockwise_scaled_mm(mat_a, mat_b, scales_a [M, K/128], scales_b [K/128, N/128], out_dtype)
    c = cost("sgl_kernel::fp8_blockwise_scaled_mm", T([M, K], FP8), T([K, N], FP8),
             T([M, K // 128], F32), T([K // 128, N // 128], F32), S(15))
    assert c is not None and c.flops == FLOPS and c.dtype == "fp8"
    assert c.bytes == M * K + K * N + M * (K // 128) * 4 + (K // 128) * (N // 128) * 4 + M * N * 2


def test_aiter_a8w8() -> None:
    # backend op: gemm_a8w8_ck(XQ [M,K], WQ [N,K], x_scale [M,1], w_scale [1,N], Out [M,N],
    #   bias?, splitK)
    c = cost("aiter::gemm_a8w8_ck", T([M, K], I8), T([N, K], I8), T([M, 1], F32), T([1, N], F32),
             T([M, N], BF16), NONE, S(0))
    assert c is not None and c.flops == FLOPS and c.dtype == "int8"
    assert c.bytes == M * K + N * K + M * 4 + N * 4 + M * N * 2
    # entry op: gemm_a8w8(XQ, WQ, x_scale, w_scale, bias?, dtype, splitK?) returns its output
    c = cost("aiter::gemm_a8w8", T([M, K], FP8), T([N, K], FP8), T([M, 1], F32), T([1, N], F32),
             T([1, N], BF16), S(5), NONE)
    assert c is not None and c.dtype == "fp8"
    assert c.bytes == M * K + N * K + M * 4 + N * 4 + N * 2 + M * N * 2
    # one token: the [1, N] bias of the entry op is read, the output written
    c = cost("aiter::gemm_a8w8", T([1, K], FP8), T([N, K], FP8), T([1, 1], F32), T([1, N], F32),
             T([1, N], BF16), S(15), NONE)
    assert c is not None and c.bytes == K + N * K + 4 + N * 4 + N * 2 + N * 2
    # blockscale: x_scale [M, K/128], w_scale [N/128, K/128]
    c = cost("aiter::gemm_a8w8_blockscale", T([M, K], FP8), T([N, K], FP8),
             T([M, K // 128], F32), T([N // 128, K // 128], F32), S(15), S(False))
    assert c is not None and c.dtype == "fp8"
    assert c.bytes == M * K + N * K + M * (K // 128) * 4 + (N // 128) * (K // 128) * 4 + M * N * 2
    assert cost("aiter::gemm_a8w8_ck", T([M, K], I8), T([N, K + 1], I8), T([M, 1], F32),
                T([1, N], F32), T([M, N], BF16), NONE, S(0)) is None


def test_aiter_a4w4_mxfp4() -> None:
    # gemm_a4w4(A [M,K/2] fp4x2, B [N,K/2] fp4x2, A_scale [M,K/32] e8m0, B_scale [N,K/32] e8m0,
    #   bias?, dtype, alpha, beta, bpreshuffle, apreshuffle, global_A_scale?, global_B_scale?)
    c = cost("aiter::gemm_a4w4", T([M, K // 2], FP4X2), T([N, K // 2], FP4X2),
             T([M, K // 32], E8M0), T([N, K // 32], E8M0), NONE, S(15), S(1.0), S(0.0), S(True),
             S(False), NONE, NONE)
    assert c is not None and c.dtype == "fp4" and c.flops == FLOPS
    assert c.bytes == M * K // 2 + N * K // 2 + M * K // 32 + N * K // 32 + M * N * 2
    # the asm backend takes the output tensor: _gemm_a4w4_asm(A, B, A_scale, B_scale, out, ...)
    c = cost("aiter::_gemm_a4w4_asm", T([M, K // 2], U8), T([N, K // 2], U8),
             T([M, K // 32], U8), T([N, K // 32], U8), T([M, N], BF16), NONE, NONE,
             S(1.0), S(0.0), S(1), S(0))
    assert c is not None and c.dtype == "fp4" and c.flops == FLOPS
    assert c.bytes == M * K // 2 + N * K // 2 + M * K // 32 + N * K // 32 + M * N * 2


def test_fp4_roof_only_where_the_gpu_has_one(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from gpuscope.specs import load_specs

    monkeypatch.delenv("GPUSCOPE_SPECS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    db = load_specs()
    # Blackwell and CDNA4 have an fp4 (and fp6) rate; Hopper and CDNA3 do not
    for key, fp4, fp6 in (("b200", 9e15, 4.5e15), ("gb200", 10e15, 5e15),
                          ("mi355x", 10066.3e12, 10066.3e12), ("mi350x", 9227.5e12, 9227.5e12)):
        s = db.get(key)
        assert s.peak_flops("fp4") == pytest.approx(fp4)
        assert s.peak_flops_per_s_other["fp6"] == pytest.approx(fp6)
        assert s.sources["peak_flops_per_s_other.fp6"] and s.derived["peak_flops_per_s_other.fp6"]
    for key in ("h100-sxm", "h200", "mi300x", "mi325x"):
        s = db.get(key)
        assert s.peak_flops("fp8") and s.peak_flops("fp4") is None
        assert "fp6" not in s.peak_flops_per_s_other


# --------------------------------------------------------------------------------------------
# odd input
# --------------------------------------------------------------------------------------------

QUANTIZED = sorted(n for n in covered_op_names()
                   if any(w in n for w in ("marlin", "awq_gemm", "gptq_gemm", "machete", "scaled_mm",
                                           "fp4_mm", "aiter::gemm_a", "aiter::_gemm_a")))


def test_every_quantized_op_is_covered() -> None:
    for name in ("_C::gptq_marlin_gemm", "_C::marlin_gemm", "_C::awq_marlin_repack", "_C::awq_gemm",
                 "_C::gptq_gemm", "_C::machete_mm", "_C::marlin_qqq_gemm", "_C::cutlass_scaled_fp4_mm",
                 "_C::cutlass_scaled_mm_azp", "_C::cutlass_scaled_mm", "aiter::gemm_a4w4",
                 "aiter::gemm_a8w8", "aiter::gemm_a8w8_blockscale", "sgl_kernel::fp8_scaled_mm",
                 "sgl_kernel::int8_scaled_mm", "sgl_kernel::fp8_blockwise_scaled_mm"):
        assert name in QUANTIZED


@pytest.mark.parametrize("name", QUANTIZED)
def test_odd_input_gives_none_or_a_finite_cost(name: str) -> None:
    odd: list[tuple[Any, Any, Any]] = [
        ([], [], []), ("not json", "[", None), ([[M, K]], [BF16], [""]),
        ([[M, K], [K, N]], [BF16, BF16], ["", ""]), ([[-1, K], [K, -3]], [I8, I8], ["", ""]),
        ([[M, K]] * 20, [BF16] * 20, ["x"] * 20), ([[0, 0]] * 8, [I32] * 8, ["0"] * 8),
        ([[1e9, K]], [FP8], [""]), ([None, {"a": 1}, "x"], [1, None, []], [[], {}, 3]),
        ([[M, K], [], [K // 16, N * 2]] + [[]] * 16, [BF16, "", I32] + ["Scalar"] * 16,
         [""] * 3 + ["True"] * 16),
    ]
    for dims, types, conc in odd:
        c = op_cost(name, dims, types, conc)
        assert c is None or (c.flops is not None and math.isfinite(c.flops) and c.flops >= 0
                             and c.bytes is not None and math.isfinite(c.bytes) and c.bytes >= 0)


# --------------------------------------------------------------------------------------------
# PyTorch's quantized mms, recorded for real (CPU, torch.profiler with record_shapes)
# --------------------------------------------------------------------------------------------

def test_torch_quantized_mms_as_the_profiler_records_them(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    import json

    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    m, k, n, g = 8, 256, 128, 64
    x = torch.randn(m, k, dtype=torch.bfloat16)
    w8 = torch.randint(-128, 127, (n, k), dtype=torch.int8)
    s8 = torch.rand(n, dtype=torch.bfloat16)
    a8 = torch.randn(m, k).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    ran: set[str] = set()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch._weight_int8pack_mm(x, w8, s8)
        ran.add("aten::_weight_int8pack_mm")
        try:  # the int4 CPU kernel and the fp8 mms are not in every build
            w4 = torch._convert_weight_to_int4pack_for_cpu(
                torch.randint(0, 16, (n, k), dtype=torch.int32), 2)
            torch._weight_int4pack_mm_for_cpu(x, w4, g, torch.rand(k // g, n, 2, dtype=torch.bfloat16))
            ran.add("aten::_weight_int4pack_mm_for_cpu")
        except (RuntimeError, AttributeError):
            pass
        try:
            torch._scaled_mm(a8, b8, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.bfloat16)
            ran.add("aten::_scaled_mm")
        except (RuntimeError, NotImplementedError):
            pass
        try:
            import torch.nn.functional as F

            F.scaled_mm(a8, b8, torch.ones(m, 1), F.ScalingType.RowWise, torch.ones(1, n),
                        F.ScalingType.RowWise, output_dtype=torch.bfloat16)
            ran.add("aten::_scaled_mm_v2")
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            pass
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    rows = {e["name"]: e["args"] for e in json.loads(path.read_text())["traceEvents"]
            if e.get("cat") == "cpu_op" and e.get("name") in ran}
    assert set(rows) == ran

    def recorded(name: str):
        a = rows[name]
        return op_cost(name, a["Input Dims"], a["Input type"], a.get("Concrete Inputs"),
                       a.get("Input Strides"))

    c = recorded("aten::_weight_int8pack_mm")
    assert c is not None and c.flops == 2 * m * n * k and c.dtype == "bf16"
    assert c.bytes == m * k * 2 + n * k + n * 2 + m * n * 2
    if "aten::_weight_int4pack_mm_for_cpu" in ran:  # packed [N, K/2] uint8 on CPU
        c = recorded("aten::_weight_int4pack_mm_for_cpu")
        assert c is not None and c.flops == 2 * m * n * k and c.dtype == "bf16"
        assert c.bytes == m * k * 2 + n * k // 2 + (k // g) * n * 2 * 2 + m * n * 2
    if "aten::_scaled_mm" in ran:
        with FlopCounterMode(display=False) as fc:
            torch._scaled_mm(a8, b8, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.bfloat16)
        c = recorded("aten::_scaled_mm")
        assert c is not None and c.flops == fc.get_total_flops() == 2 * m * n * k
        assert c.dtype == "fp8" and c.bytes == m * k + k * n + 4 + 4 + m * n * 2
    if "aten::_scaled_mm_v2" in ran:  # fp32 row-wise scales (recipe 1), read from the recipe
        c = recorded("aten::_scaled_mm_v2")
        assert c is not None and c.flops == 2 * m * n * k and c.dtype == "fp8"
        assert c.bytes == m * k + k * n + m * 4 + n * 4 + m * n * 2


def test_scaled_mm_v2_recipes() -> None:
    def v2(a, b, scales_a, recipe_a, scales_b, recipe_b, out_code="15"):
        dims = [a[0], b[0], scales_a, [], [], scales_b, [], [], [], [], [], []]
        types = [a[1], b[1], "TensorList", "ScalarList", "ScalarList", "TensorList", "ScalarList",
                 "ScalarList", "", "Scalar", "ScalarList", "Scalar"]
        conc = ["", "", "", str(recipe_a), "[]", "", str(recipe_b), "[]", "", out_code, "[]", "False"]
        return op_cost("aten::_scaled_mm_v2", dims, types, conc)

    # MXFP8: BlockWise1x32 (3), e8m0 scales [M, K/32] and [N, K/32]: one byte each
    c = v2(([M, K], FP8), ([K, N], FP8), [[M, K // 32]], [3], [[N, K // 32]], [3])
    assert c is not None and c.dtype == "fp8" and c.flops == FLOPS
    assert c.bytes == M * K + K * N + M * K // 32 + N * K // 32 + M * N * 2
    # NVFP4: packed [M, K/2] x [K/2, N]; e4m3 1x16 blocks (2) plus an fp32 tensor-wise scale (0)
    c = v2(([M, K // 2], FP4X2), ([K // 2, N], FP4X2), [[M * K // 16], []], [2, 0],
           [[N * K // 16], []], [2, 0])
    assert c is not None and c.dtype == "fp4" and c.flops == FLOPS
    assert c.bytes == M * K // 2 + K * N // 2 + M * K // 16 + 4 + N * K // 16 + 4 + M * N * 2
    # a recipe per scale, or no cost
    assert v2(([M, K], FP8), ([K, N], FP8), [[M, 1]], [1, 1], [[1, N]], [1]) is None
    assert v2(([M, K], FP8), ([K, N], FP8), [[M, 1]], [9], [[1, N]], [1]) is None
