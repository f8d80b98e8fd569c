"""The probe of one NVIDIA device (:class:`DeviceProbe`): which reads it supports, decided once
when the collector opens, in five steps, one method each (the batched field values, the getters,
GPM, the PCIe / NVLink rates, the per-process queries); and the per-device state the collector
keeps between ticks (:class:`NvmlGpu`, its plan of :class:`PlannedRead`). Over a
pynvml-compatible module; nothing here imports pynvml."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .base import GPU_METRIC_NAMES, DeviceInfo, percent_to_ratio
from .nvml_values import (
    LOST_CODES,
    PERMANENT_CODES,
    NvmlReturn,
    NvmlStatusError,
    error_code,
    field_value,
    memory_query,
    nvml_error_reason,
    read_memory_v1,
    read_count,
    read_memory_v2,
    read_pcie_throughput,
    read_remapped_rows,
    read_utilization,
    running_processes,
    throttle_reasons_fn,
)

__all__ = ["DeviceProbe", "GpuLost", "NvmlGpu", "PlannedRead", "SLOW_FIELD_S", "gpm_sample_get"]

# Field ids (pynvml.NVML_FI_DEV_*), fixed by the C API.
FI_ECC_SBE_VOL_TOTAL = 3  # corrected ECC errors since the driver loaded
FI_ECC_DBE_VOL_TOTAL = 4  # uncorrected
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY_CONSUMPTION = 83  # mJ since driver load
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB counter, scope = link
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_POWER_AVERAGE = 185  # mW
FI_POWER_INSTANT = 186  # mW
FI_POWER_CURRENT_LIMIT = 190  # mW
FI_PCIE_COUNT_TX_BYTES = 197  # byte counter
FI_PCIE_COUNT_RX_BYTES = 198

#: A counter field whose own read takes longer than this is read at most every
#: ``slow_counter_interval_s`` instead of every tick. On an H100 (driver 580) the energy field
#: cost about 4 ms of CPU per read, 80 % of a whole tick (bench/README.md, the H100 results).
#: Only counters: read less often they lose time resolution, not joules or bytes; gauges are
#: read at the asked rate whatever they cost.
SLOW_FIELD_S = 1e-3
#: The counters, grouped: a group is read together, so a rate or a sum never mixes readings of
#: two ticks (PCIe tx with rx, every NVLink link).
_COUNTER_GROUPS = (("energy",), ("_pcie_tx", "_pcie_rx"), ("_nvl_",), ("ecc_",))

# GPM metric ids (pynvml.NVML_GPM_METRIC_*); values are percent unless stated.
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_PCIE_TX_PER_SEC = 20  # MiB/s
GPM_PCIE_RX_PER_SEC = 21
GPM_NVLINK_TOTAL_RX_PER_SEC = 60  # MiB/s
GPM_NVLINK_TOTAL_TX_PER_SEC = 61

#: The metrics of one nvmlDeviceGetRemappedRows call, in its order.
REMAPPED_ROWS = ("remapped_rows_corrected", "remapped_rows_uncorrected", "row_remap_pending", "row_remap_failed")

# nvmlTemperatureSensors_t and nvmlClockType_t values of the getters read
TEMPERATURE_GPU = 0
CLOCK_SM = 1
CLOCK_MEM = 2


class GpuLost(Exception):
    """The GPU was found gone (fell off the bus, needs a reset) during a probe or a read."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class PlannedRead:
    """One getter in a device's plan: ``fn(handle)`` -> dict of metric values."""

    metrics: tuple[str, ...]
    fn: Callable[[Any], dict[str, float | int | None]]
    every_s: float = 0.0  # 0: every tick
    last_mono: float = -1e18


@dataclass
class NvmlGpu:
    """One device the NVML collector samples (a GPU or a MIG instance): its handle, the plan
    its probe made, and what the collector keeps between ticks (counters, GPM samples)."""

    info: DeviceInfo
    handle: Any
    parent_handle: Any = None
    gpu_instance_id: int | None = None
    fields: list[tuple[int, int]] = field(default_factory=list)  # (field id, scope id)
    field_metric: dict[tuple[int, int], str] = field(default_factory=dict)
    slow_fields: list[tuple[int, int]] = field(default_factory=list)  # counters read every slow_counter_interval_s
    slow_last_mono: float = -1e18
    reads: list[PlannedRead] = field(default_factory=list)
    gpm_ids: dict[int, str] = field(default_factory=dict)
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_last_mono: float = 0.0
    gpm_have_prev: bool = False
    counters: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (value, ts_ns)
    proc_reads: bool = False
    proc_util: bool = False
    proc_last_mono: float = -1e18
    proc_last_seen_us: int = 0
    xid: bool = False  # registered for XID events
    xid_count: int = 0
    last_xid: int = 0
    lost: bool = False


