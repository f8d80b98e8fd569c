"""The short history behind each live sparkline: a fixed number of time buckets per metric.

Plain Python, no Textual. A value goes into the bucket of its timestamp; a bucket holds the
mean of its values, so a 10 Hz sampler and a 1 s refresh give the same kind of line. The
newest bucket is still filling and changes at every refresh, so the line moves as values come.
Memory and work per refresh stay bounded however long the screen is open.
"""
from __future__ import annotations

from collections import deque

#: How much history a sparkline covers, in seconds, and in how many points.
HISTORY_S = 120.0
HISTORY_POINTS = 120


class MetricHistory:
    """The newest ``points`` buckets of ``bucket_s`` seconds of one metric of one device."""

    def __init__(self, bucket_s: float, points: int = HISTORY_POINTS) -> None:
        self.bucket_ns = max(1, int(bucket_s * 1e9))
        #: how many buckets the history keeps (a chart spans them all)
        self.points = points
        self._means: deque[float] = deque(maxlen=points)
        self._bucket: int | None = None
        self._sum = 0.0
        self._n = 0

    def add(self, ts_ns: int, value: float) -> None:
        b = ts_ns // self.bucket_ns
        if self._bucket is None or b > self._bucket:
            self._bucket, self._sum, self._n = b, 0.0, 0
            self._means.append(0.0)
        elif b < self._bucket:  # a late row for a bucket already closed: it counts in the newest
            pass
        self._sum += float(value)
        self._n += 1
        self._means[-1] = self._sum / self._n

    @property
    def newest_bucket(self) -> int | None:
        """The number of the bucket still filling (None before the first value): it changes
        when a bucket closes, which is when a sparkline has a new point to draw."""
        return self._bucket

    @property
    def data(self) -> list[float]:
        """The bucket means, oldest first."""
        return list(self._means)

    def __len__(self) -> int:
        return len(self._means)


def bucket_seconds(interval_s: float) -> float:
    """The bucket width for a refresh interval: the history spans :data:`HISTORY_S` in
    :data:`HISTORY_POINTS` points, or one point per refresh when refreshes are slower."""
    return max(interval_s, HISTORY_S / HISTORY_POINTS)
