"""The GPU spec database: peak FLOP/s per dtype, memory bandwidth, and how to recognise a GPU.

The numbers are data, not code: ``gpuscope/data/gpus.json`` ships with the package (one entry per GPU
model, a source for every number) and users add or override entries from a file of their own
(:func:`load_specs`). Standard library only, so that any command can use it cheaply.

Units live in the names: ``memory_bytes`` (decimal GB as marketed, times 1e9),
``mem_bw_bytes_per_s``, ``peak_flops_per_s`` (dense FLOP/s, no structured sparsity; int8 in OP/s).

Typical use::

    db = load_specs()
    spec = db.find("mi300x")                      # key or any listed name; InputError if unknown
    spec.ridge_flop_per_byte("bf16")              # 246.7
    ident = db.identify_trace_device(props)       # a Kineto deviceProperties entry
    ident.spec, ident.exact, ident.note

Format, sources, identification rules and user overrides: ``docs/specs.md``.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = [
    "DTYPES",
    "ENV_VAR",
    "GpuSpec",
    "Identification",
    "Measurement",
    "SpecDB",
    "default_user_specs_path",
    "identify_trace_device",
    "load_specs",
    "normalize_dtype",
]

#: The dtypes of ``peak_flops_per_s``. ``fp64`` is the matrix (tensor-core) rate where there is one, else
#: the vector rate; ``fp64_vector`` is always the vector rate; ``fp32`` is the vector (non-tensor) rate;
#: ``tf32`` is the dense tensor rate; ``int8`` is in OP/s.
DTYPES: tuple[str, ...] = ("fp64", "fp64_vector", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")

#: Environment variable naming a user spec file (several may be joined with ``os.pathsep``).
ENV_VAR = "GPUSCOPE_SPECS"

SCHEMA = "gpuscope.gpus/1"

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

    @property
    def visible_as_device(self) -> bool:
        """False for packages that software shows as several devices (MI250X: two GCDs)."""
        return self.visible_as is None

    def bandwidth_measurements(self) -> tuple[Measurement, ...]:
        """Measured memory-bandwidth figures that read memory (STREAM copy/triad/dot, read kernels).

        Store-only figures are left out: a decode step reads the weights, it does not write them.
        """
        return tuple(m for m in self.measured
                     if m.kind == "bandwidth" and m.fraction_of_spec is not None and "store" not in m.metric)

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
            "last_level_cache_kind": self.last_level_cache_kind, "tdp_w": self.tdp_w,
            "names": list(self.names), "aliases": list(self.aliases), "pci_ids": list(self.pci_ids),
            "pci_ids_inexact": list(self.pci_ids_inexact), "pci_id_notes": dict(self.pci_id_notes),
            "pci_subsystem_ids": list(self.pci_subsystem_ids),
            "devices_per_package": self.devices_per_package, "visible_as": self.visible_as,
            "part_of": self.part_of, "unified_memory": self.unified_memory,
            "host_link": self.host_link, "pcie_generation": self.pcie_generation, "pcie_lanes": self.pcie_lanes,
            "host_link_bytes_per_s": self.host_link_bytes_per_s,
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


# --------------------------------------------------------------------------------------------
# parsing and validation
# --------------------------------------------------------------------------------------------

_NUMBER_FIELDS = ("memory_bytes", "mem_bw_bytes_per_s", "compute_units", "boost_clock_mhz", "tensor_clock_mhz",
                  "l2_cache_mb", "last_level_cache_mb", "tdp_w", "devices_per_package", "pcie_generation",
                  "pcie_lanes", "host_link_bytes_per_s")
_STRING_FIELDS = ("key", "name", "vendor", "architecture", "arch_target", "compute_capability", "form_factor",
                  "memory_type", "compute_unit_kind", "last_level_cache_kind", "visible_as", "part_of",
                  "sparse_figures_as_published", "reference_name", "host_link")
_LIST_FIELDS = ("names", "aliases", "pci_ids", "pci_ids_inexact", "pci_subsystem_ids", "notes", "conflicts")
_DICT_FIELDS = ("peak_flops_per_s", "peak_flops_per_s_other", "sources", "derived", "pci_id_notes")
_OTHER_FIELDS = ("measured", "unified_memory")
# Unit-suffixed spellings a person may prefer in a user file; converted on load.
_CONVENIENCE = {"memory_gb": ("memory_bytes", 1e9), "mem_bw_tbps": ("mem_bw_bytes_per_s", 1e12),
                "mem_bw_gbps": ("mem_bw_bytes_per_s", 1e9), "peak_tflops": ("peak_flops_per_s", 1e12),
                "host_link_gbps": ("host_link_bytes_per_s", 1e9)}
_KNOWN_FIELDS = set(_NUMBER_FIELDS + _STRING_FIELDS + _LIST_FIELDS + _DICT_FIELDS + _OTHER_FIELDS) | set(_CONVENIENCE)
_INT_FIELDS = ("memory_bytes", "compute_units", "devices_per_package", "pcie_generation", "pcie_lanes")
# Fields that state a fact and so need a source; a user file that sets one without saying where it comes
# from gets "user:PATH" as its source.
_SOURCED_FIELDS = set(_NUMBER_FIELDS) | {"peak_flops_per_s", "peak_flops_per_s_other", "pci_ids", "measured"}
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
_PCI_RE = re.compile(r"^(?:0x)?([0-9a-f]{4}):(?:0x)?([0-9a-f]{4})$")
_VENDOR_IDS = {"10de": "nvidia", "1002": "amd"}


class _Bad(Exception):
    pass


def _check_number(value: Any, what: str, *, allow_zero: bool = False) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad(f"{what} must be a number or null, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise _Bad(f"{what} must be positive, not {value!r}")
    return value


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


def _apply_convenience(raw: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(raw)
    for alias, (target, scale) in _CONVENIENCE.items():
        if alias not in out:
            continue
        if target in raw:
            raise _Bad(f"{where}: give {target} or {alias}, not both")
        value = out.pop(alias)
        if target == "peak_flops_per_s":
            if not isinstance(value, dict):
                raise _Bad(f"{where}: {alias} must be an object of dtype -> TFLOP/s")
            out[target] = {k: (None if v is None else _scaled(v, scale, f"{where}: {alias}.{k}"))
                           for k, v in value.items()}
        else:
            out[target] = _scaled(value, scale, f"{where}: {alias}")
    return out


def _scaled(value: Any, scale: float, what: str) -> float | None:
    v = _check_number(value, what)
    return None if v is None else float(round(v * scale))


def _validate_entry(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check the fields of one (possibly partial) entry and normalise them; raises _Bad."""
    unknown = sorted(set(raw) - _KNOWN_FIELDS)
    if unknown:
        raise _Bad(f"{where}: unknown field(s) {', '.join(unknown)} (see docs/specs.md for the format)")
    raw = _apply_convenience(raw, where)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in _NUMBER_FIELDS:
            v = _check_number(v, f"{where}: {k}")
            if v is not None and k in _INT_FIELDS:
                if float(v) != int(v):
                    raise _Bad(f"{where}: {k} must be a whole number, not {v!r}")
                v = int(v)
        elif k in _STRING_FIELDS:
            if v is not None and not isinstance(v, str):
                raise _Bad(f"{where}: {k} must be a string or null")
        elif k in _LIST_FIELDS:
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise _Bad(f"{where}: {k} must be a list of strings")
            if k in ("pci_ids", "pci_ids_inexact"):
                ids = []
                for x in v:
                    p = _norm_pci(x)
                    if p is None:
                        raise _Bad(f"{where}: {k}: {x!r} is not a PCI id like '10de:2330'")
                    ids.append(p)
                v = ids
        elif k == "peak_flops_per_s":
            if not isinstance(v, dict):
                raise _Bad(f"{where}: peak_flops_per_s must be an object of dtype -> FLOP/s")
            bad = [d for d in v if d not in DTYPES]
            if bad:
                raise _Bad(f"{where}: peak_flops_per_s: unknown dtype(s) {', '.join(bad)} (known: {', '.join(DTYPES)})")
            v = {d: _check_number(x, f"{where}: peak_flops_per_s.{d}") for d, x in v.items()}
        elif k == "peak_flops_per_s_other":
            if not isinstance(v, dict):
                raise _Bad(f"{where}: {k} must be an object")
            v = {d: _check_number(x, f"{where}: {k}.{d}") for d, x in v.items()}
        elif k == "sources":
            if not isinstance(v, dict) or not all(isinstance(s, (list, str)) for s in v.values()):
                raise _Bad(f"{where}: sources must map a field to a list of source ids")
            v = {f: ([s] if isinstance(s, str) else list(s)) for f, s in v.items()}
        elif k in ("derived", "pci_id_notes"):
            if not isinstance(v, dict) or not all(isinstance(s, str) for s in v.values()):
                raise _Bad(f"{where}: {k} must map strings to strings")
            if k == "pci_id_notes":
                v = {(_norm_pci(p) or p): s for p, s in v.items()}
        elif k == "measured":
            if not isinstance(v, list) or not all(isinstance(m, dict) for m in v):
                raise _Bad(f"{where}: measured must be a list of objects")
            for m in v:
                if not isinstance(m.get("metric"), str) or not isinstance(m.get("unit"), str):
                    raise _Bad(f"{where}: each measured figure needs 'metric' and 'unit'")
                _check_number(m.get("value"), f"{where}: measured {m.get('metric')} value")
                if m.get("value") is None:
                    raise _Bad(f"{where}: measured {m.get('metric')} has no value")
                _check_number(m.get("fraction_of_spec"), f"{where}: measured {m.get('metric')} fraction_of_spec")
        elif k == "unified_memory":
            if not isinstance(v, bool):
                raise _Bad(f"{where}: unified_memory must be true or false")
        if k == "host_link" and v is not None and v not in HOST_LINKS:
            raise _Bad(f"{where}: host_link must be one of {', '.join(HOST_LINKS)}, not {v!r}")
        if k == "pcie_generation" and v is not None and v not in PCIE_GT_PER_S:
            raise _Bad(f"{where}: pcie_generation must be one of {', '.join(map(str, PCIE_GT_PER_S))}, not {v!r}")
        out[k] = v
    if "vendor" in out and out["vendor"] is not None:
        out["vendor"] = out["vendor"].lower()
    if "key" in out:
        out["key"] = str(out["key"]).strip().lower()
        if not _KEY_RE.match(out["key"]):
            raise _Bad(f"{where}: key {out['key']!r} must be lowercase letters, digits, '.', '_', '+' or '-'")
    return out


