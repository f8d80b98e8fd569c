"""Small hand-written traces, one per shape real profilers write (design.md §6)."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cpu_op, file_digest, kernel, run_cli, runtime, write_trace


def _analyze(*paths: Path) -> dict:
    r = run_cli("ingest", *paths, "--json", "-q")
    assert r.code == 0, r.err
    a = run_cli("analyze", "--json")
    assert a.code == 0, a.err
    return a.json()


def _linked_trace() -> list[dict]:
    return [
        cpu_op("aten::linear", 100.0, 50.0, ext=1, dims=[[4, 8], [16, 8]], types=["float", "float"]),
        cpu_op("aten::addmm", 105.0, 40.0, ext=2, dims=[[16], [4, 8], [8, 16]], types=["float", "float", "float"]),
        runtime("cudaLaunchKernel", 110.0, 5.0, corr=10, ext=2),
        kernel("ampere_sgemm_32x32", 200.0, 10.0, corr=10, **{"External id": 2}),
        cpu_op("aten::relu", 160.0, 10.0, ext=3, dims=[[4, 16]], types=["float"]),
        runtime("cudaLaunchKernel", 162.0, 2.0, corr=11, ext=3),
        kernel("void at::native::vectorized_elementwise_kernel<4>", 215.0, 5.0, corr=11),
    ]


def test_kernels_link_to_launch_and_innermost_op(tmp_path, db) -> None:
    doc = _analyze(write_trace(tmp_path / "t.json", _linked_trace()))
    assert doc["time_us"] == {"compute": 15.0, "communication": 0.0, "memory": 0.0, "idle": 5.0}
    ops = {o["name"]: o for o in doc["ops"]}
    assert set(ops) == {"aten::addmm", "aten::relu"}  # aten::linear launched nothing itself
    assert ops["aten::addmm"]["input_dims"] == [[16], [4, 8], [8, 16]]
    assert ops["aten::addmm"]["input_types"] == ["float", "float", "float"]
    assert ops["aten::addmm"]["kernel_us"] == 10.0 and ops["aten::relu"]["kernel_us"] == 5.0
    rows = run_cli("sql", "SELECT name, launch_name, launch_ts_ns, correlation FROM kernels ORDER BY ts_ns", "--json").json()
    assert [r["launch_name"] for r in rows] == ["cudaLaunchKernel", "cudaLaunchKernel"]
    parents = run_cli("sql", "SELECT o.name, p.name AS parent FROM ops o LEFT JOIN ops p ON p.op_id = o.parent_op_id AND p.run_id = o.run_id ORDER BY o.ts_ns", "--json").json()
    assert {r["name"]: r["parent"] for r in parents} == {"aten::linear": None, "aten::addmm": "aten::linear", "aten::relu": None}


def test_relative_timestamps_with_base_time(tmp_path, db) -> None:
    base = 1_735_632_360_000_000_000
    events = [kernel("k", 4203669603018.125, 1.5, corr=1), kernel("k", 4203669603020.0, 0.25, corr=2)]
    write_trace(tmp_path / "t.json", events, baseTimeNanoseconds=base)
    doc = _analyze(tmp_path / "t.json")
    assert doc["time_us"]["compute"] == pytest.approx(1.75)
    assert doc["time_us"]["idle"] == pytest.approx(0.375)
    ts = run_cli("sql", "SELECT ts_ns, dur_ns FROM kernels ORDER BY ts_ns", "--json").json()
    assert ts[0] == {"ts_ns": base + 4203669603018125, "dur_ns": 1500}
    assert ts[1]["dur_ns"] == 250


def test_absolute_integer_timestamps_keep_nanosecond_exactness(tmp_path, db) -> None:
    events = [kernel("k", 1694039969479080, 3, corr=1), kernel("k", 1694039969479090, 2, corr=2)]
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    assert doc["time_us"]["idle"] == 7.0
    ts = run_cli("sql", "SELECT ts_ns FROM kernels ORDER BY ts_ns", "--json").json()
    assert ts[0]["ts_ns"] == 1694039969479080 * 1000


def test_device_properties_as_dict_or_list(tmp_path, db) -> None:
    props = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
             "computeMinor": 0, "warpSize": 32, "numSms": 132}
    write_trace(tmp_path / "a.json", [kernel("k", 10.0, 1.0)], deviceProperties=[props])
    write_trace(tmp_path / "b.json", [kernel("k", 10.0, 1.0)], deviceProperties={"0": props})
    for f in ("a.json", "b.json"):
        doc = _analyze(tmp_path / f)
        (dev,) = doc["devices"]
        assert dev["name"] == "NVIDIA H100 80GB HBM3" and dev["vendor"] == "nvidia"
        assert dev["compute_capability"] == "9.0" and dev["num_sms"] == 132


def test_legacy_capitalised_categories_and_lowercase_external_id(tmp_path, db) -> None:
    # The categories older Kineto (PyTorch 1.8-1.9) wrote: Operator, Runtime, Kernel, and
    # Memcpy / Memset for what is now gpu_memcpy / gpu_memset. HTA counts those as memory kernels
    # (checked with HTA 0.5.0 on this trace plus two profiler steps: MEMORY 2 µs, idle 6 µs).
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 100, "dur": 20,
         "args": {"external id": 5, "Input Dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 105, "dur": 3,
         "args": {"correlation": 77, "external id": 5}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 9, "tid": 9, "ts": 110, "dur": 3,
         "args": {"correlation": 78, "external id": 5}},
        {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": "stream 7", "ts": 130, "dur": 4,
         "args": {"device": 0, "stream": 7, "correlation": 77, "external id": 5}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 140, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 78, "external id": 5, "bytes": 100}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 150, "dur": 1,
         "args": {"device": 0, "stream": 7}},
    ]
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    t = doc["time_us"]
    assert (t["compute"], t["memory"], t["idle"]) == (4.0, 3.0, 14.0)
    (op,) = doc["ops"]
    assert op["name"] == "aten::mm" and op["kernel_us"] == 6.0  # the gemm and the memcpy it launched
    assert {k["name"]: k["kind"] for k in doc["kernels"]}["Memset (Device)"] == "memset"


def test_memcpy_memset_and_communication(tmp_path, db) -> None:
    events = [
        kernel("Memcpy HtoD (Pageable -> Device)", 0.0, 4.0, cat="gpu_memcpy", bytes=4096),
        kernel("Memset (Device)", 5.0, 1.0, cat="gpu_memset"),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 6.0, 10.0),
        kernel("rcclGenericKernel", 16.0, 2.0),
        kernel("hipMemcpyDtoD", 18.0, 1.0),
        kernel("gemm", 19.0, 3.0),
    ]
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    assert doc["time_us"] == {"compute": 3.0, "communication": 12.0, "memory": 6.0, "idle": 1.0}


def test_communication_and_memory_kernel_names_in_any_case(tmp_path, db) -> None:
    """Names are matched case-insensitively (as the reference definition does): every casing of
    the libraries' names, and kernels that only look close."""
    comm = ["NCCL_AllGather", "Ncclkernel", "mscclKernel_Sum", "MSCCL_x", "hcclAllReduce", "HcCl_y",
            "void rCcLGenericKernel<float>", "sendrecv_nCcL"]
    compute = ["cl_gemm", "circle_CL_kernel", "ccl_only", "nccX_kernel", "unnamed"]
    memory = ["HIPMEMCPY_kernel", "MemSet_fill", "hipMemsetD32"]
    events, t = [], 0.0
    for names, dur in ((comm, 2.0), (compute, 1.0), (memory, 3.0)):
        for name in names:
            events.append(kernel(name, t, dur))
            t += dur
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    assert doc["time_us"]["communication"] == 2.0 * len(comm)
    assert doc["time_us"]["compute"] == 1.0 * len(compute)
    assert doc["time_us"]["memory"] == 3.0 * len(memory)
    kinds = {k["name"]: k["kind"] for k in doc["kernels"]}
    assert kinds["HIPMEMCPY_kernel"] == "memcpy" and kinds["MemSet_fill"] == kinds["hipMemsetD32"] == "memset"


