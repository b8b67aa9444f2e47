"""Reading a growing table by id, each row once, without re-reading what was seen.

A scrape asks for the rows above the highest id it has seen. PostgreSQL may commit a lower id
after a higher one was read: the ids skipped over are kept as holes and asked for again, by
id, until they turn up or a while has passed (an id given to a transaction that rolled back,
or to a row deleted since, never turns up). SQLite commits in id order: its holes are deleted
rows, asked for a few times and forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

__all__ = ["IdCursor"]

HOLD_S = 300.0  # how long a skipped id is asked for: far longer than a write transaction
MAX_HOLES = 1_000  # a wider jump (a sequence moved by hand) is not tracked id by id


class IdCursor:
    """Which ids of a table were read: the highest, and the holes below it."""

    def __init__(self, start: int = 0, *, hold_s: float = HOLD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.high = start
        self._holes: dict[int, float] = {}  # id -> when it was skipped
        self._hold_s, self._clock = hold_s, clock

    @property
    def holes(self) -> list[int]:
        """Ids below :attr:`high` not read yet, still asked for."""
        now = self._clock()
        self._holes = {i: at for i, at in self._holes.items() if now - at < self._hold_s}
        return sorted(self._holes)

    def unread(self, row_id: int) -> bool:
        """Whether :meth:`take` would find ``row_id`` new."""
        return row_id in self._holes or row_id > self.high

    def take(self, ids: Iterable[int]) -> list[int]:
        """Of ``ids`` (read in ascending order), those not read before."""
        fresh: list[int] = []
        now = self._clock()
        for row_id in ids:
            if self._holes.pop(row_id, None) is not None:
                fresh.append(row_id)
            elif row_id > self.high:
                if row_id - self.high - 1 <= MAX_HOLES:
                    self._holes.update(dict.fromkeys(range(self.high + 1, row_id), now))
                self.high = row_id
                fresh.append(row_id)
        return fresh
