"""The timeline export round-trips (issue 33): a run ingested, exported as a Perfetto / Chrome
trace and ingested again is the same run, field by field: every kernel and op row (names,
times, streams, launches, shapes, strides, Concrete Inputs, collective args, the op each
kernel is attributed to and how, CUDA-graph capture/replay), the devices, the trace
annotations, the telemetry samples, and `analyze --json` (breakdown, idle, roofline classes,
coverage, per-op and per-kernel rows) within float tolerance. On every shared trace (skipped
without them), a hand-made multi-trace graph capture/replay run, and a run with telemetry."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, SHARED_TRACES, cpu_op, kernel, run_cli, runtime, write_trace

SHARED = SHARED_TRACES
#: Every trace of the shared folder as a run: one file each, the vLLM capture + replay folder as one run.
SHARED_RUNS = ["hta/a100_alexnet.json.gz", "hta/a100_sxm4_80gb_training_large.json.gz", "hta/a100_triton_kernel.json.gz",
               "hta/mi250_rocm6.2_minitoy_train.json.gz", "hta/cpu_only.pt.trace.json.gz",
               "hta/legacy_capitalized_categories.json.gz", "tracelens/qwen1.5-0.5b-chat/h100.json.gz",
               "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz", "tracelens/b200_eager.json.gz",
               "tracelens/mi210_gpu_only.json.gz", "tracelens/vllm_decode_cudagraph"]
BASE_NS = 1_767_225_600_000_000_000


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# Ids are the store's own (op ids, device ids): rows name what they point to instead (an op by
# trace, name and start; a device by key), so that the comparison holds whatever the numbering.
_KERNELS = """
SELECT k.trace_id, d.key, k.stream, k.kind, k.category, k.name, k.ts_ns, k.dur_ns, k.correlation, k.external_id,
       o.name, o.ts_ns, k.launch_name, k.launch_ts_ns, k.launch_dur_ns, k.grid, k.block, k.registers_per_thread,
       k.shared_memory_bytes, round(k.occupancy, 9), k.bytes, k.attribution, k.comm_args
FROM kernels k JOIN devices d USING (run_id, device_id) LEFT JOIN ops o ON o.run_id = k.run_id AND o.op_id = k.op_id
ORDER BY ALL"""
_OPS = """
SELECT o.trace_id, o.pid, o.tid, o.name, o.ts_ns, o.dur_ns, o.external_id, o.sequence_number, o.input_dims,
       o.input_types, o.input_strides, o.concrete_inputs, o.comm_args, p.name, p.ts_ns
