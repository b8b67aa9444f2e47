"""What the rollout tests share: a small fleet (one environment retired), records as a trainer
writes them, and the store's rollout tables read whole, to show that nothing changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from envcheck.catalogue.models import Environment, Suite
from envcheck.store import Store
from envcheck.store.core_tables import PRODUCERS, ROLLOUTS, UNKNOWN_ROLLOUTS

SUITE = "train"
ENV_IDS = ("roll-a", "roll-b", "roll-c")
RETIRED = "roll-gone"
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
H0 = NOW - timedelta(hours=5)  # an hour start, well in the past and within retention


def fleet(store: Store) -> None:
    """The three environments of :data:`ENV_IDS`, and :data:`RETIRED`, which left."""
    envs = [Environment(id=i, image=f"demo/{i}:1", suite=SUITE) for i in (*ENV_IDS, RETIRED)]
    store.sync_suites([Suite(id=SUITE, description="rollouts", allow_degraded=False,
                             environment_ids=tuple(e.id for e in envs), file="t.yaml")])
    store.sync_environments(envs)
    store.retire_absent(ENV_IDS)


def record(seq: int, env_id: str = "roll-a", *, at: datetime | None = None,
           producer: str = "run-1", outcome: str = "ok", **extra: Any) -> dict[str, Any]:
    """One record of the wire format (``at`` as ISO text, default ``H0`` + ``seq`` s)."""
    when = at if at is not None else H0 + timedelta(seconds=seq % 3600)
    return {"env_id": env_id, "at": when.isoformat(), "producer": producer, "seq": seq,
            "outcome": outcome, **extra}


def batch(first: int, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [record(first + i, **kwargs) for i in range(n)]


def tables(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the rollout tables, in key order."""
    out = {}
    with store.engine.connect() as conn:
        for name, table in (("rollup", ROLLOUTS), ("producer", PRODUCERS),
                            ("unknown", UNKNOWN_ROLLOUTS)):
            keys = list(table.primary_key.columns)
            out[name] = [tuple(r) for r in conn.execute(select(table).order_by(*keys))]
    return out


def totals(store: Store) -> dict[tuple[str, str], int]:
    """Rollouts counted per environment and outcome, over every row of either period."""
    out: dict[tuple[str, str], int] = {}
    for row in store.rollout_rows():
        out[(row.env_id, row.outcome)] = out.get((row.env_id, row.outcome), 0) + row.count
    return out
