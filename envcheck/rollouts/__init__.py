"""The training run's rollouts as evidence: the wire format a trainer reports them in
(``records``, a batch's body read and validated: ``batch``), and what the health model makes of
the counters the store adds them into (``evidence``).

A stage of its own, after the store and before the health model: it reads and writes through
the store, and imports nothing of the probes, the scheduler or the consumers.
"""
