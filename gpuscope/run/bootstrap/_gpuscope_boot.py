"""Profiler windows inside a profiled Python process (used by the ``gpuscope run`` bootstrap
and by :func:`gpuscope.profile`).

Loaded under this one top-level name, ``_gpuscope_boot``, in every process (see
:mod:`gpuscope.run.bootstrap`): under ``gpuscope run`` from the run's private bootstrap folder,
elsewhere from gpuscope's own file. The names it shares with the wrapper come from the
contract (``_gpuscope_contract``, a copy of :mod:`gpuscope.run.contract`).

Nothing here imports torch at module level: :class:`Window` imports it when a window opens,
which only happens once the program itself has imported torch.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _gpuscope_contract as contract

_lock = threading.Lock()
_counter = [0]


def run_dir() -> Path | None:
    """The run directory of the ``gpuscope run`` this process belongs to, if any."""
    d = os.environ.get(contract.ENV_RUN_DIR)
    return Path(d) if d else None


#: Open descriptors of the run directory's JSON-lines files: (pid, dir, name) -> (fd, device, inode).
_append_fds: dict[tuple[int, str, str], tuple[int, int, int]] = {}


def _append_fd(key: tuple[int, str, str], path: str) -> int:
    """The descriptor to append to ``path``: the cached one while it still refers to that file
    (a program may close descriptors it did not open, and the number may then be reused for a
    file of its own), else a new one."""
    cached = _append_fds.get(key)
    if cached is not None:
        fd, dev, ino = cached
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (dev, ino):
                if st.st_nlink:
                    return fd
                # the file was deleted (or the run directory with it): lines written to it would
                # vanish without a word; open the path again (a new file, or an error said once)
                del _append_fds[key]
                os.close(fd)
        except OSError:
            pass
    with _lock:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        st = os.fstat(fd)
        _append_fds[key] = (fd, st.st_dev, st.st_ino)
    return fd


def append_jsonl(name: str, record: dict[str, Any]) -> None:
    """Append one JSON line to ``name`` in the run directory (no-op outside a run).

    This is on the hot path of :func:`gpuscope.mark`, which programs call every decode step:
    no ``Path`` objects, and the file stays open (one descriptor per process and file, checked
    with ``fstat`` before each line), because opening the file and building paths for every line
    slowed a decode loop measurably (bench/README.md, "the cost of a mark"). Each line is one
    ``write`` to an ``O_APPEND`` descriptor, so lines from several processes do not interleave
    on local disks."""
    d = os.environ.get(contract.ENV_RUN_DIR)
    if not d:
        return
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    path = os.path.join(d, name)
    os.write(_append_fd((os.getpid(), d, name), path), line)


#: (pid, kind) of the lines :func:`report` has written: each kind once per process.
_reported: set[tuple[int, str]] = set()


def report(message: str) -> None:
    """One line on stderr from inside the profiled program; never raises. A failure that
    repeats (a mark with a bad argument in a decode loop, every mark once the run directory is
    gone) is said once per process: its kind is the message up to the first colon."""
    try:
        key = (os.getpid(), message.split(":", 1)[0])
        if key in _reported:
            return
        _reported.add(key)
        os.write(2, f"gpuscope[{os.getpid()}]: {message}\n".encode())
    except Exception:
        pass


#: Signals whose Python handlers wait while a window's trace is written (see _deferred_signals).
DEFERRED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def event(kind: str, **fields: Any) -> None:
    """Append one bootstrap event to the run directory's events file; never raises."""
    try:
        append_jsonl(contract.EVENTS_FILE, {"event": kind, "pid": os.getpid(), "ts_ns": time.time_ns(), **fields})
    except Exception:
        pass


