"""The training run's rollouts as evidence: the closed vocabulary of their outcomes, and whose
each outcome is.

A rollout is one sandbox a trainer started in an environment. envcheck never keeps one row per
rollout: the store adds each batch into counters per environment, image digest, hour and
outcome (:mod:`envcheck.store.rollouts`), and the health model reads the counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

__all__ = ["DURATION_NAMES", "ENVIRONMENT_OUTCOMES", "MAX_BATCH_RECORDS", "MAX_DIGEST_LENGTH",
           "MAX_ENV_ID_LENGTH", "MAX_PRODUCER_LENGTH", "MAX_SEQ", "OUTCOME_DOCS",
           "TRAINER_OUTCOMES", "Outcome", "Rollout", "judged"]


class Outcome(StrEnum):
    OK = "ok"
    SANDBOX_START_FAILED = "sandbox_start_failed"
    SANDBOX_LOST = "sandbox_lost"
    AGENT_TIMEOUT = "agent_timeout"
    VERIFIER_ERROR = "verifier_error"
    VERIFIER_TIMEOUT = "verifier_timeout"
    REWARD_MISSING = "reward_missing"
    REWARD_MALFORMED = "reward_malformed"


# Whose failure each outcome is. The environment's: its image did not start or its container
# died, its verifier crashed, hung or wrote no (or no readable) reward — a sample whose reward
# cannot be trusted, whatever the policy did. The trainer's: the policy ran out of its own time
# budget, which says nothing about the environment. ``ok`` is neither.
ENVIRONMENT_OUTCOMES: frozenset[Outcome] = frozenset({
    Outcome.SANDBOX_START_FAILED, Outcome.SANDBOX_LOST, Outcome.VERIFIER_ERROR,
    Outcome.VERIFIER_TIMEOUT, Outcome.REWARD_MISSING, Outcome.REWARD_MALFORMED})
TRAINER_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.AGENT_TIMEOUT})

OUTCOME_DOCS: dict[Outcome, str] = {
    Outcome.OK: "the rollout ran and its verifier wrote a reward (neither's failure)",
    Outcome.SANDBOX_START_FAILED: "the sandbox did not start (the environment's)",
    Outcome.SANDBOX_LOST: "the sandbox died or vanished mid-rollout (the environment's)",
    Outcome.AGENT_TIMEOUT: "the policy ran out of its time budget (the trainer's)",
    Outcome.VERIFIER_ERROR: "the verifier crashed (the environment's)",
    Outcome.VERIFIER_TIMEOUT: "the verifier did not finish in time (the environment's)",
    Outcome.REWARD_MISSING: "the verifier wrote no reward (the environment's)",
    Outcome.REWARD_MALFORMED: "the reward could not be read as a number (the environment's)",
}

# The durations a record may carry (seconds); the store keeps a sum and a count of each.
DURATION_NAMES: tuple[str, ...] = ("sandbox_start_s", "agent_s", "verifier_s")

# The wire record's limits: the ingest validates them (envcheck.rollouts), the client's
# reporter checks them when a record is reported, so that one bad record never costs a batch.
MAX_ENV_ID_LENGTH = 512
MAX_PRODUCER_LENGTH = 256
MAX_DIGEST_LENGTH = 256
MAX_SEQ = 2**62
MAX_BATCH_RECORDS = 20_000


class Rollout(NamedTuple):
    """One rollout as the store counts it (the wire model validates into this). A named
    tuple, not a dataclass: a batch makes thousands, and a tuple is made several times
    quicker (the hot path of ``POST /v1/rollouts``, bench/rollouts.py)."""

    env_id: str
    at: datetime
    producer: str
    seq: int
    outcome: Outcome
    image_digest: str | None = None
    reward: float | None = None
    sandbox_start_s: float | None = None
    agent_s: float | None = None
    verifier_s: float | None = None


def judged(counts: Mapping[str, float]) -> tuple[float, float]:
    """(the environment's failures, the rollouts that judge it) from counts by outcome: its
    failures and ``ok``; the trainer's outcomes say nothing of the environment and are left
    out."""
    failed = sum(n for outcome, n in counts.items() if outcome in ENVIRONMENT_OUTCOMES)
    return failed, failed + counts.get(Outcome.OK, 0)

