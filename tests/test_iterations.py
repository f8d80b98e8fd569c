"""Engine step labels (analyzers/iterations.py) and the step attention cost (costmodel/steps.py)."""
from __future__ import annotations

import pytest

from gpuscope.analyzers.costmodel._core import _Call
from gpuscope.analyzers.costmodel.steps import step_attention_cost
from gpuscope.analyzers.iterations import IterationShape, decode_shape, mean_shape, parse_iteration

from conftest import shared_trace

VLLM_DECODE = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)"

# (label, expected (c_sq, c_sk, c_sqsq, c_sqsk, g_sq, g_sk, g_sqsq, g_sqsk), source)
LABELS = [
    (VLLM_DECODE, (0, 0, 0, 0, 32, 55086, 32, 55086), "vllm"),
    # the shared B200 trace's prefill step: tokens and their squares, no KV sums
    ("execute_context_1(888_788544)_generation_0(0)", (888, 888, 788544, 788544, 0, 0, 0, 0),
     "vllm, no cached prefix assumed"),
    ("execute_6147_context_2(sq6144sk7144sqsq20971520sqsk23019520)_generation_3(sq3sk6144sqsq3sqsk6144)",
     (6144, 7144, 20971520, 23019520, 3, 6144, 3, 6144), "vllm"),
    ("step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]", (0, 0, 0, 0, 128, 131072, 256, 262144),
     "sglang"),
    ("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]",
     (5, 8, 25, 40, 1, 12, 1, 12), "sglang"),
    ("decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]", (0, 0, 0, 0, 128, 65536, 512, 262144),
     "atom"),
    ("prefill[bs=2 tok=14721 ctx=[7803, 6918] sqsq=108745533 sqsk=108745533 sk=14721]",
     (14721, 14721, 108745533, 108745533, 0, 0, 0, 0), "atom"),
]


@pytest.mark.parametrize("label,expected,source", LABELS)
def test_step_labels_of_each_engine(label: str, expected: tuple[int, ...], source: str) -> None:
    s = parse_iteration(label)
    assert s is not None and s.source == source
    assert (s.c_sq, s.c_sk, s.c_sqsq, s.c_sqsk, s.g_sq, s.g_sk, s.g_sqsq, s.g_sqsk) == expected


@pytest.mark.parametrize("label", [
    "execute_context_2(6144)_generation_3(3)",          # vLLM native: no KV sums
    "execute_context_1(888_788544)_generation_2(2)",    # decode tokens of unknown KV span
    "step[DECODE bs=64]",                                # SGLang native
    "decode[bs=64 tok=64 d=64]",                         # ATOM native
    "capture_32_FULL", "", "execute_", "aten::mm",
    # inconsistent sums (sk below sq, sqsk below sqsq): another tool's label or a forgery
    "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk2sqsq4sqsk4)",
    "step[DECODE bs=1 g_sq=4 g_sqsq=16 g_sqsk=8 g_sk=9]",
    # numbers no GPU holds
    "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk99999999999999999999sqsq1sqsk1)",
    "decode[" + "x" * 5000 + "]",
])
def test_labels_that_say_nothing_give_none(label: str) -> None:
    assert parse_iteration(label) is None


def test_mean_of_steps_is_call_weighted() -> None:
    a = IterationShape(g_sq=32, g_sk=32_000, g_sqsq=32, g_sqsk=32_000)
    b = IterationShape(g_sq=32, g_sk=64_000, g_sqsq=32, g_sqsk=64_000)
    m = mean_shape([(a, 3), (b, 1)])
    assert m is not None and m.g_sk == pytest.approx(40_000) and m.source == "mean of 2 steps"
    assert mean_shape([]) is None and mean_shape([(a, 0)]) is None
    assert decode_shape(8, 1000) == IterationShape(g_sq=8, g_sk=8000, g_sqsq=8, g_sqsk=8000, source="--context")
    assert decode_shape(0, 10) is None and decode_shape(4, 0) is None


UA_DIMS = [[32, 64, 64], [32, 8, 64], [32, 8, 64], [32, 64, 64], [], [], [], [0]]
UA_TYPES = ["c10::BFloat16"] * 4 + ["", "", "", "c10::BFloat16"]


