""""Open a window now" requests to a running ``gpuscope run``, and their answers: the one home of
both sides that are not the child (the wrapper's ``--profile-when busy``, ``gpuscope profile``,
the TUI's key).

A request is one JSON line appended to the run directory's
:data:`~gpuscope.run.contract.REQUESTS_FILE`; every armed Python process of the run polls that
file (every :data:`~gpuscope.run.contract.REQUEST_POLL_S`) and answers in
:data:`~gpuscope.run.contract.EVENTS_FILE` with a ``window_open`` or ``window_skipped`` event
carrying the request's id, then a :data:`~gpuscope.run.contract.WINDOWS_FILE` line with the id
once the window is written. This module writes requests, reads answers and lists the processes
that can answer; it never waits on its own (:func:`wait_for_answers` and
:func:`wait_for_windows` poll at a caller's pace, with a clock and a sleep the caller may pass).

Besides the contract's files, the wrapper keeps :data:`GPU_PROCESSES_FILE` in the run directory:
the run's processes the GPU collectors saw on a GPU, so that ``gpuscope profile`` can ask only
them (the store keeps per-process rows nowhere). It is gpuscope's own (the child never reads it).
"""
from __future__ import annotations

import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import read_jsonl
from . import contract

__all__ = ["GPU_PROCESSES_FILE", "Answers", "ArmedProcess", "GpuProcesses", "ask_window", "WindowRequest", "armed_processes",
           "RecordingRun", "check_run_dir", "new_request", "pid_alive", "process_name", "read_answers", "read_gpu_processes", "recording_run", "targets", "wait_for_answers",
           "wait_for_windows", "write_gpu_processes", "write_request"]

#: The run's processes seen on a GPU, written by the wrapper whenever they change:
#: ``{"ts_ns": int, "pids": [int], "devices": {key: [pid]}}``.
GPU_PROCESSES_FILE = "gpu-processes.json"

#: How long a process may take to answer a request it has read: it polls every
#: REQUEST_POLL_S, and a process busy in a long op answers when its main thread runs Python
#: again; starting the profiler the first time (Kineto, CUPTI) takes seconds on a loaded machine.
ANSWER_TIMEOUT_S = 60.0
#: What writing a window's trace may take beyond its duration (a busy window's trace takes
#: seconds to process and write: docs/run.md, "What a window costs the program").
WRITE_TIMEOUT_S = 120.0

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class WindowRequest:
    """One request (a line of :data:`~gpuscope.run.contract.REQUESTS_FILE`): open a window of
    ``duration_s`` now in ``pids`` (None: every armed process)."""

    id: str
    ts_ns: int
    duration_s: float
    pids: tuple[int, ...] | None
    source: str

    def to_json(self) -> dict[str, Any]:
        """The line's object, as the contract spells it."""
        return {"id": self.id, "ts_ns": self.ts_ns, "duration_s": self.duration_s,
                "pids": list(self.pids) if self.pids is not None else None, "source": self.source}


