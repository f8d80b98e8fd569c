"""Cost models of serving-engine ops (analyzers/costmodel/engines.py, engine_attention.py).

Every expected number is computed by hand from the op's documented semantics (its schema in
vLLM's ``csrc/torch_bindings.cpp``, AITER's ``aiter/ops``, triton_kernels' ``topk.py`` /
``routing.py``); the decode attention bytes are also checked against AMD TraceLens's
``InferenceAttention`` formula for generation requests, written out here. Real recorded
signatures come from the shared vLLM trace (skipped when ../shared/data/traces is absent).
"""
from __future__ import annotations

import gzip
import json
from typing import Any

from gpuscope.analyzers.costmodel import op_cost
from gpuscope.analyzers.coverage import REASONS, reason_for_op
from gpuscope.analyzers.modelspec import ModelSpec

from conftest import shared_trace

BF16 = "c10::BFloat16"


def _tracelens_decode_bytes(seqs: int, ctx: int, hq: int, hkv: int, d: int, bpe: int,
                            bpe_kv: int) -> float:
    """TraceLens InferenceAttention.bytes_func for generation requests only (g_sq = seqs,
    g_sk = seqs x ctx): Q read, O written, the new token's K/V in Q's dtype, the cached rest in
    the KV cache's."""
    g_sq, g_sk = seqs, seqs * ctx
    return (g_sq * hq * d * 2 + g_sq * hkv * d * 2) * bpe + (g_sk - g_sq) * hkv * d * 2 * bpe_kv


# ------------------------------------------------------------------------------------------
# vLLM paged attention
# ------------------------------------------------------------------------------------------

# 4 decode sequences, 8 query heads, 2 KV heads, head size 64, 10 blocks of 16 tokens;
# key cache [blocks, Hkv, D/x, block, x] with x = 8, value cache [blocks, Hkv, D, block]
_Q = [4, 8, 64]
_KC = [10, 2, 8, 16, 8]
_VC = [10, 2, 64, 16]


def _v1(kc_type: str = BF16, kv_dtype: str = "auto", hkv: str = "2") -> tuple[list, list, list]:
    # paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables,
    #     seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale, ...)
    dims = [_Q, _Q, _KC, _VC, [], [], [4, 4], [4], [], [], [], [], [], []]
    types = [BF16, BF16, kc_type, kc_type, "Scalar", "Scalar", "int", "int", "Scalar", "Scalar",
             "", "str", "float", "float"]
    conc = ["", "", "", "", hkv, "0.125", "", "", "16", "50", "", kv_dtype, "", ""]
    return dims, types, conc


def test_paged_attention_v1_decode_by_hand_and_tracelens() -> None:
    dims, types, conc = _v1()
    cost = op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32)
    assert cost is not None
    # QK^T and PV: 2 x T x Hq x C x (D + D) = 2 * 4 * 8 * 32 * 128
    assert cost.flops == 262144
    assert cost.flops_executed == cost.flops
    # q 4*8*64*2 + out 4*8*64*2 + KV 4 seqs * 32 tokens * 2 heads * (64 + 64) * 2 B + seq_lens 16
    assert cost.bytes == 4096 + 4096 + 65536 + 16
    assert cost.dtype == "bf16" and cost.kind == "attention"
    assert "estimate" in cost.model and "--context 32" in cost.model
    # TraceLens's decode formula (equal Q and KV dtypes) agrees within 1 %
    ref = _tracelens_decode_bytes(4, 32, 8, 2, 64, 2, 2)
    assert abs(cost.bytes - ref) / ref < 0.01


def test_paged_attention_needs_context_and_ignores_max_seq_len() -> None:
    dims, types, conc = _v1()
    assert op_cost("_C::paged_attention_v1", dims, types, conc) is None
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=0) is None
    # the recorded max_seq_len (50) plays no part: the same cost whatever it says
    conc2 = list(conc)
    conc2[9] = "4096"
    a = op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32)
    b = op_cost("_C::paged_attention_v1", dims, types, conc2, context_tokens=32)
    assert a == b


def test_paged_attention_fp8_cache_reads_one_byte() -> None:
    dims, types, conc = _v1(kc_type="unsigned char", kv_dtype="fp8")
    cost = op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32)
    assert cost is not None
    assert cost.bytes == 4096 + 4096 + 65536 // 2 + 16


