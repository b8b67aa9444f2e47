"""The fleet-cost simulation (``bench/fleet_cost.py`` runs and reports it): a fleet's terminal,
dependencies and tests probes over days of virtual time, one event at a time, with a cost
model in place of sandboxes. Everything that decides is envcheck's own code, called as the
daemon calls it: the scheduler's queue (``WorkQueue``), ledger (``Ledger.note``, ``priority``,
the digest change) and budget (``Budget``); the reuse advice (``advise_reuse``, ``HostSamples``
on a virtual clock, composed as ``feed.reuse.StoreReuse.advice`` composes them, then
``DepthAdvice.for_identity`` as the probe holds it against the digest it finds); the tests
depth (``health.depth.advise``); the health model (``assess_kind``) and the quarantine
(``decide``), over real ``ProbeResult``s whose depth details the probes' ``depth_record``
writes.

Per (environment, kind) the assessed ``KindHealth`` is cached and re-assessed only on a
result that holds runs: a reused result holds none, leaves the assessment as it was (the test
checks it) and is not kept. Under ``today`` (``reprove_every: null``) nothing reads the
terminal and dependencies assessments (``advise_reuse`` answers full before reading them)
and they always pass in this model, so they are not kept: that is what lets 86 M terminal
probes run in minutes.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from adaptive import FLAKY_P, MIX, RUN_S, run_probe

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import AdaptiveDepth, DependencySpec, TestSpec
from envcheck.core.depth import Depth, DepthAdvice, RunCount
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.states import EnvState, Observation
from envcheck.feed.reuse import HostSamples
from envcheck.health.depth import advise
from envcheck.health.quarantine import QuarantineEntry, decide
from envcheck.health.reuse import advise_reuse
from envcheck.health.sprt import EnvHealth, KindHealth, assess_kind
from envcheck.kinds.reuse import depth_record
from envcheck.schedule.budget import NEW, Budget, BudgetLimits
from envcheck.schedule.ledger import Ledger
from envcheck.schedule.workqueue import Work, WorkQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)
E0 = T0.timestamp()  # the ledger and the queue count epoch seconds
HOUR, DAY = 3600.0, 86400.0
TERMINAL, DEPS, TESTS = ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS
KINDS = (TERMINAL, DEPS, TESTS)
FULL_S = {TERMINAL: 1.0, DEPS: 1.0}  # one container, its start and its commands
IDENTITY_S = 0.02  # the tag's digest resolved, the image inspected: no container
# A quarantined environment's terminal probes run in full every 20 min for as long as the
# quarantine lasts: re-assessing that whole history at each would be quadratic. They always
# pass here, and the SPRT is bounded, so the tail decides the same state, identity and newest
# full probe, all advise_reuse reads (the test checks it).
TAIL = 64
_DONE, _DUE, _RETRY = 0, 1, 2  # at one instant, results first
RETRY_S = 5.0  # deferred work looks at the budget again (schedule.workers.BUDGET_RETRY_S)


@dataclass(frozen=True)
class Policy:
    name: str
    reuse: bool  # reprove_every as the catalogue says (else null: every probe full)
    queue_new: bool  # act on Ledger.note's new-digest keys (Workers._new_digest)
    watch: bool = False  # pull: watch images in a registry (bench/fleetwatch.py)


TODAY = Policy("today", reuse=False, queue_new=False)
REUSE = Policy("reuse", reuse=True, queue_new=True)
POLICIES = {p.name: p for p in (TODAY, REUSE)}


@dataclass
class Digest:
    start: float
    end: float
    kind: str  # healthy, flaky, broken (of the tests: bench/adaptive.py's mix)
    p: float
    name: str
    detected_at: float | None = None  # its first result
    validated_at: float | None = None  # every declared kind has a full result of it
    quarantined_at: float | None = None
    failed_at: float | None = None  # its first failing tests result (degraded)
    full: set[ProbeKind] = field(default_factory=set)
    size: float = 0.0  # bytes a pull of it moves (bench/fleetwatch.py)
    pulled_at: float | None = None  # its first pull done (bench/fleetwatch.py)


@dataclass
class SimEnv:
    index: int
    env: Environment
    run_s: float
    digests: list[Digest]
    specs: dict[ProbeKind, str]
    cur: int = 0  # the digest current at the newest probe start (time only moves on)
    health: dict[ProbeKind, KindHealth] = field(default_factory=dict)
    history: dict[ProbeKind, list[Observation]] = field(default_factory=dict)
    entry: QuarantineEntry | None = None
    state: EnvState = EnvState.UNKNOWN

    def digest_at(self, t: float) -> Digest:
        while self.cur + 1 < len(self.digests) and self.digests[self.cur + 1].start <= t:
            self.cur += 1
        return self.digests[self.cur]


def environments(n: int, pull: Literal["never", "watch"] = "never") -> list[Environment]:
    """The catalogue's models: every environment declares terminal, dependencies and tests,
    at the default schedules and reprove_every (and with ``pull: watch`` the image kind)."""
    deps = DependencySpec(python={"pytest": ">=7.2,<8"})
    tests = TestSpec(command="/opt/task/run_tests.sh {tests}", fail_to_pass=["t::f2p"],
                     pass_to_pass=["t::p2p"])
    return [Environment(id=f"env-{i:06d}", suite=f"suite-{i % 10}", image=f"fleet/env-{i}:1",
                        tools=["git"], dependencies=deps, tests=tests, pull=pull)
            for i in range(n)]


def make_fleet(envs: list[Environment], days: float, digest_mean_s: float, seed: int
               ) -> list[SimEnv]:
    """Digests change as a Poisson process; each is healthy, flaky or broken as in
    bench/adaptive.py. Seeded: every policy sees the same fleet."""
    rng, end = random.Random(seed), days * DAY
    specs = {k: envs[0].spec_hash(k) for k in envs[0].declared_kinds()}  # fleet-wide
    fleet = []
    for i, env in enumerate(envs):
        starts = [0.0]
        while (nxt := starts[-1] + rng.expovariate(1 / digest_mean_s)) < end:
            starts.append(nxt)
        digests = []
        for k, start in enumerate(starts):
            kind = rng.choices([m for m, _ in MIX], [w for _, w in MIX])[0]
            p = rng.uniform(*FLAKY_P) if kind == "flaky" else float(kind == "broken")
            stop = starts[k + 1] if k + 1 < len(starts) else float("inf")
            digests.append(Digest(start, stop, kind, p, f"sha256:{i}-{k}"))
        fleet.append(SimEnv(i, env, rng.uniform(*RUN_S), digests, specs))
    return fleet


class SimClock:
    """The virtual clock HostSamples reads (core.clock.Clock)."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.t)


