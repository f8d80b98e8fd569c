"""AMD telemetry through AMD SMI: the ``amdsmi`` Python API, else the ``amd-smi`` CLI.

Backends, tried in this order by :class:`AmdCollector`:

1. ``import amdsmi`` (the PyPI wheel or a pip-installed ROCm copy). The PyPI wheel carries no
   library: without ROCm its import prints to stdout and raises ``KeyError('libamd_smi.so')``,
   so the import is silenced and any exception caught.
2. ROCm's own copy, ``/opt/rocm*/share/amd_smi`` (newest first), put on ``sys.path`` for
   the import only.
3. ``amd-smi metric --json`` (ROCm 6.x prints a list of per-GPU objects, ROCm 7.x wraps it as
   ``{"gpu_data": [...]}``; values are numbers, ``{"value", "unit"}`` objects or ``"N/A"``).
   The CLI is a Python program that takes a few hundred ms per call, so it runs in a helper
   thread and a row comes out each time a new reading arrives (about 1-3 Hz, not the
   sampler's 10 Hz).

With the API, one ``amdsmi_get_gpu_metrics_info`` call per tick gives gfx and memory-controller
(umc) activity, socket power, the energy accumulator, temperatures, clocks, throttle status,
PCIe bandwidth and XGMI counters, stamped by the firmware clock. Memory use, the power cap and
the watched processes come from their own calls (the last two at most once a second).
Compute partitions (DPX/CPX on MI300) appear as one device each, kind ``partition``.

Every value is checked by range: temperatures may come in °C, centi-°C or m°C; sentinels
(0xFFFF...) and ``"N/A"`` become None.
"""
from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .amd_cli_output import failure_reason, has_json_document, split_json_output
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
    plausible_celsius,
)

__all__ = [
    "AmdCollector",
    "AmdSmiCliCollector",
    "AmdSmiCollector",
    "DEFAULT_ROCM_GLOBS",
    "import_amdsmi",
    "parse_amd_smi_metric",
    "parse_amd_smi_static",
]

DEFAULT_ROCM_GLOBS: tuple[str, ...] = ("/opt/rocm*/share/amd_smi",)
INSTALL_HINT = "pip install 'gpuscope[amd]' (needs ROCm's libamd_smi.so)"

# amdsmi status codes (AmdSmiLibraryException.err_code)
_NOT_SUPPORTED = 2
_NO_PERM = 10
_INIT_ERROR = 18
_NOT_FOUND = 31
_NOT_INIT = 32
_DRIVER_NOT_LOADED = 34
_FILE_NOT_FOUND = 52
#: codes after which the device is taken as gone (its sysfs node vanished) (unverified on hardware)
_LOST_CODES = frozenset({_FILE_NOT_FOUND})
_PERMANENT_CODES = frozenset({_NOT_SUPPORTED, _NO_PERM})

_ENERGY_RESOLUTION_UJ = 15.259  # 2**-16 J, the usual energy_accumulator tick
# NVML's v2 memory query reports the driver's reservation apart from "used"; amdsmi's VRAM
# usage has no such figure.
_NO_RESERVED = "amdsmi reports no driver-reserved memory apart from used (an NVML v2 figure)"
_KIB = 1024
_MIB = 1024 * 1024


# ------------------------------------------------------------------------------------------
# import
# ------------------------------------------------------------------------------------------


def _describe_import_error(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "amdsmi":
        return "amdsmi not installed"
    if isinstance(exc, KeyError):
        return f"amdsmi installed but its library is missing (KeyError {exc}: no ROCm)"
    if isinstance(exc, OSError):
        return f"amdsmi cannot load libamd_smi.so ({exc})"
    if isinstance(exc, AttributeError):
        return f"amdsmi does not match the installed ROCm ({exc})"
    return f"amdsmi failed to import ({type(exc).__name__}: {exc})"


def _purge_amdsmi_modules() -> None:
    for name in [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]:
        del sys.modules[name]


def _quiet_import() -> ModuleType:
    # The PyPI wheel prints "Unable to find libamd_smi.so ..." to stdout before raising, which
    # would corrupt `--json` output: swallow it.
    with contextlib.redirect_stdout(io.StringIO()):
        import amdsmi  # type: ignore[import-not-found]
    return amdsmi


def import_amdsmi(rocm_globs: Sequence[str] = DEFAULT_ROCM_GLOBS) -> tuple[ModuleType | None, str | None, list[str]]:
    """Import ``amdsmi``: the installed one, else ROCm's own copy under ``rocm_globs``.

    Returns ``(module, backend, reasons)``: the module and where it came from, or None and
    the reason each try failed."""
    reasons: list[str] = []
    try:
        return _quiet_import(), "amdsmi", reasons
    except Exception as exc:
        reasons.append(_describe_import_error(exc))
        _purge_amdsmi_modules()
    roots = sorted({p for g in rocm_globs for p in glob.glob(g)}, reverse=True)
    tried = False
    for root in roots:
        if not os.path.isfile(os.path.join(root, "amdsmi", "__init__.py")):
            continue
        tried = True
        sys.path.insert(0, root)
        try:
            mod = _quiet_import()
            return mod, f"amdsmi ({root})", reasons
        except Exception as exc:
            reasons.append(f"{root}: {_describe_import_error(exc)}")
            _purge_amdsmi_modules()
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(root)
    if not tried:
        reasons.append("no ROCm copy under " + ", ".join(rocm_globs))
    return None, None, reasons


def amdsmi_error_reason(exc: BaseException) -> str:
    """A user-facing reason for an amdsmi exception."""
    code = getattr(exc, "err_code", None)
    if code is None and hasattr(exc, "get_error_code"):
        with contextlib.suppress(Exception):
            code = exc.get_error_code()
    if isinstance(code, int):
        code = abs(code)
    if code == _NOT_SUPPORTED:
        return "not supported by this GPU"
    if code == _NO_PERM:
        return "no permission (run as root or join the render/video group)"
    if code == _DRIVER_NOT_LOADED:
        return "amdgpu driver not loaded"
    if code in (_INIT_ERROR, _NOT_INIT):
        return "amdsmi could not initialise (amdgpu driver not loaded?)"
    if code == _FILE_NOT_FOUND:
        return "device files gone (GPU lost?)"
    info = getattr(exc, "err_info", None)
    if info:
        return f"amdsmi error {code}: {info}"
    return f"{type(exc).__name__}: {exc}".strip()


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "err_code", None)
    return abs(code) if isinstance(code, int) else None


