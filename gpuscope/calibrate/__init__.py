"""Measured ("achievable") ceilings: what matmul and device memory really reach on this machine.

``gpuscope calibrate`` runs :func:`measure` (torch matmuls over a small shape sweep, a large
device-memory copy and a read-only reduction, and on a GPU the same two streams inside the L2;
on a GPU when torch sees one, else on the host CPU), then :func:`write_calibration` stores one
calibration (one ``id``, one row per metric) in the ``ceilings`` table in a single transaction. Nothing touches the store until the measurement
has finished, so a failed or interrupted calibration leaves it as it was.

Rooms: :mod:`.results` (arguments and result types), :mod:`.devices` (the device's identity,
spec entry and clocks, through :mod:`gpuscope.device` and ``collectors/``), :mod:`.kernels`
(timers, the matmul and memory kernels), :mod:`.l2` (the L2 streams and their fit), :mod:`.sweep`
(:func:`measure`), :mod:`.report` (storing, the ``--json`` document and the text).

The analysis side reads calibrations through the store's read layer
(``gpuscope.store.read.latest_ceilings`` and ``list_calibrations``). See ``docs/calibrate.md``.

torch is imported inside the functions that measure, never at module import.
"""
from __future__ import annotations

from ..ceiling_metrics import (
    METRIC_L2_BW,
    METRIC_L2_READ,
    METRIC_MATMUL,
    METRIC_MEM_BW,
    METRIC_MEM_READ,
    METRICS,
    ROOF_DTYPES,
    UNITS,
)
from .devices import cpu_model_name, gpu_clocks, identify_spec, spec_peak
from .l2 import StreamFit, fit_stream, graph_repeats, l2_size_bytes, stream_buffer_bytes
from .report import calibration_json, write_calibration
from .results import (
    BACKENDS,
    DEFAULT_CPU_DTYPES,
    DEFAULT_GPU_DTYPES,
    DEFAULT_SECONDS,
    Calibration,
    CalibrationDevice,
    Measurement,
    check_seconds,
    parse_dtypes,
)
from .sweep import measure

__all__ = [
    "BACKENDS",
    "DEFAULT_CPU_DTYPES",
    "DEFAULT_GPU_DTYPES",
    "DEFAULT_SECONDS",
    "METRICS",
    "METRIC_L2_BW",
    "METRIC_L2_READ",
    "METRIC_MATMUL",
    "METRIC_MEM_BW",
    "METRIC_MEM_READ",
    "ROOF_DTYPES",
    "UNITS",
    "Calibration",
    "CalibrationDevice",
    "Measurement",
    "StreamFit",
    "calibration_json",
    "check_seconds",
    "cpu_model_name",
    "fit_stream",
    "gpu_clocks",
    "graph_repeats",
    "identify_spec",
    "l2_size_bytes",
    "measure",
    "parse_dtypes",
    "spec_peak",
    "stream_buffer_bytes",
    "write_calibration",
]
