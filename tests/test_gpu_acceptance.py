"""bench/gpu_acceptance.sh: one line and exit 2 without a GPU; a dry run on the fakes goes
through every step, keeps at most 8 small files, and a step that hangs is cut at its limit
while the steps after it still run."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_acceptance.sh"


def _no_gpu_here() -> bool:
    return not (Path("/dev/nvidia0").exists() or Path("/dev/kfd").exists())


@pytest.mark.skipif(not _no_gpu_here(), reason="this machine has a GPU")
def test_without_a_gpu_exits_2_with_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, PATH="/usr/bin:/bin")  # no nvidia-smi / amd-smi
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=30)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "no NVIDIA or AMD GPU" in p.stderr
    assert p.stdout == "" and time.monotonic() - t0 < 5
    assert not (tmp_path / "out").exists()


def test_bad_option_exits_2(tmp_path: Path) -> None:
    p = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown option --frobnicate" in p.stderr


@pytest.mark.slow
def test_dry_run_goes_through_every_step_and_survives_a_hang(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    env = dict(os.environ, GPUSCOPE_ACCEPTANCE_HANG_STEP="calibrate", GPUSCOPE_ACCEPTANCE_HANG_LIMIT_S="3")
    env.pop("OUT", None)
    p = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 1, p.stderr  # the hung step failed
    summary = json.loads((out / "summary.json").read_text())
    status = {s["name"]: s for s in summary["steps"]}
    assert list(status) == ["pytest_gpu", "devices", "record", "readme_run", "calibrate", "sampler_cost"]
    assert status["calibrate"]["status"] == "fail" and "cut at its 3 s limit" in status["calibrate"]["detail"]
    for name in ("pytest_gpu", "devices", "record", "readme_run", "sampler_cost"):
        assert status[name]["status"] == "pass", status[name]
    # the steps after the hang ran, with their numbers
    assert status["sampler_cost"]["numbers"]["rounds"] >= 1
    compare = json.loads((out / "compare.json").read_text())
    used = next(d for d in compare["differences"] if d["field"] == "memory.used" and d["gpu"] == "gpu0")
    assert used["agrees"] and used["nvidia_smi"] == 1.0  # the recorded H100: 1 MiB used
    files = sorted(f for f in out.rglob("*") if f.is_file())
    assert len(files) <= 8 and all(f.stat().st_size < 4 << 20 for f in files), [(f.name, f.stat().st_size) for f in files]
    assert {"summary.md", "summary.json", "steps.log", "recording.jsonl.gz", "analyze.json"} <= {f.name for f in files}
    assert "| calibrate | fail |" in (out / "summary.md").read_text()