# ------------------------------------------------------------------------------------------
# value helpers
# ------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A number from an amdsmi value: None for "N/A", strings, sentinels, bools stay ints."""
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        if v in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF) or v != v:
            return None
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().split()[0])
        except (ValueError, IndexError):
            return None
    return None


def _nums(v: Any) -> list[float]:
    if not isinstance(v, (list, tuple)):
        return []
    return [x for x in (_num(i) for i in v) if x is not None]


def _watts(v: Any) -> float | None:
    """Power in W from W (the documented unit), checked by range: a board draws 0..3000 W."""
    x = _num(v)
    if x is None or x < 0:
        return None
    return x if x <= 3000 else None


def _power_cap_w(v: Any) -> float | None:
    """A power cap from µW (amdsmi_get_power_cap_info), mW or W, by range."""
    x = _num(v)
    if x is None or x <= 0:
        return None
    if x > 1e5:
        return x / 1e6
    if x > 3000:
        return x / 1e3
    return x


def _mhz(v: Any) -> float | None:
    x = _num(v)
    return x if x is not None and 0 < x < 100_000 else None


def gfx_to_capability(target: str | None) -> str | None:
    """``gfx942`` -> ``9.4``, ``gfx90a`` -> ``9.0``, ``gfx1100`` -> ``11.0`` (as torch reports)."""
    if not target or not target.startswith("gfx") or len(target) < 6:
        return None
    digits = target[3:]
    major, minor = digits[:-2], digits[-2]
    if not major.isdigit():
        return None
    try:
        return f"{int(major)}.{int(minor, 16)}"
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------
# amdsmi Python API
# ------------------------------------------------------------------------------------------


@dataclass
class _AmdGpu:
    info: DeviceInfo
    handle: Any
    energy_res_uj: float = _ENERGY_RESOLUTION_UJ
    metrics_ok: bool = True
    mem_usage: bool = True
    power_cap_last: float = -1e18
    power_cap: bool = True
    procs: bool = True
    procs_last: float = -1e18
    proc_gfx_ns: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (engine ns, ts ns)
    fw_anchor: tuple[int, float] | None = None  # (host ns, firmware ns)
    xgmi: dict[str, tuple[float, int]] = field(default_factory=dict)
    lost: bool = False


