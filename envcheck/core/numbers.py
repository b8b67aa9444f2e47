"""Summary statistics shared by the probes' reports and the metrics."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

__all__ = ["percentile"]


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
