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

    def __init__(self, out_dir: Path, label: str = "window") -> None:
        self.out_dir = out_dir
        self.label = label
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
        event("window_open", path=str(self.path), label=self.label)

    def discard(self, reason: str) -> None:
        """Stop recording and write nothing."""
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()
            event("window_discarded", path=str(self.path), reason=reason)

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
                                           "path": str(self.path), "label": self.label})
        if deliver_signals:
            deferred.raise_pending()
        return self.path


# --------------------------------------------------------------------------------------------
# Timed windows on the main thread (the `gpuscope run` bootstrap)

WINDOW_SIGNAL_NAME = "SIGUSR2"


class _Controller:
    """Opens ``windows`` profiler windows of ``duration_s`` on the main thread, the first
    ``delay_s`` after torch was imported, then every ``interval_s``. Once exit has begun (the
    interpreter runs its exit handlers, or ``gpuscope run`` passed a stop signal on) no window
    opens; one that is open is closed and written at exit."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import math
        import signal

        self.delay_s = float(cfg["delay_s"])
        self.duration_s = float(cfg["duration_s"])
        self.windows = int(cfg["windows"])
        self.interval_s = float(cfg["interval_s"])
        # Checked here, where a failure is one line: in the timer thread, time.sleep(-1) would
        # print a thread traceback into the program's stderr (and leave a window open).
        for key in ("delay_s", "duration_s", "interval_s", "windows"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{contract.ENV_PROFILE}: {key} must be a number >= 0, not {cfg[key]!r}")
        # A forked process inherits this controller, its exit handler included: its window
        # (if one is open) is the parent's to write, not the child's (see _at_exit).
        self.pid = os.getpid()
        rd = run_dir()
        self.out_dir = (rd or Path(".")) / contract.TRACES_DIR
        self.stop_path = str(rd / contract.STOP_FILE) if rd is not None else None
        self.sig = getattr(signal, WINDOW_SIGNAL_NAME)
        self.window: Window | None = None
        self.exiting = False
        self.written = 0
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.main_ident = threading.main_thread().ident
        previous = signal.getsignal(self.sig)
        if previous not in (signal.SIG_DFL, None):
            raise RuntimeError(f"the program handles {WINDOW_SIGNAL_NAME} itself; use gpuscope.profile() instead")
        signal.signal(self.sig, self._on_signal)
        import atexit

        atexit.register(self._at_exit)
        event("armed", delay_s=self.delay_s, duration_s=self.duration_s, windows=self.windows)

    def exit_begun(self) -> bool:
        """True once the program is exiting: its exit handlers run, or ``gpuscope run`` has
        passed a stop signal (Ctrl-C, SIGTERM) on to it."""
        return self.exiting or (self.stop_path is not None and os.path.exists(self.stop_path))

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Opening and closing take seconds (profiler start-up; processing and writing the trace).
        # SIGINT/SIGTERM/SIGHUP meanwhile wait (`deferred`) and reach the program once the state
        # here is consistent: a Ctrl-C never leaves a window half-written.
        deferred = _deferred_signals()
        try:
            if self.window is None:
                if self.exit_begun():
                    event("window_skipped", reason="exiting")
                else:
                    w: Window | None = Window(self.out_dir, "window")
                    with deferred:
                        assert w is not None
                        w.start()
                        if self.exit_begun():  # exit began while the profiler started: drop it
                            w.discard("exit began while the profiler was starting")
                            w = None
                    self.window = w
                self.started.set()
            else:
                w, self.window = self.window, None
                with deferred:
                    w.stop()  # what arrives while it writes is passed on to `deferred`
                self.written += 1
                self.stopped.set()
        except Exception as exc:
            self.window = None
            report(f"profiler window failed: {type(exc).__name__}: {exc}")
            self.started.set()
            self.stopped.set()
        deferred.raise_pending()

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return  # inherited through fork: the forked process has a controller of its own
        # First thing: from here on no window opens (the timer's next signal finds `exiting`).
        self.exiting = True
        # The program ends inside a window: close it so its trace is written. A Ctrl-C while it
        # is written is dropped: exit is already under way, and it would only abort the write.
        if self.window is not None:
            try:
                w, self.window = self.window, None
                w.stop(deliver_signals=False)
                self.written += 1
            except Exception as exc:
                report(f"profiler window failed at exit: {type(exc).__name__}: {exc}")
        event("exit", windows_written=self.written)

    def _send(self) -> bool:
        import signal

        if signal.getsignal(self.sig) != self._on_signal:
            report(f"the program replaced gpuscope's {WINDOW_SIGNAL_NAME} handler: no more profiler windows")
            return False
        if self.main_ident is None:  # the main thread has started: never None here
            return False
        signal.pthread_kill(self.main_ident, self.sig)
        return True

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # never a thread traceback in the program's stderr
            report(f"profiler windows stopped: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        time.sleep(self.delay_s)
        for n in range(self.windows):
            if n:
                time.sleep(max(self.interval_s, 0.0))
            if self.exit_begun():
                event("window_skipped", reason="exiting")
                return
            self.started.clear()
            self.stopped.clear()
            if not self._send():
                return
            # Starting the profiler can take a while (Kineto/CUPTI initialisation).
            if not self.started.wait(120):
                report("the main thread did not open the profiler window within 120 s")
                return
            if self.window is None:
                return
            time.sleep(self.duration_s)
            if self.window is None:  # closed at exit meanwhile
                return
            if not self._send():
                return
            self.stopped.wait(300)


_controller: list[_Controller] = []


def start_controller(cfg: dict[str, Any]) -> None:
    """Start the window timer (once per process; again in a forked child)."""
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
        # threads do not survive fork: restart the timer for the child's own windows
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
