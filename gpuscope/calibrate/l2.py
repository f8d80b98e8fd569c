"""L2 bandwidth: a copy stream (read + write) and a read-only stream over buffers well inside the
GPU's L2, replayed from CUDA/HIP graphs and timed with events.

Why graphs and a fit: one pass over a buffer that fits in an L2 takes a few microseconds (25 MiB
at ~10 TB/s is 2.6 µs), about as long as a kernel launch. Launching from Python would measure
the launch rate, so each timed iteration replays a graph of ``repeats`` back-to-back kernels
(the CPU launches once). Each kernel still pays a fixed cost on the GPU (its start, its ramp,
its tail), so the stream is timed at three working-set sizes and ``seconds per kernel = fixed +
bytes / bandwidth`` is fitted: the slope is the L2's streaming bandwidth, the figure a cache
roof needs (a roof has no per-kernel term). Where the fit does not hold (the times are not
linear in the bytes, or the fixed cost swamps the data movement) nothing is stored and the
calibration's ``info`` says why, with the per-kernel figures seen.

torch comes in as an argument (through the calibration's context), never imported here.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..ceiling_metrics import METRIC_L2_BW, METRIC_L2_READ, UNITS
from ..render.table import fmt_bw
from .kernels import _Ctx, _time_op
from .results import Measurement

_KIB = 1 << 10
_MIB = 1 << 20

#: Working sets timed, as fractions of the L2: the largest is half of it (well inside, since
#: some L2s keep a copy of a line in each partition), the smallest an eighth (still many waves of
#: blocks on every GPU gpuscope knows).
L2_WORKING_SET_FRACTIONS: tuple[float, ...] = (0.125, 0.25, 0.5)
#: Bytes one timed graph replay moves (sets how many kernels a graph holds): about 0.2 ms at
#: 10 TB/s, enough to dwarf the events' resolution and the replay's own launch.
L2_REPLAY_BYTES = 2 << 30
#: Bounds on the kernels in one graph.
L2_MIN_REPEATS, L2_MAX_REPEATS = 8, 2048
#: Buffer sizes are multiples of this (and at least this).
L2_ALIGN_BYTES = 64 * _KIB
#: The fit is trusted when every point is within this share of its fitted time ...
FIT_MAX_RESIDUAL = 0.05
#: ... and the time grows by at least this share of the largest point's time from the smallest
#: working set to the largest (else the fixed per-kernel cost swamps the data movement).
FIT_MIN_SPREAD = 0.10


# --------------------------------------------------------------------------------------------
# sizes (pure)
# --------------------------------------------------------------------------------------------


def _positive(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def l2_size_bytes(backend: str, torch_l2_bytes: Any, spec: Any) -> tuple[int | None, str]:
    """(the L2 size in bytes the stream is sized from, where it came from), or (None, why not).

    The spec entry's ``l2_cache_mb`` (binary MB, as the roofline's cache roof reads it) is the
    size the cache roof is judged with, so it comes first; torch's ``L2_cache_size`` otherwise.
    On NVIDIA a smaller figure from torch wins (a MIG slice has a share of the L2). On ROCm torch
    reports one XCD's L2 (MI300X: 4 MB of its 32 MB); a stream's workgroups are spread over all
    XCDs, so the spec's total is the right size there."""
    spec_mb = _positive(getattr(spec, "l2_cache_mb", None)) if spec is not None else None
    torch_b = _positive(torch_l2_bytes)
    key = getattr(spec, "key", None) if spec is not None else None
    if spec_mb is not None:
        spec_b = int(spec_mb * _MIB)
        if backend == "cuda" and torch_b is not None and torch_b < spec_b:
            return int(torch_b), f"torch L2_cache_size ({int(torch_b)} B, below the spec's {spec_mb:g} MB)"
        return spec_b, f"spec {key}: l2_cache_mb {spec_mb:g}"
    if torch_b is not None:
        return int(torch_b), "torch L2_cache_size"
    return None, "the L2 size is unknown (no l2_cache_mb in the spec entry, no L2_cache_size from torch)"