def test_idle_is_per_device_over_merged_intervals(tmp_path, db) -> None:
    events = [
        kernel("a", 0.0, 10.0, device=0, stream=7), kernel("b", 2.0, 3.0, device=0, stream=8),
        kernel("c", 15.0, 5.0, device=0, stream=7),  # gap 5 on device 0
        kernel("d", 100.0, 1.0, device=1), kernel("e", 103.0, 1.0, device=1),  # gap 2 on device 1
    ]
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    assert doc["time_us"]["idle"] == 7.0
    assert {d["key"]: d["idle_us"] for d in doc["per_device"]} == {"gpu0": 5.0, "gpu1": 2.0}


def test_duplicate_keys_and_json_array_form(tmp_path, db) -> None:
    text = ('[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2,'
            '"args":{"device":0,"device":0,"stream":7,"correlation":3}},'
            '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":5,"dur":1,"args":{"device":0}}]')
    (tmp_path / "arr.json").write_text(text)
    doc = _analyze(tmp_path / "arr.json")
    assert doc["time_us"]["compute"] == 3.0 and doc["time_us"]["idle"] == 2.0


def test_malformed_events_are_skipped_and_counted(tmp_path, db) -> None:
    events = [
        kernel("good", 0.0, 1.0),
        5,
        "text",
        {"ph": "X", "cat": "kernel", "name": "no-ts", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "str-ts", "ts": "abc", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "neg", "ts": 3, "dur": -1},
        {"ph": "X", "cat": "kernel", "name": "nodur", "ts": 3},
    ]
    r = run_cli("ingest", write_trace(tmp_path / "t.json", events), "--json", "-q")
    assert r.code == 0, r.err
    sk = r.json()["skipped"]
    assert sk["malformed"] == 6
    assert sk["reasons"] == {"not an object": 2, "no numeric ts": 2, "negative dur": 1, "no numeric dur": 1}
    text = run_cli("analyze").out
    assert "Skipped malformed events" in text and "2 not an object" in text


