"""The reads taint needs (mixed into ``Store``): for each environment whose record ever showed
an untrusted state, its transitions (the store's own records), its stored state, the results
and rollout counters its evidence points at, as plain frozen values (the health model's
:mod:`envcheck.health.taint` turns them into intervals; the store holds no policy, so the
caller names the states and reasons that matter).

**One pass per read.** The environments concerned are those a transition or the stored state
ever put in one of the named states or reasons, found in one statement; every other read
takes them as a subquery (or, when they are a few hundred at most, as their ids), so each is
one statement whatever their number (never one per environment, nor per batch of ids), all
in one snapshot: a prune folding results meanwhile is seen whole or not at all.

What the prune leaves (:mod:`envcheck.store.prune`): every result a transition or a
quarantine cites, the health model's window, failures for ``others_days``; older results
live on as ``total`` rollups per environment, kind and digest (no spec hash), which is why the
first appearance of an identity is read from both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    String,
    and_,
    case,
    cast,
    false,
    func,
    or_,
    select,
    true,
    union,
)

from envcheck.core.rollouts import ENVIRONMENT_OUTCOMES
from envcheck.store.core_tables import (
    ENVS,
    INCIDENTS,
    RESULTS,
    ROLLOUTS,
    ROLLUPS,
    STATES,
    TRANSITIONS,
)
from envcheck.store.tables.rollups import RollupPeriod
from envcheck.store.tables.states import Transition
from envcheck.store.views.common import PageViews, like_pattern

__all__ = ["MAX_IDS", "DigestFolded", "EnvTaintFacts", "FailingHour", "IdentitySeen",
           "StateFact", "SuspectResult", "TaintViews"]

MAX_IDS = 500  # environment ids one read names: under SQLite's limit of bound parameters

_FAILING = ("fail", "flaky")
_PASS = "pass"


@dataclass(frozen=True, slots=True)
class StateFact:
    """An environment's stored state now (``env_state``)."""

    state: str
    reason: str
    quarantined: bool = False
    q_source: str | None = None
    q_since: datetime | None = None
    q_reason: str | None = None
    q_evidence: tuple[int, ...] = ()
    image_digest: str | None = None
    kinds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    rollouts: Mapping[str, Any] | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SuspectResult:
    """A stored result that failed (``fail``, ``flaky``) or passed with a reason that taints."""

    id: int
    kind: str
    status: str
    reason: str
    started_at: datetime
    image_digest: str | None
    spec_hash: str
    run_id: str = ""


@dataclass(frozen=True, slots=True)
class IdentitySeen:
    """The raw results of one identity (kind, image digest, spec hash): the first, and the
    first that passed (None: none did)."""

    kind: str
    image_digest: str | None
    spec_hash: str
    first_at: datetime
    first_pass_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DigestFolded:
    """Results of one kind and image digest folded into the ``total`` rollups by a prune (the
    rollups keep no spec hash): the first, and the first that passed."""

    kind: str
    image_digest: str | None
    first_at: datetime
    first_pass_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FailingHour:
    """One hour of an image digest's rollouts with environment-caused failures (``image_digest``
    None: the trainer named none): how many, and when the first was."""

    hour: datetime
    image_digest: str | None
    failures: int
    first_at: datetime


@dataclass(frozen=True, slots=True)
class EnvTaintFacts:
    """Everything taint reads of one environment."""

    env_id: str
    suite: str
    transitions: tuple[Transition, ...] = ()  # oldest first
    state: StateFact | None = None
    suspects: tuple[SuspectResult, ...] = ()
    identities: tuple[IdentitySeen, ...] = ()
    folded: tuple[DigestFolded, ...] = ()
    failing_hours: tuple[FailingHour, ...] = ()  # oldest first
    # the first rollout of each image digest the trainer named (any outcome)
    rollout_digests: Mapping[str, datetime] = field(default_factory=dict)
    incident_runs: frozenset[str] = frozenset()  # cycles judged incidents: they count nothing


