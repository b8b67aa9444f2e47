"""Summary statistics shared by the probes' reports and the metrics."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence

__all__ = ["bucket_index", "histogram_quantile", "percentile"]


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0 <= q <= 1) by linear interpolation between closest ranks
    (``statistics.quantiles``' inclusive method, numpy's default); raises ValueError when
    there are no values."""
    data = list(values)
    if not data:
        raise ValueError("percentile of no values")
    if len(data) == 1 or q <= 0:
        return min(data)
    if q >= 1:
        return max(data)
    # 1000 cut points: every q to three decimals (p50, p95, p99.9) is one of them, exactly.
    return statistics.quantiles(data, n=1000, method="inclusive")[round(q * 1000) - 1]


def bucket_index(bounds: Sequence[float], value: float) -> int:
    """The bucket of ``value`` in a histogram with these ascending upper bounds (a value equal
    to a bound is in that bound's bucket, as Prometheus counts ``le``); ``len(bounds)`` is the
    bucket above the last bound."""
    return bisect.bisect_left(bounds, value)


def histogram_quantile(bounds: Sequence[float], counts: Sequence[int], q: float,
                       top: float) -> float | None:
    """The ``q`` quantile of values counted in buckets (``counts[i]`` of bucket ``i``, see
    :func:`bucket_index`) whose largest is ``top``: interpolated linearly inside its bucket,
    so off by at most the bucket's width. None when nothing was counted."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            low = bounds[i - 1] if i > 0 else 0.0
            high = min(bounds[i], top) if i < len(bounds) else top
            low = min(low, high)
            return low + (high - low) * max(rank - seen, 0.0) / n
        seen += n
    return top
