"""Each environment's state and quarantine, held between scrapes and refreshed from what
changed, with the per-suite counts kept beside them.

A state or quarantine changes only together with a transition row (``store/feed.py``), so a
scrape reads the transitions after the last one it saw and the state rows of the
environments they name. What moves without a transition is caught by marks: the number of
state rows (a row first written without a transition, or deleted: their ids are compared),
and for the environments table, which a catalogue sync rewrites (an environment may have
changed suite: then everything is read again), its row count and the newest suite sync each
scrape, and its newest ``last_seen`` (a scan of the table) when those moved or every
:data:`FULL_CHECK_S`. So a suite change that neither adds an environment nor comes with a
suite sync shows within that time; one by ``envcheck daemon`` or ``envcheck check`` (which
sync the suites too) at the next scrape after the sync committed.

Series are labelled with the environment's suite as the catalogue last synced it (the
environments table, which the allowlist reads too), or its state row's where it has none.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from envcheck.core.states import EnvState
from envcheck.health.quarantine import allowed_count
from envcheck.metrics.cursor import IdCursor
from envcheck.metrics.text import FamilyText, sample_line
from envcheck.store.tables.catalogue import SuiteRow
from envcheck.store.views.metrics import StateMark

__all__ = ["FULL_CHECK_S", "STATES", "FleetSeries", "FleetSource"]

FULL_CHECK_S = 30.0  # at most this long between scans of the environments table

STATES = tuple(str(s) for s in EnvState)
SOURCES = ("auto", "manual")


class FleetSource(Protocol):
    """The store's reads this module needs."""

    def environments_mark(self) -> tuple[int, datetime | None]: ...
    def catalogue_mark(self) -> tuple[int, datetime | None]: ...
    def environment_suites(self) -> dict[str, str]: ...
    def generation(self) -> int: ...
    def transitions_after(self, after_id: int, also: Sequence[int] = ()
                          ) -> list[tuple[int, str]]: ...
    def state_marks(self, env_ids: Sequence[str] | None = None) -> list[StateMark]: ...
    def state_ids(self) -> set[str]: ...
    def state_count(self) -> int: ...


class _Shown(NamedTuple):
    """What the series show of one environment."""

    suite: str
    state: str
    quarantined: bool
    source: str  # who quarantined it (auto, manual); "" when never quarantined


def _add(counter: Counter[tuple[str, str]], key: tuple[str, str], n: int) -> None:
    """Add to a count, dropping it at zero: a suite left by all its environments goes."""
    counter[key] += n
    if not counter[key]:
        del counter[key]


def _state_line(env_id: str, shown: _Shown) -> str:
    return sample_line("envcheck_environment_state",
                       {"env": env_id, "suite": shown.suite, "state": shown.state}, 1.0)


def _quarantine_line(env_id: str, shown: _Shown) -> str:
    return sample_line("envcheck_environment_quarantined",
                       {"env": env_id, "suite": shown.suite, "source": shown.source},
                       1.0 if shown.quarantined else 0.0)


