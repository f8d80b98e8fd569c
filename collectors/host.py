"""Host telemetry through psutil: CPU, memory, and the watched process tree.

The host is one device, key ``host``, kind ``host``; its row in ``samples`` fills the
host-scope columns of :mod:`gpuscope.metrics` (``host_cpu_util``, ``host_mem_used_bytes``,
``host_mem_total_bytes``, ``proc_cpu_cores``, ``proc_rss_bytes``, ``proc_count``) and leaves
the GPU columns NULL.

The process tree (the wrapped command and all its descendants) is re-listed at most once a
second (listing children scans every process on the machine); the CPU time and RSS of the
processes in it are read every tick.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
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

__all__ = ["HostCollector", "ProcessTree", "cpu_model_name"]


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
        self._cpu_base: tuple[float, Any] = (0.0, None)

    def _open(self) -> list[DeviceInfo]:
        psutil = self._psutil = _psutil()
        vm = psutil.virtual_memory()
        self._cpu_base = (time.monotonic(), psutil.cpu_times())
        try:
            host = os.uname().nodename
        except AttributeError:  # pragma: no cover - Windows
            import socket

            host = socket.gethostname()
        supported = ["host_cpu_util", "host_mem_used_bytes", "host_mem_total_bytes"]
        unsupported = {}
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
            values["host_cpu_util"] = self._cpu_util()
            vm = psutil.virtual_memory()
            values["host_mem_used_bytes"] = int(vm.total - vm.available)
            values["host_mem_total_bytes"] = int(vm.total)
        except Exception as exc:  # /proc unreadable (containers): report once, keep going
            self.degrade("host", "host_cpu_util", f"psutil: {type(exc).__name__}: {exc}")
        if self.tree is not None:
            values.update(self._tree_values())
        return [Sample("host", ts, values)]

    def _cpu_util(self) -> float | None:
        """Busy fraction of all CPUs since the previous window. The kernel counts CPU time in
        jiffies (10 ms), so a window shorter than 50 ms says nothing: those ticks get None."""
        mono = time.monotonic()
        t0, prev = self._cpu_base
        if mono - t0 < 0.05:
            return None
        cur = self._psutil.cpu_times()
        self._cpu_base = (mono, cur)
        total = sum(cur) - sum(prev)
        idle = (cur.idle - prev.idle) + (getattr(cur, "iowait", 0.0) - getattr(prev, "iowait", 0.0))
        if total <= 0:
            return None
        return min(max((total - idle) / total, 0.0), 1.0)

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