def _spec_from_dict(d: dict[str, Any], origin: str) -> GpuSpec:
    peaks = {dt: d.get("peak_flops_per_s", {}).get(dt) for dt in DTYPES}
    d = _with_pcie_bandwidth(d)
    measured = tuple(Measurement(metric=m["metric"], value=m["value"], unit=m["unit"],
                                 fraction_of_spec=m.get("fraction_of_spec"), method=m.get("method"),
                                 source=m.get("source")) for m in d.get("measured", []))
    return GpuSpec(
        key=d["key"], name=d["name"], vendor=d.get("vendor") or "unknown", architecture=d.get("architecture"),
        arch_target=(d.get("arch_target") or None), memory_bytes=d.get("memory_bytes"),
        mem_bw_bytes_per_s=d.get("mem_bw_bytes_per_s"), peak_flops_per_s=peaks,
        compute_units=d.get("compute_units"), compute_unit_kind=d.get("compute_unit_kind"),
        names=tuple(d.get("names", ())), pci_ids=tuple(d.get("pci_ids", ())),
        sources={k: list(v) for k, v in d.get("sources", {}).items()},
        compute_capability=d.get("compute_capability"), form_factor=d.get("form_factor"),
        memory_type=d.get("memory_type"), boost_clock_mhz=d.get("boost_clock_mhz"),
        tensor_clock_mhz=d.get("tensor_clock_mhz"), l2_cache_mb=d.get("l2_cache_mb"),
        last_level_cache_mb=d.get("last_level_cache_mb"), last_level_cache_kind=d.get("last_level_cache_kind"),
        tdp_w=d.get("tdp_w"), aliases=tuple(d.get("aliases", ())),
        pci_ids_inexact=tuple(d.get("pci_ids_inexact", ())), pci_id_notes=dict(d.get("pci_id_notes", {})),
        pci_subsystem_ids=tuple(d.get("pci_subsystem_ids", ())),
        peak_flops_per_s_other=dict(d.get("peak_flops_per_s_other", {})),
        devices_per_package=int(d.get("devices_per_package") or 1), visible_as=d.get("visible_as"),
        part_of=d.get("part_of"), unified_memory=bool(d.get("unified_memory", False)),
        host_link=d.get("host_link"), pcie_generation=d.get("pcie_generation"), pcie_lanes=d.get("pcie_lanes"),
        host_link_bytes_per_s=d.get("host_link_bytes_per_s"),
        derived=dict(d.get("derived", {})), measured=measured,
        sparse_figures_as_published=d.get("sparse_figures_as_published"),
        notes=tuple(d.get("notes", ())), conflicts=tuple(d.get("conflicts", ())),
        reference_name=d.get("reference_name"), origin=origin,
    )


