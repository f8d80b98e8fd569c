"""Host telemetry through psutil: CPU, memory, and the watched process tree.

The host is one device, key ``host``, kind ``host``; its row in ``samples`` fills the
host-scope columns of :mod:`gpuscope.metrics` (``host_cpu_util``, the CPU time by mode
``host_cpu_<mode>_util``, ``host_mem_used_bytes``, ``host_mem_total_bytes``,
``proc_cpu_cores``, ``proc_rss_bytes``, ``proc_count``) and leaves the GPU columns NULL.

CPU time by mode (:func:`cpu_mode_fractions`): the modes are OpenTelemetry's ``cpu.mode``
values that the conventions ask ``system.cpu.time`` / ``.utilization`` to use (user, system,
nice, idle, iowait, interrupt, steal). Over each window, a mode's value is the CPU time all
logical CPUs spent in it divided by the CPU time they spent in any mode: the OpenTelemetry
Collector's hostmetrics receiver computes each CPU's utilization this way (the change of each
mode's time over the change of the CPU's total), and summing over the CPUs before dividing
gives the mean over the CPUs (every online CPU counts each tick in exactly one mode, so the
total is the window times the number of CPUs). The modes sum to 1.

The process tree (the wrapped command and all its descendants) is re-listed at most once a
second (listing children scans every process on the machine); the CPU time and RSS of the
processes in it are read every tick.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .base import (
    HOST_METRIC_NAMES,
    Collector,
    CollectorUnavailable,
    DeviceInfo,
    Sample,
    VendorStatus,
    WatchedProcesses,
    now_ns,
)

__all__ = ["CPU_MODE_COLUMNS", "CpuTimesWindow", "HostCollector", "ProcessTree", "cpu_mode_fractions", "cpu_model_name"]


def _psutil() -> Any:
    try:
        import psutil
    except ImportError:
        raise CollectorUnavailable("host", "psutil not installed (pip install psutil)") from None
    return psutil


class ProcessTree(WatchedProcesses):
    """The processes to watch: ``roots`` and all their descendants (``gpuscope run``'s wrapped
    command, ``gpuscope record --pid``).

    :meth:`pids` re-lists the tree at most every ``refresh_s`` seconds; a root that exits
    leaves its still-running descendants watched until they exit too.
    """

    def __init__(self, roots: Iterable[int], refresh_s: float = 1.0) -> None:
        self.roots = tuple(int(p) for p in roots)
        self.refresh_s = refresh_s
        self._procs: dict[int, Any] = {}
        self._last = -1e18

    def refresh(self, force: bool = False) -> None:
        """Re-list the tree now (or when ``refresh_s`` has passed)."""
        mono = time.monotonic()
        if not force and mono - self._last < self.refresh_s:
            return
        self._last = mono
        psutil = _psutil()
        found: dict[int, Any] = {}
        for pid in self.roots:
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                if not root.is_running():
                    continue
                found[pid] = root
                for child in root.children(recursive=True):
                    found[child.pid] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        # orphans of an exited root are re-parented away: keep following those we knew
        for pid, p in self._procs.items():
            if pid not in found:
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        found[pid] = p
                        for child in p.children(recursive=True):
                            found.setdefault(child.pid, child)
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
        self._procs = found

    def pids(self) -> frozenset[int]:
        """The pids in the tree (re-listed at most every ``refresh_s``)."""
        self.refresh()
        return frozenset(self._procs)

    def processes(self) -> list[Any]:
        """The ``psutil.Process`` objects in the tree."""
        self.refresh()
        return list(self._procs.values())


#: OpenTelemetry ``cpu.mode`` value -> the stored column (gpuscope/metrics.py). ``kernel``, the
#: conventions' eighth value, is for process and container CPU time, not a host's modes.
CPU_MODE_COLUMNS: dict[str, str] = {
    "user": "host_cpu_user_util", "system": "host_cpu_system_util", "nice": "host_cpu_nice_util",
    "idle": "host_cpu_idle_util", "iowait": "host_cpu_iowait_util", "interrupt": "host_cpu_interrupt_util",
    "steal": "host_cpu_steal_util",
}
#: The fields of ``psutil.cpu_times()`` each mode sums, on any platform (Linux: user, nice,
#: system, idle, iowait, irq, softirq, steal, guest, guest_nice; macOS: user, nice, system,
#: idle; Windows: user, system, idle, interrupt, dpc; FreeBSD: user, nice, system, idle, irq).
#: Hard and soft interrupts (Linux softirq, Windows DPCs) are both interrupt servicing: the
#: conventions have one ``interrupt`` mode for them (the hostmetrics receiver's own ``softirq``
#: is no value of theirs). psutil 8 names Windows' ``interrupt`` ``irq``: either is read. A mode
#: with none of its fields on the platform is None.
CPU_MODE_FIELDS: dict[str, tuple[str, ...]] = {
    "user": ("user",), "system": ("system",), "nice": ("nice",), "idle": ("idle",), "iowait": ("iowait",),
    "interrupt": ("irq", "softirq", "interrupt", "dpc"), "steal": ("steal",),
}
#: Fields the kernel already counts in another one (Linux adds guest time to ``user`` and
#: guest_nice to ``nice``, kernel/sched/cputime.c account_guest_time): never counted twice.
_COUNTED_ELSEWHERE = frozenset({"guest", "guest_nice"})
#: The kernel counts CPU time in ticks (10 ms): a shorter window says nothing (None).
MIN_CPU_WINDOW_S = 0.05


def cpu_mode_fractions(prev: Mapping[str, float], cur: Mapping[str, float]) -> dict[str, float | None]:
    """Each ``cpu.mode``'s share of the CPU time all logical CPUs spent between two readings of
    their cumulative times (``psutil.cpu_times()._asdict()``, seconds or ticks alike): the mode's
    increase over the increase of every mode together (guest times left out: already in user /
    nice; on Windows the interrupt and DPC time taken out of system, which holds them). A field
    that went back (Linux's iowait can, on tickless kernels) counts 0. The modes
    sum to 1; a mode the platform does not count is None; all are None when no time passed."""
    counted = [k for k in cur if k in prev and k not in _COUNTED_ELSEWHERE]
    delta = {k: max(float(cur[k]) - float(prev[k]), 0.0) for k in counted}
    if "dpc" in delta and "system" in delta:
        # Windows (the one platform with DPCs): psutil's system is the kernel time less idle,
        # which holds the interrupt and DPC time (perfmon: "DPC Time is a component of
        # Privileged Time"); counted once, in interrupt
        inside = delta["dpc"] + delta.get("interrupt", 0.0) + delta.get("irq", 0.0)
        delta["system"] = max(delta["system"] - inside, 0.0)
    total = sum(delta.values())
    out: dict[str, float | None] = {}
    for mode, fields in CPU_MODE_FIELDS.items():
        present = [f for f in fields if f in delta]
        out[mode] = sum(delta[f] for f in present) / total if present and total > 0 else None
    return out


class CpuTimesWindow:
    """The host's CPU use between two readings of its cumulative CPU times: the busy fraction
    (``host_cpu_util``) and each mode's (``host_cpu_<mode>_util``, :func:`cpu_mode_fractions`),
    both over the same window. ``read`` gives the times (``psutil.cpu_times``), ``clock`` the
    monotonic seconds that tell how long the window was."""

    def __init__(self, read: Callable[[], Any], clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._clock = clock
        self._base: tuple[float, Any] | None = None

    def start(self) -> Any:
        """Take the first reading (the start of the first window) and return it."""
        self._base = (self._clock(), self._read())
        return self._base[1]

    def sample(self) -> dict[str, float | None]:
        """The values of the window since the previous reading, which this one ends: None for
        a window shorter than :data:`MIN_CPU_WINDOW_S` (the reading is not taken then, so the
        next window is longer)."""
        out: dict[str, float | None] = {"host_cpu_util": None, **dict.fromkeys(CPU_MODE_COLUMNS.values())}
        mono = self._clock()
        if self._base is None:
            self._base = (mono, self._read())
            return out
        t0, prev = self._base
        if mono - t0 < MIN_CPU_WINDOW_S:
            return out
        cur = self._read()
        self._base = (mono, cur)
        modes = cpu_mode_fractions(prev._asdict(), cur._asdict())
        for mode, value in modes.items():
            out[CPU_MODE_COLUMNS[mode]] = value
        out["host_cpu_util"] = _busy_fraction(modes)
        return out


def _busy_fraction(modes: Mapping[str, float | None]) -> float | None:
    """Busy fraction of all CPUs over the window: every mode but idle and I/O wait, from the
    same shares as the modes (so guest time, which Linux also counts in user, is counted once:
    summing psutil's fields counted it twice and read above 1 - idle - iowait on a VM host)."""
    idle = modes.get("idle")
    if idle is None:
        return None
    return min(max(1.0 - idle - (modes.get("iowait") or 0.0), 0.0), 1.0)


def cpu_model_name() -> str | None:
    """The CPU's model name (Linux ``/proc/cpuinfo``), None elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return None


class HostCollector(Collector):
    """The host's CPU and memory, and the CPU time / RSS of a :class:`ProcessTree`."""

    source = "host"

    def __init__(self, tree: ProcessTree | None = None, *, roots: Iterable[int] | None = None) -> None:
        super().__init__()
        if tree is None and roots is not None:
            tree = ProcessTree(roots)
        self.tree = tree
        self._psutil: Any = None
        self._cpu_prev: dict[tuple[int, float], float] = {}
        self._cpu_prev_mono: float | None = None
        self._cpu_prev_wall = 0.0
        self._cpu: CpuTimesWindow | None = None

    def _open(self) -> list[DeviceInfo]:
        psutil = self._psutil = _psutil()
        vm = psutil.virtual_memory()
        self._cpu = CpuTimesWindow(psutil.cpu_times)
        fields = set(self._cpu.start()._fields)
        try:
            host = os.uname().nodename
        except AttributeError:  # pragma: no cover - Windows
            import socket

            host = socket.gethostname()
        supported = ["host_cpu_util", "host_mem_used_bytes", "host_mem_total_bytes"]
        unsupported = {}
        for mode, column in CPU_MODE_COLUMNS.items():
            if fields & set(CPU_MODE_FIELDS[mode]):
                supported.append(column)
            else:
                unsupported[column] = f"this platform's CPU times have no {mode} mode (psutil on {sys.platform})"
        if self.tree is not None:
            supported += ["proc_cpu_cores", "proc_rss_bytes", "proc_count"]
            self.tree.refresh(force=True)
        else:
            for m in ("proc_cpu_cores", "proc_rss_bytes", "proc_count"):
                unsupported[m] = "no process tree to watch (only with `gpuscope run` or --pid)"
        info = DeviceInfo(
            key="host", vendor="host", kind="host", name=cpu_model_name(), memory_total_bytes=int(vm.total),
            supported=tuple(m for m in HOST_METRIC_NAMES if m in supported), unsupported=unsupported,
            properties={"hostname": host, "cpus_logical": psutil.cpu_count(logical=True),
                        "cpus_physical": psutil.cpu_count(logical=False),
                        "watched_roots": list(self.tree.roots) if self.tree else []},
        )
        self.status = VendorStatus("host", True, "psutil", details={"psutil": getattr(psutil, "__version__", None)})
        return [info]

    def sample(self) -> list[Sample]:
        psutil = self._psutil
        ts = now_ns()
        values: dict[str, float | int | None] = {}
        try:
            if self._cpu is not None:  # opened
                values.update(self._cpu.sample())
            vm = psutil.virtual_memory()
            values["host_mem_used_bytes"] = int(vm.total - vm.available)
            values["host_mem_total_bytes"] = int(vm.total)
        except Exception as exc:  # /proc unreadable (containers): report once, keep going
            self.degrade("host", "host_cpu_util", f"psutil: {type(exc).__name__}: {exc}")
        if self.tree is not None:
            values.update(self._tree_values())
        return [Sample("host", ts, values)]

    def _tree_values(self) -> dict[str, float | int | None]:
        psutil = self._psutil
        mono = time.monotonic()
        cpu_now: dict[tuple[int, float], float] = {}
        rss = 0
        for p in self.tree.processes() if self.tree else []:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    cpu_now[(p.pid, p.create_time())] = t.user + t.system
                    rss += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except psutil.AccessDenied:
                self.degrade("host", "proc_cpu_cores", f"no permission to read process {p.pid}")
                continue
        cores = None
        if self._cpu_prev_mono is not None and mono > self._cpu_prev_mono:
            # per process, so that a process that exits does not make the sum go backwards; a
            # process new to the tree counts whole only if it started within the window (else
            # its earlier CPU time would be counted here)
            busy = 0.0
            for k, v in cpu_now.items():
                prev = self._cpu_prev.get(k)
                if prev is None:
                    prev = 0.0 if k[1] >= self._cpu_prev_wall else v
                busy += max(v - prev, 0.0)
            cores = busy / (mono - self._cpu_prev_mono)
        self._cpu_prev, self._cpu_prev_mono, self._cpu_prev_wall = cpu_now, mono, time.time()
        return {"proc_cpu_cores": cores, "proc_rss_bytes": rss if cpu_now else None, "proc_count": len(cpu_now)}