def new_request(duration_s: float, pids: Iterable[int] | None, source: str, *, ts_ns: int | None = None) -> WindowRequest:
    """A request with a fresh id (unique across writers: several terminals may ask at once)."""
    return WindowRequest(id=uuid.uuid4().hex[:16], ts_ns=time.time_ns() if ts_ns is None else ts_ns,
                         duration_s=float(duration_s), pids=tuple(sorted(set(pids))) if pids is not None else None,
                         source=source)


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that is not a real directory of this user's that only this user
    can write to (:class:`InputError`): a request written into someone else's folder, or
    through a link, would ask their program for a window, and their answers would be read as
    this run's."""
    try:
        st = os.lstat(run_dir)
    except OSError as exc:
        raise InputError(str(run_dir), f"cannot use the run directory: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(str(run_dir), "the run directory is a symbolic link; gpuscope only writes requests into "
                                       "the real directory `gpuscope run` made")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(str(run_dir), "the run directory is not a directory")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise InputError(str(run_dir), f"the run directory belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o022:
        raise InputError(str(run_dir), f"other users can write to the run directory (mode "
                                       f"{stat.S_IMODE(st.st_mode):04o}): not one `gpuscope run` made")


def write_request(run_dir: Path, request: WindowRequest) -> None:
    """Append ``request`` to the run's requests file in one ``write`` (``O_APPEND``: lines of
    writers asking at the same moment never interleave). The file is opened without following
    a link (``O_NOFOLLOW``) and must be a regular file of this user's; the run directory is
    checked first (:func:`check_run_dir`). :class:`InputError` when it cannot be written."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    path = run_dir / contract.REQUESTS_FILE
    line = (json.dumps(request.to_json(), separators=(",", ":")) + "\n").encode()
    try:
        # O_NONBLOCK: a FIFO planted at the name fails to open instead of blocking the writer
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC | _NONBLOCK, 0o600)
    except OSError as exc:
        raise InputError(str(path), f"cannot write the request: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
            raise InputError(str(path), "is not a regular file of yours; the request was not written")
        os.write(fd, line)
    except OSError as exc:
        raise InputError(str(path), f"cannot write the request: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    # the processes are writing: a line without its newline yet is left for the next read
    return read_jsonl(path, live=True)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class Answers:
    """What the run's processes answered to one request so far: the windows opened (``pid`` ->
    the ``window_open`` event), skipped (``pid`` -> reason) and written (``pid`` -> the
    ``windows.jsonl`` line)."""

    request_id: str
    opened: dict[int, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    written: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def answered(self) -> set[int]:
        """The pids that answered (opened or skipped)."""
        return set(self.opened) | set(self.skipped)


def read_answers(run_dir: Path, request_id: str) -> Answers:
    """The answers to ``request_id`` in the run directory's events and windows files."""
    run_dir = Path(run_dir)
    out = Answers(request_id)
    for e in _read_jsonl(run_dir / contract.EVENTS_FILE):
        pid = _int(e.get("pid"))
        if e.get("request") != request_id or pid is None:
            continue
        if e.get("event") == "window_open":
            out.opened[pid] = e
        elif e.get("event") == "window_skipped":
            out.skipped[pid] = str(e.get("reason") or "no reason given")
    for w in _read_jsonl(run_dir / contract.WINDOWS_FILE):
        pid = _int(w.get("pid"))
        if w.get("request") == request_id and pid is not None:
            out.written[pid] = w
    return out


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a process of another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def process_name(pid: int) -> str:
    """A process's short name (``/proc/PID/comm`` on Linux, else psutil), ``?`` when unknown."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "?"
    except OSError:
        pass
    try:
        import psutil

        return str(psutil.Process(pid).name()) or "?"
    except Exception:  # no psutil, or the process is gone
        return "?"


@dataclass(frozen=True)
class ArmedProcess:
    """A process of the run that imported torch (``armed``), has not exited, and still runs."""

    pid: int
    #: when it imported torch (its ``armed`` event), ns since the epoch
    armed_ns: int | None


def armed_processes(run_dir: Path, alive: Callable[[int], bool] = pid_alive) -> list[ArmedProcess]:
    """The run's processes that can answer a request now: an ``armed`` event, no ``exit`` event,
    and the pid alive (a process killed with SIGKILL writes no ``exit``); by pid."""
    armed: dict[int, int | None] = {}
    exited: set[int] = set()
    for e in _read_jsonl(Path(run_dir) / contract.EVENTS_FILE):
        pid = _int(e.get("pid"))
        if pid is None:
            continue
        if e.get("event") == "armed":
            armed[pid] = _int(e.get("ts_ns"))
            exited.discard(pid)  # a pid reused after an exit is a new process
        elif e.get("event") == "exit":
            exited.add(pid)
    return [ArmedProcess(pid, ns) for pid, ns in sorted(armed.items()) if pid not in exited and alive(pid)]


def targets(request: WindowRequest, armed: Iterable[ArmedProcess]) -> list[int]:
    """The armed processes ``request`` asks (all of them when its pids are None)."""
    pids = [a.pid for a in armed]
    return pids if request.pids is None else [p for p in pids if p in set(request.pids)]


def wait_for_answers(run_dir: Path, request: WindowRequest, expected: Iterable[int], *,
                     timeout_s: float = ANSWER_TIMEOUT_S, clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep,
                     alive: Callable[[int], bool] = pid_alive) -> tuple[Answers, set[int]]:
    """Poll until every pid in ``expected`` has answered ``request``, has gone, or ``timeout_s``
    has passed; the answers and the pids that neither answered nor ended."""
    want = set(expected)
    deadline = clock() + timeout_s
    while True:
        answers = read_answers(run_dir, request.id)
        silent = {p for p in want - answers.answered if alive(p)}
        if not silent or clock() >= deadline:
            return answers, silent
        sleep(min(contract.REQUEST_POLL_S, max(deadline - clock(), 0.0)))


def wait_for_windows(run_dir: Path, request: WindowRequest, answers: Answers, *,
                     timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep,
                     alive: Callable[[int], bool] = pid_alive) -> Answers:
    """Poll until every window opened for ``request`` is written, its process has gone, or the
    bound (its duration plus :data:`WRITE_TIMEOUT_S` unless ``timeout_s``) has passed."""
    bound = request.duration_s + WRITE_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = clock() + bound
    while True:
        now = read_answers(run_dir, request.id)
        pending = {p for p in answers.opened if p not in now.written and alive(p)}
        if not pending or clock() >= deadline:
            return now
        sleep(min(0.25, max(deadline - clock(), 0.0)))


@dataclass(frozen=True)
class GpuProcesses:
    """The run's processes the GPU collectors last saw on each GPU (:data:`GPU_PROCESSES_FILE`)."""

    ts_ns: int
    devices: dict[str, tuple[int, ...]]

    @property
    def pids(self) -> tuple[int, ...]:
        """Every pid on any GPU, sorted."""
        return tuple(sorted({p for ps in self.devices.values() for p in ps}))


