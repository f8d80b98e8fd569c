"""The spec data model: dtypes, an entry (:class:`GpuSpec`), a measured figure, an identification.

Units live in the names: ``memory_bytes`` (decimal GB as marketed, times 1e9),
``mem_bw_bytes_per_s``, ``l2_bw_bytes_per_s``, ``last_level_cache_bw_bytes_per_s``,
``peak_flops_per_s`` (dense FLOP/s, no structured sparsity; int8 in OP/s).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: The dtypes of ``peak_flops_per_s``. ``fp64`` is the matrix (tensor-core) rate where there is one, else
#: the vector rate; ``fp64_vector`` is always the vector rate; ``fp32`` is the vector (non-tensor) rate;
#: ``tf32`` is the dense tensor rate; ``int8`` is in OP/s.
DTYPES: tuple[str, ...] = ("fp64", "fp64_vector", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")

# A reported memory size matches an entry when it is this fraction of the marketed size read as GiB:
# drivers report a little less than the physical size (A100 80GB: 79.2 GiB, B200 180GB: 178.4 GiB, L4 with
# ECC: ~22.5 of 24), and "GB" on datasheets is usually GiB of physical memory.
_MEMORY_MATCH_RANGE = (0.90, 1.01)

_DTYPE_ALIASES = {
    "fp64": "fp64", "float64": "fp64", "double": "fp64", "f64": "fp64",
    "fp64_vector": "fp64_vector",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16", "c10::half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "c10::bfloat16": "bf16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
    "int8": "int8", "i8": "int8", "char": "int8", "signed char": "int8",
    "fp4": "fp4", "float4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "float4_e2m1fn_x2": "fp4",
}


#: What a host<->device copy crosses (``host_link`` of an entry).
HOST_LINKS: tuple[str, ...] = ("pcie", "nvlink-c2c", "unified-memory")

#: PCI Express per lane and direction: transfer rate (GT/s) and the share of it that is payload
#: (8b/10b for 1.0-2.0, 128b/130b for 3.0-5.0, 242-byte payloads in 256-byte FLITs from 6.0);
#: PCI-SIG's figures as Wikipedia's "PCI Express link performance" table gives them.
PCIE_GT_PER_S: dict[int, tuple[float, float]] = {
    1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
    6: (64.0, 242 / 256), 7: (128.0, 242 / 256),
}


#: The GPU-to-GPU (scale-up) link of an entry (``scaleup_link``): NVLink by generation, AMD
#: Infinity Fabric (xGMI), or ``pcie``: no GPU-to-GPU link, peers talk over PCIe at the host
#: link's rate (peer-to-peer through a PCIe switch or the root complex).
SCALEUP_LINKS: tuple[str, ...] = ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "infinity-fabric", "pcie")

#: How the GPUs of one scale-up domain are wired (``scaleup_topology``): ``switch`` (NVSwitch:
#: every GPU reaches every other at its whole link bandwidth), ``mesh`` (a fully connected mesh
#: of point-to-point links, one link to each peer: a group of ``n`` can use ``n - 1`` of a GPU's
#: links), ``pcie`` (peer-to-peer over the host PCIe link).
SCALEUP_TOPOLOGIES: tuple[str, ...] = ("switch", "mesh", "pcie")


def pcie_bytes_per_s(generation: int, lanes: int) -> float:
    """Payload bandwidth of a PCIe link in one direction, bytes/s: GT/s per lane x lanes x the
    encoding's payload share / 8 bits (PCIe 4.0 x16: 16e9 x 16 x 128/130 / 8 = 31.5 GB/s)."""
    rate, payload = PCIE_GT_PER_S[generation]
    return rate * 1e9 * lanes * payload / 8


def normalize_dtype(dtype: str) -> str | None:
    """The :data:`DTYPES` name of ``dtype`` (``"bfloat16"``, ``"c10::Half"``, ``"float8_e4m3fn"`` ...), or None."""
    d = str(dtype).strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(d)