@pytest.mark.parametrize("reader", ["typed", "lenient"])
def test_only_json_numbers_are_times(tmp_path, db, reader) -> None:
    # A numeric string or a boolean is not a time (design.md §4.2's "numeric ts and dur", as
    # the shared reference_breakdown.py reads it): both JSON readers skip such events. A
    # non-object element sends the whole trace down the lenient reader.
    events = [
        kernel("a", 100.0, 10.0),
        {**kernel("b", 0.0, 10.0), "ts": "200"},
        {**kernel("c", 300.0, 0.0), "dur": "10"},
        {**kernel("d", 0.0, 10.0), "ts": True},
        {**kernel("e", 350.0, 0.0), "dur": False},
        kernel("f", 400.0, 10.0),
    ] + ([7] if reader == "lenient" else [])
    r = run_cli("ingest", write_trace(tmp_path / "t.json", events), "--json", "-q")
    assert r.code == 0, r.err
    assert r.json()["skipped"]["reasons"] == {
        "no numeric ts": 2, "no numeric dur": 2, **({"not an object": 1} if reader == "lenient" else {})}
    doc = run_cli("analyze", "--json").json()
    assert doc["time_us"]["compute"] == 20.0 and doc["time_us"]["idle"] == 290.0


def test_trace_without_cpu_side(tmp_path, db) -> None:
    doc = _analyze(write_trace(tmp_path / "t.json", [kernel("k", 0.0, 1.0), kernel("k", 2.0, 1.0)]))
    assert doc["ops"] == [] and doc["counts"]["gpu_activities_without_op"] == 2
    assert any("no CPU side" in n for n in doc["notes"])


def test_non_gpu_accelerator_is_ingested_and_reported(tmp_path, db) -> None:
    events = [
        cpu_op("aten::mm", 0.0, 10.0, ext=1),
        {"ph": "X", "cat": "mtia_runtime", "name": "mtiaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0,
         "args": {"correlation": 4}},
        {"ph": "X", "cat": "mtia_ccp_events", "name": "job", "pid": 2, "tid": 2, "ts": 3.0, "dur": 5.0, "args": {}},
    ]
    r = run_cli("ingest", write_trace(tmp_path / "t.json", events), "--json", "-q")
    assert r.code == 0, r.err
    assert any("non-GPU accelerator" in n and "MTIA" in n for n in r.json()["notes"])
    assert "non-GPU accelerator" in run_cli("analyze").out


