"""Measured ("achievable") ceilings: what matmul and device memory really reach on this machine.

``gpuscope calibrate`` runs :func:`measure` (torch matmuls over a small shape sweep, a large
device-memory copy and a read-only reduction; on a GPU when torch sees one, else on the host
CPU), then :func:`write_calibration` stores one calibration (one ``id``, one row per metric) in
the ``ceilings`` table in a single transaction. Nothing touches the store until the measurement
has finished, so a failed or interrupted calibration leaves it as it was.

The analysis side reads calibrations through the store's read layer
(``gpuscope.store.read.latest_ceilings`` and ``list_calibrations``). See ``docs/calibrate.md``.

torch is imported inside the functions that measure, never at module import.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import GpuscopeError, InputError
from .store.ceilings import (  # noqa: F401 - the metric names are the store's, re-exported
    METRIC_MATMUL,
    METRIC_MEM_BW,
    METRIC_MEM_READ,
    ROOF_DTYPES,
    _dtype_order,
)

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: What a GPU calibration measures unless told otherwise (fp8 is skipped where unsupported).
DEFAULT_GPU_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32", "tf32", "fp8")
#: What a CPU calibration measures unless told otherwise.
DEFAULT_CPU_DTYPES: tuple[str, ...] = ("fp32", "bf16")

METRICS: tuple[str, ...] = (METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ)
UNITS = {METRIC_MATMUL: "FLOP/s", METRIC_MEM_BW: "B/s", METRIC_MEM_READ: "B/s"}

BACKENDS = ("cuda", "rocm", "cpu")

_DTYPE_ALIASES = {
    "fp64": "fp64", "float64": "fp64", "double": "fp64", "f64": "fp64",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
    "int8": "int8", "i8": "int8",
}

#: Overall time budgets in seconds (``--seconds`` overrides): (gpu, cpu) x (full, quick).
DEFAULT_SECONDS = {("gpu", False): 60.0, ("gpu", True): 12.0, ("cpu", False): 20.0, ("cpu", True): 2.0}
#: Share of the budget that the memory measurements get; the rest is split over the dtypes.
_MEMORY_SHARE = 0.15

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
# results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """The device a calibration ran on."""

    backend: str  # "cuda", "rocm" or "cpu"
    name: str | None
    index: int | None = None
    uuid: str | None = None
    #: "9.0" (NVIDIA compute capability), the gfx name on ROCm ("gfx942"), the CPU architecture.
    arch: str | None = None
    memory_total_bytes: int | None = None
    #: SMs (NVIDIA), CUs (AMD) or logical CPUs.
    compute_units: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc = {"backend": self.backend, "name": self.name, "index": self.index, "uuid": self.uuid,
               "arch": self.arch, "memory_total_bytes": self.memory_total_bytes,
               "compute_units": self.compute_units}
        doc.update(self.extra)
        return doc


@dataclass(frozen=True)
class Measurement:
    """One measured ceiling: one row of the ``ceilings`` table."""

    metric: str
    dtype: str | None
    value: float
    unit: str
    method: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """What :func:`measure` found; :func:`write_calibration` stores it."""

    device: DeviceInfo
    measurements: list[Measurement]
    #: (dtype, reason) for every requested dtype that was not measured.
    skipped: list[tuple[str, str]]
    measured_ns: int
    spec_key: str | None = None
    #: The spec-database entry (whatever ``gpuscope.specs`` returns), None when unidentified.
    spec: Any = None
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------------


def parse_dtypes(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"bf16,fp16"`` (or a list) as roof dtype keys, in the order given, without repeats.

    Aliases such as ``bfloat16``, ``half`` and ``float32`` are accepted. Raises
    :class:`InputError` on an unknown or empty list."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in parts:
        word = str(raw).strip().lower()
        if not word:
            continue
        key = _DTYPE_ALIASES.get(word)
        if key is None:
            raise InputError("--dtypes", f"unknown dtype {word!r} (choose from {', '.join(ROOF_DTYPES)})")
        if key not in out:
            out.append(key)
    if not out:
        raise InputError("--dtypes", f"no dtype given (choose from {', '.join(ROOF_DTYPES)})")
    return tuple(out)


def check_seconds(seconds: float | None) -> float | None:
    """``--seconds``: None, or a finite positive number (else :class:`InputError`)."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError("--seconds", f"must be a positive number of seconds, not {seconds:g}")
    return float(seconds)


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
# devices
# --------------------------------------------------------------------------------------------


