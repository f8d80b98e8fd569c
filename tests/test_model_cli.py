"""``--model CONFIG.json`` and ``--context`` on the CLI (issue 28, point 3): a bad file is one line
and exit 2 with the store untouched; ingest stores the parsed spec with the run; analyze and
compare use the given model, else the stored one; the shared vLLM gpt-oss trace is judged."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, cpu_op, file_digest, kernel, run_cli, runtime, shared_trace, write_trace

GPT_OSS = FIXTURES / "models" / "gpt-oss-20b.config.json"
QWEN_MOE = FIXTURES / "models" / "Qwen3-30B-A3B.config.json"
H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
BF16 = "c10::BFloat16"
MOE_US = 250.0


def _moe_trace(path: Path) -> Path:
    """One vLLM moe_forward call of 8 tokens over gpt-oss-20b's 32 experts, one kernel."""
    ev: list[dict[str, Any]] = [
        cpu_op("vllm::moe_forward", 0, 5, 1, [[8, 2880], [8, 32], []], [BF16, BF16, ""]),
        runtime("cudaLaunchKernel", 1, 2, 1, 1),
        kernel("fused_moe_kernel", 10, MOE_US, 1),
    ]
    return write_trace(path, ev, deviceProperties=H100_PROPS)


def _moe_op(doc: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in doc["ops"] if o["name"] == "vllm::moe_forward")


@pytest.mark.parametrize("kind", ["not_json", "nan", "not_a_model", "directory", "fifo", "huge", "missing"])
def test_a_bad_model_file_is_one_line_and_exit_2(tmp_path: Path, db: Path, kind: str) -> None:
    trace = _moe_trace(tmp_path / "t.json")
    bad = tmp_path / "config.json"
    if kind == "not_json":
        bad.write_text("{\"hidden_size\": 64,")
    elif kind == "nan":
        bad.write_text('{"hidden_size": NaN, "num_hidden_layers": 2, "num_attention_heads": 4}')
    elif kind == "not_a_model":
        bad.write_text('{"model_type": "vit", "image_size": 224}')
    elif kind == "directory":
        bad.mkdir()
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(bad)
    elif kind == "huge":
        bad.write_text("{" + " " * (4 * 2**20) + "}")
    for command in (["ingest", str(trace)], ["analyze", str(trace)], ["compare", str(trace), str(trace)]):
        r = run_cli(*command, "--model", str(bad))
        assert r.code == 2, (command, r.err)
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.err, r.err
        assert file_digest(db) is None  # nothing ingested: the store was never made


def test_ingest_stores_the_parsed_spec_and_analyze_uses_it(tmp_path: Path, db: Path) -> None:
    trace = _moe_trace(tmp_path / "t.json")
    r = run_cli("ingest", str(trace), "--model", str(GPT_OSS), "--json")
    assert r.code == 0, r.err
    run_id = r.json()["run_id"]
    rows = run_cli("sql", "SELECT run_id, spec_json, source FROM run_models", "--json").json()
    assert len(rows) == 1 and rows[0]["run_id"] == run_id and rows[0]["source"] == str(GPT_OSS)
    stored = json.loads(rows[0]["spec_json"])
    # the parsed spec only, never the user's file
    assert stored["num_experts"] == 32 and stored["name"] == "gpt-oss-20b" and "rope_scaling" not in stored
    doc = run_cli("analyze", str(run_id), "--json").json()
    assert doc["model"]["source"].startswith("stored with the run")
    op = _moe_op(doc)
    assert op["flops"] == 8 * 4 * (2 * 2880 * 5760 + 2 * 2880 * 2880)
    touched = 32 * (1 - (1 - 4 / 32) ** 8)
    assert op["bytes"] == pytest.approx(8 * 2880 * 2 * 2 + 8 * 32 * 2 + touched * 3 * 2880 * 2880 * 4.25 / 8)
    assert op["bound"] == "memory_bound" and 0 < op["pct_of_roof"] <= 1
    assert [f["name"] for f in doc["model"]["filled_ops"]] == ["vllm::moe_forward"]
    assert doc["model"]["filled_ops"][0]["kernel_us"] == pytest.approx(MOE_US)
    text = " ".join(run_cli("analyze", str(run_id)).out.split())  # the line may wrap
    assert f"model: gpt-oss-20b (stored with the run, from {GPT_OSS}): filled in vllm::moe_forward (1 call, 0.25 ms)" \
        in text
    # --model overrides the stored one: a model of 128 experts does not match the op's 32
    other = run_cli("analyze", str(run_id), "--json", "--model", str(QWEN_MOE)).json()
    assert other["model"]["source"] == f"--model {QWEN_MOE}" and other["model"]["filled_ops"] == []
    assert _moe_op(other)["flops"] is None
    assert any(u["name"] == "vllm::moe_forward" and u["reason"] == "needs_model" for u in other["coverage"]["unjudged"])