def test_paged_attention_odd_inputs_give_none() -> None:
    dims, types, conc = _v1(hkv="3")  # 8 query heads are not a multiple of 3 KV heads
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32) is None
    dims, types, conc = _v1(hkv="4")  # the cache holds 2 heads x 64 per token, not 4 x 64
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32) is None
    dims, types, conc = _v1()
    conc[8] = ""  # no block size
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32) is None
    dims, types, conc = _v1()
    dims[1] = [4, 512]  # a query that is not [T, H, D]
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32) is None


def test_paged_attention_v2_and_rocm_argument_positions() -> None:
    # v2(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache, num_kv_heads, scale,
    #    block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, ...)
    dims = [_Q, [4, 8, 2], [4, 8, 2], [4, 8, 2, 64], _Q, _KC, _VC, [], [], [4, 4], [4], [], [],
            [], []]
    types = [BF16, "float", "float", BF16, BF16, BF16, BF16, "Scalar", "Scalar", "int", "int",
             "Scalar", "Scalar", "", "str"]
    conc = ["", "", "", "", "", "", "", "2", "0.125", "", "", "16", "50", "", "auto"]
    cost = op_cost("_C::paged_attention_v2", dims, types, conc, context_tokens=32)
    assert cost is not None and cost.flops == 262144 and cost.bytes == 4096 + 4096 + 65536 + 16
    # ROCm: (..., block_tables, seq_lens, query_start_loc?, block_size, max_seq_len, ...); with
    # query_start_loc [3] the 8 query tokens belong to 2 sequences (speculative decode)
    q8 = [8, 8, 64]
    dims = [q8, [8, 8, 2], [8, 8, 2], [8, 8, 2, 64], q8, _KC, _VC, [], [], [2, 4], [2], [3], [],
            [], [], []]
    types = [BF16, "float", "float", BF16, BF16, BF16, BF16, "Scalar", "Scalar", "int", "int", "int",
             "Scalar", "Scalar", "", "str"]
    conc = ["", "", "", "", "", "", "", "2", "0.125", "", "", "", "16", "50", "", "auto"]
    cost = op_cost("_rocm_C::paged_attention", dims, types, conc, context_tokens=32)
    assert cost is not None
    assert cost.flops == 2 * 8 * 8 * 32 * 128
    # q and out 8*8*64*2 each, KV of 2 sequences: 2 * 32 * 2 * 128 * 2, seq_lens 2 * 4
    assert cost.bytes == 8192 + 8192 + 32768 + 8


def test_sliding_window_layers_shorten_the_span() -> None:
    # a model whose every other layer attends to a 16-token window: the mean span over its
    # layers is (16 + 32) / 2 = 24 tokens at --context 32
    spec = ModelSpec(sliding_window=16, layer_types=("sliding_attention", "full_attention"))
    dims, types, conc = _v1()
    cost = op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32, model=spec)
    assert cost is not None
    assert cost.flops == 2 * 4 * 8 * 24 * 128
    assert cost.bytes == 4096 + 4096 + 4 * 24 * 2 * 128 * 2 + 16
    assert "sliding window 16 on 1 of 2 layers" in cost.model
    # a window longer than the context changes nothing
    wide = ModelSpec(sliding_window=4096, layer_types=("sliding_attention", "full_attention"))
    assert op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32, model=wide) \
        == op_cost("_C::paged_attention_v1", dims, types, conc, context_tokens=32)


def test_aiter_paged_attention_ragged() -> None:
    # paged_attention_ragged(out, workspace_buffer, query, key_cache, value_cache, scale,
    #     kv_indptr, kv_page_indices, kv_last_page_lens, block_size, max_num_partitions,
    #     alibi_slopes, kv_cache_dtype, kv_cache_layout, ...): NHD cache [pages, 16, Hkv, D]
    dims = [_Q, [1024], _Q, [10, 16, 2, 64], [10, 16, 2, 64], [], [5], [40], [4], [], [], [], [],
            []]
    types = [BF16, "unsigned char", BF16, BF16, BF16, "Scalar", "int", "int", "int", "Scalar",
             "Scalar", "", "str", "str"]
    conc = ["", "", "", "", "", "0.125", "", "", "", "16", "4", "", "auto", "NHD"]
    cost = op_cost("aiter::paged_attention_ragged", dims, types, conc, context_tokens=32)
    assert cost is not None
    assert cost.flops == 262144
    assert cost.bytes == 4096 + 4096 + 65536 + 16  # kv_last_page_lens [4] int32 read
    assert op_cost("aiter::paged_attention_ragged", dims, types, conc) is None


