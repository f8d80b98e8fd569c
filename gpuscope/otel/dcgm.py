"""dcgm-exporter's names for the metrics gpuscope and dcgm-exporter both have
(``gpuscope monitor --prometheus-names dcgm``), for NVIDIA and AMD GPUs alike, so that
dashboards built for dcgm-exporter show a mixed fleet unchanged. Pure: device descriptions and
the newest values in, (name, type, help, value) out; docs/otel.md has the table.

The source is dcgm-exporter 4.5.3-4.8.2 (github.com/NVIDIA/dcgm-exporter, the newest release
when this was written): ``etc/default-counters.csv`` for the names, types and help texts,
``internal/pkg/rendermetrics/render_metrics.go`` for the labels and
``internal/pkg/collector/gpu_collector.go`` (``toString``) for how a value is printed.

Units converted to dcgm-exporter's: percent 0-100 for ``DCGM_FI_DEV_GPU_UTIL`` /
``MEM_COPY_UTIL``, MiB for framebuffer, mJ for energy; the ``DCGM_FI_PROF_*`` activities stay
ratios 0-1 and the PCIe / NVLink ``PROF`` rates bytes per second, as dcgm-exporter has them.

Values: dcgm-exporter prints a DCGM ``INT64`` field with ``%d`` and a ``DOUBLE`` one with
``%f``; DCGM's field table (``dcgm_fields.cpp``) makes the utilizations, framebuffer sizes,
temperatures, clocks, energy, ECC and XID counts, PCIe replays, remapped rows and the
remap-failure flag, PCIe and NVLink PROF bytes and NVLink bandwidth integers and power and the PROF activities doubles. So an integer field is an ``int`` here
(rounded; the framebuffer's MiB are whole MiB, as DCGM divides bytes by 2^20 in integers).

Labels as every released dcgm-exporter 4.x writes them: ``gpu`` (the index), ``UUID``,
``pci_bus_id``, ``device`` (``nvidia0``; ``amd0`` on AMD), ``modelName``, ``Hostname`` (only
an unreleased main writes ``hostname``) and ``DCGM_FI_DRIVER_VERSION`` where known.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

_MIB = 1024 * 1024

#: How a field's value is written: ``int`` (DCGM INT64, rounded), ``floor`` (INT64 of a
#: quantity DCGM truncates: framebuffer MiB) or ``double``.
INT, FLOOR, DOUBLE = "int", "floor", "double"

#: dcgm name -> (type, help, stored metric, scale, value kind). Only what both have.
DCGM: dict[str, tuple[str, str, str, float, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", "gpu_util", 100.0, INT),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %).", "mem_util", 100.0, INT),
    "DCGM_FI_DEV_ENC_UTIL": ("gauge", "Encoder utilization (in %).", "enc_util", 100.0, INT),
    "DCGM_FI_DEV_DEC_UTIL": ("gauge", "Decoder utilization (in %).", "dec_util", 100.0, INT),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", "mem_used_bytes", 1 / _MIB, FLOOR),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB).", "mem_reserved_bytes", 1 / _MIB, FLOOR),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", "power_w", 1.0, DOUBLE),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ).", "energy_j",
                                             1000.0, INT),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors.", "ecc_corrected_errors",
                                      1.0, INT),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors.", "ecc_uncorrected_errors",
                                      1.0, INT),
    # the driver's raw counts, as DCGM reads them from NVML (replays since the driver loaded,
    # remapped rows over the GPU's life)
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries.", "pcie_replays", 1.0, INT),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for uncorrectable errors",
                                                "remapped_rows_uncorrected", 1.0, INT),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for correctable errors",
                                              "remapped_rows_corrected", 1.0, INT),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed", "row_remap_failed", 1.0, INT),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered.", "last_xid", 1.0, INT),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", "temp_c", 1.0, INT),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C).", "mem_temp_c", 1.0, INT),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0, INT),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz", 1.0, INT),
    # NVML's utilization.gpu / AMD's gfx_activity: the time the graphics engine ran a kernel,
    # which is what DCP's GR_ENGINE_ACTIVE measures (from the profiler counters instead)
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active.", "gpu_util", 1.0, DOUBLE),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "sm_active", 1.0, DOUBLE),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gauge", "The ratio of number of warps resident on an SM.", "sm_occupancy", 1.0, DOUBLE),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active",
                                        1.0, DOUBLE),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data.",
                                 "dram_bw_util", 1.0, DOUBLE),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
                                   "pcie_tx_bytes_per_s", 1.0, INT),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
                                   "pcie_rx_bytes_per_s", 1.0, INT),
    # DCGM fields 1011/1012 (INT64, bytes/s, payload without protocol headers: what NVML's
    # NVLINK_THROUGHPUT_DATA counters and GPM's NVLink metrics measure), summed over links;
    # commented out in dcgm-exporter's default csv, enabled in its DCP list. On AMD the XGMI
    # rates take the same names, as the other fields do.
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("gauge", "The rate of data transmitted over NVLink not including protocol headers in bytes per second.",
                                     "xgmi_nvlink_tx_bytes_per_s", 1.0, INT),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("gauge", "The rate of data received over NVLink not including protocol headers in bytes per second.",
                                     "xgmi_nvlink_rx_bytes_per_s", 1.0, INT),
}
#: Computed from more than one stored metric (type, help).
FB_FREE = ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).")
#: DCGM field 449 (an alias of NVLINK_THROUGHPUT_TOTAL): DCGM turns NVML's cumulative NVLink
#: data KiB counters (tx + rx, every link) into a rate, KiB/s divided by 1000 (its field table
#: says MB/s); dcgm-exporter's csv declares it a counter though the value is that rate. Kept
#: as dcgm-exporter has it so that its dashboards read the same numbers.
NVLINK_BANDWIDTH_TOTAL = ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
                          "Total number of NVLink bandwidth counters for all lanes.")

#: dcgm-exporter 4.5.3-4.8.2's enabled default counters that gpuscope does not give, and why.
NOT_GIVEN: dict[str, str] = {
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU licensing: gpuscope does not read vGPU state",
}


def labels(device: Any, host: str, driver_version: str | None) -> dict[str, str]:
    """dcgm-exporter's labels for one GPU, in its order."""
    vendor = str(device.vendor or "gpu").lower()
    index = device.index if device.index is not None else 0
    out = {"gpu": str(index), "UUID": str(device.uuid or ""), "pci_bus_id": str(device.pci_bus_id or ""),
           "device": f"{vendor}{index}", "modelName": str(device.name or ""), "Hostname": host}
    driver = (device.properties or {}).get("driver_version") or driver_version
    if driver:
        out["DCGM_FI_DRIVER_VERSION"] = str(driver)
    return out