class _deferred_signals:
    """While a window's trace is written (``with _deferred_signals() as pending``), the Python
    handlers of SIGINT/SIGTERM/SIGHUP only note the signal: a Ctrl-C in the middle of writing
    would raise KeyboardInterrupt inside the export and lose the whole window. ``pending``
    lists what arrived; the caller passes it on (``raise_pending``) or, once exit is under way,
    drops it. Handlers that are not Python functions (SIG_DFL, SIG_IGN) are left alone, and
    off the main thread nothing changes (signal.signal only works there)."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> list[int]:
        import signal

        if threading.current_thread() is not threading.main_thread():
            return self.pending
        for name in DEFERRED_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                previous = signal.getsignal(sig)
                if callable(previous):
                    signal.signal(sig, lambda signum, frame: self.pending.append(signum))
                    self._saved[sig] = previous
            except (ValueError, OSError):
                continue
        return self.pending

    def __exit__(self, *exc: Any) -> None:
        import signal

        for sig, previous in self._saved.items():
            try:
                signal.signal(sig, previous)
            except (ValueError, OSError):
                pass

    def raise_pending(self) -> None:
        """Deliver the signals that arrived meanwhile to the program's own handlers."""
        import signal

        for sig in dict.fromkeys(self.pending):
            signal.raise_signal(sig)


#: gzip level of the traces windows write. torch's own ``.gz`` export uses level 9 and copies
#: line by line; level 1 in large blocks is about ten times faster for a somewhat larger file
#: (bench/README.md, "gzip level of window traces"), and the profiled program is stopped
#: while its window is written.
TRACE_GZIP_LEVEL = 1


def export_gzipped(prof: Any, path: Path) -> None:
    """Write ``prof``'s Chrome trace to ``path`` (``.json.gz``) through a plain JSON file next
    to it, compressed quickly in large blocks."""
    import gzip
    import shutil

    plain = path.with_name(path.name[: -len(".gz")] + ".tmp" if path.name.endswith(".gz") else path.name + ".tmp")
    try:
        prof.export_chrome_trace(str(plain))
        part = path.with_name(path.name + ".part")
        # Owner-only whatever the program's umask: a trace holds the program's ops and shapes.
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # a .part left by a crash keeps its old mode through O_CREAT
        with open(fd, "wb") as raw, open(plain, "rb") as src, \
                gzip.GzipFile(str(part), "wb", compresslevel=TRACE_GZIP_LEVEL, fileobj=raw) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, path)  # never a half-written trace under the final name
    finally:
        for leftover in (plain, path.with_name(path.name + ".part")):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass


class Window:
    """One bounded PyTorch profiler window: CPU ops with shapes, and GPU activity when a GPU
    is present. ``start()`` and ``stop()`` must run on the thread whose ops are recorded."""

    def __init__(self, out_dir: Path, label: str = "window", request: str | None = None) -> None:
        self.out_dir = out_dir
        self.label = label
        #: the id of the request (``gpuscope profile``, ``--profile-when busy``) this window answers
        self.request = request
        self.prof: Any = None
        self.open_ns = 0  # start() called: the thread stands still until start_ns
        self.start_ns = 0
        self.path: Path | None = None

    def start(self) -> None:
        self.open_ns = time.time_ns()
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():  # CUDA and ROCm builds alike
            activities.append(ProfilerActivity.CUDA)
        with _lock:
            _counter[0] += 1
            n = _counter[0]
        host = socket.gethostname().split(".")[0] or "host"
        self.path = self.out_dir / f"{host}_{os.getpid()}_{self.label}{n}.pt.trace.json.gz"
        self.prof = profile(activities=activities, record_shapes=True)
        self.prof.start()
        # after start(): setting up the profiler can take a while, and nothing is recorded until then
        self.start_ns = time.time_ns()
        event("window_open", path=str(self.path), label=self.label, **self._request_field())

    def _request_field(self) -> dict[str, str]:
        return {"request": self.request} if self.request is not None else {}

    def discard(self, reason: str) -> None:
        """Stop recording and write nothing."""
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()
            event("window_discarded", path=str(self.path), reason=reason, **self._request_field())

    def stop(self, deliver_signals: bool = True) -> Path | None:
        """Stop recording and write the trace. SIGINT/SIGTERM/SIGHUP arriving meanwhile wait
        until the trace is written, then reach the program (``deliver_signals``) or, when the
        program is already exiting, are dropped: a second Ctrl-C never loses the window."""
        if self.prof is None:
            return None
        prof, self.prof = self.prof, None
        # Recording ends as stop() begins; stop() then processes what was recorded, which takes
        # seconds on a busy window (bench/README.md, "closing a profiler window").
        end_ns = time.time_ns()
        deferred = _deferred_signals()
        with deferred:
            prof.stop()
            self.out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            assert self.path is not None
            export_gzipped(prof, self.path)
            # open_ns..start_ns (profiler start-up) and end_ns..written_ns (processing and writing
            # the trace) the thread did nothing else: steps there are the profiler's time, not
            # the program's (seconds on a GPU machine: bench/README.md)
            append_jsonl(contract.WINDOWS_FILE, {"pid": os.getpid(), "start_ns": self.start_ns, "end_ns": end_ns,
                                           "open_ns": self.open_ns or self.start_ns, "written_ns": time.time_ns(),
                                           "path": str(self.path), "label": self.label, **self._request_field()})
        if deliver_signals:
            deferred.raise_pending()
        return self.path