def gpm_sample_get(mod: Any, gpu: NvmlGpu, sample: Any) -> None:
    """Take one GPM sample of ``gpu`` into ``sample`` (a MIG instance's through its parent)."""
    if gpu.info.kind == "mig":
        mod.nvmlGpmMigSampleGet(gpu.parent_handle, gpu.gpu_instance_id, sample)
    else:
        mod.nvmlGpmSampleGet(gpu.handle, sample)


class DeviceProbe:
    """Decides once which reads one device supports and fills its ``supported`` /
    ``unsupported`` (:meth:`run`). Each step reads and adds to the probe's state; a later step's
    reason for a metric never replaces an earlier one's. A lost GPU raises :class:`GpuLost`.

    ``degrade`` is the collector's :meth:`~gpuscope.collectors.base.Collector.degrade` (a
    read that fails now but may answer later is kept and said once)."""

    def __init__(self, mod: Any, gpu: NvmlGpu, *, is_mig: bool, degrade: Callable[..., bool],
                 pcie_fallback_interval_s: float, slow_counter_interval_s: float) -> None:
        self.mod = mod
        self.gpu = gpu
        self.is_mig = is_mig
        self.degrade = degrade
        self.pcie_fallback_interval_s = pcie_fallback_interval_s
        self.slow_counter_interval_s = slow_counter_interval_s
        self.supported: set[str] = set()
        self.unsupported: dict[str, str] = {}  # metric -> the first reason found
        self.field_errors: dict[str, str] = {}  # field's metric -> why it failed
        self.nvlinks = 0
        self.nvlink_reason = "no NVLink on this GPU"

    def run(self, gpm_ok: bool, gpm_reason: str, *, mig_on: bool = False) -> None:
        """The five steps, then the device's ``supported`` and ``unsupported`` (every GPU metric
        that is not supported, with its reason)."""
        self.fields()
        self.getters()
        self.gpm(gpm_ok, gpm_reason, mig_on=mig_on)
        self.link_rates()
        self.processes(mig_on=mig_on)
        info = self.gpu.info
        info.supported = tuple(m for m in GPU_METRIC_NAMES if m in self.supported)
        info.unsupported = {m: self.unsupported.get(m, "not supported by this GPU")
                            for m in GPU_METRIC_NAMES if m not in self.supported}

    @property
    def field_metrics(self) -> set[str]:
        """The metrics the batched field values give (counters' private names included)."""
        return set(self.gpu.field_metric.values())

    @property
    def pcie_counters(self) -> bool:
        """Both PCIe byte counters are among the field values."""
        return {"_pcie_tx", "_pcie_rx"} <= self.field_metrics

    @property
    def nvlink_counters(self) -> bool:
        """At least one NVLink byte counter is among the field values."""
        return any(m.startswith("_nvl_") for m in self.field_metrics)

    def read(self, metrics: tuple[str, ...], fn: Callable[[Any], dict[str, Any]], every_s: float = 0.0) -> bool:
        """Try one getter; put it in the device's plan with the metrics it answered (True), or
        record why it cannot be read (False). A lost GPU raises :class:`GpuLost`."""
        gpu = self.gpu
        try:
            got = fn(gpu.handle)
        except Exception as exc:
            code = error_code(exc)
            if code in LOST_CODES:
                raise GpuLost(nvml_error_reason(exc)) from None
            if code is not None and code not in PERMANENT_CODES:
                # transient (timeout, unknown): keep the read, say so once
                self.degrade(gpu.info.key, "/".join(metrics), nvml_error_reason(exc), phase="probe")
                gpu.reads.append(PlannedRead(metrics, fn, every_s))
                self.supported.update(metrics)
                return True
            for m in metrics:
                self.unsupported.setdefault(m, nvml_error_reason(exc))
            return False
        ok = tuple(m for m in metrics if got.get(m) is not None)
        for m in metrics:
            if m not in ok:
                self.unsupported.setdefault(m, "not reported by this GPU")
        if ok:
            gpu.reads.append(PlannedRead(ok, fn, every_s))
            self.supported.update(ok)
        return bool(ok)

    def nvlink_count(self) -> None:
        """How many NVLink links the GPU has (none on a MIG instance), or why none."""
        if self.is_mig:
            return
        try:
            (lc,) = self.mod.nvmlDeviceGetFieldValues(self.gpu.handle, [FI_NVLINK_LINK_COUNT])
            if lc.nvmlReturn == NvmlReturn.SUCCESS:
                self.nvlinks = int(field_value(lc) or 0)
            else:
                self.nvlink_reason = nvml_error_reason(NvmlStatusError(lc.nvmlReturn))
        except Exception as exc:
            self.nvlink_reason = nvml_error_reason(exc)

    def fields(self) -> None:
        """Step 1: the field values read in one batched call each tick (power, energy, memory
        temperature, power limit, PCIe and NVLink byte counters, ECC counts)."""
        gpu = self.gpu
        wanted: list[tuple[tuple[int, int], str]] = [
            ((FI_POWER_AVERAGE, 0), "power_w"),
            ((FI_POWER_INSTANT, 0), "power_instant_w"),
            ((FI_TOTAL_ENERGY_CONSUMPTION, 0), "energy_j"),
            ((FI_MEMORY_TEMP, 0), "mem_temp_c"),
            ((FI_POWER_CURRENT_LIMIT, 0), "power_limit_w"),
            ((FI_PCIE_COUNT_TX_BYTES, 0), "_pcie_tx"),
            ((FI_PCIE_COUNT_RX_BYTES, 0), "_pcie_rx"),
            ((FI_ECC_SBE_VOL_TOTAL, 0), "ecc_corrected_errors"),
            ((FI_ECC_DBE_VOL_TOTAL, 0), "ecc_uncorrected_errors"),
        ]
        self.nvlink_count()
        for link in range(self.nvlinks):
            wanted.append(((FI_NVLINK_THROUGHPUT_DATA_TX, link), f"_nvl_tx{link}"))
            wanted.append(((FI_NVLINK_THROUGHPUT_DATA_RX, link), f"_nvl_rx{link}"))
        try:
            vals = self.mod.nvmlDeviceGetFieldValues(gpu.handle, [fid for fid, _ in wanted])
            for (fid, name), fv in zip(wanted, vals):
                if fv.nvmlReturn == NvmlReturn.SUCCESS:
                    gpu.fields.append(fid)
                    gpu.field_metric[fid] = name
                else:
                    self.field_errors[name] = nvml_error_reason(NvmlStatusError(fv.nvmlReturn))
        except Exception as exc:
            reason = nvml_error_reason(exc)
            self.field_errors = {name: reason for _, name in wanted}
        self.supported |= {m for m in self.field_metrics if not m.startswith("_")}
        self.time_counter_fields()

    def getters(self) -> None:
        """Step 2: one getter per metric (utilisation, memory, temperature, clocks, throttle
        reasons, fan), the getters for what the field values did not give, and the reasons of
        the field-only metrics that are missing."""
        mod = self.mod
        self.read(("gpu_util", "mem_util"), lambda h: read_utilization(mod, h))
        self.memory()
        self.read(("temp_c",), lambda h: {"temp_c": float(mod.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU))})
        self.read(("sm_clock_mhz",),
                         lambda h: {"sm_clock_mhz": float(mod.nvmlDeviceGetClockInfo(h, CLOCK_SM))})
        self.read(("mem_clock_mhz",),
                         lambda h: {"mem_clock_mhz": float(mod.nvmlDeviceGetClockInfo(h, CLOCK_MEM))})
        self.read(("throttle_reasons",),
                         lambda h: {"throttle_reasons": int(throttle_reasons_fn(mod)(h))})
        self.read(("fan_speed",), lambda h: {"fan_speed": percent_to_ratio(mod.nvmlDeviceGetFanSpeed(h))})
        # the video engines, as nvidia-smi's "Utilization: Encoder / Decoder" (each over NVML's own
        # sampling period, which the call also returns)
        self.read(("enc_util",), lambda h: {"enc_util": percent_to_ratio(mod.nvmlDeviceGetEncoderUtilization(h)[0])})
        self.read(("dec_util",), lambda h: {"dec_util": percent_to_ratio(mod.nvmlDeviceGetDecoderUtilization(h)[0])})
        # counts that move seldom (a PCIe replay, a remapped row): read at the slow counters' pace
        self.read(("pcie_replays",), lambda h: {"pcie_replays": read_count(mod.nvmlDeviceGetPcieReplayCounter(h))},
                  every_s=self.slow_counter_interval_s)
        self.read(REMAPPED_ROWS, lambda h: read_remapped_rows(mod, h), every_s=self.slow_counter_interval_s)
        # fallbacks for what the field values did not give
        if "power_w" not in self.supported:
            self.read(("power_w",), lambda h: {"power_w": mod.nvmlDeviceGetPowerUsage(h) / 1000.0})
        if "energy_j" not in self.supported:
            self.read(("energy_j",),
                             lambda h: {"energy_j": mod.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0})
        if "power_limit_w" not in self.supported:
            self.read(("power_limit_w",),
                             lambda h: {"power_limit_w": mod.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0})
        for name in ("power_instant_w", "mem_temp_c"):
            if name not in self.supported:
                self.unsupported.setdefault(name, self.field_errors.get(name, "not supported by this GPU"))
        not_supported = nvml_error_reason(NvmlStatusError(NvmlReturn.NOT_SUPPORTED))
        for name in ("ecc_corrected_errors", "ecc_uncorrected_errors"):
            if name not in self.supported:
                why = self.field_errors.get(name, "not supported by this GPU")
                self.unsupported.setdefault(name, "no ECC on this GPU or ECC mode off (nvidia-smi -q -d ECC)"
                                         if why == not_supported else why)

    def memory(self) -> None:
        """The memory getter: nvidia-smi's "used" is the v2 query's (v1 counts what the driver
        reserves as used: an idle H100 453 MiB against nvidia-smi's 1 MiB), v1 only where v2
        fails and v1 answers. ``memory_query`` in the device's properties says which query the
        stored "used" comes from (absent: neither answers)."""
        mod, info = self.mod, self.gpu.info
        query, why_v1 = memory_query(mod, self.gpu.handle)
        if query == "v2":
            if self.read(("mem_used_bytes", "mem_total_bytes", "mem_reserved_bytes"),
                                lambda h: read_memory_v2(mod, h)):
                info.properties["memory_query"] = "v2"
        else:
            self.unsupported.setdefault("mem_reserved_bytes", why_v1 or "")
            if self.read(("mem_used_bytes", "mem_total_bytes"), lambda h: read_memory_v1(mod, h)):
                info.properties["memory_query"] = "v1"
                info.properties["memory_query_note"] = why_v1

    def gpm(self, gpm_ok: bool, gpm_reason: str, *, mig_on: bool) -> None:
        """Step 3: GPM (Hopper and newer): SM / tensor / DRAM activity, and PCIe / NVLink rates
        where the counters of step 1 are missing. With MIG on, GPM is read per instance."""
        gpu, mod = self.gpu, self.mod
        gpm_map = {GPM_SM_UTIL: "sm_active", GPM_SM_OCCUPANCY: "sm_occupancy",
                   GPM_ANY_TENSOR_UTIL: "tensor_active", GPM_DRAM_BW_UTIL: "dram_bw_util"}
        if gpm_ok and not mig_on:
            if not self.pcie_counters and not self.is_mig:
                gpm_map.update({GPM_PCIE_TX_PER_SEC: "pcie_tx_bytes_per_s", GPM_PCIE_RX_PER_SEC: "pcie_rx_bytes_per_s"})
            if not self.nvlink_counters and not self.is_mig:
                gpm_map.update({GPM_NVLINK_TOTAL_TX_PER_SEC: "xgmi_nvlink_tx_bytes_per_s",
                                GPM_NVLINK_TOTAL_RX_PER_SEC: "xgmi_nvlink_rx_bytes_per_s"})
            try:
                gpu.gpm_samples = [mod.nvmlGpmSampleAlloc(), mod.nvmlGpmSampleAlloc()]
                gpm_sample_get(self.mod, gpu, gpu.gpm_samples[0])
                gpu.gpm_have_prev = True
                gpu.gpm_last_mono = time.monotonic()
                gpu.gpm_ids = gpm_map
                self.supported.update(gpm_map.values())
            except Exception as exc:
                gpm_reason = f"needs GPM ({nvml_error_reason(exc)})"
                gpu.gpm_ids = {}
        elif gpm_ok and mig_on:
            gpm_reason = "GPM is read per MIG instance while MIG is enabled"
        for m in ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util"):
            if m not in self.supported:
                self.unsupported[m] = gpm_reason or "not supported by this GPU"

    def link_rates(self) -> None:
        """Step 4: the PCIe and NVLink rates: from the counters of step 1, else GPM's (step 3),
        else (PCIe only) the slow ``nvmlDeviceGetPcieThroughput`` at its own pace."""
        mod, info = self.mod, self.gpu.info
        pcie = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "pcie_bytes_per_s")
        if self.pcie_counters:
            self.supported.update(pcie)
        elif "pcie_tx_bytes_per_s" in self.supported:
            self.supported.add("pcie_bytes_per_s")
        elif not self.is_mig:
            # nvmlDeviceGetPcieThroughput blocks ~20 ms per direction: only at a slow pace
            if self.read(pcie, lambda h: read_pcie_throughput(mod, h),
                                every_s=self.pcie_fallback_interval_s):
                info.properties["pcie_sampled_every_s"] = self.pcie_fallback_interval_s
        if self.nvlink_counters:
            self.supported |= {"xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"}
        for m in pcie:
            if m not in self.supported:
                self.unsupported.setdefault(m, self.field_errors.get("_pcie_tx", "not supported by this GPU"))
        for m in ("xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"):
            if m not in self.supported:
                self.unsupported.setdefault(m, self.nvlink_reason if self.nvlinks == 0 else "not supported by this GPU")

    def processes(self, *, mig_on: bool) -> None:
        """Step 5: per-process memory and SM utilisation (only filled while pids are watched)."""
        gpu, mod, info = self.gpu, self.mod, self.gpu.info
        h = gpu.handle
        try:
            running_processes(mod, h)
            gpu.proc_reads = True
            self.supported.add("proc_gpu_mem_bytes")
            if mig_on or self.is_mig:
                info.properties["process_memory_note"] = "NVML reports no per-process memory in MIG mode"
        except Exception as exc:
            if error_code(exc) in LOST_CODES:
                raise GpuLost(nvml_error_reason(exc)) from None
            self.unsupported["proc_gpu_mem_bytes"] = self.unsupported["proc_gpu_util"] = nvml_error_reason(exc)
        if not gpu.proc_reads:
            return
        try:
            mod.nvmlDeviceGetProcessUtilization(h, time.time_ns() // 1000 - 1_000_000)
            gpu.proc_util = True
        except Exception as exc:
            if error_code(exc) in LOST_CODES:
                raise GpuLost(nvml_error_reason(exc)) from None
            gpu.proc_util = error_code(exc) == NvmlReturn.NOT_FOUND  # NotFound: no samples yet, but supported
            if not gpu.proc_util:
                self.unsupported["proc_gpu_util"] = nvml_error_reason(exc)
        if gpu.proc_util:
            self.supported.add("proc_gpu_util")

    def time_counter_fields(self) -> None:
        """Read each counter field on its own once (after the batched probe, so no first-call
        set-up is timed); move a group with a field slower than :data:`SLOW_FIELD_S` to the slow
        cadence, and say so in the device's properties (``devices --json``)."""
        gpu = self.gpu
        slow: dict[str, float] = {}
        for prefixes in _COUNTER_GROUPS:
            ids = [fid for fid in gpu.fields if gpu.field_metric[fid].startswith(prefixes)]
            cost = 0.0
            for fid in ids:
                t0 = time.perf_counter()
                try:
                    self.mod.nvmlDeviceGetFieldValues(gpu.handle, [fid])
                except Exception:  # a failing read is the sampling's business, not the timing's
                    continue
                cost = max(cost, time.perf_counter() - t0)
            if ids and cost > SLOW_FIELD_S:
                gpu.slow_fields += ids
                gpu.fields = [f for f in gpu.fields if f not in ids]
                for fid in ids:
                    slow[gpu.field_metric[fid].lstrip("_").rstrip("0123456789")] = round(cost * 1e3, 2)
        if slow:
            gpu.info.properties["slow_counters_read_every_s"] = self.slow_counter_interval_s
            gpu.info.properties["slow_counters_ms_per_read"] = slow
