"""One home per job (issue 29): ``runs.info`` typed (:mod:`gpuscope.store.run_info`), a run's
lifecycle owned by the store's run API and driven by one orchestrator per run (sinks given a
run id write samples and nothing else), and ``gpuscope run``'s summary a dataclass that becomes
JSON once."""
from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest
from conftest import fill
from test_import_rules import MODULES, REPO

from gpuscope import store
from gpuscope.store import runs
from gpuscope.store.run_info import OwnerProcess, RunInfo, SamplerProcess


# -- runs.info, typed ----------------------------------------------------------------------------

def _full_info() -> RunInfo:
    return RunInfo(sampler=SamplerProcess(pid=41, interval_s=0.1),
                   vendors=[{"vendor": "nvidia", "available": True, "reason": None}],
                   owner=OwnerProcess(pid=42, host="node-1"), run_dir="/tmp/r/1-x", profile={"delay_s": 5.0},
                   ingest={"skipped": {"bad_ts": 2}, "ignored": {}, "linked": {"kernels_with_op": 7}},
                   notes=["one", "two"], inputs_digest="abc123")


def test_run_info_round_trips_through_its_json() -> None:
    info = _full_info()
    assert RunInfo.from_json(info.to_json()) == info
    # the stored document: schema order, only the fields set, the nested objects as plain objects
    assert list(json.loads(info.to_json())) == ["sampler", "vendors", "owner", "run_dir", "profile", "ingest",
                                                "notes", "inputs_digest"]
    assert json.loads(info.to_json())["owner"] == {"pid": 42, "host": "node-1"}
    assert RunInfo(notes=["x"]).to_dict() == {"notes": ["x"]}


@pytest.mark.parametrize("text", [None, "", "not json", "[1, 2]", "42", "null"])
def test_stored_text_that_is_no_object_reads_as_an_empty_document(text: str | None) -> None:
    assert RunInfo.from_json(text) == RunInfo()
    assert RunInfo.from_json(text).recorder is None


def test_an_old_stores_document_keeps_what_the_schema_does_not_know() -> None:
    """Unknown keys, and known keys holding a value of another type, are kept as they were;
    keys that are missing read as None; a merge neither loses nor duplicates them."""
    old = {"sampler": {"pid": 7, "cpu": "x"}, "owner": "someone", "notes": "not a list", "legacy": {"a": 1}}
    info = RunInfo.from_json(json.dumps(old))
    assert info.sampler == SamplerProcess(pid=7, interval_s=None, extra={"cpu": "x"})
    assert info.owner is None and info.notes is None and info.vendors is None and info.inputs_digest is None
    assert info.extra == {"owner": "someone", "notes": "not a list", "legacy": {"a": 1}}
    assert json.loads(info.to_json()) == old  # rewritten, nothing lost
    merged = info.merged(RunInfo(owner=OwnerProcess(pid=9)), append_notes=["new"])
    doc = json.loads(merged.to_json())
    # the typed owner and notes replace the odd ones; the unknown key and the sampler's extra stay
    assert doc == {"sampler": {"pid": 7, "cpu": "x"}, "owner": {"pid": 9}, "notes": ["new"], "legacy": {"a": 1}}
    # a pid that is not an integer names no process: such a run's recorder is not alive
    assert RunInfo.from_dict({"owner": {"pid": "12"}}).recorder == OwnerProcess(pid=None, extra={"pid": "12"})
    assert RunInfo.from_dict({"owner": {"pid": True}}).owner.pid is None  # a bool is no pid


def test_merge_replaces_the_fields_set_and_appends_notes() -> None:
    base = RunInfo(sampler=SamplerProcess(pid=1, interval_s=0.5), notes=["a"], inputs_digest="d")
    out = base.merged(RunInfo(ingest={"skipped": {}}, inputs_digest="e"), append_notes=["b", "c"])
    assert out.sampler == base.sampler and out.ingest == {"skipped": {}} and out.inputs_digest == "e"
    assert out.notes == ["a", "b", "c"]
    assert base.notes == ["a"] and base.inputs_digest == "d"  # the original is left as it was


