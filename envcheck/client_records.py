"""A rollout record as the client's reporter sends it, checked when it is reported: what the
server would refuse (``envcheck.rollouts.records``) is a ValueError in the trainer's call, so
that one bad record never costs a batch. Plain Python: the client needs no pydantic."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from envcheck.core.rollouts import DURATION_NAMES, MAX_DIGEST_LENGTH, MAX_ENV_ID_LENGTH, Outcome

__all__ = ["checked_record", "checked_text"]

_OUTCOMES = frozenset(o.value for o in Outcome)
_VOCABULARY = ", ".join(o.value for o in Outcome)
_DURATIONS = frozenset(DURATION_NAMES)


def _number(value: object, what: str, *, non_negative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"{what} must be >= 0, not {value!r}")
    return float(value)


def checked_text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise ValueError(f"{what} must be a string of 1 to {limit} characters, not {value!r}")
    return value


def _durations(durations: Mapping[str, float | None]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in durations.items():
        if name not in _DURATIONS:
            raise ValueError(f"unknown duration {name!r}: the names are "
                             f"{', '.join(DURATION_NAMES)}")
        if value is not None:
            out[name] = _number(value, f"durations[{name!r}]", non_negative=True)
    return out


def checked_record(env_id: str, outcome: str, reward: float | None, image_digest: str | None,
                   at: datetime | None, durations: Mapping[str, float | None] | None
            ) -> dict[str, Any]:
    """A record as the wire takes it, less producer and seq (``at`` still a datetime: the
    sender writes it out, off the trainer's thread); ValueError for what the server would
    refuse."""
    if outcome not in _OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}: one of {_VOCABULARY}")
    if at is None:
        at = datetime.now(UTC)
    elif not isinstance(at, datetime) or at.utcoffset() is None:
        raise ValueError(f"at must be a timezone-aware datetime, not {at!r}")
    record: dict[str, Any] = {"env_id": checked_text(env_id, "env_id", MAX_ENV_ID_LENGTH),
                              "at": at, "outcome": str(outcome)}
    if image_digest is not None:
        record["image_digest"] = checked_text(image_digest, "image_digest", MAX_DIGEST_LENGTH)
    if reward is not None:
        record["reward"] = _number(reward, "reward")
    if durations:
        record["durations"] = _durations(durations)
    return record