def _with_pcie_bandwidth(d: dict[str, Any]) -> dict[str, Any]:
    """An entry that gives its PCIe generation and width but no host-link bandwidth (a user
    entry, say) gets the bandwidth derived from them, with the arithmetic in ``derived``."""
    gen, lanes = d.get("pcie_generation"), d.get("pcie_lanes")
    if d.get("host_link_bytes_per_s") is not None or not gen or not lanes or d.get("host_link") not in (None, "pcie"):
        return d
    d = dict(d)
    d["host_link"] = "pcie"
    d["host_link_bytes_per_s"] = float(round(pcie_bytes_per_s(gen, lanes)))
    rate, payload = PCIE_GT_PER_S[gen]
    d["derived"] = {**d.get("derived", {}), "host_link_bytes_per_s":
                    f"PCIe {gen}.0 x{lanes}, one direction: {rate:g} GT/s x {lanes} lanes x {payload:.4g} payload / 8 bits"}
    sources = dict(d.get("sources", {}))
    sources.setdefault("host_link_bytes_per_s", ["GS"])
    d["sources"] = sources
    return d


def _parse_doc(doc: Any, where: str) -> tuple[list[dict[str, Any]], dict[str, str], list[OtherDevice]]:
    """Entries (validated dicts), the sources table and the other-devices list of a spec file."""
    if isinstance(doc, list):
        doc = {"gpus": doc}
    if not isinstance(doc, dict):
        raise _Bad("the file must hold a JSON object with a 'gpus' list (or a list of entries)")
    extra = sorted(set(doc) - {"schema", "about", "dtypes", "sources", "gpus", "other_devices"})
    if extra:
        raise _Bad(f"unknown top-level field(s) {', '.join(extra)} (expected 'gpus', 'sources')")
    gpus = doc.get("gpus", [])
    if isinstance(gpus, dict):
        items = []
        for k, v in gpus.items():
            if not isinstance(v, dict):
                raise _Bad(f"gpus.{k} must be an object")
            items.append({"key": k, **v})
        gpus = items
    if not isinstance(gpus, list):
        raise _Bad("'gpus' must be a list of entries")
    entries = []
    for n, raw in enumerate(gpus):
        if not isinstance(raw, dict):
            raise _Bad(f"gpus[{n}] must be an object")
        label = f"gpus[{n}]" + (f" ({raw['key']})" if isinstance(raw.get("key"), str) else "")
        if not isinstance(raw.get("key"), str) or not raw["key"].strip():
            raise _Bad(f"{label}: every entry needs a 'key'")
        entries.append(_validate_entry(raw, label))
    sources = doc.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise _Bad("'sources' must map source ids to citation strings")
    others = []
    for o in doc.get("other_devices", []) or []:
        if not isinstance(o, dict) or not isinstance(o.get("what"), str):
            raise _Bad("each of 'other_devices' needs at least 'what'")
        others.append(OtherDevice(names=tuple(o.get("names", ())),
                                  pci_ids=tuple(p for p in (_norm_pci(x) for x in o.get("pci_ids", ())) if p),
                                  what=o["what"], nearest=o.get("nearest"), sources=tuple(o.get("sources", ()))))
    return entries, dict(sources), others