def write_gpu_processes(run_dir: Path, seen: GpuProcesses) -> None:
    """Replace :data:`GPU_PROCESSES_FILE` (a fresh file renamed into place: a reader never sees
    half of it, and a link planted at the name is replaced, never written through). Errors are
    the caller's to ignore: the file only narrows whom ``gpuscope profile`` asks."""
    run_dir = Path(run_dir)
    doc = {"ts_ns": seen.ts_ns, "pids": list(seen.pids), "devices": {k: list(v) for k, v in sorted(seen.devices.items())}}
    tmp = run_dir / f".{GPU_PROCESSES_FILE}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)  # one left by a write that failed half way (unlink removes a link, not its target)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", closefd=False) as f:
            f.write(json.dumps(doc))
    finally:
        os.close(fd)
    os.replace(tmp, run_dir / GPU_PROCESSES_FILE)


def read_gpu_processes(run_dir: Path) -> GpuProcesses | None:
    """What :func:`write_gpu_processes` wrote, None when there is nothing usable (no GPU
    process seen, no per-process data: then every armed process is asked)."""
    try:
        fd = os.open(Path(run_dir) / GPU_PROCESSES_FILE, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            doc = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), dict):
        return None
    devices = {str(k): tuple(p for p in v if _int(p) is not None) for k, v in doc["devices"].items()
               if isinstance(v, list)}
    ts = _int(doc.get("ts_ns")) or 0
    return GpuProcesses(ts, devices) if any(devices.values()) else None


# -- a recording run, found through the store's read layer ------------------------------------

@dataclass(frozen=True)
class RecordingRun:
    """A ``gpuscope run`` that is recording now, and what a request to it needs."""

    id: int
    name: str
    run_dir: Path
    #: the wrapper's pid (``runs.info`` owner)
    owner_pid: int | None
    #: the profiler settings it runs with (the contract's encoding, ``runs.info.profile``)
    profile: dict[str, Any]
    #: the command, as stored (redacted)
    command: str | None


def recording_run(db: Path, ref: str | int | None) -> RecordingRun:
    """The run ``ref`` (an id or a name; None: the newest run that is recording), checked: it
    is a ``gpuscope run`` that is recording, its wrapper still runs, profiling is on, and its
    run directory is usable. :class:`InputError` naming the run otherwise (the CLI's exit 2)."""
    from .. import store
    from ..store import read, runs

    if not Path(db).exists():
        raise InputError(str(db), "no store here yet: start a run with `gpuscope run -- CMD`")
    con = store.connect(db, read_only=True)
    try:
        listed = read.list_runs(con)  # newest first; a recording run whose owner is gone reads incomplete
        if ref is None:
            row = next((r for r in listed if r["status"] == "recording" and r["source"] == "run"), None)
            if row is None:
                raise InputError(str(db), "no run is recording (start one with `gpuscope run -- CMD`)")
            found = read.RunRef(int(row["id"]), str(row["name"]))
        else:
            found = read.resolve_run(con, ref, db)
            row = next(r for r in listed if r["id"] == found.id)
        status, source, command = row["status"], row["source"], row["command"]
        info = runs.read_info(con, found.id)
        stale = found.id in set(runs.stale_runs(con))
    finally:
        con.close()
    label = f"run {found.id} ({found.name})"
    if source != "run" or not info.run_dir:
        raise InputError(label, "is not a `gpuscope run` (only a run started by `gpuscope run` can open windows)")
    owner = info.recorder
    if stale:
        raise InputError(label, f"its gpuscope process (pid {owner.pid if owner else '?'}) is gone: the run is "
                                "incomplete, nothing can open a window in it")
    if status != "recording":
        raise InputError(label, f"is not recording (it is {status}): windows open only while its program runs")
    profile = dict(info.profile or {})
    if not profile.get("enabled", True):
        raise InputError(label, "was started with --no-profile: telemetry only, no profiler windows")
    return RecordingRun(found.id, found.name, Path(info.run_dir), owner.pid if owner else None, profile,
                        command if isinstance(command, str) else None)


def ask_window(run_dir: Path, duration_s: float, source: str) -> tuple[WindowRequest, list[int]]:
    """Write a request for a window of ``duration_s`` now in the run's GPU processes (those the
    wrapper saw on a GPU, :data:`GPU_PROCESSES_FILE`; every armed process when it saw none or
    has no per-process data); the request and the armed processes it asks."""
    seen = read_gpu_processes(run_dir)
    request = new_request(duration_s, seen.pids if seen is not None else None, source)
    write_request(run_dir, request)
    return request, targets(request, armed_processes(run_dir))
