"""The contract between ``gpuscope run`` (the wrapper) and the program it runs (the child):
every environment variable and every file name that passes between them, named once.

Both sides import this module. The wrapper imports it as ``gpuscope.run.contract``; the child
cannot count on gpuscope being importable (the program may run in another environment), so
the wrapper copies this file, with the bootstrap, into the run's private bootstrap folder as
``_gpuscope_contract.py`` (see :mod:`gpuscope.run.bootstrap`), and the child imports it under
that one top-level name. So this module must stay self-contained: the standard library only,
no relative imports, nothing at import time but constants.

The run directory (``GPUSCOPE_RUN_DIR``) is shared: the wrapper creates it (0700) and reads
what the child leaves there once the child has exited::

    <run dir>/
        bootstrap/        BOOTSTRAP_DIR   the private copy of the bootstrap, first on PYTHONPATH
        traces/           TRACES_DIR      profiler traces (child writes, wrapper ingests)
        windows.jsonl     WINDOWS_FILE    one line per profiler window written (child)
        marks.jsonl       MARKS_FILE      gpuscope.mark() lines (child)
        profiler.jsonl    EVENTS_FILE     the bootstrap's events: armed, window_open, exit... (child)
        stopping          STOP_FILE       exit has begun: open no more windows (wrapper)
        window-requests.jsonl  REQUESTS_FILE  "open a window now" requests (wrapper, `gpuscope profile`)
"""
from __future__ import annotations

import os

# -- environment variables: set by the wrapper, read by the child ------------------------------

#: The run directory; its presence is what tells the child it runs under ``gpuscope run``.
ENV_RUN_DIR = "GPUSCOPE_RUN_DIR"
#: The run's id in the store.
ENV_RUN_ID = "GPUSCOPE_RUN_ID"
#: The profiler windows' schedule, JSON (:func:`encode_profile` / :func:`decode_profile`).
ENV_PROFILE = "GPUSCOPE_PROFILE"
#: The bootstrap folder goes first on the child's module search path.
ENV_PYTHONPATH = "PYTHONPATH"
#: The engines' own profilers (docs/run.md, "Engines' own profilers"): pointed at the run's
#: traces folder with shapes recorded, unless the user set the folder (then the user's
#: settings stay as they are). vLLM v0.5-v0.15 read these variables (v0.13-v0.15 as deprecated
#: aliases of ``--profiler-config``, and only ``"1"`` turns shapes on there); v0.16 dropped them.
ENV_VLLM_PROFILER_DIR = "VLLM_TORCH_PROFILER_DIR"
ENV_VLLM_RECORD_SHAPES = "VLLM_TORCH_PROFILER_RECORD_SHAPES"
#: A command with this option configures vLLM's profiler itself: from v0.13 the variables above
#: would override its ``torch_profiler_dir``, so none of them is set.
VLLM_PROFILER_CONFIG_OPTION = "--profiler-config"
#: SGLang's ``/start_profile`` writes here when its request names no ``output_dir``; shapes
#: follow ``SGLANG_PROFILE_RECORD_SHAPES`` where that exists (newer SGLang; older ones take
#: ``record_shapes`` from the request only).
ENV_SGLANG_PROFILER_DIR = "SGLANG_TORCH_PROFILER_DIR"
ENV_SGLANG_RECORD_SHAPES = "SGLANG_PROFILE_RECORD_SHAPES"
ENGINE_FLAG_ON = "1"
#: Kineto prints "USDT: ... profiler_start/stop" on the program's stderr at every window,
#: whatever its level below 6; set KINETO_LOG_LEVEL yourself to see Kineto's own messages.
ENV_KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
KINETO_LOG_LEVEL_DEFAULT = "6"

# -- files and folders in the run directory ----------------------------------------------------

#: The run's private copy of the bootstrap (0700, like the run directory).
BOOTSTRAP_DIR = "bootstrap"
#: Profiler traces: the bootstrap's windows, gpuscope.profile() and the engines' own profilers.
TRACES_DIR = "traces"
#: A trace is finished once it has one of these endings; an export in progress is ``.tmp``
#: (plain JSON) or ``.part`` (gzip) and is left out.
TRACE_SUFFIXES = (".json", ".json.gz")
#: One JSON line per profiler window written: pid, start_ns, end_ns, path, label.
WINDOWS_FILE = "windows.jsonl"
#: One JSON line per gpuscope.mark(): ts_ns, pid, name, tokens, prompt_tokens, phase, step, fields.
MARKS_FILE = "marks.jsonl"
#: Bootstrap events of each process, one JSON line each (``armed`` once torch is imported,
#: ``window_open``, ``window_skipped``, ``window_discarded``, ``exit``): how the run can say
#: why a window never opened or was never written.
EVENTS_FILE = "profiler.jsonl"
#: ``gpuscope run`` creates this file when it passes a stop signal (SIGINT, SIGTERM, ...) on to
#: the program: exit has begun, no window opens any more.
STOP_FILE = "stopping"
#: Requests to open a window now, one JSON line each, appended by the wrapper (``--profile-when
#: busy``) and by ``gpuscope profile`` (another terminal, the TUI): ``{"id": str, "ts_ns": int,
#: "duration_s": float, "pids": [int] or null, "source": str}``. ``pids`` null asks every armed
#: process. Each armed process polls the file's size every :data:`REQUEST_POLL_S` and answers
#: each request meant for it with a ``window_open`` (or ``window_skipped``) event carrying the
#: request's ``id`` in :data:`EVENTS_FILE`, and a ``windows.jsonl`` line once it is written.
REQUESTS_FILE = "window-requests.jsonl"
REQUEST_POLL_S = 0.25

