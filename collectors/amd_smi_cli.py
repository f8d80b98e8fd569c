"""AMD telemetry through the ``amd-smi`` CLI (:class:`AmdSmiCliCollector`), the last resort
without the Python API.

``amd-smi metric --json``: ROCm 6.x prints a list of per-GPU objects, ROCm 7.x wraps it as
``{"gpu_data": [...]}``; values are numbers, ``{"value", "unit"}`` objects or ``"N/A"``. The CLI
is a Python program that takes a few hundred ms per call, so it runs in a helper thread and a row
comes out each time a new reading arrives (about 1-3 Hz, not the sampler's 10 Hz).
"""
from __future__ import annotations

import contextlib
import glob
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .amd_cli_output import failure_reason, has_json_document, split_json_output
from .amd_values import _KIB, _MIB, _NO_RESERVED, _NO_XID, _mhz, _num, _str, _watts, gfx_to_capability
from .base import (
    GPU_METRIC_NAMES,
    Collector,
    CollectorUnavailable,
    DeviceInfo,
    Sample,
    VendorStatus,
    now_ns,
    percent_to_ratio,
    plausible_celsius,
)


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
        ecc = _section(e, "ecc")
        for key, metric in (("total_correctable_count", "ecc_corrected_errors"),
                            ("total_uncorrectable_count", "ecc_uncorrected_errors")):
            n = _num(ecc.get(key))
            v[metric] = int(n) if n is not None and 0 <= n < 2**63 else None
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
            reasons["xid_errors"] = reasons["last_xid"] = _NO_XID
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
