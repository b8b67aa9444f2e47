"""The training run's rollouts as evidence, on their way in: the wire format a trainer reports
them in (``records``) and a batch's body read and validated whole (``batch``); the store adds
them into counters (:mod:`envcheck.store.rollouts`) and the health model judges those
(:mod:`envcheck.health.rollouts`).

A stage of its own, after the store and before the health model: it reads and writes through
the store, and imports nothing of the probes, the scheduler, the health model or the consumers.
"""
