"""Issue 28, point 1: roofline coverage, said. ``analyze`` states the share of GPU time whose op
or kernel is judged against a roof, and names the largest unjudged work with its reason.

Synthetic traces whose judged and unjudged time is known by construction (a modelled GEMM, an
op with no model, a fused MoE op, an op without shapes, a kernel without an op, a collective, a
memcpy), then the invariants of the coverage block on every shared real trace.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, SHARED_TRACES, cpu_op, kernel, run_cli, runtime, write_trace
from gpuscope.analyzers.coverage import REASONS, coverage_document, coverage_line

H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
UNKNOWN_GPU = [{"id": 0, "name": "Imaginary GPU 9000", "totalGlobalMem": 1 << 34, "computeMajor": 99,
                "computeMinor": 0, "numSms": 7, "warpSize": 32}]
BF16 = "c10::BFloat16"

#: Durations (µs) of the synthetic run's GPU activities.
GEMM_US, NOMODEL_US, MOE_US, NOSHAPE_US, ORPHAN_US, NCCL_US, COPY_US = 400.0, 30.0, 250.0, 20.0, 60.0, 80.0, 40.0
FAST_COPY_US = 10.0


def _launch(events: list[dict[str, Any]], name: str, ext: int, ts: float, kname: str, dur: float,
            dims: Any = None, types: Any = None) -> None:
    events.append(cpu_op(name, ts, 5, ext, dims, types))
    events.append(runtime("cudaLaunchKernel", ts + 1, 2, ext, ext))
    events.append(kernel(kname, ts + 10, dur, ext))


def _mixed_trace(path: Path, props: list[dict[str, Any]]) -> Path:
    ev: list[dict[str, Any]] = []
    n = 4096
    # a bf16 GEMM: modelled, judged (2*4096^3 FLOPs: 139 µs at the H100's 989 TFLOP/s)
    _launch(ev, "aten::mm", 1, 0, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", GEMM_US,
            [[n, n], [n, n]], [BF16, BF16])
    # an op name no cost model covers
    _launch(ev, "myext::mystery_op", 2, 1000, "mystery_kernel", NOMODEL_US, [[1024, 1024]], [BF16])
    # vLLM's fused MoE: its expert weights are not op inputs
    _launch(ev, "vllm::moe_forward", 3, 2000, "fused_moe_kernel", MOE_US, [[8, 2880], [8, 32]], [BF16, BF16])
    # a modelled op recorded without shapes (record_shapes off)
    _launch(ev, "aten::add", 4, 3000, "vectorized_elementwise_kernel_add", NOSHAPE_US)
    # a kernel no op launched (no correlation)
    ev.append(kernel("orphan_reduce_kernel", 4000, ORPHAN_US))
    # a collective
    ev.append(kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                     5000, NCCL_US))
    # a host-to-device copy of 1 MiB: judged against the host link (16.6 µs at the H100's PCIe 5)
    ev.append(kernel("Memcpy HtoD (Pageable -> Device)", 6000, COPY_US, cat="gpu_memcpy", bytes=1 << 20))
    # a device-to-host copy "of 64 MiB in 10 µs": faster than the link, a model_error, unjudged
    ev.append(kernel("Memcpy DtoH (Device -> Pageable)", 7000, FAST_COPY_US, cat="gpu_memcpy", bytes=64 << 20))
    return write_trace(path, ev, deviceProperties=props)


TOTAL_US = GEMM_US + NOMODEL_US + MOE_US + NOSHAPE_US + ORPHAN_US + NCCL_US + COPY_US + FAST_COPY_US


def test_coverage_of_a_mixed_run_is_exact(tmp_path: Path, db: Path) -> None:
    doc = run_cli("analyze", str(_mixed_trace(tmp_path / "t.json", H100_PROPS)), "--json").json()
    cov = doc["coverage"]
    assert cov["total_us"] == pytest.approx(TOTAL_US)
    t = doc["time_us"]
    assert cov["total_us"] == pytest.approx(t["compute"] + t["communication"] + t["memory"])
    assert cov["judged_us"] == pytest.approx(GEMM_US + COPY_US)
    assert cov["share"] == pytest.approx((GEMM_US + COPY_US) / TOTAL_US)
    got = {(u["name"], u["reason"]): u["kernel_us"] for u in cov["unjudged"]}
    assert got == pytest.approx({
        ("vllm::moe_forward", "needs_model"): MOE_US,
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"):
            NCCL_US,
        ("orphan_reduce_kernel", "no_op"): ORPHAN_US,
        ("myext::mystery_op", "no_cost_model"): NOMODEL_US,
        ("aten::add", "no_shapes"): NOSHAPE_US,
        ("Memcpy DtoH (Device -> Pageable)", "model_error"): FAST_COPY_US,
    })
    assert [u["kernel_us"] for u in cov["unjudged"]] == sorted((u["kernel_us"] for u in cov["unjudged"]),
                                                              reverse=True)
    assert cov["unjudged"][0]["share"] == pytest.approx(MOE_US / TOTAL_US)
    assert cov["needs_model"] == ["vllm::moe_forward"]
    assert cov["unjudged_us"] + cov["judged_us"] == pytest.approx(cov["total_us"])
    assert set(cov["by_reason"]) <= set(REASONS)


def test_unknown_gpu_judges_nothing(tmp_path: Path, db: Path) -> None:
    doc = run_cli("analyze", str(_mixed_trace(tmp_path / "t.json", UNKNOWN_GPU)), "--json").json()
    cov = doc["coverage"]
    assert cov["judged_us"] == 0 and cov["share"] == 0
    reasons = {(u["name"], u["reason"]) for u in cov["unjudged"]}
    # without a roof, every compute kernel and the copy are unjudged for want of a spec
    assert ("aten::mm", "no_spec") in reasons and ("Memcpy HtoD (Pageable -> Device)", "no_spec") in reasons
    assert cov["unjudged_us"] == pytest.approx(TOTAL_US)


def test_text_says_the_coverage(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_cli("ingest", str(_mixed_trace(tmp_path / "t.json", H100_PROPS)))
    monkeypatch.setenv("COLUMNS", "100")
    text = run_cli("analyze").out
    share = 100 * (GEMM_US + COPY_US) / TOTAL_US
    assert f"roofline coverage: {share:.1f} % of GPU time judged" in text
    assert f"vllm::moe_forward {100 * MOE_US / TOTAL_US:.0f} % (expert weights not in the trace" in text
    # fitted to the width like the rest of the report
    start = text.index("roofline coverage")
    block = text[start:text.index("\n\n", start)]
    assert all(len(line) <= 100 for line in block.splitlines())


def test_cpu_only_trace_has_no_share(tmp_path: Path, db: Path) -> None:
    path = write_trace(tmp_path / "cpu.json", [cpu_op("aten::mm", 0, 50, 1, [[8, 8], [8, 8]], ["float", "float"])])
    cov = run_cli("analyze", str(path), "--json").json()["coverage"]
    assert cov["share"] is None and cov["total_us"] == 0 and cov["unjudged"] == []
    assert coverage_line(cov) == "roofline coverage: no GPU time to judge (CPU-only trace)"


@settings(max_examples=60, deadline=None)
@given(judged=st.floats(0, 1e7), parts=st.dictionaries(
    st.tuples(st.text(min_size=1, max_size=8), st.sampled_from(["op", "kernel", "copy", "communication"]),
              st.sampled_from(sorted(REASONS))),
    st.floats(0, 1e7), max_size=25))
def test_coverage_document_invariants(judged: float, parts: dict[tuple[str, str, str], float]) -> None:
    total = judged + sum(parts.values())
    cov = coverage_document(judged, total, parts)
    _invariants(cov)
    assert len(cov["unjudged"]) <= 10
    line = coverage_line(cov)
    assert line is not None and line.startswith("roofline coverage:")
    assert "\x1b" not in line and "\n" not in line


def _invariants(cov: dict[str, Any]) -> None:
    eps = 1e-6 * max(cov["total_us"], 1.0)
    if cov["total_us"] > 0:
        assert 0 <= cov["share"] <= 1
        assert cov["share"] == pytest.approx(cov["judged_us"] / cov["total_us"])
    assert cov["judged_us"] <= cov["total_us"] + eps
    us = [u["kernel_us"] for u in cov["unjudged"]]
    assert us == sorted(us, reverse=True)
    assert sum(us) <= cov["total_us"] - cov["judged_us"] + eps
    assert all(u["reason"] in REASONS for u in cov["unjudged"])


SHARED = ["hta/a100_alexnet.json.gz", "tracelens/b200_eager.json.gz", "tracelens/vllm_decode_cudagraph"]


@pytest.mark.parametrize("rel", SHARED)
def test_coverage_on_shared_traces(rel: str, tmp_path: Path, db: Path) -> None:
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace {rel} not available (../shared/data/traces is absent)")
    files = sorted(path.glob("*.json.gz")) if path.is_dir() else [path]
    assert run_cli("ingest", *map(str, files)).code == 0
    doc = run_cli("analyze", "--json").json()
    cov = doc["coverage"]
    _invariants(cov)
    t = doc["time_us"]
    assert cov["total_us"] == pytest.approx(t["compute"] + t["communication"] + t["memory"])
    # every unjudged microsecond has a reason: judged + unjudged is the whole
    assert cov["judged_us"] + cov["unjudged_us"] == pytest.approx(cov["total_us"])
    if rel == "tracelens/vllm_decode_cudagraph":
        # the baseline of issue 28 was 18 % (vllm::moe_forward 67 % for want of the model);
        # engine models (TopK, SortTokens: 4.6 %; Inductor kernels) only add to it
        assert cov["share"] >= 0.177 - 0.01
        assert cov["unjudged"][0]["name"] == "vllm::moe_forward" and cov["unjudged"][0]["reason"] == "needs_model"


def test_report_and_compare_say_the_coverage(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.render.report_html import render_report

    run_cli("ingest", str(_mixed_trace(tmp_path / "a.json", H100_PROPS)))
    run_cli("ingest", str(_mixed_trace(tmp_path / "b.json", UNKNOWN_GPU)))
    doc = run_cli("analyze", "1", "--json").json()
    page = render_report({"analysis": doc})
    share = 100 * (GEMM_US + COPY_US) / TOTAL_US
    assert f"Roofline coverage: <b>{share:.1f} %</b>" in page
    assert "<code>vllm::moe_forward</code>" in page and "expert weights not in the trace" in page
    cmp = run_cli("compare", "1", "2", "--json").json()
    assert cmp["totals"]["coverage_share"] == pytest.approx({"a": share / 100, "b": 0.0})
    assert cmp["a"]["coverage"]["judged_us"] == pytest.approx(GEMM_US + COPY_US)
    monkeypatch.setenv("COLUMNS", "100")
    text = run_cli("compare", "1", "2").out
    assert f"A roofline coverage: {share:.1f} % of GPU time judged" in text
    assert "B roofline coverage: 0.0 % of GPU time judged" in text


# --------------------------------------------------------------------------------------------
# Issue 28's acceptance: every shared trace, analyzed as a user would (the serving traces with
# their model's public config.json): nothing above 100 % of its roof anywhere, and at least 95 %
# of the GPU time of the inference traces judged. Communication is set apart: collectives are
# judged against the links by the issue on multi-GPU inference; the B200 trace's all-reduces
# (18 % of its time) are the only part of it left.
# --------------------------------------------------------------------------------------------

INFERENCE = {
    "tracelens/qwen1.5-0.5b-chat/h100.json.gz": None,
    "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz": None,
    "tracelens/vllm_decode_cudagraph": "gpt-oss-20b.config.json",
    "tracelens/b200_eager.json.gz": "gpt-oss-120b.config.json",
}
OTHERS = ["hta/a100_alexnet.json.gz", "hta/a100_sxm4_80gb_training_large.json.gz", "hta/a100_triton_kernel.json.gz",
          "hta/mi250_rocm6.2_minitoy_train.json.gz", "hta/legacy_capitalized_categories.json.gz",
          "tracelens/mi210_gpu_only.json.gz"]


def _analyzed(rel: str, model: str | None) -> dict[str, Any]:
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace {rel} not available (../shared/data/traces is absent)")
    files = sorted(path.glob("*.json.gz")) if path.is_dir() else [path]
    assert run_cli("ingest", *map(str, files)).code == 0
    args = ["analyze", "--json"] + (["--model", str(FIXTURES / "models" / model)] if model else [])
    res = run_cli(*args)
    assert res.code == 0, res.err
    return res.json()


def _over_roof(doc: dict[str, Any]) -> list[tuple[str, float]]:
    return [(e["name"], e["pct_of_roof"]) for e in list(doc["ops"]) + list(doc["kernels"]) + list(doc.get("copies") or [])
            if e.get("pct_of_roof") is not None and e["pct_of_roof"] > 1 + 1e-9]


@pytest.mark.parametrize("rel", sorted(INFERENCE))
def test_inference_traces_are_judged_and_never_above_their_roof(rel: str, db: Path) -> None:
    doc = _analyzed(rel, INFERENCE[rel])
    cov = doc["coverage"]
    _invariants(cov)
    assert _over_roof(doc) == []
    communication = cov["by_reason"].get("communication", 0.0)
    assert cov["judged_us"] / (cov["total_us"] - communication) >= 0.95, cov["unjudged"][:3]
    if rel != "tracelens/b200_eager.json.gz":
        assert cov["share"] >= 0.95, cov["unjudged"][:3]


@pytest.mark.parametrize("rel", OTHERS)
def test_no_shared_trace_is_above_its_roof(rel: str, db: Path) -> None:
    assert _over_roof(_analyzed(rel, None)) == []
