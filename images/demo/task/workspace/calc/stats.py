"""Descriptive statistics over sequences of numbers."""

from collections import Counter
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("mean() of an empty sequence")
    return sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """Middle value of the sorted data; raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("median() of an empty sequence")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def mode(values: Sequence[float]) -> float:
    """Most common value (the first one seen wins a tie)."""
    if not values:
        raise ValueError("mode() of an empty sequence")
    return Counter(values).most_common(1)[0][0]
