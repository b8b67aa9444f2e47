"""One rollout record as a trainer sends it (``POST /v1/rollouts``), validated strictly: an
unknown field, a naive time or an outcome outside the vocabulary is the sender's error."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, NonNegativeFloat

from envcheck.core.rollouts import (
    MAX_DIGEST_LENGTH,
    MAX_ENV_ID_LENGTH,
    MAX_PRODUCER_LENGTH,
    MAX_SEQ,
    Outcome,
    Rollout,
)

__all__ = ["Durations", "RolloutRecord"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class Durations(BaseModel):
    """How long the rollout's parts took, in seconds (each optional)."""

    model_config = _STRICT

    sandbox_start_s: NonNegativeFloat | None = Field(default=None, allow_inf_nan=False)
    agent_s: NonNegativeFloat | None = Field(default=None, allow_inf_nan=False)
    verifier_s: NonNegativeFloat | None = Field(default=None, allow_inf_nan=False)


class RolloutRecord(BaseModel):
    """A rollout: which environment (its catalogue id), when, from which producer (a run id)
    under which sequence number (counted once per producer and number), its outcome, and
    optionally the image digest it ran, its reward and durations."""

    model_config = _STRICT

    env_id: str = Field(min_length=1, max_length=MAX_ENV_ID_LENGTH)
    at: AwareDatetime
    producer: str = Field(min_length=1, max_length=MAX_PRODUCER_LENGTH)
    seq: int = Field(ge=0, le=MAX_SEQ)
    outcome: Outcome
    image_digest: str | None = Field(default=None, min_length=1,
                                     max_length=MAX_DIGEST_LENGTH)
    reward: float | None = Field(default=None, allow_inf_nan=False)
    durations: Durations | None = None

    def rollout(self) -> Rollout:
        d = self.durations
        at: datetime = self.at
        return Rollout(self.env_id, at, self.producer, self.seq, self.outcome,
                       self.image_digest, self.reward,
                       d.sandbox_start_s if d else None, d.agent_s if d else None,
                       d.verifier_s if d else None)