@dataclass
class Tally:
    containers: dict[ProbeKind, list[int]]  # per kind, per day
    sandbox_s: dict[ProbeKind, list[float]]
    identity: list[int]  # identity checks per day
    max_lag_s: dict[ProbeKind, float] = field(default_factory=dict)  # due to started
    probes: int = 0
    busy_s: float = 0.0  # worker slots busy, identity checks included
    tests_full_on_new: int = 0  # tests probes in full queued by a new digest
    # new-digest work asked for while that kind ran, queued again when it ended although
    # the running probe had started on the new digest already (its result is of it)
    again_same_digest: int = 0
    # full terminal and dependencies probes after the warm-up, by why the advice gave
    why_full: dict[str, int] = field(default_factory=dict)


@dataclass
class Running:
    work: Work
    sim: SimEnv
    digest: Digest
    result: ProbeResult
    estimate: float
    full: bool  # a whole validation (a container for terminal/dependencies)


class Simulation:
    def __init__(self, fleet: list[SimEnv], days: float, policy: Policy, *, workers: int,
                 budget: float | None = None, host_sample_s: float | None = 600.0,
                 seed: int = 2, warmup_days: int = 1) -> None:
        self.fleet, self.end, self.policy = fleet, days * DAY, policy
        self.by_id = {s.env.id: s for s in fleet}
        self.rng = random.Random(seed)
        self.ledger = Ledger({s.env.id: s.env for s in fleet})
        self.queue = WorkQueue(per_image=workers)  # one image per environment: no bound
        self.budget = Budget(BudgetLimits(fleet=budget))
        self.limited = budget is not None  # unlimited: its bookkeeping decides nothing
        self.afford = self._afford if self.limited else None
        self.warmup_s = warmup_days * DAY
        self.clock = SimClock()
        self.samples = HostSamples(host_sample_s, self.clock)  # one daemon: one sampler
        self.settings = AdaptiveDepth()
        self.free = self.workers = workers
        self.again: dict[tuple[str, ProbeKind], int] = {}
        self.running: dict[tuple[str, ProbeKind], str] = {}  # the digest each probe found
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = itertools.count()
        self.released_at = float("-inf")
        self.retry_at: float | None = None
        n = int(days) + 1
        self.tally = Tally({k: [0] * n for k in KINDS}, {k: [0.0] * n for k in KINDS}, [0] * n)
        self.kinds: tuple[ProbeKind, ...] = KINDS  # the kinds each environment declares

    # --- events ---------------------------------------------------------------------------

    def push(self, t: float, what: int, payload: object) -> None:
        heapq.heappush(self.events, (t, what, next(self.seq), payload))

    def run(self) -> Tally:
        for sim in self.fleet:  # a fleet in its steady state: first dues spread over a period
            for kind in self.kinds:
                interval = self.ledger.interval(sim.env, kind) or DAY
                self.push(self.rng.uniform(0, interval), _DUE, (sim, kind))
        events, pop = self.events, heapq.heappop
        while events and events[0][0] < self.end:
            t, what, _, payload = pop(events)
            self.clock.t = t
            if what == _DONE:
                self.done(t, payload)  # type: ignore[arg-type]
            elif what == _DUE:
                self.due(t, *payload)  # type: ignore[misc]
            else:
                self.retry_at = None
            self.dispatch(t)
        return self.tally

    def due(self, t: float, sim: SimEnv, kind: ProbeKind) -> None:
        """A job fires (schedule.workers.Workers.due): queued unless already queued or
        running; its next time one interval on, at the rate the quarantine sets."""
        env = sim.env
        if (env.id, kind) not in self.queue:
            self.queue.put(self.ledger.priority(env.id, kind, E0 + t), E0 + t, env.id, kind)
        interval = self.ledger.interval(env, kind) or DAY
        self.push(t + interval + self.rng.uniform(0, env.schedules.jitter_s), _DUE,
                  (sim, kind))

    def _afford(self, work: Work, env: Environment) -> bool:
        return self.budget.affordable(env.suite, self.ledger.estimate(work.key), self.clock.t)

    def dispatch(self, t: float) -> None:
        queue = self.queue
        if queue.deferred_count and t - self.released_at >= RETRY_S:
            self.released_at = t
            queue.release_deferred(lambda w: self.ledger.priority(w.env_id, w.kind, E0 + t))
        while self.free:
            picked = queue.take(self.ledger.envs.get, self.afford)
            if picked is None:
                break
            work, env = picked
            self.ledger.urgent.discard(work.key)
            estimate = self.ledger.estimate(work.key)
            if self.limited:
                self.budget.start(env.suite, estimate)
            self.free -= 1
            self.start(t, work, self.by_id[env.id], estimate)
        if queue.deferred_count and self.retry_at is None:
            self.retry_at = t + RETRY_S
            self.push(self.retry_at, _RETRY, None)

    # --- one probe ------------------------------------------------------------------------

    def reuse_advice(self, sim: SimEnv, kind: ProbeKind, now: datetime) -> DepthAdvice:
        """feed.reuse.StoreReuse.advice over the cached assessment, not the store."""
        every = sim.env.reprove_every.every(kind) if self.policy.reuse else None
        return self.samples.advise(kind, advise_reuse(every, sim.health.get(kind), now=now))

    def seen(self, sim: SimEnv, kind: ProbeKind, t: float) -> Digest:
        """The digest a probe starting at ``t`` finds: the tag's on this host, now."""
        return sim.digest_at(t)

    def pull_wait(self, sim: SimEnv, digest: Digest, t: float) -> float:
        """Seconds a probe that needs a container waits for its image: none, it is local."""
        return 0.0

    def start(self, t: float, work: Work, sim: SimEnv, estimate: float) -> None:
        kind, digest = work.kind, self.seen(sim, work.kind, t)
        spec, now = sim.specs[kind], self.clock.now()
        if kind is TESTS:
            given = advise(self.settings, sim.health.get(TESTS),
                           quarantined=sim.entry is not None, now=now)
            advice = given.for_identity(digest.name, spec)
            light = advice.depth is Depth.LIGHT
            status, runs, failed = run_probe(self.rng, digest, light, 0.0)  # type: ignore[arg-type]
            light = light and status is Status.PASS  # a light check escalates at a doubt
            mode = Depth.LIGHT if light else Depth.FULL
            reason = Reason.OK if status is Status.PASS else (
                Reason.ORACLE_DOES_NOT_FIX if status is Status.FAIL else Reason.NONDETERMINISTIC)
            details = {"depth": {"mode": str(mode), "why": advice.why, "runs": runs,
                                 "failed_runs": failed}}
            duration, full, containers = runs * sim.run_s, not light, runs
        else:
            advice = self.reuse_advice(sim, kind, now).for_identity(digest.name, spec)
            full = advice.depth is not Depth.REUSED
            if full and t >= self.warmup_s:
                why = _why(advice.why)
                self.tally.why_full[why] = self.tally.why_full.get(why, 0) + 1
            status, reason = Status.PASS, Reason.OK  # an image's properties hold (evidence reuse)
            details = {"depth": depth_record(advice, False)}
            duration, containers = (FULL_S[kind], 1) if full else (IDENTITY_S, 0)
        result = ProbeResult(sim.env.id, kind, status, reason, "", duration, digest.name, spec,
                             started_at=now, details=details)
        day = int(t // DAY)
        tally = self.tally
        tally.probes += 1
        wait = self.pull_wait(sim, digest, t) if containers else 0.0
        tally.busy_s += duration + wait  # a pull holds the probe's slot (image_to_run)
        lag = t + E0 - work.due
        if lag > tally.max_lag_s.get(kind, 0.0):
            tally.max_lag_s[kind] = lag
        if containers:
            tally.containers[kind][day] += containers
            tally.sandbox_s[kind][day] += duration
        else:
            tally.identity[day] += 1
        self.running[work.key] = digest.name
        self.push(t + wait + duration, _DONE, Running(work, sim, digest, result, estimate, full))

    def done(self, t: float, run: Running) -> None:
        """A result recorded (Workers._record), then its work ended (Workers._work)."""
        result, sim, key = run.result, run.sim, run.work.key
        news = self.ledger.note(result, {})
        if self.policy.queue_new:
            for other in news:
                self.new_digest(other, t)
        else:  # today's code: no new-digest work, and nothing ranks as new for it
            self.ledger.new.difference_update(news)
        if self.limited:
            self.budget.charge(sim.env.suite, result.duration_s, t)
            self.budget.end(sim.env.suite, run.estimate)
        self.queue.done(run.work, sim.env)
        del self.running[key]
        self.free += 1
        again = self.again.pop(key, None)
        if again is not None:
            self.queue.put(again, E0 + t, *key)
        self.assess(t, run)

    def new_digest(self, key: tuple[str, ProbeKind], t: float) -> None:
        """schedule.workers.Workers._new_digest."""
        if key not in self.queue:
            self.queue.put(NEW, E0 + t, *key)
        elif not self.queue.promote(key, NEW):
            # running: again only if it looked its digest up before the change (the real
            # code tells by its start time; here the digest it found is known)
            if self.running.get(key) == self.ledger.digests[key[0]][0]:
                self.tally.again_same_digest += 1  # would have run twice before the fix
            else:
                self.again.setdefault(key, NEW)
        if key[1] is TESTS:
            self.tally.tests_full_on_new += 1

    def assess(self, t: float, run: Running) -> None:
        result, sim, digest, kind = run.result, run.sim, run.digest, run.result.kind
        if digest.detected_at is None:
            digest.detected_at = t
        if run.full:
            digest.full.add(kind)
            if digest.validated_at is None and len(digest.full) == len(KINDS):
                digest.validated_at = t
        if kind is not TESTS and not (run.full and self.policy.reuse):
            return  # changes no assessment (see the module's doc)
        count = RunCount.of(result.status, result.details)
        history = sim.history.setdefault(kind, [])
        if history and history[-1].image_digest != result.image_digest:
            history.clear()  # the model counts the current identity only
        history.append(Observation(result.status, str(result.reason), result.started_at,
                                   result.image_digest, result.spec_hash, "r", None,
                                   count.runs, count.failed, count.depth))
        if kind is not TESTS and len(history) > TAIL:
            del history[:-TAIL]  # see TAIL
        health = sim.health[kind] = assess_kind(kind, history)
        if kind is not TESTS:
            return
        if result.status is not Status.PASS and digest.failed_at is None:
            digest.failed_at = t
        entry, _ = decide(sim.entry, sim.state,
                          EnvHealth(sim.env.id, health.state, {TESTS: health}), self.clock.now())
        sim.entry, sim.state = entry, health.state
        env_id = sim.env.id
        (self.ledger.quarantined.add if entry is not None
         else self.ledger.quarantined.discard)(env_id)
        (self.ledger.suspect.add if health.state in (EnvState.DEGRADED, EnvState.FLAKY,
                                                     EnvState.BROKEN)
         else self.ledger.suspect.discard)(env_id)
        if health.state.bad and digest.quarantined_at is None:
            digest.quarantined_at = t


def _why(text: str) -> str:
    """The advice's reason, without its figures: what a tally counts by."""
    for head in ("new image digest", "new spec", "host sample", "quarantined", "re-proved",
                 "no evidence", "no full probe", "suspect", "full every time"):
        if text.startswith(head):
            return head
    return text.split(":", maxsplit=1)[0]
