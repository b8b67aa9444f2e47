"""Who holds a store's lease, and what a lease's lock does (:mod:`.lease`, :mod:`.pglease`)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = ["Holder", "Lock"]


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lease: enough for an operator to find the process."""

    host: str
    pid: int
    since: datetime

    @classmethod
    def me(cls) -> Holder:
        return cls(socket.gethostname(), os.getpid(), datetime.now(UTC).replace(microsecond=0))

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "since": self.since.isoformat()}

    @classmethod
    def of(cls, doc: Any) -> Holder | None:
        """From :meth:`as_dict`'s form; None if it is not that."""
        try:
            return cls(str(doc["host"]), int(doc["pid"]), datetime.fromisoformat(doc["since"]))
        except (TypeError, KeyError, ValueError):
            return None

    def __str__(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since.isoformat()}"


class Lock(Protocol):
    """A lease's backend. Each call is bounded; a store that does not answer: StoreError."""

    where: str  # for messages: the lock file, or the database without its password
    previous: Holder | None  # who held it last before us, if the lock remembers

    def try_lock(self, me: Holder) -> bool:
        """Take the lock for ``me`` if it is free (any stale handle of ours dropped first)."""
        ...

    def holder(self) -> Holder | None:
        """Who holds it now, if that can be told (None: free, or the holder not known)."""
        ...

    def held(self) -> bool:
        """Is the lock still ours? False on any doubt."""
        ...

    def unlock(self) -> None: ...