@functools.lru_cache(maxsize=1)
def _builtin_doc() -> tuple[tuple[dict[str, Any], ...], dict[str, str], tuple[OtherDevice, ...]]:
    text = resources.files("gpuscope").joinpath("data/gpus.json").read_text(encoding="utf-8")
    entries, sources, others = _parse_doc(json.loads(text), "gpuscope/data/gpus.json")
    return tuple(entries), sources, tuple(others)


@functools.lru_cache(maxsize=1)
def _builtin_db() -> SpecDB:
    entries, sources, others = _builtin_doc()
    return SpecDB([_spec_from_dict(e, "builtin") for e in entries], sources, others)


def default_user_specs_path() -> Path:
    """``$XDG_CONFIG_HOME/gpuscope/gpus.json`` (``~/.config/gpuscope/gpus.json`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gpuscope" / "gpus.json"


def _user_files(path: str | Path | None) -> list[Path]:
    if path is not None:
        return [Path(path).expanduser()]
    env = os.environ.get(ENV_VAR)
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    default = default_user_specs_path()
    return [default] if default.is_file() else []


def load_specs(path: str | Path | None = None) -> SpecDB:
    """The spec database: the built-in entries, then user entries that add or override them.

    User entries come from ``path``, else the file(s) named by ``$GPUSCOPE_SPECS`` (several joined with
    ``os.pathsep``), else ``$XDG_CONFIG_HOME/gpuscope/gpus.json`` (``~/.config/...``) when it exists.
    Entries merge by key: a user entry with an existing key may give only some fields (nested mappings
    such as ``peak_flops_per_s`` merge too); a new key needs at least ``name``, ``mem_bw_bytes_per_s`` and
    one ``peak_flops_per_s`` value. A missing or broken user file raises :class:`InputError` naming it.
    The built-in data is parsed once per process.
    """
    files = _user_files(path)
    if not files:
        return _builtin_db()
    entries, sources, others = _builtin_doc()
    merged: dict[str, dict[str, Any]] = {e["key"]: json.loads(json.dumps(e)) for e in entries}
    origins = {k: "builtin" for k in merged}
    all_sources = dict(sources)
    all_others = list(others)
    for f in files:
        label = str(f)
        try:
            text = f.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(label, "no such spec file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(label, f"cannot read the spec file: {exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(label, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except RecursionError:
            raise InputError(label, "not valid JSON: nested too deeply") from None
        try:
            user_entries, user_sources, user_others = _parse_doc(doc, label)
        except _Bad as exc:
            raise InputError(label, str(exc)) from None
        all_sources.update(user_sources)
        all_others.extend(user_others)
        tag = f"user:{label}"
        for ue in user_entries:
            key = ue["key"]
            srcs = dict(ue.get("sources", {}))
            for fld in ue:
                if fld not in _SOURCED_FIELDS or fld in srcs:
                    continue
                if fld == "peak_flops_per_s":
                    for dt in ue[fld]:
                        srcs.setdefault(f"peak_flops_per_s.{dt}", [tag])
                else:
                    srcs.setdefault(fld, [tag])
            if key in merged:
                base = merged[key]
                if ({"pcie_generation", "pcie_lanes"} & set(ue)) and "host_link_bytes_per_s" not in ue:
                    # a new generation or width (a card in a narrower slot): derive the bandwidth again
                    base.pop("host_link_bytes_per_s", None)
                    base.get("derived", {}).pop("host_link_bytes_per_s", None)
                    base.get("sources", {}).pop("host_link_bytes_per_s", None)
                for fld, v in ue.items():
                    if fld == "sources":
                        continue
                    if fld in _DICT_FIELDS and isinstance(base.get(fld), dict):
                        base[fld] = {**base[fld], **v}
                    else:
                        base[fld] = v
                base["sources"] = {**base.get("sources", {}), **srcs}
                origins[key] = origins[key] + f"+{tag}" if not origins[key].endswith(tag) else origins[key]
            else:
                missing = [m for m in ("name", "mem_bw_bytes_per_s") if ue.get(m) is None]
                if not any(v for v in (ue.get("peak_flops_per_s") or {}).values()):
                    missing.append("peak_flops_per_s")
                if missing:
                    raise InputError(label, f"new GPU '{key}' needs {', '.join(missing)} "
                                            f"(or override an existing key; see docs/specs.md)")
                ue["sources"] = srcs
                merged[key] = ue
                origins[key] = tag
    specs = []
    for key, d in merged.items():
        try:
            specs.append(_spec_from_dict(d, origins[key]))
        except (KeyError, TypeError, ValueError) as exc:  # pragma: no cover - validated above
            raise InputError(str(files[-1]), f"entry '{key}': {exc}") from None
    return SpecDB(specs, all_sources, all_others, files=tuple(files))


# --------------------------------------------------------------------------------------------
# matching
# --------------------------------------------------------------------------------------------

_BRAND_WORDS = {"nvidia", "amd", "ati", "geforce", "radeon", "instinct", "tesla", "quadro", "graphics", "device",
                "gpu", "corporation", "inc"}


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", str(text).lower())


def _model_tokens(name: str) -> list[str]:
    """Tokens of a device name that carry a model number (``a100``, ``mi300x``, ``4090``)."""
    return [t for t in _tokens(name) if t not in _BRAND_WORDS and any(c.isdigit() for c in t)]


def _is_generic_name(name: str | None) -> bool:
    """True for names that say nothing about the model: empty, "AMD Radeon Graphics", "NVIDIA Graphics Device"."""
    return not name or not _model_tokens(name)


def _token_seq_match(hay: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``hay`` as consecutive tokens; the last one may stop before a letter suffix
    (``mi300`` matches ``mi300x`` and ``mi300a``; ``a10`` does not match ``a100``)."""
    n = len(needle)
    if n == 0 or n > len(hay):
        return False
    for i in range(len(hay) - n + 1):
        ok = True
        for j, q in enumerate(needle):
            t = hay[i + j]
            if t == q:
                continue
            if j == n - 1 and t.startswith(q) and t[len(q):].isalpha() and q[-1:].isdigit():
                continue
            ok = False
            break
        if ok:
            return True
    return False


