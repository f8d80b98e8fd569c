"""Telemetry on the traces' time base: samples matched to the kernel running at that instant."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

BASE_NS = 1_700_000_000_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132, "warpSize": 32}]


def test_samples_take_the_class_of_the_kernel_running_then(tmp_path: Path, db: Path) -> None:
    bf16 = "c10::BFloat16"
    events = [
        cpu_op("aten::mm", 0, 20, ext=1, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
        runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1),
        kernel("sm90_xmma_gemm_bf16", 100, 1500, corr=1),           # 100..1600 µs: compute-bound
        kernel("ncclDevKernel_AllReduce", 2000, 400, corr=2),       # 2000..2400 µs: communication
        kernel("mystery_kernel", 3000, 100, corr=3),                # 3000..3100: unknown (no model)
    ]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)
    assert run_cli("ingest", path).code == 0
    from gpuscope import store
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.analyzers.energy import telemetry_by_bound

    con = store.connect(db)
    with store.transaction(con):
        con.execute("INSERT INTO devices (run_id, device_id, key, source, device_index, vendor, kind, name) "
                    "VALUES (1, 5, 'nvml/gpu0', 'telemetry', 0, 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3')")
        for t_us, power, util in ((500, 600.0, 1.0), (1000, 640.0, 1.0), (1800, 90.0, 0.0), (2200, 250.0, 1.0),
                                  (3050, 300.0, 1.0), (9000, 70.0, 0.0)):   # the last is outside the traced span
            con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w, gpu_util) VALUES (1, 5, ?, ?, ?)",
                        [BASE_NS + t_us * 1000, power, util])
    con.close()
    con = store.connect(db, read_only=True)
    try:
        doc = analyze_run(con, 1)
        bounds = {k["name"]: k["bound"] for k in doc["kernels"] if k["category"] == "compute"}
        out = telemetry_by_bound(con, 1, bounds)
    finally:
        con.close()
    assert bounds["sm90_xmma_gemm_bf16"] == "compute_bound"
    assert out["compute_bound"]["samples"] == 2 and out["compute_bound"]["power_w_mean"] == pytest.approx(620.0)
    assert out["idle"] == {"samples": 1, "power_w_mean": 90.0, "gpu_util_mean": 0.0}
    assert out["communication"]["power_w_mean"] == pytest.approx(250.0)
    assert out["unknown"]["samples"] == 1
    assert sum(v["samples"] for v in out.values()) == 5
