"""gpuscope: GPU profiling and telemetry for LLM inference on NVIDIA and AMD GPUs.

Kineto traces and vendor telemetry go into one DuckDB store; analyzers attribute kernel time
to compute, communication, memory and idle, and (against each GPU's roofline) to
compute-bound, memory-bound and latency-bound work. The command line is ``gpuscope``.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "profile", "mark"]


def _find_checkout_subpackages() -> None:
    # collectors/, analyzers/ and tui/ sit beside gpuscope/ in the repository (the design card's
    # layout) and an install maps them into this package (pyproject's package-dir). Imported
    # straight from a checkout with no install in effect (`python -m gpuscope` or pytest in the
    # repository root put the checkout first on sys.path), the folder above is searched too, so
    # that gpuscope.collectors is the checkout's and not missing.
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if not os.path.isdir(os.path.join(here, "collectors")) and \
            os.path.isfile(os.path.join(root, "collectors", "__init__.py")):
        __path__.append(root)


_find_checkout_subpackages()


def __getattr__(name: str):  # lazy: `import gpuscope` stays free of everything else
    if name in ("profile", "mark"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpuscope' has no attribute {name!r}")
