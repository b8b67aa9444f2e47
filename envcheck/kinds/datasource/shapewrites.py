"""Fewer store writes for observed shapes: a steady source need not cost a commit per probe.

An observation is written at once when its shape is new for this process, differs from the
last one written for the source (so the store's "latest observed shape", what
``accept-schema`` accepts, is always right) or is accepted as the first shape seen; a shape
seen again is written at most every ``interval_s`` with the samples counted meanwhile.
Acceptances are always read from the store: another process (the CLI) may have moved them.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from envcheck.core.clock import Clock
from envcheck.kinds.datasource.sampling import ShapeRecord, ShapeStore

__all__ = ["ThrottledShapes"]


class ThrottledShapes:
    def __init__(self, store: ShapeStore, clock: Clock, interval_s: float = 300.0) -> None:
        self._store = store
        self._clock = clock
        self._interval = interval_s
        self._lock = threading.Lock()
        self._written: dict[tuple[str, str], float] = {}  # (source, fingerprint) -> when
        self._last: dict[str, str] = {}  # source -> fingerprint written last
        self._pending: dict[tuple[str, str], int] = {}  # samples seen since the last write

    def accepted_shape(self, source_id: str) -> ShapeRecord | None:
        return self._store.accepted_shape(source_id)

    def observe_shape(self, source_id: str, fingerprint: str, shape: Any, at: datetime, *,
                      count: int = 1, auto_accept: bool = False) -> ShapeRecord:
        key, now = (source_id, fingerprint), self._clock.monotonic()
        with self._lock:
            count += self._pending.pop(key, 0)
            written = self._written.get(key)
            if (not auto_accept and written is not None and now - written < self._interval
                    and self._last.get(source_id) == fingerprint):
                self._pending[key] = count
                return _Observed(fingerprint, shape)
            self._written[key], self._last[source_id] = now, fingerprint
        return self._store.observe_shape(source_id, fingerprint, shape, at, count=count,
                                         auto_accept=auto_accept)


class _Observed:
    def __init__(self, fingerprint: str, shape: Any) -> None:
        self.fingerprint = fingerprint
        self.shape = shape
