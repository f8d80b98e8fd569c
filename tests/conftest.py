"""Shared test helpers: the CLI run in-process, the shared real traces, small trace builders."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# The tests start hundreds of `python -m gpuscope` children: where the environment forbids bytecode
# files (PYTHONDONTWRITEBYTECODE, set in some containers) each of them compiled gpuscope from source
# and each xdist worker rewrote every test module again (24 CPU-s of collection per worker against
# 10 with the files cached, bench/README.md "Test suite times"). The files go to __pycache__
# folders, which git ignores.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The tests send Ctrl-C (SIGINT) to programs as a terminal would. Started as a background job of a
# script, pytest and every process under it would have SIGINT ignored (POSIX shells do that
# without job control), and `gpuscope run` passes that on to its program as it should: set here,
# before the xdist workers start, so that they and their children get Python's default handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
FIXTURES = REPO / "fixtures"


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


# Tests that cost the most (seconds on a loaded 2-core machine, measured with `--durations`
# under `-n 2`; bench/README.md, "The slowest tests", says what each costs and why): marked
# `slow` here so that the README's command (`-m "not slow"`) answers in minutes while .ci/run
# still runs them. Each module but test_ingest_properties and test_concurrency (one test each)
# keeps fast tests in the README's set. Keyed by node id without the parameters: every
# parameter of a listed test is slow.
SLOW_TESTS: dict[str, float] = {
    # ingest, export in both formats, ingest twice and compare, per shared trace (issue 33); up to 25 s each
    "tests/test_timeline_roundtrip.py::test_every_shared_trace_round_trips_field_by_field": 25.3,
    "tests/test_fuzz_ingest.py::test_two_hundred_mutated_traces_end_in_exit_0_or_2": 52.9,
    "tests/test_scale.py::test_a_large_trace_parsed_in_batches_gives_the_run_a_whole_read_gives": 28.6,
    "tests/test_run.py::test_workers_each_leave_a_trace": 33.8,
    "tests/test_reliability.py::test_kill_9_of_ingest_at_random_points_leaves_a_usable_store": 18.0,
    "tests/test_sampler.py::test_live_buffer_snapshots_are_consistent_while_the_sampler_writes": 17.8,
    "tests/test_scale.py::test_rank_files_read_several_at_once_give_the_run_one_thread_gives": 14.9,
    "tests/test_profile_requests.py::test_busy_then_gpuscope_profile_windows_in_a_cpu_torch_program": 14.9,
    "tests/test_gzip_bomb.py::test_the_flag_raises_the_limit": 14.5,
    "tests/test_gzip_bomb.py::test_past_the_floor_a_real_ratio_passes_and_a_lowered_limit_refuses": 14.5,
    "tests/test_run.py::test_example_workload_run_records_windows_marks_and_tokens": 13.4,
    "tests/test_run.py::test_no_window_opens_once_exit_has_begun": 12.7,
    "tests/test_run.py::test_ctrl_c_twice_during_a_window_writes_it_and_opens_no_other": 11.0,
    "tests/test_store_faults.py::test_monitor_keeps_serving_through_a_full_disk_and_retries": 10.3,
    "tests/test_redact.py::test_planted_secrets_reach_no_export_report_or_otlp_log": 9.8,
    "tests/test_gpu_acceptance.py::test_devices_step_on_a_driver_whose_nvidia_smi_lacks_fields": 9.3,
    "tests/test_window_triggers.py::test_a_window_due_inside_an_import_opens_after_it": 8.8,
    "tests/test_hostile_traces.py::test_event_mutations_never_reach_an_internal_error": 8.4,
    "tests/test_gpu_acceptance.py::test_offline_install_of_this_checkout_into_a_private_folder": 8.4,
    "tests/test_run.py::test_run_directories_are_never_reused": 8.0,
    "tests/test_run.py::test_kill_9_of_gpuscope_leaves_an_incomplete_run_that_opens": 7.9,
    "tests/test_store_faults.py::test_run_on_a_disk_that_stays_full_returns_the_programs_exit_code": 7.4,
    "tests/test_overlap.py::test_hta_a100_nccl_overlap_matches_hta_definition": 7.1,
    "tests/test_gpu_acceptance.py::test_hf_generate_step_is_skipped_with_the_reason_without_transformers": 7.1,
    "tests/test_overlap.py::test_overlap_agrees_with_hta_itself": 7.0,
    "tests/test_run.py::test_profile_api_outside_a_run_writes_a_trace_and_mark_is_a_no_op": 6.9,
    "tests/test_hostile_traces.py::test_header_mutations_never_reach_an_internal_error": 6.3,
    "tests/test_run.py::test_replayed_telemetry_gives_energy_per_token_cross_checked": 6.2,
    "tests/test_store_faults.py::test_run_rides_out_a_full_disk_and_stores_the_held_samples_when_space_returns": 6.0,
    # 40 generated traces, each ingested twice and analyzed (0.6 s of CPU each time): the most
    # costly test of the README's set once the CLI ran in-process everywhere (bench/README.md)
    "tests/test_ingest_properties.py::test_ingest_invariants_hold_for_any_trace": 56.7,
    # every shared trace analyzed again beside reference_breakdown.py run now (26 s of CPU for the
    # four folders, half of test_breakdown_shared); the README's set keeps each trace's breakdown
    # against the script's recorded figures (test_time_breakdown_matches_reference)
    "tests/test_breakdown_shared.py::test_every_shared_trace_agrees_with_the_reference_script": 56.7,
    # a 14 s monitor with runs, ingests and readers beside it: one worker held 15 s or more
    # whatever the machine, 10 s of CPU in its child processes
    "tests/test_concurrency.py::test_monitor_runs_ingests_and_readers_share_a_store": 19.7,
    # session 16: the README's set still took 5 min 54 s on 2 cores (614 CPU-s: over the 5-minute
    # goal whatever the scheduling), so the next costliest by CPU seconds (test + its children,
    # measured per test with bytecode recompiled; wall on a loaded machine beside them) moved here;
    # every module keeps fast tests
    "tests/test_run.py::test_a_run_without_a_trace_says_why": 52.8,  # 12.0 CPU-s, 3 runs with torch
    "tests/test_costmodel_conv.py::test_backend_ops_equal_flop_counter": 39.3,  # 11.1 CPU-s, FlopCounterMode x22
    "tests/test_run.py::test_the_child_loads_the_bootstrap_under_one_name_and_nothing_heavy": 48.8,  # 8.8
    "tests/test_window_triggers.py::test_no_window_while_another_profiler_records_in_the_process": 8.4,  # 7.5
    "tests/test_gzip_bomb.py::test_bomb_refused_through_analyze_and_compare": 11.5,  # 6.0
    "tests/test_file_modes.py::test_profile_window_trace_is_owner_only": 30.9,  # 5.8
    "tests/test_adversarial_paths.py::test_a_killed_export_leaves_nothing_after_the_next": 41.7,  # 5.3
    "tests/test_bootstrap_faults.py::test_gpuscope_run_exits_with_the_programs_code_whatever_became_of_the_run_directory":
        33.2,  # 5.1
    "tests/test_run.py::test_window_export_is_gzipped_whole_or_not_at_all": 24.9,  # 5.1
    "tests/test_store_contention.py::test_two_runs_on_a_missing_store_both_run_and_are_both_stored": 17.5,  # 5.0
    "tests/test_costmodel_quantized.py::test_torch_quantized_mms_as_the_profiler_records_them": 15.0,  # 5.0
}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("[", 1)[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


def run_cli(*args: str) -> CliResult:
    """``gpuscope ARGS`` in this process; returns its exit code, stdout and stderr."""
    from gpuscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse --help / usage errors
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(autouse=True)
def _text_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees the width gpuscope gives a pipe or a file (120 columns), whoever runs it:
    pytest-xdist's workers inherit COLUMNS from the controller's terminal (80 in a plain shell),
    which cut the lines that tests read. A test that wants another width sets COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "120")


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh store path, also set as GPUSCOPE_DB."""
    path = tmp_path / "store.duckdb"
    monkeypatch.setenv("GPUSCOPE_DB", str(path))
    return path