def test_the_recorder_is_the_owner_else_the_sampler() -> None:
    assert RunInfo.from_dict({"owner": {"pid": 3}, "sampler": {"pid": 4}}).recorder.pid == 3
    assert RunInfo.from_dict({"owner": {}, "sampler": {"pid": 4}}).recorder.pid == 4  # an empty owner names nobody


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_runs_read_old_documents(db: Path) -> None:
    """The stale-run check reads each document through the schema: an old sampler-only
    document, an owner on another host, and text that is no JSON object."""
    con = store.connect(db)
    try:
        dead, me = _dead_pid(), os.getpid()
        ids = {}
        for label, info in [("dead sampler", {"sampler": {"pid": dead, "interval_s": 0.1}}),
                            ("live sampler, empty owner", {"owner": {}, "sampler": {"pid": me}}),
                            ("dead pid, other host", {"owner": {"pid": dead, "host": "elsewhere.invalid"}}),
                            ("odd pid", {"owner": {"pid": "x"}})]:
            ids[label] = runs.begin_recording(con, name=label, source="run", started_ns=1, command=None, info=info)
        con.execute("UPDATE runs SET info = 'not json' WHERE id = ?", [ids["odd pid"]])  # another tool's write
        assert set(runs.stale_runs(con)) == {ids["dead sampler"], ids["odd pid"]}
    finally:
        con.close()


def test_merge_info_over_an_old_document_in_the_store(db: Path) -> None:
    con = store.connect(db)
    try:
        rid = runs.begin_recording(con, name="r", source="run", started_ns=1, command=None,
                                   info={"owner": {"pid": os.getpid()}, "from_v1": [1, 2]})
        out = runs.merge_info(con, rid, RunInfo(run_dir="/x"), append_notes=["n1"])
        assert out == runs.read_info(con, rid)
        assert json.loads(con.execute("SELECT info FROM runs WHERE id = ?", [rid]).fetchone()[0]) == {
            "owner": {"pid": os.getpid()}, "run_dir": "/x", "notes": ["n1"], "from_v1": [1, 2]}
        runs.finish(con, rid, "complete", 5, notes=["n2"])
        assert runs.read_info(con, rid).notes == ["n1", "n2"]
        assert con.execute("SELECT status, ended_ns FROM runs WHERE id = ?", [rid]).fetchone() == ("complete", 5)
    finally:
        con.close()


# -- the lifecycle: one orchestrator, sinks write samples ------------------------------------------

def test_a_sink_given_a_run_id_never_touches_the_run(db: Path) -> None:
    """The orchestrator creates the run, the sink writes samples under it, the orchestrator
    adds what the sampler found and finishes it: when the sampler has stopped, the run's row
    is still exactly what the orchestrator wrote (a sink that owned its run would have ended it)."""
    from gpuscope.collectors import ReplayCollector
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink
    from gpuscope.store.sampled_run import SampledRun

    from conftest import FIXTURES

    run = SampledRun.begin(db, name="orchestrated", source="run", command=["python", "x.py"], interval_s=0.01,
                           host="h")
    sink = StoreSink(db, run_id=run.run_id, flush_s=0.0)
    sampler = Sampler([ReplayCollector(FIXTURES / "recordings" / "synthetic_h100_a100.jsonl", realtime=False)],
                      [sink], interval_s=0.01, max_ticks=5)
    sampler.start()
    vendors = [v.to_dict() for v in sampler.vendors]
    run.started(sampler.stats.started_ns, vendors)
    sampler.wait(60)
    st = sampler.stop()
    assert st.rows > 0 and sink.rows_written == st.rows and sink.missing_note is None
    expected = RunInfo(sampler=SamplerProcess(pid=os.getpid(), interval_s=0.01),
                       owner=OwnerProcess(pid=os.getpid(), host="h"), vendors=vendors)
    con = store.connect(db, read_only=True)
    try:  # the sink's close left the run as the orchestrator wrote it: recording, no end, its info
        row = con.execute("SELECT status, started_ns, ended_ns, exit_code, info FROM runs").fetchone()
    finally:
        con.close()
    assert row == ("recording", st.started_ns, None, None, expected.to_json())
    run.finish("complete", st.ended_ns)
    con = store.connect(db, read_only=True)
    try:
        status, ended, info = con.execute("SELECT status, ended_ns, info FROM runs").fetchone()
        assert (status, ended) == ("complete", st.ended_ns)
        info = RunInfo.from_json(info)
        assert info.owner == OwnerProcess(pid=os.getpid(), host="h") and info.sampler.interval_s == 0.01
        assert [v["vendor"] for v in info.vendors] == ["replay"]
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == st.rows
    finally:
        con.close()


