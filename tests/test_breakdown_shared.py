"""The time breakdown of real NVIDIA and AMD traces against independently computed values.

Expected values: ``../shared/tools/reference_breakdown.py`` (design.md §4.2's definition, written
independently of gpuscope) run on each trace on 2026-11-22, recomputed in exact decimal
arithmetic because the script sums absolute float timestamps (its ``idle`` carries up to
~0.05 µs of float64 rounding on ns-resolution traces). Holistic Trace Analysis 0.5.0 gives
the same numbers where its own filters do not apply (``legacy_capitalized_categories``
exactly; on ``a100_sxm4_80gb_training_large`` its idle with the step filter off is 793037 µs);
where they differ, it is by HTA's documented habits (dropping kernels outside complete profiler
steps, flooring ns timestamps to whole µs, counting CPU ops that carry a stream).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, kernel, run_cli, runtime, shared_trace, write_trace

# trace: (compute, communication, memory, idle) in µs
EXPECTED = {
    "hta/a100_alexnet.json.gz": (10692, 0, 55511, 12854103),
    "hta/a100_sxm4_80gb_training_large.json.gz": (211100, 190345, 48318, 793037),
    "hta/a100_triton_kernel.json.gz": (1.760, 0, 0, 0.0),
    "hta/cpu_only.pt.trace.json.gz": (0, 0, 0, 0),
    "hta/legacy_capitalized_categories.json.gz": (30, 0, 0, 1599),
    "hta/mi250_rocm6.2_minitoy_train.json.gz": (110.881, 0, 38.161, 8762.845),
    # multimem_all_reduce_kernel (symmetric memory) is communication (design.md §4.2, 2026-11-25)
    "tracelens/b200_eager.json.gz": (8721.415, 2141.501, 802.844, 72890.696),
    "tracelens/mi210_gpu_only.json.gz": (5343.422, 0, 0, 636.081),
    "tracelens/qwen1.5-0.5b-chat/h100.json.gz": (45432.698, 0, 214.602, 4005.532),
    "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz": (43062.042, 0, 0.76, 4022.998),
    "tracelens/vllm_decode_cudagraph/graph_capture_rank_0.pt.trace.json.gz": (19.633, 0, 9.197, 57766.588),
    "tracelens/vllm_decode_cudagraph/graph_execution.json.gz": (10674.517, 0, 43.191, 25.473),
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_time_breakdown_matches_reference(rel: str, db) -> None:
    path = shared_trace(rel)
    r = run_cli("analyze", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["schema"] == "gpuscope.analysis/1"
    t = doc["time_us"]
    for key, want in zip(("compute", "communication", "memory", "idle"), EXPECTED[rel]):
        assert t[key] == pytest.approx(want, rel=1e-6, abs=0.002), (key, t[key], want)
    roof = doc["roofline_us"]
    assert set(roof) == {"compute_bound", "memory_bound", "cache_bound", "latency_bound", "unknown"}
    assert sum(roof.values()) == pytest.approx(t["compute"], abs=1e-6)


def test_amd_mi250_trace_is_read_as_amd(db) -> None:
    r = run_cli("analyze", shared_trace("hta/mi250_rocm6.2_minitoy_train.json.gz"), "--json")
    doc = r.json()
    (dev,) = doc["devices"]
    assert dev["vendor"] == "amd" and dev["name"] == "AMD Radeon Graphics" and dev["warp_size"] == 64
    names = [k["name"] for k in doc["kernels"]]
    assert any(n.startswith("Cijk_") for n in names)
    # hipExtModuleLaunchKernel launches are linked to their ops with shapes
    addmm = [o for o in doc["ops"] if o["name"] == "aten::addmm"]
    assert addmm and all(o["input_dims"] for o in addmm)
    assert doc["counts"]["gpu_activities_without_op"] == 0


def test_large_a100_trace_links_and_counts(db) -> None:
    r = run_cli("ingest", shared_trace("hta/a100_sxm4_80gb_training_large.json.gz"), "--json", "-q")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["events"] == 108936
    assert doc["loaded"]["kernels"] + doc["loaded"]["memcpy"] + doc["loaded"]["memset"] == 7747
    assert doc["skipped"]["malformed"] == 0
    # 872 GPU activities have no launch event in the trace (HTA drops them for that reason)
    assert doc["linked"]["kernels_with_launch"] == 7747 - 872
    steps = run_cli("sql", "SELECT name FROM annotations WHERE kind = 'profiler_step' ORDER BY ts_ns", "--json").json()
    assert [s["name"] for s in steps] == [f"ProfilerStep#{i}" for i in range(550, 555)]
    nccl = run_cli("sql", "SELECT count(*) AS n FROM kernels WHERE category = 'communication'", "--json").json()
    assert nccl[0]["n"] > 0


def test_alexnet_kernels_link_to_ops_by_time_when_external_ids_do_not_match(db) -> None:
    # This 2023 trace writes the correlation id as the launch's "External id"; gpuscope falls
    # back to the innermost op enclosing the launch, as HTA's call stacks do.
    r = run_cli("analyze", shared_trace("hta/a100_alexnet.json.gz"), "--json")
    doc = r.json()
    assert doc["counts"]["gpu_activities_without_op"] == 0
    ops = {o["name"]: o for o in doc["ops"]}
    assert ops["aten::addmm"]["count"] == 6
    assert ops["aten::cudnn_convolution"]["kernel_us"] > 5000
    assert ops["aten::copy_"]["kernel_us"] == pytest.approx(55503, abs=1)


def test_cpu_only_trace_reports_ops_with_cpu_time(db) -> None:
    r = run_cli("analyze", shared_trace("hta/cpu_only.pt.trace.json.gz"), "--json")
    doc = r.json()
    assert doc["gpu_activity"] is False and doc["devices"] == []
    assert doc["ops"] and all(o["kernel_us"] > 0 for o in doc["ops"])
    text = run_cli("analyze").out
    assert "No GPU activity" in text


def test_qwen_pair_both_vendors(db) -> None:
    h = run_cli("analyze", shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz"), "--json").json()
    m = run_cli("analyze", shared_trace("tracelens/qwen1.5-0.5b-chat/mi300x.json.gz"), "--json").json()
    assert h["devices"][0]["vendor"] == "nvidia" and "H100" in h["devices"][0]["name"]
    assert m["devices"][0]["vendor"] == "amd" and "MI300X" in m["devices"][0]["name"]
    for doc in (h, m):
        mm = [o for o in doc["ops"] if o["name"] in ("aten::mm", "aten::addmm", "aten::linear")]
        assert mm, "GEMM ops are attributed"
        assert all(isinstance(o["input_dims"], list) for o in mm)
    # Every kernel whose launch is in the trace reaches its op; the rest ran before the
    # profiler window opened on the CPU side (no launch event, no External id).
    for path in ("tracelens/qwen1.5-0.5b-chat/h100.json.gz", "tracelens/qwen1.5-0.5b-chat/mi300x.json.gz"):
        rows = run_cli(
            "sql",
            "SELECT count(*) FILTER (WHERE op_id IS NULL AND launch_name IS NOT NULL) AS lost, "
            "count(*) FILTER (WHERE op_id IS NOT NULL) AS linked FROM kernels k JOIN runs r ON r.id = k.run_id "
            f"WHERE r.name = '{path.split('/')[-1].split('.')[0]}'",
            "--json",
        ).json()
        assert rows[0]["lost"] == 0 and rows[0]["linked"] > 1000


REFERENCE = SHARED_TRACES.parent.parent / "tools" / "reference_breakdown.py"


def _reference(folder: Path, tmp_path: Path) -> dict:
    if not REFERENCE.exists():
        pytest.skip("../shared/tools/reference_breakdown.py is absent")
    out = tmp_path / "ref.json"
    subprocess.run([sys.executable, str(REFERENCE), str(folder), str(out)], check=True, capture_output=True)
    return json.loads(out.read_text())


def _reference_run(folder: Path, tmp_path: Path) -> dict:
    """The folder ingested as one run (``gpuscope ingest`` takes sub-folders too), from the
    reference script run on the folder and on each sub-folder: its per-trace figures, summed
    under design.md §4.2's rule (a capture-only trace beside one that launches graphs is left
    out). For a folder without sub-folders this is the script's own ``_run``."""
    traces: dict[str, dict] = {}
    dirs = sorted({p.parent for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz"))})
    for i, d in enumerate(dirs):
        sub = tmp_path / f"ref{i}"
        sub.mkdir()
        for name, r in _reference(d, sub).items():
            if name != "_run":
                traces[str((d / name).relative_to(folder))] = r
    replay = any(r["launches_graphs"] for r in traces.values())
    counted = {n: r for n, r in traces.items() if not (replay and r["capture_only"])}
    run = {k: sum(r[k] for r in counted.values()) for k in ("compute", "communication", "memory", "idle")}
    run["excluded"] = sorted(n for n in traces if n not in counted)
    return run


@pytest.mark.parametrize("folder", ["hta", "tracelens", "tracelens/qwen1.5-0.5b-chat", "tracelens/vllm_decode_cudagraph"])
def test_every_shared_trace_agrees_with_the_reference_script(folder: str, db, tmp_path: Path) -> None:
    """Each trace alone, and the folder as one run (excluded traces included), against
    reference_breakdown.py run now."""
    path = shared_trace(folder)
    ref = _reference(path, tmp_path)
    for name, want in ref.items():
        if name == "_run" or not want.get("gpu_events"):
            continue
        doc = run_cli("analyze", path / name, "--json").json()
        for key in ("compute", "communication", "memory"):
            assert doc["time_us"][key] == pytest.approx(want[key], rel=1e-9, abs=0.002), (name, key)
        # the script sums absolute float timestamps: its idle carries float rounding
        assert doc["time_us"]["idle"] == pytest.approx(want["idle"], rel=5e-4, abs=0.05), name
        assert doc["excluded_traces"] == []  # alone, a capture trace is analyzed like any other
    want = _reference_run(path, tmp_path)
    if not any(p.is_dir() for p in path.iterdir()):
        assert want == ref["_run"]  # a flat folder: exactly the script's own run
    r = run_cli("analyze", path, "--json")
    assert r.code == 0, r.err
    run = r.json()
    for key in ("compute", "communication", "memory"):
        assert run["time_us"][key] == pytest.approx(want[key], rel=1e-9, abs=0.002), key
    assert run["time_us"]["idle"] == pytest.approx(want["idle"], rel=5e-4, abs=0.05)
    assert sorted(str(Path(e["path"]).relative_to(path)) for e in run["excluded_traces"]) == want["excluded"]
    assert all(e["reason"] for e in run["excluded_traces"])
    assert sum(run["roofline_us"].values()) == pytest.approx(run["time_us"]["compute"], abs=1e-6)


def test_graph_capture_trace_beside_its_replay_is_not_counted(db) -> None:
    folder = shared_trace("tracelens/vllm_decode_cudagraph")
    doc = run_cli("analyze", folder, "--json").json()
    t = doc["time_us"]
    assert t["compute"] == pytest.approx(10674.517, abs=0.002) and t["memory"] == pytest.approx(43.191, abs=0.002)
    assert t["idle"] == pytest.approx(25.473, abs=0.05)  # was 57,792 µs with the capture trace counted
    (ex,) = doc["excluded_traces"]
    assert ex["path"].endswith("graph_capture_rank_0.pt.trace.json.gz") and "captures" in ex["reason"]
    assert sum(doc["roofline_us"].values()) == pytest.approx(t["compute"], abs=1e-6)
    assert sum(k["total_us"] for k in doc["kernels"]) == pytest.approx(t["compute"] + t["memory"], abs=0.01)
    # the replayed kernels still reach the ops that captured them
    assert doc["counts"]["graph_kernels_mapped_to_ops"] > 0
    assert not any("keeping it busy" in a.get("text", str(a)) for a in doc["advice"])
    text = run_cli("analyze").out
    assert "not counted: trace 0 (graph_capture_rank_0.pt.trace.json.gz)" in text


def test_capture_trace_alone_is_analyzed_like_any_other(db) -> None:
    doc = run_cli("analyze", shared_trace(
        "tracelens/vllm_decode_cudagraph/graph_capture_rank_0.pt.trace.json.gz"), "--json").json()
    assert doc["excluded_traces"] == [] and doc["time_us"]["idle"] == pytest.approx(57766.588, abs=0.05)


def test_custom_collectives_are_communication_in_category_and_family(db) -> None:
    from gpuscope.analyzers.families import kernel_family

    doc = run_cli("analyze", shared_trace("tracelens/b200_eager.json.gz"), "--json").json()
    multimem = [k for k in doc["kernels"] if "multimem" in k["name"]]
    assert multimem and all(k["category"] == "communication" for k in multimem)
    rows = run_cli("sql", "SELECT DISTINCT name, category FROM kernels WHERE kind = 'kernel'", "--json").json()
    for r in rows:  # one definition: the category and the family never disagree about communication
        assert (r["category"] == "communication") == (kernel_family(r["name"]).family == "communication"), r


def test_stores_written_before_get_the_new_category(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "old.duckdb"
    assert run_cli("ingest", shared_trace("tracelens/b200_eager.json.gz"), "--db", db, "-q").code == 0
    con = duckdb.connect(str(db))
    con.execute("UPDATE kernels SET category = 'compute' WHERE name ILIKE '%multimem%'")  # as schema 3 stored it
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    doc = run_cli("analyze", "--db", db, "--json").json()
    assert doc["time_us"]["communication"] == pytest.approx(2141.501, abs=0.002)


def test_a_store_of_the_current_schema_with_the_old_category_is_analyzed_by_the_one_definition(tmp_path: Path) -> None:
    """A schema-4 store ingested before the collectives of inference stacks counted as
    communication (or edited by hand) holds ``kernels.category = 'compute'`` for them: analyze
    derives the category from the one definition, so no migration is needed for it."""
    import duckdb

    db = tmp_path / "old.duckdb"
    assert run_cli("ingest", shared_trace("tracelens/b200_eager.json.gz"), "--db", db, "-q").code == 0
    con = duckdb.connect(str(db))
    con.execute("UPDATE kernels SET category = 'compute' WHERE name ILIKE '%multimem%'")
    con.close()
    doc = run_cli("analyze", "--db", db, "--json").json()
    assert doc["time_us"]["communication"] == pytest.approx(2141.501, abs=0.002)
    assert doc["time_us"]["compute"] == pytest.approx(8721.415, abs=0.002)
    multimem = [k for k in doc["kernels"] if "multimem" in k["name"]]
    assert multimem and all(k["category"] == "communication" and k["family"] == "communication" for k in multimem)


def _capture_and_replay(tmp_path: Path, capture_launches_inside: bool, replay_kernels: bool) -> Path:
    """A capture trace (a graph captured between *StreamBeginCapture and *StreamEndCapture, and
    two kernels 10 ms apart) beside a replay trace (a cudaGraphLaunch)."""
    folder = tmp_path / "run"
    folder.mkdir()
    capture = [
        runtime("cudaStreamBeginCapture", 100.0, 2.0, corr=1),
        runtime("cudaStreamEndCapture", 200.0, 2.0, corr=3),
        kernel("warmup_kernel", 0.0, 5.0, corr=10), kernel("warmup_kernel", 10_000.0, 5.0, corr=11),
    ]
    if capture_launches_inside:
        launch = runtime("cudaLaunchKernel", 150.0, 3.0, corr=2)
        launch["args"]["kernel"] = "graph_kernel"
        capture.append(launch)
    replay = [runtime("cudaGraphLaunch", 0.0, 5.0, corr=20), kernel("plain_kernel", 100.0, 10.0)]
    if replay_kernels:
        replay += [kernel("graph_kernel", 10.0, 20.0, corr=20), kernel("graph_kernel", 30.0, 20.0, corr=20)]
    write_trace(folder / "capture.json", capture)
    write_trace(folder / "replay.json", replay)
    return folder


@pytest.mark.parametrize("capture_launches_inside, replay_kernels", [
    (False, True),  # the capture recorded no kernel launch (it captured copies, say)
    (True, False),  # the replay trace's graph kernels fell outside the profiler window
])
def test_capture_and_launch_are_decided_by_the_event_names(tmp_path: Path, db, capture_launches_inside: bool,
                                                          replay_kernels: bool) -> None:
    """design.md §4.2: a trace captures when it has a *StreamBeginCapture event and launches
    graphs when it has a *GraphLaunch event, whatever kernels made it into the trace."""
    folder = _capture_and_replay(tmp_path, capture_launches_inside, replay_kernels)
    doc = run_cli("analyze", folder, "--json").json()
    assert [Path(e["path"]).name for e in doc["excluded_traces"]] == ["capture.json"]
    assert doc["time_us"]["idle"] == pytest.approx(50.0 if replay_kernels else 0.0)  # not the 10 ms of capture
    assert "warmup_kernel" not in {k["name"] for k in doc["kernels"]}
    text = run_cli("analyze").out
    assert "not counted: trace 0 (capture.json)" in text
