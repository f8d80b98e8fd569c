"""The GPU spec database: peak FLOP/s per dtype, memory bandwidth, and how to recognise a GPU.

The numbers are data, not code: ``gpuscope/data/gpus.json`` ships with the package (one entry per GPU
model, a source for every number) and users add or override entries from a file of their own
(:func:`load_specs`). Standard library only, so that any command can use it cheaply.

Rooms: :mod:`.model` (the dtypes and the entry, measurement and identification types),
:mod:`.load` (the built-in data and user files, validated and merged), :mod:`.match` (a device's
reported name, PCI id and properties to an entry: :class:`SpecDB`).

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

from .load import ENV_VAR, SCHEMA, default_user_specs_path, identify_trace_device, link_bytes_per_s, load_specs
from .match import SpecDB
from .model import (
    DTYPES,
    HOST_LINKS,
    PCIE_GT_PER_S,
    GpuSpec,
    Identification,
    Measurement,
    OtherDevice,
    normalize_dtype,
    pcie_bytes_per_s,
)

__all__ = [
    "DTYPES",
    "ENV_VAR",
    "HOST_LINKS",
    "PCIE_GT_PER_S",
    "SCHEMA",
    "GpuSpec",
    "Identification",
    "Measurement",
    "OtherDevice",
    "SpecDB",
    "default_user_specs_path",
    "identify_trace_device",
    "link_bytes_per_s",
    "load_specs",
    "normalize_dtype",
    "pcie_bytes_per_s",
]