def stream_buffer_bytes(l2_bytes: int, fraction: float, buffers: int) -> int:
    """Bytes of each of ``buffers`` equal buffers whose sum is ``fraction`` of the L2, rounded
    down to :data:`L2_ALIGN_BYTES` (0 when that leaves less than one alignment unit)."""
    each = int(l2_bytes * fraction) // max(buffers, 1)
    return (each // L2_ALIGN_BYTES) * L2_ALIGN_BYTES


def graph_repeats(bytes_per_kernel: int) -> int:
    """Kernels in one timed graph: enough to move :data:`L2_REPLAY_BYTES`, within bounds."""
    if bytes_per_kernel <= 0:
        return L2_MIN_REPEATS
    return max(L2_MIN_REPEATS, min(L2_MAX_REPEATS, math.ceil(L2_REPLAY_BYTES / bytes_per_kernel)))


# --------------------------------------------------------------------------------------------
# the fit (pure)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamFit:
    """``seconds per kernel = fixed_s + bytes / bytes_per_s`` fitted over the points."""

    #: The streaming bandwidth (1 / slope); None when the slope is not positive.
    bytes_per_s: float | None
    #: The fixed cost of one kernel on the GPU (its start, ramp and tail), seconds.
    fixed_s: float | None
    #: The largest |measured - fitted| / measured over the points.
    max_residual: float | None
    #: Why the fit is not trusted; None when it is.
    rejected: str | None

    @property
    def ok(self) -> bool:
        return self.rejected is None and self.bytes_per_s is not None


def fit_stream(points: Sequence[tuple[float, float]]) -> StreamFit:
    """Least-squares fit of ``seconds = fixed + bytes / bandwidth`` over ``(bytes per kernel,
    seconds per kernel)`` points, and whether it can be trusted (every point within
    :data:`FIT_MAX_RESIDUAL` of the line, a fixed cost that is not negative, and times that grow
    by at least :data:`FIT_MIN_SPREAD` of the largest from the smallest working set to the
    largest)."""
    pts = [(float(b), float(t)) for b, t in points if b > 0 and t > 0 and math.isfinite(b) and math.isfinite(t)]
    if len({b for b, _ in pts}) < 2:
        return StreamFit(None, None, None, "fewer than two working-set sizes were timed")
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    var = sum((b - mb) ** 2 for b, _ in pts)
    slope = sum((b - mb) * (t - mt) for b, t in pts) / var
    fixed = mt - slope * mb
    if slope <= 0:
        return StreamFit(None, fixed, None, "the time per kernel does not grow with the bytes: "
                                            "the kernels are bound by something else than the L2")
    residual = max(abs(t - (fixed + slope * b)) / t for b, t in pts)
    bw = 1.0 / slope
    smallest = min(pts)
    largest = max(pts)
    if residual > FIT_MAX_RESIDUAL:
        why = (f"the time per kernel is not linear in the bytes (a point is {100 * residual:.0f}% off the line): "
               "the larger working sets may not stay in the L2")
        return StreamFit(bw, fixed, residual, why)
    if fixed < -FIT_MAX_RESIDUAL * smallest[1]:
        return StreamFit(bw, fixed, residual, "the fitted fixed cost per kernel is negative: "
                                              "the points do not describe one stream")
    if largest[1] - smallest[1] < FIT_MIN_SPREAD * largest[1]:
        return StreamFit(bw, fixed, residual, "the fixed cost per kernel swamps the data movement: "
                                              "the working sets are too small to time the L2")
    return StreamFit(bw, max(fixed, 0.0), residual, None)


@dataclass(frozen=True)
class StreamPoint:
    """One timed working set: ``bytes_per_kernel`` moved by each of ``repeats`` kernels of a
    graph, ``median_s`` / ``best_s`` per graph replay over ``iterations`` replays."""

    working_set_bytes: int
    bytes_per_kernel: int
    repeats: int
    iterations: int
    median_s: float
    best_s: float

    @property
    def kernel_s(self) -> float:
        """Median seconds per kernel."""
        return self.median_s / self.repeats

    @property
    def kernel_bytes_per_s(self) -> float:
        """Bytes per second of one kernel, its fixed cost included (a lower bound of the L2's)."""
        return self.bytes_per_kernel / self.kernel_s

    def to_json(self) -> dict[str, Any]:
        return {"working_set_bytes": self.working_set_bytes, "bytes_per_kernel": self.bytes_per_kernel,
                "kernels_per_graph": self.repeats, "iterations": self.iterations, "median_s": self.median_s,
                "best_s": self.best_s, "seconds_per_kernel": self.kernel_s,
                "per_kernel_bytes_per_s": self.kernel_bytes_per_s}


def stream_result(metric: str, what: str, points: Sequence[StreamPoint], l2_bytes: int, l2_source: str,
                  timer: str) -> tuple[Measurement | None, dict[str, Any]]:
    """The measurement of one stream from its timed points (None when the fit is not trusted),
    and what was seen (the points, the fit, why not) for the calibration's ``info``."""
    fit = fit_stream([(p.bytes_per_kernel, p.kernel_s) for p in points])
    seen: dict[str, Any] = {
        "l2_bytes": l2_bytes, "l2_size_source": l2_source, "points": [p.to_json() for p in points],
        "fit_bytes_per_s": fit.bytes_per_s, "fit_fixed_s_per_kernel": fit.fixed_s,
        "fit_max_residual": fit.max_residual,
    }
    if not fit.ok:
        seen["not_stored"] = fit.rejected
        return None, seen
    assert fit.bytes_per_s is not None and fit.fixed_s is not None  # what `ok` means
    sizes = ", ".join(f"{p.working_set_bytes / _MIB:g}" for p in points)
    best_kernel = max(p.kernel_bytes_per_s for p in points)
    repeats = sorted(p.repeats for p in points)
    method = (f"{what} at working sets of {sizes} MiB (L2 {l2_bytes / _MIB:g} MiB, {l2_source}); each timed "
              f"iteration replays a CUDA/HIP graph of {repeats[0]}..{repeats[-1]} "
              f"kernels, median of >= {min(p.iterations for p in points)} iterations, {timer}; value = 1 / slope of "
              f"seconds per kernel against bytes (fixed cost {fit.fixed_s * 1e6:.2f} µs per kernel removed; "
              f"per kernel with it: {fmt_bw(best_kernel)})")
    info = dict(seen)
    info["per_kernel_bytes_per_s"] = best_kernel
    return Measurement(metric, None, float(fit.bytes_per_s), UNITS[metric], method, info), seen


# --------------------------------------------------------------------------------------------
# on the GPU
# --------------------------------------------------------------------------------------------


def _graph_replay(torch: Any, fn: Callable[[], Any], repeats: int) -> Callable[[], Any]:
    """Capture ``repeats`` back-to-back calls of ``fn`` in one CUDA/HIP graph; return its replay.
    (The tests put an eager loop here to run the flow on the CPU.)"""
    cuda = torch.cuda
    # Warm up on a side stream before capturing, as torch's graph documentation asks (lazy
    # initialisation, allocator).
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for _ in range(2):
            fn()
    cuda.current_stream().wait_stream(side)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for _ in range(repeats):
            fn()
    return graph.replay


def measure_l2(ctx: _Ctx, budget_s: float, spec: Any) -> tuple[list[Measurement], dict[str, Any]]:
    """The L2 copy and read streams on ``ctx``'s GPU within about ``budget_s``: the
    measurements whose fit holds, and what was seen (``info["l2"]`` of the calibration; it says
    why a stream is not stored). Raises RuntimeError (torch's errors) when the GPU fails."""
    torch = ctx.torch
    if not ctx.gpu:
        return [], {"not_measured": "the L2 streams run on a GPU only"}
    l2_bytes, source = l2_size_bytes(ctx.device.backend, ctx.device.extra.get("l2_cache_size"), spec)
    if l2_bytes is None:
        return [], {"not_measured": source}
    min_iters, max_iters, warmup_s = ctx.iteration_limits
    fractions = L2_WORKING_SET_FRACTIONS
    largest = stream_buffer_bytes(l2_bytes, max(fractions), 1)
    if stream_buffer_bytes(l2_bytes, min(fractions), 2) < L2_ALIGN_BYTES:
        return [], {"not_measured": f"the L2 ({l2_bytes} B) is too small to time"}
    share = budget_s / (2 * len(fractions))
    src = torch.empty(largest // 4, dtype=torch.float32, device=ctx.dev)
    src.fill_(1.0)
    dst = torch.empty_like(src)
    dst.zero_()
    acc = torch.zeros((), dtype=torch.float32, device=ctx.dev)
    # The noqa: ruff resolves the lambdas' names after the `del` in the `finally` below and calls
    # them undefined; the lambdas run only inside the `try`, before it.
    streams = [
        (METRIC_L2_BW, 2, "dst.copy_(src) of two fp32 buffers, bytes = 2 x buffer (read + write)", "L2 copy",
         lambda n: (lambda: dst[:n].copy_(src[:n]))),  # noqa: F821
        (METRIC_L2_READ, 1, "torch.sum over one fp32 buffer, bytes = buffer (read only)", "L2 read",
         lambda n: (lambda: torch.sum(src[:n], dim=0, out=acc))),  # noqa: F821
    ]
    out: list[Measurement] = []
    seen: dict[str, Any] = {}
    try:
        for metric, buffers, what, label, make in streams:
            points: list[StreamPoint] = []
            for frac in fractions:
                each = stream_buffer_bytes(l2_bytes, frac, buffers)
                moved = each * buffers
                repeats = graph_repeats(moved)
                replay = _graph_replay(torch, make(each // 4), repeats)
                t = _time_op(ctx.timer, replay, share, min_iters=min_iters, max_iters=max_iters,
                             warmup_s=min(warmup_s, 0.2 * share))
                replay = None  # type: ignore[assignment]  # drop the graph before the next one
                points.append(StreamPoint(each * buffers, moved, repeats, len(t.seconds), t.median_s, t.best_s))
            m, info = stream_result(metric, what, points, l2_bytes, source, ctx.timer.description)
            seen[metric] = info
            if m is not None:
                out.append(m)
                ctx.progress(f"{label} {points[-1].working_set_bytes / _MIB:g} MiB working set: {fmt_bw(m.value)} "
                             f"(fit over {len(points)} sizes)")
            else:
                best = max(p.kernel_bytes_per_s for p in points)
                ctx.progress(f"{label}: not stored ({info['not_stored']}; {fmt_bw(best)} per kernel seen)")
    finally:
        del src, dst, acc
        ctx.release()
    return out, seen
