"""The simulated fleet of ``bench/store_month.py``: environments, what each probe of theirs
answers at any simulated instant, and the rows that answer makes in the store.

**Environments**: ``env-000000`` on, a quarter each in four suites (as bench/catalogue.py):
terminal only, + dependencies, + tests, + a data source (``source-00`` to ``source-19``).
Every one has the default schedules (:class:`envcheck.catalogue.models.Schedules`: terminal
and data sources every 5 min, dependencies every hour, tests every 6 h, jitter up to 30 s,
four times slower while quarantined), each job at its own phase.

**Profiles** (a seeded draw per environment): *healthy* (a one-off slow shell in 2,000
terminal probes), *flaky* (a slow shell in 8% of terminal probes, a 5xx in 10% of data-source
samples, nondeterministic tests in 25% of test runs), *degraded* (data-source environments
only: 40% of probes pass after a retry), *broken* (at a random time of the month a new image
fails its environment's main probe until a fixed image comes 12 h to 5 days later, never for
30% of them) and *outage* (the image is missing from the host for 2 to 24 hours).

**What each result holds** is a real result: ``monthfleet.json`` holds results the probes
wrote (``envcheck check probes/demo.yaml probes/demo-tests.yaml probes/demo-deps.yaml
probes/demo-sources.yaml`` on the demo images): summary, duration, evidence and details, as
stored. The data-source passes, flaky and degraded answers, which need a served API, have the
failing answer's shape with an API's answer in their evidence. Durations vary by +-30%.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from envcheck.catalogue.models import Environment, Schedules, Suite
from envcheck.catalogue.probe_specs import DependencySpec, TestSpec
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = 3600.0
DAY = 24 * HOUR
TEMPLATES = Path(__file__).with_name("monthfleet.json")
SOURCES = 20
MONTH = 30  # days over which breakages and outages start
# suite -> probe kinds of its environments
SUITE_KINDS: dict[str, tuple[str, ...]] = {
    "month-terminal": ("terminal",),
    "month-deps": ("terminal", "dependencies"),
    "month-tests": ("terminal", "tests"),
    "month-sources": ("terminal", "datasource"),
}
SCHEDULES = Schedules()
INTERVALS = {str(k): float(getattr(SCHEDULES, str(k))) for k in ProbeKind}
PROFILES = (("flaky", 0.05), ("degraded", 0.03), ("broken", 0.04), ("outage", 0.02))
# the result columns the bench writes, in this order (id is the database's)
COLUMNS = ("run_id", "env_id", "kind", "status", "reason", "summary", "duration_s",
           "image_digest", "spec_hash", "started_at", "evidence", "details")
F2P = ["tests/test_stats.py::test_median_even_length"]
P2P = ["tests/test_stats.py::test_median_odd_length", "tests/test_stats.py::test_mean"]


@dataclass(frozen=True, slots=True)
class Template:
    """A stored result to copy: its evidence and details as dicts and as the JSON text the
    store holds (each written once, whatever the number of rows)."""

    kind: str
    status: str
    reason: str
    summary: str
    duration_s: float
    evidence: list[dict[str, Any]]
    details: dict[str, Any]
    evidence_json: str
    details_json: str


def load_templates() -> dict[tuple[str, str, str], Template]:
    """Keyed by (kind, status, reason); data-source ones also per source (``kind`` then
    ``datasource:source-NN``), naming the environment's own source."""
    out: dict[tuple[str, str, str], Template] = {}
    for doc in json.loads(TEMPLATES.read_text(encoding="utf-8")):
        variants = [(doc["kind"], doc)]
        if doc["kind"] == "datasource":
            text = json.dumps(doc).replace('"prices"', '"{source}"')
            variants = [(f"datasource:source-{s:02d}",
                         json.loads(text.replace("{source}", f"source-{s:02d}")))
                        for s in range(SOURCES)]
        for kind, d in variants:
            out[(kind, d["status"], d["reason"])] = Template(
                d["kind"], d["status"], d["reason"], d["summary"], d["duration_s"],
                d["evidence"], d["details"], json.dumps(d["evidence"]), json.dumps(d["details"]))
    return out


