"""The read layer (gpuscope/store/read.py): the typed reads the CLI, the TUI, monitor, export
and report share. Checked against what went in (a recording played into the store, a trace
with known kernels) and against the analyzer's own totals on a real trace."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import FIXTURES, kernel, run_cli, shared_trace, write_trace
from gpuscope import store
from gpuscope.errors import InputError
from gpuscope.store import read

RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"


def _recorded_run(db: Path) -> int:
    from gpuscope.collectors import ReplayCollector
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink

    sink = StoreSink(db, name="replayed")
    Sampler([ReplayCollector(RECORDING, realtime=False)], [sink], interval_s=0.01).run(30)
    return int(sink.run_id)


def test_devices_and_samples_are_what_the_recording_holds(db: Path) -> None:
    from gpuscope.collectors.replay import load_recording

    rec = load_recording(RECORDING)
    run_id = _recorded_run(db)
    con = store.connect(db, read_only=True)
    try:
        devs = read.devices(con, run_id)
        assert [d.key for d in devs] == [d.key for d in rec.devices] == ["gpu0", "gpu1", "host"]
        assert [d.name for d in devs] == [d.name for d in rec.devices]
        assert all(d.source == "telemetry" for d in devs)
        ids = {d.key: d.device_id for d in devs}

        series = read.samples(con, run_id, ["power_w", "mem_used_bytes", "sm_clock_mhz"])
        assert [s.device_id for s in series] == sorted(ids.values())
        by_id = {s.device_id: s for s in series}
        for key, did in ids.items():
            # a tick where the device was lost is an annotation, not a sample row
            recorded = [r for tick in rec.ticks for r in tick if r["device"] == key and not r.get("lost")]
            got = by_id[did]
            assert len(got.ts_ns) == len(recorded) and got.ts_ns == sorted(got.ts_ns)
            for metric in ("power_w", "mem_used_bytes", "sm_clock_mhz"):
                want = [r["values"].get(metric) for r in recorded]
                have = got.values[metric]
                assert [w is None for w in want] == [h is None for h in have], (key, metric)
                assert all(w is None or math.isclose(w, h) for w, h in zip(want, have)), (key, metric)

        gpu0 = read.samples(con, run_id, ["power_w"], device_id=ids["gpu0"])
        assert len(gpu0) == 1 and gpu0[0].device_id == ids["gpu0"]
        t = gpu0[0].ts_ns
        window = read.samples(con, run_id, ["power_w"], device_id=ids["gpu0"], since_ns=t[5], until_ns=t[9])
        assert window[0].ts_ns == t[5:10]
        assert read.samples(con, run_id + 100) == []
        with pytest.raises(InputError, match="not a sample column"):
            read.samples(con, run_id, ["power_w; DROP TABLE runs"])
    finally:
        con.close()


def test_kernel_and_op_totals_of_a_trace_with_known_kernels(tmp_path: Path, db: Path) -> None:
    events = [kernel("gemm_a", 0.0, 10.0), kernel("gemm_a", 20.0, 30.0), kernel("ncclKernel_AllReduce", 60.0, 5.0),
              kernel("gemm_a", 100.0, 2.0, device=1), kernel("Memcpy DtoD (Device -> Device)", 70.0, 4.0,
                                                               cat="gpu_memcpy")]
    assert run_cli("ingest", write_trace(tmp_path / "t.json", events), "--name", "known").code == 0
    con = store.connect(db, read_only=True)
    try:
        run_id = store.resolve_run(con, "known").id
        totals = read.kernel_totals(con, run_id)
        assert [(k.name, k.count, k.total_ns, k.max_ns, k.devices, k.category) for k in totals] == [
            ("gemm_a", 3, 42_000, 30_000, 2, "compute"),
            ("ncclKernel_AllReduce", 1, 5_000, 5_000, 1, "communication"),
            ("Memcpy DtoD (Device -> Device)", 1, 4_000, 4_000, 1, "memory"),
        ]
        assert totals[0].mean_ns == pytest.approx(14_000)
        assert [k.name for k in read.kernel_totals(con, run_id, limit=1)] == ["gemm_a"]
        assert read.op_totals(con, run_id) == []  # a trace of kernels only has no CPU ops
    finally:
        con.close()


def test_kernel_totals_agree_with_the_analysis_on_a_real_trace(tmp_path: Path, db: Path) -> None:
    """Two code paths, one answer: the read layer's totals by name are the analysis' kernel list
    on a real A100 trace (no graph capture there, so the analysis counts every activity)."""
    path = shared_trace("hta/a100_alexnet.json.gz")
    doc = run_cli("analyze", path, "--json").json()
    con = store.connect(db, read_only=True)
    try:
        totals = {(k.name, k.kind): k for k in read.kernel_totals(con, doc["run"]["id"])}
        ops = read.op_totals(con, doc["run"]["id"])
    finally:
        con.close()
    assert len(totals) == len(doc["kernels"])
    for k in doc["kernels"]:
        mine = totals[(k["name"], k["kind"])]
        assert (mine.count, mine.total_ns / 1000, mine.category) == (k["count"], k["total_us"], k["category"])
    assert sum(o.count for o in ops) == doc["counts"]["ops"]
    assert ops == sorted(ops, key=lambda o: -o.total_ns)
