"""Advice speaks only on evidence: each rule has a case where it must fire and a real trace
where it must not (one short kernel is no launch-bound decode loop; a flash-attention kernel is
already fused; two activities far apart are no idle GPU)."""
from __future__ import annotations

from pathlib import Path

from conftest import kernel, run_cli, shared_trace, write_trace


def _advice(path: Path) -> dict[str, str]:
    r = run_cli("analyze", path, "--json")
    assert r.code == 0, r.err
    return {a["kind"]: a["message"] for a in r.json()["advice"]}


def test_one_short_kernel_is_not_a_launch_bound_run(db) -> None:
    assert "launch_bound" not in _advice(shared_trace("hta/a100_triton_kernel.json.gz"))


def test_many_short_kernels_are(db, tmp_path: Path) -> None:
    events = [kernel("void my_tiny_kernel<1>(float*)", float(i * 3), 2.0) for i in range(300)]
    advice = _advice(write_trace(tmp_path / "t.json", events))
    assert "launch_bound" in advice
    assert "300 calls" in advice["launch_bound"] and "of all compute time (" in advice["launch_bound"]


def test_fused_attention_gets_no_fusion_advice(db) -> None:
    for rel in ("tracelens/qwen1.5-0.5b-chat/h100.json.gz", "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz"):
        advice = _advice(shared_trace(rel))
        assert "flash_attention" not in advice.get("memory_below_bandwidth", ""), rel
        for message in advice.values():
            assert ", []" not in message  # shapes without their trailing empty entries


def test_host_copies_get_no_fusion_advice(db) -> None:
    advice = _advice(shared_trace("hta/a100_sxm4_80gb_training_large.json.gz"))
    assert "aten::copy_" not in advice.get("memory_below_bandwidth", "")


def test_idle_needs_many_activities(db, tmp_path: Path) -> None:
    two = [kernel("gemm_kernel", 0.0, 10.0), kernel("gemm_kernel", 50_000.0, 10.0)]
    assert "gpu_idle" not in _advice(write_trace(tmp_path / "two.json", two))
    many = [kernel("gemm_kernel", float(i * 1000), 100.0) for i in range(40)]
    advice = _advice(write_trace(tmp_path / "many.json", many))
    assert "gpu_idle" in advice and "idle 90%" in advice["gpu_idle"] and "ms of" in advice["gpu_idle"]
