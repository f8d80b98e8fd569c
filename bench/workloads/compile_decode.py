#!/usr/bin/env python3
"""A Llama-shaped decode step under ``torch.compile(mode="reduce-overhead")``: Inductor's
kernels replayed from CUDA graphs (cudagraph trees), for the acceptance step ``compile_decode``.

    python bench/workloads/compile_decode.py [--layers 4] [--seconds 80] [--until-window] [--json]
    python bench/workloads/compile_decode.py --device cpu --backend eager   # the dry run

The model is ``_llama.py``'s static-cache decoder (GPU sizes, ``--layers`` of them: 2 by
default, to keep Inductor's compile short; bf16). The step is compiled with ``fullgraph=True``,
warmed up (the first call compiles, the next ones record the graphs), then called in a loop,
each call preceded by ``torch.compiler.cudagraph_mark_step_begin()``, its next tokens copied
into a static input and the position taken from a table of one-element tensors (so nothing
recompiles as it moves). The loop runs until ``--seconds`` after the start or, with
``--until-window`` under ``gpuscope run``, half a second after the run's first profiler window
was written. Prints one JSON line (``--json``): when it was warm (wall clock and seconds after
the start), the compile's seconds, steps and ms per step while measured, graphs compiled while
measured (must be 0), Inductor's cudagraph counters (a skip means no CUDA graphs) and
the reasons Inductor logged for a skip.
``--device cpu --backend eager`` (the dry run): Dynamo's capture without Inductor or graphs.
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
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor; eager: the dry run)")
    ap.add_argument("--mode", default="reduce-overhead", help="torch.compile mode (default reduce-overhead)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2: Inductor's compile grows with them)")
    ap.add_argument("--seconds", type=float, default=80.0, help="stop this long after the start at the latest")
    ap.add_argument("--until-window", action="store_true", help="stop 0.5 s after gpuscope run's first window")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import logging

    import torch
    from torch._dynamo.utils import counters

    # Inductor says why it skips CUDA graphs of a CUDA graph on its "cudagraphs" log ("skipping
    # cudagraphs due to ...", "disabling cudagraphs ..."; on the CPU it only counts): kept for
    # the JSON line, where a skip would otherwise be only a count
    skips: list[str] = []

    class _Skips(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            low = msg.lower()
            if "cudagraph" in low and ("skip" in low or "disabl" in low):
                skips.append(msg[:300])

    if args.backend == "inductor":
        torch._logging.set_logs(cudagraphs=True)
        logging.getLogger("torch").addHandler(_Skips())

    sys.path.insert(0, str(HERE))
    from _llama import SIZES, build, loop_until_done

    sizes = dict(SIZES["cpu" if args.device == "cpu" else "gpu"], layers=args.layers)
    model = build(sizes, args.device)
    mode = None if args.backend == "eager" else args.mode  # a mode is Inductor's
    compiled = torch.compile(model, backend=args.backend, mode=mode, fullgraph=True)
    tokens = torch.zeros(sizes["batch"], 1, dtype=torch.long, device=args.device)
    positions = [torch.tensor([p], device=args.device) for p in range(sizes["cache"])]
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    i = 0

    def step() -> None:
        nonlocal i
        torch.compiler.cudagraph_mark_step_begin()
        tokens.copy_(compiled(tokens, positions[i % len(positions)]))
        i += 1

    with torch.inference_mode():
        t0 = time.monotonic()
        step()  # compiles
        sync()
        compile_s = time.monotonic() - t0
        for _ in range(4):  # cudagraph trees: a warm-up call, then the recording, then replays
            step()
        sync()
        graphs_warm = counters["stats"]["unique_graphs"]
        warm_ns, warm_s = time.time_ns(), time.monotonic() - started
        print(f"compile_decode: warm {warm_s:.1f} s after the start (compile {compile_s:.1f} s)", file=sys.stderr,
              flush=True)
        steps, per_step = loop_until_done(step, sync, started=started, seconds=args.seconds,
                                          until_window=args.until_window)
    doc = {"workload": "compile_decode", "torch": torch.__version__, "device": args.device,
           "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None, "sizes": sizes,
           "backend": args.backend, "mode": mode, "compile_s": round(compile_s, 2),
           "warm_unix_ns": warm_ns, "warm_after_start_s": round(warm_s, 2), "steps": steps,
           "step_ms": round(1e3 * per_step, 4),
           "graphs_compiled_while_measured": counters["stats"]["unique_graphs"] - graphs_warm,
           "cudagraph_counters": {k: v for k, v in counters["inductor"].items() if "cudagraph" in k},
           "cudagraph_hints": skips[:5],
           "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps(doc) if args.json else doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
