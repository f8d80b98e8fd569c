"""Copies are judged against the link they cross (design.md §4.2): host<->device copies against
the host link of the spec database (PCIe generation x width, NVLink-C2C), device-to-device
copies against device memory; an op dominated by host copies gets advice about the copies.

The A100 training trace of HTA is the case of issue 14: ``aten::copy_`` [[4096,2798]] took
20.3 ms, 19.1 ms of it in five ``Memcpy HtoD (Pinned -> Device)`` of 45.8 MB, and was reported at
6% of the HBM roof with 19 ms to gain."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.analyzers.roofline import LATENCY_WORK_US, Roof, classify_copy, classify_cost
from gpuscope.kernel_names import copy_direction, copy_link
from gpuscope.specs import pcie_bytes_per_s

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

A100_TRACE = "hta/a100_sxm4_80gb_training_large.json.gz"
PCIE4_X16 = 16e9 * 16 * 128 / 130 / 8  # bytes/s, one direction
A100_HBM = 2.039e12


@pytest.mark.parametrize("name, direction, link", [
    ("Memcpy HtoD (Pinned -> Device)", "HtoD", "host_link"),
    ("Memcpy HtoD (Pageable -> Device)", "HtoD", "host_link"),
    ("Memcpy DtoH (Device -> Pinned)", "DtoH", "host_link"),
    ("Memcpy DtoD (Device -> Device)", "DtoD", "device_memory"),
    ("Memcpy PtoP (Device -> Device)", "PtoP", "peer"),
    ("Memcpy HtoA (Pinned -> Array)", "HtoD", "host_link"),  # a CUDA array is device memory
    ("Memcpy HtoD (Host -> Device)", "HtoD", "host_link"),  # what ROCm's Kineto writes (MI250, MI300X traces)
    ("Memcpy DtoH (Device -> Host)", "DtoH", "host_link"),
    ("CopyHostToDevice", "HtoD", "host_link"),  # roctracer / rocprof
    ("CopyDeviceToHost", "DtoH", "host_link"),
    ("CopyDeviceToDevice", "DtoD", "device_memory"),
    ("MEMORY_COPY_HOST_TO_DEVICE", "HtoD", "host_link"),  # rocprofiler-sdk
    ("hipMemcpyDtoHAsync", "DtoH", "host_link"),
    ("Memcpy (Pinned -> Device)", "HtoD", "host_link"),  # no kind: the endpoints say it
    ("Memcpy <unknown> (Managed -> Device)", None, None),  # managed memory: the link is not known
    ("Memset (Device)", None, None),
    ("void copy_kernel<HtoDish>", None, None),
])
def test_copy_direction_and_link_from_the_name(name: str, direction: str | None, link: str | None) -> None:
    assert copy_direction(name) == direction
    assert copy_link(name) == link


def test_every_gpu_has_a_host_link_with_a_source(specdb) -> None:
    for s in specdb.all():
        assert s.host_link in ("pcie", "nvlink-c2c", "unified-memory"), s.key
        assert s.sources.get("host_link"), s.key
        if s.host_link == "pcie":
            assert s.pcie_generation in (3, 4, 5) and s.pcie_lanes == 16, s.key  # Gen3: V100, T4
            assert s.host_link_bytes_per_s == pytest.approx(pcie_bytes_per_s(s.pcie_generation, s.pcie_lanes), abs=1)
            assert "GS" in s.sources["host_link_bytes_per_s"] and "host_link_bytes_per_s" in s.derived
            assert s.host_link_label() == f"PCIe Gen{s.pcie_generation} x16"
    assert specdb.get("a100-sxm").host_copy_bytes_per_s() == pytest.approx(PCIE4_X16, abs=1)
    assert specdb.get("h100-sxm").host_copy_bytes_per_s() == pytest.approx(63.015e9, rel=1e-4)
    assert specdb.get("mi300x").pcie_generation == 5 and specdb.get("mi210").pcie_generation == 4
    gb200 = specdb.get("gb200")  # NVLink-C2C, 900 GB/s both directions together
    assert gb200.host_link == "nvlink-c2c" and gb200.host_copy_bytes_per_s() == 450e9
    mi300a = specdb.get("mi300a")  # host memory is its HBM: copies are judged against it
    assert mi300a.host_link == "unified-memory" and mi300a.host_copy_bytes_per_s() == mi300a.mem_bw_bytes_per_s


def test_pcie_bandwidth_per_direction_by_generation() -> None:
    # PCI-SIG's payload rates per direction for x16 (Wikipedia's comparison table)
    assert [round(pcie_bytes_per_s(g, 16) / 1e9, 3) for g in (3, 4, 5, 6)] == [15.754, 31.508, 63.015, 121.0]
    assert pcie_bytes_per_s(4, 8) == pytest.approx(PCIE4_X16 / 2)


def test_user_file_narrower_slot_derives_the_link_again(tmp_path: Path, no_user_specs) -> None:
    from gpuscope.specs import load_specs

    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"gpus": [
        {"key": "a100-sxm", "pcie_lanes": 8},
        {"key": "acme-x1", "name": "Acme X1", "mem_bw_tbps": 4.0, "peak_tflops": {"bf16": 1000}, "pcie_generation": 5,
         "pcie_lanes": 16},
    ]}))
    db = load_specs(f)
    assert db.get("a100-sxm").host_link_bytes_per_s == pytest.approx(PCIE4_X16 / 2, abs=1)
    assert db.get("acme-x1").host_copy_bytes_per_s() == pytest.approx(63.015e9, rel=1e-4)
    assert db.get("acme-x1").host_link_label() == "PCIe Gen5 x16"
    f.write_text(json.dumps({"gpus": [{"key": "a100-sxm", "pcie_generation": 9}]}))
    with pytest.raises(Exception, match="pcie_generation"):
        load_specs(f)


ROOF = Roof("t", "spec", {"fp32": 20e12}, A100_HBM, None, PCIE4_X16, "PCIe Gen4 x16")


def test_host_copy_is_bound_by_the_host_link_not_device_memory() -> None:
    size = 45842432.0  # an fp32 [4096, 2798] tensor
    # aten::copy_'s cost model: read one tensor, write the other (HBM roof 45 µs a call)
    v = classify_cost(0, 2 * size, "fp32", time_us=3826.6, roof=ROOF, host_bytes=size)
    assert v.bound == "memory_bound" and v.link == "host_link"
    assert v.roof_us == pytest.approx(size / PCIE4_X16 * 1e6)
    assert v.achieved_bytes_per_s == pytest.approx(size / 3826.6e-6)  # over the link, not HBM traffic
    assert "PCIe Gen4 x16" in v.reason and "31.5 GB/s per direction" in v.reason
    on_device = classify_cost(0, 2 * size, "fp32", time_us=60.0, roof=ROOF)
    assert on_device.link == "device_memory" and on_device.roof_us == pytest.approx(2 * size / A100_HBM * 1e6)
    assert classify_cost(0, 2 * size, "fp32", 100.0, ROOF, host_bytes=None).bound == "unknown"
    no_link = Roof("t", "spec", {"fp32": 20e12}, A100_HBM)
    assert "no host link" in classify_cost(0, 2 * size, "fp32", 100.0, no_link, host_bytes=size).reason


def test_copy_activities_against_their_link() -> None:
    h2d = classify_copy("host_link", "HtoD", 64e6, 4000.0, ROOF)
    assert h2d.bound == "memory_bound" and h2d.roof_us == pytest.approx(64e6 / PCIE4_X16 * 1e6)
    assert h2d.achieved_bytes_per_s == pytest.approx(16e9)
    d2d = classify_copy("device_memory", "DtoD", 64e6, 100.0, ROOF)  # read and written: 2 x bytes
    assert d2d.roof_us == pytest.approx(2 * 64e6 / A100_HBM * 1e6)
    fill = classify_copy("device_memory", "fill", 64e6, 100.0, ROOF)  # written once
    assert fill.roof_us == pytest.approx(64e6 / A100_HBM * 1e6)
    tiny = classify_copy("host_link", "DtoH", 48, 5.0, ROOF)
    assert tiny.bound == "latency_bound" and tiny.roof_us < LATENCY_WORK_US
    assert classify_copy("peer", "PtoP", 64e6, 100.0, ROOF).roof_us is None
    assert "no byte count" in classify_copy("host_link", "HtoD", None, 100.0, ROOF).reason


@pytest.fixture(scope="module")
def a100(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = shared_trace(A100_TRACE)
    db = tmp_path_factory.mktemp("a100") / "store.duckdb"
    r = run_cli("analyze", path, "--db", db, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    doc["_text"] = run_cli("analyze", "--db", db, "--wide").out
    return doc


def test_a100_host_to_device_copy_op_is_judged_against_pcie(a100: dict) -> None:
    (op,) = [o for o in a100["ops"] if o["name"] == "aten::copy_" and o["input_dims"][:2] == [[4096, 2798]] * 2]
    size = 4096 * 2798 * 4
    assert op["count"] == 25 and op["kernel_us"] == pytest.approx(20317.0)
    assert op["host_copy_us"] == pytest.approx(19133.0) and op["host_copy_bytes"] == 5 * size
    assert op["bound"] == "memory_bound" and op["link"] == "host_link"
    # 5 calls copy from pinned host memory over PCIe Gen4 x16, 20 calls copy on the device
    roof_us = 5 * size / PCIE4_X16 * 1e6 + 20 * 2 * size / A100_HBM * 1e6
    assert op["roof_us"] == pytest.approx(roof_us, rel=1e-6)
    assert op["pct_of_roof"] == pytest.approx(roof_us / 20317.0, rel=1e-6)  # 40%, was 6% of HBM
    assert op["saved_us"] == pytest.approx(20317.0 - roof_us, rel=1e-6)  # 12.1 ms, was 19.2 ms
    assert op["achieved_bytes_per_s"] == pytest.approx(5 * size / 19133e-6)  # 12.0 GB/s, was 112.8 GB/s
    assert "host link" in op["reason"] and "5 of 25 calls" in op["reason"]


def test_a100_copy_activities_against_host_link_and_device_memory(a100: dict) -> None:
    kernels = {k["name"]: k for k in a100["kernels"]}
    h2d = kernels["Memcpy HtoD (Pinned -> Device)"]
    assert h2d["link"] == "host_link" and h2d["direction"] == "HtoD" and h2d["bound"] == "memory_bound"
    assert h2d["bytes"] == 253534084 and h2d["achieved_bytes_per_s"] == pytest.approx(253534084 / 21073e-6)
    assert 0.3 < h2d["pct_of_roof"] < 0.45
    d2d = kernels["Memcpy DtoD (Device -> Device)"]
    assert d2d["link"] == "device_memory" and d2d["pct_of_roof"] is not None
    assert kernels["Memcpy DtoH (Device -> Pageable)"]["bound"] == "latency_bound"  # 48-byte copies
    assert kernels["Memset (Device)"]["link"] == "device_memory"
    (dev,) = a100["roofline"]["devices"]
    assert dev["host_link"] == "PCIe Gen4 x16" and dev["host_link_bytes_per_s"] == pytest.approx(PCIE4_X16, abs=1)


def test_a100_advice_is_about_the_copies_never_fusion(a100: dict) -> None:
    advice = {a["kind"]: a["message"] for a in a100["advice"]}
    assert "aten::copy_" not in advice.get("memory_below_bandwidth", "")
    msg = advice["host_copies"]
    assert "PCIe Gen4 x16" in msg and "non_blocking=True" in msg and "fuse" not in msg
    assert "Largest: aten::copy_ [[4096, 2798], [4096, 2798]]" in msg
    assert "pin_memory" not in msg  # the big copies are already pinned; the pageable ones are 82 µs
    text = a100["_text"]
    assert "gpu0: host<->device copies judged against PCIe Gen4 x16 (31.5 GB/s per direction)" in text
    assert any(line.startswith("aten::copy_") and "host link" in line and "12.0 GB/s" in line
               for line in text.splitlines())


def test_amd_copies_from_real_rocm_traces(db) -> None:
    # the MI250 trace's HtoD copies carry no byte count: judged as host-link copies of unknown size
    doc = run_cli("analyze", shared_trace("hta/mi250_rocm6.2_minitoy_train.json.gz"), "--gpu", "mi250-gcd",
                  "--json").json()
    (h2d,) = [k for k in doc["kernels"] if k["category"] == "memory"]
    assert h2d["name"] == "Memcpy HtoD (Host -> Device)" and h2d["link"] == "host_link"
    assert h2d["pct_of_roof"] is None and "no byte count" in h2d["reason"]
    # the vLLM replay on an MI300X: device-to-device copies against its HBM
    doc = run_cli("analyze", shared_trace("tracelens/vllm_decode_cudagraph/graph_execution.json.gz"),
                  "--json").json()
    (d2d,) = [k for k in doc["kernels"] if k["category"] == "memory"]
    assert d2d["link"] == "device_memory" and d2d["direction"] == "DtoD" and d2d["roof_us"] is not None


def test_rocprof_copy_names_are_memory_and_judged_against_the_host_link(tmp_path: Path, db) -> None:
    """A copy recorded as a kernel named ``CopyHostToDevice`` (roctracer's name) is memory time,
    not compute, and the op that made it is judged against the MI300X's PCIe Gen5 x16 link."""
    size = 64 * 2**20
    events = [
        cpu_op("aten::copy_", 0.0, 50.0, ext=1, dims=[[16, 2**20], [16, 2**20], []],
               types=["float", "float", "Scalar"]),
        runtime("hipMemcpyWithStream", 1.0, 40.0, corr=11, ext=1, cat="cuda_runtime"),
        kernel("CopyHostToDevice", 10.0, 2097.152, corr=11, bytes=size),  # 32 GB/s
        kernel("gemm_kernel", 2200.0, 100.0),
    ]
    doc = run_cli("analyze", write_trace(tmp_path / "t.json", events), "--gpu", "mi300x", "--json").json()
    assert doc["time_us"]["memory"] == pytest.approx(2097.152) and doc["time_us"]["compute"] == pytest.approx(100.0)
    (copy,) = [k for k in doc["kernels"] if k["name"] == "CopyHostToDevice"]
    assert copy["category"] == "memory" and copy["link"] == "host_link"
    assert copy["pct_of_roof"] == pytest.approx(size / pcie_bytes_per_s(5, 16) * 1e6 / 2097.152)
    (op,) = doc["ops"]
    assert op["link"] == "host_link" and op["host_copy_us"] == pytest.approx(2097.152)
    assert op["achieved_bytes_per_s"] == pytest.approx(size / 2097.152e-6)