def _vendor_word(text: str | None) -> str | None:
    if not text:
        return None
    t = str(text).strip().lower()
    if t in ("nvidia", "10de", "0x10de") or t.startswith("nvidia"):
        return "nvidia"
    if t in ("amd", "1002", "0x1002", "ati") or t.startswith(("amd", "advanced micro devices")):
        return "amd"
    return t


def _vendor_from_name(name: str | None) -> str | None:
    toks = set(_tokens(name or ""))
    if toks & {"nvidia", "geforce", "tesla", "quadro"}:
        return "nvidia"
    if toks & {"amd", "radeon", "instinct", "ati"}:
        return "amd"
    return None


def _norm_arch_target(text: str | None) -> str | None:
    if not text:
        return None
    t = str(text).strip().lower().split(":")[0]
    m = re.match(r"^gfx([0-9a-f]+)$", t)
    if m:
        return f"gfx{m.group(1)}"
    m = re.match(r"^sm_?(\d+)[a-z]?$", t)
    if m:
        return f"sm_{m.group(1)}"
    return t


def _norm_cc(text: Any) -> str | None:
    if text is None or text == "":
        return None
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?\s*$", str(text))
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2) or 0)}"


@dataclass(frozen=True)
class _Evidence:
    vendor: str | None
    arch_target: str | None
    compute_capability: str | None
    compute_units: int | None
    memory_bytes: int | None

    def labels(self) -> list[str]:
        out = []
        if self.arch_target:
            out.append("gfx target" if self.arch_target.startswith("gfx") else "arch target")
        elif self.compute_capability:
            out.append("gfx version" if self.vendor == "amd" else "compute capability")
        if self.compute_units is not None:
            out.append("CU count" if self.vendor == "amd" else ("SM count" if self.vendor == "nvidia" else "SM/CU count"))
        if self.memory_bytes is not None:
            out.append("memory")
        return out

    def describe(self) -> str:
        parts = []
        if self.vendor:
            parts.append(self.vendor)
        if self.arch_target:
            parts.append(self.arch_target)
        if self.compute_capability:
            what = "gfx version" if self.vendor == "amd" else "compute capability"
            parts.append(f"{what} {self.compute_capability}")
        if self.compute_units is not None:
            parts.append(f"{self.compute_units} {'CUs' if self.vendor == 'amd' else 'SMs' if self.vendor == 'nvidia' else 'SMs/CUs'}")
        if self.memory_bytes is not None:
            parts.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        return ", ".join(parts) if parts else "no properties"


def _memory_matches(spec: GpuSpec, reported: int) -> bool | None:
    if not spec.memory_bytes or spec.unified_memory:
        return None
    ratio = reported / (spec.memory_bytes / 1e9 * 2**30)
    return _MEMORY_MATCH_RANGE[0] <= ratio <= _MEMORY_MATCH_RANGE[1]


def _mismatches(spec: GpuSpec, ev: _Evidence) -> list[str]:
    out = []
    if ev.vendor and spec.vendor and ev.vendor != spec.vendor:
        out.append(f"vendor {ev.vendor} (entry: {spec.vendor})")
    if ev.arch_target and spec.arch_target and ev.arch_target != _norm_arch_target(spec.arch_target):
        out.append(f"arch target {ev.arch_target} (entry: {spec.arch_target})")
    if ev.compute_capability and spec.compute_capability and ev.compute_capability != _norm_cc(spec.compute_capability):
        out.append(f"compute capability {ev.compute_capability} (entry: {spec.compute_capability})")
    if ev.compute_units is not None and spec.compute_units is not None and ev.compute_units != spec.compute_units:
        out.append(f"{ev.compute_units} {spec.compute_unit_kind or 'SM/CU'}s (entry: {spec.compute_units})")
    if ev.memory_bytes is not None and _memory_matches(spec, ev.memory_bytes) is False:
        out.append(f"{ev.memory_bytes / 2**30:.1f} GiB of memory (entry: {spec.memory_bytes / 1e9:g} GB)")
    return out


