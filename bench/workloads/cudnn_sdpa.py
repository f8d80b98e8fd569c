#!/usr/bin/env python3
"""A Llama-shaped prefill whose attention runs on cuDNN's SDPA backend
(``torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)``), for the acceptance step
``cudnn_sdpa``.

    python bench/workloads/cudnn_sdpa.py [--prompt 1024] [--seconds 30] [--until-window] [--json]
    python bench/workloads/cudnn_sdpa.py --device cpu        # the dry run: the math backend

``_llama.py``'s decoder (GPU sizes: 8 layers, hidden 2048, 16 query / 4 KV heads of 128, bf16)
runs ``prefill`` over batch 8 x ``--prompt`` tokens in a loop, causal attention with the KV
heads repeated, only the cuDNN backend allowed: where cuDNN cannot take the call, torch raises
("No available kernel") and the workload says so and exits 1, rather than timing another
backend. Stops as ``compile_decode.py`` does (``--seconds``, ``--until-window``). Prints one
JSON line (``--json``): the backend, when it was warm, prefills and ms per prefill.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--prompt", type=int, default=1024, help="prompt tokens per sequence (at most the cache, 1024)")
    ap.add_argument("--seconds", type=float, default=30.0, help="stop this long after the start at the latest")
    ap.add_argument("--until-window", action="store_true", help="stop 0.5 s after gpuscope run's first window")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, str(HERE))
    from _llama import SIZES, build, loop_until_done

    sizes = SIZES["cpu" if args.device == "cpu" else "gpu"]
    prompt = min(args.prompt, sizes["cache"])
    model = build(sizes, args.device)
    tokens = torch.randint(0, sizes["vocab"], (sizes["batch"], prompt), device=args.device,
                           generator=torch.Generator(device=args.device).manual_seed(1))
    backend = SDPBackend.MATH if args.device == "cpu" else SDPBackend.CUDNN_ATTENTION
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    with torch.inference_mode(), sdpa_kernel([backend]):
        try:
            for _ in range(3):
                model.prefill(tokens)
            sync()
        except RuntimeError as exc:
            print(f"cudnn_sdpa: the {backend.name} backend cannot take this attention: {str(exc).splitlines()[0]}",
                  file=sys.stderr)
            if args.json:
                print(json.dumps({"workload": "cudnn_sdpa", "backend": backend.name, "torch": torch.__version__,
                                  "error": str(exc).splitlines()[0][:300]}))
            return 1
        warm_ns, warm_s = time.time_ns(), time.monotonic() - started
        steps, per_step = loop_until_done(lambda: model.prefill(tokens), sync, started=started, seconds=args.seconds,
                                          until_window=args.until_window, check_every=5)
    doc = {"workload": "cudnn_sdpa", "torch": torch.__version__, "device": args.device,
           "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
           "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
           "backend": backend.name, "sizes": sizes, "prompt": prompt, "warm_unix_ns": warm_ns,
           "warm_after_start_s": round(warm_s, 2), "prefills": steps, "prefill_ms": round(1e3 * per_step, 3),
           "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps(doc) if args.json else doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