class FleetSeries:
    """Per environment (optional) and per suite: state and quarantine."""

    def __init__(self, per_environment: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.per_environment = per_environment
        self.suite_of: dict[str, str] = {}  # the environments table
        self.suites_version = 0  # moves whenever suite_of is read again
        self.quarantined: set[str] = set()
        self._flipped: set[str] = set()  # in or out of quarantine since last drained
        self._clock = clock
        self._mark: tuple[int, datetime | None] | None = None  # the environments table's
        self._cheap_mark: tuple[int, datetime | None] | None = None
        self._checked_at = float("-inf")
        self._cursor = IdCursor()
        self._shown: dict[str, _Shown] = {}
        # Per suite, of its members (the environments table, as the allowlist and the fleet
        # overview count them; one never assessed is unknown): by state, the open ones (not
        # quarantined) by state, the quarantined by source, all.
        self._by_state: Counter[tuple[str, str]] = Counter()
        self._open: Counter[tuple[str, str]] = Counter()
        self._q: Counter[tuple[str, str]] = Counter()
        self._members: Counter[str] = Counter()
        self._held: dict[_Shown, _Shown] = {}  # each distinct value once: there are few
        self._state_text = FamilyText("envcheck_environment_state", "gauge",
                                      "1 for the environment's current state", _state_line)
        self._q_text = FamilyText("envcheck_environment_quarantined", "gauge",
                                  "1 while the environment is quarantined", _quarantine_line)

    # --- refresh ---------------------------------------------------------------------------

    def refresh(self, store: FleetSource) -> None:
        """Reads first, then applies: a read that fails leaves nothing half applied."""
        cheap, now = store.catalogue_mark(), self._clock()
        if cheap != self._cheap_mark or abs(now - self._checked_at) >= FULL_CHECK_S:
            mark = store.environments_mark()
            moved = mark != self._mark
            if moved:
                self._reload(store, mark)
            self._cheap_mark, self._checked_at = cheap, now
            if moved:
                return
        count = store.state_count()
        rows = store.transitions_after(self._cursor.high, self._cursor.holes)
        changed = sorted({env_id for tid, env_id in rows if self._cursor.unread(tid)})
        marks = {m.env_id: m for m in store.state_marks(changed)} if changed else {}
        self._cursor.take(tid for tid, _ in rows)
        for env_id in changed:
            self._put(env_id, marks.get(env_id))
        if count != len(self._shown):
            ids = store.state_ids()
            added = store.state_marks(sorted(ids - self._shown.keys()))
            for env_id in self._shown.keys() - ids:
                self._put(env_id, None)
            for m in added:
                self._put(m.env_id, m)

    def _reload(self, store: FleetSource, mark: tuple[int, datetime | None]) -> None:
        """Everything again: at the first scrape and after a catalogue sync. The transitions
        are passed over first: a state that changes meanwhile is read again next time."""
        if self._mark is None:
            generation, rows = store.generation(), []
        else:  # the cursor goes on: its holes may still fill
            generation, rows = 0, store.transitions_after(self._cursor.high, self._cursor.holes)
        suite_of = store.environment_suites()
        marks = {m.env_id: m for m in store.state_marks()}
        if self._mark is None:
            self._cursor = IdCursor(generation)
        self._cursor.take(tid for tid, _ in rows)
        self.suite_of, self._mark = suite_of, mark
        for env_id in self._shown.keys() - marks.keys():
            self._put(env_id, None, counted=False)
        for env_id, m in marks.items():
            self._put(env_id, m, counted=False)
        self._by_state, self._open, self._q = Counter(), Counter(), Counter()
        for env_id in self.suite_of:
            self._count(env_id, 1)
        self._members = Counter(self.suite_of.values())
        self.suites_version += 1

    def _put(self, env_id: str, mark: StateMark | None, counted: bool = True) -> None:
        """Show ``mark`` for ``env_id`` (None: it has no state row any more); ``counted``
        False: the suites' counts are rebuilt after, not kept up."""
        old = self._shown.get(env_id)
        new = None if mark is None else _Shown(
            self.suite_of.get(env_id, mark.suite), mark.state, mark.quarantined,
            mark.q_source or "")
        if new == old:
            return
        if counted:
            self._count(env_id, -1)
        if new is None:
            del self._shown[env_id]
            self._state_text.drop([env_id])
            self._q_text.drop([env_id])
        else:
            new = self._held.setdefault(new, new)
            self._shown[env_id] = new
            if self.per_environment:
                self._state_text.set(env_id, new)
                self._q_text.set(env_id, new)
        if counted:
            self._count(env_id, 1)
        if (old is not None and old.quarantined) != (new is not None and new.quarantined):
            if new is not None and new.quarantined:
                self.quarantined.add(env_id)
            else:
                self.quarantined.discard(env_id)
            self._flipped.add(env_id)

    def drain_flipped(self) -> set[str]:
        """The environments that went in or out of quarantine since the last call."""
        flipped, self._flipped = self._flipped, set()
        return flipped

    def _count(self, env_id: str, sign: int) -> None:
        """Count a member as it is shown now in its suite's counts (-1: take it out)."""
        suite = self.suite_of.get(env_id)
        if suite is None:
            return
        shown = self._shown.get(env_id)
        state = shown.state if shown is not None else str(EnvState.UNKNOWN)
        _add(self._by_state, (suite, state), sign)
        if shown is not None and shown.quarantined:
            _add(self._q, (suite, shown.source), sign)
        else:
            _add(self._open, (suite, state), sign)

    # --- families --------------------------------------------------------------------------

    def environment_parts(self) -> list[bytes]:
        """The per-environment families' text, in pieces (none when they are turned off)."""
        if not self.per_environment:
            return []
        return [*self._state_text.parts(), *self._q_text.parts()]

    def suite_families(self, suites: Sequence[SuiteRow]) -> Iterable[Metric]:
        known = sorted({s.id for s in suites} | {suite for suite, _ in self._by_state})
        counts = GaugeMetricFamily("envcheck_suite_environments",
                                   "Environments of the suite by state (unknown: never "
                                   "assessed too)", labels=["suite", "state"])
        quarantined = GaugeMetricFamily("envcheck_suite_quarantined",
                                        "Quarantined environments", labels=["suite"])
        by_source = GaugeMetricFamily(
            "envcheck_suite_quarantined_by_source",
            "Quarantined environments by who quarantined them (auto: the health model; "
            "manual: a person)", labels=["suite", "source"])
        states = sorted({*STATES, *(state for _, state in self._by_state)})
        sources = sorted({*SOURCES, *(source for _, source in self._q)})
        for suite in known:
            for state in states:
                counts.add_metric([suite, state], self._by_state[(suite, state)])
            quarantined.add_metric([suite], sum(self._q[(suite, s)] for s in sources))
            for source in sources:
                by_source.add_metric([suite, source], self._q[(suite, source)])
        fraction = GaugeMetricFamily("envcheck_suite_healthy_fraction",
                                     "Share of the suite schedulers may use now",
                                     labels=["suite"])
        for suite_ref in sorted(suites, key=lambda s: s.id):
            members = self._members[suite_ref.id]
            open_by_state = {state: self._open[(suite_ref.id, state)] for state in states}
            allowed = allowed_count(open_by_state, suite_ref.allow_degraded)
            fraction.add_metric([suite_ref.id], allowed / members if members else 0.0)
        return counts, quarantined, by_source, fraction