def test_several_files_and_directories_make_one_run(tmp_path, db) -> None:
    d = tmp_path / "ranks"
    (d / "sub").mkdir(parents=True)
    for rank in range(2):
        write_trace(d / "sub" / f"rank{rank}.pt.trace.json.gz", [kernel("k", 0.0, 2.0, device=rank),
                                                                kernel("k", 4.0, 2.0, device=rank)],
                    distributedInfo={"rank": rank})
    (d / "notes.txt").write_text("not a trace")
    r = run_cli("ingest", d, "--name", "tp2", "--json", "-q")
    assert r.code == 0, r.err
    assert len(r.json()["files"]) == 2 and r.json()["name"] == "tp2"
    doc = run_cli("analyze", "tp2", "--json").json()
    assert sorted(x["key"] for x in doc["devices"]) == ["rank0/gpu0", "rank1/gpu1"]
    assert doc["time_us"]["compute"] == 8.0 and doc["time_us"]["idle"] == 4.0


def test_json_files_in_a_directory_that_are_not_traces_are_named_in_both_reports(tmp_path, db) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write_trace(d / "rank0.json", [kernel("k", 0.0, 2.0)])
    (d / "config.json").write_text('{"model": "m"}')
    r = run_cli("ingest", d)
    assert r.code == 0, r.err
    assert "note: skipped files that are not traces: config.json" in r.out
    assert "note: skipped files that are not traces: config.json" in run_cli("analyze").out


def test_profiler_steps_and_annotations_are_kept(tmp_path, db) -> None:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "## forward ##", "pid": 1, "tid": 1, "ts": 5, "dur": 50},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "## forward ##", "pid": 0, "tid": 7, "ts": 9, "dur": 60,
         "args": {"device": 0}},
        kernel("k", 10.0, 5.0),
    ]
    _analyze(write_trace(tmp_path / "t.json", events))
    rows = run_cli("sql", "SELECT kind, name, device_id FROM annotations ORDER BY ts_ns, kind", "--json").json()
    assert [(r["kind"], r["name"]) for r in rows] == [
        ("profiler_step", "ProfilerStep#3"), ("user_annotation", "## forward ##"),
        ("gpu_user_annotation", "## forward ##"), ("profiler_step", "ProfilerStep#4")]
    assert rows[2]["device_id"] == 0


def test_hip_runtime_names_and_amd_device(tmp_path, db) -> None:
    events = [
        cpu_op("aten::addmm", 0.0, 20.0, ext=7, dims=[[64], [32, 128], [128, 64]]),
        {"ph": "X", "cat": "cuda_runtime", "name": "hipExtModuleLaunchKernel", "pid": 100, "tid": 100, "ts": 5.0,
         "dur": 2.0, "args": {"External id": 7, "correlation": 9, "kernel": "Cijk_Alik_Bljk_SB", "stream": "0x0"}},
        {"ph": "X", "cat": "kernel", "name": "Cijk_Alik_Bljk_SB", "pid": 2, "tid": 0, "ts": 30.0, "dur": 4.0,
         "args": {"External id": 7, "device": 2, "stream": 0, "correlation": 9, "kind": "Dispatch Kernel"}},
    ]
    write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": "AMD Radeon Graphics", "warpSize": 64,
                                                                 "computeMajor": 9, "computeMinor": 4, "numSms": 304}])
    doc = _analyze(tmp_path / "t.json")
    (dev,) = doc["devices"]
    assert dev["vendor"] == "amd" and dev["num_sms"] == 304 and dev["key"] == "gpu2"
    assert doc["ops"][0]["name"] == "aten::addmm" and doc["ops"][0]["kernel_us"] == 4.0


