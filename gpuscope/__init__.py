"""gpuscope: GPU profiling and telemetry for LLM inference on NVIDIA and AMD GPUs.

Kineto traces and vendor telemetry go into one DuckDB store; analyzers attribute kernel time
to compute, communication, memory and idle, and (against each GPU's roofline) to
compute-bound, memory-bound and latency-bound work. The command line is ``gpuscope``.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "profile", "mark"]


def __getattr__(name: str):  # lazy: `import gpuscope` stays free of everything else
    if name in ("profile", "mark"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpuscope' has no attribute {name!r}")
