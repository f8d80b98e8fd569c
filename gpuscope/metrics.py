"""The one declarative table of telemetry metrics.

The ``samples`` table's metric columns, the OpenTelemetry instruments and the TUI columns are
all generated from :data:`METRICS`. A metric a device does not support is stored as NULL.
Names carry their unit; ratios are 0..1 floats, never percent.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One telemetry metric.

    ``sql_type`` is the DuckDB column type; ``otel_name`` the OpenTelemetry instrument name
    (semantic-convention name where one exists, else a ``gpuscope.*`` extension) and
    ``otel_unit`` the UCUM unit of the stored value; ``kind`` is ``gauge`` or ``counter``
    (monotonic). How ``gpuscope monitor`` exports each (attributes, rates integrated into byte
    counters) is :mod:`gpuscope.otel.names`.
    """

    name: str
    sql_type: str
    description: str
    otel_name: str
    otel_unit: str
    kind: str = "gauge"
    scope: str = "gpu"
    """``gpu``: filled on GPU rows (a GPU, a MIG instance, an AMD partition); ``host``: filled
    on the host's row (device kind ``host``). The other rows leave the column NULL."""


METRICS: tuple[Metric, ...] = (
    Metric("gpu_util", "DOUBLE", "Fraction of the last sample period in which a kernel ran (NVML utilization.gpu, AMD gfx_activity)", "hw.gpu.utilization", "1"),
    Metric("mem_util", "DOUBLE", "Fraction of the last sample period in which device memory was read or written (NVML utilization.memory, AMD umc_activity)", "gpuscope.gpu.memory.busy", "1"),
    Metric("mem_used_bytes", "BIGINT", "Device memory in use", "hw.gpu.memory.usage", "By"),
    Metric("mem_total_bytes", "BIGINT", "Device memory size", "hw.gpu.memory.limit", "By"),
    Metric("power_w", "DOUBLE", "Power draw as the vendor reports it (NVML: 1 s average on Ampere+ except GA100; AMD: socket power)", "hw.power", "W"),
    Metric("power_instant_w", "DOUBLE", "Instantaneous power draw where the vendor distinguishes it", "gpuscope.gpu.power.instant", "W"),
    Metric("energy_j", "DOUBLE", "Energy counter (monotonic, since driver load)", "hw.energy", "J", "counter"),
    Metric("temp_c", "DOUBLE", "GPU (edge/hotspot) temperature", "hw.temperature", "Cel"),
    Metric("mem_temp_c", "DOUBLE", "Memory (HBM) temperature", "hw.temperature", "Cel"),
    Metric("sm_clock_mhz", "DOUBLE", "SM / gfx clock", "gpuscope.gpu.clock.sm", "MHz"),
    Metric("mem_clock_mhz", "DOUBLE", "Memory clock", "gpuscope.gpu.clock.memory", "MHz"),
    Metric("pcie_tx_bytes_per_s", "DOUBLE", "PCIe transmit throughput", "hw.gpu.io", "By/s"),
    Metric("pcie_rx_bytes_per_s", "DOUBLE", "PCIe receive throughput", "hw.gpu.io", "By/s"),
    Metric("throttle_reasons", "BIGINT", "Vendor bit mask of active clock throttle / event reasons (0: not throttled)", "gpuscope.gpu.throttle_reasons", "1"),
    Metric("sm_active", "DOUBLE", "Fraction of time at least one warp was resident on an SM, averaged over SMs (NVML GPM)", "gpuscope.gpu.sm.active", "1"),
    Metric("sm_occupancy", "DOUBLE", "Resident warps over the maximum, averaged over SMs (NVML GPM)", "gpuscope.gpu.sm.occupancy", "1"),
    Metric("tensor_active", "DOUBLE", "Fraction of cycles the tensor / matrix cores were busy (NVML GPM, AMD where exposed)", "gpuscope.gpu.tensor.active", "1"),
    Metric("dram_bw_util", "DOUBLE", "Fraction of peak DRAM bandwidth used (NVML GPM)", "gpuscope.gpu.dram.bandwidth_utilization", "1"),
    Metric("xgmi_nvlink_tx_bytes_per_s", "DOUBLE", "GPU-GPU link (NVLink / XGMI) transmit throughput", "gpuscope.gpu.link.io", "By/s"),
    Metric("fan_speed", "DOUBLE", "Fan speed as a fraction of maximum", "hw.fan.speed_ratio", "1"),
    # Schema version 3 (telemetry collectors). New metrics go at the end, each with a
    # migration step in store.py that adds its column.
    Metric("xgmi_nvlink_rx_bytes_per_s", "DOUBLE", "GPU-GPU link (NVLink / XGMI) receive throughput", "gpuscope.gpu.link.io", "By/s"),
    Metric("pcie_bytes_per_s", "DOUBLE", "PCIe throughput, both directions (AMD reports only this; NVIDIA: tx + rx)", "gpuscope.gpu.pcie.io", "By/s"),
    Metric("power_limit_w", "DOUBLE", "Enforced board / socket power limit", "gpuscope.gpu.power.limit", "W"),
    Metric("proc_gpu_mem_bytes", "BIGINT", "Device memory used by the watched processes (the wrapped command's process tree)", "gpuscope.gpu.process.memory.usage", "By"),
    Metric("proc_gpu_util", "DOUBLE", "SM / gfx utilisation attributed to the watched processes (NVML per-process SM util; AMD gfx engine time)", "gpuscope.gpu.process.utilization", "1"),
    Metric("host_cpu_util", "DOUBLE", "Fraction of all host CPU time that was busy since the previous tick", "system.cpu.utilization", "1", scope="host"),
    Metric("host_mem_used_bytes", "BIGINT", "Host memory in use (total minus available)", "system.memory.usage", "By", scope="host"),
    Metric("host_mem_total_bytes", "BIGINT", "Host memory size", "system.memory.limit", "By", scope="host"),
    Metric("proc_cpu_cores", "DOUBLE", "CPU seconds per second used by the watched process tree (1.0 = one core busy)", "gpuscope.process.cpu.cores", "{cpu}", scope="host"),
    Metric("proc_rss_bytes", "BIGINT", "Resident memory of the watched process tree, summed over its processes", "process.memory.usage", "By", scope="host"),
    Metric("proc_count", "INTEGER", "Processes in the watched process tree", "gpuscope.process.count", "{process}", scope="host"),
    # Schema version 4.
    Metric("mem_reserved_bytes", "BIGINT", "Device memory the driver reserves for itself (NVML v2 memory query; not part of mem_used_bytes)", "gpuscope.gpu.memory.reserved", "By"),
    # Schema version 5.
    Metric("ecc_corrected_errors", "BIGINT", "Corrected (single-bit) memory ECC errors since the driver loaded (NVML volatile SBE total; AMD correctable count)", "hw.errors", "{error}", "counter"),
    Metric("xid_errors", "BIGINT", "Critical XID errors the driver reported since the sampler opened the GPU (NVML events)", "hw.errors", "{error}", "counter"),
    Metric("last_xid", "INTEGER", "The code of the last critical XID error since the sampler opened the GPU (0: none)", "gpuscope.gpu.xid.last", "1"),
    Metric("ecc_uncorrected_errors", "BIGINT", "Uncorrected (double-bit) memory ECC errors since the driver loaded (NVML volatile DBE total; AMD uncorrectable count)", "hw.errors", "{error}", "counter"),
    # Schema version 8: dcgm-exporter's default counters that NVML gives.
    Metric("enc_util", "DOUBLE", "Fraction of the encoder's sampling period in which the video encoder was busy (NVML encoder utilization; AMD: none, VCN encodes and decodes in one engine)", "hw.gpu.utilization", "1"),
    Metric("dec_util", "DOUBLE", "Fraction of the decoder's sampling period in which the video decoder was busy (NVML decoder utilization; AMD: none, VCN encodes and decodes in one engine)", "hw.gpu.utilization", "1"),
    Metric("pcie_replays", "BIGINT", "PCIe replays (link-level retransmissions) since the driver loaded (NVML PCIe replay counter; AMD pcie_replay_count)", "gpuscope.gpu.pcie.replays", "{replay}", "counter"),
    Metric("remapped_rows_corrected", "BIGINT", "Memory rows remapped for correctable errors over the GPU's life (NVML remapped rows; kept in the InfoROM)", "gpuscope.gpu.memory.remapped_rows", "{row}"),
    Metric("remapped_rows_uncorrected", "BIGINT", "Memory rows remapped for uncorrectable errors over the GPU's life (NVML remapped rows; kept in the InfoROM)", "gpuscope.gpu.memory.remapped_rows", "{row}"),
    Metric("row_remap_pending", "INTEGER", "1 while a row remapping waits for the next GPU reset, else 0 (NVML remapped rows)", "gpuscope.gpu.memory.row_remap.pending", "1"),
    Metric("row_remap_failed", "INTEGER", "1 once a row remapping has failed (the GPU needs service), else 0 (NVML remapped rows)", "gpuscope.gpu.memory.row_remap.failed", "1"),
    # Schema version 10: the host's CPU time by mode (OpenTelemetry's cpu.mode), each the
    # fraction of all logical CPUs' time in that mode since the previous tick (the modes sum to
    # 1; collectors/host.py cpu_mode_fractions). NULL where the platform has no such mode.
    Metric("host_cpu_user_util", "DOUBLE", "Fraction of all host CPU time spent in user mode since the previous tick (cpu.mode=user; Linux counts guests' time here)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_system_util", "DOUBLE", "Fraction of all host CPU time spent in the kernel since the previous tick, interrupts apart (cpu.mode=system)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_nice_util", "DOUBLE", "Fraction of all host CPU time spent in user mode at low priority (niced) since the previous tick (cpu.mode=nice)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_idle_util", "DOUBLE", "Fraction of all host CPU time idle since the previous tick, I/O wait apart (cpu.mode=idle)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_iowait_util", "DOUBLE", "Fraction of all host CPU time idle with I/O outstanding since the previous tick (cpu.mode=iowait; Linux)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_interrupt_util", "DOUBLE", "Fraction of all host CPU time servicing interrupts since the previous tick: hard and soft IRQs (Linux irq + softirq; Windows interrupt + DPC) (cpu.mode=interrupt)", "system.cpu.utilization", "1", scope="host"),
    Metric("host_cpu_steal_util", "DOUBLE", "Fraction of all host CPU time stolen by the hypervisor for other guests since the previous tick (cpu.mode=steal; Linux)", "system.cpu.utilization", "1", scope="host"),
)

METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
GPU_METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS if m.scope == "gpu")
HOST_METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS if m.scope == "host")
METRICS_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


#: How long a reading stands for its metric in the views of "now" (the TUI's live screen, the
#: gauges ``monitor`` exports) on ticks that did not read it. Not every metric is read every
#: tick: the NVML collector reads slow counters (energy: 3-4 ms per read on an H100) once a
#: second, GPM over windows of at least 100 ms (at 10 Hz, 189 of 301 ticks carried GPM values
#: on the H100 of 2026-11-26), processes once a second. The store keeps such ticks NULL (no
#: value is invented); a live view that showed them as missing would flicker, and a Prometheus
#: series that came and went would read as a broken exporter. 2.5 s covers a once-a-second read
#: that runs late.
HOLD_S = 2.5


class HeldReadings:
    """The newest reading of each metric of one device, each kept for ``hold_s`` after it was
    made. ``update()`` takes a tick's values and returns them with the held ones filled in;
    a lost device forgets everything."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_ns = int(hold_s * 1e9)
        self._readings: dict[str, tuple[object, int]] = {}

    def update(self, ts_ns: int, values: dict, lost: bool = False) -> dict:
        if lost:
            self._readings.clear()
            return dict(values)
        for k, v in values.items():
            if v is not None:
                self._readings[k] = (v, ts_ns)
        cutoff = ts_ns - self.hold_ns
        out = dict(values)
        for k, (v, t) in list(self._readings.items()):
            if t < cutoff:
                del self._readings[k]
            elif out.get(k) is None:
                out[k] = v
        return out
