"""Profiler windows inside a profiled Python process (used by the ``gpuscope run`` bootstrap
and by :func:`gpuscope.profile`).

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

ENV_RUN_DIR = "GPUSCOPE_RUN_DIR"
ENV_PROFILE = "GPUSCOPE_PROFILE"
ENV_RUN_ID = "GPUSCOPE_RUN_ID"

_lock = threading.Lock()
_counter = [0]


def run_dir() -> Path | None:
    """The run directory of the ``gpuscope run`` this process belongs to, if any."""
    d = os.environ.get(ENV_RUN_DIR)
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
                return fd
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
    with ``fstat`` before each line). Opening, and building paths, for every line made a mark
    cost 14 µs and slowed the CPU example's decode loop by 8 %; now about 8 µs and under 2 %. Each
    line is one ``write`` to an ``O_APPEND`` descriptor, so lines from several processes do not
    interleave on local disks."""
    d = os.environ.get(ENV_RUN_DIR)
    if not d:
        return
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    path = os.path.join(d, name)
    os.write(_append_fd((os.getpid(), d, name), path), line)


def report(message: str) -> None:
    """One line on stderr from inside the profiled program; never raises."""
    try:
        os.write(2, f"gpuscope[{os.getpid()}]: {message}\n".encode())
    except Exception:
        pass


#: gzip level of the traces windows write. torch's own ``.gz`` export uses level 9 and copies
#: line by line: 115 MiB of JSON (1 s of CPU decode) took 3.8 s at level 9 against 0.4 s at
#: level 1 (11 MiB instead of 6.6 MiB), time during which the profiled program is stopped.
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
        with open(plain, "rb") as src, gzip.GzipFile(part, "wb", compresslevel=TRACE_GZIP_LEVEL) as dst:
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
        self.start_ns = 0
        self.path: Path | None = None

    def start(self) -> None:
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

    def stop(self) -> Path | None:
        if self.prof is None:
            return None
        prof, self.prof = self.prof, None
        # Recording ends as stop() begins; stop() then processes what was recorded, which takes
        # seconds on a busy window (2.7 s for 1 s of CPU decode, ~180k ops, on a 2-core VM).
        end_ns = time.time_ns()
        prof.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        assert self.path is not None
        export_gzipped(prof, self.path)
        append_jsonl("windows.jsonl", {"pid": os.getpid(), "start_ns": self.start_ns, "end_ns": end_ns,
                                       "path": str(self.path), "label": self.label})
        return self.path


# --------------------------------------------------------------------------------------------
# Timed windows on the main thread (the `gpuscope run` bootstrap)

WINDOW_SIGNAL_NAME = "SIGUSR2"


class _Controller:
    """Opens ``windows`` profiler windows of ``duration_s`` on the main thread, the first
    ``delay_s`` after torch was imported, then every ``interval_s``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import signal

        self.delay_s = float(cfg.get("delay_s", 5.0))
        self.duration_s = float(cfg.get("duration_s", 3.0))
        self.windows = int(cfg.get("windows", 1))
        self.interval_s = float(cfg.get("interval_s", self.delay_s))
        self.out_dir = (run_dir() or Path(".")) / "traces"
        self.sig = getattr(signal, WINDOW_SIGNAL_NAME)
        self.window: Window | None = None
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.main_ident = threading.main_thread().ident
        previous = signal.getsignal(self.sig)
        if previous not in (signal.SIG_DFL, None):
            raise RuntimeError(f"the program handles {WINDOW_SIGNAL_NAME} itself; use gpuscope.profile() instead")
        signal.signal(self.sig, self._on_signal)
        import atexit

        atexit.register(self._at_exit)

    def _on_signal(self, signum: int, frame: Any) -> None:
        try:
            if self.window is None:
                w = Window(self.out_dir, "window")
                w.start()
                self.window = w
                self.started.set()
            else:
                w, self.window = self.window, None
                w.stop()
                self.stopped.set()
        except Exception as exc:
            self.window = None
            report(f"profiler window failed: {type(exc).__name__}: {exc}")
            self.started.set()
            self.stopped.set()

    def _at_exit(self) -> None:
        # The program ends inside a window: close it so its trace is written.
        if self.window is not None:
            try:
                w, self.window = self.window, None
                w.stop()
            except Exception as exc:
                report(f"profiler window failed at exit: {type(exc).__name__}: {exc}")

    def _send(self) -> bool:
        import signal

        if signal.getsignal(self.sig) != self._on_signal:
            report(f"the program replaced gpuscope's {WINDOW_SIGNAL_NAME} handler: no more profiler windows")
            return False
        signal.pthread_kill(self.main_ident, self.sig)
        return True

    def run(self) -> None:
        time.sleep(self.delay_s)
        for n in range(self.windows):
            if n:
                time.sleep(max(self.interval_s, 0.0))
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
