#!/usr/bin/env python3
"""A short decode profiled twice, for ``bench/ncu_compare.py``: once under ``torch.profiler``
(a Kineto trace for gpuscope), once under Nsight Compute's ``ncu --section SpeedOfLight``.

    python bench/workloads/ncu_decode.py OUTDIR [--budget-s 90] [--ncu PATH]

The workload is ``examples/tiny_llm.py`` (a LLaMA-style decoder in plain torch, random seeded
weights: nothing to download), GPU preset with a shorter prompt and generation (sizes below).
After ``--warmup`` full-length generations, the window is ``--steps`` decode steps starting
after ``--skip`` of them, the same steps in both processes:

1. ``OUTDIR/decode.pt.trace.json.gz``: the window under ``torch.profiler`` (CPU + CUDA,
   ``record_shapes``), the GPU synchronised at both ends;
2. ``OUTDIR/ncu.csv``: ``ncu --section SpeedOfLight --csv --page raw --print-units base
   --profile-from-start off --launch-count N --clock-control none`` of the same script in
   ``--child ncu`` mode, which opens ncu's window with ``cudaProfilerStart`` at the same step
   and closes it after the last one (so warm-up kernels are never profiled: ``--launch-skip``
   counts only the launches inside the window). ``--clock-control none`` lets the GPU run
   at the clocks it ran at under torch.profiler (ncu otherwise locks base clocks).

Prints one JSON line (what ran, seconds, files, or why a half did not run). Exit 0 when the
trace was written (the ncu half may be missing: the JSON says why), 1 otherwise, 2 for bad
arguments. ``--device cpu`` runs the torch half on the CPU (plumbing checks, no kernels).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SIZES = {"layers": 8, "d_model": 2048, "heads": 16, "vocab": 32000, "batch": 8, "prompt_len": 128, "new_tokens": 16}
CPU_SIZES = {"layers": 2, "d_model": 128, "heads": 4, "vocab": 512, "batch": 2, "prompt_len": 16, "new_tokens": 8}
NCU_DIRS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
            "/usr/local/NVIDIA-Nsight-Compute*/ncu")


def find_ncu(explicit: str | None = None) -> str | None:
    """``--ncu``, else ``$NCU``, else ``ncu`` on PATH, else the usual CUDA / Nsight install folders."""
    for cand in (explicit, os.environ.get("NCU")):
        if cand:
            return cand if shutil.which(cand) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_DIRS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def _child(args: argparse.Namespace) -> int:
    """Build the model, warm up, run one generation with the window around ``--steps`` decode
    steps: under torch.profiler (``--child torch``) or between cudaProfilerStart/Stop (``ncu``)."""
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    from tiny_llm import build_parser, generate, setup

    sizes = CPU_SIZES if args.device == "cpu" else SIZES
    targs = build_parser().parse_args(["--device", args.device, "--warmup", "0", "--seed", "0",
                                       *[f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]])
    model, prompt, s = setup(targs)
    for _ in range(args.warmup):
        generate(model, prompt, s["new_tokens"], warmup=True)
    on_gpu = prompt.device.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    first, last = 1 + args.skip, 1 + args.skip + args.steps  # on_step's count: 1 = after the prefill
    calls = 0
    prof: Any = None
    if args.child == "torch":
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        prof = profile(activities=acts, record_shapes=True, with_stack=False)

    def start() -> None:
        sync()
        if prof is not None:
            prof.start()
        else:
            torch.cuda.profiler.start()  # cudaProfilerStart: opens ncu's --profile-from-start off window

    def stop() -> None:
        sync()
        if prof is not None:
            prof.stop()
        else:
            torch.cuda.profiler.stop()

    def on_step() -> None:
        nonlocal calls
        calls += 1
        if calls == first:
            start()
        elif calls == last:
            stop()

    generate(model, prompt, s["new_tokens"], on_step=on_step)
    if prof is not None:
        prof.export_chrome_trace(args.trace)
    print(json.dumps({"child": args.child, "device": str(prompt.device), "sizes": s, "window_steps": args.steps}))
    return 0


def _run(cmd: list[str], timeout_s: float, log: Path) -> tuple[int | None, str]:
    """A command with its output to ``log``; (exit code or None when cut at the limit, last line)."""
    with log.open("w") as out:
        try:
            p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               timeout=max(1.0, timeout_s), cwd=REPO)
            code: int | None = p.returncode
        except subprocess.TimeoutExpired:
            code = None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return code, (lines[-1].strip()[:300] if lines else "(no output)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--budget-s", type=float, default=90.0, help="both halves together (default 90)")
    ap.add_argument("--ncu", help="the ncu binary (default: $NCU, PATH, /usr/local/cuda/bin, Nsight folders)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--warmup", type=int, default=2, help="full-length generations before the window (default 2)")
    ap.add_argument("--skip", type=int, default=4, help="decode steps before the window (default 4)")
    # one decode step: a few hundred kernels at the GPU preset's 8 layers (an estimate: some 35 a
    # layer), within --launch-count, so that both windows hold the same launches
    ap.add_argument("--steps", type=int, default=1, help="decode steps in the window (default 1)")
    ap.add_argument("--launch-count", type=int, default=400, help="most kernels ncu profiles (default 400)")
    ap.add_argument("--child", choices=["torch", "ncu"], help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if min(args.warmup, args.skip) < 0 or args.steps < 1 or args.launch_count < 1:
        print("ncu_decode: --warmup/--skip must be >= 0, --steps and --launch-count >= 1", file=sys.stderr)
        return 2
    tokens = (CPU_SIZES if args.device == "cpu" else SIZES)["new_tokens"]
    if 1 + args.skip + args.steps > tokens:  # on_step runs once after the prefill, then once per decode step
        print(f"ncu_decode: --skip + --steps ({args.skip + args.steps}) must be under {tokens}, the generation's "
              "new tokens", file=sys.stderr)
        return 2
    if args.child:
        return _child(args)
    if not args.outdir:
        print("ncu_decode: OUTDIR is required", file=sys.stderr)
        return 2
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    left = lambda: args.budget_s - (time.monotonic() - t0)  # noqa: E731
    common = ["--device", args.device, "--warmup", str(args.warmup), "--skip", str(args.skip),
              "--steps", str(args.steps)]
    me = [sys.executable, str(Path(__file__).resolve())]
    trace = out / "decode.pt.trace.json.gz"
    summary: dict[str, Any] = {"device": args.device, "window": {"skip": args.skip, "steps": args.steps},
                               "trace": None, "ncu_csv": None}
    # the torch half first, with at most 40 % of the budget: it is the one gpuscope needs
    code, last = _run([*me, "--child", "torch", "--trace", str(trace), *common], 0.4 * args.budget_s,
                      out / "torch.log")
    summary["torch_s"] = round(time.monotonic() - t0, 1)
    if code == 0 and trace.is_file():
        summary["trace"] = str(trace)
    else:
        summary["torch_error"] = "cut at its limit" if code is None else f"exit {code}: {last}"
    ncu = find_ncu(args.ncu)
    if args.device == "cpu":
        summary["ncu_skipped"] = "--device cpu: ncu profiles GPU kernels only"
    elif ncu is None:
        summary["ncu_skipped"] = "no ncu (not --ncu, $NCU, on PATH or under /usr/local/cuda*/bin, /opt/nvidia)"
    elif left() < 10:
        summary["ncu_skipped"] = f"{left():.0f} s of the budget left"
    else:
        csv_path = out / "ncu.csv"
        t1 = time.monotonic()
        cmd = [ncu, "--section", "SpeedOfLight", "--csv", "--page", "raw", "--print-units", "base",
               "--profile-from-start", "off", "--launch-count", str(args.launch_count),
               "--clock-control", "none", "--target-processes", "all", "--log-file", str(csv_path), "-f",
               *me, "--child", "ncu", *common]
        summary["ncu_cmd"] = " ".join(cmd)
        code, last = _run(cmd, left() - 2, out / "ncu.log")
        summary["ncu_s"] = round(time.monotonic() - t1, 1)
        if code == 0 and csv_path.is_file() and csv_path.stat().st_size:
            summary["ncu_csv"] = str(csv_path)
        else:
            tail = ""
            if csv_path.is_file():  # ncu writes its own errors (ERR_NVGPUCTRPERM, ...) into the log file
                errs = [ln for ln in csv_path.read_text(errors="replace").splitlines() if "ERR" in ln or "rror" in ln]
                tail = errs[-1][:300] if errs else ""
            summary["ncu_error"] = ("cut at its limit" if code is None else f"exit {code}: {last}") + \
                (f"; {tail}" if tail else "")
    summary["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(summary))
    return 0 if summary["trace"] else 1


if __name__ == "__main__":
    sys.exit(main())
