"""AMD device-metrics-exporter's names for the metrics gpuscope and that exporter both have
(``gpuscope monitor --prometheus-names amd``), for AMD and NVIDIA GPUs alike, so that
dashboards and alerts built for AMD's exporter show a mixed fleet. Pure: device descriptions
and the newest values in, (name, help, extra labels, value) out; docs/otel.md has the table.

The source is device-metrics-exporter v1.5.1 (github.com/ROCm/device-metrics-exporter):
``pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go`` (``initPrometheusMetrics``: names, help texts,
every one a gauge; ``populateLabelsFromGPU`` and ``gpuMandatoryLables``: the labels and their
values; the ``clock_type`` label is the ``GPU_CLOCK_TYPE_*`` enum lower-cased) and
``docs/configuration/metricslist.md`` (units: percent 0-100, MB, W, Celsius, uJ, MHz).

Units converted to AMD's: ratios to percent 0-100, bytes to MB (AMD's MB are 2^20 bytes: the
exporter passes amdsmi's VRAM figures, which are MiB), joules to microjoules, clocks in MHz.
Every metric is a gauge, as in AMD's exporter (its energy is a gauge too). Values are written
as integers where the converted value is whole (AMD's exporter writes floats with Go's shortest
form, which prints ``900`` for 900.0), else as floats.

Labels (AMD's default, the exporter's mandatory set): ``gpu_id`` (the index), ``serial_number``
(where the vendor gives one, else empty), ``card_model``, ``gpu_partition_id`` (``0``),
``gpu_compute_partition_type`` / ``gpu_memory_partition_type`` (AMD's partition modes
lower-cased, ``spx`` / ``nps1``; empty on NVIDIA), ``deployment_mode`` (``baremetal``) and
``hostname``; also ``gpu_uuid`` (an opt-in label of AMD's), so two GPUs never share a series.
The Kubernetes and Slurm labels (``pod``, ``namespace``, ``container``, ``job_id``, ...) are
not written: gpuscope does not know them, and an absent label matches an empty one in PromQL.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from ..textsafe import visible

_MIB = 1024 * 1024

#: AMD name -> (help, stored metric, scale, extra labels). Every one a gauge.
AMD: dict[str, tuple[str, str, float, tuple[tuple[str, str], ...]]] = {
    "gpu_gfx_activity": ("Graphics engine usage in Percentage (0-100)", "gpu_util", 100.0, ()),
    "gpu_umc_activity": ("Memory engine usage in Percentage (0-100)", "mem_util", 100.0, ()),
    "gpu_used_vram": ("Used VRAM memory of the GPU (in MB)", "mem_used_bytes", 1 / _MIB, ()),
    "gpu_total_vram": ("Total VRAM memory of the GPU (in MB)", "mem_total_bytes", 1 / _MIB, ()),
    "gpu_package_power": ("Current socket power in Watts", "power_w", 1.0, ()),
    "gpu_junction_temperature": ("Current junction/hotspot temperature in Celsius", "temp_c", 1.0, ()),
    "gpu_memory_temperature": ("Current memory temperature in Celsius", "mem_temp_c", 1.0, ()),
    "gpu_energy_consumed": ("Accumulated energy consumed by the GPU in uJ", "energy_j", 1e6, ()),
    "gpu_ecc_correct_total": ("Total Correctable error count", "ecc_corrected_errors", 1.0, ()),
    "gpu_ecc_uncorrect_total": ("Total Uncorrectable error count", "ecc_uncorrected_errors", 1.0, ()),
    "gpu_prof_tensor_active_percent": ("MFMA Utilization Unit percent", "tensor_active", 100.0, ()),
    "gpu_prof_occupancy_percent": ("GPU Occupancy as Percentage of maximum", "sm_occupancy", 100.0, ()),
}
#: Written as whole numbers, as the vendor counts them: amdsmi's VRAM in whole MB, energy in whole uJ.
WHOLE = {"gpu_used_vram", "gpu_total_vram", "gpu_free_vram", "gpu_energy_consumed"}
#: ``gpu_clock`` is one family for every clock, told apart by ``clock_type``: stored metric ->
#: AMD's clock type (``GPU_CLOCK_TYPE_SYSTEM`` is the gfx / SM clock).
CLOCKS: dict[str, str] = {"sm_clock_mhz": "system", "mem_clock_mhz": "memory"}
CLOCK_HELP = "List of current GPU clock frequencies in MHz"
#: Computed from more than one stored metric: AMD's free VRAM is total minus used.
FREE_VRAM = ("gpu_free_vram", "Free VRAM memory of the GPU (in MB)")
NODES = ("gpu_nodes_total", "Number of GPUs in the node")

#: AMD exporter metrics with an input gpuscope has in another form, and why they are not given.
NOT_GIVEN: dict[str, str] = {
    "gpu_edge_temperature": "MI2xx's edge sensor: the collectors keep one GPU temperature (hotspot, else edge), "
                            "given as gpu_junction_temperature",
    "gpu_power_usage / gpu_average_package_power": "one power reading is kept (power_w), given as gpu_package_power",
    "gpu_clock{clock_type=\"data\"|\"video\"|\"soc\"|\"fabric\"}": "only the gfx and memory clocks are read",
    "pcie_bandwidth, pcie_*_count": "AMD's unit is Mb/s, the NAK counts are not read and the replay count "
                                     "(pcie_replays, amdsmi backend only) is not mapped to AMD's name; "
                                     "PCIe bytes are on the otel names (hw.gpu.io, gpuscope.gpu.pcie.io)",
    "gpu_xgmi_link_rx / gpu_xgmi_link_tx": "per link (link_index); the collectors keep the sum over links only",
    "gpu_vcn_activity, gpu_jpeg_activity": "media engines are not read",
    "gpu_ecc_* per block, gpu_violation_*, gpu_*_gtt, gpu_*_visible_vram": "not read by the collectors",
}

def labels(device: Any, host: str) -> dict[str, str]:
    """AMD's exporter's labels for one GPU (its mandatory set, module docstring)."""
    props = device.properties or {}
    index = device.index if device.index is not None else 0
    amd = str(device.vendor or "").lower() == "amd"
    return {
        "card_model": str(device.name or ""),
        "deployment_mode": "baremetal",
        "gpu_compute_partition_type": str(props.get("compute_partition") or ("spx" if amd else "")).lower(),
        "gpu_id": str(index),
        "gpu_memory_partition_type": str(props.get("memory_partition") or ("nps1" if amd else "")).lower(),
        "gpu_partition_id": str(props.get("partition_id", 0)),
        "gpu_uuid": str(device.uuid or device.pci_bus_id or ""),
        "hostname": host,
        "serial_number": str(props.get("serial_number") or props.get("serial") or ""),
    }


def number(v: float) -> int | float:
    """A value as the exporter prints it: whole numbers without a fraction."""
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def samples(values: dict[str, Any]) -> Iterator[tuple[str, str, tuple[tuple[str, str], ...], int | float]]:
    """(name, help, extra labels, value) of one GPU's newest values; a metric the GPU does
    not report has no sample (never a 0)."""
    for name, (help_text, metric, scale, extra) in AMD.items():
        v = values.get(metric)
        if v is not None and math.isfinite(float(v)):
            x = float(v) * scale
            yield name, help_text, extra, int(x) if name in WHOLE else number(x)
    used, total = values.get("mem_used_bytes"), values.get("mem_total_bytes")
    if used is not None and total is not None:
        yield FREE_VRAM[0], FREE_VRAM[1], (), int(max(float(total) - float(used), 0.0) / _MIB)
    for metric, clock_type in CLOCKS.items():
        v = values.get(metric)
        if v is not None and math.isfinite(float(v)):
            yield "gpu_clock", CLOCK_HELP, (("clock_type", clock_type),), number(float(v))


class AmdNames:
    """The ``/metrics`` body under AMD's names: the state's newest GPU values (a lost GPU has
    no samples) in Prometheus' text format 0.0.4."""

    def __init__(self, state: Any, host: str) -> None:
        self.state = state
        self.host = host

    def render(self) -> bytes:
        """The body (``MetricsEndpoint.render``)."""
        families: dict[str, tuple[str, list[str]]] = {}
        gpus = 0
        for key, (values, lost) in sorted(self.state.latest().items()):
            device = self.state.devices.get(key)
            if device is None or device.kind == "host":
                continue
            gpus += 1
            if lost:
                continue
            lab = labels(device, self.host)
            for name, help_text, extra, value in samples(values):
                families.setdefault(name, (help_text, []))[1].append(f"{name}{{{_labels(lab, extra)}}} {value!r}")
        if gpus:
            families[NODES[0]] = (NODES[1], [f'{NODES[0]}{{hostname="{_escape(self.host)}"}} {gpus}'])
        return write(families.items())


def write(families: Iterable[tuple[str, tuple[str, list[str]]]]) -> bytes:
    """Families of gauges (name, (help, sample lines)) in the text format."""
    out: list[str] = []
    for name, (help_text, lines) in families:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *lines]
    return ("\n".join(out) + "\n").encode() if out else b""


def _labels(lab: dict[str, str], extra: tuple[tuple[str, str], ...]) -> str:
    merged = dict(sorted([*lab.items(), *extra]))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in merged.items())


def _escape(value: str) -> str:
    """A label value: control characters (device names are other people's text) as visible
    escapes, then the format's own backslash, newline and quote."""
    return visible(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
