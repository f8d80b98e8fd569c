#!/usr/bin/env python3
"""A Hugging Face transformers ``generate()`` of a small Llama-style model: gpuscope's example
of an engine people actually run (issue 28).

The model is built from a ``LlamaConfig`` written here (8 layers, hidden 2048, 16 query heads
sharing 4 KV heads, SwiGLU 5632, vocab 32000, bf16 on a GPU) with the library's own random
initialisation: nothing is downloaded, no weights are needed. Greedy decoding of a batch of
random prompts, through ``model.generate()``, with the attention the library picks (SDPA by
default).

``--compile`` compiles the **decode step** with ``torch.compile`` (mode ``default`` unless
``--compile-mode`` says otherwise) and decodes with a static KV cache, as transformers' own
compiled generation does: the prefill stays eager (its shape differs from every decode step's),
each decode step runs the compiled graph. Mode ``default`` has no CUDA graphs, so every kernel
Inductor generates (Triton ``triton_poi_*``, ``triton_red_*``, ``triton_per_*``) is launched by
a call the profiler records with its input shapes; ``reduce-overhead`` would replay them inside
CUDA graphs.

Warm-up generations (``--warmup``, default 1; with ``--compile`` they compile) run before the
measured part; ``--seconds S`` keeps generating until S seconds after the program imported
torch, so that a ``gpuscope run --profile-delay`` window opened at a fixed time finds it warm
and generating. Under ``gpuscope run`` each step is marked (``gpuscope.mark``): the prefill,
every decode step, warm-up apart.

    python examples/hf_generate.py [--compile] [--batch 8 --prompt-len 128 --new-tokens 64] [--json]
    gpuscope run --profile-delay 15 --profile-duration 0.5 -- python examples/hf_generate.py --seconds 21
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

try:
    import torch
except ImportError as _exc:  # one line, no traceback: the example cannot run without torch
    print(f"hf_generate: error: torch is not installed ({_exc})", file=sys.stderr)
    sys.exit(2)

# The moment torch was imported: gpuscope run's profiler windows are timed from it.
T_TORCH = time.monotonic()

# The phase markers of the example workload (gpuscope.mark when it is there; never breaking the
# workload): one helper for both examples, beside this file.
from tiny_llm import _mark  # noqa: E402

#: Model and workload sizes. "gpu": a ~0.5 B parameter Llama (about 1 GB of bf16 weights);
#: "cpu": small enough to run through generate() in seconds on a CPU.
PRESETS: dict[str, dict[str, int]] = {
    "gpu": dict(layers=8, hidden=2048, heads=16, kv_heads=4, intermediate=5632, vocab=32000,
                batch=8, prompt_len=128, new_tokens=64),
    "cpu": dict(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=352, vocab=1024,
                batch=2, prompt_len=16, new_tokens=8),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _import_transformers() -> Any:
    """The transformers module, or exit 2 with one line saying it is missing."""
    try:
        import transformers  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        print(f"hf_generate: error: transformers is not installed ({exc}); pip install transformers",
              file=sys.stderr)
        raise SystemExit(2) from None
    return transformers


def _import_dynamo_now() -> None:
    """Import torch._dynamo now, seconds before any profiler window opens. gpuscope run opens
    a window from a signal handler on the main thread, and starting the profiler imports
    torch._dynamo: when the signal lands while the program is itself importing it (transformers'
    model classes do), one of the two sees a partially initialised module (seen on a CPU:
    "partially initialized module 'torch._dynamo' has no attribute 'utils'", and the program
    died). Imported here, that can only happen in the first moments after torch's import."""
    try:
        import torch._dynamo  # noqa: F401
    except Exception:
        pass


def build_model(transformers: Any, sizes: dict[str, int], device: torch.device, dtype: torch.dtype,
                attn: str, seed: int) -> Any:
    """A ``LlamaForCausalLM`` from a config written here, randomly initialised by the library
    (seeded), in eval mode on ``device`` in ``dtype``. Built on the device: initialising half a
    billion parameters on the CPU takes seconds a profiler window timed from torch's import
    would spend on it. No end-of-sequence token: every generation runs its full length."""
    cfg = transformers.LlamaConfig(
        vocab_size=sizes["vocab"], hidden_size=sizes["hidden"], intermediate_size=sizes["intermediate"],
        num_hidden_layers=sizes["layers"], num_attention_heads=sizes["heads"],
        num_key_value_heads=sizes["kv_heads"],
        max_position_embeddings=max(2048, sizes["prompt_len"] + sizes["new_tokens"]),
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg)
    return model.to(device=device, dtype=dtype).eval()


