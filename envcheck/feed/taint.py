"""Taint as every reader gets it (the API, ``envcheck taint``, the client through the API, the
export file): the store's facts read in one pass (:meth:`~envcheck.store.Store.taint_facts`),
each environment's intervals from the health model (:mod:`envcheck.health.taint`), those
that meet the window asked for.

``taint.jsonl`` (one interval a line, as :meth:`TaintInterval.to_json` writes it, by
environment and start) is recomputed after every window and rewritten, atomically, when it
changed: an interval changes at a transition, and also without one (a new digest's first
result closes it, a degraded environment's reason may change), so the file never waits on a
transition to be right. An open interval's line has ``"end": null`` and stays as it is
until it closes.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from envcheck.core.clock import since as parse_time
from envcheck.core.files import atomic_write_text
from envcheck.health.taint import TaintInterval, taint_intervals
from envcheck.health.trust import UNTRUSTED_REASONS, UNTRUSTED_STATES
from envcheck.store import Store

__all__ = ["TAINT_FILE", "BadWindow", "taint", "taint_text", "window", "write_taint"]

TAINT_FILE = "taint.jsonl"


class BadWindow(ValueError):
    """A ``since`` or ``until`` that is no time, or an ``until`` before ``since``."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


def window(since: str | None, until: str | None, now: datetime
           ) -> tuple[datetime | None, datetime | None]:
    """The window a person or a program asks for, each end an age before ``now`` (``24h``,
    ``7d``) or an ISO 8601 date or time (:func:`envcheck.core.clock.since`); None stays
    unbounded. The one parser of the API and ``envcheck taint``."""
    times: dict[str, datetime | None] = {}
    for name, text in (("since", since), ("until", until)):
        try:
            times[name] = parse_time(text, now) if text is not None else None
        except ValueError as exc:
            raise BadWindow(name, str(exc)) from None
    start, end = times["since"], times["until"]
    if start is not None and end is not None and end < start:
        raise BadWindow("until", f"{end.isoformat()} is before since ({start.isoformat()})")
    return start, end


def taint(store: Store, *, since: datetime | None = None, until: datetime | None = None,
          suite: str | None = None, env_id: str | None = None) -> list[TaintInterval]:
    """The tainted intervals that meet ``[since, until]`` (None: unbounded), of ``suite`` or
    of ``env_id`` alone if given, by environment and start."""
    facts = store.taint_facts(states=UNTRUSTED_STATES, reasons=UNTRUSTED_REASONS,
                              suite=suite, env_id=env_id)
    return [i for f in facts for i in taint_intervals(f) if i.overlaps(since, until)]


def taint_text(intervals: list[TaintInterval]) -> str:
    return "".join(json.dumps(i.to_json(), sort_keys=True) + "\n" for i in intervals)


def write_taint(store: Store, directory: Path) -> bool:
    """Write ``taint.jsonl`` (every interval the store shows) into ``directory`` unless it
    already holds exactly that; whether it wrote."""
    path = directory / TAINT_FILE
    text = taint_text(taint(store))
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass  # missing or unreadable: write it
    atomic_write_text(path, text)
    return True
