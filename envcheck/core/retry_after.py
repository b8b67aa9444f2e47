"""The ``Retry-After`` header read as seconds, for every HTTP caller that honours it (the
data-source probes, the webhook notifier, the client's rollout reporter)."""

from __future__ import annotations

import email.utils
from datetime import datetime

__all__ = ["parse_retry_after"]


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - now).total_seconds(), 0.0) if when.tzinfo else None
