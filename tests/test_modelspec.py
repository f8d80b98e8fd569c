"""The model from a Hugging Face config.json (issue 28, point 3): ``analyzers/modelspec.py`` and
the MoE cost models that use it (``analyzers/costmodel/moe.py``). Every expected number is
computed by hand from the config and the op's documented semantics."""
from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import FIXTURES
from gpuscope.analyzers.costmodel import op_cost
from gpuscope.analyzers.coverage import reason_for_op
from gpuscope.analyzers.modelspec import ModelSpec, expected_experts_touched, infer_tensor_parallel, model_spec
from gpuscope.errors import InputError

MODELS = FIXTURES / "models"
BF16 = "c10::BFloat16"


def _load(name: str) -> dict[str, Any]:
    return json.loads((MODELS / f"{name}.config.json").read_text())


def test_gpt_oss_20b_config() -> None:
    spec = model_spec(_load("gpt-oss-20b"), name="gpt-oss-20b")
    assert (spec.model_type, spec.hidden_size, spec.num_layers) == ("gpt_oss", 2880, 24)
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (64, 8, 64)
    assert (spec.num_experts, spec.experts_per_token) == (32, 4)
    # gpt-oss has no dense MLP: intermediate_size is each expert's
    assert (spec.intermediate_size, spec.moe_intermediate_size) == (None, 2880)
    assert spec.quant_method == "mxfp4"
    assert spec.expert_weight_bits == 4.25  # 4-bit values + one 8-bit scale per 32
    assert spec.dense_weight_bits == 16.0   # attention, router, embeddings stay bf16
    assert spec.sliding_window == 128 and spec.layer_types is not None and len(spec.layer_types) == 24
    # one expert: gate+up [2 x 2880, 2880] and down [2880, 2880] at 4.25 bits
    assert spec.expert_weight_bytes() == 3 * 2880 * 2880 * 4.25 / 8 == 13_219_200


def test_qwen3_dense_and_moe_configs() -> None:
    dense = model_spec(_load("Qwen3-8B"))
    assert (dense.hidden_size, dense.intermediate_size, dense.num_layers) == (4096, 12288, 36)
    assert (dense.num_attention_heads, dense.num_kv_heads, dense.head_dim) == (32, 8, 128)
    assert not dense.is_moe and dense.expert_weight_bytes() is None
    assert (dense.weight_dtype, dense.dense_weight_bits) == ("bf16", 16.0)
    assert dense.sliding_window is None  # written, but use_sliding_window is false
    moe = model_spec(_load("Qwen3-30B-A3B"))
    assert (moe.num_experts, moe.experts_per_token, moe.norm_topk_prob) == (128, 8, True)
    assert (moe.intermediate_size, moe.moe_intermediate_size) == (6144, 768)
    assert moe.expert_weight_bytes() == 3 * 2048 * 768 * 2