@dataclass(frozen=True, slots=True)
class SimEnv:
    index: int
    id: str
    suite: str
    kinds: tuple[str, ...]
    profile: str
    phases: tuple[float, ...]  # per kind: seconds after T0 of its first probe
    event: tuple[float, float]  # broken / outage: from, until (seconds after T0); else empty
    source: str | None
    digests: tuple[str, str, str]  # the image: first, broken, fixed
    spec_hashes: tuple[str, ...]  # per kind

    def digest_at(self, t: float) -> str:
        if self.profile == "broken" and t >= self.event[0]:
            return self.digests[1] if t < self.event[1] else self.digests[2]
        return self.digests[0]

    def main_kind(self) -> str:
        """The probe a broken image fails: the environment's own kind, else the terminal."""
        return self.kinds[-1]


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def fleet(n: int, seed: int = 20260101) -> list[SimEnv]:
    """``n`` environments, each drawn on its own (environment i is the same in any fleet of
    more than i); breakages and outages start within :data:`MONTH` days, so a shorter run
    is the start of the same month."""
    out = []
    suites = list(SUITE_KINDS)
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        suite = suites[i % len(suites)]
        kinds = SUITE_KINDS[suite]
        roll, profile = rng.random(), "healthy"
        for name, share in PROFILES:
            if roll < share:
                profile = name
                break
            roll -= share
        if profile == "degraded" and "datasource" not in kinds:
            profile = "healthy"
        event: tuple[float, float] = (float("inf"), float("inf"))
        if profile == "broken":
            start = rng.uniform(0.5 * DAY, MONTH * DAY)
            end = start + rng.uniform(12 * HOUR, 5 * DAY) if rng.random() < 0.7 \
                else float("inf")
            event = (start, end)
        elif profile == "outage":
            start = rng.uniform(0.5 * DAY, MONTH * DAY)
            event = (start, start + rng.uniform(2 * HOUR, 24 * HOUR))
        env_id = f"env-{i:06d}"
        out.append(SimEnv(
            i, env_id, suite, kinds, profile,
            tuple(rng.uniform(0, INTERVALS[k]) for k in kinds), event,
            f"source-{i % SOURCES:02d}" if "datasource" in kinds else None,
            tuple(f"sha256:{_hex(f'{env_id}:{v}', 64)}" for v in ("v1", "v2", "v3")),
            tuple(_hex(f"{env_id}:{k}", 16) for k in kinds)))
    return out


def environment(env: SimEnv) -> Environment:
    """The catalogue's model of ``env`` (what the health model and the store's sync read)."""
    spec: dict[str, Any] = {"id": env.id, "suite": env.suite, "tools": ["git", "python3"],
                            "image": f"registry.example/month/{env.id}:1"}
    if "dependencies" in env.kinds:
        spec["dependencies"] = DependencySpec(python={"pytest": ">=7.2,<8"})
    if "tests" in env.kinds:
        spec["tests"] = TestSpec(command="JUNIT={junit} /opt/task/run_tests.sh {tests}",
                                 fail_to_pass=F2P, pass_to_pass=P2P)
    if env.source is not None:
        spec["data_sources"] = [env.source]
    return Environment(**spec)


def suites(envs: list[SimEnv]) -> list[Suite]:
    return [Suite(id=s, description=f"bench/store_month.py: {'+'.join(k)}",
                  allow_degraded=False, file="bench",
                  environment_ids=tuple(e.id for e in envs if e.suite == s))
            for s, k in SUITE_KINDS.items()]


def outcome(env: SimEnv, kind: str, t: float, rng: random.Random) -> tuple[str, str]:
    """(status, reason) of ``env``'s ``kind`` probe started at ``t``."""
    start, end = env.event
    if start <= t < end:
        if env.profile == "outage":
            return ("error", "image_missing")
        if kind == env.main_kind():
            return {"terminal": ("fail", "tool_missing"),
                    "dependencies": ("fail", "package_missing"),
                    "tests": ("fail", "p2p_broken"),
                    "datasource": ("fail", "connection_refused")}[kind]
    roll = rng.random()
    if env.profile == "flaky":
        if kind == "terminal" and roll < 0.08:
            return ("fail", "shell_slow")
        if kind == "datasource" and roll < 0.10:
            return ("flaky", "http_5xx")
        if kind == "tests" and roll < 0.25:
            return ("flaky", "nondeterministic")
    elif env.profile == "degraded" and kind == "datasource" and roll < 0.4:
        return ("pass", "recovered_after_retry")
    elif kind == "terminal" and roll < 0.0005:
        return ("fail", "shell_slow")
    return ("pass", "ok")


