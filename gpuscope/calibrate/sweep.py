"""The calibration itself: :func:`measure` picks the device, runs the memory and matmul
measurements within the time budget and returns a :class:`Calibration`; it stores nothing."""
from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Sequence
from typing import Any

from ..errors import GpuscopeError, InputError, ParameterError
from ..ceiling_metrics import METRIC_MATMUL

from .devices import _cpu_device, _gpu_device, _spec_key, gpu_clocks, identify_spec
from .kernels import (
    CPU_SHAPES,
    CPU_SHAPES_QUICK,
    GPU_SHAPES,
    GPU_SHAPES_QUICK,
    Progress,
    _Ctx,
    _Deadline,
    _first_line,
    _flush_buffer,
    _fp8_support,
    _GpuTimer,
    _gpu_torch_device,
    _measure_matmul,
    _measure_memory,
    _static_skip,
    _Tf32,
    _Timer,
    _warm_gpu,
)
from .l2 import measure_l2
from .results import DEFAULT_CPU_DTYPES, DEFAULT_GPU_DTYPES, DEFAULT_SECONDS, Calibration, Measurement, check_seconds, parse_dtypes


#: Share of the budget that the memory measurements get; the rest is split over the dtypes.
_MEMORY_SHARE = 0.15
#: Share of the budget that the L2 streams get (GPU only; six short graph replays).
_L2_SHARE = 0.05


# --------------------------------------------------------------------------------------------
# the calibration
# --------------------------------------------------------------------------------------------


def _quiet(_: str) -> None:
    pass


def measure(*, device: int | None = None, dtypes: Sequence[str] | None = None, quick: bool = False,
            seconds: float | None = None, cpu: bool = False, progress: Progress | None = None) -> Calibration:
    """Measure achievable matmul FLOP/s per dtype and memory bandwidth (and on a GPU the L2's:
    :func:`gpuscope.calibrate.l2.measure_l2`, whose findings go to ``info["l2"]``); store nothing.

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
        raise ParameterError("device", "must be a GPU index >= 0, not {value}", {"value": device})
    if device is not None and cpu:
        raise ParameterError("device", "cannot be combined with {cpu}")
    try:
        import torch
    except ImportError:
        raise InputError("torch", "PyTorch is not installed: pip install 'gpuscope[torch]'") from None

    use_gpu = not cpu and bool(torch.cuda.is_available())
    if device is not None and not use_gpu:
        raise ParameterError("device", "GPU {value} requested but torch {torch} sees no GPU "
                             "(use {cpu} to calibrate the host CPU)", {"value": device, "torch": torch.__version__})
    if use_gpu:
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if device is None else device
        if index >= count:
            raise ParameterError("device", "no GPU {value}: torch sees {count} (0..{last})",
                                 {"value": index, "count": count, "last": count - 1})
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
        raise ParameterError("dtypes", "nothing measurable on {device} ({backend}): {reasons}",
                             {"device": info_dev.name, "backend": info_dev.backend,
                              "reasons": "; ".join(f"{d}: {r}" for d, r in skipped)})

    ctx = _Ctx(torch, info_dev, dev, timer, quick, say)
    spec, spec_note = identify_spec(info_dev)
    info_dev.spec_key = _spec_key(spec)
    started = time.monotonic()
    say(f"calibrating {info_dev.name} ({info_dev.backend}{', GPU ' + str(info_dev.index) if use_gpu else ''}); "
        f"about {budget:g} s")
    if use_gpu:
        torch.cuda.set_device(dev)
        _warm_gpu(ctx, min(1.0 if not quick else 0.2, 0.05 * budget))

    measurements: list[Measurement] = []
    l2_seen: dict[str, Any] = {}
    try:
        with torch.inference_mode():
            try:
                measurements.extend(_measure_memory(ctx, budget * _MEMORY_SHARE))
            except Exception as exc:  # torch raises RuntimeError mostly, but not only
                raise GpuscopeError(f"memory bandwidth measurement failed on {info_dev.name}: "
                                    f"{_first_line(exc)}") from None
            if use_gpu:
                try:
                    l2_rows, l2_seen = measure_l2(ctx, budget * _L2_SHARE, spec)
                except Exception as exc:  # the L2 is a refinement: its failure must not lose the rest
                    l2_rows, l2_seen = [], {"not_measured": f"failed: {_first_line(exc)}"}
                    ctx.release()
                measurements.extend(l2_rows)
                if "not_measured" in l2_seen:
                    say(f"L2 bandwidth not measured: {l2_seen['not_measured']}")
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
    if l2_seen:
        info["l2"] = l2_seen
    if use_gpu:
        info["limits"], info["telemetry_end"] = gpu_clocks(info_dev)
    else:
        info["torch_threads"] = torch.get_num_threads()
    return Calibration(info_dev, measurements, skipped, now_ns(), _spec_key(spec), spec, info)


def now_ns() -> int:
    """Wall-clock nanoseconds since the Unix epoch."""
    return time.time_ns()