def test_mixtral_nested_multimodal_and_deepseek_v3() -> None:
    mixtral = model_spec({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
                          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                          "num_local_experts": 8, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"})
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.moe_intermediate_size) == (8, 2, 14336)
    assert mixtral.head_dim == 128 and mixtral.expert_weight_bits == 16.0
    vl = model_spec({"model_type": "llava", "torch_dtype": "float16",
                     "text_config": {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 24,
                                     "num_attention_heads": 32, "intermediate_size": 8192},
                     "vision_config": {"hidden_size": 1152}})
    assert (vl.model_type, vl.hidden_size, vl.num_kv_heads, vl.head_dim, vl.weight_dtype) == ("llama", 2048, 32, 64, "fp16")
    ds = model_spec({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
                     "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                     "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                     "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
                     "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                     "torch_dtype": "bfloat16",
                     "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                             "weight_block_size": [128, 128]}})
    assert (ds.num_experts, ds.num_shared_experts, ds.first_dense_layers) == (256, 1, 3)
    assert (ds.kv_lora_rank, ds.q_lora_rank, ds.qk_rope_head_dim, ds.qk_nope_head_dim, ds.v_head_dim) == \
        (512, 1536, 64, 128, 128)
    assert ds.head_dim == 192  # MLA: the query/key head is nope + rope
    assert ds.expert_weight_bits == ds.dense_weight_bits == 8 + 32 / (128 * 128)  # fp32 scale per block


@pytest.mark.parametrize(("quant", "bits"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 4 + (16 + 4) / 128),
    ({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": False}, 4 + 16 / 64),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, 4 + (16 + 4) / 128),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, 8.0),
    ({"quant_method": "fp8"}, 8.0),
    ({"quant_method": "bitsandbytes"}, None),
])
def test_bits_per_weight_include_scales(quant: dict[str, Any], bits: float | None) -> None:
    spec = model_spec({"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
                       "intermediate_size": 512, "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 256, "quantization_config": quant})
    assert spec.expert_weight_bits == bits and spec.dense_weight_bits == bits


@pytest.mark.parametrize(("config", "words"), [
    ([1, 2], "not a JSON object"),
    ({"model_type": "vit", "image_size": 224}, "no hidden_size"),
    ({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5},
     "not a multiple of num_key_value_heads"),
    ({"hidden_size": 1000, "num_hidden_layers": 2, "num_attention_heads": 3}, "no head_dim"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_local_experts": 8,
      "num_experts_per_tok": 9, "intermediate_size": 32}, "more than the 8 experts"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 8,
      "intermediate_size": 32}, "no num_experts_per_tok"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "layer_types": ["full_attention"]},
     "1 entries for 2 layers"),
    ({"hidden_size": True, "num_hidden_layers": 2, "num_attention_heads": 4}, "not a whole number"),
    ({"hidden_size": 64.5, "num_hidden_layers": 2, "num_attention_heads": 4}, "not a whole number"),
    ({"hidden_size": -64, "num_hidden_layers": 2, "num_attention_heads": 4}, "out of range"),
    ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "quantization_config": {"bits": 4}},
     "no quant_method"),
])
def test_bad_configs_are_one_line_input_errors(config: Any, words: str) -> None:
    with pytest.raises(InputError) as exc:
        model_spec(config)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_expected_experts_touched_uniform_routing() -> None:
    assert expected_experts_touched(1, 32, 4) == pytest.approx(4.0)  # one token: its k experts
    assert expected_experts_touched(0, 32, 4) == 0.0
    assert expected_experts_touched(100, 8, 8) == 8.0                # k = E: all of them
    # 2 tokens, 2 of 4 each: an expert is missed by a token with p = 1/2, by both with 1/4
    assert expected_experts_touched(2, 4, 2) == pytest.approx(3.0)
    assert expected_experts_touched(10_000, 32, 4) == pytest.approx(32.0)  # at most all


def test_spec_json_round_trip() -> None:
    spec = model_spec(_load("gpt-oss-20b"), name="gpt-oss-20b")
    doc = json.loads(json.dumps(spec.to_json()))
    assert ModelSpec.from_json(doc) == spec
    with pytest.raises(ValueError):
        ModelSpec.from_json({"hidden_size": "big"})
    with pytest.raises(ValueError):
        ModelSpec.from_json([1])


def _moe_forward(spec: ModelSpec | None, tokens: int = 32, hidden: int = 3072, experts: int = 32) -> Any:
    return op_cost("vllm::moe_forward", [[tokens, hidden], [tokens, experts], [], []], [BF16, BF16, "", ""],
                   ["", "", "", ""], model=spec)


def test_vllm_moe_forward_from_the_gpt_oss_config() -> None:
    spec = model_spec(_load("gpt-oss-20b"), name="gpt-oss-20b")
    cost = _moe_forward(spec)
    assert cost is not None and cost.dtype == "bf16" and cost.kind == "moe"  # w4a16: bf16 math
    # 32 tokens x top-4 x (2 x 2880 x 5760 + 2 x 2880 x 2880) with the config's hidden, not the padded 3072
    assert cost.flops == 32 * 4 * (2 * 2880 * 5760 + 2 * 2880 * 2880) == 6_370_099_200
    touched = 32 * (1 - (1 - 4 / 32) ** 32)
    io_bytes = 32 * 3072 * 2 * 2 + 32 * 32 * 2  # hidden in and out (padded), router logits
    assert cost.bytes == pytest.approx(io_bytes + touched * 13_219_200)
    assert "estimate" in cost.model and "2880->3072" in cost.model
    assert _moe_forward(None) is None                       # no --model: no cost
    assert _moe_forward(spec, experts=64) is None           # another model's experts
    assert _moe_forward(spec, hidden=2048) is None          # narrower than the model's hidden
    assert reason_for_op("vllm::moe_forward", "[[32,3072],[32,32],[],[]]", None) == "needs_model"


def test_fp8_model_judged_against_fp8() -> None:
    spec = model_spec({"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                       "quantization_config": {"quant_method": "fp8"}})
    cost = op_cost("vllm::moe_forward", [[4, 256], [4, 16], []], [BF16, BF16, ""], model=spec)
    assert cost is not None and cost.dtype == "fp8"
    assert cost.flops == 4 * 2 * 2 * (256 * 256 + 128 * 256)
    touched = 16 * (1 - (1 - 2 / 16) ** 4)
    assert cost.bytes == pytest.approx(4 * 256 * 2 * 2 + 4 * 16 * 2 + touched * 3 * 256 * 128 * 1)


def test_fused_experts_with_recorded_weights() -> None:
    # vllm::outplace_fused_experts(hidden [T, H], w1 [E, 2I, H], w2 [E, H, I], topk_weights, topk_ids, ...)
    T, H, E, I, K = 4, 64, 8, 128, 2
    dims = [[T, H], [E, 2 * I, H], [E, H, I], [T, K], [T, K], [], []]
    types = [BF16, BF16, BF16, "float", "int", "", "Scalar"]
    cost = op_cost("vllm::outplace_fused_experts", dims, types)
    assert cost is not None and cost.dtype == "bf16"
    assert cost.flops == T * K * (2 * H * 2 * I + 2 * I * H)
    touched = E * (1 - (1 - K / E) ** T)
    per_expert = (2 * I * H + H * I) * 2
    assert cost.bytes == pytest.approx(T * H * 2 * 2 + T * K * 4 * 2 + touched * per_expert)
    # fp8 weights: a w8a8 GEMM, judged against fp8
    fp8 = op_cost("vllm::inplace_fused_experts", dims, [BF16, "c10::Float8_e4m3fn", "c10::Float8_e4m3fn",
                                                        "float", "int", "", "Scalar"])
    assert fp8 is not None and fp8.dtype == "fp8"
    # GPTQ/AWQ int4 packed eight to an int32 (w1 [E, 2I, H/8]): bytes as stored, bf16 math
    int4 = op_cost("vllm::outplace_fused_experts", [[T, H], [E, 2 * I, H // 8], [E, H, I // 8], [T, K], [T, K]],
                   [BF16, "int", "int", "float", "int"])
    assert int4 is not None and int4.dtype == "bf16" and int4.flops == cost.flops
    assert int4.bytes == pytest.approx(T * H * 2 * 2 + T * K * 4 * 2 + touched * per_expert / 4)
    # packed two to a byte (uint8): still bf16 math, not an int8 GEMM
    u8 = op_cost("vllm::outplace_fused_experts", [[T, H], [E, 2 * I, H // 2], [E, H, I // 2], [T, K], [T, K]],
                 [BF16, "unsigned char", "unsigned char", "float", "int"])
    assert u8 is not None and u8.dtype == "bf16"
    # w2's experts disagree with w1's: None, not a guess
    assert op_cost("vllm::outplace_fused_experts", [[T, H], [E, 2 * I, H], [E + 1, H, I], [T, K], [T, K]],
                   types[:5]) is None
    # aiter::fmoe_g1u1(out, input, gate [E, 2I, H], down [E, H, I], sorted ids..., topk=2, ...)
    aiter = op_cost("aiter::fmoe_g1u1", [[T, H], [T, H], [E, 2 * I, H], [E, H, I], [64], [64], [8], [1], []],
                    [BF16, BF16, BF16, BF16, "int", "float", "int", "int", "Scalar"],
                    ["", "", "", "", "", "", "", "", "2"])
    assert aiter is not None and aiter.flops == cost.flops



def test_tensor_parallel_from_the_attention_heads_shares_the_experts() -> None:
    import dataclasses

    spec = model_spec(_load("gpt-oss-120b"), name="gpt-oss-120b")
    assert (spec.num_experts, spec.num_layers) == (128, 36)
    # a TP-8 rank holds 64 / 8 = 8 query heads of 64: vLLM's unified_attention q [T, 8, 64]
    assert infer_tensor_parallel(spec, [[[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64], []]]) == 8
    assert infer_tensor_parallel(spec, [[[32, 64, 64], [32, 8, 64]]]) == 1
    assert infer_tensor_parallel(spec, [[[32, 8, 128]]]) is None            # another head size
    assert infer_tensor_parallel(spec, [[[32, 8, 64]], [[32, 16, 64]]]) is None  # shapes disagree
    assert infer_tensor_parallel(spec, []) is None
    tp8 = dataclasses.replace(spec, tensor_parallel=8)
    dims, types = [[888, 3072], [888, 128], []], [BF16, BF16, ""]
    one, eight = op_cost("vllm::moe_forward", dims, types, model=spec), op_cost("vllm::moe_forward", dims, types,
                                                                                  model=tp8)
    assert one is not None and eight is not None and "TP 8" in eight.model
    assert eight.flops == one.flops / 8 == 888 * 4 * (2 * 2880 * 5760 + 2 * 2880 * 2880) / 8
    io_bytes = 888 * 3072 * 2 * 2 + 888 * 128 * 2
    touched = 128 * (1 - (1 - 4 / 128) ** 888)
    assert eight.bytes == pytest.approx(io_bytes + touched * 13_219_200 / 8)
    assert ModelSpec.from_json(json.loads(json.dumps(tp8.to_json()))) == tp8
