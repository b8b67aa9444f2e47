"""Which environments two loads of a catalogue define differently, compared on what each
resolved to (the suite's defaults merged, a dataset's records expanded, a Harbor task's files
hashed, a lock file's digest, the data sources it uses): a changed suite default or dataset
entry selects every environment under it, a reordered or reformatted file selects none.
``envcheck check --changed-since`` reads one load from a git ref and one from the working tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envcheck.catalogue.models import Catalogue, Environment

__all__ = ["Change", "compare"]


@dataclass(frozen=True, slots=True)
class Change:
    env_id: str
    added: bool  # else changed
    keys: tuple[str, ...] = ()  # what differs, as dotted key paths (two levels at most)


def _definition(catalogue: Catalogue, env: Environment) -> dict[str, Any]:
    """What ``env`` resolved to, with the definition of each data source it uses."""
    found: dict[str, Any] = env.model_dump(mode="json")
    for source_id in env.data_sources:
        try:
            source = catalogue.data_source(source_id)
        except KeyError:  # a loaded catalogue defines them all; a partial one may not
            continue
        found[f"data source {source_id}"] = source.model_dump(mode="json")
    return found


def _differ(before: dict[str, Any], after: dict[str, Any], prefix: str = "",
            depth: int = 2) -> list[str]:
    keys = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if depth > 1 and isinstance(old, dict) and isinstance(new, dict):
            keys.extend(_differ(old, new, f"{prefix}{key}.", depth - 1) or [f"{prefix}{key}"])
        else:
            keys.append(f"{prefix}{key}")
    return keys


def compare(before: Catalogue, after: Catalogue) -> tuple[list[Change], list[str]]:
    """The environments of ``after`` that are new or differ from ``before`` (in ``after``'s
    order), and the ids ``before`` has that ``after`` no longer has."""
    old = {env.id: env for env in before.environments}
    changes = []
    for env in after.environments:
        was = old.get(env.id)
        if was is None:
            changes.append(Change(env.id, added=True))
            continue
        keys = _differ(_definition(before, was), _definition(after, env))
        if keys:
            changes.append(Change(env.id, added=False, keys=tuple(keys)))
    now = {env.id for env in after.environments}
    return changes, [env_id for env_id in old if env_id not in now]