# -- module names in the child -----------------------------------------------------------------

#: The child side of the profiler windows, loaded under this one name in every process.
BOOT_MODULE = "_gpuscope_boot"
#: This module, as the child imports it.
CONTRACT_MODULE = "_gpuscope_contract"

# -- the profiler windows' schedule ------------------------------------------------------------

#: When windows open (``when``): ``time`` (``delay_s`` after torch is imported, then every
#: ``interval_s``), ``busy`` (the wrapper asks, through :data:`REQUESTS_FILE`, once the program's
#: GPUs are busy), ``marks`` (at the ``after_marks``-th ``gpuscope.mark`` of the process, then
#: every ``interval_s``). Requests from ``gpuscope profile`` are answered in every mode.
WHEN_MODES = ("time", "busy", "marks")

#: Defaults of the schedule; ``interval_s`` defaults to ``delay_s``. ``gpu_only``: the wrapper
#: saw GPUs, so a process opens a scheduled window only once it has used one (an engine's API
#: server or tokenizer process that never touches a GPU gets none).
PROFILE_DEFAULTS = {"enabled": True, "delay_s": 5.0, "duration_s": 3.0, "windows": 1, "when": "time",
                    "after_marks": 0, "gpu_only": False}


def encode_profile(*, enabled: bool, delay_s: float, duration_s: float, windows: int,
                   interval_s: float | None, when: str = "time", after_marks: int = 0,
                   gpu_only: bool = False) -> str:
    """The value of :data:`ENV_PROFILE` for this schedule."""
    import json

    return json.dumps({"enabled": enabled, "delay_s": delay_s, "duration_s": duration_s, "windows": windows,
                       "interval_s": interval_s if interval_s is not None else delay_s, "when": when,
                       "after_marks": after_marks, "gpu_only": gpu_only})


def decode_profile(text: str) -> dict:
    """The schedule in :data:`ENV_PROFILE`, with the defaults filled in."""
    import json

    cfg = dict(PROFILE_DEFAULTS)
    cfg.update(json.loads(text))
    cfg.setdefault("interval_s", cfg["delay_s"])
    return cfg


def child_environment(base: dict[str, str], *, run_dir: str, run_id: int, profile: str,
                      bootstrap_dir: str, command: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The child's environment: ``base`` with the bootstrap first on PYTHONPATH (the program's
    own entries kept after it), the run directory and id, the profiler schedule, the engines'
    profiler folders (with shapes) and Kineto's log level unless already set. ``command`` is
    the program's command line: one that configures vLLM's profiler itself gets no vLLM
    variable."""
    env = dict(base)
    parts = [bootstrap_dir] + [p for p in env.get(ENV_PYTHONPATH, "").split(os.pathsep) if p]
    env[ENV_PYTHONPATH] = os.pathsep.join(parts)
    env[ENV_RUN_DIR] = run_dir
    env[ENV_RUN_ID] = str(run_id)
    env[ENV_PROFILE] = profile
    traces = os.path.join(run_dir, TRACES_DIR)
    # any form (`--profiler-config JSON`, `=JSON`, `.torch_profiler_dir=D`, inside `bash -c "..."`)
    own_vllm_config = any(VLLM_PROFILER_CONFIG_OPTION in a for a in command)
    if ENV_VLLM_PROFILER_DIR not in env and not own_vllm_config:
        env[ENV_VLLM_PROFILER_DIR] = traces
        env.setdefault(ENV_VLLM_RECORD_SHAPES, ENGINE_FLAG_ON)
    if ENV_SGLANG_PROFILER_DIR not in env:
        env[ENV_SGLANG_PROFILER_DIR] = traces
        env.setdefault(ENV_SGLANG_RECORD_SHAPES, ENGINE_FLAG_ON)
    env.setdefault(ENV_KINETO_LOG_LEVEL, KINETO_LOG_LEVEL_DEFAULT)
    return env