FROM ops o LEFT JOIN ops p ON p.run_id = o.run_id AND p.op_id = o.parent_op_id ORDER BY ALL"""
_GRAPHS = """
SELECT g.trace_id, g.graph_ns, g.seq, g.kernel_name, g.launch_name, g.ts_ns, g.correlation, o.name, o.ts_ns, g.grid, g.block
FROM graph_launches g LEFT JOIN ops o ON o.run_id = g.run_id AND o.op_id = g.op_id ORDER BY ALL"""
_DEVICES = """
SELECT key, source, trace_id, device_index, vendor, kind, name, spec_key, memory_total_bytes, compute_capability,
       num_sms, warp_size, uuid, pci_bus_id, TRY_CAST(properties AS JSON) FROM devices ORDER BY key"""
_ANNOTATIONS = """
SELECT a.trace_id, a.kind, a.name, a.ts_ns, a.dur_ns, d.key, a.pid, a.tid, json(a.value) FROM annotations a
LEFT JOIN devices d ON d.run_id = a.run_id AND d.device_id = a.device_id ORDER BY ALL"""
_MODEL = "SELECT json(spec_json), source FROM run_models"
_TRACES = "SELECT trace_id, rank, json_extract(metadata, '$.deviceProperties') FROM traces ORDER BY trace_id"


def _samples(db: Path) -> list[tuple[Any, ...]]:
    cols = [r[0] for r in _rows(db, "SELECT column_name FROM duckdb_columns() WHERE table_name = 'samples' "
                                    "AND column_name NOT IN ('run_id', 'device_id') ORDER BY column_index")]
    return _rows(db, f"SELECT d.key, {', '.join('s.' + c for c in cols)} FROM samples s "
                     "JOIN devices d USING (run_id, device_id) ORDER BY ALL")


def _close(a: Any, b: Any, path: str = "") -> None:
    """``a == b``, floats within 1e-9 relative (sums taken in another order), anywhere in a
    JSON document; the path of the first difference in the failure."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{path}: {a!r} != {b!r}"
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _analysis(db: Path) -> dict[str, Any]:
    r = run_cli("analyze", "--db", str(db), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # what names the store or the file ingested rather than the run: its id, how it came, its notes
    doc["run"] = {k: doc["run"][k] for k in ("started_ns", "ended_ns", "status")}
    doc.pop("notes")
    for t in doc.get("excluded_traces") or []:
        t.pop("path")
    return doc


def _same_run(a: Path, b: Path) -> None:
    for name, sql in (("kernels", _KERNELS), ("ops", _OPS), ("graph_launches", _GRAPHS), ("devices", _DEVICES),
                      ("annotations", _ANNOTATIONS), ("traces", _TRACES), ("run_models", _MODEL)):
        ra, rb = _rows(a, sql), _rows(b, sql)
        assert len(ra) == len(rb), f"{name}: {len(ra)} rows, {len(rb)} after the round trip"
        for x, y in zip(ra, rb):
            assert x == y, f"{name}: {x} != {y}"
    assert _samples(a) == _samples(b)
    _close(_analysis(a), _analysis(b))


def _round_trip(source: list[Path], tmp_path: Path, formats: tuple[str, ...] = ("perfetto", "chrome"),
                a: Path | None = None) -> Path:
    if a is None:
        a = tmp_path / "a.duckdb"
        r = run_cli("ingest", "--db", str(a), "-q", *map(str, source))
        assert r.code == 0, r.err
    for fmt in formats:
        out = tmp_path / ("export.json.gz" if fmt == "perfetto" else "export.json")
        r = run_cli("export", "--db", str(a), "--format", fmt, "--out", str(out))
        assert r.code == 0, r.err
        b = tmp_path / f"b_{fmt}.duckdb"
        r = run_cli("ingest", "--db", str(b), "-q", str(out))
        assert r.code == 0, r.err
        _same_run(a, b)
    return a


@pytest.mark.parametrize("rel", SHARED_RUNS)
def test_every_shared_trace_round_trips_field_by_field(rel: str, tmp_path: Path) -> None:
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"shared traces not here ({SHARED})")
    _round_trip([path], tmp_path)


def _graph_run(tmp_path: Path) -> list[Path]:
    """A capture trace (two launches captured into one graph inside aten::linear and aten::relu,
    a warm-up kernel of its own) and a replay trace (one graph launch replaying both kernels, and
    a copy launched by an op), both of process 100: the pids collide, as in vLLM's capture and
    replay traces."""
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
              "computeMinor": 0, "numSms": 132}]
    f32 = "float"
    capture = [cpu_op("aten::linear", 0, 100, ext=1, dims=[[64, 128], [256, 128]], types=[f32, f32]),
               runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1), kernel("warmup_gemm", 20, 30, corr=1),
               runtime("cudaStreamBeginCapture", 40, 1, corr=90),
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 50, "dur": 2,
                "args": {"correlation": 2, "External id": 1, "kernel": "sm90_gemm_f32"}},
               cpu_op("aten::relu", 110, 20, ext=3, dims=[[64, 256]], types=[f32]),
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 115, "dur": 2,
                "args": {"correlation": 3, "External id": 3, "kernel": "relu_kernel"}},
               runtime("cudaStreamEndCapture", 140, 1, corr=91)]
    replay = [runtime("cudaGraphLaunch", 10, 5, corr=7), kernel("sm90_gemm_f32", 30, 40, corr=7),
              kernel("relu_kernel", 75, 5, corr=7), cpu_op("aten::copy_", 90, 10, ext=5, dims=[[64, 256]], types=[f32]),
              runtime("cudaLaunchKernel", 92, 3, corr=8, ext=5), kernel("copy_kernel", 120, 5, corr=8)]
    return [write_trace(tmp_path / "capture.json", capture, deviceProperties=props, baseTimeNanoseconds=BASE_NS),
            write_trace(tmp_path / "replay.json", replay, deviceProperties=props, baseTimeNanoseconds=BASE_NS + 10**6)]


