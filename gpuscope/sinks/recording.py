"""The sink that writes a recording file (``gpuscope record``), which
:class:`~gpuscope.collectors.replay.ReplayCollector` plays back."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import SampleBatch, SamplerInfo, SamplerStats, Sink

__all__ = ["RecordingSink"]


class RecordingSink(Sink):
    """Writes a recording file for :class:`~gpuscope.collectors.replay.ReplayCollector`
    (``gpuscope record``). The rows are flushed after every batch to a temporary beside the
    file, renamed into place at close (:class:`~gpuscope.collectors.replay.RecordingWriter`)."""

    def __init__(self, path: str | Path, *, synthetic: bool = False, note: str | None = None) -> None:
        self.path = Path(path)
        self.synthetic = synthetic
        self.note = note
        self.writer: Any = None

    def start(self, info: SamplerInfo) -> None:
        from ..collectors.replay import RecordingWriter

        self.writer = RecordingWriter(self.path, info.devices, interval_s=info.interval_s, vendors=info.vendors,
                                      synthetic=self.synthetic, note=self.note)

    def write(self, batch: SampleBatch) -> None:
        for k, rows in batch.ticks:
            self.writer.write_tick(k, rows)
        self.writer._f.flush()

    def close(self, stats: SamplerStats) -> None:
        if self.writer is None:
            return
        try:
            d = stats.to_dict()
            d["degradations"] = [str(g) for g in stats.degradations]
        except BaseException:
            self.writer.discard()
            raise
        self.writer.close(d)