def test_decode_attention_agrees_with_tracelens_reference() -> None:
    """AMD TraceLens's reference report for the same vLLM gpt-oss-20b decode step
    (tests/traces/inference/vllm_decode_full/perf_csvs/InferenceAttention_fwd.csv in
    AMD-AGI/TraceLens): GFLOPS 0.902529024 and Data Moved 108.08984375 MB (MiB) per call."""
    step = parse_iteration(VLLM_DECODE)
    cost = step_attention_cost(_Call("vllm::unified_attention_with_output", UA_DIMS, UA_TYPES, []), step, 0, 1, 2,
                               "unified_attention")
    assert cost is not None and cost.dtype == "bf16" and cost.kind == "attention"
    assert cost.flops_executed == pytest.approx(0.902529024e9, rel=1e-9)
    assert cost.bytes / 2**20 == pytest.approx(108.08984375, rel=1e-9)
    # by hand: 4 · H_q · d · Σ sq·sk; bytes: Q, O, new K/V at 2 B, cached K/V at 2 B
    assert cost.flops == 4 * 64 * 64 * 55086
    assert cost.bytes == (32 * (64 + 8) * 128 + (55086 - 32) * 8 * 128) * 2


def test_prefill_attention_discounts_the_causal_half() -> None:
    step = IterationShape(c_sq=100, c_sk=300, c_sqsq=100 * 100, c_sqsk=100 * 300)
    dims = [[100, 4, 32], [100, 2, 32], [100, 2, 32]]
    cost = step_attention_cost(_Call("x", dims, ["c10::BFloat16"] * 3, []), step, 0, 1, 2, "m")
    width = 64
    assert cost.flops == 2 * 4 * width * 30_000
    assert cost.flops_executed == 2 * 4 * width * 30_000 - 4 * width * 10_000
    assert cost.bytes == (100 * 6 * width + 200 * 2 * width) * 2


@pytest.mark.parametrize("dims", [
    [[16, 64, 64], [16, 8, 64], [16, 8, 64]],   # fewer query tokens than the step ran: a micro-batch
    [[32, 64, 64], [32, 7, 64], [32, 7, 64]],   # heads not a multiple of the KV heads
    [[32, 64, 64], [32, 8, 32], [32, 8, 64]],   # K head dim differs from Q's
    [[32, 64], [32, 8, 64], [32, 8, 64]],       # not packed [tokens, heads, dim]
])
def test_inconsistent_calls_are_not_costed(dims: list) -> None:
    step = parse_iteration(VLLM_DECODE)
    assert step_attention_cost(_Call("x", dims, ["c10::BFloat16"] * 3, []), step, 0, 1, 2, "m") is None


def test_shared_vllm_trace_labels_its_attention_calls(tmp_path) -> None:
    folder = shared_trace("tracelens/vllm_decode_cudagraph")
    import duckdb

    from gpuscope.analyzers.iterations import op_steps
    from gpuscope.cli import main

    db = tmp_path / "s.duckdb"
    assert main(["ingest", str(folder), "--db", str(db), "--name", "v"]) == 0
    con = duckdb.connect(str(db), read_only=True)
    run_id = con.execute("SELECT id FROM runs WHERE name = 'v'").fetchone()[0]
    steps = op_steps(con, run_id, ["vllm::unified_attention_with_output"])
    assert [(s.g_sq, s.g_sk, s.source) for s in steps.values()] == [(32.0, 55086.0, "vllm")]


# AMD TraceLens's reference report of the same vLLM decode (tests/traces/inference/vllm_decode_full/
# perf_csvs/RMSNorm_fwd.csv in AMD-AGI/TraceLens): GFLOPS and Data Moved (MiB) per call.
RMSNORM_REFERENCE = [
    ("aiter::rmsnorm2d_fwd_with_add_ck", [[32, 2880]] * 4 + [[2880], [], []], 5, 0.000460864, 0.7086181640625),
    ("aiter::rms_norm", [[32, 2880], [2880], [], []], 2, 0.000368704, 0.3570556640625),
]


@pytest.mark.parametrize("name,dims,n_tensors,gflops,mib", RMSNORM_REFERENCE)
def test_rmsnorm_agrees_with_tracelens_reference(name: str, dims: list, n_tensors: int, gflops: float,
                                                 mib: float) -> None:
    from gpuscope.analyzers.costmodel import op_cost

    types = ["c10::BFloat16"] * n_tensors + ["Scalar"] * (len(dims) - n_tensors)
    cost = op_cost(name, dims, types, [""] * n_tensors + ["1e-05", "0"])
    assert cost is not None
    assert cost.flops / 1e9 == pytest.approx(gflops, rel=0.01)
    assert cost.bytes / 2**20 == pytest.approx(mib, rel=0.01)
