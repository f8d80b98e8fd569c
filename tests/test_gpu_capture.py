"""On a real GPU: CUPTI kernel capture through torch.profiler, ingested and linked to ops, and the
device identified against the spec database. Skipped without a CUDA or ROCm GPU visible to torch."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU visible to torch (CUDA or ROCm)")]


def test_kernels_are_captured_linked_and_the_gpu_identified(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(5):
            b = a @ a
        torch.cuda.synchronize()
    trace = tmp_path / "gpu.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    db = tmp_path / "s.duckdb"
    r = run_cli("analyze", trace, "--db", db, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["gpu_activity"] and doc["time_us"]["compute"] > 0
    mm = [o for o in doc["ops"] if o["name"] == "aten::mm"]
    assert mm and mm[0]["count"] == 5 and mm[0]["flops"] == 2 * 2048**3 and mm[0]["kernel_us"] > 0
    (dev,) = [d for d in doc["devices"] if d.get("vendor") in ("nvidia", "amd")]
    assert dev["spec"] is not None, f"{torch.cuda.get_device_name()} not identified: {dev}"
    linked = run_cli("sql", "--db", db, "--json",
                     "SELECT count(*) AS n, count(op_id) AS linked FROM kernels WHERE kind = 'kernel'").json()[0]
    assert linked["n"] >= 5 and linked["linked"] == linked["n"]
    del b
