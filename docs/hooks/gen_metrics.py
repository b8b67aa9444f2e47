"""The metrics' reference: every family a daemon exports, with its type, labels and help,
read from the collector's own exposition over a small scratch store.

The store is given a catalogue (the demo suite) and a scheduler (built, never started) with a
fleet and a suite budget; after a first scrape, one probe result of each telling kind, a
quarantine and a batch of rollouts through the same calls the daemon makes, so that every
family has series and its labels show. The process's and the lease's series come from the
daemon's own registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from docs.hooks.tables import cell, code, table

__all__ = ["metric_families", "metrics_reference"]

Family = tuple[str, str, list[str], str]  # name as scraped, type, labels, help


def _seed(store: Any, catalogue: Any) -> None:
    from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
    from envcheck.core.rollouts import Outcome, Rollout
    from envcheck.feed.assess import evaluate

    now = datetime.now(UTC)
    run_id = store.start_run("docs", [])

    def record(env_id: str, kind: ProbeKind, status: Status, reason: Reason, ago_s: float,
               details: dict[str, Any] | None = None) -> None:
        store.record(run_id, ProbeResult(
            env_id=env_id, kind=kind, status=status, reason=reason, summary=str(reason),
            duration_s=1.0, image_digest=f"sha256:{env_id}", spec_hash="spec",
            started_at=now - timedelta(seconds=ago_s), details=details or {}))

    record("demo-healthy", ProbeKind.TERMINAL, Status.PASS, Reason.OK, 30)
    for ago in (20, 10):
        record("demo-tool-missing", ProbeKind.TERMINAL, Status.FAIL, Reason.TOOL_MISSING, ago)
    record("demo-healthy", ProbeKind.TESTS, Status.PASS, Reason.REWARD_HACKABLE, 5,
           {"adversarial": {"rewarded": ["tests_rewritten"]}, "depth": {"mode": "full"}})
    record("demo-healthy", ProbeKind.DATASOURCE, Status.PASS, Reason.OK, 5, {"sources": {
        "weather": {"status": "pass", "reason": "ok", "availability": 1.0,
                    "latency_ms": {"p50": 12.0, "p95": 30.0, "max": 41.0}}}})
    store.finish_run(run_id)
    store.record_incident(run_id, "failure_storm", 4, 5, "4 of 5 probes failed at once")
    evaluate(store, catalogue.environments)
    store.record_rollouts([Rollout("demo-healthy", now - timedelta(minutes=5), "docs", seq,
                                   Outcome.SANDBOX_LOST if seq % 4 == 0 else Outcome.OK)
                           for seq in range(40)])
    store.apply("demo-healthy", "demo", {"rollouts": {"state": "degraded", "flagged": True,
                                                      "reason": "rollout_failures"}}, None)


def _registry_stats() -> Any:
    """The registry stage's counters with one of each: a look, a pull, an eviction, a hit and
    a miss under a budget (a daemon with ``pull: watch`` environments exports them)."""
    from envcheck.registry.stats import RegistryStats

    stats = RegistryStats()
    stats.looked("ghcr.io", "ok", 0.05, rate_remaining=4999)
    stats.pulled("ghcr.io", "ok", 12.0, 256 << 20)
    stats.cache(1 << 30, 20 << 30)
    stats.evicted(256 << 20)
    stats.looked_up(hit=True)
    stats.looked_up(hit=False)
    return stats


def metric_families(store: Any, root: Path) -> list[Family]:
    """Every family of a scrape, in the exposition's order."""
    from prometheus_client.parser import text_string_to_metric_families

    from envcheck.catalogue.loader import load_catalogue
    from envcheck.feed.assess import StoreAssessment
    from envcheck.metrics import StoreMetrics
    from envcheck.metrics.images import RegistrySeries
    from envcheck.metrics.own import own_registry
    from envcheck.schedule.budget import BudgetLimits
    from envcheck.schedule.scheduler import ProbeScheduler

    catalogue = load_catalogue([root / "probes" / "demo.yaml"])
    store.sync_suites(catalogue.suites)
    store.sync_environments(catalogue.environments)
    scheduler = ProbeScheduler(catalogue, executor=None, store=store,  # type: ignore[arg-type]
                               assessment=StoreAssessment(store),
                               budget=BudgetLimits(fleet=36000.0, suites={"demo": 3600.0}))
    own = own_registry(lambda: True)
    own.register(RegistrySeries(_registry_stats().snapshot))
    metrics = StoreMetrics(store, scheduler, registry=own)
    metrics.render()  # the counters count what is stored from the first scrape on
    _seed(store, catalogue)
    text = metrics.render().decode()
    declared: dict[str, list[str]] = {  # a family's labels where it has no series
        f.name: list(getattr(f, "_labelnames", ())) for f in metrics.registry.collect()}
    families: list[Family] = []
    for family in text_string_to_metric_families(text):
        seen = {key for s in family.samples for key in s.labels} - {"le"}
        labels = sorted(seen or declared.get(family.name, []))
        name = family.name + ("_total" if family.type == "counter" else "")
        families.append((name, family.type, labels, family.documentation))
    return families


def metrics_reference(families: list[Family]) -> str:
    own = [f for f in families if not f[0].startswith("envcheck_")]
    rows = [[code(name), kind, ", ".join(code(label) for label in labels), cell(doc)]
            for name, kind, labels, doc in families if name.startswith("envcheck_")]
    own_names = ", ".join(code(name) for name, *_ in own)
    return (table(["metric", "type", "labels", "what it measures"], rows)
            + f"\nBeside them, the process's own series (every daemon, a standby too): "
              f"{own_names}.\n")
