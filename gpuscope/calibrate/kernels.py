"""The timing and the kernels of a calibration: timers (wall clock, CUDA/HIP events), the matmul
sweep over shapes, the device-memory copy and read, cache flushing and warm-up. torch comes in as
an argument, never imported here."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..ceiling_metrics import METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ, UNITS
from ..render.table import fmt_bw, fmt_flops

from .devices import gpu_clocks
from .results import CalibrationDevice, Measurement


Shape = tuple[int, int, int]  # (M, N, K): an (M x K) @ (K x N) matmul, 2*M*N*K FLOPs

# Large shapes in the spirit of Stas Bekman's MAMF finder: squares plus two skinny LLM-like
# GEMMs (a 70B-class MLP down- and up-projection). Sorted by FLOPs at use.
GPU_SHAPES: tuple[Shape, ...] = (
    (4096, 4096, 4096), (1024, 8192, 28672), (8192, 8192, 8192), (4096, 28672, 8192),
    (16384, 16384, 16384),
)
GPU_SHAPES_QUICK: tuple[Shape, ...] = ((4096, 4096, 4096), (8192, 8192, 8192))
CPU_SHAPES: tuple[Shape, ...] = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (256, 4096, 1024),
                                 (2048, 2048, 2048))
CPU_SHAPES_QUICK: tuple[Shape, ...] = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024))

_MIB = 1 << 20
#: Bytes of each of the two copy buffers (the copy moves twice this per iteration).
GPU_COPY_BUFFER_BYTES = {False: 1024 * _MIB, True: 256 * _MIB}
CPU_COPY_BUFFER_BYTES = {False: 512 * _MIB, True: 64 * _MIB}

Progress = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + max(0.0, seconds)

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


class _Timer:
    """Times ``fn`` per iteration: wall clock on the CPU, CUDA/HIP events on a GPU."""

    description = "time.perf_counter per iteration"

    def sync(self) -> None:
        pass

    def iterations(self, fn: Callable[[], Any], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out


class _GpuTimer(_Timer):
    """CUDA/HIP events around each iteration, recorded back to back with one synchronize at the
    end. With ``flush`` (a buffer larger than the L2 / Infinity Cache), the buffer is zeroed
    before each iteration, outside the timed region, so no iteration finds its operands in
    cache (as Triton's do_bench and the MAMF finder do)."""

    def __init__(self, torch: Any, device: Any, flush: Any = None) -> None:
        self.torch = torch
        self.device = device
        self.flush = flush
        self.description = "CUDA events around each iteration"
        if flush is not None:
            mib = flush.numel() * flush.element_size() // _MIB
            self.description += f", L2 flushed ({mib} MiB zeroed) before each"

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def iterations(self, fn: Callable[[], Any], n: int) -> list[float]:
        cuda = self.torch.cuda
        starts = [cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            if self.flush is not None:
                self.flush.zero_()
            s.record()
            fn()
            e.record()
        cuda.synchronize(self.device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


@dataclass
class _Timing:
    seconds: list[float]
    warmup_iterations: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def best_s(self) -> float:
        return min(self.seconds)


def _time_op(timer: _Timer, fn: Callable[[], Any], budget_s: float, *, min_iters: int, max_iters: int,
             warmup_s: float) -> _Timing:
    """Warm ``fn`` up (at least once, then for about ``warmup_s``), then time enough iterations
    to fill about ``budget_s`` (between ``min_iters`` and ``max_iters``)."""
    t0 = time.perf_counter()
    fn()
    timer.sync()
    first_s = time.perf_counter() - t0
    warmups = 1
    warm_end = time.perf_counter() + warmup_s
    while time.perf_counter() < warm_end and warmups < 1000:
        fn()
        warmups += 1
        if warmups % 8 == 0:
            timer.sync()
    timer.sync()
    # One timed iteration tells how many fit in what is left of the budget (its wall time
    # counts what the timer adds around each iteration, such as a cache flush).
    w0 = time.perf_counter()
    probe = timer.iterations(fn, 1)[0]
    wall = time.perf_counter() - w0
    one = max(probe, wall, 1e-7) if warmups > 1 else max(min(max(probe, wall), first_s), 1e-7)
    left = budget_s - (time.perf_counter() - t0)
    n = int(left / one) if left > 0 else 0
    n = max(min_iters - 1, min(max_iters - 1, n))
    seconds = [probe] + (timer.iterations(fn, n) if n > 0 else [])
    return _Timing(seconds, warmups)


# --------------------------------------------------------------------------------------------


def _fp8_support(torch: Any, device: CalibrationDevice) -> tuple[Any, str | None]:
    """(the fp8 torch dtype to use, None) or (None, why fp8 cannot be measured here)."""
    if device.backend == "cpu":
        return None, "FP8 matmul (torch._scaled_mm) needs a GPU with FP8 tensor cores"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None, f"this torch ({torch.__version__}) has no torch._scaled_mm / float8 dtypes"
    if device.backend == "rocm":
        gfx = str(device.extra.get("gcn_arch_name") or device.arch or "")
        if gfx.startswith("gfx942"):
            return getattr(torch, "float8_e4m3fnuz", None), None  # MI300: the FNUZ variant
        if gfx.startswith("gfx950"):
            return torch.float8_e4m3fn, None  # MI350/MI355: OCP FP8
        return None, f"FP8 matmul needs gfx942 or gfx950 (this GPU is {gfx or 'unknown'})"
    major, _, minor = str(device.extra.get("compute_capability", "0.0")).partition(".")
    cc = (int(major or 0), int(minor or 0))
    if cc < (8, 9):
        return None, f"FP8 matmul needs compute capability 8.9 or newer (this GPU is {cc[0]}.{cc[1]})"
    return torch.float8_e4m3fn, None


def _static_skip(torch: Any, device: CalibrationDevice, dtype: str) -> str | None:
    """Why ``dtype`` cannot be measured on ``device`` (None when it can be tried)."""
    if dtype == "fp8":
        return _fp8_support(torch, device)[1]
    if dtype == "int8" and not hasattr(torch, "_int_mm"):
        return f"this torch ({torch.__version__}) has no torch._int_mm"
    if device.backend == "cpu":
        if dtype == "tf32":
            return "TF32 is a GPU tensor-core mode; a CPU has none (measure fp32)"
        return None
    if dtype == "tf32" and device.backend == "cuda":
        major = int(str(device.extra.get("compute_capability", "0.0")).split(".")[0] or 0)
        if major < 8:
            return "TF32 needs compute capability 8.0 or newer"
    if dtype == "bf16" and device.backend == "cuda":
        try:
            if not torch.cuda.is_bf16_supported():
                return "this GPU has no native bf16 matmul"
        except Exception:
            pass
    return None


# --------------------------------------------------------------------------------------------
# matmul
# --------------------------------------------------------------------------------------------


class _Tf32:
    """Turns TF32 matmuls on (or off) and restores the previous setting afterwards."""

    def __init__(self, torch: Any, enabled: bool) -> None:
        self.matmul = torch.backends.cuda.matmul
        self.enabled = enabled
        # torch >= 2.9 has fp32_precision; mixing it with the legacy allow_tf32 raises, so use
        # the new switch where it exists.
        self.new_api = hasattr(self.matmul, "fp32_precision")
        self.saved: Any = None

    def __enter__(self) -> _Tf32:
        if self.new_api:
            self.saved = self.matmul.fp32_precision
            self.matmul.fp32_precision = "tf32" if self.enabled else "ieee"
        else:
            self.saved = self.matmul.allow_tf32
            self.matmul.allow_tf32 = self.enabled
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.new_api:
            self.matmul.fp32_precision = self.saved
        else:
            self.matmul.allow_tf32 = self.saved


def _torch_dtype(torch: Any, dtype: str, fp8: Any) -> Any:
    return {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16, "fp8": fp8, "int8": torch.int8}[dtype]


def _element_bytes(dtype: str) -> int:
    return {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}[dtype]


def _matmul_bytes(shape: Shape, dtype: str) -> int:
    m, n, k = shape
    out_bytes = {"fp8": 2, "int8": 4}.get(dtype, _element_bytes(dtype))
    return (m * k + k * n) * _element_bytes(dtype) + m * n * out_bytes


def _make_matmul(torch: Any, dtype: str, shape: Shape, dev: Any, fp8: Any) -> Callable[[], Any]:
    m, n, k = shape
    if dtype == "int8":
        a = torch.randint(-8, 8, (m, k), dtype=torch.int8, device=dev)
        b = torch.randint(-8, 8, (k, n), dtype=torch.int8, device=dev)
        return lambda: torch._int_mm(a, b)
    if dtype == "fp8":
        # _scaled_mm wants A row-major and B column-major, with per-tensor float32 scales.
        a = torch.randn(m, k, device=dev).to(fp8)
        b = torch.randn(n, k, device=dev).to(fp8).t()
        one = torch.ones((), dtype=torch.float32, device=dev)
        # Fast accumulation is what FP8 GEMMs in inference engines use on NVIDIA; ROCm ignores it.
        fast = getattr(torch.version, "hip", None) is None
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)
    td = _torch_dtype(torch, dtype, fp8)
    # Random values, not zeros or ones: GPUs draw (and clock) differently on trivial data.
    a = torch.randn(m, k, dtype=td, device=dev)
    b = torch.randn(k, n, dtype=td, device=dev)
    c = torch.empty(m, n, dtype=td, device=dev)
    return lambda: torch.mm(a, b, out=c)


def _shape_text(shape: Shape) -> str:
    return "x".join(str(d) for d in shape)


@dataclass
class _Ctx:
    torch: Any
    device: CalibrationDevice
    dev: Any  # the torch device
    timer: _Timer
    quick: bool
    progress: Progress
    #: The timer for matmuls (on a GPU, one that flushes the cache before each iteration).
    matmul_timer: _Timer | None = None

    @property
    def gpu(self) -> bool:
        return self.device.backend != "cpu"

    def free_bytes(self) -> int | None:
        if self.gpu:
            try:
                return int(self.torch.cuda.mem_get_info(self.dev)[0])
            except Exception:
                return None
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except Exception:
            return None

    def release(self) -> None:
        if self.gpu:
            try:
                self.torch.cuda.empty_cache()
            except Exception:
                pass

    @property
    def iteration_limits(self) -> tuple[int, int, float]:
        """(min timed iterations, max timed iterations, warmup seconds per shape)."""
        if self.gpu:
            return (3, 100, 0.1) if self.quick else (5, 200, 0.3)
        return (2, 20, 0.0) if self.quick else (3, 50, 0.05)


def _measure_matmul(ctx: _Ctx, dtype: str, shapes: Sequence[Shape], budget_s: float, fp8: Any) -> Measurement:
    """The best median matmul FLOP/s of ``dtype`` over ``shapes`` (smallest first, as many as
    fit in ``budget_s``). Raises RuntimeError when no shape could be measured."""
    torch = ctx.torch
    deadline = _Deadline(budget_s)
    ordered = sorted(shapes, key=lambda s: (s[0] * s[1] * s[2], s))
    min_iters, max_iters, warmup_s = ctx.iteration_limits
    timer = ctx.matmul_timer or ctx.timer
    per_shape: list[dict[str, Any]] = []
    skipped_shapes: list[dict[str, Any]] = []
    best_rate = 0.0
    best_shape: Shape | None = None
    first_error: str | None = None
    for i, shape in enumerate(ordered):
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        if best_rate > 0:
            predicted_s = flops / best_rate * (min_iters + 2)
            if predicted_s > deadline.left():
                skipped_shapes.extend({"shape": list(s), "reason": "time budget"} for s in ordered[i:])
                break
        need = _matmul_bytes(shape, dtype)
        free = ctx.free_bytes()
        if free is not None and need > 0.6 * free:
            skipped_shapes.append({"shape": list(shape), "reason": f"needs {need / 2**30:.1f} GiB, "
                                                                     f"{free / 2**30:.1f} GiB free"})
            continue
        shapes_left = len(ordered) - i
        shape_budget = max(deadline.left() / shapes_left, 0.0)
        try:
            fn = _make_matmul(torch, dtype, shape, ctx.dev, fp8)
            timing = _time_op(timer, fn, shape_budget, min_iters=min_iters, max_iters=max_iters,
                              warmup_s=min(warmup_s, 0.3 * shape_budget))
        except Exception as exc:  # torch.cuda.OutOfMemoryError, unsupported dtypes or shapes, ...
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            first_error = first_error or reason
            skipped_shapes.append({"shape": list(shape), "reason": reason[:200]})
            continue
        finally:
            fn = None  # type: ignore[assignment]  # free the operands before the next shape
            ctx.release()
        rate = flops / timing.median_s
        per_shape.append({
            "shape": list(shape), "flops": flops, "iterations": len(timing.seconds),
            "warmup_iterations": timing.warmup_iterations, "median_s": timing.median_s,
            "best_s": timing.best_s, "flops_per_s": rate, "best_flops_per_s": flops / timing.best_s,
        })
        ctx.progress(f"{dtype:>4} matmul {_shape_text(shape):>17}: {fmt_flops(rate)} "
                     f"(median of {len(timing.seconds)})")
        if rate > best_rate:
            best_rate, best_shape = rate, shape
    if best_shape is None:
        raise RuntimeError(first_error or "no shape fits in memory or in the time budget")
    op = {"fp8": "torch._scaled_mm (e4m3, bf16 out, fast accumulation on NVIDIA)",
          "int8": "torch._int_mm (int32 out)"}.get(dtype, "torch.mm")
    mode = {"tf32": ", TF32 on", "fp32": ", TF32 off" if ctx.gpu else ""}.get(dtype, "")
    shapes_text = ", ".join(_shape_text(s["shape"]) for s in per_shape)
    method = (f"{op}{mode}: best of {len(per_shape)} MxNxK shapes ({shapes_text}), median of >= {min_iters} "
              f"timed iterations each after warmup, {timer.description}")
    info: dict[str, Any] = {"best_shape": list(best_shape), "shapes": per_shape}
    if skipped_shapes:
        info["skipped_shapes"] = skipped_shapes
    if dtype == "int8":
        info["note"] = "integer operations per second (2*M*N*K per matmul)"
    if ctx.gpu and ctx.device.index is not None:
        tel = gpu_clocks(ctx.device)[1]
        if tel:
            info["telemetry_after"] = tel
    return Measurement(METRIC_MATMUL, dtype, best_rate, UNITS[METRIC_MATMUL], method, info)


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------


def _measure_memory(ctx: _Ctx, budget_s: float) -> list[Measurement]:
    """Copy bandwidth (read + write) and read-only bandwidth over buffers far larger than any
    cache. Raises RuntimeError when the buffers cannot be allocated."""
    torch = ctx.torch
    target = (GPU_COPY_BUFFER_BYTES if ctx.gpu else CPU_COPY_BUFFER_BYTES)[ctx.quick]
    free = ctx.free_bytes()
    size = target
    if free is not None:
        size = min(size, int(free * (0.2 if ctx.gpu else 0.125)))
    size = (size // (4 * _MIB)) * (4 * _MIB)
    if size < 16 * _MIB:
        raise RuntimeError(f"not enough free memory for a bandwidth test ({(free or 0) / _MIB:.0f} MiB free)")
    min_iters, max_iters, warmup_s = ctx.iteration_limits
    mib = size // _MIB
    bufs = {"src": torch.empty(size // 4, dtype=torch.float32, device=ctx.dev)}
    bufs["src"].fill_(1.0)
    bufs["dst"] = torch.empty_like(bufs["src"])
    bufs["dst"].zero_()  # touch every page before timing (first-touch faults are not bandwidth)

    def timed(fn: Callable[[], Any], share: float) -> _Timing:
        return _time_op(ctx.timer, fn, budget_s * share, min_iters=min_iters, max_iters=max_iters,
                        warmup_s=min(warmup_s, 0.1 * budget_s))

    def row(metric: str, t: _Timing, moved: int, what: str) -> Measurement:
        info = {"buffer_bytes": size, "bytes_per_iteration": moved, "iterations": len(t.seconds),
                "median_s": t.median_s, "best_s": t.best_s, "best_bytes_per_s": moved / t.best_s}
        method = f"{what}, median of {len(t.seconds)} iterations, {ctx.timer.description}"
        return Measurement(metric, None, moved / t.median_s, UNITS[metric], method, info)

    out: list[Measurement] = []
    try:
        copy_t = timed(lambda: bufs["dst"].copy_(bufs["src"]), 0.55)
        out.append(row(METRIC_MEM_BW, copy_t, 2 * size,
                       f"dst.copy_(src) of two {mib} MiB fp32 buffers, bytes = 2 x size (read + write)"))
        ctx.progress(f"memory copy {mib} MiB -> {mib} MiB: {fmt_bw(out[-1].value)} (median of {len(copy_t.seconds)})")
        del bufs["dst"]
        ctx.release()
        read_t = timed(lambda: bufs["src"].sum(), 0.4)
        out.append(row(METRIC_MEM_READ, read_t, size,
                       f"src.sum() over a {mib} MiB fp32 buffer, bytes = size (read only)"))
        ctx.progress(f"memory read {mib} MiB (sum): {fmt_bw(out[-1].value)} (median of {len(read_t.seconds)})")
    finally:
        bufs.clear()
        ctx.release()
    return out


# --------------------------------------------------------------------------------------------


#: Bytes zeroed before each timed GPU matmul iteration: more than any L2 / Infinity Cache
#: (MI300X: 256 MB). Halved, or dropped, when free memory is short.
FLUSH_BYTES = 512 * _MIB


def _flush_buffer(ctx: _Ctx) -> Any:
    free = ctx.free_bytes() or 0
    size = FLUSH_BYTES
    while size >= 128 * _MIB and size > 0.05 * free:
        size //= 2
    if size < 128 * _MIB:
        return None
    try:
        return ctx.torch.empty(size // 4, dtype=ctx.torch.int32, device=ctx.dev)
    except RuntimeError:
        return None


def _gpu_torch_device(torch: Any, index: int) -> Any:
    # One place that names the GPU as torch sees it (the tests put a fake GPU on the CPU here).
    return torch.device("cuda", index)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


#: Side of the square bf16 matmuls that warm a GPU up before anything is timed.
_WARM_SIZE = 4096


def _warm_gpu(ctx: _Ctx, seconds: float) -> None:
    """bf16/fp16 matmuls for a moment so that clocks have ramped up before anything is timed."""
    torch = ctx.torch
    try:
        td = torch.bfloat16 if ctx.device.backend != "cuda" or torch.cuda.is_bf16_supported() else torch.float16
        a = torch.randn(_WARM_SIZE, _WARM_SIZE, dtype=td, device=ctx.dev)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            torch.mm(a, a)
            torch.cuda.synchronize(ctx.dev)
        del a
    except RuntimeError:
        pass  # warming up is a nicety; the measurements report real failures
    ctx.release()
