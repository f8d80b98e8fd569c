"""What Kineto writes on collective kernels and ``record_param_comms`` (``Collective name``,
``In/Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name/Ranks``, ``Seq``) kept by
ingest (``kernels.comm_args``, ``ops.comm_args``, schema 9) and used by analyzers/comm.py for
collectives without an op or whose op lacks sizes, and by analyzers/stragglers.py to match
instances by (process group, seq) (issue 31).

Bus bandwidth is computed by hand with nccl-tests' definitions (doc/PERFORMANCE.md)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analyzers.overlap import CommKernel, DeviceKernels
from gpuscope.analyzers.stragglers import RankUnit, stragglers

from conftest import runtime, shared_trace, write_trace

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816, "computeMajor": 9,
         "computeMinor": 0, "numSms": 132, "warpSize": 32}]
DIST = {"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": 2,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
                      {"pg_name": "7", "pg_desc": "undefined", "pg_size": 4, "ranks": [0, 1, 2, 3]}]}
NVLINK4_BYTES_PER_S = 450e9  # H100 SXM: 18 links x 25 GB/s, one direction, behind NVSwitch


def _kernel(name: str, ts: float, dur: float, corr: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


def _trace(tmp_path: Path) -> Path:
    ev: list[dict[str, Any]] = []
    # 1. all-reduce whose op records a TensorList (no sizes, HTA's case): the kernel's args say
    #    2 Mi bf16 elements (4 MiB) over a group of 8; 50 µs
    ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 100, "tid": 100, "ts": 1000, "dur": 50,
               "args": {"External id": 10, "Input Dims": [[]], "Input type": ["TensorList"]}})
    ev.append(runtime("cudaLaunchKernel", 1010, 5, 10, 10))
    ev.append(_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 1100, 50, 10, {
        "Collective name": "allreduce", "In msg nelems": 2 << 20, "Out msg nelems": 2 << 20, "dtype": "BFloat16",
        "Group size": 8, "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]", "Seq": 5}))
    # 2. send with no op above it (no launch recorded either, as a graph replay or HTA's SendRecv):
    #    1 Mi fp32 elements (4 MiB) to one peer, 100 µs
    ev.append(_kernel("ncclDevKernel_SendRecv(x)", 2000, 100, 20, {
        "Collective name": "send", "In msg nelems": 1 << 20, "Out msg nelems": 0, "dtype": "Float",
        "Group size": 2, "Process Group Name": "9", "Seq": 6}))
    # 3. all-gather with no op and no Group size: the group's size comes from distributedInfo's
    #    pg_config ("7": 4 ranks); 4096 fp16 elements out (8 KiB), 10 µs
    ev.append(_kernel("ncclDevKernel_AllGather_RING_LL(x)", 3000, 10, 30, {
        "Collective name": "_allgather_base", "In msg nelems": 1024, "Out msg nelems": 4096, "dtype": "Half",
        "Process Group Name": "7"}))
    # 4. an op-less all-gather whose args lack the dtype: still not judged, saying why
    ev.append(_kernel("ncclDevKernel_AllGather_RING_LL(y)", 4000, 20, 40, {
        "Collective name": "_allgather_base", "Out msg nelems": 4096, "Group size": 4}))
    return write_trace(tmp_path / "args.json", ev, deviceProperties=H100, distributedInfo=DIST)


def test_comm_args_stored_and_judged(tmp_path: Path, no_user_specs: None) -> None:
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    db = tmp_path / "s.duckdb"
    res = ingest(db, [str(_trace(tmp_path))], name="args")
    con = connect(db)
    try:
        stored = {name: json.loads(a) for name, a in con.execute(
            "SELECT name, comm_args FROM kernels WHERE run_id = ? AND comm_args IS NOT NULL", [res.run_id]).fetchall()}
        meta = json.loads(con.execute("SELECT metadata FROM traces WHERE run_id = ?", [res.run_id]).fetchone()[0])
        doc = analyze_run(con, res.run_id)
    finally:
        con.close()
    ar = stored["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)"]
    assert ar == {"collective": "allreduce", "in_nelems": 2 << 20, "out_nelems": 2 << 20, "dtype": "BFloat16",
                  "group_size": 8, "pg_name": "0", "pg_ranks": "[0, 1, 2, 3, 4, 5, 6, 7]", "seq": 5}
    assert stored["ncclDevKernel_SendRecv(x)"]["seq"] == 6
    assert meta["distributedInfo"] == DIST  # the header's distributedInfo kept whole

    by = {e["kernel"]: e for e in doc["communication"]["entries"]}
    mib = 1 << 20
    e = by["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)"]
    assert (e["collective"], e["bytes"], e["group_size"], e["dtype"]) == ("all_reduce", 4 * mib, 8, "BFloat16")
    assert e["group_size_source"] == "collective args (Group size)"
    busbw = 4 * mib / 50e-6 * 2 * 7 / 8  # 146.8 GB/s
    assert e["busbw_bytes_per_s"] == pytest.approx(busbw)
    assert e["pct_of_roof"] == pytest.approx(busbw / NVLINK4_BYTES_PER_S)
    assert e["bound"] == "communication_bound"

    e = by["ncclDevKernel_SendRecv(x)"]
    assert (e["collective"], e["bytes"], e["group_size"]) == ("send_recv", 4 * mib, 2)
    assert e["busbw_bytes_per_s"] == pytest.approx(4 * mib / 100e-6)  # send/recv: factor 1, 41.9 GB/s
    assert e["pct_of_roof"] == pytest.approx(4 * mib / 100e-6 / NVLINK4_BYTES_PER_S)

    e = by["ncclDevKernel_AllGather_RING_LL(x)"]
    assert (e["collective"], e["bytes"], e["group_size"]) == ("all_gather", 8192, 4)
    assert e["group_size_source"] == "distributedInfo.pg_config"
    assert e["busbw_bytes_per_s"] == pytest.approx(8192 / 10e-6 * 3 / 4)  # 614.4 MB/s
    assert e["roof_us"] is not None and e["bound"] == "latency_bound"  # 8 KiB: 3 steps x 0.6 µs > 0.014 µs

    e = by["ncclDevKernel_AllGather_RING_LL(y)"]
    assert e["roof_us"] is None and "no recorded op" in e["reason"] and "message size" in e["reason"]
    for e in by.values():
        assert e["pct_of_roof"] is None or e["pct_of_roof"] <= 1.0


def _k(dev: int, start_us: int, name: str = "ncclDevKernel_AllReduce(x)") -> CommKernel:
    return CommKernel(dev, 7, start_us * 1000, (start_us + 300) * 1000, name, "all_reduce", 1024.0, 2, None)


def test_stragglers_match_by_process_group_and_seq() -> None:
    # two groups run the same kernel with the same size, in a different order on each rank:
    # rank 0: group A seq 1 at 0 µs, group B seq 1 at 100 µs; rank 1: B at 10 µs, A at 120 µs
    r0 = [_k(0, 0), _k(0, 100)]
    r1 = [_k(1, 10), _k(1, 120)]
    devs = [DeviceKernels(0, "gpu0", [], r0), DeviceKernels(1, "gpu1", [], r1)]
    units = {0: RankUnit(0, "gpu0", 0, None), 1: RankUnit(1, "gpu1", 1, None)}
    tags = {(0, 0, r0[0].name): ("A", 1), (0, 100_000, r0[1].name): ("B", 1),
            (1, 10_000, r1[0].name): ("B", 1), (1, 120_000, r1[1].name): ("A", 1)}
    s = stragglers(devs, units, tags=tags)
    assert s is not None and s["instances"] == 2 and s["matched_by_process_group"] == 2
    ranks = {r["rank"]: r for r in s["ranks"]}
    # A: rank 0 waits 120 - 0 = 120 µs for rank 1; B: rank 1 waits 100 - 10 = 90 µs for rank 0
    assert ranks[0]["wait_us"] == pytest.approx(120.0) and ranks[1]["wait_us"] == pytest.approx(90.0)
    assert ranks[1]["caused_wait_us"] == pytest.approx(120.0) and s["straggler"]["rank"] == 1
    assert {(w["process_group"], w["seq"]) for w in s["worst"]} == {("A", 1), ("B", 1)}
    # without the tags, order pairs 0 with 10 and 100 with 120: rank 0 waits 10 + 20 µs
    plain = stragglers(devs, units)
    assert plain is not None and plain["matched_by_process_group"] == 0
    assert {r["rank"]: r["wait_us"] for r in plain["ranks"]} == {0: pytest.approx(30.0), 1: 0.0}


def test_migration_8_to_9_adds_comm_args(tmp_path: Path) -> None:
    from gpuscope import store
    from gpuscope._db import duckdb
    from gpuscope.store import schema

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    try:
        schema.migrate(con)
        # a store as schema 8 left it
        con.execute("ALTER TABLE kernels DROP COLUMN comm_args")
        con.execute("ALTER TABLE ops DROP COLUMN comm_args")
        con.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
        schema.migrate(con)
        assert store.schema_version(con) == store.SCHEMA_VERSION >= 9
        cols = {t: {c for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [t]).fetchall()} for t in ("kernels", "ops")}
        assert "comm_args" in cols["kernels"] and "comm_args" in cols["ops"]
        schema.MIGRATIONS[8](con)  # idempotent: a second run changes nothing and does not fail
        assert con.execute("SELECT count(*) FROM duckdb_columns() WHERE column_name = 'comm_args'").fetchone() == (2,)
    finally:
        con.close()


def test_b200_nccl_kernel_args(tmp_path: Path, no_user_specs: None) -> None:
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    path = shared_trace("tracelens/b200_eager.json.gz")
    db = tmp_path / "b.duckdb"
    res = ingest(db, [str(path)], name="b200")
    con = connect(db)
    try:
        k = con.execute("SELECT name, comm_args FROM kernels WHERE run_id = ? AND comm_args IS NOT NULL",
                        [res.run_id]).fetchall()
        o = con.execute("SELECT name, comm_args FROM ops WHERE run_id = ? AND comm_args IS NOT NULL",
                        [res.run_id]).fetchall()
        doc = analyze_run(con, res.run_id)
    finally:
        con.close()
    # the one NCCL kernel and its record_param_comms carry the args (the multimem kernels do not)
    assert len(k) == 1 and k[0][0].startswith("ncclDevKernel_AllGather_RING_LL")
    assert [n for n, _ in o] == ["record_param_comms"]
    args = json.loads(k[0][1])
    assert (args["collective"], args["in_nelems"], args["out_nelems"], args["dtype"], args["group_size"],
            args["pg_name"]) == ("_allgather_base", 25136, 201088, "BFloat16", 8, "3")
    ag = next(e for e in doc["communication"]["entries"] if e["collective"] == "all_gather")
    assert ag["bytes"] == 201088 * 2 and ag["group_size"] == 8


def test_lenient_reader_keeps_comm_args(tmp_path: Path) -> None:
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    ev = [_kernel("ncclDevKernel_SendRecv(x)", 10, 5, 1, {"Collective name": "send", "seq": 9,
                                                         "Process Group Name": "2"})]
    # a duplicate key in args makes DuckDB's typed reader refuse the events; the lenient reader
    # reads them, the lower-case "seq" too
    text = json.dumps({"traceEvents": ev}).replace('"device": 0,', '"device": 0, "device": 0,')
    path = tmp_path / "dup.json"
    path.write_text(text)
    db = tmp_path / "l.duckdb"
    res = ingest(db, [str(path)], name="dup")
    con = connect(db)
    try:
        (text_args,) = con.execute("SELECT comm_args FROM kernels WHERE run_id = ?", [res.run_id]).fetchone()
    finally:
        con.close()
    args = json.loads(text_args)
    assert (args["collective"], args["seq"], args["pg_name"], args["dtype"]) == ("send", 9, "2", None)
