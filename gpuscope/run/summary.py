"""The run summary: what a finished ``gpuscope run`` produced, as one typed record.

The wrapper (:mod:`gpuscope.run.wrapper`) fills a :class:`RunSummary` while it stores the run
(the sampler's figures, the traces, the windows, the profiler notes), adds the analysis and the
OpenTelemetry export's figures, and it becomes JSON once, at the end (:meth:`RunSummary.to_json`):
the document ``gpuscope run --json`` prints, the text summary renders
(:func:`gpuscope.render.run_summary.render_run_summary`) and the run's spans read
(:func:`gpuscope.otel.spans.run_span_plan`). Its keys and their order are a contract
(docs/run.md): the same every time, whatever the run did.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Interruption", "ProfilerSummary", "RunSummary"]


@dataclass
class Interruption:
    """The first signal passed on to the program (``interrupted``)."""

    signal: str
    ts_ns: int

    def to_json(self) -> dict[str, Any]:
        """``{"signal": "SIGINT", "ts_ns": ...}``."""
        return {"signal": self.signal, "ts_ns": self.ts_ns}


@dataclass
class ProfilerSummary:
    """What happened to the profiler windows (``profiler``): whether profiling was on, and
    sentences when it was not simply "each window was written"."""

    enabled: bool
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"enabled": ..., "notes": [...]}``."""
        return {"enabled": self.enabled, "notes": list(self.notes)}


@dataclass
class RunSummary:
    """One ``gpuscope run``'s summary. ``analysis`` and ``telemetry`` are set once the run is
    analyzed, ``otlp`` with ``--otlp``: a key not set is left out of the document."""

    run_id: int
    exit_code: int
    run_dir: str
    #: the sampler's figures (``SamplerStats.to_dict()``)
    sampler: dict[str, Any]
    #: the recording played back instead of the GPUs (``--replay``), as given
    replay: str | None
    profiler: ProfilerSummary
    #: the trace files the program wrote, in name order
    traces: list[str] = field(default_factory=list)
    #: the profiler windows written (one object per window, as the bootstrap wrote it)
    windows: list[dict[str, Any]] = field(default_factory=list)
    #: how many marks the program wrote
    marks: int = 0
    ingest_error: str | None = None
    #: why the run's end could not be stored (then it is not analyzed)
    store_error: str | None = None
    interrupted: Interruption | None = None
    #: ``analyze_run``'s document
    analysis: dict[str, Any] | None = None
    #: ``run_telemetry``'s document, with ``by_kernel_class``
    telemetry: dict[str, Any] | None = None
    #: the OpenTelemetry export's figures (``--otlp``)
    otlp: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The summary document, in its fixed key order."""
        doc: dict[str, Any] = {
            "run_id": self.run_id, "exit_code": self.exit_code, "run_dir": self.run_dir, "sampler": self.sampler,
            "replay": self.replay, "traces": list(self.traces), "windows": list(self.windows), "marks": self.marks,
            "ingest_error": self.ingest_error, "store_error": self.store_error,
            "interrupted": self.interrupted.to_json() if self.interrupted is not None else None,
            "profiler": self.profiler.to_json(),
        }
        if self.analysis is not None or self.telemetry is not None:
            doc["analysis"] = self.analysis
            doc["telemetry"] = self.telemetry
        if self.otlp is not None:
            doc["otlp"] = self.otlp
        return doc
