"""Taint as every reader gets it (the API, ``envcheck taint``, the client through the API, the
export file): the store's facts read in one pass (:meth:`~envcheck.store.Store.taint_facts`),
each environment's intervals from the health model (:mod:`envcheck.health.taint`), those
that meet the window asked for.

``taint.jsonl`` (one interval a line, as :meth:`TaintInterval.to_json` writes it, by
environment and start) is written whole with the other exports, and after every window for
the environments the window probed or moved (:func:`refresh_taint`): an interval changes at
a transition, and also without one (a new digest's first result closes it, a degraded
environment's reason may change), so the file never waits on a transition to be right, and a
window reads only its own environments, not the fleet's history. Either way it is replaced
atomically, and only when its text changed. An open interval's line has ``"end": null`` and
stays as it is until it closes.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from pathlib import Path

from envcheck.core.clock import since as parse_time
from envcheck.core.files import atomic_write_text
from envcheck.health.taint import TaintInterval, taint_intervals
from envcheck.health.trust import UNTRUSTED_REASONS, UNTRUSTED_STATES
from envcheck.store import Store
from envcheck.store.views.taint import MAX_IDS

__all__ = ["TAINT_FILE", "BadWindow", "refresh_taint", "taint", "taint_text", "window",
           "write_taint"]

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
    return [i for i in _intervals(store, suite, [env_id] if env_id is not None else None, since)
            if i.overlaps(since, until)]


def _intervals(store: Store, suite: str | None = None, env_ids: Collection[str] | None = None,
               since: datetime | None = None) -> list[TaintInterval]:
    facts = store.taint_facts(states=UNTRUSTED_STATES, reasons=UNTRUSTED_REASONS,
                              suite=suite, env_ids=env_ids, active_since=since)
    return [i for f in facts for i in taint_intervals(f)]


def taint_text(intervals: list[TaintInterval]) -> str:
    return "".join(json.dumps(i.to_json(), sort_keys=True) + "\n" for i in intervals)


def write_taint(store: Store, directory: Path) -> bool:
    """Write ``taint.jsonl`` (every interval the store shows) into ``directory`` unless it
    already holds exactly that; whether it wrote."""
    return _replace(directory / TAINT_FILE, taint_text(_intervals(store)), _read(directory))


def refresh_taint(store: Store, directory: Path, env_ids: Collection[str]) -> bool:
    """Bring ``taint.jsonl`` up to date for ``env_ids`` (a window's environments), keeping
    every other environment's lines as they are; the whole file when it is missing or
    unreadable, or when there are more than :data:`MAX_IDS` of them. Whether it wrote."""
    old = _read(directory)
    lines = _by_env(old) if old is not None else None
    if lines is None or len(env_ids) > MAX_IDS:
        return write_taint(store, directory)
    wanted = set(env_ids)
    for env_id in wanted:
        lines.pop(env_id, None)
    for interval in _intervals(store, env_ids=sorted(wanted)) if wanted else []:
        lines.setdefault(interval.env_id, []).append(taint_text([interval]))
    return _replace(directory / TAINT_FILE, "".join("".join(lines[e]) for e in sorted(lines)),
                    old)


def _read(directory: Path) -> str | None:
    try:
        return (directory / TAINT_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # missing or unreadable: written whole


def _by_env(text: str) -> dict[str, list[str]] | None:
    """The file's lines per environment, in order (None: a line is not one of ours)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines(keepends=True):
        try:
            env_id = json.loads(line)["env_id"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(env_id, str):
            return None
        out.setdefault(env_id, []).append(line)
    return out


def _replace(path: Path, text: str, old: str | None) -> bool:
    if text == old:
        return False
    atomic_write_text(path, text)
    return True
