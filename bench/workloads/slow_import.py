#!/usr/bin/env python3
"""A program that is inside a slow import when its profiler window is due (issue 30, "What
broke" 1), for the acceptance step ``import_window``.

    gpuscope run --profile-delay 2 --profile-duration 1 --json -- \
        python bench/workloads/slow_import.py [--import-s 5] [--work-s 5] [--device cpu] [--json]

It imports torch (``gpuscope run``'s window clock starts there), then ``slow_import_module``,
whose import takes ``--import-s`` seconds (it sleeps, imports ``torch._dynamo`` half way, as
the H100 run's program was importing a torch submodule, and sleeps again): longer than the
window's delay, so the window falls due while the import lock is held. Then it does GPU work
(bf16 4096^3 matmuls; on the CPU small float32 ones) for ``--work-s`` seconds. Prints one JSON
line (``--json``): the wall-clock nanoseconds at which the slow import began and ended and the
work ended. The acceptance step checks that the window opened after the import ended and
holds GPU kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--import-s", type=float, default=5.0, help="seconds the slow import takes (default 5)")
    ap.add_argument("--work-s", type=float, default=5.0, help="seconds of GPU work after it (default 5)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    os.environ["GPUSCOPE_SLOW_IMPORT_S"] = f"{args.import_s:g}"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    begin_ns = time.time_ns()
    import slow_import_module  # noqa: F401  (the slow import)

    end_ns = time.time_ns()
    n = 4096 if args.device == "cuda" else 256
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    a = torch.randn(n, n, device=args.device, dtype=dtype)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    steps = 0
    stop = time.monotonic() + args.work_s
    while time.monotonic() < stop:
        for _ in range(10):
            a = (a @ a).clamp_(-1, 1)
        sync()
        steps += 10
    doc = {"workload": "slow_import", "device": args.device, "import_s": args.import_s,
           "import_begin_ns": begin_ns, "import_end_ns": end_ns, "work_end_ns": time.time_ns(), "matmuls": steps}
    print(json.dumps(doc) if args.json else doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
