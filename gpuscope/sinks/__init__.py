"""Sinks: where the sampler's rows go (collectors -> rows -> sinks).

- :mod:`.base`: the contract with the sampler (:class:`Sink`, :class:`SampleBatch`,
  :class:`SamplerInfo`, :class:`SamplerStats`);
- :mod:`.store`: :class:`StoreSink`, which buffers samples and writes them (with devices and
  sampler stats) through the store's telemetry writer;
- :mod:`.recording`: :class:`RecordingSink`, a recording file for ``gpuscope record``;
- :mod:`.memory`: :class:`LiveBuffer` (the newest rows per device, for a live view) and
  :class:`MemorySink` (tests).

A new sink (an OpenTelemetry exporter, say) subclasses :class:`Sink` in a module of its own and
imports its heavy packages inside its methods. Sinks never import the command line.
"""
from __future__ import annotations

from .base import SampleBatch, SamplerInfo, SamplerStats, Sink
from .memory import LiveBuffer, LiveSnapshot, MemorySink
from .recording import RecordingSink
from .store import StoreSink

__all__ = ["LiveBuffer", "LiveSnapshot", "MemorySink", "RecordingSink", "SampleBatch", "SamplerInfo", "SamplerStats",
           "Sink", "StoreSink"]