def shared_trace(rel: str) -> Path:
    """A trace from ../shared/data/traces, or skip the test when that folder is absent."""
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace {rel} not available (../shared/data/traces is absent)")
    return path


def write_trace(path: Path, events: list[Any], gz: bool = False, **top: Any) -> Path:
    """Write a Kineto-style trace: ``{**top, "traceEvents": events}``."""
    doc = dict(top)
    doc["traceEvents"] = events
    data = json.dumps(doc, indent=1).encode()
    if gz or path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def file_digest(path: Path) -> str | None:
    """SHA-256 of the store file (and its WAL), None when absent: to show a store is unchanged."""
    if not path.exists():
        return None
    h = hashlib.sha256(path.read_bytes())
    wal = Path(str(path) + ".wal")
    if wal.exists():
        h.update(wal.read_bytes())
    return h.hexdigest()


def kernel(name: str, ts: float, dur: float, corr: int | None = None, device: int = 0, stream: int = 7,
           cat: str = "kernel", **args: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"device": device, "stream": stream}
    if corr is not None:
        a["correlation"] = corr
    a.update(args)
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def runtime(name: str, ts: float, dur: float, corr: int, ext: int | None = None, pid: int = 100,
            tid: int = 100, cat: str = "cuda_runtime") -> dict[str, Any]:
    a: dict[str, Any] = {"correlation": corr}
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


