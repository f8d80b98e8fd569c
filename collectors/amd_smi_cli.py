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
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .amd_cli_output import (
    failure_reason,
    has_json_document,
    one_line,
    split_json_output,
)
from .amd_values import (
    KIB,
    MIB,
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
    as_pci_bus_id,
    as_pci_device_id,
    as_str,
    as_watts,
    gfx_to_capability,
)
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
    "B": 1.0, "KB": KIB, "MB": MIB, "GB": 1024.0 ** 3, "KiB": KIB, "MiB": MIB, "GiB": 1024.0 ** 3,
    # throughput -> bytes/s
    "B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8,
}


_PERCENT = {"%": 1.0}
_CELSIUS = {"C": 1.0, "°C": 1.0}  # the value may still be in m°C: plausible_celsius sorts that out
_ENERGY = {u: _UNIT_SCALE[u] for u in ("J", "mJ", "uJ", "µJ", "kJ")}
_POWER = {u: _UNIT_SCALE[u] for u in ("W", "mW", "uW", "µW")}
_CLOCK = {u: _UNIT_SCALE[u] for u in ("MHz", "GHz", "KHz", "kHz", "Hz")}
_MEM = {u: _UNIT_SCALE[u] for u in ("B", "KB", "MB", "GB", "KiB", "MiB", "GiB")}
_RATE = {u: _UNIT_SCALE[u] for u in ("B/s", "KB/s", "MB/s", "GB/s", "Mb/s", "Gb/s")}


def _with_unit(v: Any, units: dict[str, float]) -> float | None:
    """A value of amd-smi JSON in its canonical unit: ``{"value": 3, "unit": "W"}`` scaled by
    ``units[unit]``, or a bare number (amd-smi before ROCm 6.1 printed no units: it is in the
    canonical unit). None for "N/A", for a unit not in ``units`` (a percentage where watts belong,
    a missing or empty unit: the scale is unknown), and for a value that is itself an object."""
    if isinstance(v, dict):
        raw, unit = v.get("value"), v.get("unit")
        if isinstance(raw, (dict, list)) or not isinstance(unit, str) or unit not in units:
            return None
        x = as_number(raw)
        return x * units[unit] if x is not None else None
    return as_number(v)