# ------------------------------------------------------------------------------------------
# AITER batch prefill
# ------------------------------------------------------------------------------------------

def _prefill(tq: int, batch: int, max_k: int, causal: bool, k: list[int] | None = None) -> Any:
    # mha_batch_prefill(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
    #     max_seqlen_k, dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal, ...)
    kd = k or [1000, 2, 64]
    dims = [[tq, 8, 64], kd, kd, [batch + 1], [batch + 1], [max_k], [], [], [], [], [], [], []]
    types = [BF16, BF16, BF16, "int", "int", "int"] + ["Scalar"] * 7
    conc = ["", "", "", "", "", "", str(tq), str(max_k), "0", "0.125", "0", "False", str(causal)]
    return op_cost("aiter::mha_batch_prefill", dims, types, conc)


def test_mha_batch_prefill_one_sequence_exact() -> None:
    # one sequence: 100 new tokens over 300 keys (200 cached), causal (bottom-right)
    cost = _prefill(100, 1, 300, True)
    assert cost is not None
    assert cost.flops == 2 * 8 * 128 * 100 * 300
    # unmasked scores: 100 * 200 (prefix) + 100 * 101 / 2 = 25050
    assert cost.flops_executed == 2 * 8 * 128 * 25050
    # q and out 100*8*64*2 each; 300 keys and values, 2 heads x 64, bf16
    assert cost.bytes == 102400 + 102400 + 300 * 2 * 128 * 2
    assert cost.dtype == "bf16"
    # 4-D paged [pages, page, Hkv, D] layout: the same numbers
    assert _prefill(100, 1, 300, True, k=[100, 16, 2, 64]) == cost


def test_mha_batch_prefill_batch_is_a_lower_bound() -> None:
    # two sequences, really q = (30, 70) with k = (30, 270): the model does not know the
    # split, so its numbers must stay at or under the truth
    cost = _prefill(100, 2, 270, True)
    assert cost is not None
    true_scores = 30 * 30 + 70 * 270
    true_kept = (30 * 30 - (30 * 30 - 30) / 2) + (70 * 270 - (70 * 70 - 70) / 2)
    true_bytes = 102400 + 102400 + (30 + 270) * 2 * 128 * 2
    assert cost.flops <= 2 * 8 * 128 * true_scores
    assert cost.flops_executed <= 2 * 8 * 128 * true_kept
    assert cost.bytes <= true_bytes
    # and it is what the bounds say: sum q k >= 100^2 / 2, keys >= max(100, 270)
    assert cost.flops == 2 * 8 * 128 * 5000
    assert cost.bytes == 102400 + 102400 + 270 * 2 * 128 * 2
    assert "lower bound" in cost.model


def test_mha_batch_prefill_odd_inputs() -> None:
    assert _prefill(100, 1, 50, True) is None  # more causal queries than keys
    assert _prefill(100, 1, 300, True, k=[1000, 3, 64]) is None  # 8 heads over 3 KV heads
    assert _prefill(100, 1, 300, True, k=[1000, 2, 32]) is None  # head size mismatch
    assert _prefill(100, 0, 300, True) is None  # no sequences


# ------------------------------------------------------------------------------------------
# triton_kernels routing (gpt-oss MoE in vLLM)
# ------------------------------------------------------------------------------------------

def test_topk_routing_by_hand() -> None:
    # the signature recorded in the shared vLLM trace: logits [32, 32] bf16, k = 4
    dims = [[32, 32], [], [], [], [], [], []]
    types = [BF16, "Scalar", "Scalar", "Scalar", "Scalar", "", ""]
    conc = ["", "4", "True", "1", "True", "", ""]
    cost = op_cost("TopK", dims, types, conc)
    assert cost is not None
    # read 32*32*2; write values 32*4*2, int16 indices 32*4*2, bitmatrix 32 rows x 1 word x 4
    assert cost.bytes == 2048 + 256 + 256 + 128
    # one compare per logit, softmax over the 4 chosen (5 each)
    assert cost.flops == 1024 + 5 * 128
    assert "estimate" in cost.model and cost.dtype == "fp32"
    no_bits = list(conc)
    no_bits[4] = "False"
    assert op_cost("TopK", dims, types, no_bits).bytes == 2048 + 512  # type: ignore[union-attr]
    bad = list(conc)
    bad[1] = "33"  # k above the experts
    assert op_cost("TopK", dims, types, bad) is None
    assert op_cost("TopK", [[32, 32, 2]] + dims[1:], types, conc) is None