# --------------------------------------------------------------------------------------------
# Scheduled and requested windows on the main thread (the `gpuscope run` bootstrap)

WINDOW_SIGNAL_NAME = "SIGUSR2"

#: A window due while the main thread is inside an import waits, retried this often: starting
#: the profiler imports torch._dynamo and some 800 other modules, and from inside an import of
#: one of them (a signal handler runs at any bytecode) it meets a partially initialised module
#: ("cannot import name 'dynamo_timed' from partially initialized module 'torch._dynamo.utils'").
IMPORT_RETRY_S = 0.2
#: After this long inside one import (a program that runs its work at import time), a window
#: opens anyway when no torch module is half-imported (the profiler's own imports are then safe).
IMPORT_PATIENCE_S = 30.0
#: ... and is given up after this long (a torch module still half-imported).
IMPORT_GIVE_UP_S = 120.0
#: Waits for the main thread to answer (opening: Kineto/CUPTI start-up; closing: processing and
#: writing a busy window's trace).
OPEN_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 600.0
#: Largest value of a setting (seconds or a count): beyond it a schedule means nothing.
MAX_SETTING = 1e8
#: Longest window a request may ask for.
MAX_REQUEST_S = 3600.0


def _inside_import(frame: Any) -> bool:
    """True when the interrupted main thread is executing an import (importlib's frames are on
    its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _torch_half_imported() -> bool:
    """True while some torch module is still executing its import (in any thread)."""
    for name, module in list(sys.modules.items()):
        if name == "torch" or name.startswith("torch."):
            spec = getattr(module, "__spec__", None)
            if spec is not None and getattr(spec, "_initializing", False):
                return True
    return False


def _uses_gpu() -> bool:
    """Whether this process has started using a GPU through torch (CUDA or ROCm): the engines'
    API servers and tokenizer processes import torch and never do. Cannot tell: True."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch.cuda.is_initialized())  # type: ignore[union-attr]
    except Exception:
        return True


