"""The quarantine page's reads: who is quarantined, by whom and why, and the audit history of
transitions (also shown per environment on its page)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, func, select, true

from envcheck.store.core_tables import STATES, TRANSITIONS, not_retired
from envcheck.store.tables.states import QuarantineListing, Transition
from envcheck.store.views.common import Page, PageViews, clamp, like_pattern

__all__ = ["QuarantineViews"]


class QuarantineViews(PageViews):
    """The quarantine page: needs what :class:`PageViews` needs."""

    def quarantine_page(self, suites: Sequence[str] = (), source: str | None = None,
                        search: str = "", offset: int = 0, limit: int = 50
                        ) -> Page[QuarantineListing]:
        """Quarantined environments, the most recently quarantined first."""
        conditions: list[ColumnElement[bool]] = [STATES.c.quarantined == true(),
                                                 not_retired(STATES.c.env_id)]
        if suites:
            conditions.append(STATES.c.suite.in_(list(suites)))
        if source:
            conditions.append(STATES.c.q_source == source)
        if search:
            conditions.append(STATES.c.env_id.like(like_pattern(search), escape="\\"))
        columns = (STATES.c.env_id, STATES.c.suite, STATES.c.state, STATES.c.q_source,
                   STATES.c.q_actor, STATES.c.q_reason, STATES.c.q_since, STATES.c.q_evidence)
        query = (select(*columns).where(*conditions)
                 .order_by(STATES.c.q_since.desc(), STATES.c.env_id)
                 .offset(max(0, offset)).limit(clamp(limit)))
        count = select(func.count()).select_from(STATES).where(*conditions)
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query).all()
        return Page(total, max(0, offset), tuple(QuarantineListing.of(r) for r in rows))

    def transition_page(self, env_id: str | None = None, quarantine_only: bool = False,
                        search: str = "", offset: int = 0, limit: int = 50
                        ) -> Page[Transition]:
        """Transitions, newest first: the audit history (``quarantine_only``: only those that
        quarantined or released)."""
        conditions: list[ColumnElement[bool]] = []
        if env_id is not None:
            conditions.append(TRANSITIONS.c.env_id == env_id)
        if quarantine_only:
            conditions.append(TRANSITIONS.c.was_quarantined != TRANSITIONS.c.quarantined)
        if search:
            conditions.append(TRANSITIONS.c.env_id.like(like_pattern(search), escape="\\"))
        query = (select(TRANSITIONS).where(and_(true(), *conditions))
                 .order_by(TRANSITIONS.c.id.desc())
                 .offset(max(0, offset)).limit(clamp(limit)))
        count = select(func.count()).select_from(TRANSITIONS).where(and_(true(), *conditions))
        with self._reading() as conn:
            total = int(conn.execute(count).scalar_one())
            rows = conn.execute(query).all()
        return Page(total, max(0, offset), tuple(
            Transition(**r._mapping) for r in rows))