def _digest(value: str | None) -> str | None:
    return value or None  # the counters' '' is "none named"


class TaintViews(PageViews):
    """Taint's reads: needs what :class:`PageViews` needs."""

    def taint_facts(self, *, states: Collection[str], reasons: Collection[str],
                    suite: str | None = None, env_ids: Collection[str] | None = None,
                    active_since: datetime | None = None) -> list[EnvTaintFacts]:
        """The facts of every environment (of ``suite``, of ``env_ids`` if given: at most
        :data:`MAX_IDS`) that a transition or its stored state ever put in one of ``states``
        (or quarantined, or degraded with a reason naming one of ``reasons``), by id.

        ``active_since``: only those that may have been untrusted since: a transition since
        then (a stretch that ended after it ended with one), or a stored state that is still
        one of ``states``, degraded or quarantined. A reader of recent intervals then reads
        the few environments that matter, not every one the fleet's history ever flagged."""
        if env_ids is not None and len(env_ids) > MAX_IDS:
            raise ValueError(f"{len(env_ids)} environment ids: at most {MAX_IDS} a read")
        concerned = _concerned(states, reasons, suite, env_ids, active_since)
        with self.snapshot() as conn:
            envs = {i: su for i, su in conn.execute(concerned)}
            if not envs:
                return []
            # a few: their ids as they are (each read an index lookup), else as the subquery
            ids: Any = sorted(envs) if len(envs) <= MAX_IDS else select(
                concerned.subquery().c.id)
            incidents = frozenset(r for (r,) in conn.execute(select(INCIDENTS.c.run_id)))
            parts: dict[str, dict[str, Any]] = {e: {} for e in envs}
            self._read_record(conn, ids, parts)
            self._read_results(conn, ids, reasons, parts)
            self._read_rollouts(conn, ids, parts)
        return [EnvTaintFacts(env_id=e, suite=envs[e], incident_runs=incidents, **parts[e])
                for e in sorted(envs)]

    def _read_record(self, conn: Connection, ids: Any,
                     parts: dict[str, dict[str, Any]]) -> None:
        t = TRANSITIONS
        rows = conn.execute(select(t).where(t.c.env_id.in_(ids))
                            .order_by(t.c.env_id, t.c.at, t.c.id))
        _put(parts, "transitions", ((r.env_id, Transition(**r._mapping)) for r in rows))
        for r in conn.execute(select(STATES).where(STATES.c.env_id.in_(ids))):
            parts[r.env_id]["state"] = StateFact(
                r.state, r.reason, bool(r.quarantined), r.q_source, r.q_since, r.q_reason,
                tuple(int(i) for i in r.q_evidence or ()), r.image_digest, dict(r.kinds or {}),
                dict(r.rollouts) if r.rollouts is not None else None, r.updated_at)

    def _read_results(self, conn: Connection, ids: Any, reasons: Collection[str],
                      parts: dict[str, dict[str, Any]]) -> None:
        r = RESULTS
        suspects = (select(r.c.id, r.c.env_id, r.c.kind, r.c.status, r.c.reason,
                           r.c.started_at, r.c.image_digest, r.c.spec_hash, r.c.run_id)
                    .where(r.c.env_id.in_(ids),
                           or_(r.c.status.in_(_FAILING), r.c.reason.in_(list(reasons))))
                    .order_by(r.c.env_id, r.c.started_at, r.c.id))
        _put(parts, "suspects", ((x.env_id, SuspectResult(
            x.id, x.kind, x.status, x.reason, x.started_at, x.image_digest, x.spec_hash,
            x.run_id)) for x in conn.execute(suspects)))
        first_pass = func.min(case((r.c.status == _PASS, r.c.started_at)))
        seen = (select(r.c.env_id, r.c.kind, r.c.image_digest, r.c.spec_hash,
                       func.min(r.c.started_at), first_pass)
                .where(r.c.env_id.in_(ids))
                .group_by(r.c.env_id, r.c.kind, r.c.image_digest, r.c.spec_hash))
        _put(parts, "identities", ((e, IdentitySeen(k, d, s, first, passed))
                                   for e, k, d, s, first, passed in conn.execute(seen)))
        u = ROLLUPS
        folded = (select(u.c.env_id, u.c.kind, u.c.image_digest, func.min(u.c.first_at),
                         func.min(case((u.c.status == _PASS, u.c.first_at))))
                  .where(u.c.env_id.in_(ids), u.c.period == RollupPeriod.TOTAL.value)
                  .group_by(u.c.env_id, u.c.kind, u.c.image_digest))
        _put(parts, "folded", ((e, DigestFolded(k, _digest(d), first, passed))
                               for e, k, d, first, passed in conn.execute(folded)))

    def _read_rollouts(self, conn: Connection, ids: Any,
                       parts: dict[str, dict[str, Any]]) -> None:
        o = ROLLOUTS
        failing = (select(o.c.env_id, o.c.hour, o.c.image_digest, func.sum(o.c.count),
                          func.min(o.c.first_at))
                   .where(o.c.env_id.in_(ids),
                          o.c.outcome.in_(sorted(str(x) for x in ENVIRONMENT_OUTCOMES)))
                   .group_by(o.c.env_id, o.c.hour, o.c.image_digest)
                   .order_by(o.c.env_id, o.c.hour, o.c.image_digest))
        _put(parts, "failing_hours", ((e, FailingHour(h, _digest(d), int(n), first))
                                      for e, h, d, n, first in conn.execute(failing)))
        digests = (select(o.c.env_id, o.c.image_digest, func.min(o.c.first_at))
                   .where(o.c.env_id.in_(ids), o.c.image_digest != "")
                   .group_by(o.c.env_id, o.c.image_digest))
        for e, d, first in conn.execute(digests):
            parts[e].setdefault("rollout_digests", {})[d] = first


