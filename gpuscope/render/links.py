"""GPU-GPU link (NVLink / XGMI) utilization over a run, for the faces that show telemetry (the
HTML report's telemetry section, the TUI run screen's timeline), the same figure the timeline
export draws as ``link_tx/rx_util_pct``: the stored rate (every link of the GPU together, one
direction) as a percent of the spec's scale-up bandwidth in one direction, found by the one
function the export uses (:func:`gpuscope.specs.link_bytes_per_s`).

Pure: the analysis document's devices and the read layer's sample series in, plain data out.
A device gets a :class:`LinkSeries` only when at least one of its samples holds a link rate
(PCIe-only cards and collectors that read no link counters have none: no empty chart).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: The sample columns the link series are made of (``gpuscope.metrics.METRICS`` names).
LINK_METRICS = ["xgmi_nvlink_tx_bytes_per_s", "xgmi_nvlink_rx_bytes_per_s"]


@dataclass(frozen=True)
class LinkSeries:
    """One GPU's link rates over time. ``link_bytes_per_s``: the spec's bandwidth in one
    direction (None where the spec entry gives none or the GPU is not identified: the rates
    are then shown in bytes/s only, without a percent)."""

    device_id: int
    key: str
    spec: str | None
    link_bytes_per_s: float | None
    ts_ns: list[int]
    tx_bytes_per_s: list[float | None]
    rx_bytes_per_s: list[float | None]

    def pct(self, values: list[float | None]) -> list[float | None]:
        """``values`` (bytes/s) as percent of the link's bandwidth; all None without one. Not
        capped at 100: a reading above it would say the spec entry is wrong."""
        bw = self.link_bytes_per_s
        return [None if v is None or not bw else 100.0 * v / bw for v in values]

    @property
    def tx_pct(self) -> list[float | None]:
        return self.pct(self.tx_bytes_per_s)

    @property
    def rx_pct(self) -> list[float | None]:
        return self.pct(self.rx_bytes_per_s)


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def link_series(devices: Iterable[Mapping[str, Any]], series: Iterable[Any]) -> list[LinkSeries]:
    """Per device with link rates, in the order of ``series``. ``devices``: the analysis
    document's ``devices`` (``device_id``, ``key``, ``spec``: the spec the run was judged
    against, as the timeline export reads it); ``series``: the read layer's
    ``SampleSeries`` (``device_id``, ``ts_ns``, ``values``) holding :data:`LINK_METRICS`."""
    from ..specs import link_bytes_per_s

    by_id = {d.get("device_id"): d for d in devices}
    out: list[LinkSeries] = []
    for s in series:
        values = getattr(s, "values", {}) or {}
        tx = [_num(v) for v in values.get(LINK_METRICS[0]) or [None] * len(s.ts_ns)]
        rx = [_num(v) for v in values.get(LINK_METRICS[1]) or [None] * len(s.ts_ns)]
        if all(v is None for v in tx + rx):
            continue
        d = by_id.get(s.device_id) or {}
        spec = d.get("spec")
        out.append(LinkSeries(int(s.device_id), str(d.get("key") or f"device {s.device_id}"), spec,
                              link_bytes_per_s(spec), list(s.ts_ns), tx, rx))
    return out


def peak(values: list[float | None]) -> float | None:
    """The largest value present (None when none is)."""
    present = [v for v in values if v is not None]
    return max(present) if present else None


def mean(values: list[float | None]) -> float | None:
    """The mean of the values present (None when none is): of the samples, each tick weighing
    the same, as the report's other telemetry summaries count."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
