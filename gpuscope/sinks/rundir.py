"""The run-folder sink: :class:`RunDirSink` keeps a run's telemetry in its run folder when the
store cannot be opened (another process holds it, or it cannot be created), so that
``gpuscope run`` still runs its program and the run is stored later (issue 30, point 3).

What a pending run folder holds, beside what the program's bootstrap writes there (traces,
marks, windows, profiler notes), all of it plain JSON written by gpuscope only:

- ``run.json`` (:data:`RUN_FILE`): the run's row: name, command (redacted), host, sampling
  interval, start and end, exit code, status, the vendors, profiler settings, model, notes,
  and the sampler's figures; ``state`` is ``recording`` while gpuscope runs and ``finished``
  once the run's end is written. Replaced whole (written aside, then renamed) at each change.
- ``devices.jsonl`` (:data:`DEVICES_FILE`): one line per telemetry device, in the columns of
  the store's ``devices`` table.
- ``samples.jsonl`` (:data:`SAMPLES_FILE`): one line per sample, ``{"device", "ts_ns",
  "values"}``, or ``{"device", "ts_ns", "lost": true}`` for a device found gone; appended as
  the sampler hands them over.
- ``stored.json`` (:data:`STORED_FILE`): written once the run is in a store (its id and the
  store), so that it is never stored twice.

:mod:`gpuscope.run.pending` reads them back into the store.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from .base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = ["DEVICES_FILE", "PENDING_PREFIX", "RUN_FILE", "SAMPLES_FILE", "STORED_FILE", "RunDirSink",
           "read_run_file", "write_run_file"]

#: Pending run folders are named ``pending-<UTC time>-<pid>-<name>`` in the store's run folder.
PENDING_PREFIX = "pending-"
RUN_FILE = "run.json"
DEVICES_FILE = "devices.jsonl"
SAMPLES_FILE = "samples.jsonl"
STORED_FILE = "stored.json"


def write_run_file(run_dir: Path, doc: dict[str, Any], name: str = RUN_FILE) -> None:
    """Write ``doc`` as ``run_dir/name``, whole or not at all (written aside, then renamed over),
    owner-only; a reader never sees half a document."""
    path = run_dir / name
    tmp = run_dir / f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, allow_nan=False, default=_json_default))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_run_file(run_dir: Path, name: str = RUN_FILE) -> dict[str, Any] | None:
    """``run_dir/name`` as a JSON object; None when it is absent. An unreadable or malformed
    file is a ``ValueError`` saying so."""
    from ..errors import InputError
    from ..fileio import read_regular

    if not os.path.lexists(run_dir / name):
        return None
    try:
        data = read_regular(run_dir / name, name, 16 * 2**20)  # a regular file only, bounded
    except InputError as exc:
        raise ValueError(f"cannot read {name} ({exc.message})") from None
    except OSError as exc:
        raise ValueError(f"cannot read {name} ({exc.strerror or exc})") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{name} is not a JSON document") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{name} is not a JSON object")
    return doc


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _finite(value: Any) -> Any:
    """A metric value as strict JSON holds it: NaN and infinities (a reading that failed) as None."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def device_row(d: Any) -> dict[str, Any]:
    """The ``devices`` row of a :class:`~gpuscope.collectors.base.DeviceInfo`, as the store sink
    writes it (its properties with what it supports and why not)."""
    props = dict(d.properties)
    props.update({"supported": list(d.supported), "unsupported": d.unsupported, "parent": d.parent,
                  "pci_device_id": d.pci_device_id, "spec_exact": d.spec_exact})
    return {"key": d.key, "index": d.index, "vendor": d.vendor, "kind": d.kind, "name": d.name,
            "spec_key": d.spec_key, "memory_total_bytes": d.memory_total_bytes,
            "compute_capability": d.compute_capability, "num_sms": d.num_sms, "warp_size": d.warp_size,
            "uuid": d.uuid, "pci_bus_id": d.pci_bus_id, "properties": props}


class RunDirSink(Sink):
    """Writes a run's devices and samples into its run folder (``devices.jsonl``,
    ``samples.jsonl``), and at close the sampler's figures into :attr:`stats`; the run's own
    row (``run.json``) is its orchestrator's. Every batch is written and flushed to the file
    as it comes, so a gpuscope killed meanwhile leaves what was sampled up to then."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._samples: IO[str] | None = None
        self.rows_written = 0
        #: the sampler's figures (``SamplerStats.to_dict()``), once closed
        self.stats: dict[str, Any] | None = None
        #: (the store sink's note of samples it could not store: a file takes every sample)
        self.missing_note: str | None = None

    def _open(self, name: str) -> IO[str]:
        fd = os.open(self.run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        return open(fd, "a", encoding="utf-8")

    def start(self, info: SamplerInfo) -> None:
        with self._open(DEVICES_FILE) as f:
            for d in info.devices:
                f.write(json.dumps(device_row(d), default=_json_default) + "\n")
        self._samples = self._open(SAMPLES_FILE)

    def write(self, batch: SampleBatch) -> None:
        if self._samples is None:
            return
        lines = []
        for _, rows in batch.ticks:
            for s in rows:
                if s.lost:
                    lines.append(json.dumps({"device": s.device, "ts_ns": int(s.ts_ns), "lost": True}))
                else:
                    lines.append(json.dumps({"device": s.device, "ts_ns": int(s.ts_ns),
                                             "values": {k: _finite(v) for k, v in s.values.items() if v is not None}},
                                            default=_json_default))
        if lines:
            self._samples.write("\n".join(lines) + "\n")
            self._samples.flush()
            self.rows_written += len(lines)

    def close(self, stats: SamplerStats) -> None:
        self.stats = json.loads(json.dumps(stats.to_dict(), default=_json_default), parse_constant=lambda c: None)
        if self._samples is not None:
            self._samples.close()
            self._samples = None
