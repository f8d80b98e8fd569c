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

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .amd_smi_api import DEFAULT_ROCM_GLOBS, AmdSmiCollector, import_amdsmi
from .amd_smi_cli import AmdSmiCliCollector, parse_amd_smi_metric, parse_amd_smi_static
from .base import Collector, CollectorUnavailable, DeviceInfo, Sample

__all__ = [
    "AmdCollector",
    "AmdSmiCliCollector",
    "AmdSmiCollector",
    "DEFAULT_ROCM_GLOBS",
    "import_amdsmi",
    "parse_amd_smi_metric",
    "parse_amd_smi_static",
]


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
            self.degrade(None, None, f"using the amd-smi CLI fallback ({reasons[0]}): ~1-2 readings/s, fewer metrics",
                          phase="probe")
        self.status = self.active.status
        # the inner collector reports the probe results; pass them through once
        self.relay_degradations(self.active, remember=True)
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
        self.relay_degradations(self.active)
        return rows

    def _close(self) -> None:
        if self.active is not None:
            self.active.close()
            self.active = None


def device_clocks(pci_bus_id: str | None = None, index: int | None = None, *, amdsmi: ModuleType | Any | None = None
                  ) -> dict[str, float]:
    """One AMD GPU's gfx clock, power and temperature right now and its power cap, from one
    reading of the amdsmi collector (the CLI is too slow for one reading): ``sm_clock_mhz``,
    ``power_w``, ``temperature_c``, ``power_limit_w``. The GPU is found by its PCI bus id
    (``0000:03:00.0``, or a prefix of it such as ``0000:03:``), else by amdsmi's ``index``. A
    value amdsmi does not give is left out; {} without amdsmi or without the GPU. ``amdsmi``
    injects a fake module (tests)."""
    c = AmdSmiCollector(amdsmi, process_interval_s=1e9)
    try:
        devices = [d for d in c.open() if d.kind in ("gpu", "partition")]
        dev = next((d for d in devices if pci_bus_id and (d.pci_bus_id or "").lower().startswith(pci_bus_id.lower())),
                   None)
        if dev is None and index is not None:
            dev = next((d for d in devices if d.index == index), None)
        if dev is None:
            return {}
        row = next((s for s in c.sample() if s.device == dev.key), None)
    except Exception:  # amdsmi missing, or misbehaving: the reading is informative only
        return {}
    finally:
        c.close()
    out: dict[str, float] = {}
    for key, metric in (("sm_clock_mhz", "sm_clock_mhz"), ("power_w", "power_w"), ("temperature_c", "temp_c"),
                        ("power_limit_w", "power_limit_w")):
        v = row.get(metric) if row is not None else None
        if isinstance(v, (int, float)) and v >= 0:
            out[key] = float(v)
    return out