def _concerned(states: Collection[str], reasons: Collection[str], suite: str | None,
               env_ids: Collection[str] | None, active_since: datetime | None) -> Select[Any]:
    """The environments concerned (id, suite): every read takes its ids as a subquery, so
    each is one statement the database joins, whatever their number."""
    def named(column: Any) -> Any:
        return or_(false(), *(column.like(like_pattern(r), escape="\\") for r in reasons))

    t, s = TRANSITIONS, STATES
    ever = select(t.c.env_id).where(or_(
        t.c.new_state.in_(list(states)), t.c.quarantined == true(),
        and_(t.c.new_state == "degraded", named(t.c.reason))))
    now = select(s.c.env_id).where(or_(
        s.c.state.in_(list(states)), s.c.quarantined == true(),
        and_(s.c.state == "degraded", or_(named(s.c.reason), named(cast(s.c.kinds, String))))))
    query = select(ENVS.c.id, ENVS.c.suite).where(ENVS.c.id.in_(union(ever, now)))
    if active_since is not None:
        lately = select(t.c.env_id).where(t.c.at >= active_since)
        still = select(s.c.env_id).where(or_(s.c.state.in_([*states, "degraded"]),
                                             s.c.quarantined == true()))
        query = query.where(ENVS.c.id.in_(union(lately, still)))
    if suite is not None:
        query = query.where(ENVS.c.suite == suite)
    if env_ids is not None:
        query = query.where(ENVS.c.id.in_(sorted(env_ids)))
    return query


def _put(parts: dict[str, dict[str, Any]], name: str, rows: Iterable[tuple[str, Any]]) -> None:
    """Rows (env id, value) gathered per environment as the tuple ``name``."""
    gathered: defaultdict[str, list[Any]] = defaultdict(list)
    for env_id, value in rows:
        gathered[env_id].append(value)
    for env_id, values in gathered.items():
        parts[env_id][name] = tuple(values)