def _pick(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _section(e: Any, key: str) -> dict[str, Any]:
    """``e[key]`` when it is an object; amd-smi prints a whole section as ``"N/A"`` when it has
    nothing in it (``"usage": "N/A"`` on an APU, ROCm/rocm-systems#2720)."""
    v = e.get(key) if isinstance(e, dict) else None
    return v if isinstance(v, dict) else {}


#: keys by which an object in amd-smi's JSON is a GPU's entry: its index, or one of the sections
#: of `metric` and `static` (anything else, such as ``{"value": 0, "unit": "%"}`` or
#: ``{"error": ...}``, is not a GPU)
_GPU_ENTRY_KEYS = frozenset({
    "gpu", "usage", "power", "clock", "temperature", "pcie", "ecc", "ecc_blocks", "fan", "voltage_curve", "overdrive",
    "mem_overdrive", "perf_level", "xgmi_err", "energy", "mem_usage", "throttle", "asic", "bus", "vbios", "board",
    "limit", "driver", "ras", "partition", "vram", "cache_info", "numa", "soc_pstate", "xgmi_plpd",
    "process_isolation",
})
#: gpu indices amd-smi prints are small; a negative, a huge or a boolean "gpu" is garbage, and the
#: entry's position is used instead
_MAX_GPU_INDEX = 4096


def _gpu_entries(doc: Any) -> list[tuple[int, dict[str, Any]]]:
    """(gpu index, entry) for each GPU in both shapes of amd-smi's JSON: a list of per-GPU objects
    (ROCm 6.x) or ``{"gpu_data": [...]}`` (ROCm 7.x); a single object is taken as one GPU. An
    entry is a GPU only with a ``gpu`` key or a known section; its index is its ``gpu`` when that
    is a sane number, else its position. A second entry for the same index is dropped: which of
    the two is right cannot be told, and the first was read already."""
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError(f"unexpected amd-smi JSON ({type(doc).__name__} at top level)")
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[int] = set()
    for pos, e in enumerate(doc):
        if not isinstance(e, dict) or not _GPU_ENTRY_KEYS.intersection(e):
            continue
        idx = e.get("gpu")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < _MAX_GPU_INDEX:
            idx = pos
        if idx not in seen:
            seen.add(idx)
            out.append((idx, e))
    return out


def parse_amd_smi_metric(doc: Any) -> dict[int, dict[str, float | int | None]]:
    """``amd-smi metric --json`` (either shape) -> {gpu index: metric values}. Each value is
    checked by its unit and range: what is not a plausible reading is None, never a number."""
    out: dict[int, dict[str, float | int | None]] = {}
    for idx, e in _gpu_entries(doc):
        v: dict[str, float | int | None] = {}
        usage = _section(e, "usage")
        v["gpu_util"] = percent_to_ratio(_with_unit(_pick(usage, "gfx_activity"), _PERCENT))
        v["mem_util"] = percent_to_ratio(_with_unit(_pick(usage, "umc_activity"), _PERCENT))
        power = _section(e, "power")
        p = _with_unit(power.get("socket_power"), _POWER)
        if p is None:
            p = _with_unit(power.get("average_socket_power"), _POWER)
        v["power_w"] = as_watts(p)
        v["power_instant_w"] = as_watts(_with_unit(power.get("current_socket_power"), _POWER))
        v["energy_j"] = as_energy_j(_with_unit(_pick(e, "energy", "total_energy_consumption"), _ENERGY))
        temp = _section(e, "temperature")
        hot = plausible_celsius(_with_unit(temp.get("hotspot"), _CELSIUS))
        v["temp_c"] = hot if hot is not None else plausible_celsius(_with_unit(temp.get("edge"), _CELSIUS))
        v["mem_temp_c"] = plausible_celsius(_with_unit(temp.get("mem"), _CELSIUS))
        clock = _section(e, "clock")
        v["sm_clock_mhz"] = as_mhz(_with_unit(_pick(clock, "gfx_0", "clk"), _CLOCK))
        v["mem_clock_mhz"] = as_mhz(_with_unit(_pick(clock, "mem_0", "clk"), _CLOCK))
        mem = _section(e, "mem_usage")
        v["mem_used_bytes"] = as_bytes(_with_unit(mem.get("used_vram"), _MEM))
        total = as_bytes(_with_unit(mem.get("total_vram"), _MEM))
        v["mem_total_bytes"] = total if total else None
        ecc = _section(e, "ecc")
        v["ecc_corrected_errors"] = as_count(ecc.get("total_correctable_count"))
        v["ecc_uncorrected_errors"] = as_count(ecc.get("total_uncorrectable_count"))
        v["pcie_bytes_per_s"] = as_bytes_per_s(_with_unit(_pick(e, "pcie", "bandwidth"), _RATE))
        ts = as_number(e.get("timestamp"))  # watch mode: epoch seconds
        # after 2001 and before 2286: anything else is no clock (and 1e300 s would overflow)
        v["_ts"] = int(ts * 1e9) if ts is not None and 1e9 < ts < 1e10 else None
        out[idx] = v
    return out


def parse_amd_smi_static(doc: Any) -> dict[int, dict[str, Any]]:
    """``amd-smi static --json`` (either shape) -> {gpu index: device facts}; a fact that is not
    plausible (a negative size, a bus id that is no bus id) is None."""
    out: dict[int, dict[str, Any]] = {}
    for idx, e in _gpu_entries(doc):
        asic = _section(e, "asic")
        vram = as_bytes(_with_unit(_pick(e, "vram", "size"), _MEM))
        part = _section(e, "partition")
        cus = as_count(asic.get("num_compute_units"))
        out[idx] = {
            "name": as_str(asic.get("market_name")),
            "pci_device_id": as_pci_device_id(asic.get("device_id")),
            "num_sms": cus if cus and cus < 0xFFFF else None,
            "gfx_target": as_str(asic.get("target_graphics_version")),
            "pci_bus_id": as_pci_bus_id(_pick(e, "bus", "bdf")),
            "memory_total_bytes": vram if vram else None,
            "compute_partition": as_str(part.get("compute_partition")),
            "memory_partition": as_str(part.get("memory_partition")),
            # amd-smi static --asic / --vbios ("N/A" where the board has none: None)
            "serial_number": as_str(asic.get("asic_serial")),
            "vbios_version": as_str(_section(e, "vbios").get("version")),
        }
    return out


class AmdSmiFailed(RuntimeError):
    """``amd-smi`` exited non-zero, or printed no JSON; the message is the line that says why."""


class AmdSmiTimeout(AmdSmiFailed):
    """``amd-smi`` did not answer in time (it was killed, or its call given up)."""


#: How long :meth:`AmdSmiCliCollector.open` waits for amd-smi, its ``metric`` and ``static`` calls
#: together. amd-smi answers in well under a second; ``gpuscope run`` starts the user's program
#: only once the collectors are open, so a hung amd-smi (a wedged driver, a GPU in reset) must not
#: hold it back longer than this.
OPEN_TIMEOUT_S = 10.0
#: How long one background ``amd-smi metric --json`` may take before it is killed and the readings
#: are reported missing. Nothing waits on it but the next row, so it may be longer than at open;
#: bounded, so that a hung amd-smi is said and retried rather than waited on for ever.
READ_TIMEOUT_S = 20.0
#: How long :meth:`AmdSmiCliCollector.close` waits for its helper thread. The thread gives up on
#: a hanging call as soon as it is told to stop, so this is a backstop, not a delay.
CLOSE_WAIT_S = 2.0
#: How often a thread waiting on amd-smi looks whether the collector is closing.
_POLL_S = 0.05


def timeout_reason(args: Sequence[str], timeout_s: float) -> str:
    """The one line said when ``amd-smi ARGS`` did not answer within ``timeout_s`` (the same
    whether the runner killed it or the collector gave up waiting, so that it is said once)."""
    return f"amd-smi {' '.join(args)} did not answer within {timeout_s:.3g} s (hung?)"


class AmdSmiRunner:
    """Runs the ``amd-smi`` executable: ``runner(args, timeout_s=...) -> stdout``.

    Each call runs in its own process group, killed as a whole at ``timeout_s`` or on
    :meth:`cancel` (amd-smi is a Python program; a wrapper script around it would leave it behind
    if only the direct child were killed). Output is decoded as UTF-8 with undecodable bytes
    replaced: one odd byte in a device name must not make every reading fail."""

    #: tells :class:`AmdSmiCliCollector` to pass its timeout in (a test's runner takes ``args`` only)
    accepts_timeout = True

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def __call__(self, args: Sequence[str], timeout_s: float | None = None) -> str:
        timeout_s = READ_TIMEOUT_S if timeout_s is None else timeout_s
        cmd = " ".join(args)
        try:
            proc = subprocess.Popen([self.exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise AmdSmiFailed(f"amd-smi {cmd} could not start: {exc}") from None
        with self._lock:
            self._running.add(proc)
        try:
            out_b, err_b = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            # reap it; its output is not read again (a child it left may hold the pipes open)
            with contextlib.suppress(Exception):
                proc.wait(timeout=1.0)
            for pipe in (proc.stdout, proc.stderr):
                with contextlib.suppress(Exception):
                    pipe.close()  # type: ignore[union-attr]
            raise AmdSmiTimeout(timeout_reason(args, timeout_s)) from None
        finally:
            with self._lock:
                self._running.discard(proc)
        out = out_b.decode("utf-8", "replace")
        err = err_b.decode("utf-8", "replace")
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = f"signal {-proc.returncode}"
            raise AmdSmiFailed(f"amd-smi {cmd} was killed by {sig}")
        if proc.returncode != 0:
            raise AmdSmiFailed(f"amd-smi {cmd} exited {proc.returncode}: {failure_reason(err, out)}")
        if not has_json_document(out):
            # amd-smi without a driver may log its errors and still print its version line
            # (ROCm/amdsmi#172): that line is not the reason
            raise AmdSmiFailed(f"amd-smi {cmd} printed no JSON: {failure_reason(err, out)}")
        return out

    def cancel(self) -> None:
        """Kill every amd-smi this runner is waiting on (the collector is closing)."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            self._kill(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        # returncode is None until the process is reaped, so its pid (its group's id) is not yet
        # anyone else's
        if proc.returncode is not None:
            return
        with contextlib.suppress(OSError):
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, signal.SIGKILL)
            else:  # pragma: no cover - amd-smi runs on Linux
                proc.kill()


class _Closing(Exception):
    """The collector closed while a call to amd-smi was under way."""


#: the most lines amd-smi printed around its JSON that are kept as notes (a permission banner has
#: one per GPU device node; garbage after the JSON would otherwise add a note per line, per call)
MAX_NOTES = 40
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
    returns a row per GPU only when a new reading has arrived since the last call.

    amd-smi can hang. Each call runs in a daemon thread of its own and is given up after
    :data:`OPEN_TIMEOUT_S` (at open, for ``metric`` and ``static`` together) or
    :data:`READ_TIMEOUT_S` (afterwards); the default runner also kills the process then. A hang
    after open is reported once as a degradation; the devices stay, and rows come again when
    amd-smi answers again. Only one call is under way at a time: after a hang the next one waits
    for the hung one to end rather than start a second amd-smi beside it."""

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
        # the call to amd-smi under way (or hung): its thread and the event it sets when done
        self._call_thread: threading.Thread | None = None
        self._call_done = threading.Event()
        self._call_done.set()
        self._call_started_ns = 0
        # degradations come from the helper thread and are taken by the sampler's
        self._degrade_lock = threading.Lock()
        #: lines amd-smi printed around its JSON (warnings such as missing render/video groups)
        self.notes: list[str] = []
        self._last_ts: dict[str, int] = {}  # device -> its last row's ts_ns
        self._host_clock: set[str] = set()  # devices whose amd-smi timestamps failed the check once

    def degrade(self, device: str | None, metric: str | None, reason: str, phase: str = "sample") -> bool:
        with self._degrade_lock:
            return super().degrade(device, metric, reason, phase)

    def take_degradations(self) -> list[Any]:
        with self._degrade_lock:
            return super().take_degradations()

    # -- calling amd-smi ---------------------------------------------------------------------
    def _call(self, args: list[str], timeout_s: float) -> str:
        """What ``amd-smi ARGS`` printed; :class:`AmdSmiTimeout` when it takes longer than
        ``timeout_s``, :class:`_Closing` when the collector closes meanwhile.

        The runner runs in a daemon thread, so that one that never returns (a hung amd-smi, a
        test's blocked fake) costs this wait and nothing more: the thread is left behind, never
        joined. A call that hung before is first waited for, up to ``timeout_s`` too, so that
        there is never more than one amd-smi at a time. :attr:`_call_started_ns` is when the
        runner was called (what the reading is stamped with)."""
        if not self._wait(self._call_done, timeout_s):
            raise AmdSmiTimeout(timeout_reason(args, timeout_s))
        assert self.runner is not None
        runner = self.runner
        box: dict[str, Any] = {}
        done = threading.Event()
        self._call_started_ns = now_ns()

        def call() -> None:
            try:
                if getattr(runner, "accepts_timeout", False):
                    box["out"] = runner(args, timeout_s=timeout_s)  # type: ignore[call-arg]
                else:
                    box["out"] = runner(args)
            except BaseException as exc:  # handed to the waiting thread
                box["exc"] = exc
            finally:
                done.set()

        self._call_done = done
        self._call_thread = threading.Thread(target=call, name="gpuscope-amd-smi-call", daemon=True)
        self._call_thread.start()
        if not self._wait(done, timeout_s):
            raise AmdSmiTimeout(timeout_reason(args, timeout_s))
        if "exc" in box:
            raise box["exc"]
        return box["out"]

    def _wait(self, done: threading.Event, timeout_s: float) -> bool:
        """Wait for ``done`` up to ``timeout_s``; raises :class:`_Closing` as soon as the
        collector closes, so that close() never waits on amd-smi."""
        deadline = time.monotonic() + timeout_s
        while not done.wait(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
            if self._stop.is_set():
                raise _Closing()
            if time.monotonic() >= deadline:
                return False
        return True

    def _metric(self, timeout_s: float) -> dict[int, dict[str, Any]]:
        doc, notes = split_json_output(self._call(["metric", "--json"], timeout_s))
        for note in notes:
            # a document followed by garbage would make every line a note: keep the first few
            if note not in self.notes and len(self.notes) < MAX_NOTES:
                self.notes.append(note)
                self.degrade(None, None, f"amd-smi says: {note}")
        return parse_amd_smi_metric(doc)

    def _open(self) -> list[DeviceInfo]:
        if self.runner is None:
            exe = find_amd_smi()
            if exe is None:
                raise CollectorUnavailable("amd", "amd-smi CLI not found")
            self.runner = AmdSmiRunner(exe)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        try:
            first = self._metric(OPEN_TIMEOUT_S)
        except AmdSmiFailed as exc:
            raise CollectorUnavailable("amd", one_line(str(exc))) from None
        except Exception as exc:
            reason = f"amd-smi metric --json failed ({type(exc).__name__}: {exc})"
            raise CollectorUnavailable("amd", one_line(reason)) from None
        if not first:
            raise CollectorUnavailable("amd", "amd-smi found no AMD GPU")
        static: dict[int, dict[str, Any]] = {}
        try:
            # what is left of the open's time: a hang here must not hold `gpuscope run` longer
            left = deadline - time.monotonic()
            if left <= 0:
                raise AmdSmiTimeout(timeout_reason(["static", "--json"], 0))
            static = parse_amd_smi_static(split_json_output(self._call(["static", "--json"], left))[0])
        except AmdSmiFailed as exc:
            self.degrade(None, None, one_line(f"{exc}: GPU names, PCI ids and sizes unknown"), phase="probe")
        except Exception as exc:  # the names are nice to have; the metrics came
            self.degrade(None, None, one_line(f"amd-smi static --json unreadable ({type(exc).__name__}: {exc}): "
                                               "GPU names, PCI ids and sizes unknown"), phase="probe")
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
                                    "compute_partition": cp, "memory_partition": st.get("memory_partition"),
                                    "serial_number": st.get("serial_number"), "vbios_version": st.get("vbios_version")})
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
            reasons["mem_reserved_bytes"] = NO_RESERVED_REASON
            reasons["xid_errors"] = reasons["last_xid"] = NO_XID_REASON
            reasons["enc_util"] = reasons["dec_util"] = NO_VIDEO_SPLIT_REASON
            for m in ("remapped_rows_corrected", "remapped_rows_uncorrected", "row_remap_pending", "row_remap_failed"):
                reasons[m] = NO_ROW_REMAP_REASON
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
        try:
            parsed = self._metric(READ_TIMEOUT_S)
        except _Closing:
            return
        except AmdSmiTimeout as exc:
            if not self._stop.is_set():  # not the kill of close()
                self.degrade(None, None, one_line(f"{exc}: no readings until it answers again"))
            return
        except AmdSmiFailed as exc:
            if not self._stop.is_set():
                self.degrade(None, None, one_line(str(exc)))
            return
        except Exception as exc:
            self.degrade(None, None, one_line(f"amd-smi metric --json failed ({type(exc).__name__}: {exc})"))
            return
        with self._lock:
            self._latest = (self._call_started_ns, parsed)

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
                self.degrade(key, "timestamp", f"{problem}: the host clock is used for this device from now on",
                              phase="clock")
        if previous is not None and ts <= previous:
            # at the switch (amd-smi's clock may run up to 5 s ahead) or a host clock step: keep the rows in order
            ts = previous + 1
        self._last_ts[key] = ts
        return ts

    def _close(self) -> None:
        # tell the helper thread to stop and kill an amd-smi still running; a runner that cannot
        # be stopped (a hung call) is left to its daemon thread, never joined
        self._stop.set()
        cancel = getattr(self.runner, "cancel", None)
        if callable(cancel):
            with contextlib.suppress(Exception):
                cancel()
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_WAIT_S)
            self._thread = None