def value_of(v: float, kind: str) -> int | float:
    """A converted value as dcgm-exporter prints it: an ``int`` for an INT64 field, else a float."""
    if kind == DOUBLE:
        return float(v)
    return int(math.floor(v)) if kind == FLOOR else int(round(v))


def samples(device_labels: dict[str, str], values: dict[str, Any]) -> Iterator[tuple[str, str, str, int | float]]:
    """(name, type, help, value) of one GPU's newest values; a metric the GPU does not report
    has no sample (never a 0)."""
    for name, (kind, help_text, metric, scale, how) in DCGM.items():
        v = values.get(metric)
        if v is not None and math.isfinite(float(v)):
            yield name, kind, help_text, value_of(float(v) * scale, how)
    used, total = values.get("mem_used_bytes"), values.get("mem_total_bytes")
    if used is not None and total is not None:
        free = float(total) - float(used) - float(values.get("mem_reserved_bytes") or 0)
        yield FB_FREE[0], FB_FREE[1], FB_FREE[2], value_of(max(free, 0.0) / _MIB, FLOOR)
    tx, rx = values.get("xgmi_nvlink_tx_bytes_per_s"), values.get("xgmi_nvlink_rx_bytes_per_s")
    if tx is not None and rx is not None:
        yield (NVLINK_BANDWIDTH_TOTAL[0], NVLINK_BANDWIDTH_TOTAL[1], NVLINK_BANDWIDTH_TOTAL[2],
               value_of((float(tx) + float(rx)) / 1024 / 1000, FLOOR))

