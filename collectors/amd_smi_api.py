"""AMD telemetry through the ``amdsmi`` Python API (:class:`AmdSmiCollector`).

The module is found as ``import amdsmi`` (the PyPI wheel or a pip-installed ROCm copy; the PyPI
wheel carries no library: without ROCm its import prints to stdout and raises
``KeyError('libamd_smi.so')``, so the import is silenced and any exception caught), else as ROCm's
own copy, ``/opt/rocm*/share/amd_smi`` (newest first), put on ``sys.path`` for the import only.

One ``amdsmi_get_gpu_metrics_info`` call per tick gives gfx and memory-controller (umc) activity,
socket power, the energy accumulator, temperatures, clocks, throttle status, PCIe bandwidth and
XGMI counters, stamped by the firmware clock. Memory use, the power cap and the watched processes
come from their own calls (the last two at most once a second). Compute partitions (DPX/CPX on
MI300) appear as one device each, kind ``partition``. Every value is checked by range.
"""
from __future__ import annotations

import contextlib
import enum
import glob
import io
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .amd_values import (
    KIB,
    MAX_BYTES,
    NO_RESERVED_REASON,
    NO_ROW_REMAP_REASON,
    NO_VIDEO_SPLIT_REASON,
    NO_XID_REASON,
    as_bytes,
    as_bytes_per_s,
    as_count,
    as_energy_j,
    as_mhz,
    as_number,
    as_numbers,
    as_pci_bus_id,
    as_pci_device_id,
    as_power_cap_w,
    as_str,
    as_watts,
    gfx_to_capability,
    is_absent,
    shown,
    try_or_none,
)
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
    watched,
)

DEFAULT_ROCM_GLOBS: tuple[str, ...] = ("/opt/rocm*/share/amd_smi",)
INSTALL_HINT = "pip install 'gpuscope[amd]' (needs ROCm's libamd_smi.so)"

class AmdSmiStatus(enum.IntEnum):
    """The amdsmi status codes gpuscope names (``amdsmi_status_t``; an
    ``AmdSmiLibraryException``'s ``err_code``, made positive). The one place these numbers are
    written: the reasons and the lost and permanent sets name them from here."""

    NOT_SUPPORTED = 2
    NO_PERM = 10
    INIT_ERROR = 18
    NOT_FOUND = 31
    NOT_INIT = 32
    DRIVER_NOT_LOADED = 34
    FILE_NOT_FOUND = 52


#: codes after which the device is taken as gone (its sysfs node vanished) (unverified on hardware)
LOST_CODES = frozenset({AmdSmiStatus.FILE_NOT_FOUND})
#: codes that mean "this device will never give this value": drop the read
PERMANENT_CODES = frozenset({AmdSmiStatus.NOT_SUPPORTED, AmdSmiStatus.NO_PERM})
#: User-facing reasons for the amdsmi status codes a user meets.
REASONS: dict[int, str] = {
    AmdSmiStatus.NOT_SUPPORTED: "not supported by this GPU",
    AmdSmiStatus.NO_PERM: "no permission (run as root or join the render/video group)",
    AmdSmiStatus.DRIVER_NOT_LOADED: "amdgpu driver not loaded",
    AmdSmiStatus.INIT_ERROR: "amdsmi could not initialise (amdgpu driver not loaded?)",
    AmdSmiStatus.NOT_INIT: "amdsmi could not initialise (amdgpu driver not loaded?)",
    AmdSmiStatus.FILE_NOT_FOUND: "device files gone (GPU lost?)",
}

_ENERGY_RESOLUTION_UJ = 15.259  # 2**-16 J, the usual energy_accumulator tick