def test_streaming_handles_a_trace_bigger_than_the_chunk(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.read as read

    monkeypatch.setattr(read, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(read, "TAIL_WINDOWS", (64, 8192, 1 << 20))
    events = [kernel(f"k{i % 7}", float(i * 10), 5.0, corr=i) for i in range(3000)]
    path = write_trace(tmp_path / "big.json.gz", events, deviceProperties=[{"id": 0, "name": "NVIDIA A100"}],
                       baseTimeNanoseconds=1_700_000_000_000_000_000)
    doc = _analyze(path)
    assert doc["counts"]["gpu_activities"] == 3000
    assert doc["time_us"]["compute"] == pytest.approx(15000.0)
    assert doc["time_us"]["idle"] == pytest.approx(5.0 * 2999)
    assert doc["devices"][0]["name"] == "NVIDIA A100"


def test_cpu_fixture_of_the_example_workload(db) -> None:
    from conftest import FIXTURES

    doc = _analyze(FIXTURES / "traces" / "cpu_tiny_llm.pt.trace.json.gz")
    assert doc["gpu_activity"] is False
    mm = [o for o in doc["ops"] if o["name"] == "aten::mm"]
    assert mm and all(len(o["input_dims"]) == 2 for o in mm)
    assert any(o["name"].startswith("aten::_scaled_dot_product") for o in doc["ops"])
    steps = run_cli("sql", "SELECT count(*) AS n FROM annotations WHERE kind = 'profiler_step'", "--json").json()
    assert steps[0]["n"] == 4


def _record_staging_limits(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The memory limit of every staging attempt, in order (staging still runs for real)."""
    import gpuscope.ingest.stage as stage

    limits: list[str | None] = []
    real = stage._stage_traces

    def recording(paths, progress, optional, memory_limit, *rest):  # type: ignore[no-untyped-def]
        limits.append(memory_limit)
        return real(paths, progress, optional, memory_limit, *rest)

    monkeypatch.setattr(stage, "_stage_traces", recording)
    return limits


def test_staging_that_exceeds_its_memory_limit_is_redone_without_it(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.stage as stage

    limits = _record_staging_limits(monkeypatch)
    monkeypatch.setattr(stage, "STAGING_MEMORY_LIMIT", "1MB")  # far below what the JSON reader needs
    events = [kernel(f"k{i % 7}", float(i * 10), 5.0, corr=i) for i in range(2000)]
    path = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA A100"}])
    doc = _analyze(path)
    assert limits == ["1MB", None]
    assert doc["counts"]["gpu_activities"] == 2000
    assert doc["time_us"]["compute"] == pytest.approx(10000.0)
    assert run_cli("sql", "SELECT count(*) AS n FROM runs", "--json").json()[0]["n"] == 1


def test_staging_within_its_memory_limit_runs_once(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.stage as stage

    limits = _record_staging_limits(monkeypatch)
    path = write_trace(tmp_path / "t.json", [kernel("k", 0.0, 5.0, corr=1)])
    assert _analyze(path)["counts"]["gpu_activities"] == 1
    assert limits == [stage.STAGING_MEMORY_LIMIT]


def test_large_inputs_are_staged_with_several_threads(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.stage as stage

    monkeypatch.setattr(stage, "PARALLEL_JSON_BYTES", 1)  # every input counts as large
    events = [kernel(f"k{i % 5}", float(i * 10), 4.0, corr=i) for i in range(500)]
    doc = _analyze(write_trace(tmp_path / "t.json", events))
    assert doc["counts"]["gpu_activities"] == 500
    assert doc["time_us"]["compute"] == pytest.approx(2000.0)
    assert doc["time_us"]["idle"] == pytest.approx(6.0 * 499)


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many files (the whole spool, or its parts) each read of events was given, and
    still read them."""
    import gpuscope.ingest.parse as parse

    seen: list[int] = []
    real = parse._insert_events

    def spy(con, trace_id, source, files):
        seen.append(len(files))
        return real(con, trace_id, source, files)

    monkeypatch.setattr(parse, "_insert_events", spy)
    return seen


def _mixed_events(n: int) -> list:
    events: list = []
    for i in range(n):
        t = i * 100.0
        events += [
            cpu_op("aten::mm", t, 50.0, ext=i, dims=[[4, 8], [8, 16]], types=["float", "float"]),
            runtime("cudaLaunchKernel", t + 5, 5.0, corr=i, ext=i),
            kernel("ampere_sgemm" if i % 3 else "ncclDevKernel_AllReduce", t + 60, 20.0, corr=i),
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": t + 85,
             "dur": 3, "args": {"device": 0}},
            {"ph": "f", "id": i, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": t + 60, "bp": "e"},
        ]
        if i % 50 == 7:
            events.append({"ph": "X", "cat": "kernel", "name": "bad", "pid": 0, "ts": "x", "dur": 1})
    return events


def _comparable(doc: dict) -> dict:
    return {k: doc[k] for k in ("time_us", "counts", "skipped", "ops", "kernels")}


@pytest.mark.parametrize("odd_element", [False, True], ids=["typed", "lenient"])
def test_events_read_in_parts_give_the_same_run(tmp_path, db, monkeypatch, odd_element) -> None:
    import gpuscope.ingest.read as read
    import gpuscope.ingest.parse as parse

    events = _mixed_events(300)
    if odd_element:  # a non-object element sends every part down the lenient reader
        events.insert(700, 42)
    path = write_trace(tmp_path / "t.json", events)
    seen = _spy_reads(monkeypatch)

    def ingest_and_analyze() -> tuple[dict, dict]:
        r = run_cli("ingest", path, "--json", "-q")
        assert r.code == 0, r.err
        doc = {k: r.json()[k] for k in ("events", "loaded", "skipped", "ignored", "linked")}
        return doc, _comparable(run_cli("analyze", "--json").json())

    whole = ingest_and_analyze()
    assert seen == [1]  # small: read whole
    monkeypatch.setattr(read, "SPOOL_PART_BYTES", 4096)
    in_parts = ingest_and_analyze()
    # read once, in parts, a batch of parts per statement
    assert sum(seen[1:]) > 10 and all(n <= parse.PARTS_PER_BATCH for n in seen[1:]) and len(seen) > 2
    assert in_parts == whole
    assert whole[0]["ignored"] == {"ac2g": 300} and whole[0]["events"] == len(events)
    parts = whole[1]
    assert parts["counts"]["gpu_activities"] == 2 * 300 and parts["skipped"] == {"no numeric ts": 6, **({"not an object": 1} if odd_element else {})}


def test_a_cut_that_is_not_between_events_falls_back_to_the_whole_spool(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.read as read

    # Objects inside a list inside args, written one per line: their separators look like the
    # separators between events, so some cuts land inside an event and the parts do not parse.
    events = []
    for i in range(200):
        k = kernel("k", i * 10.0, 5.0, corr=i)
        k["args"]["launches"] = [{"a": 1}, {"b": 2}, {"c": 3}]
        events.append(k)
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setattr(read, "SPOOL_PART_BYTES", 2048)
    seen = _spy_reads(monkeypatch)
    doc = _analyze(path)
    # the parts did not parse: the rows of the batches read are removed, the whole spool read
    assert seen[0] > 1 and seen[-1] == 1 and all(n > 1 for n in seen[:-1])
    assert doc["counts"]["gpu_activities"] == 200 and doc["time_us"]["compute"] == 1000.0


def test_malformed_json_late_in_a_trace_read_in_parts(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.read as read

    path = write_trace(tmp_path / "t.json", _mixed_events(200))
    text = path.read_text()
    cut = text.rindex('"ampere_sgemm"')
    path.write_text(text[:cut] + '"ampere_sgemm" oops' + text[cut + len('"ampere_sgemm"'):])
    monkeypatch.setattr(read, "SPOOL_PART_BYTES", 4096)
    r = run_cli("ingest", path, "-q")
    assert r.code == 2 and r.err.startswith(f"gpuscope ingest: {path}: malformed JSON in the events")
    assert len(r.err.strip().splitlines()) == 1 and "part" not in r.err and not db.exists()


def test_spools_are_cut_only_between_objects(tmp_path) -> None:
    import json

    from gpuscope.ingest.read import spool_events

    events = [{"i": i, "s": "},\n{" if i % 2 else "x", "args": {"v": [1, 2]}} for i in range(500)]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "after": 1}, indent=1))
    handed: list = []
    spooled = spool_events(trace, tmp_path, part_bytes=1024, on_part=handed.append)
    assert len(spooled.parts) > 5 and handed == spooled.parts[:-1] and spooled.header == {"after": 1}
    assert [e for p in spooled.parts for e in json.loads(p.read_text())] == events
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps({"traceEvents": events}))  # one line: nowhere to cut
    one = spool_events(compact, tmp_path, part_bytes=1024)
    assert len(one.parts) == 1 and json.loads(one.parts[0].read_text()) == events


def test_ops_with_equal_times_link_the_same_on_one_thread_or_several(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.read as read
    import gpuscope.ingest.stage as stage

    # A wrapper op and the op it wraps with the same ts and dur (µs resolution makes this
    # common: torch::distributed::reducer::mul_out around aten::mul). The launch belongs to the
    # inner op, which Kineto writes after its parent; ties must not be broken by chance.
    events = []
    for i in range(1500):
        t = i * 20.0
        events += [
            cpu_op("torch::distributed::reducer::mul_out", t, 5.0, ext=2 * i, dims=[[i % 7 + 1]], types=["float"]),
            cpu_op("aten::mul", t, 5.0, ext=2 * i + 1, dims=[[i % 7 + 1], []], types=["float", "Scalar"]),
            runtime("cudaLaunchKernel", t + 1, 2.0, corr=i, ext=99_999_999),  # no op claims it by id
            kernel("vectorized_elementwise_kernel", t + 10, 3.0, corr=i),
        ]
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setattr(read, "SPOOL_PART_BYTES", 8192)
    one = _analyze(path)
    monkeypatch.setattr(stage, "PARALLEL_JSON_BYTES", 1)  # several threads, parsing parts at once
    several = _analyze(path)
    assert {o["name"] for o in one["ops"]} == {"aten::mul"}  # every launch on the inner op
    assert _comparable(several) == _comparable(one)


def test_a_full_temporary_folder(tmp_path, db, monkeypatch) -> None:
    import gpuscope.ingest.read as read

    path = write_trace(tmp_path / "t.json", [kernel("k", i * 10.0, 5.0, corr=i) for i in range(3000)])
    assert _analyze(path)["counts"]["gpu_activities"] == 3000

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    # No room for the spool: one line that says where and what to do; the store is untouched.
    before = file_digest(db)
    monkeypatch.setattr(read.tempfile, "mkstemp", no_space)
    r = run_cli("ingest", path, "-q")
    assert r.code == 1 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert "cannot write a temporary copy of its events" in r.err and "TMPDIR" in r.err and str(path) in r.err
    assert file_digest(db) == before


@pytest.mark.parametrize(("body", "reason"), [
    (b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":0},', "an empty element in the event array (a stray comma?)"),
    (b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":0},,{"ph":"X"}', "an empty element in the event array (a stray comma?)"),
    (b'{"ph":"X","cat":"kernel","name":"k\xff\xfe","ts":1,"dur":2,"pid":0,"tid":0}', "invalid UTF-8 encoding in string"),
    (b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":0 "x":1}', "unexpected character"),
])
def test_malformed_events_are_named_in_words(tmp_path, db, body, reason) -> None:
    """DuckDB's reader errors come out as one line with the reason alone: no temporary file,
    no byte offset or record number within a part of the spool."""
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + body + b"]}")
    r = run_cli("ingest", path, "-q")
    assert r.code == 2 and r.err.strip() == f"gpuscope ingest: {path}: malformed JSON in the events ({reason})"
    assert not db.exists()


def test_spool_ahead_hands_over_spools_and_errors_in_order(tmp_path) -> None:
    """Files are spooled ahead of the caller, in a thread: each take() gives that file's
    stream of parts, whose result is the spool or the error spooling it raised, in the order of
    the files."""
    from gpuscope.errors import InputError
    from gpuscope.ingest.read import SpoolAhead

    good = write_trace(tmp_path / "a.json", [kernel("k", 1.0, 2.0)])
    bad = tmp_path / "b.json"
    bad.write_text('{"a": 1}')
    also_good = write_trace(tmp_path / "c.json.gz", [kernel("k", 1.0, 2.0), kernel("k", 4.0, 2.0)])
    ahead = SpoolAhead([good, bad, also_good])
    try:
        stream = ahead.take(0)
        first = stream.result()
        assert first.source == good and first.spool.parent == ahead.dir
        assert stream.next_part() == first.spool and stream.next_part() is None
        with pytest.raises(ValueError):
            ahead.take(2)  # out of order
        bad_stream = ahead.take(1)
        assert bad_stream.next_part() is None
        with pytest.raises(InputError, match="not a trace"):
            bad_stream.result()
        third = ahead.take(2).result()
        assert third.source == also_good and third.spool.read_bytes().count(b'"kernel"') == 2
    finally:
        ahead.close()
    assert not ahead.dir.exists()


def test_spool_ahead_close_stops_the_spool_under_way(tmp_path) -> None:
    import threading

    from gpuscope.ingest.read import SpoolAhead, SpoolStopped, spool_events

    big = write_trace(tmp_path / "big.json", [kernel(f"k{i}", i * 3.0, 2.0, corr=i) for i in range(40000)])
    assert big.stat().st_size > 4 * (1 << 20)  # several chunks of a MiB: a stop has a chance to land
    stop = threading.Event()
    stop.set()
    with pytest.raises(SpoolStopped):
        spool_events(big, tmp_path, stop)
    ahead = SpoolAhead([big])
    ahead.close()  # at once, while the first file may still be spooling
    assert not ahead.dir.exists()
    assert not any(t.name.startswith("gpuscope-spool") and t.is_alive() for t in threading.enumerate())
