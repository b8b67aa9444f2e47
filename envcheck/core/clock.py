"""The clock, injected: probes read time and sleep through it, so tests can skip the waits."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "since"]


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def now(self) -> datetime:
        """The wall clock, timezone-aware (UTC)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()


_AGO = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def since(text: str, now: datetime) -> datetime:
    """A point in time from what a person types: an age (``30m``, ``24h``, ``7d``, ``2w``)
    before ``now``, or an ISO 8601 date or datetime (UTC unless it names a zone). Raises
    ValueError with what it accepts."""
    value = text.strip()
    number, unit = value[:-1], value[-1:].lower()
    if unit in _AGO and number.replace(".", "", 1).isdigit():
        return now - timedelta(seconds=float(number) * _AGO[unit])
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is neither an age (30m, 24h, 7d, 2w) nor an ISO 8601 date "
                         "or time (2026-12-01, 2026-12-01T08:00)") from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
