"""A Llama-shaped decoder over a static KV cache, in plain torch with random seeded weights
(nothing downloaded), shared by the acceptance workloads (``overhead_ab.py``,
``compile_decode.py``, ``cudnn_sdpa.py``).

Every shape is fixed and the decode position is a tensor, so one decode step can be captured
in a CUDA graph or compiled with ``torch.compile(mode="reduce-overhead")`` and replayed while
the position moves, without a recompile: the new key and value are written at ``pos`` with
``index_copy_`` and attention reads the whole cache under a mask of the positions up to
``pos``. Grouped-query attention (Llama's 4 KV heads for 16 query heads) is written out by
repeating the KV heads, so that every SDPA backend (math, memory-efficient, flash, cuDNN) can
take it. ``prefill`` runs the same layers over a whole prompt with causal attention, without
the cache (what ``cudnn_sdpa.py`` times under the cuDNN backend).
"""
from __future__ import annotations

import math
from typing import Any

#: The GPU sizes: a Llama-3.2-1B-like width (hidden 2048, 16 query / 4 KV heads of 128, SwiGLU
#: 5632), ``layers`` of them, batch 8 over a 1024-position cache: about 0.6 GB of bf16 weights
#: read per step, so a step is bound by the GPU's memory, not by the host that launches it.
#: The CPU sizes: the same structure, small enough for a dry run on two busy cores.
SIZES: dict[str, dict[str, int]] = {
    "gpu": {"layers": 8, "d_model": 2048, "heads": 16, "kv_heads": 4, "ffn": 5632, "vocab": 32000,
            "batch": 8, "cache": 1024},
    "cpu": {"layers": 2, "d_model": 128, "heads": 4, "kv_heads": 2, "ffn": 352, "vocab": 512,
            "batch": 2, "cache": 64},
}


def build(sizes: dict[str, int], device: str, dtype: Any = None, seed: int = 0) -> Any:
    """A :class:`StaticDecoder` of ``sizes`` on ``device`` (bf16 on a GPU, fp32 on the CPU unless
    ``dtype`` says), in eval mode, its weights drawn from a seeded generator."""
    import torch

    torch.manual_seed(seed)
    if dtype is None:
        dtype = torch.bfloat16 if device != "cpu" else torch.float32
    return StaticDecoder(device=device, dtype=dtype, **sizes).eval()


def _module_base() -> type:
    import torch

    return torch.nn.Module