# --------------------------------------------------------------------------------------------
# entries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """A measured ("achievable") figure kept beside the spec ones, e.g. STREAM bandwidth or MAMF."""

    metric: str
    value: float
    unit: str
    fraction_of_spec: float | None = None
    method: str | None = None
    source: str | None = None

    @property
    def kind(self) -> str:
        """``"bandwidth"`` for bytes/s figures, ``"flops"`` for FLOP/s figures."""
        return "bandwidth" if self.unit.lower().endswith("b/s") else "flops"

    @property
    def is_cache(self) -> bool:
        """True for an L2 or last-level-cache figure (``l2_read``, ``llc_read``), not device memory."""
        return self.metric.lower().startswith(("l2_", "llc_"))

    @property
    def value_si(self) -> float:
        """The value in bytes/s or FLOP/s."""
        scale = {"tb/s": 1e12, "gb/s": 1e9, "b/s": 1.0, "tflops": 1e12, "tops": 1e12, "gflops": 1e9,
                 "pflops": 1e15, "flop/s": 1.0}
        return self.value * scale.get(self.unit.lower(), 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "unit": self.unit,
                "fraction_of_spec": self.fraction_of_spec, "method": self.method, "source": self.source}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model of the spec database. Treat the mappings as read-only."""

    key: str
    name: str
    vendor: str
    architecture: str | None
    arch_target: str | None
    memory_bytes: int | None
    mem_bw_bytes_per_s: float | None
    peak_flops_per_s: dict[str, float | None]
    compute_units: int | None
    compute_unit_kind: str | None
    names: tuple[str, ...]
    pci_ids: tuple[str, ...]
    sources: dict[str, list[str]]
    compute_capability: str | None = None
    form_factor: str | None = None
    memory_type: str | None = None
    boost_clock_mhz: float | None = None
    tensor_clock_mhz: float | None = None
    l2_cache_mb: float | None = None
    last_level_cache_mb: float | None = None
    last_level_cache_kind: str | None = None
    #: L2 read bandwidth, bytes/s, one direction as vendors quote it (all L2 slices together); None where
    #: neither the vendor nor a sound measurement gives it. ``derived``/``sources`` say which it is.
    l2_bw_bytes_per_s: float | None = None
    #: Peak bandwidth of the memory-side last-level cache (AMD Infinity Cache / MALL), bytes/s.
    last_level_cache_bw_bytes_per_s: float | None = None
    tdp_w: float | None = None
    aliases: tuple[str, ...] = ()
    pci_ids_inexact: tuple[str, ...] = ()
    pci_id_notes: dict[str, str] = field(default_factory=dict)
    pci_subsystem_ids: tuple[str, ...] = ()
    peak_flops_per_s_other: dict[str, float] = field(default_factory=dict)
    devices_per_package: int = 1
    visible_as: str | None = None
    part_of: str | None = None
    unified_memory: bool = False
    #: The link host<->device copies cross: ``pcie``, ``nvlink-c2c``, or ``unified-memory``
    #: (an APU whose host memory is its device memory: copies stay in HBM).
    host_link: str | None = None
    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    #: Bandwidth of the host link in ONE direction (a host-to-device copy uses one direction).
    host_link_bytes_per_s: float | None = None
    #: The GPU-to-GPU link (:data:`SCALEUP_LINKS`), its count per GPU, the bandwidth of ONE link in
    #: ONE direction, all links together in one direction, the topology
    #: (:data:`SCALEUP_TOPOLOGIES`) and how many GPUs share one scale-up domain (8 on an HGX /
    #: OAM baseboard, 72 in a GB200 NVL72 rack). None where the entry does not say.
    scaleup_link: str | None = None
    scaleup_links: int | None = None
    scaleup_link_bytes_per_s: float | None = None
    scaleup_bytes_per_s: float | None = None
    scaleup_topology: str | None = None
    scaleup_domain_gpus: int | None = None
    derived: dict[str, str] = field(default_factory=dict)
    measured: tuple[Measurement, ...] = ()
    sparse_figures_as_published: str | None = None
    notes: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    reference_name: str | None = None
    origin: str = "builtin"

    def __hash__(self) -> int:
        return hash((self.key, self.origin))

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype`` (any spelling :func:`normalize_dtype` knows); None where unsupported.

        Raises ValueError for a dtype name that is not one of :data:`DTYPES` or an alias of one.
        """
        d = normalize_dtype(dtype)
        if d is None:
            raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        return self.peak_flops_per_s.get(d)

    def ridge_flop_per_byte(self, dtype: str) -> float | None:
        """Ridge point of the roofline for ``dtype``: peak FLOP/s / memory bytes/s (None where unknown)."""
        peak = self.peak_flops(dtype)
        if peak is None or not self.mem_bw_bytes_per_s:
            return None
        return peak / self.mem_bw_bytes_per_s

    def host_copy_bytes_per_s(self) -> float | None:
        """The bandwidth one direction of a host<->device copy can reach: the host link's, or
        device memory's where host memory is device memory (``unified-memory``); None if unknown."""
        if self.host_link == "unified-memory":
            return self.mem_bw_bytes_per_s
        return self.host_link_bytes_per_s

    def host_link_label(self) -> str | None:
        """``PCIe Gen4 x16``, ``NVLink-C2C``, ``unified memory``; None where the entry does not say."""
        if self.host_link == "pcie" or (self.host_link is None and self.pcie_generation):
            lanes = f" x{self.pcie_lanes}" if self.pcie_lanes else ""
            return f"PCIe Gen{self.pcie_generation}{lanes}" if self.pcie_generation else "PCIe"
        if self.host_link == "nvlink-c2c":
            return "NVLink-C2C"
        if self.host_link == "unified-memory":
            return "unified memory"
        return None

    def scaleup_label(self) -> str | None:
        """``NVLink4 x18``, ``Infinity Fabric x7``, ``PCIe Gen5 x16 peer-to-peer``; None where unknown."""
        if self.scaleup_link == "pcie":
            host = self.host_link_label()
            return f"{host} peer-to-peer" if host else "PCIe peer-to-peer"
        if not self.scaleup_link:
            return None
        name = ("Infinity Fabric" if self.scaleup_link == "infinity-fabric"
                else self.scaleup_link.replace("nvlink", "NVLink"))
        return f"{name} x{self.scaleup_links}" if self.scaleup_links else name

    def peer_bytes_per_s(self, group_size: int) -> float | None:
        """The bandwidth, bytes/s in ONE direction, one GPU of a ``group_size``-GPU group on one
        scale-up domain can send to (and receive from) its peers: all of its links behind a
        switch, ``min(links, group_size - 1)`` links in a full mesh (one link per peer), the host
        PCIe link for ``pcie``. None when unknown, or when the group does not fit one domain (its
        traffic then crosses a network link the entry does not describe)."""
        if group_size < 2 or not self.scaleup_link:
            return None
        if self.scaleup_topology == "pcie" or self.scaleup_link == "pcie":
            return self.host_link_bytes_per_s
        if self.scaleup_domain_gpus and group_size > self.scaleup_domain_gpus:
            return None
        if self.scaleup_topology == "mesh":
            if not self.scaleup_links or not self.scaleup_link_bytes_per_s:
                return None
            return min(self.scaleup_links, group_size - 1) * self.scaleup_link_bytes_per_s
        return self.scaleup_bytes_per_s

    @property
    def visible_as_device(self) -> bool:
        """False for packages that software shows as several devices (MI250X: two GCDs)."""
        return self.visible_as is None

    def bandwidth_measurements(self) -> tuple[Measurement, ...]:
        """Measured memory-bandwidth figures that read memory (STREAM copy/triad/dot, read kernels).

        Store-only figures are left out: a decode step reads the weights, it does not write them.
        Cache figures (:meth:`cache_bandwidth_measurements`) are left out too: their fraction is of
        the cache's peak, not of device memory's.
        """
        return tuple(m for m in self.measured
                     if m.kind == "bandwidth" and m.fraction_of_spec is not None and "store" not in m.metric
                     and not m.is_cache)

    def cache_bandwidth_measurements(self) -> tuple[Measurement, ...]:
        """Measured L2 / last-level-cache bandwidth figures (metrics ``l2_*``, ``llc_*``)."""
        return tuple(m for m in self.measured if m.kind == "bandwidth" and m.is_cache)

    def cache_roofs(self) -> dict[str, float]:
        """The cache bandwidth roofs this entry gives, bytes/s: ``{"l2": ..., "llc": ...}`` (absent where unknown)."""
        out: dict[str, float] = {}
        if self.l2_bw_bytes_per_s:
            out["l2"] = self.l2_bw_bytes_per_s
        if self.last_level_cache_bw_bytes_per_s:
            out["llc"] = self.last_level_cache_bw_bytes_per_s
        return out

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict, with ``ridge_flop_per_byte`` per dtype."""
        return {
            "key": self.key, "name": self.name, "vendor": self.vendor, "architecture": self.architecture,
            "arch_target": self.arch_target, "compute_capability": self.compute_capability,
            "form_factor": self.form_factor, "memory_bytes": self.memory_bytes, "memory_type": self.memory_type,
            "mem_bw_bytes_per_s": self.mem_bw_bytes_per_s,
            "peak_flops_per_s": {d: self.peak_flops_per_s.get(d) for d in DTYPES},
            "ridge_flop_per_byte": {d: _round(self.ridge_flop_per_byte(d), 2) for d in DTYPES},
            "peak_flops_per_s_other": dict(self.peak_flops_per_s_other),
            "compute_units": self.compute_units, "compute_unit_kind": self.compute_unit_kind,
            "boost_clock_mhz": self.boost_clock_mhz, "tensor_clock_mhz": self.tensor_clock_mhz,
            "l2_cache_mb": self.l2_cache_mb, "last_level_cache_mb": self.last_level_cache_mb,
            "last_level_cache_kind": self.last_level_cache_kind,
            "l2_bw_bytes_per_s": self.l2_bw_bytes_per_s,
            "last_level_cache_bw_bytes_per_s": self.last_level_cache_bw_bytes_per_s, "tdp_w": self.tdp_w,
            "names": list(self.names), "aliases": list(self.aliases), "pci_ids": list(self.pci_ids),
            "pci_ids_inexact": list(self.pci_ids_inexact), "pci_id_notes": dict(self.pci_id_notes),
            "pci_subsystem_ids": list(self.pci_subsystem_ids),
            "devices_per_package": self.devices_per_package, "visible_as": self.visible_as,
            "part_of": self.part_of, "unified_memory": self.unified_memory,
            "host_link": self.host_link, "pcie_generation": self.pcie_generation, "pcie_lanes": self.pcie_lanes,
            "host_link_bytes_per_s": self.host_link_bytes_per_s,
            "scaleup_link": self.scaleup_link, "scaleup_links": self.scaleup_links,
            "scaleup_link_bytes_per_s": self.scaleup_link_bytes_per_s,
            "scaleup_bytes_per_s": self.scaleup_bytes_per_s, "scaleup_topology": self.scaleup_topology,
            "scaleup_domain_gpus": self.scaleup_domain_gpus,
            "sources": {k: list(v) for k, v in self.sources.items()}, "derived": dict(self.derived),
            "measured": [m.to_json() for m in self.measured],
            "sparse_figures_as_published": self.sparse_figures_as_published,
            "notes": list(self.notes), "conflicts": list(self.conflicts), "origin": self.origin,
        }


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


@dataclass(frozen=True)
class OtherDevice:
    """A device the database knows by name or PCI id but does not describe (H100 94GB, L40, RX 7900 XT ...)."""

    names: tuple[str, ...]
    pci_ids: tuple[str, ...]
    what: str
    nearest: str | None
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identification:
    """What :meth:`SpecDB.identify` concluded about a device.

    ``spec`` is None when the evidence is missing, ambiguous or points outside the database; ``exact`` is
    True only when a reported name or PCI id (with the CU count where a name is shared) pins the entry
    down; an inference from properties is ``exact=False`` with a ``note`` saying what it rests on.
    ``candidates`` lists the keys that fit (one when identified).
    """

    spec: GpuSpec | None
    via: str
    exact: bool
    candidates: tuple[str, ...] = ()
    note: str | None = None

    @property
    def key(self) -> str | None:
        return self.spec.key if self.spec else None

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.key, "via": self.via, "exact": self.exact, "candidates": list(self.candidates),
                "note": self.note}


# PCI ids: vendor:device, lower case
_PCI_RE = re.compile(r"^(?:0x)?([0-9a-f]{4}):(?:0x)?([0-9a-f]{4})$")
_VENDOR_IDS = {"10de": "nvidia", "1002": "amd"}


def _norm_pci(text: str, vendor: str | None = None) -> str | None:
    """``"10de:2330"`` from ``10DE:2330``, ``0x10de:0x2330``, or ``0x2330`` with a vendor; None if not an id."""
    t = str(text).strip().lower()
    m = _PCI_RE.match(t)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    m = re.match(r"^(?:0x)?([0-9a-f]{4})$", t)
    if m and vendor in ("nvidia", "amd"):
        vid = "10de" if vendor == "nvidia" else "1002"
        return f"{vid}:{m.group(1)}"
    return None