def compile_decode(model: Any, mode: str, backend: str = "inductor") -> None:
    """Route the decode steps (one new token per sequence) through ``torch.compile`` of the
    model's forward; the prefill keeps the eager forward. ``functools.wraps`` keeps the
    forward's signature, which generate() inspects (``logits_to_keep``). ``mode`` applies to
    Inductor only; another backend (``eager``: Dynamo's capture without code generation, for
    quick checks on a CPU) takes none."""
    eager = model.forward
    compiled = (torch.compile(eager, mode=mode, dynamic=False) if backend == "inductor"
                else torch.compile(eager, backend=backend, dynamic=False))

    @functools.wraps(eager)
    def forward(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        one_token = ids is not None and ids.dim() == 2 and ids.shape[1] == 1
        return compiled(*args, **kwargs) if one_token else eager(*args, **kwargs)

    model.forward = forward


def compiled_graphs() -> int | None:
    """Graphs Dynamo has compiled so far in this process (None where torch does not say):
    a count that grows in the measured part means a recompile there."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def make_step_marker(transformers: Any, batch: int, new_tokens: int, sync: Callable[[], None]) -> Any:
    """A stopping criterion that never stops: generate() calls it after each new token, which is
    where the next decode step begins. It marks each decode step and notes when the first token
    (the prefill's) was ready."""

    class StepMarker(transformers.StoppingCriteria):
        def __init__(self) -> None:
            self.calls = 0
            self.phase = "decode"
            self.first_token_at: float | None = None
            self.never: torch.Tensor | None = None

        def reset(self, phase: str) -> None:
            self.calls, self.phase, self.first_token_at = 0, phase, None

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            self.calls += 1
            if self.calls == 1:
                sync()
                self.first_token_at = time.perf_counter()
            if self.calls < new_tokens:
                _mark("decode_step", phase="warmup" if self.phase == "warmup" else "decode", tokens=batch)
            if self.never is None or self.never.shape[0] != input_ids.shape[0]:
                # made once: a fresh tensor each step would add a fill kernel to every decode step
                self.never = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            return self.never

    return StepMarker()


def generation_config(transformers: Any, new_tokens: int, static_cache: bool) -> Any:
    """Greedy, exactly ``new_tokens`` new tokens; a static KV cache for the compiled decode.
    generate()'s own compilation is switched off where the library has it: this example
    compiles (or not) itself, so that the eager run stays eager."""
    gen = transformers.GenerationConfig(max_new_tokens=new_tokens, do_sample=False, num_beams=1,
                                        pad_token_id=0, eos_token_id=None, bos_token_id=None, use_cache=True)
    if static_cache:
        gen.cache_implementation = "static"
    if hasattr(gen, "disable_compile"):
        gen.disable_compile = True
    return gen


def generate_once(model: Any, prompt: torch.Tensor, gen: Any, marker: Any, warmup: bool,
                  sync: Callable[[], None]) -> tuple[torch.Tensor, float, float]:
    """One ``model.generate()``: (new tokens [B, N], prefill seconds, decode seconds). The
    prefill is marked as it starts; the marker marks each decode step."""
    batch = prompt.shape[0]
    marker.reset("warmup" if warmup else "decode")
    sync()
    t0 = time.perf_counter()
    _mark("prefill", phase="warmup" if warmup else "prefill", prompt_tokens=prompt.numel(), tokens=batch)
    with torch.inference_mode():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=gen,
                             stopping_criteria=[marker])
    sync()
    t2 = time.perf_counter()
    _mark("generation_done")  # ends the last decode step
    t1 = marker.first_token_at or t2
    return out[:, prompt.shape[1]:], t1 - t0, t2 - t1


def build_parser() -> argparse.ArgumentParser:
    """The example's flags."""
    p = argparse.ArgumentParser(description="Hugging Face generate() of a random-init Llama-style model.")
    p.add_argument("--preset", choices=sorted(PRESETS), help="sizes (default: gpu with CUDA, else cpu); flags override")
    for key in PRESETS["gpu"]:
        p.add_argument("--" + key.replace("_", "-"), dest=key, type=int, default=None, metavar="N")
    p.add_argument("--dtype", choices=["auto", *DTYPES], default="auto", help="auto: bfloat16 on CUDA, else float32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"],
                   help="transformers' attention implementation (default sdpa: on an H100, cuDNN or flash SDPA)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the decode step (static KV cache; the prefill stays eager)")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                   help="torch.compile mode (default: 'default', no CUDA graphs: Inductor's Triton kernels "
                        "are each launched by a recorded call)")
    p.add_argument("--compile-backend", choices=["inductor", "eager", "aot_eager"], default="inductor",
                   help="torch.compile backend (default inductor; eager: Dynamo capture only, a quick check)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed full-length generations first (default 1); with --compile they compile")
    p.add_argument("--seconds", type=float, default=0.0,
                   help="keep generating until this many seconds after torch was imported (default: once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print a one-line JSON summary instead of text")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("hf_generate: error: --device cuda requested but CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device("cuda" if args.device == "auto" and cuda else args.device.replace("auto", "cpu"))
    on_gpu = device.type == "cuda"
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else torch.bfloat16 if on_gpu else torch.float32
    preset = PRESETS[args.preset or ("gpu" if on_gpu else "cpu")]
    s = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in preset.items()}
    if min(s.values()) < 1 or args.warmup < 0:
        print("hf_generate: error: sizes must be positive and --warmup not negative", file=sys.stderr)
        return 2
    if s["hidden"] % s["heads"] or s["heads"] % s["kv_heads"] or (s["hidden"] // s["heads"]) % 2:
        print("hf_generate: error: --hidden must divide by --heads (even head dim), --heads by --kv-heads",
              file=sys.stderr)
        return 2
    transformers = _import_transformers()
    _import_dynamo_now()
    sync: Callable[[], None] = torch.cuda.synchronize if on_gpu else (lambda: None)

    model = build_model(transformers, s, device, dtype, args.attn, args.seed)
    gen = generation_config(transformers, s["new_tokens"], static_cache=args.compile)
    if args.compile:
        compile_decode(model, args.compile_mode, args.compile_backend)
    g = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(1, s["vocab"], (s["batch"], s["prompt_len"]), generator=g).to(device)
    marker = make_step_marker(transformers, s["batch"], s["new_tokens"], sync)

    t_warm = time.perf_counter()
    for _ in range(args.warmup):
        # full length: every decode step's cache length (and with --compile, the graph) is seen
        generate_once(model, prompt, gen, marker, True, sync)
    warmup_s = time.perf_counter() - t_warm
    warm_after_s = time.monotonic() - T_TORCH
    graphs_warm = compiled_graphs()

    tokens, prefill_s, decode_s = generate_once(model, prompt, gen, marker, False, sync)
    generations = 1
    while args.seconds and time.monotonic() - T_TORCH < args.seconds:
        tokens, p_s, d_s = generate_once(model, prompt, gen, marker, False, sync)
        prefill_s, decode_s, generations = prefill_s + p_s, decode_s + d_s, generations + 1
    graphs_end = compiled_graphs()

    steps = s["new_tokens"] - 1  # the first new token comes out of the prefill
    summary: dict[str, Any] = {
        "workload": "hf_generate",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
        "dtype": str(dtype).removeprefix("torch."),
        "params": sum(p.numel() for p in model.parameters()),
        "model": {k: s[k] for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab")},
        "attn_implementation": getattr(model.config, "_attn_implementation", args.attn),
        "compile": args.compile_mode if args.compile else None,
        "compile_backend": args.compile_backend if args.compile else None,
        "compiled": "decode step (model forward, static KV cache); prefill eager" if args.compile else None,
        "batch": s["batch"], "prompt_len": s["prompt_len"], "new_tokens": s["new_tokens"],
        "generated_tokens_per_sequence": int(tokens.shape[1]),
        "warmup_generations": args.warmup,
        "warmup_s": round(warmup_s, 3),
        "warm_after_torch_import_s": round(warm_after_s, 3),
        "generations": generations,
        "prefill_s": round(prefill_s, 6),
        "decode_s": round(decode_s, 6),
        "prefill_tokens_per_s": round(generations * s["batch"] * s["prompt_len"] / prefill_s, 2) if prefill_s else None,
        "decode_tokens_per_s": round(generations * steps * s["batch"] / decode_s, 2) if decode_s and steps else None,
        "graphs_compiled": graphs_end,
        "graphs_compiled_while_measured": None if graphs_end is None or graphs_warm is None else graphs_end - graphs_warm,
    }
    if args.json:
        print(json.dumps(summary), flush=True)
        return 0
    print(f"hf_generate: transformers {summary['transformers']} LlamaForCausalLM, {s['layers']} layers, hidden "
          f"{s['hidden']}, {s['heads']} heads / {s['kv_heads']} KV heads, vocab {s['vocab']}, "
          f"{summary['params'] / 1e6:.1f} M parameters, {summary['dtype']} on {summary['gpu'] or device}")
    print(f"  attention {summary['attn_implementation']}; "
          + (f"decode compiled (torch.compile {args.compile_backend}, mode {args.compile_mode}, static cache)"
             if args.compile else "eager"))
    print(f"  workload  batch {s['batch']}, prompt {s['prompt_len']}, {s['new_tokens']} new tokens, "
          f"{generations} generation(s) after {args.warmup} warm-up ({warmup_s:.1f} s)")
    print(f"  prefill   {prefill_s * 1e3:9.2f} ms  {summary['prefill_tokens_per_s'] or 0:>11,.1f} tokens/s")
    print(f"  decode    {decode_s * 1e3:9.2f} ms  {summary['decode_tokens_per_s'] or 0:>11,.1f} tokens/s aggregate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