def test_the_orchestrator_writes_the_note_of_what_its_sink_could_not_store(small_fs: Path) -> None:
    """The disk fills under a sink given a run id: the sink says what is missing in
    ``missing_note`` and leaves the run alone; its orchestrator finishes the run with the note."""
    from gpuscope.collectors.base import DeviceInfo, Sample
    from gpuscope.sinks import StoreSink
    from gpuscope.sinks.base import SampleBatch, SamplerInfo, SamplerStats
    from gpuscope.store.sampled_run import SampledRun

    db = small_fs / "s.duckdb"
    run = SampledRun.begin(db, name="full", source="run", command=None, interval_s=0.1, host=None)
    sink = StoreSink(db, run_id=run.run_id, flush_s=0.0, close_retry_s=0.2, report=lambda line: None)
    sink.start(SamplerInfo(0.1, time.time_ns(), [], [DeviceInfo(key="gpu0", vendor="nvidia", index=0)]))
    t0 = time.time_ns()
    room = fill(small_fs)
    sink.write(SampleBatch([(i, [Sample("gpu0", t0 + i * 1000, {"power_w": 100.0})]) for i in range(30)]))
    sink.close(SamplerStats(interval_s=0.1, rows=30))
    assert sink.rows_not_stored == 30
    assert sink.missing_note is not None and "30 samples were not stored" in sink.missing_note
    os.remove(room)
    con = store.connect(db, read_only=True)
    try:  # the sink wrote nothing of the run: neither the note nor an end
        assert con.execute("SELECT status, ended_ns, info FROM runs").fetchone()[:2] == ("recording", None)
        assert RunInfo.from_json(con.execute("SELECT info FROM runs").fetchone()[0]).notes is None
    finally:
        con.close()
    run.finish("complete", time.time_ns(), notes=[sink.missing_note])
    con = store.connect(db, read_only=True)
    try:
        status, info = con.execute("SELECT status, info FROM runs").fetchone()
    finally:
        con.close()
    assert status == "complete" and RunInfo.from_json(info).notes == [sink.missing_note]


#: The run API's functions that write a run (the lifecycle): who may call them.
_LIFECYCLE_WRITES = {"begin_recording", "add_ingested", "merge_info", "finish", "set_started", "set_ended",
                     "recover_stale_runs", "begin"}
#: The orchestrators (and the run API's own modules).
_ORCHESTRATORS = {"gpuscope.run.wrapper", "gpuscope.monitor.loop", "gpuscope.ingest.write", "gpuscope.store.runs",
                  "gpuscope.store.sampled_run", "gpuscope.store.connection",
                  "gpuscope.run.pending"}  # (stores a run `gpuscope run` kept in its run folder)
#: A store sink given no run id stands in for an orchestrator, in these two methods only.
_SINK_OWN_RUN = {"_begin_own_run", "_end_own_run"}