def cpu_op(name: str, ts: float, dur: float, ext: int, dims: Any = None, types: Any = None,
           pid: int = 100, tid: int = 100, cat: str = "cpu_op") -> dict[str, Any]:
    a: dict[str, Any] = {"External id": ext}
    if dims is not None:
        a["Input Dims"] = dims
    if types is not None:
        a["Input type"] = types
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


@pytest.fixture
def no_user_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's own spec files ($GPUSCOPE_SPECS, the XDG config file) out of a test."""
    monkeypatch.delenv("GPUSCOPE_SPECS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def specdb(no_user_specs: None) -> Any:
    """The spec database as shipped (no user overrides)."""
    from gpuscope.specs import load_specs

    return load_specs()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs for disk-full tests, unmounted after. Needs to mount (root with
    CAP_SYS_ADMIN, as in CI); skipped, saying why, elsewhere."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({m.stderr.strip() or 'not permitted'})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last block; the file to remove for room again."""
    path = folder / "fill"
    # unbuffered: a buffered file keeps what the last write could not place, and its close then
    # raises ENOSPC again (whether it does depends on how full the disk was, to the 64 KiB)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return path


def launch_trace(path: Path, n: int = 3000) -> Path:
    """A trace of ``n`` ops, each launching one kernel (op -> launch -> kernel linked by
    correlation and External id): a small ingest for tests and benches that need many."""
    events: list[Any] = []
    for i in range(n):
        t = i * 50.0
        events += [cpu_op("aten::mm", t, 20.0, ext=i + 1), runtime("cudaLaunchKernel", t + 2, 2.0, corr=i + 1, ext=i + 1),
                   kernel("k", t + 5, 10.0, corr=i + 1)]
    return write_trace(path, events)


def ingested_template(tmp_path_factory: pytest.TempPathFactory, events: list[Any], name: str = "r") -> Path:
    """A store holding one run ``name`` of ``events``, ingested once for a module (making a store
    is most of a small test's time); read-only: each test copies it (shutil.copyfile)."""
    d = tmp_path_factory.mktemp("template")
    trace = write_trace(d / "t.json", events)
    db = d / "store.duckdb"
    assert run_cli("ingest", trace, "--name", name, "-q", "--db", db).code == 0
    assert not Path(f"{db}.wal").exists()  # the whole store is the one file copied
    return db


def link_test_devices() -> list[Any]:
    """An H100 SXM (NVLink 450 GB/s), an MI300X (XGMI 448 GB/s) and a PCIe-only L40S: the GPUs
    the link-telemetry tests sample."""
    from gpuscope.collectors.base import DeviceInfo

    return [DeviceInfo(key="gpu0", vendor="nvidia", index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1",
                       spec_key="h100-sxm", kind="gpu"),
            DeviceInfo(key="gpu1", vendor="amd", index=1, name="AMD Instinct MI300X", uuid="GPU-2",
                       spec_key="mi300x", kind="gpu"),
            DeviceInfo(key="gpu2", vendor="nvidia", index=2, name="NVIDIA L40S", uuid="GPU-3",
                       spec_key="l40s", kind="gpu")]