#: the gpu_metrics fields each metric is read from, in the order they are tried: to say which
#: field held what when a metric comes out None
_METRIC_FIELDS: dict[str, tuple[str, ...]] = {
    "gpu_util": ("average_gfx_activity",),
    "mem_util": ("average_umc_activity",),
    "power_w": ("average_socket_power", "current_socket_power"),
    "power_instant_w": ("current_socket_power",),
    "energy_j": ("energy_accumulator",),
    "temp_c": ("temperature_hotspot", "temperature_edge"),
    "mem_temp_c": ("temperature_mem", "temperature_hbm"),
    "sm_clock_mhz": ("current_gfxclk", "current_gfxclks", "average_gfxclk_frequency"),
    "mem_clock_mhz": ("current_uclk", "average_uclk_frequency"),
    "throttle_reasons": ("indep_throttle_status", "throttle_status"),
    "pcie_bytes_per_s": ("pcie_bandwidth_inst",),
    "pcie_replays": ("pcie_replay_count_acc",),
}
_NA_IN_GPU_METRICS = "not reported by this GPU (N/A in gpu_metrics)"
#: the metrics read each tick (or each SLOW_READ_INTERVAL_S) that are said once when they had a
#: value at open and come as "N/A" later (XGMI and process rates are None between readings by
#: nature, so they are not among them)
_WATCHED_METRICS = (*_METRIC_FIELDS, "mem_used_bytes", "power_limit_w", "ecc_corrected_errors",
                    "ecc_uncorrected_errors")
#: the power cap and the ECC counts change rarely: read at most this often (seconds)
SLOW_READ_INTERVAL_S = 1.0


def _garbage(what: str, raw: Any) -> str:
    """The reason for a metric that is None because amdsmi gave ``raw``, which is no reading."""
    return f"amdsmi gave {what} = {shown(raw)}, not a plausible reading: the value is None"


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
        import amdsmi
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
    code = error_code(exc)
    if code in REASONS:
        return REASONS[code]
    info = getattr(exc, "err_info", None)
    if info:
        return f"amdsmi error {code if code is not None else _raw_code(exc)}: {info}"
    return f"{type(exc).__name__}: {exc}".strip()


def _raw_code(exc: BaseException) -> Any:
    code = getattr(exc, "err_code", None)
    if code is None and hasattr(exc, "get_error_code"):
        with contextlib.suppress(Exception):
            code = exc.get_error_code()
    return code


