"""Issue 28, point 7: the gap to the decode speed of light, explained.

A synthetic decode run whose every microsecond is placed by hand (two decode steps of a tiny
dense model: two bf16 GEMMs each, an op without a cost model, a kernel without an op running on
a second stream inside a GEMM, a collective, idle gaps), a model config sized so that its
ceiling is computed by hand; then the model's bytes per step for the published configs in
``fixtures/models`` (a dense model, gpt-oss's MXFP4 experts and sliding windows), ``gpuscope
ceiling --model``, tokens and batch from marks, and bad input.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, cpu_op, file_digest, kernel, run_cli, runtime, write_trace

H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
BF16 = "c10::BFloat16"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
#: H100 SXM's spec bandwidth and bf16 peak (gpuscope/data/gpus.json), what the by-hand numbers use
H100_BW, H100_BF16 = 3.35e12, 989.4e12
BASE_NS = 1_700_000_000_000_000_000  # the trace's baseTimeNanoseconds: absolute times, for marks

#: A tiny dense model: hidden 1024, one layer, 8 heads of 128 (8 KV heads), MLP 2048, vocab 1000, bf16.
TINY = {"architectures": ["TinyForCausalLM"], "model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 1,
        "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 2048,
        "vocab_size": 1000, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
# its bytes per decode step, by hand: attention 1024 x 128 x (2 x 8 + 2 x 8), gated MLP 3 x 1024 x 2048,
# lm_head 1000 x 1024, all bf16 (2 B)
TINY_ATTN_B = 1024 * 128 * 32 * 2
TINY_MLP_B = 3 * 1024 * 2048 * 2
TINY_HEAD_B = 1000 * 1024 * 2
TINY_BYTES = TINY_ATTN_B + TINY_MLP_B + TINY_HEAD_B  # 23,019,520 B
TINY_PARAMS = 1024 * 128 * 32 + 3 * 1024 * 2048 + 1000 * 1024

# aten::mm [8,1024] x [1024,4096] bf16: bytes = (8x1024 + 1024x4096 + 8x4096) x 2; FLOPs 2 x 8 x 1024 x 4096
MM_BYTES = (8 * 1024 + 1024 * 4096 + 8 * 4096) * 2
MM_ROOF_US = max(MM_BYTES / H100_BW, 2 * 8 * 1024 * 4096 / H100_BF16) * 1e6  # 2.5285 µs: memory


def _decode_trace(path: Path, base_ns: int | None = None) -> Path:
    """Two decode steps at 100 µs and 200 µs; in each (kernel times from the step's start T):
    GEMM [T+10, T+20], GEMM [T+23, T+33], an op-less kernel on stream 8 [T+25, T+29] (inside the
    second GEMM), the op without a model [T+35, T+40], an all-reduce [T+40, T+44]."""
    ev: list[dict[str, Any]] = []
    ext = 0
    for t in (100.0, 200.0):
        for start, name, kname, dur in ((10, "aten::mm", GEMM, 10.0), (23, "aten::mm", GEMM, 10.0),
                                        (35, "myext::mystery_op", "mystery_kernel", 5.0)):
            ext += 1
            dims = [[8, 1024], [1024, 4096]] if name == "aten::mm" else [[8, 1024]]
            ev.append(cpu_op(name, t + start - 10, 2, ext, dims, [BF16] * len(dims)))
            ev.append(runtime("cudaLaunchKernel", t + start - 9, 1, ext, ext))
            ev.append(kernel(kname, t + start, dur, ext))
        ev.append(kernel("orphan_kernel", t + 25, 4.0, stream=8))
        ev.append(kernel(NCCL, t + 40, 4.0))
    top: dict[str, Any] = {"deviceProperties": H100_PROPS}
    if base_ns is not None:
        top["baseTimeNanoseconds"] = base_ns
    return write_trace(path, ev, **top)


# The run by hand (µs): kernels from 110 to 244, span 134; idle 3 + 2 in each step and 66 between them
SPAN_US = 244.0 - 110.0
IDLE_US = 2 * (3.0 + 2.0) + (210.0 - 144.0)
GEMM_US = 4 * 10.0
NO_ROOF_US = 2 * (4.0 + 5.0)  # the op-less kernel and the op without a model
COMM_US = 2 * 4.0
OVERLAP_US = 2 * 4.0  # the op-less kernel runs inside a GEMM
TOKENS, BATCH = 16, 8
STEPS = TOKENS / BATCH
CEILING_STEP_US = TINY_BYTES / H100_BW * 1e6  # 6.87 µs: memory binds (compute: 0.19 µs)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.config.json"
    path.write_text(json.dumps(TINY))
    return path


def _parts(gap: dict[str, Any]) -> dict[str, float]:
    return {p.get("family") or p["part"]: p["gpu_us"] for p in gap["parts"]}


def test_gap_of_a_synthetic_decode_is_exact(tmp_path: Path, db: Path, tiny_config: Path) -> None:
    doc = run_cli("analyze", str(_decode_trace(tmp_path / "t.json")), "--json", "--model", str(tiny_config),
                  "--tokens", str(TOKENS)).json()
    gap = doc["gap"]
    assert doc["gap_reason"] is None
    assert gap["gpu"] == "h100-sxm" and gap["num_gpus"] == 1
    # batch from the trace: the ops whose input's last dim is the hidden size take 8 rows
    assert gap["batch"] == BATCH and gap["batch_source"].startswith("trace:")
    assert gap["steps"] == pytest.approx(STEPS)
    assert gap["time_us"] == pytest.approx(SPAN_US)
    assert gap["achieved_tokens_per_s"] == pytest.approx(TOKENS / (SPAN_US / 1e6))
    assert gap["weights"]["weight_bytes"] == pytest.approx(TINY_BYTES)
    assert gap["bytes_per_step"] == pytest.approx(TINY_BYTES)
    assert gap["binding"] == "memory bandwidth"
    assert gap["ceiling_step_us"] == pytest.approx(CEILING_STEP_US)
    assert gap["ceiling_tokens_per_s"] == pytest.approx(BATCH * 1e6 / CEILING_STEP_US)
    assert gap["fraction_of_ceiling"] == pytest.approx(CEILING_STEP_US / (SPAN_US / STEPS))
    ceiling_us = STEPS * CEILING_STEP_US
    gap_us = SPAN_US - ceiling_us
    assert gap["gap_gpu_us"] == pytest.approx(gap_us)
    assert gap["gap_step_us"] == pytest.approx(gap_us / STEPS)
    roof_us = 4 * MM_ROOF_US
    assert _parts(gap) == pytest.approx({
        "gemm": GEMM_US - roof_us,
        "no_roof": NO_ROOF_US,
        "idle": IDLE_US,
        "communication": COMM_US,
        "overlap": -OVERLAP_US,
        "roof_beyond_ceiling": roof_us - ceiling_us,
    })
    # the parts sum to the gap, and per step they are the GPU µs over the steps
    assert sum(p["gpu_us"] for p in gap["parts"]) == pytest.approx(gap_us)
    assert gap["parts_sum_gpu_us"] == pytest.approx(gap_us)
    assert all(p["step_us"] == pytest.approx(p["gpu_us"] / STEPS) for p in gap["parts"])
    assert sum(p["share_of_gap"] for p in gap["parts"]) == pytest.approx(1.0)
    # the judged time is the coverage's, and "without a roof" is its unjudged time less communication
    cov = doc["coverage"]
    assert gap["judged_us"] == pytest.approx(cov["judged_us"]) == pytest.approx(GEMM_US)
    assert NO_ROOF_US == pytest.approx(cov["unjudged_us"] - cov["by_reason"].get("communication", 0.0))
    assert "context 0" in " ".join(gap["notes"])


def test_gap_text_table(tmp_path: Path, db: Path, tiny_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    res = run_cli("analyze", str(_decode_trace(tmp_path / "t.json")), "--model", str(tiny_config),
                  "--tokens", str(TOKENS), "--batch", str(BATCH))
    assert res.code == 0, res.err
    text = res.out
    start = text.index("Gap to the decode speed of light")
    block = text[start:text.index("\n\n", start)]
    assert "batch 8" in block and "batch from --batch" in block
    assert f"the run reaches {100 * CEILING_STEP_US / (SPAN_US / STEPS):.1f} % of the ceiling" in block
    assert "gemm above its roof" in block and "idle / launch gaps" in block
    idle_row = next(line for line in block.splitlines() if line.startswith("idle / launch gaps"))
    assert f"{IDLE_US / STEPS:.1f} µs" in idle_row
    assert f"{100 * IDLE_US / (SPAN_US - STEPS * CEILING_STEP_US):.1f}%" in idle_row
    assert all(len(line) <= 100 for line in block.splitlines())


def test_tokens_and_batch_from_marks(tmp_path: Path, db: Path, tiny_config: Path) -> None:
    from gpuscope import store
    from gpuscope.store.read import AnnotationRow
    from gpuscope.store.telemetry import insert_annotations

    run_cli("ingest", str(_decode_trace(tmp_path / "t.json", base_ns=BASE_NS)))

    def mark(ts_us: float, value: dict[str, Any]) -> AnnotationRow:
        return AnnotationRow(kind="mark", name="step", ts_ns=BASE_NS + int(ts_us * 1000), dur_ns=None,
                             device_id=None, pid="42", value=value)

    with store.writing(db) as con:
        insert_annotations(con, 1, [
            mark(100, {"phase": "decode", "tokens": 8}), mark(150, {"phase": "prefill", "prompt_tokens": 64}),
            mark(200, {"phase": "decode", "tokens": 8}),
            mark(5e6, {"phase": "decode", "tokens": 8}),  # 5 s later: outside the traced window
        ])
    gap = run_cli("analyze", "--json", "--model", str(tiny_config)).json()["gap"]
    assert gap["tokens"] == TOKENS and gap["token_source"].startswith("marks: 2 decode steps")
    assert gap["batch"] == BATCH and gap["batch_source"].startswith("marks")
    assert any("1 prefill step" in n for n in gap["notes"])
    assert gap["achieved_tokens_per_s"] == pytest.approx(TOKENS / (SPAN_US / 1e6))


def test_no_gap_without_model_or_tokens(tmp_path: Path, db: Path, tiny_config: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    trace = str(_decode_trace(tmp_path / "t.json"))
    doc = run_cli("analyze", trace, "--json").json()
    assert doc["gap"] is None and doc["gap_reason"]["code"] == "not_asked"
    doc = run_cli("analyze", "--json", "--tokens", "16").json()
    assert doc["gap"] is None and doc["gap_reason"]["code"] == "no_model"
    doc = run_cli("analyze", "--json", "--model", str(tiny_config)).json()
    assert doc["gap"] is None and doc["gap_reason"]["code"] == "no_tokens"
    monkeypatch.setenv("COLUMNS", "100")
    assert "gap to the decode speed of light: not computed (no tokens: pass --tokens N" in \
        run_cli("analyze", "--model", str(tiny_config)).out
    assert "decode speed of light" not in run_cli("analyze").out  # nothing asked, nothing said


def test_bad_tokens_or_batch_is_one_line_and_exit_2(tmp_path: Path, db: Path, tiny_config: Path) -> None:
    run_cli("ingest", str(_decode_trace(tmp_path / "t.json")))
    before = file_digest(db)
    for flag, value in (("--tokens", "0"), ("--tokens", "-5"), ("--tokens", "many"), ("--tokens", "1.5"),
                        ("--batch", "0"), ("--batch", "nan")):
        res = run_cli("analyze", "--model", str(tiny_config), f"{flag}={value}")
        assert res.code == 2 and res.out == "", (flag, value)
        assert len(res.err.strip().splitlines()) == 1 and flag in res.err and "Traceback" not in res.err
        assert file_digest(db) == before


def test_gap_json_is_strict(tmp_path: Path, db: Path, tiny_config: Path) -> None:
    def no_constant(word: str) -> Any:
        raise AssertionError(f"{word} in the JSON")

    out = run_cli("analyze", str(_decode_trace(tmp_path / "t.json")), "--json", "--model", str(tiny_config),
                  "--tokens", "16").out
    assert json.loads(out, parse_constant=no_constant)["gap"]["parts"]


# -- the model's bytes per step ------------------------------------------------------------------


def _spec(name: str) -> Any:
    from gpuscope.analyzers.modelspec import model_spec

    return model_spec(json.loads((FIXTURES / "models" / f"{name}.config.json").read_text()))


def test_dense_model_weights_by_hand() -> None:
    from gpuscope.analyzers.gap import model_weights

    w = model_weights(_spec("Qwen3-8B"), batch=8)
    # Qwen3-8B: hidden 4096, 36 layers, 32 heads and 8 KV heads of 128, MLP 12288, vocab 151936, bf16
    assert w.attention_bytes == 36 * 4096 * 128 * (2 * 32 + 2 * 8) * 2
    assert w.dense_mlp_bytes == 36 * 3 * 4096 * 12288 * 2
    assert w.lm_head_bytes == 151936 * 4096 * 2
    assert w.expert_bytes == 0 and w.experts_touched is None
    assert w.kv_bytes_per_sequence(1000) == 36 * 2 * 8 * 128 * 2 * 1000


def test_moe_model_weights_by_hand() -> None:
    from gpuscope.analyzers.gap import model_weights

    spec = _spec("gpt-oss-20b")
    one_expert = 3 * 2880 * 2880 * 4.25 / 8  # gated MLP in MXFP4: 4.25 bits a weight
    w1 = model_weights(spec, batch=1)
    assert w1.experts_touched == 4  # one token: its top-4
    assert w1.expert_bytes == pytest.approx(24 * 4 * one_expert)
    assert w1.attention_bytes == 24 * 2880 * 64 * (2 * 64 + 2 * 8) * 2  # bf16
    assert w1.router_bytes == 24 * 2880 * 32 * 2
    assert w1.lm_head_bytes == 201088 * 2880 * 2
    assert w1.params_per_token == 24 * (2880 * 64 * 144 + 2880 * 32 + 4 * 3 * 2880 * 2880) + 201088 * 2880
    w32 = model_weights(spec, batch=32)
    touched = 32 * (1 - (1 - 4 / 32) ** 32)  # uniform routing: 31.55 of 32
    assert w32.experts_touched == pytest.approx(touched)
    assert w32.expert_bytes == pytest.approx(24 * touched * one_expert)
    # half the layers slide over 128 tokens: K and V of 8 heads of 64 in bf16 per token and layer
    assert w1.kv_bytes_per_sequence(1000) == 2 * 8 * 64 * 2 * (12 * 1000 + 12 * 128)


def test_ceiling_cli_with_model(db: Path) -> None:
    cfg = FIXTURES / "models" / "Qwen3-8B.config.json"
    doc = run_cli("ceiling", "--json", "--gpu", "h100-sxm", "--model", str(cfg), "--batch", "8",
                  "--context", "4096").json()
    weights = 36 * (4096 * 128 * 80 + 3 * 4096 * 12288) * 2 + 151936 * 4096 * 2
    kv = 8 * 4096 * 36 * 2 * 8 * 128 * 2
    assert doc["weight_bytes"] == pytest.approx(weights)
    assert doc["kv_cache_bytes"] == pytest.approx(kv)
    assert doc["ceiling_tokens_per_s"] == pytest.approx(H100_BW / (weights + kv))
    assert doc["model"]["weight_bytes"] == pytest.approx(weights)
    assert any(line.startswith("weights: ") and "from the model config" in line for line in doc["explanation"])


def test_ceiling_model_conflicts_with_size_flags(db: Path) -> None:
    cfg = FIXTURES / "models" / "Qwen3-8B.config.json"
    res = run_cli("ceiling", "--gpu", "h100-sxm", "--model", str(cfg), "--layers", "32")
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1 and "--layers" in res.err


def test_ceiling_model_without_a_size_names_the_file(tmp_path: Path, db: Path) -> None:
    cfg = tmp_path / "nomlp.config.json"
    cfg.write_text(json.dumps({k: v for k, v in TINY.items() if k != "intermediate_size"}))
    res = run_cli("ceiling", "--gpu", "h100-sxm", "--model", str(cfg))
    assert res.code == 2 and res.out == ""
    assert res.err.strip().splitlines() == [f"gpuscope ceiling: {cfg}: gives no intermediate_size: the decode "
                                            "ceiling needs it"]