def test_sort_tokens_by_hand() -> None:
    # shared vLLM trace: SortTokens(expt_scal [32, 4] bf16, expt_indx [32, 4] int16, 32)
    dims, types, conc = [[32, 4], [32, 4], []], [BF16, "short int", "Scalar"], ["", "", "32"]
    cost = op_cost("SortTokens", dims, types, conc)
    assert cost is not None
    # read scales 256 + indices 256 + bitmatrix 32*1*4; write gate scales 128*2, gather and
    # scatter indices 2*128*4, histogram 32*4
    assert cost.bytes == 256 + 256 + 128 + 256 + 1024 + 128
    assert cost.flops == 256
    # the expert count from --model when the scalar is not recorded
    assert op_cost("SortTokens", dims, types, ["", "", ""]) is None
    spec = ModelSpec(num_experts=32)
    assert op_cost("SortTokens", dims, types, ["", "", ""], model=spec) == cost
    assert op_cost("SortTokens", [[32, 4], [32, 2], []], types, conc) is None


# ------------------------------------------------------------------------------------------
# activations, fused QK norm + rope, AITER GEMM
# ------------------------------------------------------------------------------------------

def test_gelu_variants_and_gated_ones() -> None:
    dims, types = [[16, 128], [16, 128]], [BF16, BF16]
    for name, per in (("_C::gelu_new", 9), ("_C::gelu_fast", 9), ("_C::gelu_quick", 5)):
        cost = op_cost(name, dims, types, ["", ""])
        assert cost is not None and cost.flops == per * 2048 and cost.bytes == 2 * 4096
    assert op_cost("_C::gelu_new", [[16, 128], [16, 64]], types, ["", ""]) is None
    gated = op_cost("_C::swigluoai_and_mul", [[16, 64], [16, 128], [], []],
                    [BF16, BF16, "Scalar", "Scalar"], ["", "", "1.702", "7.0"])
    assert gated is not None and gated.flops == 10 * 1024 and gated.bytes == 4096 + 2048
    fat = op_cost("_C::fatrelu_and_mul", [[16, 64], [16, 128], []], [BF16, BF16, "Scalar"],
                  ["", "", "0.0"])
    assert fat is not None and fat.flops == 2 * 1024


def test_fused_qk_norm_rope_by_hand() -> None:
    # qkv [4 tokens, (8 + 2 + 2) heads x 64], rotary over 64 dims, cache [4096, 64] bf16
    dims = [[4, 768], [], [], [], [], [], [64], [64], [4096, 64], [], [4]]
    types = [BF16, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", BF16, BF16, BF16, "Scalar",
             "long int"]
    conc = ["", "8", "2", "2", "64", "1e-6", "", "", "", "True", ""]
    cost = op_cost("_C::fused_qk_norm_rope", dims, types, conc)
    assert cost is not None
    normed = 4 * 10 * 64
    # q and k read and written (2 B), the two weights, the positions, 4 cache rows of 64
    assert cost.bytes == 2 * normed * 2 + 128 + 128 + 32 + 4 * 64 * 2
    # RMSNorm per head (rows x (2C + 2) + 2 per element) and rotary 3 per rotated element
    assert cost.flops == 40 * (2 * 64 + 2) + 2 * normed + 3 * normed
    conc[1] = "9"  # heads that do not add up to the qkv width
    assert op_cost("_C::fused_qk_norm_rope", dims, types, conc) is None


def test_aiter_gemm_a16w16_by_hand() -> None:
    # out [8, 5, 512] = A [8, 5, 256] @ B[512, 256]^T: 2 M N K, as FlopCounterMode counts
    # F.linear (tests/test_costmodel.py checks aten::linear against it)
    cost = op_cost("aiter::gemm_a16w16", [[8, 5, 256], [512, 256], [], [], [], [], []],
                   [BF16, BF16, "", "", "", "", ""], ["", "", "", "", "", "", ""])
    assert cost is not None and cost.flops == 2 * 40 * 512 * 256
    assert cost.bytes == 40 * 256 * 2 + 512 * 256 * 2 + 40 * 512 * 2
    assert cost.dtype == "bf16" and cost.kind == "gemm"
    # out dtype float (ScalarType code 6) and a bias
    cost = op_cost("aiter::gemm_a16w16", [[40, 256], [512, 256], [512]], [BF16, BF16, BF16, "Scalar"],
                   ["", "", "", "6"])
    assert cost is not None and cost.bytes == 40 * 256 * 2 + 512 * 256 * 2 + 1024 + 40 * 512 * 4
    assert op_cost("aiter::gemm_a16w16", [[40, 255], [512, 256]], [BF16, BF16], ["", ""]) is None


