"""Make the SYNTHETIC recording in fixtures/recordings/ (no real GPU was used).

    python tests/fakes/make_recording.py fixtures/recordings/synthetic_h100_a100.jsonl

A generated NVML table (an H100 running a short prefill / decode / idle pattern, an A100 idle
until it is lost at tick 20) goes through the real :class:`NvmlCollector` (so the values are
converted exactly as live ones would be), plus hand-made host rows; timestamps are fixed
(10 Hz from 2026-01-01T00:00:00Z) so the file is the same on every run.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes.fake_pynvml import FakeNvml  # noqa: E402

from gpuscope.collectors import DeviceInfo, NvmlCollector, Sample  # noqa: E402
from gpuscope.collectors.replay import RecordingWriter  # noqa: E402

T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
TICKS = 30
INTERVAL_S = 0.1


def table() -> dict:
    ticks0, ticks1 = [], []
    energy0, energy1 = 98_765_432_100, 5_000_000  # mJ
    for k in range(TICKS):
        if k < 5:  # prefill
            util, mem_util, power, sm, occ, tensor, dram = 100, 60, 690_000, 97.0, 45.0, 80.0, 55.0
        elif k < 25:  # decode: memory bound
            util, mem_util, power, sm, occ, tensor, dram = 92, 85, 455_000 + 1000 * (k % 3), 70.0, 20.0, 25.0, 88.0
        else:  # idle
            util, mem_util, power, sm, occ, tensor, dram = 0, 0, 112_000, 0.0, 0.0, 0.0, 0.5
        energy0 += power * INTERVAL_S
        energy1 += 61_000 * INTERVAL_S
        ticks0.append({
            "util": [util, mem_util], "temp": 55 + k // 3, "clock_sm": 1980 if util else 345,
            "fields": {"186": power, "185": power - 2000, "83": int(energy0), "82": 62 + k // 4,
                       "197": 1_000_000_000 + k * 50_000_000, "198": 2_000_000_000 + k * 5_000_000,
                       "138:0": 10_000 + k * 1000, "139:0": 20_000 + k * 500},
            "field_ts_us": k * 100_000,
            "gpm": {"2": sm, "3": occ, "5": tensor, "10": dram},
        })
        ticks1.append({"lost": True} if k >= 20 else {"fields": {"83": int(energy1)}, "field_ts_us": k * 100_000})
    base0 = {"memory": {"total": 85520809984, "used": 60129542144}, "clock_mem": 2619, "throttle": 0,
             "fan": "NOT_SUPPORTED", "processes": [], "process_util": [],
             "fields": {"91": 1, "190": 700000}}
    base1 = {"util": [0, 0], "memory": {"total": 85899345920, "used": 4194304}, "temp": 31, "clock_sm": 210,
             "clock_mem": 1593, "throttle": 1, "fan": "NOT_SUPPORTED", "pcie_throughput": [0, 0],
             "processes": [], "process_util": "NOT_SUPPORTED",
             "fields": {"91": 0, "185": 61000, "186": "NOT_SUPPORTED", "83": 5000000, "82": 29, "190": 400000,
                        "197": "NOT_SUPPORTED", "198": "NOT_SUPPORTED"}}
    return {"driver_version": "570.124.06", "devices": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-4000-8000-5e1a7c2b0001", "busId": "00000000:18:00.0",
         "pciDeviceId": "0x233010DE", "arch": 9, "cc": [9, 0], "gpm": True, "mig_mode": [0, 0], "base": base0,
         "ticks": ticks0},
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-00000000-0000-4000-8000-5e1a7c2b0002", "busId": "00000000:3B:00.0",
         "pciDeviceId": "0x20B210DE", "arch": 7, "cc": [8, 0], "gpm": False, "mig_mode": [0, 0], "base": base1,
         "ticks": ticks1},
    ]}


def main(out: str) -> None:
    fake = FakeNvml(table(), epoch_us=T0_NS // 1000)
    c = NvmlCollector(nvml=fake, gpm_min_interval_s=0.0, pcie_fallback_interval_s=0.0)
    devices = c.open()
    host = DeviceInfo(key="host", vendor="host", kind="host", name="Synthetic CPU", memory_total_bytes=2_147_483_648 * 256,
                      supported=("host_cpu_util", "host_mem_used_bytes", "host_mem_total_bytes", "proc_cpu_cores",
                                 "proc_rss_bytes", "proc_count"),
                      properties={"hostname": "synthetic", "cpus_logical": 224})
    w = RecordingWriter(out, devices + [host], interval_s=INTERVAL_S, vendors=[c.status], synthetic=True,
                        note="SYNTHETIC: made by tests/fakes/make_recording.py from a generated NVML table; "
                             "not recorded from a real GPU",
                        header={"created_ns": T0_NS, "host": "synthetic", "gpuscope_version": "0.1.0"})
    for k in range(TICKS):
        rows = c.sample()
        for s in rows:  # fixed timestamps: the same file on every run
            s.ts_ns = T0_NS + k * int(INTERVAL_S * 1e9)
        rows.append(Sample("host", T0_NS + k * int(INTERVAL_S * 1e9) + 150_000, {
            "host_cpu_util": 0.05 if k >= 25 else 0.12, "host_mem_used_bytes": 64 * 2**30 + k * 2**20,
            "host_mem_total_bytes": 512 * 2**30, "proc_cpu_cores": None if k == 0 else (1.0 if k < 25 else 0.02),
            "proc_rss_bytes": 9 * 2**30, "proc_count": 3}))
        w.write_tick(k, rows)
        fake.step()
    w.close({"synthetic": True})
    c.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures/recordings/synthetic_h100_a100.jsonl")