def due(env: SimEnv, k: int, start: float, end: float, quarantined: bool) -> Iterator[float]:
    """Start times in [start, end) of ``env``'s ``k``-th kind: its phase plus whole
    intervals (slower while quarantined), each late by its own jitter (a fixed draw per
    slot, so an hour's edge splits the slots the same way from either side)."""
    interval = INTERVALS[env.kinds[k]] * (SCHEDULES.quarantined_factor if quarantined else 1)
    n = max(0, int((start - SCHEDULES.jitter_s - env.phases[k]) // interval))
    while True:  # slots until the hour's end
        slot = env.phases[k] + n * interval
        if slot >= end:
            return
        t = slot + SCHEDULES.jitter_s * ((env.index * 1_000_003 + k * 7919 + n * 104_729)
                                         % 30_011) / 30_011
        if start <= t < end:
            yield t
        n += 1


class Results:
    """What the fleet's probes answer, as rows of :data:`COLUMNS` (started_at as seconds
    after T0 until :meth:`rows` makes it a datetime) and as :class:`ProbeResult`."""

    def __init__(self, envs: list[SimEnv], seed: int = 1) -> None:
        self.envs, self.seed = envs, seed
        self.templates = load_templates()

    def template(self, env: SimEnv, kind: str, status: str, reason: str) -> Template:
        key = f"datasource:{env.source}" if kind == "datasource" else kind
        return self.templates[(key, status, reason)]

    def hour(self, start: float, quarantined: set[str]) -> list[tuple[Any, ...]]:
        """Every result started in the hour from ``start`` (seconds after T0), oldest first:
        (seconds, env, kind index, status, reason, duration factor)."""
        rng = random.Random(self.seed * 1_000_003 + int(start))
        end = start + HOUR
        out = []
        for env in self.envs:
            held = env.id in quarantined
            for k, kind in enumerate(env.kinds):
                for t in due(env, k, start, end, held):
                    out.append((t, env, k, *outcome(env, kind, t, rng),
                                rng.uniform(0.7, 1.3)))
        out.sort(key=lambda r: r[0])
        return out

    def row(self, item: tuple[Any, ...]) -> tuple[Any, ...]:
        """A row of :data:`COLUMNS` (evidence and details as the store's JSON text)."""
        t, env, k, status, reason, factor = item
        kind = env.kinds[k]
        tpl = self.template(env, kind, status, reason)
        digest = None if reason == "image_missing" else env.digest_at(t)
        return (run_id(t), env.id, kind, status, reason, tpl.summary,
                round(tpl.duration_s * factor, 4), digest, env.spec_hashes[k],
                T0 + timedelta(seconds=t), tpl.evidence_json, tpl.details_json)

    def result(self, item: tuple[Any, ...]) -> tuple[str, ProbeResult]:
        """(run id, result) of the same item, for the store's own write path."""
        t, env, k, status, reason, factor = item
        kind = env.kinds[k]
        tpl = self.template(env, kind, status, reason)
        return run_id(t), ProbeResult(
            env_id=env.id, kind=ProbeKind(kind), status=Status(status), reason=Reason(reason),
            summary=tpl.summary, duration_s=round(tpl.duration_s * factor, 4),
            image_digest=None if reason == "image_missing" else env.digest_at(t),
            spec_hash=env.spec_hashes[k], started_at=T0 + timedelta(seconds=t),
            evidence=tuple(CommandEvidence(**e) for e in tpl.evidence), details=tpl.details)


def run_id(t: float) -> str:
    """The daemon's check run a result started at ``t`` lands in: one a minute (its window)."""
    return f"sim-{int(t // 60):06d}"


def runs(start: float, end: float) -> list[dict[str, Any]]:
    """The check runs (one a minute) of [start, end), finished."""
    first, last = int(start // 60), int(-(-end // 60))
    return [{"id": f"sim-{m:06d}", "started_at": T0 + timedelta(minutes=m),
             "finished_at": T0 + timedelta(minutes=m + 1), "state": "finished",
             "trigger": "daemon", "host": "bench", "pid": 0, "catalogue_files": []}
            for m in range(first, last)]
