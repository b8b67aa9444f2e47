"""An environment as its page shows it, the same in the API and the dashboard: its stored
state read through the quarantine policy's one rule (:func:`~envcheck.health.quarantine.standing`).

Apart from :mod:`envcheck.health.quarantine` because it reads the store's records, which
``envcheck gate`` (through the allowlist) must not import.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from envcheck.core.states import EnvState
from envcheck.health.quarantine import standing
from envcheck.health.sprt import KindHealth
from envcheck.store.tables.catalogue import SuiteRow
from envcheck.store.tables.states import EnvStateRow, QuarantineListing

__all__ = ["EnvSummary", "env_summary"]


@dataclass(frozen=True, slots=True)
class EnvSummary:
    state: EnvState
    reason: str
    allowed: bool  # in its suite's allowlist now
    image_digest: str | None
    updated_at: datetime | None  # when the health model last assessed it
    quarantine: QuarantineListing | None
    kinds: tuple[KindHealth, ...]  # as the health model last assessed them, in stored order
    retired_at: datetime | None = None  # left the daemon's catalogue: in no allowlist
    rollouts: dict[str, Any] | None = None  # ``env_state.rollouts``: as last judged


def env_summary(row: EnvStateRow | None, suite: SuiteRow | None,
                retired_at: datetime | None = None) -> EnvSummary:
    """An environment's summary from its state row (None: never assessed), its suite (None:
    not synced, so nothing degraded is allowed) and when it retired (then never allowed)."""
    now = standing(row, suite is not None and suite.allow_degraded)
    allowed = now.allowed and retired_at is None
    if row is None:
        return EnvSummary(now.state, now.reason, allowed, None, None, None, (), retired_at)
    return EnvSummary(
        now.state, now.reason, allowed, row.image_digest, row.updated_at,
        QuarantineListing.of(row) if now.quarantined else None,
        tuple(KindHealth.from_json(k, v) for k, v in row.kinds.items()), retired_at,
        row.rollouts)
