"""dcgm-exporter's names for the metrics gpuscope and dcgm-exporter both have
(``gpuscope monitor --prometheus-names dcgm``), for NVIDIA and AMD GPUs alike, so that
dashboards built for dcgm-exporter show a mixed fleet unchanged. Pure: device descriptions and
the newest values in, (name, type, help, labels, value) out; docs/otel.md has the table.

Units converted to dcgm-exporter's: percent 0-100 for ``DCGM_FI_DEV_GPU_UTIL`` /
``MEM_COPY_UTIL``, MiB for framebuffer, mJ for energy; the ``DCGM_FI_PROF_*`` activities stay
ratios 0-1 and the PCIe ``PROF`` rates bytes per second, as dcgm-exporter has them. Labels:
``gpu`` (the index), ``UUID``, ``pci_bus_id``, ``device`` (``nvidia0``; ``amd0`` on AMD),
``modelName``, ``hostname`` (dcgm-exporter 4.x; 3.x wrote ``Hostname``) and
``DCGM_FI_DRIVER_VERSION`` where known.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MIB = 1024 * 1024

#: dcgm name -> (type, help, stored metric, scale). Only what both have.
DCGM: dict[str, tuple[str, str, str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", "gpu_util", 100.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %).", "mem_util", 100.0),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", "mem_used_bytes", 1 / _MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB).", "mem_reserved_bytes", 1 / _MIB),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", "power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ).", "energy_j", 1000.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors.", "ecc_corrected_errors", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors.", "ecc_uncorrected_errors", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered.", "last_xid", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", "temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C).", "mem_temp_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz", 1.0),
    # NVML's utilization.gpu / AMD's gfx_activity: the time the graphics engine ran a kernel,
    # which is what DCP's GR_ENGINE_ACTIVE measures (from the profiler counters instead)
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active.", "gpu_util", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "sm_active", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gauge", "The ratio of number of warps resident on an SM.", "sm_occupancy", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data.",
                                 "dram_bw_util", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
                                   "pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
                                   "pcie_rx_bytes_per_s", 1.0),
}
#: Computed from more than one stored metric.
FB_FREE = ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).")


def labels(device: Any, host: str, driver_version: str | None) -> dict[str, str]:
    """dcgm-exporter's labels for one GPU."""
    vendor = str(device.vendor or "gpu").lower()
    index = device.index if device.index is not None else 0
    out = {"gpu": str(index), "UUID": str(device.uuid or ""), "pci_bus_id": str(device.pci_bus_id or ""),
           "device": f"{vendor}{index}", "modelName": str(device.name or ""), "hostname": host}
    driver = (device.properties or {}).get("driver_version") or driver_version
    if driver:
        out["DCGM_FI_DRIVER_VERSION"] = str(driver)
    return out


def samples(device_labels: dict[str, str], values: dict[str, Any]) -> Iterator[tuple[str, str, str, float]]:
    """(name, type, help, value) of one GPU's newest values."""
    for name, (kind, help_text, metric, scale) in DCGM.items():
        v = values.get(metric)
        if v is not None:
            yield name, kind, help_text, float(v) * scale
    used, total = values.get("mem_used_bytes"), values.get("mem_total_bytes")
    if used is not None and total is not None:
        free = float(total) - float(used) - float(values.get("mem_reserved_bytes") or 0)
        yield FB_FREE[0], FB_FREE[1], FB_FREE[2], max(free, 0.0) / _MIB
