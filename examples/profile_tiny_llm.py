#!/usr/bin/env python3
"""Profile the tiny_llm workload with torch.profiler and export a Chrome trace.

One untimed warm-up generation runs first; then one generation (prefill + greedy
decode) is recorded in a single profiler window. ``prof.step()`` is called after
the prefill and after every decode step, so the trace holds ``ProfilerStep#0``
(prefill) .. ``ProfilerStep#{new_tokens-1}`` (decode steps) annotations.

    python examples/profile_tiny_llm.py --out tiny_llm.pt.trace.json.gz

Without --preset and size flags the model is deliberately small (see SMALL) so the
trace stays small; --preset cpu|gpu or explicit size flags select larger work.
A path ending in ``.gz`` is written gzip-compressed.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Sequence

import torch
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llm import build_parser, generate, setup

#: Sizes used when neither --preset nor the individual size flag is given.
SMALL: dict[str, int] = dict(layers=2, d_model=128, heads=4, vocab=512, batch=2, prompt_len=16, new_tokens=4)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser("Profile the tiny_llm workload and export a Chrome trace.")
    parser.add_argument(
        "--out",
        default="tiny_llm.pt.trace.json.gz",
        help="trace path (default: %(default)s); gzip-compressed when it ends in .gz",
    )
    parser.add_argument("--gzip", action="store_true", help="gzip the trace (appends .gz to --out if missing)")
    args = parser.parse_args(argv)
    if args.preset is None:
        for key, value in SMALL.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    out = args.out + ".gz" if args.gzip and not args.out.endswith(".gz") else args.out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    model, prompt, sizes = setup(args)
    for _ in range(args.warmup):
        generate(model, prompt, sizes["new_tokens"])

    activities = [ProfilerActivity.CPU]
    if prompt.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    steps = sizes["new_tokens"]  # 1 prefill step + (new_tokens - 1) decode steps
    with warnings.catch_warnings():
        # warmup=0 is intended: the untimed generation above already warmed everything up.
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        sched = schedule(wait=0, warmup=0, active=steps, repeat=1)
    with profile(
        activities=activities,
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(out),
        record_shapes=True,
        with_stack=False,
    ) as prof:
        workload = {
            "model": "tiny_llm",
            "device": str(prompt.device),
            "dtype": str(model.lm_head.weight.dtype).removeprefix("torch."),
            "params": model.num_params(),
            **sizes,
        }
        prof.add_metadata_json("workload", json.dumps(workload))
        calls = 0

        def on_step() -> None:
            nonlocal calls
            calls += 1
            if calls == steps and prompt.device.type == "cuda":
                torch.cuda.synchronize()  # the last step's kernels must finish inside the window
            prof.step()  # the `steps`-th call ends the window and runs on_trace_ready

        res = generate(model, prompt, sizes["new_tokens"], on_step=on_step)

    # (No timings printed: the last prof.step() exports the trace inside the timed decode loop.)
    print(
        f"wrote {out} ({os.path.getsize(out):,} bytes): {steps} profiler steps, "
        f"{res.tokens.shape[0]}x{res.tokens.shape[1]} tokens generated"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
