"""NVIDIA telemetry through NVML (``nvidia-ml-py``, module ``pynvml``).

Per tick and device: one batched ``nvmlDeviceGetFieldValues`` call (power instant/average,
energy, memory temperature, power limit, PCIe and NVLink byte counters; each value has its own
timestamp and status), a handful of cheap getters (utilisation, memory, temperature, clocks,
throttle reasons, fan), GPM on Hopper and newer (SM active, occupancy, tensor activity, DRAM
bandwidth utilisation; no profiling lock), and at most once a second the per-process memory
and SM utilisation of the watched pids. What each device supports is probed once in
``open()``; afterwards an unsupported read is None and reported once.

MIG instances are reported as devices of kind ``mig`` (memory, and GPM activity on Hopper);
a GPU that falls off the bus (``NVML_ERROR_GPU_IS_LOST``) is marked lost and the others go on.

``pynvml`` is imported inside :meth:`NvmlCollector.open`, so this module imports anywhere.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .base import (
    GPU_METRIC_NAMES,
    Collector,
    CollectorUnavailable,
    DeviceInfo,
    ProcessSample,
    Sample,
    VendorStatus,
    now_ns,
    percent_to_ratio,
    watched,
)
from .nvml_probe import DeviceProbe, GpuLost, NvmlGpu, gpm_sample_get
from .nvml_values import (
    LOST_CODES,
    PERMANENT_CODES,
    NvmlReturn,
    NvmlStatusError,
    error_code,
    field_value,
    nvml_error_reason,
    nvml_text,
    pick_ts_ns,
    running_processes,
    try_or_none,
)

__all__ = ["NvmlCollector", "import_pynvml", "nvml_error_reason"]

INSTALL_HINT = "nvidia-ml-py not installed (pip install 'gpuscope[nvidia]')"

#: nvmlEventTypeXidCriticalError: the event NVML raises for an XID error.
EVENT_XID = 0x8
#: How often the XID event set is drained (each drain is a non-blocking wait per event).
XID_POLL_S = 1.0
ARCH_HOPPER = 9
_ARCH_NAMES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
               9: "Hopper", 10: "Blackwell"}

_MIB = 1024 * 1024
_KIB = 1024


def import_pynvml() -> ModuleType:
    """Import ``pynvml`` (from nvidia-ml-py) or raise :class:`CollectorUnavailable` saying why."""
    try:
        with warnings.catch_warnings():
            # the deprecated `pynvml` PyPI package warns on import; nvidia-ml-py does not
            warnings.simplefilter("ignore")
            import pynvml
    except ImportError:
        raise CollectorUnavailable("nvidia", INSTALL_HINT) from None
    except Exception as exc:  # a broken install
        raise CollectorUnavailable("nvidia", f"pynvml failed to import ({type(exc).__name__}: {exc})") from None
    if not hasattr(pynvml, "nvmlInit"):
        raise CollectorUnavailable(
            "nvidia", "the installed 'pynvml' module is not nvidia-ml-py (no nvmlInit): pip install nvidia-ml-py")
    return pynvml


class NvmlCollector(Collector):
    """NVIDIA GPUs through NVML.

    ``nvml`` injects a pynvml-compatible module (tests pass a fake one); by default
    ``pynvml`` is imported in :meth:`open`. ``process_interval_s`` paces the per-process
    queries (enumerating processes costs milliseconds in the driver); ``gpm_min_interval_s``
    is the shortest GPM window (GPM needs about 100 ms between its two samples);
    ``slow_counter_interval_s`` paces counter fields that proved slow to read
    (:data:`~gpuscope.collectors.nvml_probe.SLOW_FIELD_S`).
    """

    source = "nvidia"
    min_interval_s = 0.01

    def __init__(self, nvml: ModuleType | Any | None = None, *, gpm: bool = True,
                 process_interval_s: float = 1.0, gpm_min_interval_s: float = 0.1,
                 pcie_fallback_interval_s: float = 1.0, slow_counter_interval_s: float = 1.0) -> None:
        super().__init__()
        self._mod_override = nvml
        self.nvml: Any = None
        self.use_gpm = gpm
        self.process_interval_s = process_interval_s
        self.gpm_min_interval_s = gpm_min_interval_s
        self.pcie_fallback_interval_s = pcie_fallback_interval_s
        self.slow_counter_interval_s = slow_counter_interval_s
        self.driver_version: str | None = None
        self._gpus: list[NvmlGpu] = []
        self._pids: frozenset[int] = frozenset()
        self._xid_set: Any = None
        self._xid_last = -1e18
        self._initialised = False

    # ------------------------------------------------------------------ open / probe
    def _open(self) -> list[DeviceInfo]:
        mod = self._mod_override if self._mod_override is not None else import_pynvml()
        self.nvml = mod
        try:
            mod.nvmlInit()
        except Exception as exc:
            raise CollectorUnavailable("nvidia", nvml_error_reason(exc)) from None
        self._initialised = True
        try:
            self.driver_version = nvml_text(mod.nvmlSystemGetDriverVersion())
        except Exception:
            self.driver_version = None
        try:
            count = int(mod.nvmlDeviceGetCount())
        except Exception as exc:
            self._shutdown()
            raise CollectorUnavailable("nvidia", nvml_error_reason(exc)) from None
        if count == 0:
            self._shutdown()
            raise CollectorUnavailable("nvidia", "NVML found no NVIDIA GPU (driver loaded, 0 devices)")
        devices: list[DeviceInfo] = []
        for i in range(count):
            for g in self._open_gpu(i):
                self._gpus.append(g)
                devices.append(g.info)
        self._register_xid()
        self.status = VendorStatus("nvidia", True, "nvml",
                                   details={"driver_version": self.driver_version, "gpus": count})
        return devices

    def _register_xid(self) -> None:
        """Ask NVML for XID error events on every GPU (not MIG instances: their parent's events
        cover them); a GPU or driver that refuses says why in ``unsupported``."""
        mod = self.nvml
        self._xid_set = None
        names = ("xid_errors", "last_xid")
        try:
            self._xid_set = mod.nvmlEventSetCreate()
            why = None
        except Exception as exc:
            why = f"XID events: {nvml_error_reason(exc)}"
        for gpu in self._gpus:
            if gpu.lost or gpu.info.kind != "gpu":
                reason = "XID events come with the parent GPU" if gpu.info.kind == "mig" else (why or "lost")
            elif self._xid_set is None:
                reason = why or "XID events unavailable"
            else:
                try:
                    mod.nvmlDeviceRegisterEvents(gpu.handle, EVENT_XID, self._xid_set)
                    gpu.xid = True
                    gpu.info.supported = tuple(m for m in GPU_METRIC_NAMES if m in set(gpu.info.supported) | set(names))
                    for m in names:
                        gpu.info.unsupported.pop(m, None)
                    continue
                except Exception as exc:
                    reason = f"XID events: {nvml_error_reason(exc)}"
            for m in names:
                gpu.info.unsupported[m] = reason

    def _drain_xid(self) -> None:
        """Count the XID events NVML holds (a non-blocking wait until it has none)."""
        mod, es = self.nvml, self._xid_set
        wait = getattr(mod, "nvmlEventSetWait_v2", None) or mod.nvmlEventSetWait
        by_uuid = {gpu.info.uuid: gpu for gpu in self._gpus if gpu.xid}
        for _ in range(1000):  # a storm of events must not hold the tick forever
            try:
                ev = wait(es, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing pending (or the set failed: next time)
                return
            if not int(getattr(ev, "eventType", 0)) & EVENT_XID:
                continue
            try:
                gpu = by_uuid.get(nvml_text(mod.nvmlDeviceGetUUID(ev.device)))
            except Exception:
                gpu = None
            if gpu is not None:
                gpu.xid_count += 1
                gpu.last_xid = int(ev.eventData)

    def _open_gpu(self, index: int) -> list[NvmlGpu]:
        mod = self.nvml
        key = f"gpu{index}"
        try:
            h = mod.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            reason = nvml_error_reason(exc)
            info = DeviceInfo(key=key, vendor="nvidia", index=index, lost=error_code(exc) in LOST_CODES,
                              unsupported={m: reason for m in GPU_METRIC_NAMES},
                              properties={"error": reason})
            return [NvmlGpu(info=info, handle=None, lost=True)]
        info = DeviceInfo(key=key, vendor="nvidia", index=index)
        info.name = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetName(h)))
        info.uuid = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetUUID(h)))
        pci = try_or_none(lambda: mod.nvmlDeviceGetPciInfo(h))
        if pci is not None:
            info.pci_bus_id = nvml_text(getattr(pci, "busId", None))
            dev_id = getattr(pci, "pciDeviceId", None)
            if isinstance(dev_id, int):
                info.pci_device_id = f"0x{(dev_id >> 16) & 0xFFFF:04x}"
        cc = try_or_none(lambda: mod.nvmlDeviceGetCudaComputeCapability(h))
        if cc:
            info.compute_capability = f"{cc[0]}.{cc[1]}"
        arch = try_or_none(lambda: int(mod.nvmlDeviceGetArchitecture(h)))
        mem = try_or_none(lambda: mod.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            info.memory_total_bytes = int(mem.total)
        info.warp_size = 32
        info.properties.update({"architecture": _ARCH_NAMES.get(arch, arch) if arch is not None else None,
                                "driver_version": self.driver_version})
        # nvidia-smi -q's "Serial Number" and "VBIOS Version" (None where the board has none:
        # NVML answers NotSupported on GeForce boards)
        info.properties["serial_number"] = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetSerial(h))) or None
        info.properties["vbios_version"] = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetVbiosVersion(h))) or None
        mig = try_or_none(lambda: mod.nvmlDeviceGetMigMode(h))
        mig_on = bool(mig and mig[0] == 1)
        info.properties["mig_mode"] = None if mig is None else ("enabled" if mig_on else "disabled")
        gpu = NvmlGpu(info=info, handle=h)
        gpm_ok, gpm_reason = self._gpm_support(h, arch)
        if not self._probe_or_lose(gpu, gpm_ok, gpm_reason, mig_on=mig_on):
            return [gpu]
        out = [gpu]
        if mig_on:
            out.extend(self._open_migs(gpu, gpm_ok, gpm_reason))
        return out

    def _gpm_support(self, h: Any, arch: int | None) -> tuple[bool, str]:
        mod = self.nvml
        if not self.use_gpm:
            return False, "GPM disabled"
        if arch is not None and arch < ARCH_HOPPER:
            return False, f"needs GPM (Hopper or newer; this GPU is {_ARCH_NAMES.get(arch, arch)})"
        if not hasattr(mod, "nvmlGpmQueryDeviceSupport"):
            return False, "needs GPM: nvidia-ml-py too old (no nvmlGpmQueryDeviceSupport)"
        try:
            sup = mod.nvmlGpmQueryDeviceSupport(h)
        except Exception as exc:
            return False, f"needs GPM ({nvml_error_reason(exc)})"
        if not getattr(sup, "isSupportedDevice", 0):
            return False, "needs GPM (not supported by this GPU)"
        return True, ""

    def _probe_or_lose(self, gpu: NvmlGpu, gpm_ok: bool, gpm_reason: str, mig_on: bool = False,
                       is_mig: bool = False) -> bool:
        """Probe ``gpu``; a GPU lost while probing is marked lost (False), never raised."""
        try:
            DeviceProbe(self.nvml, gpu, is_mig=is_mig, degrade=self.degrade,
                        pcie_fallback_interval_s=self.pcie_fallback_interval_s,
                        slow_counter_interval_s=self.slow_counter_interval_s).run(gpm_ok, gpm_reason, mig_on=mig_on)
            return True
        except GpuLost as lost:
            reason = lost.reason
        except Exception as exc:
            if error_code(exc) not in LOST_CODES:
                raise
            reason = nvml_error_reason(exc)
        gpu.lost = gpu.info.lost = True
        gpu.info.supported = ()
        gpu.info.unsupported = {m: reason for m in GPU_METRIC_NAMES}
        gpu.info.properties["error"] = reason
        return False

    def _open_migs(self, parent: NvmlGpu, gpm_ok: bool, gpm_reason: str) -> list[NvmlGpu]:
        mod, h = self.nvml, parent.handle
        out: list[NvmlGpu] = []
        try:
            n = int(mod.nvmlDeviceGetMaxMigDeviceCount(h))
        except Exception as exc:
            parent.info.properties["mig_error"] = nvml_error_reason(exc)
            self.degrade(parent.info.key, None, f"MIG instances not listed: {nvml_error_reason(exc)}", phase="probe")
            return out
        for j in range(n):
            try:
                mh = mod.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except Exception as exc:
                if error_code(exc) != NvmlReturn.NOT_FOUND:
                    self.degrade(parent.info.key, None, f"MIG slot {j}: {nvml_error_reason(exc)}", phase="probe")
                continue
            out.append(self._open_mig(parent, j, mh, gpm_ok, gpm_reason))
        return out

    def _open_mig(self, parent: NvmlGpu, j: int, mh: Any, gpm_ok: bool, gpm_reason: str) -> NvmlGpu:
        """MIG instance ``j`` of ``parent`` (handle ``mh``): its identity, then its probe."""
        mod, h = self.nvml, parent.handle
        key = f"{parent.info.key}/mig{j}"
        info = DeviceInfo(key=key, vendor="nvidia", kind="mig", parent=parent.info.key,
                          index=parent.info.index, pci_bus_id=parent.info.pci_bus_id,
                          pci_device_id=parent.info.pci_device_id,
                          compute_capability=parent.info.compute_capability, warp_size=32)
        info.name = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetName(mh)))
        info.uuid = try_or_none(lambda: nvml_text(mod.nvmlDeviceGetUUID(mh)))
        mem = try_or_none(lambda: mod.nvmlDeviceGetMemoryInfo(mh))
        if mem is not None:
            info.memory_total_bytes = int(mem.total)
        gi = try_or_none(lambda: int(mod.nvmlDeviceGetGpuInstanceId(mh)))
        info.properties.update({"mig_slot": j, "gpu_instance_id": gi,
                                "compute_instance_id": try_or_none(lambda: int(mod.nvmlDeviceGetComputeInstanceId(mh))),
                                "driver_version": self.driver_version})
        g = NvmlGpu(info=info, handle=mh, parent_handle=h, gpu_instance_id=gi)
        try:
            self._probe_or_lose(g, gpm_ok and gi is not None and hasattr(mod, "nvmlGpmMigSampleGet"),
                                gpm_reason, is_mig=True)
        except Exception as exc:  # never let one MIG instance stop the others
            info.unsupported = {m: nvml_error_reason(exc) for m in GPU_METRIC_NAMES}
            info.supported = ()
        return g

    # ------------------------------------------------------------------ sampling
    def set_pids(self, pids: set[int] | frozenset[int]) -> None:
        self._pids = watched(pids)

    def sample(self) -> list[Sample]:
        out: list[Sample] = []
        if self._xid_set is not None and time.monotonic() - self._xid_last >= XID_POLL_S:
            self._xid_last = time.monotonic()
            self._drain_xid()
        for gpu in self._gpus:
            if gpu.lost:
                continue
            try:
                out.append(self._sample_gpu(gpu))
            except GpuLost as lost:
                gpu.lost = gpu.info.lost = True
                self.degrade(gpu.info.key, None, f"{lost.reason}: marked lost, no more samples from it",
                              phase="lost")
                out.append(Sample(gpu.info.key, now_ns(), {}, lost=True))
        return out

    def _sample_gpu(self, gpu: NvmlGpu) -> Sample:
        mod, h, key = self.nvml, gpu.handle, gpu.info.key
        read_ns = now_ns()
        mono = time.monotonic()
        values: dict[str, float | int | None] = {}
        vendor_ts = 0
        ids = gpu.fields
        if gpu.slow_fields and mono - gpu.slow_last_mono >= self.slow_counter_interval_s:
            gpu.slow_last_mono = mono
            ids = ids + gpu.slow_fields
        if ids:
            try:
                fvs = mod.nvmlDeviceGetFieldValues(h, ids)
            except Exception as exc:
                self._read_failed(gpu, "field values", exc)
                fvs = []
            raw: dict[str, tuple[float, int]] = {}
            for fid, fv in zip(ids, fvs):
                name = gpu.field_metric[fid]
                if fv.nvmlReturn != NvmlReturn.SUCCESS:
                    if fv.nvmlReturn in LOST_CODES:
                        raise GpuLost(nvml_error_reason(NvmlStatusError(fv.nvmlReturn)))
                    self.degrade(key, name.lstrip("_"), nvml_error_reason(NvmlStatusError(fv.nvmlReturn)))
                    continue
                v = field_value(fv)
                if v is None:
                    continue
                ts = int(fv.timestamp) * 1000 if fv.timestamp else read_ns
                vendor_ts = max(vendor_ts, ts)
                raw[name] = (float(v), ts)
            for name, scale in (("power_w", 1e-3), ("power_instant_w", 1e-3), ("energy_j", 1e-3),
                                ("power_limit_w", 1e-3), ("mem_temp_c", 1.0)):
                if name in raw:
                    values[name] = raw[name][0] * scale
            for name in ("ecc_corrected_errors", "ecc_uncorrected_errors"):
                if name in raw:
                    values[name] = int(raw[name][0])
            if "_pcie_tx" in raw or "_pcie_rx" in raw:
                tx = self._rate(gpu, "pcie_tx", raw.get("_pcie_tx"))
                rx = self._rate(gpu, "pcie_rx", raw.get("_pcie_rx"))
                values["pcie_tx_bytes_per_s"], values["pcie_rx_bytes_per_s"] = tx, rx
                values["pcie_bytes_per_s"] = tx + rx if tx is not None and rx is not None else None
            nvl_tx = [raw[n] for n in raw if n.startswith("_nvl_tx")]
            nvl_rx = [raw[n] for n in raw if n.startswith("_nvl_rx")]
            if nvl_tx:
                values["xgmi_nvlink_tx_bytes_per_s"] = self._rate(
                    gpu, "nvl_tx", (sum(v for v, _ in nvl_tx) * _KIB, max(t for _, t in nvl_tx)))
            if nvl_rx:
                values["xgmi_nvlink_rx_bytes_per_s"] = self._rate(
                    gpu, "nvl_rx", (sum(v for v, _ in nvl_rx) * _KIB, max(t for _, t in nvl_rx)))
        for rd in list(gpu.reads):
            if rd.every_s and mono - rd.last_mono < rd.every_s:
                continue
            rd.last_mono = mono
            try:
                values.update(rd.fn(h))
            except Exception as exc:
                if self._read_failed(gpu, "/".join(rd.metrics), exc):
                    gpu.reads.remove(rd)
        if gpu.xid:
            values["xid_errors"], values["last_xid"] = gpu.xid_count, gpu.last_xid
        if gpu.gpm_ids and mono - gpu.gpm_last_mono >= self.gpm_min_interval_s:
            values.update(self._gpm_metrics(gpu, mono))
        if gpu.proc_reads and self._pids and mono - gpu.proc_last_mono >= self.process_interval_s:
            gpu.proc_last_mono = mono
            procs = self._processes(gpu)
            if procs is not None:
                mems = [p.gpu_mem_bytes for p in procs if p.gpu_mem_bytes is not None]
                utils = [p.gpu_util for p in procs if p.gpu_util is not None]
                values["proc_gpu_mem_bytes"] = sum(mems) if mems else (0 if not procs else None)
                if gpu.proc_util:
                    values["proc_gpu_util"] = min(sum(utils), 1.0) if utils else (0.0 if not procs else None)
                return Sample(key, pick_ts_ns(vendor_ts, read_ns), values, processes=tuple(procs))
        return Sample(key, pick_ts_ns(vendor_ts, read_ns), values)

    def _read_failed(self, gpu: NvmlGpu, what: str, exc: BaseException) -> bool:
        """Handle a failed read: raise GpuLost for a lost GPU; report once; True when the read
        should leave the plan for good."""
        code = error_code(exc)
        if code in LOST_CODES:
            raise GpuLost(nvml_error_reason(exc))
        self.degrade(gpu.info.key, what, nvml_error_reason(exc))
        return code in PERMANENT_CODES

    def _rate(self, gpu: NvmlGpu, name: str, cur: tuple[float, int] | None) -> float | None:
        """Bytes per second from a byte counter and its timestamp; None on the first reading,
        when the counter has not moved on in time, or went backwards (wrap or reset)."""
        if cur is None:
            return None
        prev = gpu.counters.get(name)
        gpu.counters[name] = cur
        if prev is None:
            return None
        dv, dt = cur[0] - prev[0], cur[1] - prev[1]
        if dt <= 0 or dv < 0:
            return None
        return dv / (dt / 1e9)

    def _gpm_metrics(self, gpu: NvmlGpu, mono: float) -> dict[str, float | None]:
        mod = self.nvml
        prev, cur = gpu.gpm_samples
        try:
            gpm_sample_get(self.nvml, gpu, cur)
        except Exception as exc:
            if self._read_failed(gpu, "gpm", exc):
                gpu.gpm_ids = {}
            return {}
        gpu.gpm_last_mono = mono
        ids = list(gpu.gpm_ids)
        out: dict[str, float | None] = {}
        try:
            mg = mod.c_nvmlGpmMetricsGet_t()
            mg.version = getattr(mod, "NVML_GPM_METRICS_GET_VERSION", 1)
            mg.numMetrics = len(ids)
            mg.sample1, mg.sample2 = prev, cur
            for i, mid in enumerate(ids):
                mg.metrics[i].metricId = mid
            mod.nvmlGpmMetricsGet(mg)
            for i, mid in enumerate(ids):
                name = gpu.gpm_ids[mid]
                m = mg.metrics[i]
                if m.nvmlReturn != NvmlReturn.SUCCESS:
                    self.degrade(gpu.info.key, name, "GPM: " + nvml_error_reason(NvmlStatusError(m.nvmlReturn)))
                    continue
                v = float(m.value)
                if name.endswith("_bytes_per_s"):
                    out[name] = v * _MIB
                else:
                    out[name] = percent_to_ratio(v)
            if "pcie_tx_bytes_per_s" in out and "pcie_rx_bytes_per_s" in out:
                out["pcie_bytes_per_s"] = out["pcie_tx_bytes_per_s"] + out["pcie_rx_bytes_per_s"]  # type: ignore[operator]
        except Exception as exc:
            self._read_failed(gpu, "gpm", exc)
        gpu.gpm_samples = [cur, prev]  # the newest sample opens the next window
        return out

    def _processes(self, gpu: NvmlGpu) -> list[ProcessSample] | None:
        mod, h = self.nvml, gpu.handle
        try:
            running = running_processes(mod, h)
        except Exception as exc:
            if self._read_failed(gpu, "processes", exc):
                gpu.proc_reads = False
            return None
        mem: dict[int, int | None] = {}
        for p in running:
            pid = int(p.pid)
            if pid not in self._pids:
                continue
            used = getattr(p, "usedGpuMemory", None)
            if used is not None and (used < 0 or used >= 2**63):
                used = None
            mem[pid] = (mem.get(pid) or 0) + used if used is not None else mem.get(pid)
        util: dict[int, float] = {}
        since = gpu.proc_last_seen_us or (time.time_ns() // 1000 - 1_000_000)
        util_ok = gpu.proc_util
        if util_ok:
            try:
                newest: dict[int, int] = {}
                for s in mod.nvmlDeviceGetProcessUtilization(h, since):
                    ts, pid = int(s.timeStamp), int(s.pid)
                    gpu.proc_last_seen_us = max(gpu.proc_last_seen_us, ts)
                    r = percent_to_ratio(s.smUtil)
                    if pid in self._pids and r is not None and ts >= newest.get(pid, 0):
                        newest[pid], util[pid] = ts, r  # the newest sample of each pid wins
            except Exception as exc:
                if error_code(exc) != NvmlReturn.NOT_FOUND:  # NotFound: no process ran a kernel since `since`
                    util_ok = False
                    if error_code(exc) in LOST_CODES:
                        raise GpuLost(nvml_error_reason(exc)) from None
                    if self.degrade(gpu.info.key, "proc_gpu_util", nvml_error_reason(exc)) and \
                            error_code(exc) in PERMANENT_CODES:
                        gpu.proc_util = False
        pids = sorted(set(mem) | set(util))
        return [ProcessSample(pid=p, gpu_mem_bytes=mem.get(p),
                              gpu_util=util.get(p, 0.0) if util_ok else None) for p in pids]

    # ------------------------------------------------------------------ close
    def _close(self) -> None:
        mod = self.nvml
        if self._xid_set is not None:
            try:
                mod.nvmlEventSetFree(self._xid_set)
            except Exception:
                pass
            self._xid_set = None
        for gpu in self._gpus:
            for s in gpu.gpm_samples:
                try:
                    mod.nvmlGpmSampleFree(s)
                except Exception:
                    pass
            gpu.gpm_samples = []
        self._gpus = []
        self._shutdown()

    def _shutdown(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass


# ---------------------------------------------------------------------- helpers


# ------------------------------------------------------------------------------------------
# one reading of one device's clocks (calibrate)
# ------------------------------------------------------------------------------------------


def device_clocks(uuid: str | None = None, index: int | None = None, *, nvml: ModuleType | Any | None = None
                  ) -> dict[str, float]:
    """One GPU's clocks, power and temperature right now and its limits, straight from NVML
    (one init and shutdown): ``sm_clock_mhz``, ``power_w``, ``temperature_c``,
    ``max_sm_clock_mhz``, ``power_limit_w``. The GPU is found by ``uuid`` (NVML's own form,
    ``GPU-...``), else by NVML ``index``. A value NVML does not give is left out; {} without
    NVML or without the GPU. ``nvml`` injects a pynvml-compatible module (tests)."""
    if uuid is None and index is None:
        return {}
    try:
        mod = nvml if nvml is not None else import_pynvml()
        mod.nvmlInit()
    except Exception:
        return {}
    out: dict[str, float] = {}
    try:
        h = mod.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None else mod.nvmlDeviceGetHandleByIndex(index)
        # (key, the query, its value in the key's unit): NVML gives mW and MHz
        reads: tuple[tuple[str, Callable[[], Any], Callable[[Any], float]], ...] = (
            ("sm_clock_mhz", lambda: mod.nvmlDeviceGetClockInfo(h, mod.NVML_CLOCK_SM), lambda v: v * 1.0),
            ("power_w", lambda: mod.nvmlDeviceGetPowerUsage(h), lambda v: v * 1e-3),
            ("temperature_c", lambda: mod.nvmlDeviceGetTemperature(h, mod.NVML_TEMPERATURE_GPU), lambda v: v * 1.0),
            ("max_sm_clock_mhz", lambda: mod.nvmlDeviceGetMaxClockInfo(h, mod.NVML_CLOCK_SM), int),
            ("power_limit_w", lambda: mod.nvmlDeviceGetEnforcedPowerLimit(h), lambda v: v / 1000.0),
        )
        for key, read, convert in reads:
            try:
                v = read()
            except Exception:  # not supported on this GPU or driver
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                out[key] = convert(v)
    except Exception:  # no such GPU
        pass
    finally:
        try:
            mod.nvmlShutdown()
        except Exception:
            pass
    return out
