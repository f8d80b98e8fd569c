"""`gpuscope export RUN --format perfetto|chrome`: the timeline round-trips (ingested again it
gives the same time breakdown and counts; field by field on every shared trace in
tests/test_timeline_roundtrip.py), telemetry counter tracks carry exactly the stored samples on
the traces' time base and come back as samples, marks become instant events, and bad input
exits 2."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, cpu_op, kernel, run_cli, runtime, write_trace

REPO = Path(__file__).resolve().parents[1]
RECORDING = FIXTURES / "recordings" / "synthetic_h100_a100.jsonl"
BASE_NS = 1_767_225_600_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132}]


def _analysis(db: Path) -> dict:
    r = run_cli("analyze", "--db", str(db), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    return {"time_us": doc["time_us"], "counts": doc["counts"], "roofline_us": doc["roofline_us"]}


def _round_trip(trace: Path, tmp_path: Path, fmt: str = "perfetto") -> None:
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert run_cli("ingest", "--db", str(a), "-q", str(trace)).code == 0
    out = tmp_path / ("t.json.gz" if fmt == "perfetto" else "t.json")
    r = run_cli("export", "--db", str(a), "--format", fmt, "--out", str(out))
    assert r.code == 0, r.err
    assert run_cli("ingest", "--db", str(b), "-q", str(out)).code == 0
    assert _analysis(a) == _analysis(b)


def _synthetic(tmp_path: Path) -> Path:
    bf16 = "c10::BFloat16"
    ev = [cpu_op("aten::mm", 0, 20, ext=1, dims=[[4096, 4096], [4096, 4096]], types=[bf16, bf16]),
          runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1), kernel("sm90_xmma_gemm_bf16", 100, 900, corr=1),
          cpu_op("aten::add", 30, 10, ext=2, dims=[[4096, 4096], [4096, 4096]], types=[bf16, bf16]),
          runtime("cudaLaunchKernel", 32, 5, corr=2, ext=2),
          kernel("vectorized_elementwise_kernel", 1100, 120, corr=2, stream=9),
          kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1500, 300, corr=3)]
    return write_trace(tmp_path / "syn.json", ev, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_round_trip_of_a_synthetic_trace(tmp_path: Path, fmt: str) -> None:
    _round_trip(_synthetic(tmp_path), tmp_path, fmt)


def test_the_file_opens_as_a_chrome_trace_with_gpuscope_args(tmp_path: Path) -> None:
    a = tmp_path / "a.duckdb"
    assert run_cli("ingest", "--db", str(a), "-q", str(_synthetic(tmp_path))).code == 0
    out = tmp_path / "t.json.gz"
    assert run_cli("export", "--db", str(a), "--format", "perfetto", "--out", str(out)).code == 0
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ev = doc["traceEvents"]
    gemm = next(e for e in ev if e.get("name") == "sm90_xmma_gemm_bf16")
    assert gemm["cat"] == "kernel" and gemm["args"]["gpuscope.category"] == "compute"
    assert gemm["args"]["gpuscope.bound"] in ("compute_bound", "memory_bound", "latency_bound", "unknown")
    assert gemm["ts"] == pytest.approx(100.0) and gemm["dur"] == pytest.approx(900.0)  # µs from the base
    mm = next(e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    assert mm["args"]["Input Dims"] == [[4096, 4096], [4096, 4096]] and "gpuscope.pct_of_roof" in mm["args"]
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    assert {e["ph"] for e in flows} == {"s", "f"} and len(flows) == 4  # two launches, each start and finish
    names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    assert any(n.startswith("GPU 0") for n in names)
    assert doc["baseTimeNanoseconds"] == BASE_NS


@pytest.mark.slow
def test_counter_tracks_equal_the_stored_samples_and_marks_are_instants(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    child = ("import time, gpuscope\n"
             "for i in range(3):\n"
             "    time.sleep(0.25); gpuscope.mark('decode', tokens=2, step=i)\n")
    p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--replay", str(RECORDING),
                        "--no-profile", "-q", "--", sys.executable, "-c", child],
                       cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "t.json"
    r = run_cli("export", "--db", str(db), "--format", "chrome", "--out", str(out), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["gzip"] is False
    doc = json.loads(out.read_text())
    base = doc["baseTimeNanoseconds"]
    got: dict[tuple[str, int], float] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "C":
            (metric, value), = e["args"].items()
            key = e["name"].rsplit(" ", 1)[0]
            got[(f"{key} {metric}", base + round(e["ts"] * 1000))] = value
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        stored = {(f"{k} power_w", int(t)): float(v) for k, t, v in con.execute(
            "SELECT d.key, s.ts_ns, s.power_w FROM samples s JOIN devices d USING (run_id, device_id) "
            "WHERE s.power_w IS NOT NULL").fetchall()}
        marks = con.execute("SELECT count(*) FROM annotations WHERE kind = 'mark'").fetchone()[0]
    finally:
        con.close()
    exported = {k: v for k, v in got.items() if k[0].endswith(" power_w")}
    assert stored and exported == stored
    assert sum(1 for e in doc["traceEvents"] if e.get("ph") == "i" and e.get("cat") == "gpuscope.mark") == marks == 3
    # ingested again, the recorded run's samples, devices and marks come back (issue 33)
    again = tmp_path / "again.duckdb"
    assert run_cli("ingest", "--db", str(again), "-q", str(out)).code == 0
    count = ("SELECT (SELECT count(*) FROM samples), (SELECT count(power_w) FROM samples), "
             "(SELECT count(*) FROM devices WHERE source = 'telemetry'), "
             "(SELECT count(*) FROM annotations WHERE kind = 'mark')")
    con = duckdb.connect(str(db), read_only=True)
    con2 = duckdb.connect(str(again), read_only=True)
    try:
        first = con.execute(count).fetchone()
        assert first is not None and first[0] > 0 and con2.execute(count).fetchone() == first
    finally:
        con.close()
        con2.close()


def test_bad_input_exits_2(tmp_path: Path) -> None:
    a = tmp_path / "a.duckdb"
    assert run_cli("ingest", "--db", str(a), "-q", str(_synthetic(tmp_path))).code == 0
    out = tmp_path / "t.json.gz"
    out.write_text("keep me")
    r = run_cli("export", "--db", str(a), "--format", "perfetto", "--out", str(out))
    assert r.code == 2 and "already exists" in r.err and out.read_text() == "keep me"
    r = run_cli("export", "nope", "--db", str(a), "--format", "chrome", "--out", str(tmp_path / "x.json"))
    assert r.code == 2 and "nope" in r.err and not (tmp_path / "x.json").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_from_to_and_window_cut_the_timeline(tmp_path: Path) -> None:
    from gpuscope import store

    a = tmp_path / "a.duckdb"
    assert run_cli("ingest", "--db", str(a), "-q", str(_synthetic(tmp_path))).code == 0
    con = store.connect(a)
    with store.transaction(con):  # a profiler window over the second kernel only (1100-1220 µs)
        rid = con.execute("SELECT max(id) FROM runs").fetchone()[0]
        con.execute("INSERT INTO annotations (run_id, kind, name, ts_ns, dur_ns) VALUES (?, 'profiler_window', 'w1', ?, ?)",
                    [rid, BASE_NS + 1_050_000, 300_000])
    con.close()

    def kernels(*flags: str) -> list[str]:
        out = tmp_path / "cut.json"
        r = run_cli("export", "--db", str(a), "--format", "chrome", "--out", str(out), "--force", *flags)
        assert r.code == 0, r.err
        # in the store's order, not by time (viewers sort): compared as time-sorted names
        ev = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "kernel"]
        return [e["name"] for e in sorted(ev, key=lambda e: e["ts"])]

    assert len(kernels()) == 3
    assert kernels("--window", "1") == ["vectorized_elementwise_kernel"]
    assert kernels("--from", "0.001") == ["vectorized_elementwise_kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]
    assert kernels("--to", "0.001") == ["sm90_xmma_gemm_bf16"]
    for flags, names in ((["--window", "2"], "--window"), (["--from", "2", "--to", "1"], "--to"),
                         (["--window", "1", "--from", "0"], "--window")):
        r = run_cli("export", "--db", str(a), "--format", "chrome", "--out", str(tmp_path / "x.json"), *flags)
        assert r.code == 2 and names in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = run_cli("export", "--db", str(a), "--format", "csv", "--out", str(tmp_path / "d"), "--window", "1")
    assert r.code == 2 and "timeline" in r.err


def test_ranks_are_named_processes_and_devices_stay_apart(tmp_path: Path) -> None:
    """Two ranks that both ran on their device 0 (one GPU per container): two GPU tracks named
    by rank, and ingesting the file again keeps them apart."""
    traces = []
    for rank in (0, 1):
        ev = [kernel(f"gemm_rank{rank}", 100 + rank * 10, 500, corr=1), kernel("ncclDevKernel_AllReduce", 700, 100, corr=2)]
        traces.append(write_trace(tmp_path / f"r{rank}.json", ev, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS,
                                  distributedInfo={"rank": rank, "world_size": 2}))
    a = tmp_path / "a.duckdb"
    assert run_cli("ingest", "--db", str(a), "-q", *map(str, traces)).code == 0
    out = tmp_path / "t.json"
    assert run_cli("export", "--db", str(a), "--format", "chrome", "--out", str(out)).code == 0
    ev = json.loads(out.read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"
                   and e["args"]["name"].startswith("rank"))
    assert names == ["rank 0 GPU 0 (NVIDIA H100 80GB HBM3)", "rank 1 GPU 0 (NVIDIA H100 80GB HBM3)"]
    pids = {e["name"]: e["pid"] for e in ev if e.get("cat") == "kernel" and e["name"].startswith("gemm")}
    assert pids["gemm_rank0"] != pids["gemm_rank1"]
    b = tmp_path / "b.duckdb"
    assert run_cli("ingest", "--db", str(b), "-q", str(out)).code == 0
    assert _analysis(a)["time_us"] == _analysis(b)["time_us"]
