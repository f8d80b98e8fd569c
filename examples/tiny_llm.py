#!/usr/bin/env python3
"""A tiny LLaMA-style decoder-only transformer: gpuscope's example inference workload.

Random, seeded weights (nothing is downloaded). A prefill over a batch of random
prompts yields the first new token; a greedy decode loop using a pre-allocated KV
cache then runs ``new_tokens - 1`` steps. Prints prefill and decode throughput.

    python examples/tiny_llm.py [--preset gpu] [--json]

``setup`` and ``generate`` are reused by ``profile_tiny_llm.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:  # Optional phase markers; they must never break the workload.
    from gpuscope import mark  # type: ignore[attr-defined]
except Exception:
    mark = None

PRESETS: dict[str, dict[str, int]] = {
    "cpu": dict(layers=4, d_model=256, heads=8, vocab=4096, batch=4, prompt_len=64, new_tokens=32),
    "gpu": dict(layers=8, d_model=2048, heads=16, vocab=32000, batch=8, prompt_len=512, new_tokens=128),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _mark(name: str, **kwargs: int | str) -> None:
    """Call ``gpuscope.mark`` if it is available; swallow any error it raises."""
    if mark is not None and callable(mark):
        try:
            mark(name, **kwargs)
        except Exception:
            pass


@dataclass
class ModelConfig:
    layers: int = 4
    d_model: int = 256
    heads: int = 8
    vocab: int = 4096
    max_seq: int = 96  # KV-cache capacity (prompt + new tokens)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def ffn_dim(self) -> int:  # LLaMA-style SwiGLU width: 8/3 * d, rounded up to a multiple of 64
        return 64 * math.ceil(8 * self.d_model / 3 / 64)


class RMSNorm(nn.Module):
    """LLaMA RMSNorm, computed in float32 (own version: ``nn.RMSNorm`` needs torch >= 2.4)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` [B, H, T, D] by the cos/sin rows [T, D] of its positions."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class KVCache:
    """Pre-allocated per-layer keys/values, each [B, H, max_seq, head_dim]."""

    def __init__(self, cfg: ModelConfig, batch: int, device: torch.device, dtype: torch.dtype) -> None:
        shape = (batch, cfg.heads, cfg.max_seq, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.length = 0  # number of filled positions


class Block(nn.Module):
    """Pre-norm transformer block: RMSNorm + causal self-attention, RMSNorm + SwiGLU MLP."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.heads, self.head_dim = layer, cfg.heads, cfg.head_dim
        self.attn_norm = RMSNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.mlp_norm = RMSNorm(cfg.d_model)
        self.gate = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def attention(self, x: Tensor, cache: KVCache, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        start, end = cache.length, cache.length + t
        keys, values = cache.k[self.layer], cache.v[self.layer]
        if end > keys.shape[2]:
            raise ValueError(f"KV cache overflow: {end} > {keys.shape[2]} positions")
        q, k = apply_rope(q, cos[start:end], sin[start:end]), apply_rope(k, cos[start:end], sin[start:end])
        keys[:, :, start:end], values[:, :, start:end] = k, v
        # Prefill (empty cache) is causal; a single decode token attends to the whole cache.
        # (Chunked prefill, i.e. start > 0 and t > 1, would need an explicit mask.)
        y = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], is_causal=start == 0 and t > 1)
        return self.out(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: Tensor, cache: KVCache, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.attention(self.attn_norm(x), cache, cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLLM(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        # Rotary-embedding tables [max_seq, head_dim]; buffers, so .to() moves and casts them.
        inv_freq = 10000.0 ** (-torch.arange(cfg.head_dim // 2) / (cfg.head_dim // 2))
        angles = torch.outer(torch.arange(cfg.max_seq, dtype=torch.float32), inv_freq).repeat(1, 2)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)

    def forward(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """Append ``tokens`` [B, T] to ``cache``; return the last position's logits [B, vocab]."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cache, self.rope_cos, self.rope_sin)
        cache.length += tokens.shape[1]
        return self.lm_head(self.norm(x[:, -1]))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype, seed: int = 0) -> TinyLLM:
    """Create a randomly initialised model in eval mode (deterministic for a given seed and device).

    Built and initialised on ``device``: the GPU preset's half a billion parameters took seconds
    to initialise on an H100 machine's CPU, long enough that a profiler window opened 2 s after
    torch was imported recorded only the CPU's random-number ops."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = TinyLLM(cfg)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02 if name.startswith("embed") else 1.0 / math.sqrt(p.shape[1]))
    return model.to(device=device, dtype=dtype).eval()


def make_prompt(cfg: ModelConfig, batch: int, prompt_len: int, device: torch.device, seed: int = 0) -> Tensor:
    """Random prompt token ids [batch, prompt_len]."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, cfg.vocab, (batch, prompt_len), generator=gen).to(device)


@dataclass
class GenerationResult:
    tokens: Tensor  # [B, new_tokens]
    prefill_s: float
    decode_s: float


@torch.inference_mode()
def generate(
    model: TinyLLM, prompt: Tensor, new_tokens: int, on_step: Callable[[], None] | None = None, warmup: bool = False
) -> GenerationResult:
    """Prefill ``prompt``, then greedily decode until ``new_tokens`` tokens per sequence exist.

    ``on_step()`` (e.g. ``prof.step``) is called after the prefill and after every decode step.
    Under ``gpuscope run`` each step is marked as it starts: the prefill reads the prompt and
    generates the first token of each sequence, each decode step one more; ``warmup`` marks
    them as warm-up, which the run's summary leaves out of tokens/s and J per token.
    """
    device, step = prompt.device, on_step or (lambda: None)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    cache = KVCache(model.cfg, prompt.shape[0], device, model.lm_head.weight.dtype)
    batch = prompt.shape[0]
    sync()
    t0 = time.perf_counter()
    _mark("prefill", phase="warmup" if warmup else "prefill", prompt_tokens=prompt.numel(), tokens=batch)
    token = model(prompt, cache).argmax(dim=-1, keepdim=True)
    sync()
    t1 = time.perf_counter()
    step()
    out = [token]
    for _ in range(new_tokens - 1):
        _mark("decode_step", phase="warmup" if warmup else "decode", tokens=batch)
        token = model(token, cache).argmax(dim=-1, keepdim=True)
        out.append(token)
        step()
    sync()
    _mark("generation_done")  # ends the last decode step
    return GenerationResult(torch.cat(out, dim=1), t1 - t0, time.perf_counter() - t1)


def build_parser(description: str = "Tiny LLaMA-style inference workload.") -> argparse.ArgumentParser:
    """Parser with the model/workload flags (shared with profile_tiny_llm.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(PRESETS), help="sizes (default: gpu with CUDA, else cpu); flags override")
    for key in PRESETS["cpu"]:
        p.add_argument("--" + key.replace("_", "-"), dest=key, type=int, default=None, metavar="N")
    p.add_argument("--dtype", choices=["auto", *DTYPES], default="auto", help="auto: bfloat16 on CUDA, else float32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed warm-up generations of full length (default 1): every decode shape, and so "
                        "every kernel and cuBLAS plan, is loaded before timing")
    p.add_argument("--seed", type=int, default=0)
    return p


def setup(args: argparse.Namespace) -> tuple[TinyLLM, Tensor, dict[str, int]]:
    """Build (model, prompt, sizes) from ``args``; ``auto`` = CUDA/bf16/gpu preset if available, else CPU/fp32/cpu."""
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        raise SystemExit("error: --device cuda requested but CUDA is not available")
    device = torch.device("cuda" if args.device == "auto" and cuda else args.device.replace("auto", "cpu"))
    on_gpu = device.type == "cuda"
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else torch.bfloat16 if on_gpu else torch.float32
    preset = PRESETS[args.preset or ("gpu" if on_gpu else "cpu")]
    s = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in preset.items()}
    if min(s.values()) < 1:
        raise SystemExit("error: sizes must be positive")
    if s["d_model"] % s["heads"] or (s["d_model"] // s["heads"]) % 2:
        raise SystemExit("error: --d-model must be divisible by --heads, with an even head dim")
    cfg = ModelConfig(s["layers"], s["d_model"], s["heads"], s["vocab"], s["prompt_len"] + s["new_tokens"])
    model = build_model(cfg, device, dtype, args.seed)
    return model, make_prompt(cfg, s["batch"], s["prompt_len"], device, args.seed), s


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("--json", action="store_true", help="print a one-line JSON summary instead of text")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="keep generating (same prompt) until this many seconds have passed (default: once)")
    args = parser.parse_args(argv)
    model, prompt, s = setup(args)
    for _ in range(args.warmup):
        # full length: each decode step has its own cache length, and on a GPU the first step at
        # each length loads kernels and plans; a short warm-up left that in the timed generation,
        # which on an H100 made the first timed generation 10x slower than the next ones
        generate(model, prompt, s["new_tokens"], warmup=True)
    t_start = time.perf_counter()
    res = generate(model, prompt, s["new_tokens"])
    generations = 1
    while args.seconds and time.perf_counter() - t_start < args.seconds:
        more = generate(model, prompt, s["new_tokens"])
        res = GenerationResult(more.tokens, res.prefill_s + more.prefill_s, res.decode_s + more.decode_s)
        generations += 1

    steps = s["new_tokens"] - 1  # the first new token comes out of prefill
    device, dtype = prompt.device, str(model.lm_head.weight.dtype).removeprefix("torch.")
    prefill_tps = generations * prompt.numel() / res.prefill_s
    decode_tps_seq = generations * steps / res.decode_s if steps else 0.0
    summary = {
        "device": str(device),
        "dtype": dtype,
        "params": model.num_params(),
        "batch": s["batch"],
        "prompt_len": s["prompt_len"],
        "new_tokens": s["new_tokens"],
        "generations": generations,
        "prefill_s": round(res.prefill_s, 6),
        "prefill_tokens_per_s": round(prefill_tps, 2),
        "decode_s": round(res.decode_s, 6),
        "decode_tokens_per_s": round(s["batch"] * decode_tps_seq, 2),
        "decode_tokens_per_s_per_seq": round(decode_tps_seq, 2),
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    cfg, name = model.cfg, torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"tiny_llm: {cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads, vocab {cfg.vocab}")
    print(f"  device    {device} ({name}), {dtype}, {model.num_params() / 1e6:.2f} M parameters")
    print(f"  workload  batch {s['batch']}, prompt {s['prompt_len']}, {s['new_tokens']} new tokens, "
          f"{generations} generation(s)")
    print(f"  prefill   {res.prefill_s * 1e3:9.2f} ms  {prefill_tps:>11,.1f} tokens/s")
    print(f"  decode    {res.decode_s * 1e3:9.2f} ms  {s['batch'] * decode_tps_seq:>11,.1f} tokens/s aggregate")
    print(f"            {generations * steps:>6} steps  {decode_tps_seq:>11,.1f} tokens/s per sequence")
    return 0


if __name__ == "__main__":
    sys.exit(main())
