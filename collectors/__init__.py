"""Telemetry collectors (NVML, AMD SMI, host, replay) behind one small interface.

Collectors return rows; they know nothing of the store, the TUI or OpenTelemetry. Importing
this package imports no vendor library (``pynvml``, ``amdsmi``, ``psutil`` are imported
inside ``open()``), so it is safe on any machine.

    from gpuscope.collectors import NvmlCollector
    with NvmlCollector() as c:          # open(): discover + probe once
        for row in c.sample():          # one Sample per device
            print(row.device, row.get("power_w"))

See ``docs/telemetry.md`` for the metric table, units and each vendor's quirks.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscope.device import match_spec

from .amd import AmdCollector, AmdSmiCliCollector, AmdSmiCollector
from .base import (
    Collector,
    CollectorError,
    CollectorUnavailable,
    Degradation,
    DeviceInfo,
    ProcessSample,
    Sample,
    VendorStatus,
)
from .host import HostCollector, ProcessTree
from .nvml import NvmlCollector
from .replay import RECORDING_FORMAT, Recording, RecordingWriter, ReplayCollector, load_recording

__all__ = [
    "AmdCollector",
    "AmdSmiCliCollector",
    "AmdSmiCollector",
    "Collector",
    "CollectorError",
    "CollectorUnavailable",
    "Degradation",
    "DeviceInfo",
    "HostCollector",
    "NvmlCollector",
    "ProcessSample",
    "ProcessTree",
    "RECORDING_FORMAT",
    "Recording",
    "RecordingWriter",
    "ReplayCollector",
    "Sample",
    "VendorStatus",
    "attach_specs",
    "default_collectors",
    "discover",
    "load_recording",
]


def default_collectors(tree: ProcessTree | None = None, *, nvidia: bool = True, amd: bool = True,
                       host: bool = True) -> list[Collector]:
    """The collectors for this machine, not yet opened: NVML, AMD SMI, host (in that order).
    A vendor that is not there fails in ``open()`` and the sampler goes on without it."""
    out: list[Collector] = []
    if nvidia:
        out.append(NvmlCollector())
    if amd:
        out.append(AmdCollector())
    if host:
        out.append(HostCollector(tree))
    return out


def discover(collectors: Sequence[Collector] | None = None) -> tuple[list[DeviceInfo], list[VendorStatus]]:
    """Open each collector once, keep its devices and close it: what ``gpuscope devices`` shows.

    Returns the devices found and one :class:`VendorStatus` per collector (available, or the
    reason it is not)."""
    devices: list[DeviceInfo] = []
    statuses: list[VendorStatus] = []
    for c in collectors if collectors is not None else default_collectors():
        try:
            found = c.open()
            devices.extend(found)
            statuses.append(c.status or VendorStatus(c.source, True))
        except CollectorUnavailable as exc:
            statuses.append(VendorStatus(exc.vendor, False, None, exc.reason))
        except Exception as exc:  # a vendor library misbehaving must not hide the others
            statuses.append(VendorStatus(c.source, False, None, f"{type(exc).__name__}: {exc}"))
        finally:
            try:
                c.close()
            except Exception:
                pass
    attach_specs(devices)
    return devices, statuses


def attach_specs(devices: Sequence[DeviceInfo]) -> None:
    """Fill ``spec_key`` / ``spec_exact`` from the GPU spec database (through
    :func:`gpuscope.device.match_spec`) where it knows the device; leaves them None when the
    database is missing or has no match."""
    try:
        from gpuscope.specs import load_specs

        db: Any = load_specs()
    except Exception:
        return
    for d in devices:
        if d.kind == "host" or d.spec_key is not None:
            continue
        try:
            match = match_spec(d.name, db=db, pci_id=d.pci_device_id,
                               memory_bytes=d.memory_total_bytes if d.kind == "gpu" else None)
        except Exception:
            match = None
        d.set_spec(match)