class StaticDecoder(_module_base()):  # type: ignore[misc]
    """The decoder: ``forward(tokens [B, 1], pos [1]) -> next tokens [B, 1]`` (greedy), writing
    the step's keys and values into the cache at ``pos``; ``prefill(tokens [B, T])`` -> the
    last position's next tokens, causal attention, no cache."""

    def __init__(self, *, layers: int, d_model: int, heads: int, kv_heads: int, ffn: int, vocab: int,
                 batch: int, cache: int, device: str, dtype: Any) -> None:
        import torch
        from torch import nn

        super().__init__()
        if d_model % heads or heads % kv_heads:
            raise ValueError("d_model must be a multiple of heads, heads of kv_heads")
        self.layers, self.heads, self.kv_heads = layers, heads, kv_heads
        self.head_dim = d = d_model // heads
        self.batch, self.cache_len = batch, cache
        kw = {"device": device, "dtype": dtype}

        def weight(*shape: int) -> nn.Parameter:
            # drawn in place on the device: a host-side init of 0.6 GB takes seconds
            return nn.Parameter(torch.randn(*shape, **kw) / math.sqrt(shape[-2]), requires_grad=False)

        self.embed = nn.Parameter(torch.randn(vocab, d_model, **kw) * 0.02, requires_grad=False)
        self.wqkv = weight(layers, d_model, (heads + 2 * kv_heads) * d)
        self.wo = weight(layers, heads * d, d_model)
        self.wg = weight(layers, d_model, ffn)
        self.wu = weight(layers, d_model, ffn)
        self.wd = weight(layers, ffn, d_model)
        self.norms = nn.Parameter(torch.ones(layers, 2, d_model, **kw), requires_grad=False)
        self.final_norm = nn.Parameter(torch.ones(d_model, **kw), requires_grad=False)
        self.lm_head = weight(d_model, vocab)
        self.register_buffer("k_cache", torch.zeros(layers, batch, kv_heads, cache, d, **kw))
        self.register_buffer("v_cache", torch.zeros(layers, batch, kv_heads, cache, d, **kw))
        inv = 10000.0 ** (-torch.arange(d // 2, device=device, dtype=torch.float32) / (d // 2))
        ang = torch.outer(torch.arange(cache, device=device, dtype=torch.float32), inv).repeat(1, 2)
        self.register_buffer("cos", ang.cos().to(dtype))
        self.register_buffer("sin", ang.sin().to(dtype))
        self.register_buffer("positions", torch.arange(cache, device=device))

    @staticmethod
    def _rms(x: Any, w: Any) -> Any:
        import torch

        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    @staticmethod
    def _rope(x: Any, cos: Any, sin: Any) -> Any:
        import torch

        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def _qkv(self, h: Any, layer: int) -> tuple[Any, Any, Any]:
        b, t, _ = h.shape
        d, hq, hk = self.head_dim, self.heads, self.kv_heads
        q, k, v = (h @ self.wqkv[layer]).split([hq * d, hk * d, hk * d], dim=-1)
        return (q.view(b, t, hq, d).transpose(1, 2), k.view(b, t, hk, d).transpose(1, 2),
                v.view(b, t, hk, d).transpose(1, 2))

    def _mlp(self, x: Any, layer: int) -> Any:
        import torch.nn.functional as F

        h = self._rms(x, self.norms[layer, 1])
        return x + (F.silu(h @ self.wg[layer]) * (h @ self.wu[layer])) @ self.wd[layer]

    def forward(self, tokens: Any, pos: Any) -> Any:
        """One decode step at position ``pos`` (a one-element int64 tensor)."""
        import torch.nn.functional as F

        rep = self.heads // self.kv_heads
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)
        mask = (self.positions <= pos).view(1, 1, 1, -1)
        for i in range(self.layers):
            q, k, v = self._qkv(self._rms(x, self.norms[i, 0]), i)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.k_cache[i].index_copy_(2, pos, k)
            self.v_cache[i].index_copy_(2, pos, v)
            keys = self.k_cache[i].repeat_interleave(rep, dim=1)
            values = self.v_cache[i].repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            x = x + y.transpose(1, 2).reshape(x.shape[0], 1, -1) @ self.wo[i]
            x = self._mlp(x, i)
        return (self._rms(x, self.final_norm) @ self.lm_head).argmax(dim=-1)

    def prefill(self, tokens: Any) -> Any:
        """The layers over a whole prompt ``tokens [B, T]`` (T at most the cache length), causal
        SDPA with the KV heads repeated; the last position's next tokens [B, 1]."""
        import torch.nn.functional as F

        rep = self.heads // self.kv_heads
        t = tokens.shape[1]
        x = F.embedding(tokens, self.embed)
        cos, sin = self.cos[:t], self.sin[:t]
        for i in range(self.layers):
            q, k, v = self._qkv(self._rms(x, self.norms[i, 0]), i)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1),
                                               is_causal=True)
            x = x + y.transpose(1, 2).reshape(x.shape[0], t, -1) @ self.wo[i]
            x = self._mlp(x, i)
        return (self._rms(x[:, -1:], self.final_norm) @ self.lm_head).argmax(dim=-1)


def stop_after_window(run_dir: str | None, windows: int = 1) -> bool:
    """Under ``gpuscope run`` (``run_dir`` is ``$GPUSCOPE_RUN_DIR``): whether the run's windows
    file holds ``windows`` lines, so a workload can stop once its profiler window was written
    instead of guessing how long the run takes to open it."""
    if not run_dir:
        return False
    try:
        from _gpuscope_contract import WINDOWS_FILE  # the run's own copy of gpuscope/run/contract.py
    except ImportError:
        WINDOWS_FILE = "windows.jsonl"
    from pathlib import Path

    try:
        text = (Path(run_dir) / WINDOWS_FILE).read_text()
    except OSError:
        return False
    return sum(1 for line in text.splitlines() if line.strip()) >= windows


def loop_until_done(step: Any, sync: Any, *, started: float, seconds: float, until_window: bool,
                    tail_s: float = 0.5, check_every: int = 20) -> tuple[int, float]:
    """Call ``step`` until ``seconds`` after ``started`` (``time.monotonic()``), or, with
    ``until_window`` under ``gpuscope run``, ``tail_s`` after the run's first profiler window was
    written, whichever comes first. Returns (steps, seconds per step)."""
    import os
    import time

    run_dir = os.environ.get("GPUSCOPE_RUN_DIR") if until_window else None
    sync()
    t0 = time.perf_counter()
    n = 0
    window_seen: float | None = None
    while True:
        for _ in range(check_every):
            step()
        n += check_every
        now = time.monotonic()
        if now - started >= seconds:
            break
        if window_seen is None and stop_after_window(run_dir):
            window_seen = now
        if window_seen is not None and now - window_seen >= tail_s:
            break
    sync()
    return n, (time.perf_counter() - t0) / n
