"""Property-based tests of the ingest (Hypothesis): for any generated trace, the invariants of
design.md §4.2 hold: per device, busy (the union of its activities) + idle = its span, and
compute + communication + memory (sums of activity time) equal the activities' total time, so
that compute + communication + memory + idle = span whenever no two activities overlap (and
exceeds it by the overlap when they do: the contract counts each activity's whole time); every
kernel linked to an op has exactly one op; no duration is negative; ingesting the same trace
twice gives the same run. The expected union and totals are computed here, independently."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KERNEL_NAMES = ("ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel", "ncclKernel_AllReduce_RING_LL_Sum_float",
                "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "triton_poi_fused_add_0")


@st.composite
def traces(draw: Any) -> list[dict[str, Any]]:
    """A Kineto-shaped trace: nested CPU ops on one or two threads, launches inside some of
    them, each launch's GPU activity on one of two devices and streams (possibly overlapping),
    flow events, and the odd event without a category."""
    events: list[dict[str, Any]] = []
    n_ops = draw(st.integers(1, 12))
    ext = corr = 0
    t = 0.0
    for _ in range(n_ops):
        tid = draw(st.sampled_from([100, 101]))
        dur = draw(st.floats(0.0, 500.0, allow_nan=False))
        ext += 1
        op = {"ph": "X", "cat": "cpu_op", "name": draw(st.sampled_from(["aten::mm", "aten::add", "aten::copy_"])),
              "pid": 100, "tid": tid, "ts": t, "dur": dur,
              "args": {"External id": ext, "Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}}
        events.append(op)
        if draw(st.booleans()):  # a child op inside it
            ext += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": tid,
                           "ts": t + dur / 4, "dur": dur / 4, "args": {"External id": ext}})
        for _ in range(draw(st.integers(0, 3))):
            corr += 1
            at = t + draw(st.floats(0.0, 1.0)) * dur
            by_ext = draw(st.booleans())
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": tid,
                           "ts": at, "dur": 1.0, "args": {"correlation": corr, **({"External id": ext} if by_ext else {})}})
            name = draw(st.sampled_from(KERNEL_NAMES))
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset" if name.startswith("Memset") else "kernel"
            events.append({"ph": "X", "cat": cat, "name": name, "pid": draw(st.sampled_from([0, 1])),
                           "tid": draw(st.sampled_from([7, 20])), "ts": at + draw(st.floats(0.0, 50.0)),
                           "dur": draw(st.floats(0.0, 200.0)),
                           "args": {"device": 0, "stream": 7, "correlation": corr, "External id": ext}})
            if draw(st.booleans()):
                events.append({"ph": "f", "id": corr, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7,
                               "ts": at, "bp": "e"})
        t += dur + draw(st.floats(0.0, 100.0))
    if draw(st.booleans()):
        events.append({"ph": "X", "name": "no category", "ts": 1.0, "dur": 1.0})
    # GPU activity's device is its pid (Kineto); keep args.device in step with it
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["args"]["device"] = e["pid"]
    return draw(st.permutations(events))


def _expected_by_device(trace: list[dict[str, Any]]) -> dict[int, tuple[float, float, float, bool]]:
    """Per device: (total activity time, union of the activities, span, whether any overlap), in µs."""
    by_dev: dict[int, list[tuple[float, float]]] = {}
    for e in trace:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            by_dev.setdefault(int(e["pid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    out = {}
    for dev, ivs in by_dev.items():
        ivs.sort()
        union, overlap = 0.0, False
        cur_s, cur_e = ivs[0]
        for s_, e_ in ivs[1:]:
            if s_ < cur_e:
                overlap = overlap or e_ > s_  # (an instant activity inside another overlaps nothing)
                cur_e = max(cur_e, e_)
            else:
                union += cur_e - cur_s
                cur_s, cur_e = s_, e_
        union += cur_e - cur_s
        span = max(e for _, e in ivs) - ivs[0][0]
        out[dev] = (sum(e - s for s, e in ivs), union, span, overlap)
    return out


def _ingest(trace: list[dict[str, Any]], path: Path, db: Path) -> tuple[dict[str, Any], dict[str, Any], list]:
    path.write_text(json.dumps({"traceEvents": trace}, indent=1))
    db.unlink(missing_ok=True)
    r = run_cli("ingest", str(path), "--db", str(db), "--json", "-q")
    assert r.code == 0, r.err
    a = run_cli("analyze", "--db", str(db), "--json")
    assert a.code == 0, a.err
    from gpuscope._db import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        checks = con.execute(
            "SELECT (SELECT count(*) FROM kernels WHERE dur_ns < 0) + (SELECT count(*) FROM ops WHERE dur_ns < 0), "
            "(SELECT count(*) FROM kernels k WHERE k.op_id IS NOT NULL AND "
            " (SELECT count(*) FROM ops o WHERE o.run_id = k.run_id AND o.op_id = k.op_id) <> 1)"
        ).fetchone()
        rows = con.execute(
            "SELECT name, ts_ns, dur_ns, correlation, op_id, device_id, stream FROM kernels ORDER BY ALL").fetchall()
        rows += con.execute("SELECT name, ts_ns, dur_ns, op_id, parent_op_id, tid, NULL FROM ops ORDER BY ALL").fetchall()
    finally:
        con.close()
    doc = a.json()
    doc.pop("run")
    return r.json(), doc, [checks, rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_ingest_invariants_hold_for_any_trace(tmp_path: Path, trace: list[dict[str, Any]]) -> None:
    ing, doc, (checks, rows) = _ingest(trace, tmp_path / "t.json", tmp_path / "a.duckdb")
    negative, not_one_op = checks
    assert negative == 0, "a negative duration was stored"
    assert not_one_op == 0, "a linked kernel without exactly one op"
    expected = _expected_by_device(trace)
    assert {d["key"] for d in doc["per_device"]} == {f"gpu{k}" for k in expected}
    for dev in doc["per_device"]:
        total_us, union_us, span_us, overlap = expected[int(dev["key"][3:])]
        tol = 0.002 * dev["activities"] + 1e-6  # (ns rounding of each time)
        parts = dev["compute_us"] + dev["communication_us"] + dev["memory_us"]
        assert abs(dev["busy_us"] + dev["idle_us"] - dev["span_us"]) <= 1e-6 * max(1.0, dev["span_us"]), dev
        assert abs(dev["span_us"] - span_us) <= tol and abs(dev["busy_us"] - union_us) <= tol, (dev, expected)
        assert abs(parts - total_us) <= tol, (dev, expected)
        if not overlap:
            assert abs(parts + dev["idle_us"] - dev["span_us"]) <= tol, dev
        assert min(dev["compute_us"], dev["communication_us"], dev["memory_us"], dev["idle_us"]) >= 0
    total = doc["time_us"]
    for k in ("compute", "communication", "memory", "idle"):
        assert abs(total[k] - sum(d[f"{k}_us"] for d in doc["per_device"])) <= 1e-6 * max(1.0, total[k])
    assert ing["linked"]["kernels_with_op"] + ing["linked"]["kernels_without_op"] == doc["counts"]["gpu_activities"]
    # deterministic: the same trace again gives the same run, row for row
    ing2, doc2, (_, rows2) = _ingest(trace, tmp_path / "t.json", tmp_path / "b.duckdb")
    assert doc2 == doc and rows2 == rows and ing2 == ing
