#!/usr/bin/env python3
"""The GPU acceptance run: everything gpuscope can only prove on a real GPU, in one command
that fits a short loan of a machine (about ten minutes, no network). Started by
``bench/gpu_acceptance.sh``, which checks for a GPU and installs gpuscope first; see
``docs/gpu-acceptance.md``.

Each step runs as its own process with its own time limit, inside a 9-minute budget, and the
results are written as they come, so that one hang loses one step, not the rest. What comes
back (at most 8 files, each small):

- ``summary.md``, ``summary.json``: pass / fail / skipped per step, with the numbers;
- ``compare.json``: ``gpuscope devices --json`` and every NVML metric beside nvidia-smi's
  reading of the same moment;
- ``recording.jsonl.gz``: 30 s of telemetry at 10 Hz under a GPU load (for ``fixtures/``);
- ``analyze.json``: ``analyze --json`` of the README's main command run on the GPU;
- ``calibrate.json``: ``calibrate --quick --json``;
- ``sampler.json``: decode tokens/s with sampling off, at 10 Hz and at 100 Hz, alternated;
- ``steps.log``: each step's command and the end of its output.

``--dry-run`` goes through every step on a machine without a GPU: NVML is the fake module of
``tests/fakes`` (the recorded H100 table), nvidia-smi a fake that answers from the same table,
and the workload runs on the CPU with short durations. It proves the plumbing, not the GPU.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
TOTAL_BUDGET_S = 540.0  # 9 minutes: the loan is about ten
LOG_TAIL_CHARS = 4000

# nvidia-smi --query-gpu fields, and the gpuscope metric and unit factor each is compared with
# (nvidia-smi's csv,nounits: MiB, W, °C, MHz, %).
SMI_FIELDS: list[tuple[str, str | None, float]] = [
    ("index", None, 1.0),
    ("uuid", None, 1.0),
    ("memory.used", "mem_used_bytes", 1 / 2**20),
    ("memory.total", "mem_total_bytes", 1 / 2**20),
    ("memory.reserved", "mem_reserved_bytes", 1 / 2**20),
    ("power.draw", "power_w", 1.0),
    ("power.limit", "power_limit_w", 1.0),
    ("temperature.gpu", "temp_c", 1.0),
    ("temperature.memory", "mem_temp_c", 1.0),
    ("clocks.sm", "sm_clock_mhz", 1.0),
    ("clocks.mem", "mem_clock_mhz", 1.0),
    ("utilization.gpu", "gpu_util", 100.0),
    ("utilization.memory", "mem_util", 100.0),
]
# |gpuscope - nvidia-smi| allowed for "agrees": exact-ish for sizes, loose for what moves.
TOLERANCE = {"memory.used": 2.0, "memory.total": 1.0, "memory.reserved": 2.0, "power.limit": 1.0}


@dataclass
class Step:
    name: str
    title: str
    limit_s: float
    status: str = "not run"
    seconds: float = 0.0
    detail: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


class Acceptance:
    def __init__(self, out: Path, dry_run: bool) -> None:
        self.out = out
        self.dry = dry_run
        self.started = time.monotonic()
        self.py = sys.executable
        self.work = Path(tempfile.mkdtemp(prefix="gpuscope-acceptance-"))
        self.db = self.work / "acceptance.duckdb"
        self.env = dict(os.environ, GPUSCOPE_DB=str(self.db), PYTHONUNBUFFERED="1")
        # tests: make one step hang, with this limit, to show the others still run
        self.hang = os.environ.get("GPUSCOPE_ACCEPTANCE_HANG_STEP")
        self.hang_limit_s = float(os.environ.get("GPUSCOPE_ACCEPTANCE_HANG_LIMIT_S", "3"))
        self.log = (out / "steps.log").open("w", encoding="utf-8")
        if self.dry:
            self._fake_gpu()
        self.steps = [
            Step("pytest_gpu", "tests marked gpu (NVML, GPM, device identity, CUPTI kernel capture)", 75),
            Step("devices", "devices --json and NVML against nvidia-smi", 30),
            Step("record", "record 30 s at 10 Hz under a GPU load", 60),
            Step("readme_run", "the README's main command on the GPU, analyze --json", 120),
            Step("calibrate", "calibrate --quick --json", 75),
            Step("sampler_cost", "decode tokens/s with sampling off, 10 Hz, 100 Hz", 170),
        ]

    # -- plumbing ------------------------------------------------------------------------------
    def _fake_gpu(self) -> None:
        """Dry run: the fake pynvml (recorded H100 table) as `pynvml`, and an `nvidia-smi` that
        answers from the same table, both first on the paths of every step's process."""
        shim = self.work / "fake"
        shim.mkdir()
        table = os.environ.get("GPUSCOPE_ACCEPTANCE_FAKE_TABLE", "nvml_h100x8_nvsmi_dump.json")
        (shim / "pynvml.py").write_text(
            "import sys\n"
            f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
            "from fakes.fake_pynvml import FakeNvml\n"
            f"sys.modules[__name__] = FakeNvml({table!r})\n")
        smi = shim / "nvidia-smi"
        smi.write_text(
            f"#!{self.py}\n"
            "import sys\n"
            f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
            "from fakes.fake_pynvml import FakeNvml\n"
            f"nv = FakeNvml({table!r})\n"
            "nv.nvmlInit()\n"
            "q = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--query-gpu='))\n"
            "for i in range(nv.nvmlDeviceGetCount()):\n"
            "    h = nv.nvmlDeviceGetHandleByIndex(i)\n"
            "    m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)\n"
            "    u = nv.nvmlDeviceGetUtilizationRates(h)\n"
            "    vals = {'index': i, 'uuid': nv.nvmlDeviceGetUUID(h), 'name': nv.nvmlDeviceGetName(h),\n"
            "            'memory.used': m.used // 2**20,\n"
            "            'memory.total': m.total // 2**20, 'memory.reserved': m.reserved // 2**20,\n"
            "            'power.draw': nv.nvmlDeviceGetPowerUsage(h) / 1000, 'power.limit':\n"
            "            nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, 'temperature.gpu': nv.nvmlDeviceGetTemperature(h, 0),\n"
            "            'temperature.memory': '[N/A]', 'clocks.sm': nv.nvmlDeviceGetClockInfo(h, 1),\n"
            "            'clocks.mem': nv.nvmlDeviceGetClockInfo(h, 2), 'utilization.gpu': u.gpu,\n"
            "            'utilization.memory': u.memory}\n"
            "    print(', '.join(str(vals.get(f, '[N/A]')) for f in q.split(',')))\n")
        smi.chmod(0o755)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), self.env.get("PYTHONPATH", "")) if p)
        self.env["PATH"] = f"{shim}{os.pathsep}{self.env.get('PATH', '')}"

    def remaining_s(self) -> float:
        return TOTAL_BUDGET_S - (time.monotonic() - self.started)

    def run(self, step: Step, cmd: list[str], timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
        """One command of a step, cut at the step's limit (or what is left of the budget)."""
        limit = min(timeout_s or step.limit_s, max(1.0, self.remaining_s() - 5))
        if self.hang == step.name:
            cmd, limit = [self.py, "-c", "import time; time.sleep(3600)"], min(limit, self.hang_limit_s)
        self.log.write(f"\n=== {step.name}: {' '.join(cmd)} (limit {limit:.0f} s)\n")
        self.log.flush()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=self.env, cwd=REPO)
        except subprocess.TimeoutExpired as exc:
            self._log_output(exc.stdout, exc.stderr)
            raise StepTimeout(f"cut at its {limit:.0f} s limit") from None
        self._log_output(p.stdout, p.stderr)
        self.log.write(f"--- exit {p.returncode}\n")
        return p

    def _log_output(self, out: Any, err: Any) -> None:
        for label, text in (("stdout", out), ("stderr", err)):
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            if text:
                self.log.write(f"--- {label} (last {LOG_TAIL_CHARS} chars)\n{text[-LOG_TAIL_CHARS:]}\n")
        self.log.flush()

    def gpuscope(self, step: Step, *args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(step, [self.py, "-m", "gpuscope", *args], timeout_s)

    def write_json(self, name: str, doc: Any) -> None:
        tmp = self.out / f".{name}.tmp"
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(self.out / name)

    # -- steps ---------------------------------------------------------------------------------
    def step_pytest_gpu(self, step: Step) -> None:
        p = self.run(step, [self.py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs", "tests"])
        last = next((ln for ln in reversed(p.stdout.splitlines()) if ln.strip()), "")
        step.numbers["pytest"] = last
        step.detail = last
        if p.returncode == 5:
            step.status = "fail"
            step.detail = "no test marked gpu was collected"
        elif p.returncode != 0:
            step.status = "fail"
        elif " passed" not in last:
            step.status = "skipped" if not self.dry else "pass"
            step.detail = f"{last} (dry run: nothing to test without a GPU)" if self.dry else f"{last}: every gpu test skipped"
        else:
            step.status = "pass"

    def step_devices(self, step: Step) -> None:
        p = self.gpuscope(step, "devices", "--json")
        if p.returncode != 0:
            raise StepFailed(f"gpuscope devices exited {p.returncode}: {_last_line(p.stderr)}")
        devices = json.loads(p.stdout)
        gpus = [d for d in devices["devices"] if d["vendor"] == "nvidia"]
        doc: dict[str, Any] = {"devices": devices, "nvidia_smi": None, "differences": []}
        if not gpus:
            doc["note"] = "no NVIDIA GPU through NVML: nothing to compare with nvidia-smi"
            self.write_json("compare.json", doc)
            step.status = "fail" if shutil.which("nvidia-smi", path=self.env["PATH"]) else "skipped"
            step.detail = doc["note"]
            return
        code = ("import json, sys\n"
                "from gpuscope.collectors import NvmlCollector\n"
                "c = NvmlCollector(); c.open()\n"
                "rows = [{s.device: s.values for s in c.sample()}]\n"
                "sys.stdout.write('READY\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
                "rows.append({s.device: s.values for s in c.sample()}); c.close()\n"
                "print(json.dumps(rows))\n")
        sampler = subprocess.Popen([self.py, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=self.env, cwd=REPO)
        try:
            assert sampler.stdout is not None and sampler.stdin is not None
            if sampler.stdout.readline().strip() != "READY":
                raise StepFailed(f"the NVML collector did not start: {_last_line(sampler.stderr.read() if sampler.stderr else '')}")
            fields = ",".join(f for f, _, _ in SMI_FIELDS)
            smi = self.run(step, ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"], 20)
            sampler.stdin.write("\n")
            sampler.stdin.flush()
            out, err = sampler.communicate(timeout=20)
        finally:
            if sampler.poll() is None:
                sampler.kill()
        if smi.returncode != 0:
            raise StepFailed(f"nvidia-smi exited {smi.returncode}: {_last_line(smi.stderr)}")
        before, after = json.loads(out)
        smi_rows = [[v.strip() for v in line.split(",")] for line in smi.stdout.strip().splitlines()]
        doc["nvidia_smi"] = [dict(zip((f for f, _, _ in SMI_FIELDS), row)) for row in smi_rows]
        worst: dict[str, float] = {}
        for row in doc["nvidia_smi"]:
            key = f"gpu{row['index']}"
            for smi_field, metric, factor in SMI_FIELDS:
                if metric is None:
                    continue
                theirs = _num(row.get(smi_field))
                ours = [r.get(key, {}).get(metric) for r in (before, after)]
                ours_vals = [o * factor for o in ours if o is not None]
                mine = statistics.fmean(ours_vals) if ours_vals else None
                diff = None if theirs is None or mine is None else mine - theirs
                entry = {"gpu": key, "field": smi_field, "metric": metric, "nvidia_smi": theirs,
                         "gpuscope": None if mine is None else round(mine, 3),
                         "difference": None if diff is None else round(diff, 3)}
                tol = TOLERANCE.get(smi_field)
                if tol is not None and diff is not None:
                    entry["agrees"] = abs(diff) <= tol
                    if not entry["agrees"]:
                        worst[f"{key} {smi_field}"] = diff
                if theirs is not None and mine is None:
                    entry["agrees"] = False
                    worst[f"{key} {smi_field}"] = float("nan")
                doc["differences"].append(entry)
        self.write_json("compare.json", doc)
        step.numbers["compared"] = len(doc["differences"])
        step.numbers["disagreements"] = {k: (None if v != v else round(v, 3)) for k, v in worst.items()}
        if worst:
            step.status = "fail"
            step.detail = "differs from nvidia-smi: " + ", ".join(sorted(worst))
        else:
            step.status = "pass"
            step.detail = f"{len(doc['differences'])} values beside nvidia-smi; memory used/total/reserved agree"

    def step_record(self, step: Step) -> None:
        seconds = 3.0 if self.dry else 30.0
        load = subprocess.Popen([self.py, "-c", _LOAD.format(seconds=seconds + 5, device="cpu" if self.dry else "cuda")],
                                env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0 if self.dry else 3.0)  # the load is under way before the first sample
            out = self.work / "recording.jsonl.gz"
            p = self.gpuscope(step, "record", "--seconds", str(seconds), "--interval", "0.1", "--out", str(out),
                              "--pid", str(load.pid), "--note",
                              "gpu_acceptance.sh: a torch matmul load" + (" (dry run: fake NVML)" if self.dry else ""))
        finally:
            load.kill()
            load.wait()
        if p.returncode != 0:
            raise StepFailed(f"gpuscope record exited {p.returncode}: {_last_line(p.stderr)}")
        shutil.copyfile(out, self.out / "recording.jsonl.gz")
        with gzip.open(out, "rt") as f:
            lines = sum(1 for line in f if line.strip())
        step.numbers.update(lines=lines, bytes=out.stat().st_size)
        # about one line a tick (10 Hz): half of them at least, or the sampler fell behind
        step.status = "pass" if lines >= seconds * 5 else "fail"
        step.detail = f"{lines} lines, {out.stat().st_size / 1e3:.0f} kB"

    def step_readme_run(self, step: Step) -> None:
        seconds = "4" if self.dry else "10"
        p = self.gpuscope(step, "run", "--profile-delay", "1" if self.dry else "2", "--profile-duration",
                          "0.5" if self.dry else "1", "--json", "--no-analyze", "--", self.py,
                          "examples/tiny_llm.py", "--seconds", seconds)
        if p.returncode != 0:
            raise StepFailed(f"gpuscope run exited {p.returncode}: {_last_line(p.stderr)}")
        q = self.gpuscope(step, "sql", "--json",
                          "SELECT r.status, (SELECT count(*) FROM kernels k WHERE k.run_id = r.id) AS kernels, "
                          "(SELECT count(*) FROM kernels k WHERE k.run_id = r.id AND k.op_id IS NOT NULL) AS linked, "
                          "(SELECT count(*) FROM ops o WHERE o.run_id = r.id) AS ops, "
                          "(SELECT count(*) FROM samples s WHERE s.run_id = r.id) AS samples "
                          "FROM runs r ORDER BY r.id DESC LIMIT 1")
        (row,) = json.loads(q.stdout)
        a = self.gpuscope(step, "analyze", "--json")
        if a.returncode == 0:
            (self.out / "analyze.json").write_text(a.stdout)
        step.numbers.update(row)
        ok = row["status"] == "complete" and row["samples"] > 0 and a.returncode == 0
        ok = ok and (row["ops"] > 0 if self.dry else row["kernels"] > 0 and row["linked"] > 0)
        step.status = "pass" if ok else "fail"
        step.detail = (f"run {row['status']}: {row['kernels']} GPU activities ({row['linked']} linked to ops), "
                       f"{row['ops']} ops, {row['samples']} samples")

    def step_calibrate(self, step: Step) -> None:
        p = self.gpuscope(step, "calibrate", "--quick", "--json", "-q")
        if p.returncode != 0:
            raise StepFailed(f"gpuscope calibrate exited {p.returncode}: {_last_line(p.stderr)}")
        (self.out / "calibrate.json").write_text(p.stdout)
        doc = json.loads(p.stdout)
        step.numbers["device"] = doc.get("device") or doc.get("name")
        step.status = "pass"
        step.detail = "stored" + (" (dry run: the CPU)" if self.dry else "")

    def step_sampler_cost(self, step: Step) -> None:
        cmd = [self.py, "bench/bench_sampler.py", "--decode", "--json", "--calls", "50", "--seconds", "1"]
        cmd += ["--repeat", "1", "--allow-cpu", "--", "--seconds", "1"] if self.dry else ["--repeat", "5", "--", "--seconds", "5"]
        p = self.run(step, cmd)
        if p.returncode != 0:
            raise StepFailed(f"bench_sampler exited {p.returncode}: {_last_line(p.stderr)}")
        doc = json.loads(p.stdout)
        self.write_json("sampler.json", doc)
        runs = doc["decode"]["runs"]
        off = statistics.median(runs["off"])
        for mode in ("10 Hz", "100 Hz"):
            changes = [100.0 * (r - off) / off for r in runs[mode]]
            step.numbers[mode] = {"change_pct_median": round(statistics.median(changes), 2),
                                  "spread_pct": [round(min(changes), 2), round(max(changes), 2)]}
        step.numbers["off_tokens_per_s"] = {"median": off, "spread": [min(runs["off"]), max(runs["off"])]}
        step.numbers["rounds"] = len(runs["off"])
        step.status = "pass"
        step.detail = ", ".join(f"{m}: {v['change_pct_median']:+.2f} % (spread {v['spread_pct'][0]:+.2f}..{v['spread_pct'][1]:+.2f})"
                                for m, v in ((m, step.numbers[m]) for m in ("10 Hz", "100 Hz")))

    # -- the whole ------------------------------------------------------------------------------
    def main(self) -> int:
        try:
            for step in self.steps:
                fn: Callable[[Step], None] = getattr(self, f"step_{step.name}")
                t0 = time.monotonic()
                if self.remaining_s() < 10:
                    step.status, step.detail = "skipped", "the 9-minute budget ran out"
                else:
                    try:
                        fn(step)
                    except StepTimeout as exc:
                        step.status, step.detail = "fail", str(exc)
                    except StepFailed as exc:
                        step.status, step.detail = "fail", str(exc)
                    except Exception as exc:  # a bug in this script must not lose the other steps
                        step.status, step.detail = "fail", f"{type(exc).__name__}: {exc}"
                step.seconds = round(time.monotonic() - t0, 1)
                self.summarize()  # as it goes: a later hang keeps what is done
        finally:
            self.log.close()
            shutil.rmtree(self.work, ignore_errors=True)
        return 0 if all(s.status in ("pass", "skipped") for s in self.steps) else 1

    def summarize(self) -> None:
        doc = {"schema": "gpuscope.gpu_acceptance/1", "dry_run": self.dry,
               "seconds": round(time.monotonic() - self.started, 1),
               "steps": [{"name": s.name, "title": s.title, "status": s.status, "seconds": s.seconds,
                          "limit_s": s.limit_s, "detail": s.detail, "numbers": s.numbers} for s in self.steps]}
        self.write_json("summary.json", doc)
        lines = ["# gpuscope GPU acceptance" + (" (dry run on fakes)" if self.dry else ""), "",
                 f"{doc['seconds']:.0f} s in all.", "", "| step | status | seconds | detail |", "|---|---|---|---|"]
        lines += [f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.detail.replace('|', '/')} |" for s in self.steps]
        tmp = self.out / ".summary.md.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.out / "summary.md")


class StepTimeout(Exception):
    pass


class StepFailed(Exception):
    pass


_LOAD = """
import time, torch
dev = {device!r}
n = 4096 if dev == "cuda" else 256
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    if dev == "cuda":
        torch.cuda.synchronize()
    else:
        time.sleep(0.01)
"""


def _num(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None  # "[N/A]", "[Not Supported]"


def _last_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else "(no output)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?", help="where results go (default: $OUT, else ./gpu-acceptance)")
    ap.add_argument("--dry-run", action="store_true", help="every step on the fakes, without a GPU")
    args = ap.parse_args(argv)
    out = Path(args.outdir or os.environ.get("OUT") or "gpu-acceptance")
    out.mkdir(parents=True, exist_ok=True)
    code = Acceptance(out, args.dry_run).main()
    print((out / "summary.md").read_text())
    return code


if __name__ == "__main__":
    sys.exit(main())
