#!/usr/bin/env python3
"""A model's initialisation as the profiler sees it: hundreds of thousands of small CPU ops
(``aten::empty``, ``aten::normal_``, ``aten::copy_`` with their shapes), then the weights on the
GPU and a little GPU work. For the acceptance step ``spill_ingest`` (issue 30, "What broke" 2:
an 8 s window over a model's initialisation wrote a trace whose ingest spilled its staging and
then failed at the write).

    gpuscope run --profile-delay 0.5 --profile-duration 3 --json -- \
        python bench/workloads/big_init.py [--init-s 5] [--device cpu] [--json]

Prints one JSON line (``--json``): the init's ops (three per tensor) and seconds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init-s", type=float, default=5.0, help="seconds of initialisation ops (default 5)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    t0 = time.monotonic()
    kept = []
    n = 0
    while time.monotonic() - t0 < args.init_s:
        for i in range(200):
            w = torch.empty(64, 1 + (n + i) % 512)  # as nn.Linear's init: empty, normal_, then copied
            w.normal_(std=0.02)
            dst = torch.empty(w.shape)
            dst.copy_(w)
            if (n + i) % 97 == 0:
                kept.append(dst)
        n += 200
    init_s = time.monotonic() - t0
    weights = [w.to(args.device) for w in kept]
    acc = torch.zeros(64, 64, device=args.device)
    for w in weights:
        acc = acc + w @ w.T
    if args.device == "cuda":
        torch.cuda.synchronize()
    doc = {"workload": "big_init", "device": args.device, "tensors": n, "init_ops": 3 * n,
           "init_s": round(init_s, 2), "kept": len(weights)}
    print(json.dumps(doc) if args.json else doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