def _lifecycle_calls(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, function called, enclosing function) of each call of a lifecycle writer through
    a module or class named ``runs``, ``store_runs`` or ``SampledRun``/a ``SampledRun`` handle."""
    tree = ast.parse(path.read_text())
    out: list[tuple[int, str, str | None]] = []

    def visit(node: ast.AST, fn: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr in _LIFECYCLE_WRITES and isinstance(child.func.value, ast.Name) \
                    and child.func.value.id in ("runs", "store_runs", "SampledRun"):
                out.append((child.lineno, child.func.attr, fn))
            visit(child, inner)

    visit(tree, None)
    return out


def test_only_the_orchestrators_drive_a_runs_lifecycle() -> None:
    """The run API (create, add info, finish) is called by ``gpuscope run``'s wrapper, the
    monitor's loop and ingest; a sink only for a run of its own (given no run id)."""
    bad = []
    for m, path in MODULES.items():
        if m in _ORCHESTRATORS:
            continue
        for line, called, fn in _lifecycle_calls(path):
            if m == "gpuscope.sinks.store" and fn in _SINK_OWN_RUN:
                continue
            bad.append(f"{path.relative_to(REPO)}:{line} calls {called} (in {fn})")
    assert not bad, "\n".join(bad)
    # the check sees what it forbids
    assert any(c[1] == "finish" and c[2] == "_end_own_run" for c in _lifecycle_calls(MODULES["gpuscope.sinks.store"]))
    assert any(c[1] == "begin" for c in _lifecycle_calls(MODULES["gpuscope.monitor.loop"]))


def test_the_orchestrators_hand_their_sinks_the_run_id() -> None:
    """Every store sink the product builds is given the run it writes under."""
    built = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "StoreSink":
                built.append((m, node.lineno, {k.arg for k in node.keywords}))
    assert {m for m, _, _ in built} >= {"gpuscope.run.wrapper", "gpuscope.monitor.loop"}
    assert all("run_id" in kw for _, _, kw in built), built


# -- the run summary ----------------------------------------------------------------------------------

def test_the_run_summary_becomes_the_same_document_as_before() -> None:
    """The keys, their order and the optional ones, byte for byte as the dict the wrapper built."""
    from gpuscope.run.summary import Interruption, ProfilerSummary, RunSummary

    s = RunSummary(run_id=3, exit_code=130, run_dir="/r/3-x", sampler={"ticks": 4}, replay=None,
                   profiler=ProfilerSummary(True, ["a"]), traces=["/r/t.json"], windows=[{"pid": 1}], marks=2,
                   interrupted=Interruption("SIGINT", 99))
    legacy = {"run_id": 3, "exit_code": 130, "run_dir": "/r/3-x", "sampler": {"ticks": 4}, "replay": None,
              "traces": ["/r/t.json"], "windows": [{"pid": 1}], "marks": 2, "ingest_error": None, "store_error": None,
              "interrupted": {"signal": "SIGINT", "ts_ns": 99}, "profiler": {"enabled": True, "notes": ["a"]}}
    assert json.dumps(s.to_json()) == json.dumps(legacy)  # not analyzed: no analysis, no telemetry, no otlp
    s.analysis, s.telemetry = {"schema": "x"}, {"gpus": []}
    s.profiler.notes.append("b")
    s.otlp = {"spans": 1}
    legacy["profiler"]["notes"].append("b")
    legacy.update(analysis={"schema": "x"}, telemetry={"gpus": []}, otlp={"spans": 1})
    assert json.dumps(s.to_json()) == json.dumps(legacy)


def test_the_window_note_reads_the_summary_as_its_document() -> None:
    """``window_missed_gpu_note`` says the same of the record as of its JSON document."""
    from gpuscope.run.summary import ProfilerSummary, RunSummary
    from gpuscope.run.wrapper import ProfileConfig, window_missed_gpu_note

    profile = ProfileConfig(delay_s=2, duration_s=1)
    s = RunSummary(run_id=1, exit_code=0, run_dir="/r", sampler={}, replay=None, profiler=ProfilerSummary(True),
                   traces=["t.json"], windows=[{"pid": 1}], analysis={"gpu_activity": False},
                   telemetry={"gpus": [{"key": "gpu0"}]})
    note = window_missed_gpu_note(profile, s)
    assert note is not None and "(2-3 s after the program imported torch)" in note
    assert note == window_missed_gpu_note(profile, s.to_json())
    s.analysis = {"gpu_activity": True}
    assert window_missed_gpu_note(profile, s) is None