def error_code(exc: BaseException) -> int | None:
    """The amdsmi status an exception carries (``err_code``, else ``get_error_code()``), made
    positive; None for any other exception."""
    code = _raw_code(exc)
    return abs(code) if isinstance(code, int) else None


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
    ecc: bool = True
    ecc_last: float = -1e18
    procs: bool = True
    procs_last: float = -1e18
    proc_gfx_ns: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (engine ns, ts ns)
    fw_anchor: tuple[int, float] | None = None  # (host ns, firmware ns)
    xgmi: dict[str, tuple[float, int]] = field(default_factory=dict)
    lost: bool = False
    #: metric -> why amdsmi's value for it was unusable at open (an unsupported metric's reason)
    bad: dict[str, str] = field(default_factory=dict)
    #: metrics whose unusable or missing value while sampling has been said (once each)
    said: set[str] = field(default_factory=set)


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
        backend: str | None
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
        bad: dict[str, str] = {}
        asic = try_or_none(lambda: api.amdsmi_get_gpu_asic_info(h))
        asic = asic if isinstance(asic, dict) else {}  # "N/A" or garbage: no facts, not a crash
        info.name = as_str(asic.get("market_name"))
        info.pci_device_id = as_pci_device_id(asic.get("device_id"))
        cus = as_count(asic.get("num_compute_units"))
        info.num_sms = cus if cus and cus < 0xFFFF else None
        target = as_str(asic.get("target_graphics_version"))
        info.compute_capability = gfx_to_capability(target)
        info.pci_bus_id = as_pci_bus_id(try_or_none(lambda: api.amdsmi_get_gpu_device_bdf(h)))
        info.uuid = as_str(try_or_none(lambda: api.amdsmi_get_gpu_device_uuid(h)))
        vram_type = getattr(getattr(api, "AmdSmiMemoryType", None), "VRAM", 0)
        total = try_or_none(lambda: api.amdsmi_get_gpu_memory_total(h, vram_type))
        info.memory_total_bytes = as_bytes(total) or None
        if info.memory_total_bytes is None and not is_absent(total):
            bad["mem_total_bytes"] = _garbage("the VRAM size", total)
        cpart = as_str(try_or_none(lambda: api.amdsmi_get_gpu_compute_partition(h)))
        mpart = as_str(try_or_none(lambda: api.amdsmi_get_gpu_memory_partition(h)))
        serial = as_str(asic.get("asic_serial")) or f"#{i}"
        phys = serial_to_phys.setdefault(serial, len(serial_to_phys))
        if cpart and cpart.upper() not in ("SPX", "N/A"):
            info.kind = "partition"
        info.properties.update({"gfx_target": target, "compute_partition": cpart, "memory_partition": mpart,
                                "physical_gpu": phys, "backend": self.backend})
        # amd-smi static's asic_serial and VBIOS version (None where amdsmi says N/A)
        info.properties["serial_number"] = as_str(asic.get("asic_serial"))
        vbios = try_or_none(lambda: api.amdsmi_get_gpu_vbios_info(h))
        info.properties["vbios_version"] = as_str(vbios.get("version")) if isinstance(vbios, dict) else None
        g = _AmdGpu(info=info, handle=h, bad=bad)
        energy = try_or_none(lambda: api.amdsmi_get_energy_count(h))
        res = as_number(energy.get("counter_resolution")) if isinstance(energy, dict) else None
        if res and 0 < res < 1e6:
            g.energy_res_uj = res
        self._probe(g)
        return g

    def _probe(self, g: _AmdGpu) -> None:
        api, h, info = self.api, g.handle, g.info
        supported: set[str] = set()
        unsupported: dict[str, str] = {}
        bad = g.bad
        try:
            gm = api.amdsmi_get_gpu_metrics_info(h)
            values = self._from_metrics(g, gm, now_ns(), probe=True, bad=bad)
            values.pop("_ts", None)
            supported |= {k for k, v in values.items() if v is not None}
            for k, v in values.items():
                if v is None:
                    unsupported[k] = bad.get(k, _NA_IN_GPU_METRICS)
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
            supported |= {k for k, v in self._mem(g, bad).items() if v is not None}
        except Exception as exc:
            g.mem_usage = False
            unsupported["mem_used_bytes"] = amdsmi_error_reason(exc)
        if info.memory_total_bytes:
            supported.add("mem_total_bytes")
        try:
            if self._power_cap(g, bad) is not None:
                supported.add("power_limit_w")
        except Exception as exc:
            g.power_cap = False
            unsupported["power_limit_w"] = amdsmi_error_reason(exc)
        try:
            ecc = {m for m, n in self._ecc(g, bad).items() if n is not None}
            if ecc:
                supported |= ecc
            else:
                g.ecc = False
                for m in ("ecc_corrected_errors", "ecc_uncorrected_errors"):
                    unsupported[m] = bad.get(m, "no ECC counts from amdsmi on this GPU")
        except Exception as exc:
            g.ecc = False
            unsupported["ecc_corrected_errors"] = unsupported["ecc_uncorrected_errors"] = amdsmi_error_reason(exc)
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
        for m in ("enc_util", "dec_util"):  # vcn_activity: one engine for both, no split
            unsupported.setdefault(m, NO_VIDEO_SPLIT_REASON)
        for m in ("remapped_rows_corrected", "remapped_rows_uncorrected", "row_remap_pending", "row_remap_failed"):
            unsupported.setdefault(m, NO_ROW_REMAP_REASON)
        unsupported.setdefault("mem_reserved_bytes", NO_RESERVED_REASON)
        unsupported.setdefault("xid_errors", NO_XID_REASON)
        unsupported.setdefault("last_xid", NO_XID_REASON)
        for m, reason in bad.items():  # garbage at open says so, rather than "not supported"
            if m not in supported and m not in unsupported:
                unsupported[m] = reason
        info.supported = tuple(m for m in GPU_METRIC_NAMES if m in supported)
        info.unsupported = {m: unsupported.get(m, "not supported by this GPU")
                            for m in GPU_METRIC_NAMES if m not in supported}

    # -- conversions -------------------------------------------------------------------
    def _from_metrics(self, g: _AmdGpu, gm: Any, read_ns: int, probe: bool = False,
                      bad: dict[str, str] | None = None) -> dict[str, Any]:
        """One gpu_metrics reading as metric values, each checked by range. ``bad`` collects, for
        each metric that is None although amdsmi gave a value for it, why (the value was garbage)."""
        if not isinstance(gm, dict):
            raise ValueError(f"amdsmi_get_gpu_metrics_info gave {shown(gm)}, not a table of metrics")
        v: dict[str, Any] = {}
        v["gpu_util"] = percent_to_ratio(as_number(gm.get("average_gfx_activity")))
        v["mem_util"] = percent_to_ratio(as_number(gm.get("average_umc_activity")))
        avg, cur = as_watts(gm.get("average_socket_power")), as_watts(gm.get("current_socket_power"))
        v["power_w"] = avg if avg is not None else cur
        v["power_instant_w"] = cur
        acc = as_number(gm.get("energy_accumulator"))
        v["energy_j"] = as_energy_j(acc * g.energy_res_uj * 1e-6) if acc is not None else None
        hot = plausible_celsius(as_number(gm.get("temperature_hotspot")))
        v["temp_c"] = hot if hot is not None else plausible_celsius(as_number(gm.get("temperature_edge")))
        mem_t = plausible_celsius(as_number(gm.get("temperature_mem")))
        if mem_t is None:
            hbm = [t for t in (plausible_celsius(x) for x in as_numbers(gm.get("temperature_hbm"))) if t is not None]
            mem_t = max(hbm) if hbm else None
        v["mem_temp_c"] = mem_t
        gfx = as_mhz(gm.get("current_gfxclk"))
        if gfx is None:
            clks = [c for c in (as_mhz(x) for x in as_numbers(gm.get("current_gfxclks"))) if c is not None]
            gfx = sum(clks) / len(clks) if clks else as_mhz(gm.get("average_gfxclk_frequency"))
        v["sm_clock_mhz"] = gfx
        uclk = as_mhz(gm.get("current_uclk"))
        v["mem_clock_mhz"] = uclk if uclk is not None else as_mhz(gm.get("average_uclk_frequency"))
        thr = gm.get("indep_throttle_status")
        if as_count(thr) is None:
            thr = gm.get("throttle_status")
        if isinstance(thr, bool):  # a throttled yes/no flag is a one-bit mask
            thr = int(thr)
        v["throttle_reasons"] = as_count(thr)
        bw = as_number(gm.get("pcie_bandwidth_inst"))  # GB/s
        v["pcie_bytes_per_s"] = as_bytes_per_s(bw * 1e9) if bw is not None else None
        v["pcie_replays"] = as_count(gm.get("pcie_replay_count_acc"))  # since the driver loaded
        ts = self._fw_time(g, gm, read_ns)
        for name, key in (("xgmi_nvlink_tx_bytes_per_s", "xgmi_write_data_acc"),
                          ("xgmi_nvlink_rx_bytes_per_s", "xgmi_read_data_acc")):
            acc_kb = as_numbers(gm.get(key))
            if not acc_kb or min(acc_kb) < 0:  # a negative byte counter is garbage: no rate from it
                g.xgmi.pop(name, None)
                v[name] = None
                continue
            total = sum(acc_kb) * KIB
            prev = g.xgmi.get(name)
            g.xgmi[name] = (total, ts)
            rate = None
            if prev is not None and ts > prev[1] and total >= prev[0]:
                rate = as_bytes_per_s((total - prev[0]) / ((ts - prev[1]) / 1e9))
            # at probe time there is no previous reading: the counter exists, so it is supported
            v[name] = 0.0 if probe and rate is None else rate
        if bad is not None:
            for metric, fields in _METRIC_FIELDS.items():
                if v[metric] is None:
                    given = next((f for f in fields if not is_absent(gm.get(f))), None)
                    if given is not None:
                        bad[metric] = _garbage(given, gm.get(given))
        v["_ts"] = ts
        return v

    def _fw_time(self, g: _AmdGpu, gm: dict[str, Any], read_ns: int) -> int:
        """Epoch ns for this reading from the firmware timestamp (10 ns ticks), anchored to the
        host clock at the first reading; the host clock when there is none or it drifts."""
        fw = as_number(gm.get("firmware_timestamp"))
        if fw is None:
            return read_ns
        fw_ns = fw * 10.0
        if g.fw_anchor is None:
            g.fw_anchor = (read_ns, fw_ns)
            return read_ns
        ts = int(g.fw_anchor[0] + (fw_ns - g.fw_anchor[1]))
        if abs(ts - read_ns) > 1_000_000_000:  # firmware reset or a different clock: start over
            self.degrade(g.info.key, None, "firmware timestamp jumped; re-anchored to the host clock", phase="clock")
            g.fw_anchor = (read_ns, fw_ns)
            return read_ns
        return ts

    def _mem(self, g: _AmdGpu, bad: dict[str, str] | None = None) -> dict[str, int | None]:
        api = self.api
        vram_type = getattr(getattr(api, "AmdSmiMemoryType", None), "VRAM", 0)
        used = api.amdsmi_get_gpu_memory_usage(g.handle, vram_type)  # bytes
        value = as_bytes(used)
        if value is None and bad is not None and not is_absent(used):
            bad["mem_used_bytes"] = _garbage("the VRAM in use", used)
        return {"mem_used_bytes": value}

    def _ecc(self, g: _AmdGpu, bad: dict[str, str] | None = None) -> dict[str, int | None]:
        """The total ECC counts (``amdsmi_get_gpu_total_ecc_count``) as metric values."""
        counts = self.api.amdsmi_get_gpu_total_ecc_count(g.handle)
        counts = counts if isinstance(counts, dict) else {}
        out: dict[str, int | None] = {}
        for key, metric in (("correctable_count", "ecc_corrected_errors"), ("uncorrectable_count", "ecc_uncorrected_errors")):
            out[metric] = as_count(counts.get(key))
            if out[metric] is None and bad is not None and not is_absent(counts.get(key)):
                bad[metric] = _garbage(f"the ECC {key}", counts.get(key))
        return out

    def _power_cap(self, g: _AmdGpu, bad: dict[str, str] | None = None) -> float | None:
        cap = self.api.amdsmi_get_power_cap_info(g.handle)
        raw = cap.get("power_cap") if isinstance(cap, dict) else cap
        watts = as_power_cap_w(raw)
        if watts is None and bad is not None and not is_absent(raw):
            bad["power_limit_w"] = _garbage("the power cap", raw)
        return watts

    # -- sampling ----------------------------------------------------------------------
    def set_pids(self, pids: set[int] | frozenset[int]) -> None:
        self._pids = watched(pids)

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
        if error_code(exc) in LOST_CODES:
            self.degrade(g.info.key, None, f"{amdsmi_error_reason(exc)}: marked lost, no more samples from it",
                          phase="lost")
            return None
        self.degrade(g.info.key, what, amdsmi_error_reason(exc))
        return error_code(exc) in PERMANENT_CODES

    def _sample_gpu(self, g: _AmdGpu) -> Sample:
        api, h, key = self.api, g.handle, g.info.key
        read_ns = now_ns()
        mono = time.monotonic()
        values: dict[str, Any] = {}
        bad: dict[str, str] = {}
        ts = read_ns
        if g.metrics_ok:
            try:
                values = self._from_metrics(g, api.amdsmi_get_gpu_metrics_info(h), read_ns, bad=bad)
                ts = values.pop("_ts", read_ns)
            except Exception as exc:
                r = self._failed(g, "gpu_metrics", exc)
                if r is None:
                    return Sample(key, read_ns, {}, lost=True)
                g.metrics_ok = not r
        if g.mem_usage:
            try:
                values.update(self._mem(g, bad))
            except Exception as exc:
                r = self._failed(g, "mem_used_bytes", exc)
                if r is None:
                    return Sample(key, read_ns, {}, lost=True)
                g.mem_usage = not r
        if g.info.memory_total_bytes:
            values["mem_total_bytes"] = g.info.memory_total_bytes
        if g.power_cap and mono - g.power_cap_last >= SLOW_READ_INTERVAL_S:
            g.power_cap_last = mono
            try:
                values["power_limit_w"] = self._power_cap(g, bad)
            except Exception as exc:
                g.power_cap = not self._failed(g, "power_limit_w", exc)
        if g.ecc and mono - g.ecc_last >= SLOW_READ_INTERVAL_S:
            g.ecc_last = mono
            try:
                values.update(self._ecc(g, bad))
            except Exception as exc:
                g.ecc = not self._failed(g, "ecc_corrected_errors", exc)
        procs: tuple[ProcessSample, ...] = ()
        if g.procs and self._pids and mono - g.procs_last >= self.process_interval_s:
            g.procs_last = mono
            try:
                plist = api.amdsmi_get_gpu_process_list(h)
                procs = self._processes(g, plist, int(ts))
                mems = [p.gpu_mem_bytes for p in procs if p.gpu_mem_bytes is not None]
                utils = [p.gpu_util for p in procs if p.gpu_util is not None]
                mem = sum(mems) if mems else (0 if not procs else None)
                values["proc_gpu_mem_bytes"] = mem if mem is None or mem <= MAX_BYTES else None
                values["proc_gpu_util"] = min(sum(utils), 1.0) if utils else (0.0 if not procs else None)
            except Exception as exc:
                g.procs = not self._failed(g, "processes", exc)
        self._say_missing(g, values, bad)
        return Sample(key, int(ts), values, processes=procs)

    def _say_missing(self, g: _AmdGpu, values: dict[str, Any], bad: dict[str, str]) -> None:
        """Once per metric: a value amdsmi gave that was garbage (so the row holds None), or a
        metric that had a value at open and now comes as "N/A" or a sentinel."""
        for metric, reason in bad.items():
            if metric not in g.said:
                g.said.add(metric)
                self.degrade(g.info.key, metric, reason)
        for metric in _WATCHED_METRICS:
            if metric in values and values[metric] is None and metric in g.info.supported and metric not in g.said:
                g.said.add(metric)
                self.degrade(g.info.key, metric, "amdsmi stopped reporting it (N/A) after it had a value at open")

    def _processes(self, g: _AmdGpu, plist: list[Any], read_ns: int) -> tuple[ProcessSample, ...]:
        # read_ns: the reading's time (firmware-stamped where possible), for engine-time rates
        out = []
        seen: dict[int, tuple[int, int]] = {}
        for p in plist or []:
            if not isinstance(p, dict):
                continue
            pid = p.get("pid")
            if isinstance(pid, bool) or not isinstance(pid, int) or pid not in self._pids:
                continue
            mu = p.get("memory_usage") or {}
            vram = as_bytes(mu.get("vram_mem")) if isinstance(mu, dict) else None
            if vram is None:
                vram = as_bytes(p.get("mem"))
            eu = p.get("engine_usage") or {}
            gfx_ns = as_number(eu.get("gfx")) if isinstance(eu, dict) else None
            util = None
            if gfx_ns is not None and gfx_ns >= 0:
                seen[pid] = (int(gfx_ns), read_ns)
                prev = g.proc_gfx_ns.get(pid)
                # engine_usage is cumulative engine time in ns: the rate is the utilisation
                if prev is not None and read_ns > prev[1] and gfx_ns >= prev[0]:
                    util = min((gfx_ns - prev[0]) / (read_ns - prev[1]), 1.0)
            name = p.get("name")
            out.append(ProcessSample(pid=pid, gpu_mem_bytes=vram, gpu_util=util,
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