def _other_profiler_running() -> bool:
    """Whether a profiler (the program's, or its engine's own) already records in this process:
    one Kineto session per process, and the first one keeps it."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch._C._autograd._profiler_enabled())  # type: ignore[union-attr]
    except Exception:
        return False


class _Wanted:
    """A window this process is to open: scheduled (``time``, ``marks``) or requested."""

    def __init__(self, label: str, duration_s: float, request: str | None = None) -> None:
        self.label = label
        self.duration_s = duration_s
        self.request = request
        self.first_try = 0.0  # monotonic time of the first attempt (0: not tried yet)
        self.said_deferred = False
        self.said_waiting = False

    def fields(self) -> dict[str, str]:
        return {"request": self.request} if self.request is not None else {}


class _Controller:
    """Opens profiler windows on the main thread: scheduled ones (``when``: ``time`` — the first
    ``delay_s`` after torch was imported, then every ``interval_s``; ``marks`` — at every
    ``after_marks``-th :func:`gpuscope.mark`; ``busy`` — none of its own, the wrapper asks), up
    to ``windows``, and those asked for in the run's requests file (``gpuscope profile``,
    ``--profile-when busy``). One thread decides; the main thread does the work in a signal
    handler. A window never opens while the main thread is inside an import (it waits), in a
    process that has not used a GPU when the run has GPUs (``gpu_only``), while another profiler
    records in the process, or once exit has begun; one that is open at exit is written."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import math
        import signal

        self.delay_s = float(cfg["delay_s"])
        self.duration_s = float(cfg["duration_s"])
        self.windows = int(cfg["windows"])
        self.interval_s = float(cfg["interval_s"])
        self.when = str(cfg.get("when", "time"))
        self.after_marks = int(cfg.get("after_marks") or 0)
        self.gpu_only = bool(cfg.get("gpu_only", False))
        # Checked here, where a failure is one line: in the timer thread, time.sleep(-1) would
        # print a thread traceback into the program's stderr (and leave a window open).
        for key in ("delay_s", "duration_s", "interval_s", "windows", "after_marks"):
            value = getattr(self, key)
            if not (math.isfinite(value) and 0 <= value <= MAX_SETTING):
                raise ValueError(f"{contract.ENV_PROFILE}: {key} must be a number from 0 to {MAX_SETTING:g}, "
                                 f"not {cfg.get(key)!r}")
        if self.when not in contract.WHEN_MODES:
            raise ValueError(f"{contract.ENV_PROFILE}: when must be one of {', '.join(contract.WHEN_MODES)}, "
                             f"not {self.when!r}")
        if self.when == "marks" and self.after_marks < 1:
            raise ValueError(f"{contract.ENV_PROFILE}: when 'marks' needs after_marks >= 1")
        # A forked process inherits this controller, its exit handler included: its window
        # (if one is open) is the parent's to write, not the child's (see _at_exit).
        self.pid = os.getpid()
        rd = run_dir()
        self.out_dir = (rd or Path(".")) / contract.TRACES_DIR
        self.stop_path = str(rd / contract.STOP_FILE) if rd is not None else None
        self.requests_path = str(rd / contract.REQUESTS_FILE) if rd is not None else None
        # requests written before this process was armed were meant for the processes of then
        self.requests_offset = self._requests_size()
        self.sig = getattr(signal, WINDOW_SIGNAL_NAME)
        self.window: Window | None = None
        self.close_at = 0.0  # monotonic time the open window is to close
        self.open_wanted: _Wanted | None = None  # what the open window answers
        self.exiting = False
        self._exited = False
        self._finalizer_pid = 0
        self.written = 0
        self.marks_seen = 0
        self.marks_due = 0  # marks-mode windows due, not yet taken by the thread
        self.wake = threading.Event()
        self._order: tuple[Any, ...] | None = None
        self._result = ""
        self._answered = threading.Event()
        self.main_ident = threading.main_thread().ident
        previous = signal.getsignal(self.sig)
        if previous not in (signal.SIG_DFL, None):
            raise RuntimeError(f"the program handles {WINDOW_SIGNAL_NAME} itself; use gpuscope.profile() instead")
        signal.signal(self.sig, self._on_signal)
        import atexit

        atexit.register(self._at_exit)
        event("armed", delay_s=self.delay_s, duration_s=self.duration_s, windows=self.windows, when=self.when,
              after_marks=self.after_marks, gpu_only=self.gpu_only)

    def exit_begun(self) -> bool:
        """True once the program is exiting: its exit handlers run, or ``gpuscope run`` has
        passed a stop signal (Ctrl-C, SIGTERM) on to it."""
        return self.exiting or (self.stop_path is not None and os.path.exists(self.stop_path))

    # -- the main thread's side --------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Opening and closing take seconds (profiler start-up; processing and writing the trace).
        # SIGINT/SIGTERM/SIGHUP meanwhile wait (`deferred`) and reach the program once the state
        # here is consistent: a Ctrl-C never leaves a window half-written.
        order, self._order = self._order, None
        if order is None:
            return  # an order the thread gave up waiting for
        deferred = _deferred_signals()
        result = "done"
        try:
            if order[0] == "open":
                result = self._open(order[1], frame, deferred)
            elif self.window is not None:
                w, self.window = self.window, None
                with deferred:
                    w.stop()  # what arrives while it writes is passed on to `deferred`
                self.written += 1
                self._unguard_termination()
        except Exception as exc:
            self.window = None
            report(f"profiler window failed: {type(exc).__name__}: {exc}")
            result = "failed"
        self._result = result
        self._answered.set()
        deferred.raise_pending()

    def _open(self, wanted: _Wanted, frame: Any, deferred: _deferred_signals) -> str:
        if self.window is not None:
            return "skip:a window is already open in this process"
        if self.exit_begun():
            return "skip:exiting"
        waited = time.monotonic() - wanted.first_try
        if _torch_half_imported() or (_inside_import(frame) and waited < IMPORT_PATIENCE_S):
            return "defer"
        if _other_profiler_running():
            return "skip:another profiler is running in this process (the program's or its engine's own)"
        w: Window | None = Window(self.out_dir, wanted.label, wanted.request)
        with deferred:
            assert w is not None
            w.start()
            if self.exit_begun():  # exit began while the profiler started: drop it
                w.discard("exit began while the profiler was starting")
                w = None
        self.window = w
        if w is not None:
            self._guard_termination()
            self._close_at_worker_end()
        return "opened" if w is not None else "dropped"

    def _close_at_worker_end(self) -> None:
        """A forked ``multiprocessing`` worker ends with ``os._exit`` (no exit handlers), after
        running multiprocessing's own finalizers: have those close the window too. (Registered
        when a window opens: the worker's start clears the finalizers inherited by the fork.)"""
        mp = sys.modules.get("multiprocessing")
        if mp is None or self._finalizer_pid == os.getpid():
            return
        try:
            if mp.parent_process() is None:
                return
            from multiprocessing import util

            util.Finalize(None, self._at_exit, exitpriority=100)
            self._finalizer_pid = os.getpid()
        except Exception:
            pass

    #: Signals whose default action ends the process without its exit handlers: while a window
    #: is open, gpuscope writes it first (a server's workers are often stopped by SIGTERM).
    GUARDED_SIGNALS = ("SIGTERM", "SIGHUP")

    def _guard_termination(self) -> None:
        import signal

        for name in self.GUARDED_SIGNALS:
            sig = getattr(signal, name, None)
            try:
                if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, self._on_termination)
            except (ValueError, OSError):
                pass

    def _unguard_termination(self) -> None:
        import signal

        for name in self.GUARDED_SIGNALS:
            sig = getattr(signal, name, None)
            try:
                if sig is not None and signal.getsignal(sig) == self._on_termination:
                    signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError):
                pass

    def _on_termination(self, signum: int, frame: Any) -> None:
        """SIGTERM/SIGHUP with their default action, while a window is open: write the window,
        then die of the signal as the program would have."""
        import signal

        if os.getpid() == self.pid and self.window is not None:
            self.exiting = True
            w, self.window = self.window, None
            try:
                w.stop(deliver_signals=False)  # a second signal meanwhile is dropped: we are ending
                self.written += 1
            except Exception as exc:
                report(f"profiler window failed at exit: {type(exc).__name__}: {exc}")
            event("exit", windows_written=self.written, signal=signal.Signals(signum).name)
        self._unguard_termination()
        signal.raise_signal(signum)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid or self._exited:
            return  # inherited through fork (the forked process has a controller of its own), or done
        self._exited = True
        # First thing: from here on no window opens (the thread's next order finds `exiting`).
        self.exiting = True
        self.wake.set()
        # The program ends inside a window: close it so its trace is written. A Ctrl-C while it
        # is written is dropped: exit is already under way, and it would only abort the write.
        if self.window is not None:
            try:
                w, self.window = self.window, None
                w.stop(deliver_signals=False)
                self.written += 1
            except Exception as exc:
                report(f"profiler window failed at exit: {type(exc).__name__}: {exc}")
        self._unguard_termination()
        event("exit", windows_written=self.written)

    # -- the thread's side -------------------------------------------------------------------

    def _ask(self, order: tuple[Any, ...], timeout_s: float) -> str:
        """Have the main thread carry out ``order``; its answer, or "" when none came."""
        import signal

        if signal.getsignal(self.sig) != self._on_signal:
            report(f"the program replaced gpuscope's {WINDOW_SIGNAL_NAME} handler: no more profiler windows")
            return "gone"
        if self.main_ident is None:  # the main thread has started: never None here
            return "gone"
        self._answered.clear()
        self._order = order
        signal.pthread_kill(self.main_ident, self.sig)
        if not self._answered.wait(timeout_s):
            self._order = None  # a late signal finds no order and does nothing
            return ""
        return self._result

    def on_mark(self) -> None:
        """A :func:`gpuscope.mark` in this process (any thread): count it toward the next
        marks-mode window."""
        if self.when != "marks":
            return
        self.marks_seen += 1
        if self.marks_seen % self.after_marks == 0:
            self.marks_due += 1
            self.wake.set()

    def _requests_size(self) -> int:
        try:
            return os.stat(self.requests_path).st_size if self.requests_path else 0
        except OSError:
            return 0

    def _new_requests(self) -> list[dict[str, Any]]:
        """Requests appended to the run's requests file since the last look (complete lines
        only), meant for this process."""
        if self.requests_path is None or self._requests_size() <= self.requests_offset:
            return []
        try:
            fd = os.open(self.requests_path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return []
        try:
            os.lseek(fd, self.requests_offset, os.SEEK_SET)
            data = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
        complete = data[: data.rfind(b"\n") + 1]
        self.requests_offset += len(complete)
        out = []
        for line in complete.splitlines():
            try:
                req = json.loads(line)
                pids = req.get("pids")
                if pids is not None and os.getpid() not in pids:
                    continue
                out.append(req)
            except Exception:
                report("a line of the run's window requests is not a request: ignored")
        return out

    def _from_request(self, req: dict[str, Any]) -> _Wanted | None:
        import math

        rid = str(req.get("id", ""))[:64]
        try:
            duration = float(req.get("duration_s", self.duration_s))
        except (TypeError, ValueError):
            duration = math.nan
        if not (math.isfinite(duration) and 0 < duration <= MAX_REQUEST_S):
            event("window_skipped", reason=f"the request's duration is not a number of seconds in "
                                           f"(0, {MAX_REQUEST_S:g}]", request=rid)
            return None
        return _Wanted("request", duration, rid)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # never a thread traceback in the program's stderr
            report(f"profiler windows stopped: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        start = time.monotonic()
        next_timed = start + self.delay_s if self.when == "time" and self.windows else None
        scheduled = 0  # scheduled windows taken (time or marks)
        queue: list[_Wanted] = []
        while True:
            now = time.monotonic()
            if self.window is not None and now >= self.close_at:
                closed, self.open_wanted = self.open_wanted, None
                self._ask(("close",), CLOSE_TIMEOUT_S)
                if next_timed is not None and closed is not None and closed.label == "window":
                    next_timed = time.monotonic() + self.interval_s
                continue
            if self.exit_begun():
                if self.window is None:
                    # what was still to open is skipped: one event each, so the run can say why
                    if queue or (next_timed is not None and scheduled < self.windows):
                        for w in queue or [_Wanted("window", self.duration_s)]:
                            event("window_skipped", reason="exiting", **w.fields())
                    return
            # what is due now
            if next_timed is not None and now >= next_timed and scheduled < self.windows \
                    and not any(w.request is None for w in queue):
                queue.append(_Wanted("window", self.duration_s))
                scheduled += 1
                # the next one is timed from this one's end (or its failure to open)
                next_timed = None if scheduled >= self.windows else now + 1e9
            while self.marks_due and scheduled < self.windows:
                self.marks_due -= 1
                queue.append(_Wanted("marks", self.duration_s))
                scheduled += 1
            for req in self._new_requests():
                wanted = self._from_request(req)
                if wanted is None:
                    continue
                if self.window is not None:  # answered at once: the asker waits for an answer
                    event("window_skipped", reason="a window is already open in this process", **wanted.fields())
                elif self.gpu_only and not _uses_gpu():
                    event("window_skipped", reason="no GPU work in this process", **wanted.fields())
                else:
                    queue.insert(0, wanted)  # asked for now: before a scheduled one
            retry = False
            if self.window is None and queue and not self.exit_begun():
                wanted = queue[0]
                if wanted.request is None and self.gpu_only and not _uses_gpu():
                    if not wanted.said_waiting:
                        wanted.said_waiting = True
                        event("window_waiting", reason="no GPU work in this process yet")
                else:
                    if not wanted.first_try:
                        wanted.first_try = time.monotonic()
                    answer = self._ask(("open", wanted), OPEN_TIMEOUT_S)
                    if answer == "defer":
                        if not wanted.said_deferred:
                            wanted.said_deferred = True
                            event("window_deferred", reason="the program is inside an import", **wanted.fields())
                        if time.monotonic() - wanted.first_try > IMPORT_GIVE_UP_S:
                            queue.pop(0)
                            event("window_skipped", reason=f"the program stayed inside an import of torch for "
                                                           f"{IMPORT_GIVE_UP_S:g} s", **wanted.fields())
                        retry = True
                    else:
                        queue.pop(0)
                        if answer == "opened":
                            self.close_at = time.monotonic() + wanted.duration_s
                            self.open_wanted = wanted
                            continue
                        if answer == "gone":
                            return
                        if answer.startswith("skip:"):
                            event("window_skipped", reason=answer[5:], **wanted.fields())
                        elif answer == "":
                            report(f"the main thread did not open the profiler window within {OPEN_TIMEOUT_S:g} s")
                        if next_timed is not None and wanted.label == "window":
                            next_timed = time.monotonic() + self.interval_s
            timeout = contract.REQUEST_POLL_S
            if retry:
                timeout = IMPORT_RETRY_S
            if self.window is not None:
                timeout = min(timeout, max(self.close_at - time.monotonic(), 0.0))
            if next_timed is not None:
                timeout = min(timeout, max(next_timed - time.monotonic(), 0.0))
            self.wake.wait(timeout)
            self.wake.clear()


_controller: list[_Controller] = []


def on_mark() -> None:
    """Called by :func:`gpuscope.mark`: counts toward ``--profile-after-marks`` windows."""
    if _controller and _controller[0].pid == os.getpid():
        _controller[0].on_mark()


def start_controller(cfg: dict[str, Any]) -> None:
    """Start the window thread (once per process; again in a forked child)."""
    if threading.current_thread() is not threading.main_thread():
        # torch imported from a worker thread: the handler must still be installed from the
        # main thread, which signal.signal() requires; give up with a clear message.
        report("torch was first imported off the main thread: no automatic profiler windows "
               "(use gpuscope.profile())")
        return
    c = _Controller(cfg)
    _controller[:] = [c]
    threading.Thread(target=c.run, name="gpuscope-windows", daemon=True).start()

    def _after_fork_in_child() -> None:
        # threads do not survive fork: restart the thread for the child's own windows
        try:
            _controller.clear()
            if threading.current_thread() is threading.main_thread():
                import signal

                signal.signal(signal.SIGUSR2, signal.SIG_DFL)
                start_controller(cfg)
        except Exception as exc:
            report(f"profiler windows disabled in forked child: {type(exc).__name__}: {exc}")

    if not getattr(start_controller, "_fork_hook", False):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        start_controller._fork_hook = True  # type: ignore[attr-defined]
