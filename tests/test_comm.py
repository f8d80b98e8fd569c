"""Collectives judged against the GPU-to-GPU link (issue 31, points 1-3; analyzers/comm.py).

Bus bandwidth is checked against nccl-tests' definitions (doc/PERFORMANCE.md), computed by hand
here from the message size, the group size and the measured time; the link roofs come from the
spec database's scale-up links."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analyzers.comm import (
    COMMUNICATION_BOUND,
    PeerLink,
    bus_factor,
    describe,
    judge,
    link_factor,
    peer_link_of,
)

from conftest import REPO, runtime, shared_trace, write_trace

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816, "computeMajor": 9,
         "computeMinor": 0, "numSms": 132, "warpSize": 32}]
NVLINK4 = PeerLink("NVLink4 x18", "nvlink4", "switch", 18, 25e9, 450e9, 8, 63e9)
XGMI = PeerLink("Infinity Fabric x7", "infinity-fabric", "mesh", 7, 64e9, 448e9, 8, 63e9)


# ---------------------------------------------------------------------------------------------
# the formulas
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("collective, n, factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_reduce", 2, 1.0), ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 3 / 4),
    ("all_to_all", 16, 15 / 16), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("send_recv", 2, 1.0),
])
def test_bus_factor_is_nccl_tests(collective: str, n: int, factor: float) -> None:
    assert bus_factor(collective, n) == pytest.approx(factor)


def test_link_factor_of_switch_and_one_shot_all_reduce() -> None:
    # NVLS: each GPU sends every slice once to the switch and its reduced slice once: S (n+1)/n
    assert link_factor("all_reduce", "nvls", 8) == pytest.approx(9 / 8)
    # vLLM's one-stage custom all-reduce reads every peer's whole buffer
    assert link_factor("all_reduce", "one_shot", 4) == 3.0
    assert link_factor("all_reduce", "ring", 8) == pytest.approx(1.75)
    assert link_factor("all_reduce", "ring", 1) is None


def test_mesh_link_uses_one_link_per_peer() -> None:
    assert XGMI.bytes_per_s_for(2) == 64e9
    assert XGMI.bytes_per_s_for(4) == 3 * 64e9
    assert XGMI.bytes_per_s_for(8) == 448e9
    assert XGMI.bytes_per_s_for(16) is None  # beyond one 8-GPU platform: the network is not known
    assert NVLINK4.bytes_per_s_for(2) == 450e9  # behind NVSwitch every pair has the whole bandwidth


@pytest.mark.parametrize("collective, n, size", [
    ("all_reduce", 8, 64 << 20), ("all_gather", 8, 64 << 20), ("reduce_scatter", 4, 32 << 20),
    ("all_to_all", 8, 16 << 20), ("broadcast", 8, 8 << 20), ("send_recv", 2, 8 << 20),
])
def test_judge_bus_bandwidth_and_percent(collective: str, n: int, size: int) -> None:
    t_us = 1000.0  # two calls
    j = judge(collective, "ring", float(size), n, 2, t_us, NVLINK4)
    algbw = 2 * size / (t_us / 1e6)
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "send_recv": 1.0}.get(collective, (n - 1) / n)
    assert j["algbw_bytes_per_s"] == pytest.approx(algbw)
    assert j["busbw_bytes_per_s"] == pytest.approx(algbw * factor)
    # ring: the percent of the link roof is the bus bandwidth over the link's one-direction bandwidth
    assert j["pct_of_roof"] == pytest.approx(algbw * factor / 450e9)
    assert j["bound"] == COMMUNICATION_BOUND


def test_small_message_is_latency_bound() -> None:
    # 64 KB ring all-reduce of 8: 7 x 2 steps x 0.6 µs = 8.4 µs of latency, 0.25 µs of transfer
    j = judge("all_reduce", "ring", 65536.0, 8, 1, 20.0, NVLINK4)
    assert j["bound"] == "latency_bound"
    assert j["pct_of_roof"] == pytest.approx(65536 * 1.75 / 450e9 / 20e-6)


def test_faster_than_the_link_is_a_model_error_never_above_100() -> None:
    # 256 MB ring all-reduce of 8 in 500 µs: busbw 940 GB/s on a 450 GB/s link
    j = judge("all_reduce", "ring", float(256 << 20), 8, 1, 500.0, NVLINK4)
    assert j["model_error"] and j["pct_of_roof"] is None and j["roof_us"] is None
    assert j["reason"].startswith("model_error:")
    # the same all-reduce run by NVLS moves (n+1)/n S per GPU: 302 MB / 450 GB/s = 671 µs, still faster
    j2 = judge("all_reduce", "nvls", float(256 << 20), 8, 1, 700.0, NVLINK4)
    assert not j2["model_error"] and 0 < j2["pct_of_roof"] <= 1
    assert j2["pct_of_roof"] == pytest.approx((256 << 20) * 9 / 8 / 450e9 / 700e-6)
    # its nccl-tests bus bandwidth is above the link: the ring formula does not describe NVLS traffic
    assert j2["busbw_bytes_per_s"] > 450e9


def test_no_link_or_group_beyond_the_domain_is_unjudged() -> None:
    assert judge("all_reduce", "ring", 1e6, 8, 1, 50.0, None)["roof_us"] is None
    j = judge("all_reduce", "ring", 1e6, 16, 1, 50.0, NVLINK4)
    assert j["roof_us"] is None and "does not fit one" in j["reason"]


def test_describe_reads_the_ops() -> None:
    # c10d all-gather: (output, input); the group from the ratio, the size is the output's
    d = describe("ncclDevKernel_AllGather_RING_LL(x)", [
        ("record_param_comms", "[[8192,64]]", '["float"]', None),
        ("c10d::_allgather_base_", "[[65536,64],[8192,64],[]]", '["float","float",""]', None),
        (None, None, None, None)])
    assert (d.collective, d.algorithm, d.message_bytes, d.group_size) == ("all_gather", "ring", 65536 * 64 * 4, 8)
    # record_param_comms' last argument is the group's size (PyTorch 2.x)
    rpc = ("record_param_comms", json.dumps([[1, 100]] + [[]] * 9),
           json.dumps(["c10::BFloat16", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar",
                       "Scalar"]), json.dumps(["", "", "", "0", "", "[]", "[]", "0", "1", "4"]))
    d = describe("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", [rpc, ("c10d::allreduce_", "[[]]", '["TensorList"]',
                                                                       None)])
    assert (d.collective, d.message_bytes, d.group_size, d.group_size_source) == ("all_reduce", 200, 4,
                                                                                 "record_param_comms")
    # vLLM's all-reduce: the group is the tensor-parallel degree, unknown without it
    chain = [("symm_mem::multimem_all_reduce_", "[[1024],[],[]]", '["c10::BFloat16","",""]', None),
             ("vllm::all_reduce", "[[1024],[]]", '["c10::BFloat16",""]', None)]
    d = describe("void multimem_all_reduce_kernel<c10::BFloat16, 16>(x)", chain, tensor_parallel=8)
    assert (d.collective, d.algorithm, d.message_bytes, d.group_size) == ("all_reduce", "nvls", 2048, 8)
    d = describe("void multimem_all_reduce_kernel<c10::BFloat16, 16>(x)", chain)
    assert d.group_size is None and "group size" in (d.missing or "")


def test_spec_links_as_published(specdb: Any) -> None:
    """Scale-up links of the spec database, one direction (vendors quote both directions)."""
    expect = {"a100-sxm": ("nvlink3", 12, 300e9), "h100-sxm": ("nvlink4", 18, 450e9), "h200": ("nvlink4", 18, 450e9),
              "b200": ("nvlink5", 18, 900e9), "gb200": ("nvlink5", 18, 900e9),
              "mi300x": ("infinity-fabric", 7, 448e9), "mi325x": ("infinity-fabric", 7, 448e9),
              "mi355x": ("infinity-fabric", 7, 537.6e9)}
    for key, (kind, links, total) in expect.items():
        s = specdb.get(key)
        assert (s.scaleup_link, s.scaleup_links) == (kind, links), key
        assert s.scaleup_bytes_per_s == pytest.approx(total), key
        assert s.sources.get("scaleup_bytes_per_s"), key
        link = peer_link_of(s)
        assert link is not None and link.bytes_per_s_for(8) == pytest.approx(total)
    assert specdb.get("gb200").peer_bytes_per_s(72) == 900e9  # one NVL72 rack is one NVLink domain
    for key in ("l40s", "l4", "a10", "t4", "mi210"):  # PCIe cards: peer-to-peer at the host link's rate
        s = specdb.get(key)
        assert s.scaleup_link == "pcie" and s.peer_bytes_per_s(4) == s.host_link_bytes_per_s
    assert specdb.get("v100-sxm2-16gb").peer_bytes_per_s(8) is None  # a hybrid cube-mesh: not modelled


def test_user_spec_link_figures_must_agree(tmp_path: Path, no_user_specs: None) -> None:
    from gpuscope.errors import InputError
    from gpuscope.specs import load_specs

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"key": "h100-sxm", "scaleup_links": 18, "scaleup_link_bytes_per_s": 50e9,
                                "scaleup_bytes_per_s": 450e9}]))
    with pytest.raises(InputError, match="scaleup_bytes_per_s"):
        load_specs(str(bad))
    bad.write_text(json.dumps([{"key": "h100-sxm", "scaleup_link": "nvlink9"}]))
    with pytest.raises(InputError, match="scaleup_link must be one of"):
        load_specs(str(bad))


# ---------------------------------------------------------------------------------------------
# a synthetic trace, end to end
# ---------------------------------------------------------------------------------------------


def _collective(events: list[dict[str, Any]], ext: int, ts: float, c10d: str, dims: list[Any], types: list[str],
                rpc_dims: list[Any], rpc_types: list[str], rpc_concrete: list[str] | None, kernel_name: str,
                kernel_us: float) -> None:
    events.append({"ph": "X", "cat": "cpu_op", "name": c10d, "pid": 100, "tid": 100, "ts": ts, "dur": 50,
                   "args": {"External id": ext, "Input Dims": dims, "Input type": types}})
    rpc_args: dict[str, Any] = {"External id": ext + 1, "Input Dims": rpc_dims, "Input type": rpc_types}
    if rpc_concrete is not None:
        rpc_args["Concrete Inputs"] = rpc_concrete
    events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 100, "ts": ts + 5,
                   "dur": 40, "args": rpc_args})
    events.append(runtime("cudaLaunchKernel", ts + 10, 5, ext, ext + 1))
    events.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": 0, "tid": 7, "ts": ts + 100,
                   "dur": kernel_us, "args": {"device": 0, "stream": 7, "correlation": ext}})


RPC_TYPES = ["float", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"]


def _synthetic_run(tmp_path: Path) -> dict[str, Any]:
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    ev: list[dict[str, Any]] = []
    mb = 1 << 20
    # all-reduce of 16 MB fp32 over 8 ranks, 100 µs: busbw 1.75 x 167.8 GB/s = 293.6 GB/s, 65 % of 450
    _collective(ev, 10, 1000, "c10d::allreduce_", [[]], ["TensorList"], [[4 * mb]] + [[]] * 9, RPC_TYPES,
                ["", "", "", "0", "", "[]", "[]", "0", "1", "8"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 100.0)
    # all-gather of 8 x 1 MB fp32 (32 MB out), 200 µs: busbw 7/8 x 167.8 GB/s
    _collective(ev, 20, 2000, "c10d::_allgather_base_", [[8 * mb], [mb], []], ["float", "float", ""],
                [[mb]], ["float"], None, "ncclDevKernel_AllGather_RING_LL(x)", 200.0)
    # reduce-scatter, 4 ranks: input 4 MB floats (16 MB), 80 µs
    _collective(ev, 30, 3000, "c10d::_reduce_scatter_base_", [[mb], [4 * mb], []], ["float", "float", ""],
                [[4 * mb]], ["float"], None, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(x)", 80.0)
    # all-to-all whose group is not recorded: unjudged, reason communication
    _collective(ev, 40, 4000, "c10d::alltoall_base_", [[mb], [mb], []], ["float", "float", ""],
                [[mb]], ["float"], None, "ncclDevKernel_SendRecv(x)", 50.0)
    # 1 GB all-reduce in 1 ms on 8 ranks: 3.76 TB/s of ring traffic on a 450 GB/s link: a model error
    _collective(ev, 50, 5000, "c10d::allreduce_", [[]], ["TensorList"], [[256 * mb]] + [[]] * 9, RPC_TYPES,
                ["", "", "", "0", "", "[]", "[]", "0", "1", "8"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1000.0)
    trace = write_trace(tmp_path / "comm.json", ev, deviceProperties=H100)
    db = tmp_path / "s.duckdb"
    res = ingest(db, [str(trace)], name="comm")
    con = connect(db)
    try:
        return analyze_run(con, res.run_id)
    finally:
        con.close()


def test_synthetic_collectives_judged(tmp_path: Path, no_user_specs: None) -> None:
    doc = _synthetic_run(tmp_path)
    comm = doc["communication"]
    by = {(e["collective"], e["kernel_us"]): e for e in comm["entries"]}
    mb = 1 << 20
    ar = by[("all_reduce", 100.0)]
    assert ar["bytes"] == 16 * mb and ar["group_size"] == 8
    assert ar["busbw_bytes_per_s"] == pytest.approx(2 * 7 / 8 * 16 * mb / 100e-6)
    assert ar["pct_of_roof"] == pytest.approx(2 * 7 / 8 * 16 * mb / 100e-6 / 450e9)
    assert ar["bound"] == COMMUNICATION_BOUND and ar["link"] == "NVLink4 x18"
    ag = by[("all_gather", 200.0)]
    assert (ag["bytes"], ag["group_size"]) == (32 * mb, 8)
    assert ag["busbw_bytes_per_s"] == pytest.approx(7 / 8 * 32 * mb / 200e-6)
    rs = by[("reduce_scatter", 80.0)]
    assert (rs["bytes"], rs["group_size"]) == (16 * mb, 4)
    assert rs["busbw_bytes_per_s"] == pytest.approx(3 / 4 * 16 * mb / 80e-6)
    a2a = by[("all_to_all", 50.0)]
    assert a2a["roof_us"] is None and "group size not recorded" in a2a["reason"]
    bad = by[("all_reduce", 1000.0)]
    assert bad["model_error"] and bad["pct_of_roof"] is None
    for e in comm["entries"]:
        assert e["pct_of_roof"] is None or e["pct_of_roof"] <= 1.0
    assert any(n.startswith("model_error:") and "AllReduce" in n for n in doc["notes"])
    # coverage: the three judged collectives count, the others keep their reason
    cov = doc["coverage"]
    assert cov["judged_us"] == pytest.approx(100 + 200 + 80)
    assert cov["by_reason"]["communication"] == pytest.approx(50.0)
    assert cov["by_reason"]["model_error"] == pytest.approx(1000.0)
    block = comm["by_collective"]["all_reduce"]
    assert block["count"] == 2 and block["judged_us"] == pytest.approx(100.0)
    assert block["pct_of_roof"] == pytest.approx(ar["pct_of_roof"])


# ---------------------------------------------------------------------------------------------
# the shared traces
# ---------------------------------------------------------------------------------------------


def _shared_doc(tmp_path: Path, rel: str, model: str | None = None) -> tuple[dict[str, Any], Any, int]:
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.analyzers.modelspec import model_spec
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    path = shared_trace(rel)
    db = tmp_path / "s.duckdb"
    res = ingest(db, [str(path)], name=rel)
    con = connect(db)
    spec = None
    if model:
        cfg = REPO / "fixtures" / "models" / model
        spec = model_spec(json.loads(cfg.read_text()), name=model.split(".config")[0])
    return analyze_run(con, res.run_id, model=spec), con, res.run_id


def _kernel_us(con: Any, run_id: int, kernel_like: str, op: str, dims: str) -> tuple[int, float]:
    n, us = con.execute(
        "SELECT count(*), sum(k.dur_ns) / 1e3 FROM kernels k JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id "
        "WHERE k.run_id = ? AND k.name LIKE ? AND o.name = ? AND o.input_dims = ?", [run_id, kernel_like, op, dims]
    ).fetchone()
    return int(n), float(us)


def test_b200_multimem_and_nccl_all_gather(tmp_path: Path, no_user_specs: None) -> None:
    doc, con, run_id = _shared_doc(tmp_path, "tracelens/b200_eager.json.gz", "gpt-oss-120b.config.json")
    try:
        entries = doc["communication"]["entries"]
        # symm_mem::multimem_all_reduce_ of 2,557,440 bf16 over the 8 tensor-parallel ranks (gpt-oss-120b: 64 heads,
        # 8 per rank in the attention ops)
        n, us = _kernel_us(con, run_id, "%multimem_all_reduce_kernel%", "symm_mem::multimem_all_reduce_",
                           "[[2557440],[],[]]")
        e = next(x for x in entries if x["algorithm"] == "nvls" and x["bytes"] == 2557440 * 2)
        assert (e["count"], e["group_size"]) == (n, 8) and e["kernel_us"] == pytest.approx(us)
        assert e["busbw_bytes_per_s"] == pytest.approx(2 * 7 / 8 * 2557440 * 2 * n / (us / 1e6))
        # NVLS moves (n+1)/n of the message per GPU and direction over NVLink5's 900 GB/s
        assert e["pct_of_roof"] == pytest.approx(2557440 * 2 * 9 / 8 * n / 900e9 / (us / 1e6))
        # the NCCL all-gather: 25,136 bf16 per rank, group of 8 recorded by record_param_comms
        n, us = _kernel_us(con, run_id, "ncclDevKernel_AllGather%", "record_param_comms",
                           "[[1,25136],[],[],[],[],[],[],[],[],[]]")
        g = next(x for x in entries if x["collective"] == "all_gather")
        assert (g["bytes"], g["group_size"], g["count"]) == (8 * 25136 * 2, 8, n)
        assert g["busbw_bytes_per_s"] == pytest.approx(7 / 8 * 8 * 25136 * 2 / (us / 1e6))
        assert g["bound"] == "latency_bound"  # 402 KB: 7 ring steps of latency outweigh 0.4 µs of transfer
        for x in entries:
            assert x["pct_of_roof"] is None or x["pct_of_roof"] <= 1.0
        assert doc["coverage"]["share"] >= 0.95
    finally:
        con.close()


def test_hta_a100_nccl_kernels(tmp_path: Path, no_user_specs: None) -> None:
    doc, con, run_id = _shared_doc(tmp_path, "hta/a100_sxm4_80gb_training_large.json.gz")
    try:
        entries = doc["communication"]["entries"]
        # FSDP all-gather: output [65536, 384] fp32 from [8192, 384]: a group of 8
        n, us = _kernel_us(con, run_id, "ncclKernel_SendRecv%", "c10d::_allgather_base_", "[[65536,384],[8192,384],[]]")
        e = next(x for x in entries if x["collective"] == "all_gather" and x["bytes"] == 65536 * 384 * 4)
        assert (e["group_size"], e["count"]) == (8, n)
        assert e["busbw_bytes_per_s"] == pytest.approx(7 / 8 * 65536 * 384 * 4 * n / (us / 1e6))
        assert e["pct_of_roof"] == pytest.approx(e["busbw_bytes_per_s"] / 300e9)  # NVLink3: 300 GB/s a direction
        # the all-reduce records a TensorList: its size is not in the trace
        ar = [x for x in entries if x["collective"] == "all_reduce"]
        assert ar and all(x["roof_us"] is None and "message size" in x["reason"] for x in ar)
        for x in entries:
            assert x["pct_of_roof"] is None or x["pct_of_roof"] <= 1.0
    finally:
        con.close()
