"""One device identity: which device this is, and which spec entry describes it.

Every part of gpuscope that names a device uses :class:`DeviceIdentity`: the collectors' device
(``collectors.base.DeviceInfo`` extends it with what a sampler needs), the device a calibration
ran on (``calibrate.results.CalibrationDevice``), and the sinks that write ``devices`` rows from
the collectors' devices. :func:`match_spec` (and :func:`match_trace_device` for a trace's
``deviceProperties``) is the one place that asks the spec database (``gpuscope.specs``) which
entry a device is; collectors, calibrate, ingest and the analyzers go through it.

Standard library only, and the spec database is imported inside :func:`match_spec`, so that the
collectors (and the child of ``gpuscope run``) can import this module cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceIdentity", "match_spec", "match_trace_device"]


@dataclass(kw_only=True)
class DeviceIdentity:
    """Which device: its vendor, its index as the vendor library counts, its name and UUID as the
    vendor reports them, its PCI bus id, and the spec entry that describes it.

    ``spec_key`` is None when the spec database does not know the device (or was not asked);
    ``spec_exact`` says whether a reported name or PCI id pinned the entry down (True) or it was
    inferred from properties (False), as :class:`gpuscope.specs.Identification` has it.
    """

    vendor: str | None = None  # "nvidia", "amd", "host" ...
    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    spec_key: str | None = None
    spec_exact: bool | None = None

    def set_spec(self, identification: Any) -> bool:
        """Take the spec entry of ``identification`` (a :class:`gpuscope.specs.Identification`, or
        None); True when it named one. A device the database does not know keeps its fields."""
        spec = getattr(identification, "spec", None) if identification is not None else None
        key = getattr(spec, "key", None)
        if not key:
            return False
        self.spec_key = str(key)
        exact = getattr(identification, "exact", None)
        self.spec_exact = bool(exact) if exact is not None else None
        return True


def match_spec(name: str | None, *, db: Any = None, specs_path: str | None = None, **evidence: Any) -> Any:
    """The spec database's identification of a device (:class:`gpuscope.specs.Identification`).

    ``name`` is the reported name; ``evidence`` is whatever else is known, with the database's
    keywords (``pci_id``, ``memory_bytes``, ``vendor``, ``compute_capability``, ``arch_target``,
    ``compute_units``, ``warp_size``). ``db`` defaults to ``load_specs(specs_path)``. Raises what
    the database raises (``InputError`` for a broken user spec file, ``GpuscopeError`` for an
    ambiguous name); callers decide whether a failed lookup matters."""
    if db is None:
        from gpuscope.specs import load_specs

        db = load_specs(specs_path) if specs_path is not None else load_specs()
    try:
        return db.identify(name=name, **evidence)
    except TypeError:  # a database whose identify() takes the name only
        return db.identify(name=name)


def match_trace_device(properties: dict[str, Any], *, db: Any = None) -> Any:
    """The spec database's identification of a device described by a Kineto trace's
    ``deviceProperties`` entry (name, compute capability or gfx target, SM/CU count, memory,
    warp size): :func:`match_spec` with the evidence a trace carries."""
    if db is None:
        from gpuscope.specs import load_specs

        db = load_specs()
    return db.identify_trace_device(properties)