# ------------------------------------------------------------------------------------------
# coverage reason, and the signatures the shared vLLM trace records
# ------------------------------------------------------------------------------------------

def test_attention_without_context_says_needs_context() -> None:
    dims, types, conc = _v1()
    assert reason_for_op("_C::paged_attention_v1", json.dumps(dims), json.dumps(conc)) == "needs_context"
    assert reason_for_op("vllm::unified_attention_with_output",
                         "[[32,64,64],[32,8,64],[32,8,64],[32,64,64],[],[],[],[0]]",
                         '["","","","","","","",""]') == "needs_context"
    assert "--context" in REASONS["needs_context"]


def _first_args(path: Any, names: set[str]) -> dict[str, dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    found: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("name") in names and e.get("name") not in found and "Input Dims" in e.get("args", {}):
            found[e["name"]] = e["args"]
    return found


def test_shared_vllm_trace_routing_signatures() -> None:
    path = shared_trace("tracelens/vllm_decode_cudagraph/graph_capture_rank_0.pt.trace.json.gz")
    args = _first_args(path, {"TopK", "SortTokens"})
    assert set(args) == {"TopK", "SortTokens"}
    top = args["TopK"]
    cost = op_cost("TopK", top["Input Dims"], top["Input type"], top.get("Concrete Inputs"))
    assert cost is not None and cost.bytes == 2688 and cost.flops == 1664
    srt = args["SortTokens"]
    cost = op_cost("SortTokens", srt["Input Dims"], srt["Input type"], srt.get("Concrete Inputs"))
    assert cost is not None and cost.bytes == 2048


def test_topk_softmax_vllm_and_sglang_layouts() -> None:
    # vLLM _moe_C::topk_softmax(weights [32, 4] fp32, indices [32, 4] int32,
    # token_expert_indices [32, 4] int32, gating [32, 32] bf16, renormalize)
    cost = op_cost("_moe_C::topk_softmax", [[32, 4], [32, 4], [32, 4], [32, 32], []],
                   ["float", "int", "int", BF16, "Scalar"], ["", "", "", "", "True"])
    assert cost is not None
    assert cost.bytes == 32 * 32 * 2 + 3 * 32 * 4 * 4  # logits read, three [T, k] int32/fp32 writes
    assert cost.flops == 5 * 32 * 32
    # SGLang: no token_expert_indices, gating is argument 2
    cost = op_cost("sgl_kernel::topk_softmax", [[32, 4], [32, 4], [32, 32], []],
                   ["float", "int", BF16, "Scalar"], ["", "", "", "True"])
    assert cost is not None and cost.bytes == 2048 + 2 * 512
    assert op_cost("sgl_kernel::topk_softmax", [[32, 4], [32, 4], [16, 32], []],
                   ["float", "int", BF16, "Scalar"], ["", "", "", "True"]) is None


def test_moe_align_block_size_lower_bound() -> None:
    # topk_ids [32, 4] int32, 8 experts, block 16: sorted_token_ids padded to 128 + 8 * 15
    dims = [[32, 4], [], [], [248], [16], [1]]
    types = ["int", "Scalar", "Scalar", "int", "int", "int"]
    cost = op_cost("_moe_C::moe_align_block_size", dims, types, ["", "8", "16", "", "", ""])
    assert cost is not None
    assert cost.bytes == 512 + 128 * 4 + 8 * 4 and "lower bound" in cost.model
    assert op_cost("_moe_C::moe_align_block_size", dims, types, ["", "", "16", "", "", ""]) is None


def test_sglang_rope_and_gemma_norms() -> None:
    # q [4, 8, 128], k [4, 2, 128] bf16, rotated into q_rope / k_rope, cache [4096, 128] fp32
    dims = [[4, 8, 128], [4, 2, 128], [4, 8, 128], [4, 2, 128], [4096, 128], [4], [], [], []]
    types = [BF16, BF16, BF16, BF16, "float", "long int", "Scalar", "Scalar", "Scalar"]
    conc = [""] * 6 + ["False", "False", "0"]
    cost = op_cost("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", dims, types, conc)
    assert cost is not None
    # q and k read (8192 + 2048), q_rope and k_rope written (same), positions 32, 4 rows x 128 fp32
    assert cost.bytes == 2 * (8192 + 2048) + 32 + 4 * 128 * 4
    assert cost.flops == 3 * 4 * 10 * 128
    norm = op_cost("sgl_kernel::gemma_rmsnorm", [[4, 64], [4, 64], [64], [], []],
                   [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1e-6", "False"])
    plain = op_cost("sgl_kernel::rmsnorm", [[4, 64], [4, 64], [64], [], []],
                    [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1e-6", "False"])
    assert norm is not None and norm == plain and norm.bytes == 512 + 128 + 512


def test_mla_decode_latent_row_is_key_and_value() -> None:
    # SGLang cutlass_mla_decode(out [4, 16, 512], q_nope [4, 16, 512], q_pe [4, 16, 64],
    # kv_c_and_k_pe_cache [100 pages, 64, 576], seq_lens [4], page_table, workspace, ...)
    dims = [[4, 16, 512], [4, 16, 512], [4, 16, 64], [100, 64, 576], [4], [4, 8], [1000], [], []]
    types = [BF16, BF16, BF16, BF16, "int", "int", "unsigned char", "Scalar", "Scalar"]
    cost = op_cost("sgl_kernel::cutlass_mla_decode", dims, types, [""] * 9, context_tokens=100)
    assert cost is not None
    # scores over 576 dims and the weighted sum over 512: 2 * 4 * 16 * 100 * (576 + 512)
    assert cost.flops == 13926400
    # q_nope + q_pe + out + one 576-element latent row per KV token (not K and V apart) + seq_lens
    assert cost.bytes == 65536 + 8192 + 65536 + 4 * 100 * 576 * 2 + 16
    assert op_cost("sgl_kernel::cutlass_mla_decode", dims, types, [""] * 9) is None
    dims[3] = [100, 64, 512]  # a cache row that is not q's 576
    assert op_cost("sgl_kernel::cutlass_mla_decode", dims, types, [""] * 9, context_tokens=100) is None
    # vLLM ROCm: rocm_aiter_mla_decode_fwd(q [4, 16, 576], kv_buffer [1000, 1, 1, 576], o, qo_indptr [5])
    cost = op_cost("vllm::rocm_aiter_mla_decode_fwd",
                   [[4, 16, 576], [1000, 1, 1, 576], [4, 16, 512], [5], [], [5], [400], [4]],
                   [BF16, BF16, BF16, "int", "Scalar", "int", "int", "int"], [""] * 8,
                   context_tokens=100)
    assert cost is not None and cost.flops == 13926400
    assert cost.bytes == 4 * 16 * 576 * 2 + 65536 + 4 * 100 * 576 * 2 + 20


def test_aiter_paged_attention_v1_layout_and_recorded_window() -> None:
    # aiter paged_attention_v1(out, workspace, query, key_cache, value_cache, scale,
    #     block_tables, cu_query_lens, context_lens, max_context_len, alibi, kv_cache_dtype,
    #     kv_cache_layout, logits_soft_cap, k_scale, v_scale, fp8_out_scale, partition_size,
    #     mtp, sliding_window): an HND cache [10 blocks, 2 heads, 16 tokens, 64]
    dims = [_Q, [1024], _Q, [10, 2, 16, 64], [10, 2, 16, 64], [], [4, 4], [], [4], [], [], [],
            [], [], [], [], [], [], [], []]
    types = [BF16, "unsigned char", BF16, BF16, BF16, "Scalar", "int", "", "int", "Scalar", "",
             "str", "str", "Scalar", "float", "float", "", "Scalar", "Scalar", "Scalar"]
    conc = [""] * 5 + ["0.125", "", "", "", "50", "", "auto", "HND", "0", "", "", "", "256", "1",
                       "0"]
    cost = op_cost("aiter::paged_attention_v1", dims, types, conc, context_tokens=32)
    assert cost is not None and cost.flops == 262144 and cost.bytes == 4096 + 4096 + 65536 + 16
    # a recorded 16-token window: each sequence reads 16 tokens, not 32
    conc[19] = "16"
    cost = op_cost("aiter::paged_attention_v1", dims, types, conc, context_tokens=32)
    assert cost is not None and cost.flops == 131072 and cost.bytes == 4096 + 4096 + 32768 + 16
    assert "--context 32" in cost.model and "sliding window 16" in cost.model
    conc[12] = "XYZ"  # a layout it does not know
    assert op_cost("aiter::paged_attention_v1", dims, types, conc, context_tokens=32) is None