def _alike(specs: list[GpuSpec]) -> bool:
    """True when the entries' bandwidth and fp16/bf16 peaks agree within 1% (MI210 and an MI250 GCD)."""
    def close(values: list[float | None]) -> bool:
        if any(v is None for v in values):
            return len(set(values)) == 1
        nums = [float(v) for v in values if v is not None]
        return max(nums) <= min(nums) * 1.01
    return (close([s.mem_bw_bytes_per_s for s in specs])
            and all(close([s.peak_flops_per_s.get(d) for s in specs]) for d in ("fp16", "bf16")))


_ADD_HINT = "add it with a file in $GPUSCOPE_SPECS (see docs/specs.md)"


class SpecDB:
    """The loaded spec database: built-in entries plus user entries. Use :func:`load_specs`."""

    def __init__(self, specs: Iterable[GpuSpec], sources: Mapping[str, str] | None = None,
                 other_devices: Iterable[OtherDevice] = (), files: tuple[Path, ...] = ()) -> None:
        self._specs: tuple[GpuSpec, ...] = tuple(specs)
        self._by_key = {s.key: s for s in self._specs}
        self.sources: dict[str, str] = dict(sources or {})
        self.other_devices: tuple[OtherDevice, ...] = tuple(other_devices)
        self.files = files
        # normalised strings a person may type (key, aliases, display name, reported names) -> entries
        self._typed: dict[str, list[GpuSpec]] = {}
        # normalised reported names (NVML / amd-smi / torch) -> entries
        self._reported: dict[str, list[GpuSpec]] = {}
        for s in self._specs:
            for text in {s.key, s.name, *s.aliases, *s.names}:
                lst = self._typed.setdefault(_norm(text), [])
                if s not in lst:
                    lst.append(s)
            for text in s.names:
                lst = self._reported.setdefault(_norm(text), [])
                if s not in lst:
                    lst.append(s)

    # -- lookup ---------------------------------------------------------------------------

    def get(self, key: str) -> GpuSpec | None:
        """The entry with this key (case-insensitive), or None."""
        return self._by_key.get(str(key).strip().lower())

    def all(self) -> tuple[GpuSpec, ...]:
        """Every entry, in the data's order."""
        return self._specs

    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self._specs)

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def citation(self, source_id: str) -> str | None:
        """The citation text of a source id (``"S4"``, ``"user:PATH"``), or None."""
        if source_id.startswith("user:") and source_id not in self.sources:
            return f"the user spec file {source_id[5:]}"
        return self.sources.get(source_id)

    def _other_by_name(self, text: str) -> OtherDevice | None:
        n = _norm(text)
        for o in self.other_devices:
            if any(_norm(x) == n for x in o.names):
                return o
        return None

    def _other_by_pci(self, pci: str) -> OtherDevice | None:
        for o in self.other_devices:
            if pci in o.pci_ids:
                return o
        return None

    def matches(self, text: str) -> tuple[list[GpuSpec], list[OtherDevice], bool]:
        """(entries, other devices, exact) that ``text`` names; exact when a key or name matched whole."""
        n = _norm(text)
        if not n:
            return [], [], False
        exact = self._typed.get(n, [])
        if exact:
            return list(exact), [], True
        other = self._other_by_name(text)
        if other:
            return [], [other], True
        q = _tokens(text)
        found: list[GpuSpec] = []
        for s in self._specs:
            if any(_token_seq_match(_tokens(t), q) for t in (s.key, s.name, *s.aliases, *s.names)):
                found.append(s)
        others = [o for o in self.other_devices if any(_token_seq_match(_tokens(t), q) for t in o.names)]
        return found, others, False

    def find(self, text: str) -> GpuSpec:
        """The entry ``text`` names: a key, alias or listed name, case-insensitively and ignoring spaces,
        dashes and underscores (``mi300x``, ``h100-sxm``, ``NVIDIA H100 80GB HBM3``, ``AMD_Instinct_MI300X``).
        A unique partial name (``H100 SXM5``) is accepted too.

        Raises :class:`InputError` for an unknown name, a device the database knows it does not describe,
        or an ambiguous name (``h100``, ``a100``), listing the candidates.
        """
        label = str(text).strip() or repr(text)
        found, others, exact = self.matches(text)
        if len(found) == 1 and not others:
            return found[0]
        if found or others:
            if not found and len(others) == 1 and exact:
                o = others[0]
                nearest = f"; the nearest entry is '{o.nearest}', whose numbers differ" if o.nearest else ""
                raise InputError(label, f"this is the {o.what}, which the spec database does not describe"
                                        f"{nearest}; {_ADD_HINT}")
            # keys a user can pass; a device the database does not describe is no candidate
            cands = [f"{s.key} ({s.name})" for s in found] or [f"{o.names[0]} (not in the database)" for o in others]
            raise InputError(label, f"ambiguous GPU name: it matches {', '.join(cands)}; pass one of the keys")
        raise InputError(label, f"unknown GPU (known: {', '.join(self.keys())}; {_ADD_HINT})")

    # -- identification -------------------------------------------------------------------

    def identify(self, *, name: str | None = None, pci_id: str | None = None, arch_target: str | None = None,
                 compute_units: int | None = None, memory_bytes: int | None = None, vendor: str | None = None,
                 compute_capability: str | None = None, warp_size: int | None = None) -> Identification:
        """Identify a device from what software reports about it.

        Rules, in order: a MIG instance name is never a whole GPU; an exact reported name (NVML, amd-smi,
        torch) or PCI id identifies the entry (``exact=True``), with the CU count deciding between entries
        that share a name (MI250X vs MI250 GCDs) and a note when other properties disagree; names and ids
        the database knows to be other products (H100 94GB, L40, RX 7900 XT ...) give ``spec=None``.
        Otherwise (AMD traces often say "AMD Radeon Graphics" or nothing) the entry is inferred from at
        least two of arch target / compute capability, CU count and memory size, restricted to the model
        family when the name has a model number: one fit gives ``exact=False`` and a note; several or none
        give ``spec=None`` with the candidates. Packages that software sees as several devices (MI250X)
        are never the answer: their per-GCD entries are.
        """
        name = (name or "").strip()
        v = _vendor_word(vendor) or _vendor_from_name(name)
        pci_norm = _norm_pci(pci_id, v) if pci_id else None
        if v is None and pci_norm:
            v = _VENDOR_IDS.get(pci_norm[:4])
        at = _norm_arch_target(arch_target)
        cc = _norm_cc(compute_capability)
        if at and re.match(r"^\d+(\.\d+)?$", at):  # "9.0" given as a target
            cc, at = cc or _norm_cc(at), None
        if v is None and at:
            v = "amd" if at.startswith("gfx") else "nvidia" if at.startswith("sm_") else None
        if v is None and warp_size == 64:
            v = "amd"
        cu = int(compute_units) if isinstance(compute_units, (int, float)) and compute_units > 0 else None
        mem = int(memory_bytes) if isinstance(memory_bytes, (int, float)) and memory_bytes > 0 else None
        ev = _Evidence(v, at, cc, cu, mem)
        devices = [s for s in self._specs if s.visible_as is None]
        notes: list[str] = []

        mig = re.search(r"\s+MIG\s+(\S+)", name)
        if mig:
            base = self.identify(name=name[:mig.start()], pci_id=pci_id, vendor=v)
            keys = (base.spec.key,) if base.spec else base.candidates
            whole = f"'{keys[0]}'" if len(keys) == 1 else "a GPU"
            return Identification(None, "name (MIG instance)", False, keys,
                                  f"'{name}' is a MIG instance ({mig.group(1)}) of {whole}: it has a fraction of "
                                  "that GPU's SMs, memory and bandwidth, so the entry's numbers do not apply")

        if name and not _is_generic_name(name):
            hits = [s for s in self._reported.get(_norm(name), []) if s.visible_as is None]
            if hits:
                return self._decide(hits, ev, "name", f"the name '{name}'", pci_norm)
            other = self._other_by_name(name)
            if other:
                return self._other(other, f"'{name}'", "name")

        if pci_norm:
            hits = [s for s in devices if pci_norm in s.pci_ids]
            if hits:
                inexact = [s for s in hits if pci_norm in s.pci_ids_inexact]
                if inexact:
                    why = "; ".join(s.pci_id_notes.get(pci_norm, "not unique to this entry") for s in inexact)
                    return Identification(None, "pci id", False, tuple(s.key for s in hits),
                                          f"PCI id {pci_norm} alone does not decide: {why}")
                return self._decide(hits, ev, "pci id", f"PCI id {pci_norm}", None)
            other = self._other_by_pci(pci_norm)
            if other:
                return self._other(other, f"PCI id {pci_norm}", "pci id")
            notes.append(f"PCI id {pci_norm} is not in the database")
        elif pci_id:
            notes.append(f"'{pci_id}' is not a PCI id like 10de:2330")

        family = None
        if name and not _is_generic_name(name):
            family = _model_tokens(name)[0]
            notes.append(f"the name '{name}' is not listed")
        elif name:
            notes.append(f"the name '{name}' is generic")
        else:
            notes.append("no name")
        return self._infer(devices, ev, family, notes)

    def identify_trace_device(self, props: Mapping[str, Any]) -> Identification:
        """Identify a Kineto ``deviceProperties`` entry (``name``, ``totalGlobalMem``, ``computeMajor``,
        ``computeMinor``, ``numSms``, ``warpSize``, maybe ``gcnArchName``). On ROCm ``numSms`` is the CU
        count and ``computeMajor.computeMinor`` is the gfx version (gfx90a: 9.0, gfx942: 9.4)."""
        if not isinstance(props, Mapping):
            return Identification(None, "none", False, (), "no device properties")
        name = props.get("name")
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        cc = f"{major}.{minor if minor is not None else 0}" if isinstance(major, int) else None
        gcn = props.get("gcnArchName")
        vendor = _vendor_from_name(name if isinstance(name, str) else None)
        if vendor is None and gcn:
            vendor = "amd"
        warp = props.get("warpSize") if isinstance(props.get("warpSize"), int) else None
        num = props.get("numSms")
        mem = props.get("totalGlobalMem")
        return self.identify(name=name if isinstance(name, str) else None,
                             arch_target=gcn if isinstance(gcn, str) else None,
                             compute_capability=cc, compute_units=num if isinstance(num, int) else None,
                             memory_bytes=mem if isinstance(mem, int) else None, vendor=vendor, warp_size=warp)

    def _other(self, other: OtherDevice, what: str, via: str) -> Identification:
        cands = (other.nearest,) if other.nearest else ()
        nearest = f"; the nearest entry is '{other.nearest}', whose numbers differ" if other.nearest else ""
        return Identification(None, via, False, cands,
                              f"{what} is the {other.what}, which the spec database does not describe{nearest}; "
                              f"{_ADD_HINT}")

    def _decide(self, hits: list[GpuSpec], ev: _Evidence, via: str, what: str, pci_norm: str | None) -> Identification:
        if len(hits) > 1:
            fit = [s for s in hits if not _mismatches(s, ev)]
            if ev.compute_units is not None and len(fit) == 1:
                return self._confirm(fit[0], ev, f"{via} + CU count", what, pci_norm, exact=True)
            keys = tuple(s.key for s in (fit or hits))
            return Identification(None, via, False, keys,
                                  f"{what} is listed by {', '.join(s.key for s in hits)}; "
                                  + ("the CU count tells them apart and none was given" if ev.compute_units is None
                                     else f"the properties ({ev.describe()}) do not single one out"))
        return self._confirm(hits[0], ev, via, what, pci_norm, exact=True)

    def _confirm(self, spec: GpuSpec, ev: _Evidence, via: str, what: str, pci_norm: str | None,
                 exact: bool) -> Identification:
        problems = _mismatches(spec, ev)
        if pci_norm and pci_norm not in spec.pci_ids and spec.pci_ids:
            problems.append(f"PCI id {pci_norm} (entry: {', '.join(spec.pci_ids)})")
        if problems:
            return Identification(spec, via, False, (spec.key,),
                                  f"{what} says '{spec.key}', but the device reports {'; '.join(problems)}: "
                                  "perhaps a variant the database does not describe")
        return Identification(spec, via, exact, (spec.key,), None)

    def _infer(self, devices: list[GpuSpec], ev: _Evidence, family: str | None, notes: list[str]) -> Identification:
        labels = ev.labels()
        fit = [s for s in devices if not _mismatches(s, ev)]
        if family:
            fam = [s for s in fit if any(family in _tokens(t) or _token_seq_match(_tokens(t), [family])
                                         for t in (s.key, s.name, *s.aliases, *s.names))]
            if not fam and fit:
                notes.append(f"its properties resemble {', '.join(s.key for s in fit)}, but its model number "
                             f"'{family}' does not")
            fit = fam
        prefix = "; ".join(notes)
        if len(labels) < 2:
            cands = tuple(s.key for s in fit) if labels else ()
            return Identification(None, "none", False, cands,
                                  f"{prefix}; too little to go on ({ev.describe()}): identifying by properties "
                                  "needs two of arch target / compute capability, SM or CU count and memory size")
        via = " + ".join(labels)
        if len(fit) == 1:
            s = fit[0]
            unverified = [x for x, known in (("CU count", s.compute_units is not None),
                                             ("memory", bool(s.memory_bytes) and not s.unified_memory)) if not known]
            extra = f" (the entry does not give its {' or '.join(unverified)})" if unverified else ""
            return Identification(s, via, False, (s.key,),
                                  f"{prefix}; inferred from {ev.describe()}{extra}: the only entry that fits, "
                                  "but not confirmed by a name or PCI id")
        if len(fit) > 1:
            same_txt = (" (for a roofline they are alike: memory bandwidth and 16-bit peaks within 1%)"
                        if _alike(fit) else "")
            return Identification(None, via, False, tuple(s.key for s in fit),
                                  f"{prefix}; {ev.describe()} fits {', '.join(s.key for s in fit)}{same_txt}; "
                                  "name the GPU explicitly to choose")
        hint = ""
        if ev.compute_units:
            for s in devices:
                if (s.compute_units and s.compute_units != ev.compute_units and s.compute_units % ev.compute_units == 0
                        and (not ev.vendor or s.vendor == ev.vendor)
                        and (not ev.compute_capability or _norm_cc(s.compute_capability) == ev.compute_capability)):
                    hint = (f"; {ev.compute_units} is 1/{s.compute_units // ev.compute_units} of {s.key}'s "
                            f"{s.compute_units}: a compute partition (CPX/DPX) of it?")
                    break
        return Identification(None, via, False, (),
                              f"{prefix}; no entry fits {ev.describe()}{hint}; {_ADD_HINT}")


def identify_trace_device(props: Mapping[str, Any], db: SpecDB | None = None) -> Identification:
    """Identify a Kineto ``deviceProperties`` entry against ``db`` (default: :func:`load_specs`)."""
    return (db or load_specs()).identify_trace_device(props)