def cpu_model_name() -> str:
    """The host CPU's name: /proc/cpuinfo "model name", else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_device(torch: Any) -> DeviceInfo:
    mem_total = None
    try:
        import psutil

        mem_total = int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unreadable: the size is only informative
        pass
    return DeviceInfo(
        backend="cpu", name=cpu_model_name(), index=None, uuid=None, arch=platform.machine() or None,
        memory_total_bytes=mem_total, compute_units=os.cpu_count(),
        extra={"torch_threads": torch.get_num_threads()},
    )


def _gpu_device(torch: Any, index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    backend = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    uuid = getattr(props, "uuid", None)
    uuid_text = str(uuid) if uuid is not None else None
    if backend == "cuda" and uuid_text and not uuid_text.startswith("GPU-"):
        uuid_text = "GPU-" + uuid_text  # the form NVML and nvidia-smi print
    gcn = getattr(props, "gcnArchName", None) or None
    cc = f"{props.major}.{props.minor}"
    extra: dict[str, Any] = {"compute_capability": cc}
    if gcn:
        extra["gcn_arch_name"] = gcn
    for attr in ("pci_bus_id", "pci_device_id", "pci_domain_id", "L2_cache_size", "warp_size"):
        v = getattr(props, attr, None)
        if v is not None:
            extra[attr.lower()] = v
    return DeviceInfo(
        backend=backend, name=str(props.name), index=index, uuid=uuid_text,
        arch=(gcn.split(":")[0] if gcn else cc), memory_total_bytes=int(props.total_memory),
        compute_units=int(getattr(props, "multi_processor_count", 0)) or None, extra=extra,
    )


def identify_spec(device: DeviceInfo) -> tuple[Any | None, str | None]:
    """(the spec-database entry of a GPU, a note on how or why not); (None, ...) for CPUs,
    unknown GPUs, or when the spec database (``gpuscope.specs``) is not available."""
    if device.backend == "cpu" or not device.name:
        return None, None
    try:
        from .specs import load_specs

        db = load_specs()
        hints: dict[str, Any] = {"memory_bytes": device.memory_total_bytes, "compute_units": device.compute_units}
        if device.backend == "rocm":
            hints.update(vendor="amd", arch_target=device.arch, warp_size=device.extra.get("warp_size"))
        else:
            hints.update(vendor="nvidia", compute_capability=device.extra.get("compute_capability"))
        try:
            match = db.identify(name=device.name, **hints)
        except TypeError:  # an identify() that takes the name only
            match = db.identify(name=device.name)
    except (ImportError, AttributeError):
        return None, "no spec database in this gpuscope"
    except GpuscopeError as exc:  # e.g. an ambiguous name: leave the calibration unidentified
        return None, str(exc)
    except Exception as exc:  # the measurement matters more than the spec lookup
        return None, f"spec lookup failed: {type(exc).__name__}: {exc}"
    spec = getattr(match, "spec", None) if match is not None else None
    note = getattr(match, "note", None) if match is not None else None
    via = getattr(match, "via", None) if match is not None else None
    if spec is None:
        return None, note or f"{device.name!r} is not in the spec database"
    return spec, note or (f"identified by {via}" if via else None)


def _spec_key(spec: Any) -> str | None:
    key = getattr(spec, "key", None) if spec is not None else None
    return str(key) if key else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def spec_peak(spec: Any, metric: str, dtype: str | None) -> float | None:
    """The spec's peak for a calibration metric (FLOP/s or B/s), None when unknown.

    The spec entry comes from ``gpuscope.specs``; this reads it defensively (a method
    ``peak_flops_per_s(dtype)`` or a mapping ``flops_per_s`` / ``peak_flops_per_s`` by dtype;
    ``mem_bw_bytes_per_s`` / ``memory_bandwidth_bytes_per_s`` for bandwidth)."""
    if spec is None:
        return None
    if metric == METRIC_MATMUL:
        if dtype is None:
            return None
        for name in ("peak_flops_per_s", "dense_flops_per_s", "flops_per_s", "peak_flops"):
            v = getattr(spec, name, None)
            if v is None:
                continue
            try:
                got = v(dtype) if callable(v) else (v.get(dtype) if hasattr(v, "get") else None)
            except (KeyError, ValueError, TypeError, GpuscopeError):
                got = None
            if _num(got) is not None:
                return _num(got)
        return None
    for name in ("mem_bw_bytes_per_s", "memory_bandwidth_bytes_per_s", "peak_mem_bw_bytes_per_s",
                 "mem_bandwidth_bytes_per_s"):
        v = _num(getattr(spec, name, None))
        if v is not None:
            return v
    return None


def _gpu_telemetry(torch: Any, index: int) -> dict[str, Any]:
    """Clocks, power and temperature right now (through torch's NVML/AMD SMI helpers), or {}."""
    out: dict[str, Any] = {}
    for key, fn_name, scale in (("sm_clock_mhz", "clock_rate", 1.0), ("power_w", "power_draw", 1e-3),
                                ("temperature_c", "temperature", 1.0)):
        fn = getattr(torch.cuda, fn_name, None)
        if fn is None:
            continue
        try:
            v = fn(index)
        except Exception:  # pynvml / amdsmi missing or the query unsupported
            continue
        if isinstance(v, (int, float)) and v >= 0:
            out[key] = v * scale
    return out


def _nvml_limits(uuid: str | None) -> dict[str, Any]:
    """Max SM clock and enforced power limit from NVML (nvidia-ml-py), or {}."""
    if not uuid:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    out: dict[str, Any] = {}
    try:
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        try:
            out["max_sm_clock_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
        except Exception:
            pass
        try:
            out["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except Exception:
            pass
    except Exception:
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def _fp8_support(torch: Any, device: DeviceInfo) -> tuple[Any, str | None]:
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


def _static_skip(torch: Any, device: DeviceInfo, dtype: str) -> str | None:
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


def _fmt_flops(v: float) -> str:
    return f"{v / 1e12:.1f} TFLOP/s" if v >= 1e12 else f"{v / 1e9:.1f} GFLOP/s"


def _fmt_bw(v: float) -> str:
    return f"{v / 1e9:,.1f} GB/s"


@dataclass
class _Ctx:
    torch: Any
    device: DeviceInfo
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
        ctx.progress(f"{dtype:>4} matmul {_shape_text(shape):>17}: {_fmt_flops(rate)} "
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
        tel = _gpu_telemetry(torch, ctx.device.index)
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
        ctx.progress(f"memory copy {mib} MiB -> {mib} MiB: {_fmt_bw(out[-1].value)} (median of {len(copy_t.seconds)})")
        del bufs["dst"]
        ctx.release()
        read_t = timed(lambda: bufs["src"].sum(), 0.4)
        out.append(row(METRIC_MEM_READ, read_t, size,
                       f"src.sum() over a {mib} MiB fp32 buffer, bytes = size (read only)"))
        ctx.progress(f"memory read {mib} MiB (sum): {_fmt_bw(out[-1].value)} (median of {len(read_t.seconds)})")
    finally:
        bufs.clear()
        ctx.release()
    return out


# --------------------------------------------------------------------------------------------
# the calibration
# --------------------------------------------------------------------------------------------


def _quiet(_: str) -> None:
    pass


def measure(*, device: int | None = None, dtypes: Sequence[str] | None = None, quick: bool = False,
            seconds: float | None = None, cpu: bool = False, progress: Progress | None = None) -> Calibration:
    """Measure achievable matmul FLOP/s per dtype and memory bandwidth; store nothing.

    On the GPU ``device`` (default: the current one) when torch sees a GPU and ``cpu`` is
    false, else on the host CPU. ``dtypes`` are roof dtype keys (default
    :data:`DEFAULT_GPU_DTYPES` / :data:`DEFAULT_CPU_DTYPES`); ones this device cannot run are
    reported in ``skipped``. ``seconds`` is a rough overall budget (default
    :data:`DEFAULT_SECONDS`); ``quick`` runs a tiny sweep. ``progress`` gets one line per
    measurement.

    Raises :class:`InputError` for bad arguments (unknown dtype, a device out of range, a
    non-positive budget, nothing measurable) and :class:`GpuscopeError` when the measurement
    fails. Needs torch (an :class:`InputError` says how to install it when absent).
    """
    say = progress or _quiet
    wanted = parse_dtypes(dtypes) if dtypes is not None else None
    seconds = check_seconds(seconds)
    if device is not None and device < 0:
        raise InputError("--device", f"must be a GPU index >= 0, not {device}")
    if device is not None and cpu:
        raise InputError("--device", "cannot be combined with --cpu")
    try:
        import torch
    except ImportError:
        raise InputError("torch", "PyTorch is not installed: pip install 'gpuscope[torch]'") from None

    use_gpu = not cpu and bool(torch.cuda.is_available())
    if device is not None and not use_gpu:
        raise InputError("--device", f"GPU {device} requested but torch {torch.__version__} sees no GPU "
                                     "(use --cpu to calibrate the host CPU)")
    if use_gpu:
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if device is None else device
        if index >= count:
            raise InputError("--device", f"no GPU {index}: torch sees {count} (0..{count - 1})")
        try:
            info_dev = _gpu_device(torch, index)
        except Exception as exc:
            raise GpuscopeError(f"GPU {index}: cannot read its properties: {exc}") from None
        dev = _gpu_torch_device(torch, index)
        timer: _Timer = _GpuTimer(torch, dev)
    else:
        info_dev = _cpu_device(torch)
        dev = torch.device("cpu")
        timer = _Timer()
    kind = "gpu" if use_gpu else "cpu"
    budget = seconds if seconds is not None else DEFAULT_SECONDS[(kind, quick)]
    requested = wanted or (DEFAULT_GPU_DTYPES if use_gpu else DEFAULT_CPU_DTYPES)
    fp8, _ = _fp8_support(torch, info_dev)

    skipped: list[tuple[str, str]] = []
    todo: list[str] = []
    for d in requested:
        reason = _static_skip(torch, info_dev, d)
        if reason:
            skipped.append((d, reason))
        else:
            todo.append(d)
    if not todo:
        raise InputError("--dtypes", f"nothing measurable on {info_dev.name} ({info_dev.backend}): "
                         + "; ".join(f"{d}: {r}" for d, r in skipped))

    ctx = _Ctx(torch, info_dev, dev, timer, quick, say)
    spec, spec_note = identify_spec(info_dev)
    started = time.monotonic()
    say(f"calibrating {info_dev.name} ({info_dev.backend}{', GPU ' + str(info_dev.index) if use_gpu else ''}); "
        f"about {budget:g} s")
    if use_gpu:
        torch.cuda.set_device(dev)
        _warm_gpu(ctx, min(1.0 if not quick else 0.2, 0.05 * budget))

    measurements: list[Measurement] = []
    try:
        with torch.inference_mode():
            try:
                measurements.extend(_measure_memory(ctx, budget * _MEMORY_SHARE))
            except Exception as exc:  # torch raises RuntimeError mostly, but not only
                raise GpuscopeError(f"memory bandwidth measurement failed on {info_dev.name}: "
                                    f"{_first_line(exc)}") from None
            if use_gpu:
                shapes = GPU_SHAPES_QUICK if quick else GPU_SHAPES
                ctx.matmul_timer = _GpuTimer(torch, dev, _flush_buffer(ctx))
            else:
                shapes = CPU_SHAPES_QUICK if quick else CPU_SHAPES
            matmul_budget = max(budget - (time.monotonic() - started), 0.0)
            deadline = _Deadline(matmul_budget)
            for n, d in enumerate(todo):
                slice_s = deadline.left() / (len(todo) - n)
                try:
                    with _Tf32(torch, d == "tf32") if use_gpu and d in ("tf32", "fp32") else contextlib.nullcontext():
                        measurements.append(_measure_matmul(ctx, d, shapes, slice_s, fp8))
                except Exception as exc:  # one dtype failing must not lose the others
                    reason = f"failed: {_first_line(exc)}"
                    skipped.append((d, reason))
                    say(f"{d:>4} matmul skipped: {reason}")
    finally:
        ctx.matmul_timer = None  # drops the flush buffer
        ctx.release()
    if not any(m.metric == METRIC_MATMUL for m in measurements):
        raise GpuscopeError(f"no matmul could be measured on {info_dev.name}: "
                            + "; ".join(f"{d}: {r}" for d, r in skipped))

    info: dict[str, Any] = {
        "torch_version": torch.__version__,
        "cuda_version": getattr(torch.version, "cuda", None),
        "hip_version": getattr(torch.version, "hip", None),
        "quick": quick,
        "budget_s": budget,
        "elapsed_s": round(time.monotonic() - started, 3),
        "python": platform.python_version(),
    }
    if spec_note:
        info["spec_note"] = spec_note
    if use_gpu:
        info["limits"] = _nvml_limits(info_dev.uuid) if info_dev.backend == "cuda" else {}
        info["telemetry_end"] = _gpu_telemetry(torch, info_dev.index or 0)
    else:
        info["torch_threads"] = torch.get_num_threads()
    return Calibration(info_dev, measurements, skipped, now_ns(), _spec_key(spec), spec, info)


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


def now_ns() -> int:
    """Wall-clock nanoseconds since the Unix epoch."""
    return time.time_ns()


# --------------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------------


def _row_info(cal: Calibration, m: Measurement) -> str:
    doc = dict(cal.info)
    doc["device"] = cal.device.to_json()
    doc.update(m.info)
    return json.dumps(doc, default=str, sort_keys=True)


def write_calibration(con: duckdb.DuckDBPyConnection, cal: Calibration, *, host: str | None = None) -> int:
    """Store ``cal`` as one calibration (one id, one row per measurement) in one transaction;
    returns its id."""
    from .store import ceilings

    return ceilings.insert_calibration(
        con, measured_ns=cal.measured_ns, host=host, device_name=cal.device.name, device_uuid=cal.device.uuid,
        spec_key=cal.spec_key, backend=cal.device.backend,
        rows=[(m.metric, m.dtype, float(m.value), m.unit, m.method, _row_info(cal, m)) for m in cal.measurements])


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def calibration_json(cal: Calibration, calibration_id: int | None, host: str | None) -> dict[str, Any]:
    """The ``calibrate --json`` document."""
    results = []
    for m in cal.measurements:
        r: dict[str, Any] = {"metric": m.metric, "dtype": m.dtype, "value": m.value, "unit": m.unit,
                             "method": m.method}
        if m.metric == METRIC_MATMUL and "best_shape" in m.info:
            r["best_shape"] = m.info["best_shape"]
        peak = spec_peak(cal.spec, m.metric, m.dtype)
        if peak:
            r["spec_value"] = peak
            r["pct_of_spec"] = round(100.0 * m.value / peak, 2)
            r["fraction_of_spec"] = m.value / peak
        results.append(r)
    device = cal.device.to_json()
    device["spec_key"] = cal.spec_key
    return {
        "calibration_id": calibration_id,
        "measured_ns": cal.measured_ns,
        "host": host,
        "device": device,
        "backend": cal.device.backend,
        "spec_key": cal.spec_key,
        "results": results,
        "skipped": [{"dtype": d, "reason": r} for d, r in cal.skipped],
        "info": cal.info,
    }


def render_calibration(doc: dict[str, Any], db_path: str | None = None) -> str:
    """The ``calibrate`` text report from :func:`calibration_json`'s document."""
    from .report import table

    dev = doc["device"]
    bits = [doc["backend"]]
    if dev.get("backend") == "cpu":
        if dev.get("torch_threads"):
            bits.append(f"{dev['torch_threads']} torch threads")
    else:
        if dev.get("index") is not None:
            bits.append(f"GPU {dev['index']}")
        if dev.get("gcn_arch_name"):
            bits.append(str(dev["gcn_arch_name"]).split(":")[0])
        elif dev.get("compute_capability"):
            bits.append(f"cc {dev['compute_capability']}")
        if doc.get("spec_key"):
            bits.append(f"spec {doc['spec_key']}")
    where = f" in {db_path}" if db_path else ""
    lines = [f"calibration {doc['calibration_id']} stored{where}",
             f"device: {dev.get('name')} ({', '.join(bits)}) on {doc.get('host')}"]
    if dev.get("uuid"):
        lines.append(f"uuid:   {dev['uuid']}")
    names = {METRIC_MATMUL: "matmul", METRIC_MEM_BW: "memory copy (r+w)", METRIC_MEM_READ: "memory read"}
    rows = []
    for r in sorted(doc["results"], key=lambda r: (METRICS.index(r["metric"]) if r["metric"] in METRICS else 9,
                                                   _dtype_order(r["dtype"]))):
        fmt = _fmt_flops if r["unit"] == "FLOP/s" else _fmt_bw
        shape = "x".join(str(x) for x in r["best_shape"]) if r.get("best_shape") else None
        rows.append([names.get(r["metric"], r["metric"]), r["dtype"], fmt(r["value"]),
                     fmt(r["spec_value"]) if r.get("spec_value") else None,
                     f"{r['pct_of_spec']:.1f}%" if r.get("pct_of_spec") is not None else None, shape])
    lines += ["", table(["metric", "dtype", "measured", "spec peak", "% of spec", "best shape"], rows, "llrrrl")]
    for s in doc["skipped"]:
        lines.append(f"skipped {s['dtype']}: {s['reason']}")
    if doc["backend"] == "cpu":
        lines.append("note: CPU numbers describe the host through torch, not a GPU roof")
    return "\n".join(lines)