def test_a_graph_capture_and_replay_run_keeps_its_traces_roles_and_links(tmp_path: Path) -> None:
    a = _round_trip(_graph_run(tmp_path), tmp_path, ("chrome",))  # (both formats: the shared traces)
    b = tmp_path / "b_chrome.duckdb"
    # what the checks above compare, by hand: both replayed kernels mapped to their capturing op,
    # the capture trace left out of the breakdown (its warm-up kernel is not counted)
    for db in (a, b):
        assert _rows(db, "SELECT k.name, k.trace_id, k.attribution, o.name, o.trace_id FROM kernels k "
                         "LEFT JOIN ops o USING (run_id, op_id) ORDER BY k.ts_ns") == [
            ("warmup_gemm", 0, "launch", "aten::linear", 0),
            ("sm90_gemm_f32", 1, "graph_capture", "aten::linear", 0),
            ("relu_kernel", 1, "graph_capture", "aten::relu", 0),
            ("copy_kernel", 1, "launch", "aten::copy_", 1)]
    doc = json.loads(run_cli("analyze", "--db", str(b), "--json").out)  # (a's equals it: _round_trip)
    assert doc["time_us"]["idle"] == pytest.approx(45.0)  # 30-70, 75-80 and 120-125 µs of the replay trace
    assert [t["trace_id"] for t in doc["excluded_traces"]] == [0]
    doc = json.loads((tmp_path / "export.json").read_text())
    pids = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert pids == {"trace0:100", "trace1:100"}  # process 100 of each trace, kept apart


def test_telemetry_samples_come_back_as_the_runs_samples(tmp_path: Path) -> None:
    """A run with the real H100 recording's samples (every metric it read, bytes as BIGINT, a
    host device) beside a trace, marks, a profiler window and a model: the counter tracks become
    the same samples, devices and keys (the trace's GPU named trace0/gpu0 beside telemetry's
    gpu0, as `gpuscope run` names them), the marks and window the same annotations."""
    from gpuscope import store

    rec = FIXTURES / "recordings" / "h100_sxm_bf16_matmul.jsonl.gz"
    with gzip.open(rec, "rt") as f:
        rows = [json.loads(line) for line in f][1:]
    t0 = min(r["ts_ns"] for r in rows if "ts_ns" in r)
    trace = write_trace(tmp_path / "t.json", [cpu_op("aten::mm", 0, 20, ext=1, dims=[[64, 64], [64, 64]], types=["float"] * 2),
                                              runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1),
                                              kernel("sm90_gemm", 100, 900, corr=1)],
                        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984,
                                           "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
                        baseTimeNanoseconds=t0)
    a = tmp_path / "a.duckdb"
    r = run_cli("ingest", "--db", str(a), "-q", "--model", str(FIXTURES / "models" / "Qwen3-8B.config.json"), str(trace))
    assert r.code == 0, r.err
    con = store.connect(a)
    try:
        cols = {r[0] for r in con.execute("SELECT * FROM samples LIMIT 0").description}
        with store.transaction(con):
            con.execute("UPDATE devices SET key = 'trace0/gpu0'")
            con.execute("INSERT INTO devices (run_id, device_id, key, source, vendor, kind, name, spec_key, uuid) VALUES "
                        "(1, 1, 'gpu0', 'telemetry', 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3', 'h100-sxm', 'GPU-1'), "
                        "(1, 2, 'host', 'telemetry', NULL, 'host', 'Synthetic CPU', NULL, NULL)")
            # what `gpuscope run` records beside: a profiler window, marks with tokens
            con.execute("INSERT INTO annotations (run_id, kind, name, ts_ns, dur_ns, pid, value) VALUES "
                        "(1, 'profiler_window', 'window 1', ?, 500000000, NULL, '{\"trigger\": \"start\"}'), "
                        "(1, 'mark', 'decode', ?, NULL, '4242', '{\"tokens\": 32, \"step\": 0}'), "
                        "(1, 'mark', 'decode', ?, NULL, '4242', '{\"tokens\": 32, \"step\": 1}')",
                        [t0 + 10**9, t0 + 12 * 10**8, t0 + 14 * 10**8])
            kept = []
            for r in rows:
                if r.get("device") not in ("gpu0", "host") or not r.get("values"):
                    continue
                vals = {k: v for k, v in r["values"].items() if k in cols and isinstance(v, (int, float))}
                kept.append({"run_id": 1, "device_id": 1 if r["device"] == "gpu0" else 2, "ts_ns": r["ts_ns"], **vals})
            rows_file = tmp_path / "samples.jsonl"
            rows_file.write_text("".join(json.dumps(r) + "\n" for r in kept))
            # one statement (a row at a time costs seconds); BY NAME: each row's metrics, the rest null
            con.execute("INSERT INTO samples BY NAME SELECT * FROM read_json(?, format='newline_delimited')",
                        [str(rows_file)])
            n = len(kept)
    finally:
        con.close()
    assert n > 300
    _round_trip([], tmp_path, ("perfetto",), a=a)
    b = tmp_path / "b_perfetto.duckdb"
    assert _rows(b, "SELECT count(*), count(DISTINCT device_id), count(energy_j), count(mem_used_bytes) FROM samples") == \
        _rows(a, "SELECT count(*), count(DISTINCT device_id), count(energy_j), count(mem_used_bytes) FROM samples")
    assert _rows(b, "SELECT count(energy_j) FROM samples")[0][0] == 29  # read once a second (fixtures/recordings)
    assert _rows(b, "SELECT kind, count(*) FROM annotations GROUP BY ALL ORDER BY ALL") == [("mark", 2), ("profiler_window", 1)]
    assert _rows(b, "SELECT json_extract_string(spec_json, '$.name') FROM run_models")[0][0]  # the --model given at first


