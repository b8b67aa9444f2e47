"""A store holding a watched tag that moved (``pull: watch``): the results of each digest it
pointed at, the new one validated in every kind; beside it a local image's environment and a
watched one never probed. What the digest history's API and dashboard tests read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from envcheck.catalogue.models import Environment, Suite
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.store import Store

__all__ = ["LOCAL", "NEW", "OLD", "T0", "seed_moved_tag"]

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
OLD, NEW, LOCAL = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64
IM, T, D, X = ProbeKind.IMAGE, ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS
P, F = Status.PASS, Status.FAIL

# (minutes after T0, kind, status, digest): the tag named OLD, then moved to NEW at 15 min,
# which was then validated in full
WATCHED = [(0, IM, P, OLD), (1, T, P, OLD), (2, D, F, OLD), (5, IM, P, OLD), (10, IM, P, OLD),
           (15, IM, P, NEW), (16, T, P, NEW), (17, D, P, NEW), (18, X, P, NEW)]


def record(store: Store, env_id: str, rows: list[tuple[int, ProbeKind, Status, str]]
           ) -> list[int]:
    run_id = store.start_run("test", [])
    ids = [store.record(run_id, ProbeResult(
        env_id=env_id, kind=kind, status=status,
        reason=Reason.OK if status is P else Reason.VERSION_DRIFT, summary=f"{kind} {status}",
        duration_s=0.5, image_digest=digest, spec_hash=f"spec-{kind}",
        started_at=T0 + timedelta(minutes=minute))) for minute, kind, status, digest in rows]
    store.finish_run(run_id)
    return ids


def seed_moved_tag(store: Store) -> list[int]:
    """Syncs ``watched-task`` (its results: ``WATCHED``), ``local-task`` (one result on
    ``LOCAL``) and ``never-probed`` in suite ``reg``; the ids of ``watched-task``'s results."""
    envs = [Environment(id="watched-task", suite="reg", pull="watch",
                        image="127.0.0.1:5055/team/task:latest"),
            Environment(id="local-task", suite="reg", image="fleet/local:1"),
            Environment(id="never-probed", suite="reg", pull="watch",
                        image="127.0.0.1:5055/team/other:latest")]
    store.sync_suites([Suite(id="reg", description="", file="r.yaml", allow_degraded=False,
                             environment_ids=tuple(e.id for e in envs))])
    store.sync_environments(envs)
    ids = record(store, "watched-task", WATCHED)
    record(store, "local-task", [(3, T, P, LOCAL)])
    return ids
