"""The Python API for programs that want more than ``gpuscope run`` does on its own.

- :func:`profile` opens a profiler window around a block of code (on the calling thread).
- :func:`mark` records the start of a step and, optionally, how many tokens it generates and
  how many prompt tokens it reads, and its phase (prefill, decode, warm-up); the run's summary
  turns marks into generated tokens/s and energy per generated token, prefill apart.

Both are cheap and safe outside ``gpuscope run``: ``mark`` then does nothing, and ``profile``
writes its trace to ``./gpuscope-traces/`` (or ``out_dir``). Neither imports torch unless a
window is opened, and neither raises: failures are reported on stderr in one line.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .run.bootstrap import load_child_side

__all__ = ["profile", "mark"]

# The bootstrap under its one name (``_gpuscope_boot``): under ``gpuscope run`` the module the
# run's bootstrap uses (its private copy), so marks and windows share its state; elsewhere
# gpuscope's own file under the same name. Light: no torch, no store, no CLI.
_boot = load_child_side()
_contract = _boot.contract
if TYPE_CHECKING:  # the same class; a checker cannot follow the module loaded at run time
    from .run.bootstrap._gpuscope_boot import Window
else:
    Window = _boot.Window


@contextmanager
def profile(name: str = "profile", out_dir: str | Path | None = None) -> Iterator[Window]:
    """Profile the enclosed block with the PyTorch profiler (CPU ops with shapes, and GPU
    kernels when a GPU is present). Under ``gpuscope run`` the trace joins the run; otherwise
    it is written to ``out_dir`` (default ``./gpuscope-traces``). The window's trace path is
    ``window.path`` after the block."""
    rd = _boot.run_dir()
    d = Path(out_dir) if out_dir is not None else (rd / _contract.TRACES_DIR if rd is not None
                                                   else Path("gpuscope-traces"))
    window = Window(d, "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "profile")
    started = False
    try:
        window.start()
        started = True
    except Exception as exc:
        _boot.report(f"gpuscope.profile({name!r}) could not start the profiler: {type(exc).__name__}: {exc}")
    try:
        yield window
    finally:
        if started:
            try:
                window.stop()
            except Exception as exc:
                _boot.report(f"gpuscope.profile({name!r}) could not write its trace: {type(exc).__name__}: {exc}")


def mark(name: str = "step", *, tokens: int | None = None, prompt_tokens: int | None = None,
         phase: str | None = None, step: int | None = None, **fields: Any) -> None:
    """Record a mark at this moment: the start of a step, which lasts until the next mark of
    this process. ``tokens``: the tokens the step generates (output tokens, for tokens/s and
    energy per generated token); ``prompt_tokens``: the prompt tokens it reads (prefill);
    ``phase``: ``"prefill"``, ``"decode"`` or ``"warmup"`` (warm-up marks are counted apart
    and left out of the rates; without a phase, a mark with ``tokens`` is a decode step);
    ``step``: an optional step number; other keyword fields are kept as given. Does nothing
    outside ``gpuscope run``. Costs a few µs (one JSON line written to an open file)."""
    if not os.environ.get(_contract.ENV_RUN_DIR):
        return
    try:
        record: dict[str, Any] = {"ts_ns": time.time_ns(), "pid": os.getpid(), "name": str(name)}
        if tokens is not None:
            record["tokens"] = int(tokens)
        if prompt_tokens is not None:
            record["prompt_tokens"] = int(prompt_tokens)
        if phase is not None:
            record["phase"] = str(phase)
        if step is not None:
            record["step"] = int(step)
        if fields:
            record["fields"] = {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
                                for k, v in fields.items()}
        _boot.append_jsonl(_contract.MARKS_FILE, record)
        on_mark = getattr(_boot, "on_mark", None)  # an older copy of the bootstrap has none
        if on_mark is not None:
            on_mark()  # counts toward --profile-after-marks windows
    except Exception as exc:
        _boot.report(f"gpuscope.mark failed: {type(exc).__name__}: {exc}")
