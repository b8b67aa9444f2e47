"""A catalogue file's environments validated while the file is read, each raw value dropped
soon after it is read.

Read whole first, a fleet's raw values (100 MB for 100,000 environments) were all alive beside
the file's text, and beside the running catalogue during a daemon's reload. The fast reader
hands each environment of ``suites.<id>.environments`` to :class:`Handover` as it is read;
every :data:`BATCH` of them are validated, and each one that validates cleanly is replaced in
its list by a :class:`Taken`: the environment, resolved with its suite's defaults when they
were read before it (else the entry, resolved once the file is validated), and what the
cross-file checks read of it. An entry with a problem stays raw and the loader reports it as
before, so every message stays what it was; if the file has a problem elsewhere, what was
taken is dropped with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from envcheck.catalogue.merge import resolve_environment
from envcheck.catalogue.models import (
    Environment,
    EnvironmentEntry,
    SuiteDefaults,
    SuiteEntry,
)
from envcheck.catalogue.sharing import Sharing

__all__ = ["BATCH", "Handover", "Taken"]

# Environments validated together. One at a time, between the parser's events, a load is
# ~15% slower: the parser's and the validators' working sets take turns in the CPU's caches.
BATCH = 1000


@dataclass(slots=True)
class Taken:
    """An environment taken as it was read, in its raw value's place. Reads like that raw
    value for the cross-file checks (``get``, ``in``: its id and own ``data_sources``)."""

    value: Environment | EnvironmentEntry  # resolved, or an entry whose defaults came after it
    own_sources: bool  # the raw value had its own ``data_sources`` (else the suite's apply)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "id":
            return self.value.id
        if key == "data_sources" and self.own_sources:
            return self.value.data_sources
        return default

    def __contains__(self, key: object) -> bool:
        return key == "id" or (key == "data_sources" and self.own_sources)


@dataclass
class Handover:
    """The environments of one file, taken as the reader hands them over (a
    :data:`~envcheck.catalogue.yamlvalues.Take`); :meth:`flush` once the file is read."""

    options: dict[str, Any]  # model_validate's, as the loader validates the file with
    sharing: Sharing
    taken: int = 0  # environments taken so far
    # per suite: its defaults as validated when its environments were first taken (None: not
    # read before them, or invalid), checked against the file's own once it is validated
    _defaults: dict[str, SuiteDefaults | None] = field(default_factory=dict)
    _checked: set[str] = field(default_factory=set)
    _pending: list[tuple[str, list[Any], int, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, suite_id: str, items: list[Any], suite: dict[str, Any]) -> None:
        self._pending.append((suite_id, items, len(items) - 1, suite))
        if len(self._pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Take the environments handed over and not taken yet."""
        for suite_id, items, i, suite in self._pending:
            taken = self._take(suite_id, items[i], suite)
            if taken is not None:
                items[i] = taken
        self._pending.clear()

    def _take(self, suite_id: str, raw: Any, suite: dict[str, Any]) -> Taken | None:
        try:
            entry = EnvironmentEntry.model_validate(raw, **self.options)
        except ValidationError:
            return None  # reported from the raw value, with the rest of the file's problems
        defaults = self._suite_defaults(suite_id, suite)
        value: Environment | EnvironmentEntry = entry
        if defaults is not None:
            try:
                value = self.sharing.environment(resolve_environment(suite_id, defaults, entry))
            except ValidationError:  # defaults + entry conflict: reported from the raw value
                return None
        else:
            self.sharing.fields(entry)
        self.taken += 1
        return Taken(value, "data_sources" in raw)

    def _suite_defaults(self, suite_id: str, suite: dict[str, Any]
                        ) -> SuiteDefaults | None:
        if suite_id not in self._defaults:
            found: SuiteDefaults | None = None
            if "defaults" in suite:  # validated as the file's model validates it
                try:
                    found = SuiteEntry.model_validate({"defaults": suite["defaults"]},
                                                      **self.options).defaults
                except ValidationError:
                    found = None
            self._defaults[suite_id] = found
        return self._defaults[suite_id]

    def check(self, suite_id: str, defaults: SuiteDefaults) -> None:
        """The suite's ``defaults`` as the file's model validated them are those its
        environments were resolved with (read from the same mapping: never otherwise)."""
        if suite_id not in self._checked:
            if self._defaults.get(suite_id) != defaults:
                raise AssertionError(f"suite {suite_id!r}: its defaults read twice differ")
            self._checked.add(suite_id)
