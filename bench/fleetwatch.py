"""The fleet-cost simulation with the registry (``bench/fleet_cost.py --policies reuse,watch``):
the fleet's images are ``pull: watch`` images in a registry, and a digest change is a tag that
moves there. On top of ``fleetsim.Simulation`` (the same queue, ledger, reuse advice, health
model and quarantine, all envcheck's own code), as the daemon composes the registry stage:

- the ``image`` kind is one more declared kind (``Environment.declared_kinds``), on its own
  schedule (``schedules.image``, 5 min by default, jitter and the quarantine's slower rate as
  every kind): one look at the tag, a ``HEAD``, no container (``LOOK_S`` of a worker slot). Its
  result carries the tag's digest, so the ledger sees a moved tag as a new digest and queues
  the other kinds at once (``Ledger.note``), as for a new local digest;
- every other probe takes the watch's last look while it is younger than the watch interval,
  else looks again itself (``RegistryImages.identity(fresh=False)``): one more ``HEAD``;
- a probe that needs a container (a full probe; an identity check needs none) waits for its
  image: none while the host holds that digest, else a pull by digest of the digest's size at
  the registry's throughput, through a limited number of pull slots (the puller's limit per
  registry, per node); probes of the same digest that start meanwhile wait for the same pull
  (``LocalImages``' lock per target). The pull holds the probe's worker slot; the result's
  duration is the probe's own (the pull's seconds are recorded apart).

The image cache holds every digest a host pulled (a budget large enough for the fleet's
images: eviction is not modelled). Counted per day: looks (``HEAD``s), pulls and bytes,
split into pulls of a digest that had just appeared (a moved tag) and any other pull (the
fleet's first pulls, in the warm-up; a pull again of a digest already pulled: none, as the
cache holds it).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from fleetsim import _DONE, DAY, E0, KINDS, Digest, Policy, Running, SimEnv, Simulation

from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.schedule.workqueue import Work

IMAGE = ProbeKind.IMAGE
LOOK_S = 0.004  # one HEAD (bench/registry_watch.py: ~260 looks/s from one host)
WATCH = Policy("watch", reuse=True, queue_new=True, watch=True)


@dataclass(frozen=True)
class PullModel:
    size_gb: tuple[float, float] = (1.0, 3.0)  # a digest's bytes to pull, uniform (GB)
    mb_per_s: float = 100.0  # the registry's throughput per pull (MB/s)
    slots: int = 8  # pulls at once, fleet-wide (2 per registry per node)
    seed: int = 11


@dataclass
class WatchTally:
    heads: list[int]  # looks at a tag, per day
    heads_by_kind: dict[str, int] = field(default_factory=dict)
    pulls_moved: list[int] = field(default_factory=list)  # pulls of a digest just seen
    bytes_moved: list[float] = field(default_factory=list)
    pulls_other: list[int] = field(default_factory=list)  # any other pull
    bytes_other: list[float] = field(default_factory=list)
    pull_s: float = 0.0
    waits: int = 0  # probes that waited on another probe's pull of the same digest


class WatchSimulation(Simulation):
    def __init__(self, *args: object, pulls: PullModel = PullModel(), **kwargs: object
                 ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.kinds = (IMAGE, *KINDS)
        self.model = pulls
        n = len(self.tally.identity)
        self.watch = WatchTally([0] * n, {}, [0] * n, [0.0] * n, [0] * n, [0.0] * n)
        sizes = random.Random(pulls.seed)  # apart from the fleet's: every policy, one fleet
        for sim in self.fleet:
            for d in sim.digests:
                d.size = sizes.uniform(*pulls.size_gb) * 1e9
        self.looks: dict[int, tuple[Digest, float]] = {}  # env index -> (digest, seen at)
        self.held: dict[int, dict[str, float]] = {}  # env index -> digest -> local from
        self.slots = [0.0] * max(pulls.slots, 1)  # when each pull slot is free

    # --- the watch ------------------------------------------------------------------------

    def look(self, sim: SimEnv, kind: ProbeKind, t: float) -> Digest:
        digest = sim.digest_at(t)
        self.looks[sim.index] = (digest, t)
        self.watch.heads[int(t // DAY)] += 1
        self.watch.heads_by_kind[str(kind)] = self.watch.heads_by_kind.get(str(kind), 0) + 1
        return digest

    def seen(self, sim: SimEnv, kind: ProbeKind, t: float) -> Digest:
        """RegistryImages.identity(fresh=False): the last look within the watch interval."""
        last = self.looks.get(sim.index)
        interval = sim.env.schedules.image or 300.0
        if last is not None and t - last[1] < interval:
            return last[0]
        return self.look(sim, kind, t)

    def pull_wait(self, sim: SimEnv, digest: Digest, t: float) -> float:
        held = self.held.setdefault(sim.index, {})
        ready = held.get(digest.name)
        if ready is not None:  # on the host, or being pulled: wait for that pull
            if ready > t:
                self.watch.waits += 1
            return max(ready - t, 0.0)
        seconds = digest.size / (self.model.mb_per_s * 1e6)
        begin = max(t, heapq.heappop(self.slots))
        end = begin + seconds
        heapq.heappush(self.slots, end)
        held[digest.name] = end
        day = int(t // DAY)
        w = self.watch
        w.pull_s += seconds
        if digest is not sim.digests[0] and digest.pulled_at is None:
            w.pulls_moved[day] += 1
            w.bytes_moved[day] += digest.size
        else:
            w.pulls_other[day] += 1
            w.bytes_other[day] += digest.size
        if digest.pulled_at is None:
            digest.pulled_at = end
        return end - t

    def start(self, t: float, work: Work, sim: SimEnv, estimate: float) -> None:
        if work.kind is not IMAGE:
            super().start(t, work, sim, estimate)
            return
        digest = self.look(sim, IMAGE, t)  # the image kind looks afresh every time
        result = ProbeResult(sim.env.id, IMAGE, Status.PASS, Reason.OK, "", LOOK_S, digest.name,
                             sim.specs[IMAGE], started_at=self.clock.now())
        tally = self.tally
        tally.probes += 1
        tally.busy_s += LOOK_S
        lag = t + E0 - work.due
        if lag > tally.max_lag_s.get(IMAGE, 0.0):
            tally.max_lag_s[IMAGE] = lag
        self.running[work.key] = digest.name
        self.push(t + LOOK_S, _DONE, Running(work, sim, digest, result, estimate, False))
