"""One rollout record as a trainer sends it (``POST /v1/rollouts``), validated strictly: an
unknown field, a naive time or an outcome outside the vocabulary is the sender's error.

Typed dicts, not models: a batch of 1,000 validates into dicts and then into the store's
:class:`~envcheck.core.rollouts.Rollout` a third quicker than into model instances (the hot
path of the route, bench/rollouts.py).
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import AwareDatetime, ConfigDict, Field, NonNegativeFloat, TypeAdapter, with_config
from typing_extensions import TypedDict

from envcheck.core.rollouts import (
    MAX_DIGEST_LENGTH,
    MAX_ENV_ID_LENGTH,
    MAX_PRODUCER_LENGTH,
    MAX_SEQ,
    Outcome,
    Rollout,
)

__all__ = ["RECORD", "RECORDS", "Durations", "RolloutRecord", "record_schema", "to_rollout"]

_Seconds = Annotated[NonNegativeFloat, Field(allow_inf_nan=False)]


@with_config(ConfigDict(extra="forbid"))
class Durations(TypedDict, total=False):
    """How long the rollout's parts took, in seconds (each optional)."""

    sandbox_start_s: _Seconds | None
    agent_s: _Seconds | None
    verifier_s: _Seconds | None


@with_config(ConfigDict(extra="forbid"))
class RolloutRecord(TypedDict):
    """A rollout: which environment (its catalogue id), when, from which producer (a run id)
    under which sequence number (counted once per producer and number), its outcome, and
    optionally the image digest it ran, its reward and durations."""

    env_id: Annotated[str, Field(min_length=1, max_length=MAX_ENV_ID_LENGTH,
                                 description="the environment's id in the catalogue")]
    at: Annotated[AwareDatetime, Field(description="when the rollout ended, with its offset")]
    producer: Annotated[str, Field(min_length=1, max_length=MAX_PRODUCER_LENGTH,
                                   description="who reports it: the training run's id")]
    seq: Annotated[int, Field(ge=0, le=MAX_SEQ, description=(
        "the producer's sequence number of this rollout: a record whose producer and number "
        "were counted before (a retried batch) adds nothing"))]
    outcome: Outcome
    image_digest: NotRequired[
        Annotated[str, Field(min_length=1, max_length=MAX_DIGEST_LENGTH)] | None]
    reward: NotRequired[Annotated[float, Field(allow_inf_nan=False)] | None]
    durations: NotRequired[Durations | None]


RECORD: TypeAdapter[RolloutRecord] = TypeAdapter(RolloutRecord)
RECORDS: TypeAdapter[list[RolloutRecord]] = TypeAdapter(list[RolloutRecord])


# Rollout's fields given whole to the tuple's own constructor: the named tuple's generated
# ``__new__`` (a Python function, for its defaults) was a tenth of a batch's parse.
_NEW: Any = tuple.__new__


def to_rollout(record: RolloutRecord) -> Rollout:
    """The store's rollout of a validated record."""
    d = record.get("durations") or _NO_DURATIONS
    rollout: Rollout = _NEW(Rollout, (
        record["env_id"], record["at"], record["producer"], record["seq"], record["outcome"],
        record.get("image_digest"), record.get("reward"), d.get("sandbox_start_s"),
        d.get("agent_s"), d.get("verifier_s")))
    return rollout


_NO_DURATIONS: Durations = {}


def record_schema() -> dict[str, Any]:
    """A record's JSON schema with its definitions inlined (the API's spec shows it in a
    request body, where a ``$ref`` to ``#/$defs`` would point nowhere)."""
    schema = RECORD.json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined
