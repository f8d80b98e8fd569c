"""bench/gpu_acceptance.sh: one line and exit 2 without a GPU; a dry run on the fakes goes
through every step, keeps at most 8 small files; a step that hangs is cut at its limit while
the steps after it still run; without torch the steps that need it are skipped with the
reason; the offline install; and the pure parts (nvidia-smi comparison, field choice, the
sampler's cost, the recording check, the size guard)."""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_acceptance.sh"
FAKE_SMI = REPO / "tests" / "fakes" / "fake_nvidia_smi.py"
STEPS = ["pytest_gpu", "devices", "record", "readme_run", "calibrate", "overhead", "compile_decode", "cudnn_sdpa",
         "hf_generate", "import_window", "spill_ingest", "two_runs", "ncu", "strict_json"]
HF_EXAMPLE = REPO / "examples" / "hf_generate.py"


def _has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _acceptance() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_acceptance", REPO / "bench" / "gpu_acceptance.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = mod
    spec.loader.exec_module(mod)
    return mod


acc = _acceptance()


def _env(**kw: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_ACCEPTANCE", "FAKE_"))}
    env.pop("OUT", None)
    # the interpreter running these tests, not the first python3 on PATH (a venv used by its
    # path, not activated, is not on PATH): the script honours PYTHON
    env["PYTHON"] = sys.executable
    env.update(kw)
    return env


def _script(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


def _no_gpu_here() -> bool:
    return not (Path("/dev/nvidia0").exists() or Path("/dev/kfd").exists())


# -- the script ---------------------------------------------------------------------------------

@pytest.mark.skipif(not _no_gpu_here(), reason="this machine has a GPU")
def test_without_a_gpu_exits_2_with_one_line(tmp_path: Path) -> None:
    env = _env(PATH="/usr/bin:/bin")  # no nvidia-smi / amd-smi
    t0 = time.monotonic()
    p = _script(str(tmp_path / "out"), env=env, timeout=30)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "no NVIDIA or AMD GPU" in p.stderr
    assert p.stdout == "" and time.monotonic() - t0 < 5
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, fragment", [(["--frobnicate", "OUT"], "unknown option --frobnicate"),
                                            (["--dry-run", "--steps", "record,nope", "OUT"], "unknown step nope"),
                                            (["--dry-run", "OUT", "--steps"], "--steps needs")])
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    p = _script(*(str(tmp_path / "out") if a == "OUT" else a for a in args), env=_env(), timeout=60)
    assert p.returncode == 2 and fragment in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.slow
def test_dry_run_goes_through_every_step_and_every_step_passes(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    # the dry run by its environment variable, the folder by $OUT
    p = _script(env=_env(GPUSCOPE_ACCEPTANCE_DRY_RUN="1", OUT=str(out)), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] is True and summary["result"] == "pass"
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == STEPS
    # hf_generate needs transformers: without it, skipped with the import error (not a failure)
    hf = steps.pop("hf_generate")
    if _has_transformers():
        assert hf["status"] == "pass", hf
    else:
        assert hf["status"] == "skipped" and "transformers is not importable" in hf["detail"], hf
    assert all(s["status"] == "pass" for s in steps.values()), [(s["name"], s["status"], s["detail"]) for s in steps.values()]
    assert summary["environment"]["torch"]["version"] and summary["environment"]["nvidia_smi"]

    files = sorted(f for f in out.rglob("*") if f.is_file())
    assert len(files) <= 8 and all(f.stat().st_size < 4 << 20 for f in files), [(f.name, f.stat().st_size) for f in files]
    assert {f.name for f in files} == set(acc.OUTPUT_FILES)
    md = (out / "summary.md").read_text()
    assert all(f"| {name} | pass |" in md for name in steps) and md.startswith("# gpuscope GPU acceptance (dry run")

    # devices: every value of the recorded H100 beside the fake nvidia-smi, memory by the v2 query
    compare = json.loads((out / "compare.json").read_text())
    used = next(c for c in compare["comparison"] if c["field"] == "memory.used" and c["gpu"] == "gpu0")
    assert used["agrees"] and used["nvidia_smi"] == 1.0 and used["gpuscope"] == [1.0, 1.0]
    assert {c["metric"] for c in compare["comparison"] if c.get("not_compared")} >= {"energy_j", "sm_active"}
    assert steps["devices"]["numbers"]["compared"] >= 2 * 14
    # record: a recording that passes the fixture check, taken under the (CPU) load
    rec = acc.check_recording(out / "recording.jsonl.gz", seconds=3)
    assert rec["problems"] == [] and rec["ticks"] >= 24 and steps["record"]["numbers"]["load"]
    # the README's command: a complete run with replayed GPU telemetry, analyze --json saved
    assert steps["readme_run"]["numbers"]["gpu_samples"] > 0 and steps["readme_run"]["numbers"]["ops"] > 0
    assert json.loads((out / "analyze.json").read_text())["ops"]
    assert json.loads((out / "calibrate.json").read_text())["results"]
    # overhead: ABBA pairs with an interval, the sampler ticking only in the rounds it was on
    overhead = json.loads((out / "overhead.json").read_text())
    assert overhead["pairs"] >= 6 and len(overhead["changes_pct"]) == overhead["pairs"] and overhead["ci_pct"]
    assert overhead["sampler"]["ticks_in_on_rounds"] > 0 and overhead["sampler"]["ticks_in_off_rounds"] <= 1
    assert overhead["sampler"]["devices"] == ["gpu0", "gpu1", "host"]  # the replayed recording's GPUs
    # the issue-30 workloads under run --profile-when busy: a complete run with its workload's line
    for name in ("compile_decode", "cudnn_sdpa"):
        n = steps[name]["numbers"]
        assert n["exit_code"] == 0 and n["workload"]["workload"] == name and n["run"]["status"] == "complete", n
        assert n["when"].startswith("busy") or "no --profile-when" in n["when"]
    assert steps["compile_decode"]["numbers"]["workload"]["graphs_compiled_while_measured"] == 0
    # a window due inside a 5 s import opened after it, with ops in it
    imp = steps["import_window"]["numbers"]
    assert imp["windows"] >= 1 and imp["window_after_import_end_s"] >= 0 and imp["ops"] > 0, imp
    # the big-init window's trace ingested again with --all-ops --threads 8: exit 0, nothing left
    spill = steps["spill_ingest"]["numbers"]["spill"]
    assert spill["exit"] == 0 and spill["left_in_temp"] == [] and spill["ops_loaded"] > 0
    # two runs at once on a missing store, three times: all six programs ran
    assert [r["program_ran"] for r in steps["two_runs"]["numbers"]["runs"]] == [True] * 6
    # every --json output of the run was parsed strictly, the NaN query among them
    strict = steps["strict_json"]["numbers"]
    assert strict["not_strict"] == [] and "sql --json (NaN, Infinity)" in strict["outputs"]
    assert strict["checked"] >= 12


@pytest.mark.slow
def test_a_hung_step_is_cut_and_later_steps_run_and_without_torch_its_steps_are_skipped(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    env = _env(GPUSCOPE_ACCEPTANCE_HANG_STEP="devices", GPUSCOPE_ACCEPTANCE_HANG_LIMIT_S="3",
               GPUSCOPE_ACCEPTANCE_DRY_NO_TORCH="1")
    t0 = time.monotonic()
    p = _script("--dry-run", "--steps", "devices,record,readme_run,calibrate,overhead", str(out), env=env)
    assert p.returncode == 1, p.stdout + p.stderr  # the hung step failed
    assert time.monotonic() - t0 < 90
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == STEPS[1:6]
    assert steps["devices"]["status"] == "fail" and "cut at its 3 s limit" in steps["devices"]["detail"]
    assert steps["devices"]["seconds"] < 15
    # the step after the hang ran: an idle recording, saying why there was no load
    assert steps["record"]["status"] == "pass", steps["record"]
    assert "IDLE: no torch" in steps["record"]["detail"] and steps["record"]["numbers"]["load"] is None
    for name in ("readme_run", "calibrate", "overhead"):
        assert steps[name]["status"] == "skipped" and "torch is not importable" in steps[name]["detail"], steps[name]
    assert summary["result"] == "fail" and "| devices | fail |" in (out / "summary.md").read_text()
    assert (out / "recording.jsonl.gz").is_file() and not (out / "analyze.json").exists()


def test_devices_step_on_a_driver_whose_nvidia_smi_lacks_fields(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    env = _env(FAKE_NVIDIA_SMI_MISSING="memory.reserved,power.draw.average")
    p = _script("--dry-run", "--steps", "devices", str(out), env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    compare = json.loads((out / "compare.json").read_text())
    assert set(compare["nvidia_smi"]["fields_missing_on_this_driver"]) == {"memory.reserved", "power.draw.average"}
    assert "memory.reserved" not in compare["nvidia_smi"]["query"]
    reserved = next(c for c in compare["comparison"] if c["metric"] == "mem_reserved_bytes" and c["gpu"] == "gpu0")
    assert reserved["not_compared"] == "this nvidia-smi has no such field"
    # power_w is still shown beside power.draw
    assert any(c["field"] == "power.draw" and c["gpu"] == "gpu0" and c["nvidia_smi"] == 100.89 for c in compare["comparison"])


def test_offline_install_of_this_checkout_into_a_private_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    env = _env(GPUSCOPE_ACCEPTANCE_REINSTALL="1", GPUSCOPE_ACCEPTANCE_INSTALL_ONLY="1", GPUSCOPE_WHEELS=str(wheels),
               TMPDIR=str(tmp_path), PIP_NO_INDEX="1")
    p = _script("--dry-run", env=env, timeout=240)
    assert p.returncode == 0, p.stderr
    site = Path(p.stdout.strip().splitlines()[-1])
    assert site == tmp_path / "gpuscope-acceptance-site"
    where = subprocess.run([sys.executable, "-c", "import gpuscope.cli, gpuscope.collectors as c; print(c.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=dict(env, PYTHONPATH=str(site)))
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(site), where.stderr

    (wheels / "duckdb-0.0.0-py3-none-any.whl").write_bytes(b"not a wheel")
    p = _script("--dry-run", env=env, timeout=240)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) >= 1
    assert p.stderr.strip().splitlines()[-1].startswith("gpu_acceptance: installing the wheels in")


# -- the fake nvidia-smi -------------------------------------------------------------------------

def _smi(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FAKE_SMI), *args], capture_output=True, text=True,
                          env=_env(**env), timeout=60)


def test_fake_nvidia_smi_prints_nvidia_smis_csv_shapes() -> None:
    p = _smi("--query-gpu=index,memory.used,power.draw,fan.speed,clocks_event_reasons.active", "--format=csv")
    header, row0 = p.stdout.splitlines()[:2]
    assert header == "index, memory.used [MiB], power.draw [W], fan.speed [%], clocks_event_reasons.active"
    assert row0 == "0, 1 MiB, 100.89 W, [N/A], 0x0000000000000001"
    p = _smi("--query-gpu=memory.reserved,temperature.memory", "--format=csv,noheader,nounits")
    assert p.stdout.splitlines()[0] == "454, 36"
    p = _smi("--query-gpu=memory.reserved", "--format=csv", FAKE_NVIDIA_SMI_MISSING="memory.reserved")
    assert p.returncode == 2 and 'Field "memory.reserved" is not a valid field to query.' in p.stdout


# -- the pure parts ------------------------------------------------------------------------------

def test_help_query_gpu_is_parsed_and_fields_a_driver_lacks_are_left_out() -> None:
    help_text = ('List of valid properties to query for the switch "--query-gpu=":\n\n'
                 '"index"\nZero based index of the GPU.\n\n"uuid"\nThe UUID, e.g. "GPU-xxx".\n\n'
                 '"clocks.current.sm" or "clocks.sm"\nCurrent frequency of SM clock.\n\n'
                 '"memory.used"\nTotal memory allocated by active contexts.\n\n'
                 '"clocks_throttle_reasons.active"\nBitmask of active clock throttle reasons.\n')
    valid = acc.parse_help_query_gpu(help_text)
    assert valid == {"index", "uuid", "clocks.current.sm", "clocks.sm", "memory.used", "clocks_throttle_reasons.active"}
    query, missing = acc.choose_smi_fields(valid)
    assert query == ["index", "uuid", "memory.used", "clocks.sm", "clocks_throttle_reasons.active"]
    assert {"memory.reserved", "power.draw.average", "name"} - {"name"} <= missing and "memory.used" not in missing
    # the fake's own help: every field, under the names it gives
    fake_valid = acc.parse_help_query_gpu(_smi("--help-query-gpu").stdout)
    assert acc.choose_smi_fields(fake_valid)[1] == set()


GPU0 = {"key": "gpu0", "vendor": "nvidia", "kind": "gpu", "index": 0, "uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3",
        "supported": ["mem_used_bytes", "mem_total_bytes", "sm_clock_mhz", "power_w", "sm_active", "throttle_reasons",
                      "gpu_util"],
        "unsupported": {"mem_temp_c": "Not Supported (NVML error 3)"}}
GPU1 = dict(GPU0, key="gpu1", index=1, uuid="GPU-b")


def _row(**kw: str) -> dict[str, str]:
    return {"index": "0", "uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3", **kw}


def test_comparison_agrees_within_the_two_readings_and_flags_what_differs() -> None:
    before = {"gpu0": {"mem_used_bytes": 453 * 2**20, "mem_total_bytes": 81559 * 2**20, "sm_clock_mhz": 345.0,
                       "power_w": 100.0, "sm_active": 0.0, "throttle_reasons": 1, "gpu_util": 0.0}}
    after = {"gpu0": dict(before["gpu0"], sm_clock_mhz=1980.0, throttle_reasons=0)}
    smi = [_row(**{"memory.used": "1", "memory.total": "81559", "clocks.sm": "1500", "power.draw.average": "101.50",
                   "temperature.memory": "36", "clocks_event_reasons.active": "0x0000000000000001",
                   "utilization.gpu": "[N/A]"})]
    comparison, bad = acc.compare_with_nvidia_smi([GPU0], before, after, smi)
    by_field = {c["field"]: c for c in comparison if c["gpu"] == "gpu0"}
    # v1-style "used" (reserved counted) against nvidia-smi's: the difference is named
    assert by_field["memory.used"]["agrees"] is False and by_field["memory.used"]["difference"] == 452.0
    assert any("memory.used" in b and "453" in b for b in bad)
    assert by_field["memory.total"]["agrees"]
    # the clock moved between the two readings; nvidia-smi read in between
    assert by_field["clocks.sm"]["agrees"] and by_field["clocks.sm"]["outside_readings_by"] == 0
    assert by_field["power.draw.average"]["agrees"]
    assert by_field["clocks_event_reasons.active"]["agrees"]  # equals the first reading
    # nvidia-smi reports a value gpuscope does not: a disagreement, with gpuscope's reason
    assert by_field["temperature.memory"]["agrees"] is False
    assert any("temperature.memory" in b and "Not Supported" in b for b in bad)
    # N/A on nvidia-smi's side only: noted, not a failure
    assert "agrees" not in by_field["utilization.gpu"] and "N/A" in by_field["utilization.gpu"]["note"]
    # what nvidia-smi has no field for is listed, not compared
    sm = next(c for c in comparison if c["metric"] == "sm_active")
    assert sm["not_compared"] == "nvidia-smi --query-gpu has no such field"
    assert by_field["name"]["agrees"] and by_field["uuid"]["agrees"]
    assert len(bad) == 2


def test_comparison_maps_gpus_by_uuid_and_checks_exact_masks_and_tolerances() -> None:
    before = {"gpu0": {"sm_clock_mhz": 1980.0, "throttle_reasons": 0}, "gpu1": {"sm_clock_mhz": 345.0, "throttle_reasons": 4}}
    after = {k: dict(v) for k, v in before.items()}
    # nvidia-smi lists gpu1 first; a mask that is neither reading; a clock 20 MHz off (within 30)
    smi = [_row(index="1", uuid="GPU-b", **{"clocks.sm": "365", "clocks_event_reasons.active": "0x0000000000000004"}),
           _row(**{"clocks.sm": "1980", "clocks_event_reasons.active": "0x0000000000000001"}),
           _row(index="2", uuid="GPU-c", **{"clocks.sm": "345"})]
    comparison, bad = acc.compare_with_nvidia_smi([GPU0, GPU1], before, after, smi)
    got = {(c["gpu"], c["field"]): c for c in comparison}
    assert got[("gpu1", "clocks.sm")]["agrees"] and got[("gpu1", "clocks.sm")]["outside_readings_by"] == 20
    assert got[("gpu1", "clocks_event_reasons.active")]["agrees"]
    assert got[("gpu0", "clocks_event_reasons.active")]["agrees"] is False
    assert sorted(bad) == sorted(["gpu0 clocks_event_reasons.active: gpuscope 0, nvidia-smi 1",
                                  "GPU 2 (GPU-c): nvidia-smi lists it, gpuscope does not"])
    # 50 MHz past the readings is past the tolerance
    smi[1]["clocks.sm"], smi[1]["clocks_event_reasons.active"] = "2030", "0x0"
    _, bad = acc.compare_with_nvidia_smi([GPU0, GPU1], before, after, smi[:2])
    assert bad == ["gpu0 clocks.sm: gpuscope 1980, nvidia-smi 2030"]


def test_torch_steps_need_a_torch_that_sees_the_gpu() -> None:
    cuda = {"version": "2.11.0+cu130", "cuda": "13.0", "hip": None, "gpu": True, "gpu_name": "NVIDIA H100 80GB HBM3"}
    assert acc.torch_verdict(cuda, "python3", dry=False) == (True, "")
    cpu = {"version": "2.13.0+cpu", "cuda": None, "hip": None, "gpu": False}
    assert acc.torch_verdict(cpu, "python3", dry=False) == (False, "torch 2.13.0+cpu (a CPU-only build) sees no GPU")
    assert acc.torch_verdict(cpu, "python3", dry=True) == (True, "")  # the dry run's "GPU" is the CPU
    broken = dict(cuda, gpu=False, gpu_error="RuntimeError: CUDA driver version is insufficient")
    ok, why = acc.torch_verdict(broken, "python3", dry=False)
    assert not ok and why == "torch 2.11.0+cu130 (CUDA 13.0) sees no GPU: RuntimeError: CUDA driver version is insufficient"
    ok, why = acc.torch_verdict({"error": "ModuleNotFoundError: No module named 'torch'"}, "/opt/py", dry=True)
    assert not ok and why.startswith("torch is not importable by /opt/py (ModuleNotFoundError")


def test_step_limits_fit_the_nine_minute_budget_with_the_install() -> None:
    # every step's limit, with about 15 s for the install and the probe, inside the 540 s budget
    assert sum(st.limit_s for st in acc._steps()) + 15 <= acc.TOTAL_BUDGET_S
    assert [st.name for st in acc._steps()] == STEPS


def test_strict_json_rejects_nan_and_the_infinities() -> None:
    assert acc.strict_loads('{"a": 1.5, "b": null}') == {"a": 1.5, "b": None}
    for bad in ('{"dram_bw_util_mean": NaN}', '[Infinity]', '{"x": -Infinity}'):
        with pytest.raises(ValueError, match="is not JSON"):
            acc.strict_loads(bad)


def test_overhead_problems_judge_pairs_pausing_and_the_goal() -> None:
    ok = {"pairs": 40, "ci_pct": [-0.2, 0.4], "goal_met": True, "goal_pct": 1.0,
          "sampler": {"ticks_in_on_rounds": 120, "ticks_in_off_rounds": 0}}
    assert acc.overhead_problems(ok, dry=False) == []
    # an upper end at 1.3 %: the goal is not met on the GPU; the dry run does not judge it
    high = dict(ok, ci_pct=[0.1, 1.3], goal_met=False)
    assert acc.overhead_problems(high, dry=False) == ["the interval's upper end +1.300 % is not under 1 %"]
    assert acc.overhead_problems(high, dry=True) == []
    # ticks in stopped rounds: the signal did not pause the sampler (3 > 2 % of 120, and > 1)
    leak = dict(ok, sampler={"ticks_in_on_rounds": 120, "ticks_in_off_rounds": 3})
    assert acc.overhead_problems(leak, dry=False) == [
        "the sampler ticked 3 times in rounds it was stopped (SIGSTOP did not pause it)"]
    few = dict(ok, pairs=10, sampler={"ticks_in_on_rounds": 0, "ticks_in_off_rounds": 0})
    assert acc.overhead_problems(few, dry=False) == ["10 pairs of rounds, under 20",
                                                     "the sampler never ticked in a round it was on"]
    assert acc.overhead_problems(few, dry=True) == ["the sampler never ticked in a round it was on"]


def _run_doc(tmp_path: Path, start_s: float, windows: int = 1) -> dict[str, object]:
    """A ``run --json`` document whose one window opens ``start_s`` after torch's import (at
    t = 100 s) and lasts 0.5 s; the bootstrap's armed event in the run directory."""
    (tmp_path / "profiler.jsonl").write_text(json.dumps({"event": "armed", "pid": 7, "ts_ns": 100 * 10**9}) + "\n")
    wins = [{"pid": 7, "start_ns": int((100 + start_s) * 1e9), "end_ns": int((100.5 + start_s) * 1e9)}][:windows]
    return {"exit_code": 0, "ingest_error": None, "run_dir": str(tmp_path), "windows": wins,
            "profiler": {"notes": []}, "analysis": _analysis_doc()}


def test_profiled_summary_times_the_window_against_warm_and_torch_import(tmp_path: Path) -> None:
    work = {"workload": "cudnn_sdpa", "warm_unix_ns": 110 * 10**9, "prefill_ms": 12.5}
    s = acc.profiled_summary(_run_doc(tmp_path, 14.0), work, "busy")
    assert s["windows"] == 1 and s["first_window_s"] == 0.5
    assert s["first_window_after_torch_import_s"] == 14.0 and s["window_after_warm_s"] == 4.0
    assert [e["name"] for e in s["cudnn_entries"]] == ["aten::_cudnn_attention_forward"]
    assert s["coverage_share"] == 0.9 and s["over_roof"] == 2
    problems = acc.window_problems(s, work, dry=False)
    assert problems == ["2 entries above 100 % of their roof", "coverage 90.0 % under the 95 % goal"]
    assert "1 window(s) (busy), the first +4.0 s after warm" in acc.profiled_line(s)
    # a window before warm, none with cuDNN in it, CUDA graphs skipped: each named
    early = acc.profiled_summary(_run_doc(tmp_path, 6.0), work, "busy")
    early["cudnn_entries"] = []
    graphs = {"workload": "cudnn_sdpa", "cudagraph_counters": {"cudagraph_skips": 2}}
    problems = acc.window_problems(early, graphs, dry=False)
    assert "the window opened 4.0 s before the workload was warm" in problems
    assert "CUDA graphs skipped 2 time(s) (Inductor's cudagraph_skips)" in problems
    assert "no cuDNN attention op or kernel in the window" in problems
    none = acc.profiled_summary(_run_doc(tmp_path, 1.0, windows=0), work, "busy")
    assert "no window caught (busy)" in acc.window_problems(none, work, dry=False)
    assert acc.window_problems(none, work, dry=True) == ["2 entries above 100 % of their roof"]


def test_import_window_must_open_after_the_import_with_gpu_kernels(tmp_path: Path) -> None:
    # torch imported at 100 s; the slow import from 100.5 s to 105.5 s; the window at 106 s
    work = {"workload": "slow_import", "import_s": 5.0, "import_begin_ns": int(100.5e9), "import_end_ns": int(105.5e9)}
    n = acc.import_window_numbers(_run_doc(tmp_path, 6.0), work, "time")
    assert n["window_after_import_end_s"] == 0.5 and n["import_began_after_torch_s"] == 0.5
    assert n["gpu_activities"] == 1200 and acc.import_window_problems(n, dry=False) == []
    inside = acc.import_window_numbers(_run_doc(tmp_path, 2.0), work, "time")
    assert acc.import_window_problems(inside, dry=False) == ["the window opened inside the import (3.5 s before it ended)"]
    none = acc.import_window_numbers(dict(_run_doc(tmp_path, 2.0, windows=0), profiler={"notes": ["no window"]}),
                                     work, "time")
    assert acc.import_window_problems(none, dry=False) == ["no profiler window opened (no window)"]
    empty = dict(n, gpu_activities=0)
    assert acc.import_window_problems(empty, dry=False) == ["the window holds no GPU kernel"]
    assert acc.import_window_problems(empty, dry=True) == []


@pytest.mark.parametrize("path", sorted((REPO / "fixtures" / "recordings").glob("*.jsonl*")), ids=lambda p: p.name)
def test_every_fixture_recording_passes_the_acceptance_check(path: Path) -> None:
    # a real recording added from an acceptance run is held to what the run checked
    check = acc.check_recording(path)
    assert check["problems"] == [] and check["gpus"] and check["ticks"] >= 10


def test_recording_check_finds_what_is_wrong(tmp_path: Path) -> None:
    src = (REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl").read_text().splitlines()
    header = json.loads(src[0])
    rows = [json.loads(x) for x in src[1:] if x.strip()]
    rows = [r for r in rows if not r.get("end")]
    for r in rows:
        if r["device"] == "gpu0":
            r["values"]["power_w"] = None
        if r["tick"] == 5:
            r["ts_ns"] -= 10**10  # before tick 4
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as f:
        f.write("\n".join(json.dumps(x) for x in [header, *rows]) + "\n")
    problems = acc.check_recording(bad, seconds=3, under_load=True)["problems"]
    assert any("power_w" in p for p in problems) and any("time order" in p for p in problems)
    assert not any("fell behind" in p for p in problems) and not any("utilisation" in p for p in problems)
    assert any("fell behind" in p for p in acc.check_recording(bad, seconds=60)["problems"])


def test_results_too_large_to_bring_back_are_gzipped_or_dropped(tmp_path: Path) -> None:
    text = tmp_path / "analyze.json"
    text.write_text(json.dumps({"ops": [{"name": "aten::mm", "i": i} for i in range(200_000)]}))
    acc.fit_file(text, limit=1 << 20)
    assert not text.exists() and (tmp_path / "analyze.json.gz").stat().st_size < 1 << 20
    noise = tmp_path / "steps.log"
    noise.write_bytes(os.urandom(2 << 20))
    acc.fit_file(noise, limit=1 << 20)
    assert not (tmp_path / "steps.log.gz").exists() and "dropped" in json.loads(noise.read_text())
    small = tmp_path / "sampler.json"
    small.write_text("{}")
    acc.fit_file(small, limit=1 << 20)
    assert small.read_text() == "{}"


# -- hf_generate (issue 28): examples/hf_generate.py and the step's numbers ---------------------

def _hide_transformers(tmp_path: Path) -> str:
    """A folder that, first on PYTHONPATH, makes ``import transformers`` fail as if it were absent."""
    hide = tmp_path / "hide"
    (hide / "transformers").mkdir(parents=True)
    (hide / "transformers" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'transformers' (hidden by the test)\", name='transformers')\n")
    return str(hide)


def test_hf_generate_step_is_skipped_with_the_reason_without_transformers(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    p = _script("--dry-run", "--steps", "hf_generate", str(out), env=_env(PYTHONPATH=_hide_transformers(tmp_path)),
                timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    (step,) = summary["steps"]
    assert step["name"] == "hf_generate" and step["status"] == "skipped", step
    assert step["detail"].startswith("transformers is not importable by ") and "hidden by the test" in step["detail"]
    assert summary["result"] == "pass" and "| hf_generate | skipped |" in (out / "summary.md").read_text()
    # it stopped at the probe: no gpuscope run was started
    assert "gpuscope run" not in (out / "steps.log").read_text()


def test_hf_generate_example_says_in_one_line_that_transformers_is_missing(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(HF_EXAMPLE), "--preset", "cpu", "--device", "cpu"], capture_output=True,
                       text=True, env=_env(PYTHONPATH=_hide_transformers(tmp_path)), timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf_generate: error: transformers is not installed"), p.stderr


@pytest.mark.skipif(not _has_transformers(), reason="transformers is not installed")
def test_hf_generate_example_generates_every_token_and_marks_every_step(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    p = subprocess.run([sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--name", "hf", "--no-profile",
                        "--no-analyze", "-q", "--replay", str(acc.DRY_RECORDING), "--", sys.executable, str(HF_EXAMPLE),
                        "--preset", "cpu", "--device", "cpu", "--new-tokens", "5", "--warmup", "1", "--json"],
                       capture_output=True, text=True, env=_env(OMP_NUM_THREADS="1"), timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    work = acc.hf_workload_json(p.stdout + "\n" + p.stderr)
    assert work is not None and work["generated_tokens_per_sequence"] == 5 and work["generations"] == 1
    assert work["compile"] is None and work["attn_implementation"] == "sdpa"
    q = subprocess.run([sys.executable, "-m", "gpuscope", "sql", "--db", str(db), "--json",
                        "SELECT name, count(*) AS n FROM annotations WHERE kind = 'mark' GROUP BY name ORDER BY name"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert q.returncode == 0, q.stderr
    # two generations (warm-up, measured), each: its prefill, 4 decode steps, its end
    assert {r["name"]: r["n"] for r in json.loads(q.stdout)} == {"prefill": 2, "decode_step": 8, "generation_done": 2}


def _analysis_doc() -> dict[str, object]:
    """An ``analyze --json`` document of 1000 µs of GPU time, 900 judged."""
    return {
        "run": {"id": 1, "name": "hf_generate_eager", "status": "complete"},
        "devices": [{"name": "NVIDIA H100 80GB HBM3", "spec": "h100-sxm", "kind": "gpu"},
                    {"name": "AMD EPYC", "spec": None, "kind": "host"}],
        "counts": {"gpu_activities": 1200, "ops": 900},
        "coverage": {"judged_us": 900.0, "total_us": 1000.0, "share": 0.9, "unjudged_us": 100.0,
                     "unjudged": [{"name": "aten::_cudnn_attention_forward", "kind": "op", "kernel_us": 70.0,
                                   "share": 0.07, "reason": "no_cost_model"},
                                  {"name": "triton_poi_fused_add_0", "kind": "op", "kernel_us": 30.0, "share": 0.03,
                                   "reason": "shapes_not_modelled"}],
                     "by_reason": {"no_cost_model": 70.0, "shapes_not_modelled": 30.0}},
        "roofline_us": {"compute_bound": 300.0, "memory_bound": 500.0, "cache_bound": 0.0, "latency_bound": 100.0,
                        "unknown": 100.0},
        "ops": [
            {"name": "aten::add", "kernel_us": 50.0, "count": 10, "bound": "memory_bound", "pct_of_roof": 1.06,
             "confidence": "model", "model": "elementwise"},
            {"name": "aten::mm", "kernel_us": 400.0, "count": 80, "bound": "compute_bound", "pct_of_roof": 0.617,
             "confidence": "model", "model": "mm"},
            {"name": "aten::_cudnn_attention_forward", "kernel_us": 70.0, "count": 8, "bound": "unknown",
             "pct_of_roof": None},
            {"name": "aten::gather", "kernel_us": 20.0, "count": 8, "bound": "memory_bound", "pct_of_roof": None,
             "model_error": True},
            {"name": "aten::copy_", "kernel_us": 60.0, "count": 8, "bound": "memory_bound", "pct_of_roof": 1.0},
        ],
        "kernels": [{"name": "sm90_xmma_gemm", "total_us": 400.0, "bound": "compute_bound", "pct_of_roof": 0.6},
                    {"name": "vectorized_elementwise_kernel_add", "total_us": 50.0, "bound": "memory_bound",
                     "pct_of_roof": 1.06}],
    }


def test_hf_run_summary_takes_coverage_classes_over_roof_and_top_ops_from_analyze_json() -> None:
    s = acc.hf_run_summary(_analysis_doc(), top=3)
    assert s["run"] == {"name": "hf_generate_eager", "status": "complete"}
    assert s["gpus"] == ["NVIDIA H100 80GB HBM3 (h100-sxm)"] and s["gpu_activities"] == 1200
    assert s["coverage_share"] == 0.9 and s["judged_us"] == 900.0 and s["total_us"] == 1000.0
    assert s["largest_unjudged"] == {"name": "aten::_cudnn_attention_forward", "kind": "op", "reason": "no_cost_model",
                                     "us": 70.0, "share": 0.07}
    assert [u["name"] for u in s["unjudged"]] == ["aten::_cudnn_attention_forward", "triton_poi_fused_add_0"]
    # class split: 300 + 500 + 0 + 100 + 100 = 1000 µs
    assert s["class_share"] == {"compute_bound": 0.3, "memory_bound": 0.5, "cache_bound": 0.0, "latency_bound": 0.1,
                                "unknown": 0.1}
    assert s["class_us"]["memory_bound"] == 500.0
    # above the roof: the add op and its kernel at 106 %; the copy at exactly 100 % is not
    assert s["over_roof"] == 2 and [(o["what"], o["roof_pct"]) for o in s["over_roof_entries"]] == [("op", 106.0),
                                                                                                   ("kernel", 106.0)]
    assert s["model_error"] == 1 and s["judged_entries"] == 5  # add, mm, copy_ and both kernels
    # top ops by GPU time: mm 400, the attention 70, the copy 60
    assert [o["name"] for o in s["top_ops"]] == ["aten::mm", "aten::_cudnn_attention_forward", "aten::copy_"]
    mm = s["top_ops"][0]
    assert mm["share"] == 0.4 and mm["roof_pct"] == 61.7 and mm["class"] == "compute_bound" and mm["calls"] == 80
    assert s["top_ops"][1]["roof_pct"] is None and s["top_ops"][1]["class"] == "unknown"


def test_hf_run_summary_of_a_cpu_only_run_has_no_share_and_no_classes() -> None:
    doc = {"run": {"name": "x", "status": "complete"}, "coverage": {"judged_us": 0.0, "total_us": 0.0, "share": None,
                                                                     "unjudged": [], "by_reason": {}},
           "roofline_us": {"compute_bound": 0.0, "memory_bound": 0.0}, "ops": [], "kernels": [], "counts": {}}
    s = acc.hf_run_summary(doc)
    assert s["coverage_share"] is None and s["largest_unjudged"] is None and s["class_share"] == {}
    assert s["over_roof"] == 0 and s["top_ops"] == []
    assert acc.hf_line("eager", s) == "eager: coverage n/a, 0 over roof, None GPU activities"


def test_hf_problems_name_what_fails_the_step() -> None:
    s = acc.hf_run_summary(_analysis_doc())
    work = {"workload": "hf_generate", "warm_after_torch_import_s": 20.0, "graphs_compiled_while_measured": 1}
    problems = acc.hf_problems(s, work, delay_s=15.0, dry=False)
    assert problems[0] == "2 entries above 100 % of their roof"
    assert "coverage 90.0 % under the 95 % goal" in problems
    assert any(p.startswith("the window opened at 15 s, before the workload was warm (20.0 s") for p in problems)
    assert "1 graph(s) compiled while measured" in problems and len(problems) == 4
    # the dry run judges the plumbing only: the over-roof entries still count
    assert acc.hf_problems(s, work, delay_s=15.0, dry=True) == ["2 entries above 100 % of their roof"]
    clean = dict(s, over_roof=0, coverage_share=0.97)
    assert acc.hf_problems(clean, dict(work, warm_after_torch_import_s=9.5, graphs_compiled_while_measured=0),
                           delay_s=15.0, dry=False) == []
    assert acc.hf_problems(dict(clean, gpu_activities=0), None, 15.0, dry=False) == [
        "no JSON summary from examples/hf_generate.py", "no GPU kernels in the window"]
    assert acc.hf_problems(dict(clean, run={"status": "failed"}), work, 30.0, dry=True) == ["run failed"]


def test_hf_workload_json_is_found_among_the_run_output() -> None:
    line = {"workload": "hf_generate", "decode_tokens_per_s": 1234.5}
    text = "\n".join(["gpuscope run 1: exit code 0", '{"workload": "other"}', '{"workload": "hf_generate", broken',
                      json.dumps(dict(line, decode_tokens_per_s=1.0)), "  " + json.dumps(line), "done"])
    assert acc.hf_workload_json(text) == line  # the last one
    assert acc.hf_workload_json("no json here\n{}") is None