def test_an_ordinary_trace_with_counter_tracks_gets_no_samples(tmp_path: Path) -> None:
    """Counter tracks of a trace that is not gpuscope's export are not samples (nothing says
    what device or unit they are)."""
    ev = [kernel("k", 0, 10), {"ph": "C", "name": "gpu0 power_w", "pid": 1000001, "tid": 0, "ts": 5,
                               "args": {"power_w": 300.0}}]
    trace = write_trace(tmp_path / "c.json", ev, baseTimeNanoseconds=BASE_NS,
                        otherData={"gpuscope_export": {"format": 999}})
    db = tmp_path / "c.duckdb"
    assert run_cli("ingest", "--db", str(db), "-q", str(trace)).code == 0
    assert _rows(db, "SELECT count(*) FROM samples") == [(0,)]


def test_a_forged_export_block_is_read_without_trusting_it(tmp_path: Path) -> None:
    """The block is read from a file anyone can write: values that do not fit their columns are
    stored null, a pid map that points past the traces makes the file an ordinary trace, and
    nothing reaches an internal error."""
    block = {"format": 1, "traces": [{"metadata": {"deviceProperties": "x"}, "rank": -4}],
             "cpu_pids": [["100", 0, "100"]], "gpu_pids": [["0", 0, "0"]],
             "devices": [{"key": "gpu0", "source": 5, "num_sms": "lots", "memory_total_bytes": 1e30, "name": "\ud800"}],
             "sample_columns": ["power_w", "x; DROP TABLE samples"], "samples": 1, "annotations": 0,
             "run": {"name": 7, "started_ns": "soon"}, "model": {"spec": "no"}}
    ev = [kernel("k", 0, 10), {"ph": "C", "name": "gpu0 power_w", "pid": 1000001, "tid": 0, "ts": 5,
                               "args": {"power_w": "hot"}},
          {"ph": "C", "name": "gpu0 power_w", "pid": 1000001, "tid": 0, "ts": 6, "args": {"power_w": 250.5}}]
    trace = write_trace(tmp_path / "f.json", ev, baseTimeNanoseconds=BASE_NS, otherData={"gpuscope_export": block})
    db = tmp_path / "f.duckdb"
    r = run_cli("ingest", "--db", str(db), "-q", str(trace))
    assert r.code == 0, r.err
    assert _rows(db, "SELECT key, source, num_sms, memory_total_bytes, name FROM devices ORDER BY device_id") == [
        ("trace0/gpu0", "trace", None, None, None), ("gpu0", "telemetry", None, None, "?")]
    assert _rows(db, "SELECT ts_ns - (SELECT min(ts_ns) FROM samples), power_w FROM samples ORDER BY ts_ns") == [
        (0, None), (1000, 250.5)]
    assert _rows(db, "SELECT name FROM runs") == [("f",)] and _rows(db, "SELECT count(*) FROM run_models") == [(0,)]
    block["cpu_pids"] = [["100", 3, "100"]]  # trace 3 of 1
    trace = write_trace(tmp_path / "g.json", ev, baseTimeNanoseconds=BASE_NS, otherData={"gpuscope_export": block})
    db = tmp_path / "g.duckdb"
    assert run_cli("ingest", "--db", str(db), "-q", str(trace)).code == 0
    assert _rows(db, "SELECT count(*) FROM samples") == [(0,)]
