"""The reward a verifier wrote, read as Harbor's verifier reads it.

Harbor (``harbor/verifier/verifier.py``, the same in 0.24.0, 0.25.0 and 0.26.0) reads
``/logs/verifier/reward.json`` if it exists, and then only it: ``reward.txt`` beside it is never
read. An empty file or one that does not parse is an error, and so is neither file.
``reward.txt`` holds one finite number. ``reward.json`` is an object whose every value is a
finite number (a boolean is one, as Harbor's pydantic model makes ``true`` 1.0): one value that
is not (a string, a list, null) and the whole file is refused, so is anything but an object.
envcheck needs one scalar: the ``reward`` key (what Harbor's own tools report), else the
object's only value. The exit code of ``test.sh`` never counts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from envcheck.core.results import Reason

__all__ = ["MAX_REWARD_BYTES", "REWARD_DIR", "RewardFile", "RewardReading", "read_reward"]

REWARD_DIR = "/logs/verifier"
MAX_REWARD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class RewardFile:
    name: str  # reward.json or reward.txt
    size: int  # on disk; ``data`` holds at most MAX_REWARD_BYTES of it
    data: bytes


@dataclass(frozen=True, slots=True)
class RewardReading:
    value: float | None
    reason: Reason | None = None  # REWARD_MISSING or REWARD_MALFORMED when value is None
    detail: str = ""
    source: str = ""  # the file the value came from


def _bad(detail: str) -> RewardReading:
    return RewardReading(None, Reason.REWARD_MALFORMED, detail)


def _text(file: RewardFile) -> RewardReading:
    where = f"{REWARD_DIR}/{file.name}"
    if file.size == 0:
        return _bad(f"{where} is empty")
    if file.size > MAX_REWARD_BYTES:
        return _bad(f"{where} is larger than {MAX_REWARD_BYTES >> 10} KiB")
    text = file.data.decode("utf-8", "replace").strip()
    try:
        value = float(text)
    except ValueError:
        return _bad(f"{where} is not a number: {text[:80]!r}")
    if not math.isfinite(value):
        return _bad(f"{where} is not a finite number: {text[:80]!r}")
    return RewardReading(value, source=file.name)


def _json(file: RewardFile) -> RewardReading:
    where = f"{REWARD_DIR}/{file.name}"
    if file.size == 0:
        return _bad(f"{where} is empty")
    if file.size > MAX_REWARD_BYTES:
        return _bad(f"{where} is larger than {MAX_REWARD_BYTES >> 10} KiB")
    try:
        parsed = json.loads(file.data)
    except ValueError as exc:
        return _bad(f"{where} is not JSON: {exc}")
    except RecursionError:  # 64 KiB of '[' is past the parser's depth
        return _bad(f"{where} is nested too deep to parse")
    values = list(parsed.values()) if isinstance(parsed, dict) else [parsed]
    for value in values:  # Harbor refuses the file for any value that is not a finite number
        if not isinstance(value, int | float):
            return _bad(f"{where}: non-numeric reward {_shown(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            return _bad(f"{where}: non-finite reward {value!r}")
    if not isinstance(parsed, dict):
        return _bad(f"{where} must be a JSON object, not {type(parsed).__name__}")
    try:
        rewards = {str(k): float(v) for k, v in parsed.items()}
    except OverflowError:
        return _bad(f"{where}: a reward too large for a float")
    if "reward" in rewards:
        return RewardReading(rewards["reward"], source=f"{file.name}: reward")
    if len(rewards) == 1:
        key, value = next(iter(rewards.items()))
        return RewardReading(value, source=f"{file.name}: {key}")
    keys = ", ".join(sorted(rewards)) or "none"
    return _bad(f"{where} has no 'reward' key and not one reward alone (keys: {keys}); "
                f"{REWARD_DIR}/reward.txt is never read beside it")


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_reward(json_file: RewardFile | None, text_file: RewardFile | None) -> RewardReading:
    """The scalar reward from the files the verifier left (None: the file is absent)."""
    if json_file is not None:
        return _json(json_file)
    if text_file is not None:
        return _text(text_file)
    return RewardReading(None, Reason.REWARD_MISSING,
                         f"no reward file: the verifier wrote neither {REWARD_DIR}/reward.txt "
                         f"nor {REWARD_DIR}/reward.json")