class AmdSmiCollector(Collector):
    """AMD GPUs through the ``amdsmi`` Python API (``amdsmi`` injects a module, e.g. a fake)."""

    source = "amd"
    min_interval_s = 0.01

    def __init__(self, amdsmi: ModuleType | Any | None = None, *, rocm_globs: Sequence[str] | None = None,
                 process_interval_s: float = 1.0) -> None:
        super().__init__()
        self._mod_override = amdsmi
        self.rocm_globs = tuple(rocm_globs) if rocm_globs is not None else None
        self.process_interval_s = process_interval_s
        self.api: Any = None
        self.backend: str | None = None
        self.import_reasons: list[str] = []
        self._gpus: list[_AmdGpu] = []
        self._pids: frozenset[int] = frozenset()
        self._initialised = False

    def _open(self) -> list[DeviceInfo]:
        if self._mod_override is not None:
            api, backend = self._mod_override, "amdsmi"
        else:
            api, backend, self.import_reasons = import_amdsmi(
                self.rocm_globs if self.rocm_globs is not None else DEFAULT_ROCM_GLOBS)
            if api is None:
                raise CollectorUnavailable("amd", "amdsmi not importable (" + "; ".join(self.import_reasons) + ")")
        self.api, self.backend = api, backend
        try:
            flags = getattr(getattr(api, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
            api.amdsmi_init(flags) if flags is not None else api.amdsmi_init()
        except Exception as exc:
            raise CollectorUnavailable("amd", f"amdsmi_init failed: {amdsmi_error_reason(exc)}") from None
        self._initialised = True
        try:
            handles = list(api.amdsmi_get_processor_handles())
        except Exception as exc:
            self._shutdown()
            raise CollectorUnavailable("amd", f"amdsmi lists no GPUs: {amdsmi_error_reason(exc)}") from None
        if not handles:
            self._shutdown()
            raise CollectorUnavailable("amd", "amdsmi found no AMD GPU (driver loaded, 0 devices)")
        serial_to_phys: dict[str, int] = {}
        for i, h in enumerate(handles):
            g = self._open_gpu(i, h, serial_to_phys)
            self._gpus.append(g)
        self.status = VendorStatus("amd", True, backend, details={"gpus": len(handles)})
        return [g.info for g in self._gpus]

    def _open_gpu(self, i: int, h: Any, serial_to_phys: dict[str, int]) -> _AmdGpu:
        api = self.api
        info = DeviceInfo(key=f"gpu{i}", vendor="amd", index=i, warp_size=64)
        asic = _try(lambda: api.amdsmi_get_gpu_asic_info(h)) or {}
        name = asic.get("market_name")
        info.name = name if isinstance(name, str) and name not in ("", "N/A") else None
        dev_id = asic.get("device_id")
        if isinstance(dev_id, int):
            dev_id = f"0x{dev_id:04x}"
        info.pci_device_id = dev_id.lower() if isinstance(dev_id, str) and dev_id != "N/A" else None
        cus = _num(asic.get("num_compute_units"))
        info.num_sms = int(cus) if cus else None
        target = asic.get("target_graphics_version")
        target = target if isinstance(target, str) and target != "N/A" else None
        info.compute_capability = gfx_to_capability(target)
        info.pci_bus_id = _str(_try(lambda: api.amdsmi_get_gpu_device_bdf(h)))
        info.uuid = _str(_try(lambda: api.amdsmi_get_gpu_device_uuid(h)))
        vram_type = getattr(getattr(api, "AmdSmiMemoryType", None), "VRAM", 0)
        total = _try(lambda: api.amdsmi_get_gpu_memory_total(h, vram_type))
        info.memory_total_bytes = int(total) if isinstance(total, (int, float)) and total > 0 else None
        cpart = _str(_try(lambda: api.amdsmi_get_gpu_compute_partition(h)))
        mpart = _str(_try(lambda: api.amdsmi_get_gpu_memory_partition(h)))
        serial = asic.get("asic_serial")
        serial = serial if isinstance(serial, str) and serial not in ("", "N/A") else f"#{i}"
        phys = serial_to_phys.setdefault(serial, len(serial_to_phys))
        if cpart and cpart.upper() not in ("SPX", "N/A"):
            info.kind = "partition"
        info.properties.update({"gfx_target": target, "compute_partition": cpart, "memory_partition": mpart,
                                "physical_gpu": phys, "backend": self.backend})
        g = _AmdGpu(info=info, handle=h)
        energy = _try(lambda: api.amdsmi_get_energy_count(h)) or {}
        res = _num(energy.get("counter_resolution"))
        if res and 0 < res < 1e6:
            g.energy_res_uj = res
        self._probe(g)
        return g

    def _probe(self, g: _AmdGpu) -> None:
        api, h, info = self.api, g.handle, g.info
        supported: set[str] = set()
        unsupported: dict[str, str] = {}
        try:
            gm = api.amdsmi_get_gpu_metrics_info(h)
            values = self._from_metrics(g, gm, now_ns(), probe=True)
            values.pop("_ts", None)
            supported |= {k for k, v in values.items() if v is not None}
            for k, v in values.items():
                if v is None:
                    unsupported[k] = "not reported by this GPU (N/A in gpu_metrics)"
            info.properties["gpu_metrics_version"] = (
                f"{gm.get('common_header.format_revision')}.{gm.get('common_header.content_revision')}")
        except Exception as exc:
            g.metrics_ok = False
            reason = amdsmi_error_reason(exc)
            for m in ("gpu_util", "mem_util", "power_w", "power_instant_w", "energy_j", "temp_c", "mem_temp_c",
                      "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "pcie_bytes_per_s",
                      "xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"):
                unsupported[m] = f"gpu_metrics: {reason}"
        try:
            supported |= {k for k, v in self._mem(g).items() if v is not None}
        except Exception as exc:
            g.mem_usage = False
            unsupported["mem_used_bytes"] = amdsmi_error_reason(exc)
        if info.memory_total_bytes:
            supported.add("mem_total_bytes")
        try:
            if self._power_cap(g) is not None:
                supported.add("power_limit_w")
        except Exception as exc:
            g.power_cap = False
            unsupported["power_limit_w"] = amdsmi_error_reason(exc)
        try:
            api.amdsmi_get_gpu_process_list(h)
            supported |= {"proc_gpu_mem_bytes", "proc_gpu_util"}
        except Exception as exc:
            g.procs = False
            unsupported["proc_gpu_mem_bytes"] = unsupported["proc_gpu_util"] = amdsmi_error_reason(exc)
        not_exposed = "not exposed by amdsmi (needs rocprofiler counters)"
        for m in ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util"):
            unsupported[m] = not_exposed
        unsupported.setdefault("pcie_tx_bytes_per_s", "amdsmi gives PCIe bandwidth only for both directions (pcie_bytes_per_s)")
        unsupported.setdefault("pcie_rx_bytes_per_s", unsupported["pcie_tx_bytes_per_s"])
        unsupported.setdefault("fan_speed", "no fan speed ratio in amdsmi gpu_metrics (RPM only)")
        unsupported.setdefault("mem_reserved_bytes", _NO_RESERVED)
        info.supported = tuple(m for m in GPU_METRIC_NAMES if m in supported)
        info.unsupported = {m: unsupported.get(m, "not supported by this GPU")
                            for m in GPU_METRIC_NAMES if m not in supported}

    # -- conversions -------------------------------------------------------------------
    def _from_metrics(self, g: _AmdGpu, gm: dict[str, Any], read_ns: int, probe: bool = False) -> dict[str, Any]:
        v: dict[str, Any] = {}
        v["gpu_util"] = percent_to_ratio(_num(gm.get("average_gfx_activity")))
        v["mem_util"] = percent_to_ratio(_num(gm.get("average_umc_activity")))
        avg, cur = _watts(gm.get("average_socket_power")), _watts(gm.get("current_socket_power"))
        v["power_w"] = avg if avg is not None else cur
        v["power_instant_w"] = cur
        acc = _num(gm.get("energy_accumulator"))
        v["energy_j"] = acc * g.energy_res_uj * 1e-6 if acc is not None else None
        hot = plausible_celsius(_num(gm.get("temperature_hotspot")))
        v["temp_c"] = hot if hot is not None else plausible_celsius(_num(gm.get("temperature_edge")))
        mem_t = plausible_celsius(_num(gm.get("temperature_mem")))
        if mem_t is None:
            hbm = [t for t in (plausible_celsius(x) for x in _nums(gm.get("temperature_hbm"))) if t is not None]
            mem_t = max(hbm) if hbm else None
        v["mem_temp_c"] = mem_t
        gfx = _mhz(gm.get("current_gfxclk"))
        if gfx is None:
            clks = [c for c in (_mhz(x) for x in _nums(gm.get("current_gfxclks"))) if c is not None]
            gfx = sum(clks) / len(clks) if clks else _mhz(gm.get("average_gfxclk_frequency"))
        v["sm_clock_mhz"] = gfx
        uclk = _mhz(gm.get("current_uclk"))
        v["mem_clock_mhz"] = uclk if uclk is not None else _mhz(gm.get("average_uclk_frequency"))
        thr = gm.get("indep_throttle_status")
        if _num(thr) is None:
            thr = gm.get("throttle_status")
        t = _num(thr)
        v["throttle_reasons"] = int(t) if t is not None and t >= 0 else None
        bw = _num(gm.get("pcie_bandwidth_inst"))  # GB/s
        v["pcie_bytes_per_s"] = bw * 1e9 if bw is not None and bw >= 0 else None
        ts = self._fw_time(g, gm, read_ns)
        for name, key in (("xgmi_nvlink_tx_bytes_per_s", "xgmi_write_data_acc"),
                          ("xgmi_nvlink_rx_bytes_per_s", "xgmi_read_data_acc")):
            acc_kb = _nums(gm.get(key))
            if not acc_kb:
                v[name] = None
                continue
            total = sum(acc_kb) * _KIB
            prev = g.xgmi.get(name)
            g.xgmi[name] = (total, ts)
            rate = None
            if prev is not None and ts > prev[1] and total >= prev[0]:
                rate = (total - prev[0]) / ((ts - prev[1]) / 1e9)
            # at probe time there is no previous reading: the counter exists, so it is supported
            v[name] = 0.0 if probe and rate is None else rate
        v["_ts"] = ts
        return v

    def _fw_time(self, g: _AmdGpu, gm: dict[str, Any], read_ns: int) -> int:
        """Epoch ns for this reading from the firmware timestamp (10 ns ticks), anchored to the
        host clock at the first reading; the host clock when there is none or it drifts."""
        fw = _num(gm.get("firmware_timestamp"))
        if fw is None:
            return read_ns
        fw_ns = fw * 10.0
        if g.fw_anchor is None:
            g.fw_anchor = (read_ns, fw_ns)
            return read_ns
        ts = int(g.fw_anchor[0] + (fw_ns - g.fw_anchor[1]))
        if abs(ts - read_ns) > 1_000_000_000:  # firmware reset or a different clock: start over
            self._degrade(g.info.key, None, "firmware timestamp jumped; re-anchored to the host clock", phase="clock")
            g.fw_anchor = (read_ns, fw_ns)
            return read_ns
        return ts

    def _mem(self, g: _AmdGpu) -> dict[str, int | None]:
        api = self.api
        vram_type = getattr(getattr(api, "AmdSmiMemoryType", None), "VRAM", 0)
        used = api.amdsmi_get_gpu_memory_usage(g.handle, vram_type)  # bytes
        return {"mem_used_bytes": int(used) if isinstance(used, (int, float)) and used >= 0 else None}

    def _power_cap(self, g: _AmdGpu) -> float | None:
        cap = self.api.amdsmi_get_power_cap_info(g.handle)
        return _power_cap_w(cap.get("power_cap"))

    # -- sampling ----------------------------------------------------------------------
    def set_pids(self, pids: set[int] | frozenset[int]) -> None:
        self._pids = frozenset(pids)

    def sample(self) -> list[Sample]:
        out: list[Sample] = []
        for g in self._gpus:
            if g.lost:
                continue
            s = self._sample_gpu(g)
            if s.lost:
                g.lost = g.info.lost = True
            out.append(s)
        return out

    def _failed(self, g: _AmdGpu, what: str, exc: BaseException) -> bool | None:
        """Report a failed read once; None when the device is lost, True when the read should
        stop for good."""
        if _code(exc) in _LOST_CODES:
            self._degrade(g.info.key, None, f"{amdsmi_error_reason(exc)}: marked lost, no more samples from it",
                          phase="lost")
            return None
        self._degrade(g.info.key, what, amdsmi_error_reason(exc))
        return _code(exc) in _PERMANENT_CODES

    def _sample_gpu(self, g: _AmdGpu) -> Sample:
        api, h, key = self.api, g.handle, g.info.key
        read_ns = now_ns()
        mono = time.monotonic()
        values: dict[str, Any] = {}
        ts = read_ns
        if g.metrics_ok:
            try:
                values = self._from_metrics(g, api.amdsmi_get_gpu_metrics_info(h), read_ns)
                ts = values.pop("_ts", read_ns)
            except Exception as exc:
                r = self._failed(g, "gpu_metrics", exc)
                if r is None:
                    return Sample(key, read_ns, {}, lost=True)
                g.metrics_ok = not r
        if g.mem_usage:
            try:
                values.update(self._mem(g))
            except Exception as exc:
                r = self._failed(g, "mem_used_bytes", exc)
                if r is None:
                    return Sample(key, read_ns, {}, lost=True)
                g.mem_usage = not r
        if g.info.memory_total_bytes:
            values["mem_total_bytes"] = g.info.memory_total_bytes
        if g.power_cap and mono - g.power_cap_last >= 1.0:
            g.power_cap_last = mono
            try:
                values["power_limit_w"] = self._power_cap(g)
            except Exception as exc:
                g.power_cap = not self._failed(g, "power_limit_w", exc)
        procs: tuple[ProcessSample, ...] = ()
        if g.procs and self._pids and mono - g.procs_last >= self.process_interval_s:
            g.procs_last = mono
            try:
                plist = api.amdsmi_get_gpu_process_list(h)
                procs = self._processes(g, plist, int(ts))
                mems = [p.gpu_mem_bytes for p in procs if p.gpu_mem_bytes is not None]
                utils = [p.gpu_util for p in procs if p.gpu_util is not None]
                values["proc_gpu_mem_bytes"] = sum(mems) if mems else (0 if not procs else None)
                values["proc_gpu_util"] = min(sum(utils), 1.0) if utils else (0.0 if not procs else None)
            except Exception as exc:
                g.procs = not self._failed(g, "processes", exc)
        return Sample(key, int(ts), values, processes=procs)

    def _processes(self, g: _AmdGpu, plist: list[Any], read_ns: int) -> tuple[ProcessSample, ...]:
        # read_ns: the reading's time (firmware-stamped where possible), for engine-time rates
        out = []
        seen: dict[int, tuple[int, int]] = {}
        for p in plist or []:
            if not isinstance(p, dict):
                continue
            pid = p.get("pid")
            if not isinstance(pid, int) or pid not in self._pids:
                continue
            mu = p.get("memory_usage") or {}
            vram = _num(mu.get("vram_mem")) if isinstance(mu, dict) else None
            if vram is None:
                vram = _num(p.get("mem"))
            eu = p.get("engine_usage") or {}
            gfx_ns = _num(eu.get("gfx")) if isinstance(eu, dict) else None
            util = None
            if gfx_ns is not None:
                seen[pid] = (int(gfx_ns), read_ns)
                prev = g.proc_gfx_ns.get(pid)
                # engine_usage is cumulative engine time in ns: the rate is the utilisation
                if prev is not None and read_ns > prev[1] and gfx_ns >= prev[0]:
                    util = min((gfx_ns - prev[0]) / (read_ns - prev[1]), 1.0)
            name = p.get("name")
            out.append(ProcessSample(pid=pid, gpu_mem_bytes=int(vram) if vram is not None else None, gpu_util=util,
                                     name=name if isinstance(name, str) and name != "N/A" else None))
        g.proc_gfx_ns = seen
        return tuple(out)

    def _close(self) -> None:
        self._gpus = []
        self._shutdown()

    def _shutdown(self) -> None:
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(Exception):
                self.api.amdsmi_shut_down()


# ------------------------------------------------------------------------------------------
# amd-smi CLI
# ------------------------------------------------------------------------------------------

_UNIT_SCALE: dict[str, float] = {
    # energy -> J
    "J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6, "kJ": 1e3,
    # power -> W
    "W": 1.0, "mW": 1e-3, "uW": 1e-6, "µW": 1e-6,
    # clocks -> MHz
    "MHz": 1.0, "GHz": 1e3, "KHz": 1e-3, "kHz": 1e-3, "Hz": 1e-6,
    # memory -> bytes (amd-smi's MB are MiB: it divides bytes by 1024**2)
    "B": 1.0, "KB": _KIB, "MB": _MIB, "GB": 1024.0 ** 3, "KiB": _KIB, "MiB": _MIB, "GiB": 1024.0 ** 3,
    # throughput -> bytes/s
    "B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8,
}


def _with_unit(v: Any, expect: set[str]) -> float | None:
    """A value of amd-smi JSON in a canonical unit: ``{"value": 3, "unit": "W"}``, a bare
    number (taken as the canonical unit), or ``"N/A"`` (None). Units outside ``expect`` -> None."""
    if isinstance(v, dict) and "value" in v:
        unit = str(v.get("unit") or "")
        x = _num(v.get("value"))
        if x is None:
            return None
        if unit in ("%", "C", "") or unit in expect and unit not in _UNIT_SCALE:
            return x
        if unit not in expect:
            return None
        return x * _UNIT_SCALE[unit]
    return _num(v)


def _pick(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


_ENERGY = {"J", "mJ", "uJ", "µJ", "kJ"}
_POWER = {"W", "mW", "uW", "µW"}
_CLOCK = {"MHz", "GHz", "KHz", "kHz", "Hz"}
_MEM = {"B", "KB", "MB", "GB", "KiB", "MiB", "GiB"}
_RATE = {"B/s", "KB/s", "MB/s", "GB/s", "Mb/s", "Gb/s"}


def _section(e: Any, key: str) -> dict[str, Any]:
    """``e[key]`` when it is an object; amd-smi prints a whole section as ``"N/A"`` when it has
    nothing in it (``"usage": "N/A"`` on an APU, ROCm/rocm-systems#2720)."""
    v = e.get(key) if isinstance(e, dict) else None
    return v if isinstance(v, dict) else {}


def _gpu_entries(doc: Any) -> list[dict[str, Any]]:
    """Both shapes of amd-smi's JSON: a list of per-GPU objects (ROCm 6.x) or
    ``{"gpu_data": [...]}`` (ROCm 7.x); a single object is taken as one GPU."""
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError(f"unexpected amd-smi JSON ({type(doc).__name__} at top level)")
    return [e for e in doc if isinstance(e, dict)]


def parse_amd_smi_metric(doc: Any) -> dict[int, dict[str, float | int | None]]:
    """``amd-smi metric --json`` (either shape) -> {gpu index: metric values}."""
    out: dict[int, dict[str, float | int | None]] = {}
    for pos, e in enumerate(_gpu_entries(doc)):
        idx = e.get("gpu")
        idx = idx if isinstance(idx, int) else pos
        v: dict[str, float | int | None] = {}
        usage = _section(e, "usage")
        v["gpu_util"] = percent_to_ratio(_with_unit(_pick(usage, "gfx_activity"), set()))
        v["mem_util"] = percent_to_ratio(_with_unit(_pick(usage, "umc_activity"), set()))
        power = _section(e, "power")
        p = _with_unit(power.get("socket_power"), _POWER)
        if p is None:
            p = _with_unit(power.get("average_socket_power"), _POWER)
        v["power_w"] = _watts(p)
        v["power_instant_w"] = _watts(_with_unit(power.get("current_socket_power"), _POWER))
        en = _with_unit(_pick(e, "energy", "total_energy_consumption"), _ENERGY)
        v["energy_j"] = en if en is not None and en >= 0 else None
        temp = _section(e, "temperature")
        hot = plausible_celsius(_with_unit(temp.get("hotspot"), set()))
        v["temp_c"] = hot if hot is not None else plausible_celsius(_with_unit(temp.get("edge"), set()))
        v["mem_temp_c"] = plausible_celsius(_with_unit(temp.get("mem"), set()))
        clock = _section(e, "clock")
        v["sm_clock_mhz"] = _mhz(_with_unit(_pick(clock, "gfx_0", "clk"), _CLOCK))
        v["mem_clock_mhz"] = _mhz(_with_unit(_pick(clock, "mem_0", "clk"), _CLOCK))
        mem = _section(e, "mem_usage")
        used = _with_unit(mem.get("used_vram"), _MEM)
        total = _with_unit(mem.get("total_vram"), _MEM)
        v["mem_used_bytes"] = int(used) if used is not None and used >= 0 else None
        v["mem_total_bytes"] = int(total) if total is not None and total > 0 else None
        bw = _with_unit(_pick(e, "pcie", "bandwidth"), _RATE)
        v["pcie_bytes_per_s"] = bw if bw is not None and bw >= 0 else None
        ts = _num(e.get("timestamp"))  # watch mode: epoch seconds
        v["_ts"] = int(ts * 1e9) if ts is not None and ts > 1e9 else None
        out[idx] = v
    return out


def parse_amd_smi_static(doc: Any) -> dict[int, dict[str, Any]]:
    """``amd-smi static --json`` (either shape) -> {gpu index: device facts}."""
    out: dict[int, dict[str, Any]] = {}
    for pos, e in enumerate(_gpu_entries(doc)):
        idx = e.get("gpu")
        idx = idx if isinstance(idx, int) else pos
        asic = _section(e, "asic")
        vram = _with_unit(_pick(e, "vram", "size"), _MEM)
        part = _section(e, "partition")
        dev_id = _str(asic.get("device_id"))
        out[idx] = {
            "name": _str(asic.get("market_name")),
            "pci_device_id": dev_id.lower() if dev_id else None,
            "num_sms": int(_num(asic.get("num_compute_units")) or 0) or None,
            "gfx_target": _str(asic.get("target_graphics_version")),
            "pci_bus_id": _str(_pick(e, "bus", "bdf")),
            "memory_total_bytes": int(vram) if vram else None,
            "compute_partition": _str(part.get("compute_partition")),
            "memory_partition": _str(part.get("memory_partition")),
        }
    return out


class AmdSmiFailed(RuntimeError):
    """``amd-smi`` exited non-zero, or printed no JSON; the message is the line that says why."""


def _default_runner(exe: str) -> Callable[[Sequence[str]], str]:
    def run(args: Sequence[str]) -> str:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise AmdSmiFailed(f"amd-smi {' '.join(args)} exited {p.returncode}: {failure_reason(p.stderr, p.stdout)}")
        if not has_json_document(p.stdout):
            # amd-smi without a driver may log its errors and still print its version line
            # (ROCm/amdsmi#172): that line is not the reason
            raise AmdSmiFailed(f"amd-smi {' '.join(args)} printed no JSON: {failure_reason(p.stderr, p.stdout)}")
        return p.stdout
    return run


#: amd-smi timestamps (watch mode, epoch seconds) further than this from the host clock are not used.
CLI_TS_MAX_SKEW_NS = 5_000_000_000
#: what amd-smi prints when the user cannot open the GPU device nodes (render/video groups):
#: ROCm 6.x "User is missing the following required groups", ROCm 7.1 "Permission needed to
#: access required GPU device node(s)"
_PERMISSION_NOTE = re.compile(r"required groups|permission needed|permission denied", re.I)


def find_amd_smi() -> str | None:
    """The ``amd-smi`` executable: on PATH, else the newest ``/opt/rocm*/bin/amd-smi``."""
    exe = shutil.which("amd-smi")
    if exe:
        return exe
    found = sorted(glob.glob("/opt/rocm*/bin/amd-smi"), reverse=True)
    return found[0] if found else None


class AmdSmiCliCollector(Collector):
    """AMD GPUs through ``amd-smi metric --json``, the last resort without the Python API.

    ``runner(args) -> stdout`` runs amd-smi (tests pass one that returns recorded output).
    With ``threaded`` (the default) a helper thread runs it back to back and :meth:`sample`
    returns a row per GPU only when a new reading has arrived since the last call."""

    source = "amd"
    min_interval_s = 0.5

    def __init__(self, runner: Callable[[Sequence[str]], str] | None = None, *, threaded: bool = True,
                 min_period_s: float = 0.5) -> None:
        super().__init__()
        self.runner = runner
        self.threaded = threaded
        self.min_period_s = min_period_s
        self._latest: tuple[int, dict[int, dict[str, Any]]] | None = None
        self._served_ts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._index_to_key: dict[int, str] = {}
        self._error: str | None = None
        #: lines amd-smi printed around its JSON (warnings such as missing render/video groups)
        self.notes: list[str] = []
        self._last_ts: dict[str, int] = {}  # device -> its last row's ts_ns
        self._host_clock: set[str] = set()  # devices whose amd-smi timestamps failed the check once

    def _metric(self) -> dict[int, dict[str, Any]]:
        assert self.runner is not None
        doc, notes = split_json_output(self.runner(["metric", "--json"]))
        for note in notes:
            if note not in self.notes:
                self.notes.append(note)
                self._degrade(None, None, f"amd-smi says: {note}")
        return parse_amd_smi_metric(doc)

    def _open(self) -> list[DeviceInfo]:
        if self.runner is None:
            exe = find_amd_smi()
            if exe is None:
                raise CollectorUnavailable("amd", "amd-smi CLI not found")
            self.runner = _default_runner(exe)
        try:
            first = self._metric()
        except AmdSmiFailed as exc:
            raise CollectorUnavailable("amd", str(exc)) from None
        except Exception as exc:
            raise CollectorUnavailable("amd", f"amd-smi metric --json failed ({type(exc).__name__}: {exc})") from None
        if not first:
            raise CollectorUnavailable("amd", "amd-smi found no AMD GPU")
        static: dict[int, dict[str, Any]] = {}
        with contextlib.suppress(Exception):
            static = parse_amd_smi_static(split_json_output(self.runner(["static", "--json"]))[0])
        devices = []
        for idx in sorted(first):
            st = static.get(idx, {})
            vals = first[idx]
            info = DeviceInfo(key=f"gpu{idx}", vendor="amd", index=idx, warp_size=64, name=st.get("name"),
                              pci_device_id=st.get("pci_device_id"), pci_bus_id=st.get("pci_bus_id"),
                              num_sms=st.get("num_sms"),
                              memory_total_bytes=st.get("memory_total_bytes") or vals.get("mem_total_bytes"),
                              compute_capability=gfx_to_capability(st.get("gfx_target")))
            cp = st.get("compute_partition")
            if isinstance(cp, str) and cp.upper() not in ("SPX", "N/A", ""):
                info.kind = "partition"
            info.properties.update({"backend": "amd-smi cli", "gfx_target": st.get("gfx_target"),
                                    "compute_partition": cp, "memory_partition": st.get("memory_partition")})
            if self.notes:
                # e.g. missing render/video groups: the reason some metrics below are missing
                info.properties["notes"] = list(self.notes)
            supported = {k for k, v in vals.items() if v is not None and not k.startswith("_")}
            info.supported = tuple(m for m in GPU_METRIC_NAMES if m in supported)
            na = "not in amd-smi metric output (N/A)"
            if any(_PERMISSION_NOTE.search(n) for n in self.notes):
                # amd-smi reads part of its metrics through the device nodes it warned about
                na += "; amd-smi warned about device permissions (render/video groups), see the note"
            reasons = {m: na for m in GPU_METRIC_NAMES}
            for m in ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util"):
                reasons[m] = "not exposed by amd-smi (needs rocprofiler counters)"
            for m in ("proc_gpu_mem_bytes", "proc_gpu_util", "power_limit_w", "throttle_reasons",
                      "xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"):
                reasons[m] = "not read through the amd-smi CLI fallback (install amdsmi for it)"
            reasons["mem_reserved_bytes"] = _NO_RESERVED
            info.unsupported = {m: reasons[m] for m in GPU_METRIC_NAMES if m not in supported}
            self._index_to_key[idx] = info.key
            devices.append(info)
        self._latest = (now_ns(), first)
        self.status = VendorStatus("amd", True, "amd-smi cli", details={"gpus": len(devices)})
        if self.threaded:
            self._thread = threading.Thread(target=self._loop, name="gpuscope-amd-smi", daemon=True)
            self._thread.start()
        return devices

    def _read(self) -> None:
        assert self.runner is not None
        t0 = now_ns()
        try:
            parsed = self._metric()
        except AmdSmiFailed as exc:
            self._degrade(None, None, str(exc))
            return
        except Exception as exc:
            self._degrade(None, None, f"amd-smi metric --json failed ({type(exc).__name__}: {exc})")
            return
        with self._lock:
            self._latest = (t0, parsed)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self._read()
            self._stop.wait(max(0.0, self.min_period_s - (time.monotonic() - t)))

    def sample(self) -> list[Sample]:
        if not self.threaded:
            self._read()
        with self._lock:
            latest = self._latest
        if latest is None or latest[0] <= self._served_ts:
            return []
        self._served_ts = latest[0]
        out = []
        for idx, vals in sorted(latest[1].items()):
            key = self._index_to_key.get(idx)
            if key is None:
                continue
            vals = dict(vals)
            out.append(Sample(key, self._checked_ts(idx, key, vals.pop("_ts", None), latest[0]), vals))
        return out

    def _checked_ts(self, idx: int, key: str, vendor_ts: int | None, read_ns: int) -> int:
        """amd-smi's own timestamp while it is usable: later than the device's previous row and
        within :data:`CLI_TS_MAX_SKEW_NS` of the host clock. The first time it is not, the device
        goes over to the host clock for good (it never flips back and forth) and it is said
        once, with ``phase='clock'``, which the sampler's stats list as a clock fallback."""
        previous = self._last_ts.get(key)
        ts = read_ns
        if vendor_ts is not None and key not in self._host_clock:
            problem = None
            if previous is not None and vendor_ts <= previous:
                problem = "amd-smi timestamps went backwards or repeated"
            elif abs(vendor_ts - read_ns) > CLI_TS_MAX_SKEW_NS:
                problem = f"amd-smi timestamps are {(vendor_ts - read_ns) / 1e9:+.1f} s from the host clock"
            if problem is None:
                ts = vendor_ts
            else:
                self._host_clock.add(key)
                self._degrade(key, "timestamp", f"{problem}: the host clock is used for this device from now on",
                              phase="clock")
        if previous is not None and ts <= previous:
            # at the switch (amd-smi's clock may run up to 5 s ahead) or a host clock step: keep the rows in order
            ts = previous + 1
        self._last_ts[key] = ts
        return ts

    def _close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


# ------------------------------------------------------------------------------------------
# facade
# ------------------------------------------------------------------------------------------


class AmdCollector(Collector):
    """AMD GPUs: the amdsmi Python API if it works here, else the amd-smi CLI.

    ``amdsmi`` / ``cli_runner`` inject a fake module / CLI runner (tests); ``use_cli=False``
    disables the CLI fallback."""

    source = "amd"

    def __init__(self, amdsmi: ModuleType | Any | None = None, *, cli_runner: Callable[[Sequence[str]], str] | None = None,
                 rocm_globs: Sequence[str] | None = None, use_cli: bool = True, cli_threaded: bool = True,
                 process_interval_s: float = 1.0) -> None:
        super().__init__()
        self.api_collector = AmdSmiCollector(amdsmi, rocm_globs=rocm_globs, process_interval_s=process_interval_s)
        self.cli_collector = AmdSmiCliCollector(cli_runner, threaded=cli_threaded) if use_cli else None
        self.active: Collector | None = None

    @property
    def min_interval_s(self) -> float:  # type: ignore[override]
        return self.active.min_interval_s if self.active is not None else 0.0

    def _open(self) -> list[DeviceInfo]:
        reasons = []
        try:
            devices = self.api_collector.open()
            self.active = self.api_collector
        except CollectorUnavailable as exc:
            reasons.append(exc.reason)
            self.api_collector.close()
            if self.cli_collector is None:
                raise CollectorUnavailable("amd", "; ".join(reasons)) from None
            try:
                devices = self.cli_collector.open()
                self.active = self.cli_collector
            except CollectorUnavailable as exc2:
                reasons.append(exc2.reason)
                raise CollectorUnavailable("amd", "; ".join(reasons)) from None
            self._degrade(None, None, f"using the amd-smi CLI fallback ({reasons[0]}): ~1-2 readings/s, fewer metrics",
                          phase="probe")
        self.status = self.active.status
        # the inner collector reports the probe results; pass them through once
        self._pending.extend(self.active.take_degradations())
        self._reported |= self.active._reported
        return devices

    def open(self) -> list[DeviceInfo]:
        if not self._opened:
            self.devices = self._open()
            self._opened = True
        return self.devices

    def set_pids(self, pids: set[int] | frozenset[int]) -> None:
        self.api_collector.set_pids(pids)

    def sample(self) -> list[Sample]:
        if self.active is None:
            return []
        rows = self.active.sample()
        self._pending.extend(self.active.take_degradations())
        return rows

    def _close(self) -> None:
        if self.active is not None:
            self.active.close()
            self.active = None


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _str(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return v if isinstance(v, str) and v not in ("", "N/A") else None