def test_without_a_model_moe_forward_needs_one_and_compare_uses_the_stored(tmp_path: Path, db: Path) -> None:
    trace = _moe_trace(tmp_path / "t.json")
    plain = run_cli("ingest", str(trace), "--json").json()["run_id"]
    doc = run_cli("analyze", str(plain), "--json").json()
    assert "model" not in doc and _moe_op(doc)["flops"] is None
    assert doc["coverage"]["needs_model"] == ["vllm::moe_forward"]
    with_model = run_cli("ingest", str(trace), "--model", str(GPT_OSS), "--name", "m", "--json").json()["run_id"]
    cmp = run_cli("compare", str(plain), str(with_model), "--json").json()
    share_a, share_b = cmp["a"]["coverage"]["share"], cmp["b"]["coverage"]["share"]
    assert share_a == 0 and share_b == pytest.approx(1.0)  # only B has a model stored
    both = run_cli("compare", str(plain), str(with_model), "--json", "--model", str(GPT_OSS)).json()
    assert both["a"]["coverage"]["share"] == pytest.approx(1.0)


@pytest.mark.parametrize(("rel", "config", "least_coverage", "tp"), [
    ("tracelens/vllm_decode_cudagraph", GPT_OSS, 0.80, None),  # MI300X, gpt-oss-20b, one GPU
    ("tracelens/b200_eager.json.gz", FIXTURES / "models" / "gpt-oss-120b.config.json", 0.0, 8),  # B200, TP 8
])
def test_shared_vllm_gpt_oss_traces_are_judged_with_their_config(tmp_path: Path, db: Path, rel: str, config: Path,
                                                                  least_coverage: float, tp: int | None) -> None:
    folder = shared_trace(rel)
    doc = run_cli("analyze", str(folder), "--json", "--model", str(config)).json()
    op = _moe_op(doc)
    assert op["bound"] in ("memory_bound", "compute_bound") and op["pct_of_roof"] is not None
    assert not op.get("model_error")
    assert doc["model"]["spec"]["tensor_parallel"] == tp
    assert doc["coverage"]["share"] > least_coverage
    over = [e["name"] for e in doc["ops"] + doc["kernels"] if (e.get("pct_of_roof") or 0) > 1.0 + 1e-9]
    assert over == []
    assert doc["model"]["filled_ops"][0]["name"] == "vllm::moe_forward"


def test_run_stores_the_model_and_refuses_a_bad_one_before_starting(tmp_path: Path, db: Path) -> None:
    import subprocess
    import sys

    marker = tmp_path / "started"
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "-q",
                        "--model", str(bad), "--", "touch", str(marker)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and str(bad) in p.stderr
    assert not marker.exists() and file_digest(db) is None  # the program never ran, nothing stored
    p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "-q", "--json",
                        "--model", str(GPT_OSS), "--", "touch", str(marker)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["analysis"]["model"]["source"] == f"--model {GPT_OSS}"
    rows = run_cli("sql", "SELECT run_id, source FROM run_models", "--json").json()
    assert rows == [{"run_id": summary["run_id"], "source": str(GPT_OSS)}]
