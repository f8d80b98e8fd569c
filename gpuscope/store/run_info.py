"""``runs.info``: the typed document each run keeps beside its columns (docs/store.md, "runs.info").

One schema, :class:`RunInfo`, for everyone who writes the document (through
:mod:`gpuscope.store.runs` only: the recorder's process, the run directory and profiler
settings of ``gpuscope run``, what ingest counted and noted) and everyone who reads it (the
stale-run check, ``analyze``'s notes and counts, ``analyze PATH``'s reuse of an ingested run).

Stores written by older versions (or by newer ones) may hold keys this schema does not know, or
a known key with a value of another type: :meth:`RunInfo.from_json` never raises on them and
keeps them as they were in ``extra``, so that adding to a run's info never loses what was there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["OwnerProcess", "RunInfo", "SamplerProcess"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class SamplerProcess:
    """``info.sampler``: the process whose sampler records the run (a run whose process is gone
    reads ``incomplete``) and its sampling interval."""

    pid: int | None = None
    interval_s: float | None = None
    #: keys of another version's document, kept as they were
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``pid``, ``interval_s``, then the unknown keys)."""
        out: dict[str, Any] = {}
        if self.pid is not None:
            out["pid"] = self.pid
        if self.interval_s is not None:
            out["interval_s"] = self.interval_s
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SamplerProcess:
        """From a stored object; a value of another type stays in ``extra``."""
        extra = dict(doc)
        pid = extra.pop("pid") if _is_int(doc.get("pid")) else None
        iv = doc.get("interval_s")
        interval_s = float(extra.pop("interval_s")) if isinstance(iv, (int, float)) and not isinstance(iv, bool) else None
        return cls(pid=pid, interval_s=interval_s, extra=extra)


@dataclass
class OwnerProcess:
    """``info.owner``: the process that owns a recorded run (``gpuscope run``'s wrapper, the
    monitor) and its host: a run whose owner is gone reads ``incomplete``; one owned on another
    host is assumed alive."""

    pid: int | None = None
    host: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``pid``, ``host``, then the unknown keys)."""
        out: dict[str, Any] = {}
        if self.pid is not None:
            out["pid"] = self.pid
        if self.host is not None:
            out["host"] = self.host
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> OwnerProcess:
        """From a stored object; a value of another type stays in ``extra``."""
        extra = dict(doc)
        pid = extra.pop("pid") if _is_int(doc.get("pid")) else None
        host = extra.pop("host") if isinstance(doc.get("host"), str) else None
        return cls(pid=pid, host=host, extra=extra)


#: The document's keys in the order they are written, and their JSON types (a stored value of
#: another type is kept in ``extra``, untouched).
_OBJECTS: dict[str, type[SamplerProcess] | type[OwnerProcess]] = {"sampler": SamplerProcess, "owner": OwnerProcess}
_PLAIN: dict[str, type | tuple[type, ...]] = {
    "vendors": list, "run_dir": str, "profile": dict, "ingest": dict, "notes": list, "inputs_digest": str}


@dataclass
class RunInfo:
    """The ``runs.info`` document. Every field is optional (None: not set); in a merge
    (:meth:`merged`) the fields set replace the stored ones.

    - ``sampler``: the recording sampler's process (written when the run is created)
    - ``vendors``: each vendor's status when the sampler opened (``VendorStatus.to_dict()``)
    - ``owner``: the process that owns the run (``gpuscope run``'s wrapper)
    - ``run_dir``: ``gpuscope run``'s run directory
    - ``profile``: ``gpuscope run``'s profiler window settings (the contract's encoding)
    - ``ingest``: what ingest counted: ``skipped``, ``ignored``, ``linked``, ``accelerators``
    - ``notes``: sentences on what the run lacks or left out (appended, never replaced)
    - ``inputs_digest``: the digest of an ingested run's trace files (``analyze PATH`` reuses it)
    """

    sampler: SamplerProcess | None = None
    vendors: list[dict[str, Any]] | None = None
    owner: OwnerProcess | None = None
    run_dir: str | None = None
    profile: dict[str, Any] | None = None
    ingest: dict[str, Any] | None = None
    notes: list[str] | None = None
    inputs_digest: str | None = None
    #: keys of another version's document (or a known key with a value of another type), kept
    extra: dict[str, Any] = field(default_factory=dict)

    # -- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The document as a JSON object: the fields set, in schema order, then ``extra``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            if v is None:
                continue
            out[f.name] = v.to_dict() if f.name in _OBJECTS else v
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    def to_json(self) -> str:
        """The text stored in ``runs.info``."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, doc: Any) -> RunInfo:
        """From a JSON value; anything but an object is an empty document."""
        if not isinstance(doc, dict):
            return cls()
        extra = dict(doc)
        known: dict[str, Any] = {}
        for key, kind in _OBJECTS.items():
            if isinstance(doc.get(key), dict):
                known[key] = kind.from_dict(extra.pop(key))
        for key, types in _PLAIN.items():
            v = doc.get(key)
            if isinstance(v, types):
                extra.pop(key)
                known[key] = [n for n in v] if isinstance(v, list) else v
        return cls(**known, extra=extra)

    @classmethod
    def from_json(cls, text: str | bytes | None) -> RunInfo:
        """From the stored text: NULL, an empty string, text that is not JSON or not an object
        (a store another tool wrote into) is an empty document, never an error."""
        if not text:
            return cls()
        try:
            return cls.from_dict(json.loads(text))
        except ValueError:
            return cls()

    # -- merging -----------------------------------------------------------------------
    def merged(self, other: RunInfo, append_notes: list[str] | None = None) -> RunInfo:
        """This document with ``other``'s fields set replacing its own (and ``other``'s
        ``extra`` keys), then ``append_notes`` added to ``notes``."""
        out = RunInfo(**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"},
                      extra=dict(self.extra))
        for f in fields(other):
            if f.name == "extra":
                continue
            v = getattr(other, f.name)
            if v is not None:
                setattr(out, f.name, v)
                out.extra.pop(f.name, None)  # a stored value of another type gives way to the typed one
        out.extra.update(other.extra)
        if append_notes is not None:
            out.notes = list(out.notes or []) + list(append_notes)
            out.extra.pop("notes", None)
        return out

    @property
    def recorder(self) -> OwnerProcess | SamplerProcess | None:
        """The process recording the run: its owner, else its sampler's process."""
        # an empty owner object (``{}``) names nobody: its sampler's process then
        return self.owner if self.owner is not None and self.owner.to_dict() else self.sampler
