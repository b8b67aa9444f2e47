"""The jobs a catalogue reload touches: those of environments removed, added or defined
anew; a schedule that did not change keeps its timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind
from envcheck.schedule.jobs import Jobs
from envcheck.schedule.ledger import Ledger

__all__ = ["renew_jobs"]


def renew_jobs(jobs: Jobs, ledger: Ledger, lock: threading.Lock,
               old: Mapping[str, Environment], envs: Mapping[str, Environment],
               changed: Sequence[Environment]) -> tuple[int, int]:
    """From the fleet ``old`` to ``envs``, where ``changed`` were added or defined anew:
    (jobs added, jobs removed). Call holding ``jobs.lock``; ``lock`` guards the ledger."""
    removed = 0
    for env_id in old.keys() - envs.keys():
        for kind in old[env_id].declared_kinds():
            removed += jobs.unschedule(env_id, kind)
    now = time.time()
    renew: list[tuple[Environment, ProbeKind]] = []
    for env in changed:  # added, or defined anew
        kinds = env.declared_kinds()
        before = old.get(env.id)
        with lock:  # a new image or spec: evidence nobody has, worth most
            ledger.new.update((env.id, k) for k in kinds if before is None
                              or before.spec_hash(k) != env.spec_hash(k))
        for kind in before.declared_kinds() if before is not None else []:
            if kind not in kinds:
                removed += jobs.unschedule(env.id, kind)
        for kind in kinds:
            job = jobs.get((env.id, kind))
            if job is not None and jobs.same_trigger(job, env, kind):
                continue  # the same schedule keeps its timing
            removed += jobs.unschedule(env.id, kind)
            renew.append((env, kind))
    return jobs.schedule(renew, now), removed
