"""Group commit: callers that arrive while a write is under way wait, and the first of them
then writes all their items in one transaction (the leader), so N concurrent writers pay one
commit (and its fsync) and write each hot page once, not N times. No thread of its own: a
caller leads or waits.

Each caller still gets its own answer: ``write_group`` returns one result per item, or raises;
when the group's transaction fails, each item is written again on its own, so an item that
cannot be written fails alone and the others are answered as if they had come one by one.
Every answer (result or error) is given only after its transaction ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)
class _Job(Generic[T, R]):
    item: T
    done: bool = False
    result: R | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class GroupCommit(Generic[T, R]):
    """``run(item, write_group)``: ``write_group(items)`` writes items in one transaction and
    returns their results in order. ``max_items``: at most this many items a group."""

    max_items: int = 16
    _pending: list[_Job[T, R]] = field(default_factory=list)
    _writing: bool = False
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def run(self, item: T, write_group: Callable[[Sequence[T]], Sequence[R]]) -> R:
        job: _Job[T, R] = _Job(item)
        with self._changed:
            self._pending.append(job)
            while self._writing and not job.done:  # woken when a group ends, not a retry
                self._changed.wait()
            if not job.done:
                self._writing = True
                group = self._pending[:self.max_items]
                del self._pending[:self.max_items]
        if not job.done:
            try:
                self._write(group, write_group)
            finally:
                with self._changed:
                    for other in group:  # interrupted (a BaseException): none left waiting
                        if not other.done:
                            other.error = RuntimeError("the group's write was interrupted")
                            other.done = True
                    self._writing = False
                    self._changed.notify_all()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    @staticmethod
    def _write(group: list[_Job[T, R]], write_group: Callable[[Sequence[T]], Sequence[R]]
               ) -> None:
        try:
            results = write_group([j.item for j in group])
        except Exception as exc:
            if len(group) == 1:
                group[0].error, group[0].done = exc, True
                return
            for job in group:  # each on its own: only the item at fault fails
                try:
                    job.result = write_group([job.item])[0]
                except Exception as alone:
                    job.error = alone
                job.done = True
            return
        for job, result in zip(group, results, strict=True):
            job.result, job.done = result, True
