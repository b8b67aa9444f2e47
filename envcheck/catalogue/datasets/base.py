"""What every dataset format shares: the entry's common keys, where its files are, how a
dataset's own ids become environment ids, and the issues of one expansion.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from envcheck.catalogue.fields import CatalogueModel, Ident
from envcheck.catalogue.merge import merge_models
from envcheck.catalogue.models import Environment, Limits, SuiteDefaults, Timeouts
from envcheck.catalogue.probe_specs import (
    CONTROL_KEYS,
    Adversarial,
    LeakChecks,
    Strength,
    TestDefaults,
)
from envcheck.core.errors import CatalogueIssue

__all__ = ["ISSUES_PER_DATASET", "DatasetBase", "Expansion", "decode_env_id", "env_id",
           "resolve_paths"]

# A dataset of 10,000 broken records must not print 10,000 lines: the first ones say enough.
ISSUES_PER_DATASET = 50
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


class DatasetBase(CatalogueModel):
    """Keys every dataset entry has; a format adds its ``format`` literal and its mapping."""

    # The entry's keys that are tests keys: merged over the suite's defaults.tests
    TESTS_KEYS: ClassVar[tuple[str, ...]] = CONTROL_KEYS

    id: Ident = Field(description="the dataset's id (unique across the catalogue)")
    format: str = Field(description="the dataset's format: swebench")  # a Literal per format
    path: str = Field(min_length=1, description=(
        "relative to the catalogue file: a file, a folder, or a glob ('data/*.jsonl')"))
    suite: Ident = Field(description=(
        "the suite (declared in any catalogue file) the tasks join: its defaults apply"))
    workdir: str | None = Field(None, pattern=r"^/", description="overrides the suite's")
    user: str | None = Field(None, description="overrides the suite's")
    limits: Limits | None = Field(None, description="merged key by key over the suite's")
    timeouts: Timeouts | None = Field(None, description="merged key by key over the suite's")
    adversarial: Adversarial | None = Field(None, description=(
        "adversarial controls played against every task's verification, as the dataset's "
        "protocol runs it (tests.adversarial); merged key by key over the suite's "
        "defaults.tests.adversarial, null turns them off"))
    leaks: LeakChecks | None = Field(None, description=(
        "answer-leak checks on every task's image (tests.leaks); merged key by key over the "
        "suite's defaults.tests.leaks, null turns them off"))
    strength: Strength | None = Field(None, description=(
        "wrong-fix controls: mutants of every task's gold patch (a Harbor task: of the files "
        "its solve.sh writes) played through its verification (tests.strength); merged key "
        "by key over the suite's defaults.tests.strength, null turns them off"))

    def settings(self, defaults: SuiteDefaults) -> SuiteDefaults:
        """The suite's defaults with this entry's overrides applied (once per dataset), its
        tests keys (:data:`TESTS_KEYS`) over the defaults' ``tests``, key by key."""
        overrides: dict[str, object] = {
            k: getattr(self, k) for k in ("workdir", "user", "limits", "timeouts")
            if getattr(self, k) is not None}
        # a control set to null turns the suite's off; another key's null is its being unset
        tests = {k: getattr(self, k) for k in self.TESTS_KEYS
                 if getattr(self, k) is not None
                 or (k in CONTROL_KEYS and k in self.model_fields_set)}
        if tests:
            overrides["tests"] = TestDefaults.model_validate(tests)
        return merge_models(defaults, SuiteDefaults.model_validate(overrides))

    def fields(self, settings: SuiteDefaults) -> dict[str, object]:
        """An environment's settings but its tests, labelled with this dataset's id."""
        found: dict[str, object] = {k: getattr(settings, k)
                                    for k in SuiteDefaults.model_fields if k != "tests"}
        found["labels"] = {**settings.labels, "dataset": self.id}
        return found


def env_id(dataset_id: str) -> str:
    """The environment id of a dataset's own id: the same id when it is a plain id (letters,
    digits, '.', '_', '-'; at most 255), else every other byte as ``~XX`` (reversible: '~'
    itself is escaped). Raises ValueError for an empty id or one too long once escaped."""
    if _PLAIN.match(dataset_id):
        return dataset_id
    out = []
    for i, char in enumerate(dataset_id):
        if char in _SAFE and not (i == 0 and char in "._-"):
            out.append(char)
        else:
            out.extend(f"~{b:02X}" for b in char.encode())
    escaped = "".join(out)
    if not escaped or len(escaped) > 255:
        raise ValueError(f"the id {dataset_id!r} cannot be an environment id: empty, or over "
                         "255 characters once escaped")
    return escaped


def decode_env_id(environment_id: str) -> str:
    """The dataset's own id back from :func:`env_id`."""
    parts = re.split(r"~([0-9A-F]{2})", environment_id)  # text, hex, text, hex, ..., text
    raw = b"".join(bytes.fromhex(p) if i % 2 else p.encode() for i, p in enumerate(parts))
    return raw.decode("utf-8")


def resolve_paths(catalogue_file: str, pattern: str) -> tuple[list[Path], str | None]:
    """The files ``pattern`` names, relative to the catalogue file: a file, every file a glob
    matches, or a folder's entries (sorted); or ([], why) when there is none."""
    base = Path(catalogue_file).resolve().parent
    target = base / pattern
    if glob.has_magic(pattern):
        found = sorted(Path(p) for p in glob.glob(str(target), recursive=True))
        return (found, None) if found else ([], f"no file matches {pattern!r} (in {base})")
    if target.is_dir():
        entries = sorted(p for p in target.iterdir() if not p.name.startswith("."))
        return (entries, None) if entries else ([], f"the folder {target} is empty")
    if not target.exists():
        return [], f"{target}: no such file or directory"
    return [target], None


@dataclass
class Expansion:
    """What one dataset entry expanded into: environments, and issues found on the way."""

    environments: list[Environment] = field(default_factory=list)
    # (environment id, file, line or None, key of its id) of each environment: where a
    # duplicate points
    origins: list[tuple[str, str, int | None, str]] = field(default_factory=list)
    issues: list[CatalogueIssue] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dropped: int = 0  # issues past ISSUES_PER_DATASET, counted, not listed

    def issue(self, file: str, line: int | None, key: str, message: str) -> None:
        if len(self.issues) < ISSUES_PER_DATASET:
            self.issues.append(CatalogueIssue(file, line, key, message))
        else:
            self.dropped += 1
