"""The catalogue's shape: suites of environments, with what a suite's defaults may set, and
the frozen :class:`Catalogue` every other stage reads.

Also catalogue data that stages must agree on without running a probe: which probe kinds
apply to an environment, how often each runs, and the hash of what each kind checks.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field

from envcheck.catalogue.datasources import DataSource, InSandboxOption
from envcheck.catalogue.fields import CatalogueModel, EnvId, Ident, Schedule, Seconds
from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.catalogue.probe_specs import (
    Adversarial,
    DependencySpec,
    LeakChecks,
    Strength,
    TestDefaults,
    TestSpec,
)
from envcheck.catalogue.registries import ImageReference, RegistryCredentials
from envcheck.core.results import ProbeKind

__all__ = [
    "CATALOGUE_VERSION",
    "Catalogue",
    "Environment",
    "EnvironmentEntry",
    "EnvironmentSettings",
    "Limits",
    "Reprove",
    "Schedules",
    "Suite",
    "SuiteDefaults",
    "SuiteEntry",
    "Timeouts",
]

CATALOGUE_VERSION = 1  # catalogue.document.CatalogueFile: one file, as written


class Limits(CatalogueModel):
    memory_mb: int = Field(1024, ge=16, description="memory limit of the sandbox (no swap)")
    cpus: float = Field(1.0, gt=0, le=64)
    pids: int = Field(256, ge=8, description="process limit: contains fork bombs")
    tmpfs_mb: int = Field(64, ge=1, description="size of the tmpfs mounted on /tmp")
    output_kb: int = Field(64, ge=1, description="output kept per command (head + tail)")


class Timeouts(CatalogueModel):
    start_s: Seconds = Field(20.0, description="container start, until it runs")
    shell_s: Seconds = Field(5.0, description="login/interactive shell ready latency")
    exec_s: Seconds = Field(60.0, description="any single command in the sandbox")
    probe_s: Seconds = Field(600.0, description="one whole probe")


class Schedules(CatalogueModel):
    """How often the daemon runs each probe kind; ``null`` turns a kind off."""

    terminal: Schedule | None = 300.0
    dependencies: Schedule | None = 3600.0
    tests: Schedule | None = 21600.0
    datasource: Schedule | None = 300.0
    image: Schedule | None = Field(300.0, description=(
        "how often a watched image's tag is looked up in its registry (pull: watch): one "
        "HEAD, no pull, no container"))
    jitter_s: float = Field(30.0, ge=0)
    quarantined_factor: float = Field(
        4.0, ge=1, description="slow-down when quarantined (not of the image kind's looks)")

    def interval(self, kind: ProbeKind, quarantined: bool) -> float | None:
        """Seconds between probes of ``kind`` (None: off), slowed down while quarantined,
        except a tag's look: one HEAD, and a moved tag is how a quarantined image is fixed."""
        base: float | None = getattr(self, str(kind))
        if base is None:
            return None
        slowed = quarantined and kind != ProbeKind.IMAGE
        return base * self.quarantined_factor if slowed else base


class Reprove(CatalogueModel):
    """How long a full probe's evidence stands, for the kinds whose outcome is a property of
    the image (an image is immutable: a tool on PATH, a writable workdir, an installed package
    cannot change while its digest and the spec hold). Within the period, while the digest and
    the spec are unchanged and the kind is healthy, a scheduled probe is an identity check: the
    tag still names that digest on this host, no container. ``null`` pins a kind to a full
    probe every time."""

    terminal: Seconds | None = Field(86400.0, description=(
        "re-prove the terminal at least this often (null: a full probe every time)"))
    dependencies: Seconds | None = Field(86400.0, description=(
        "re-prove the dependencies at least this often (null: a full probe every time)"))

    def every(self, kind: ProbeKind) -> float | None:
        """The period of ``kind``'s evidence; None: never reused (every other kind)."""
        if kind is ProbeKind.TERMINAL:
            return self.terminal
        if kind is ProbeKind.DEPENDENCIES:
            return self.dependencies
        return None


class EnvironmentSettings(CatalogueModel):
    """What a suite's ``defaults`` may set for all its environments."""

    workdir: str = Field("/workspace", pattern=r"^/")
    user: str = "root"
    shell: str = Field("/bin/bash", pattern=r"^/")
    tools: list[str] = Field(default_factory=list, description="executables required on PATH")
    limits: Limits = Limits()
    timeouts: Timeouts = Timeouts()
    schedules: Schedules = Schedules()
    reprove_every: Reprove = Reprove()
    dependencies: DependencySpec | None = None
    tests: TestSpec | None = None
    data_sources: list[Ident] = Field(default_factory=list)
    data_sources_in_sandbox: InSandboxOption = Field(None, description=(
        "probe this environment's data sources from inside its image, on this network"))
    labels: dict[str, str] = Field(default_factory=dict)
    pull: Literal["never", "watch"] = Field("never", description=(
        "'never': the image must be on the host (built or pulled by you); 'watch': envcheck "
        "follows the image's tag in its registry (a HEAD per look), pulls the digest it saw "
        "when a probe needs it, and keeps its pulls under the image cache's budget"))
    keep: bool = Field(False, description=(
        "pinned in envcheck's image cache: once pulled, never evicted"))


class SuiteDefaults(EnvironmentSettings):
    """A suite's ``defaults``: its ``tests`` may leave out the command (:class:`TestDefaults`)."""

    tests: TestDefaults | None = None


class EnvironmentEntry(EnvironmentSettings):
    id: Ident
    image: ImageReference


class Environment(EnvironmentEntry):
    """An environment with its suite's defaults applied: what probes see."""

    id: EnvId  # wider than an entry's: a dataset's own ids
    suite: Ident
    # Set only for an environment made from a Harbor task folder (never written in YAML):
    # the tests probe then runs Harbor's nop/oracle protocol instead of ``tests``.
    harbor: HarborVerifierSpec | None = None

    def model_post_init(self, context: Any, /) -> None:
        # A fleet holds 100,000 of these: one shared set of field names per shape instead of
        # one per environment (~0.7 kB each). Pydantic never changes a frozen model's set in
        # place (a copy with updates gets a copy of it).
        names = self.__pydantic_fields_set__
        shared = _FIELDS_SETS.setdefault(frozenset(names), names)
        if shared is not names:
            object.__setattr__(self, "__pydantic_fields_set__", shared)

    def declared_kinds(self) -> list[ProbeKind]:
        """The probe kinds that apply: what the environment declares (a terminal always).
        Catalogue data, so the scheduler, the feed and the metrics agree without a probe."""
        declared = {ProbeKind.TERMINAL: True, ProbeKind.DEPENDENCIES: self.dependencies is not None,
                    ProbeKind.TESTS: self.tests is not None or self.harbor is not None,
                    ProbeKind.DATASOURCE: bool(self.data_sources),
                    ProbeKind.IMAGE: self.watched()}
        return [kind for kind in ProbeKind if declared.get(kind, False)]

    def watched(self) -> bool:
        """Its image's tag is followed in its registry (``pull: watch``); an image named by
        digest cannot move, so it is pulled when needed but never watched."""
        return self.pull == "watch" and "@" not in self.image

    def adversarial(self) -> Adversarial | None:
        """The adversarial controls its tests probe plays, if it declares any (its ``tests:``
        spec's, or its Harbor task's): the scheduler runs such a probe alone, the executors
        hand it earlier evidence."""
        spec = self.harbor if self.harbor is not None else self.tests
        return spec.adversarial if spec is not None else None

    def leaks(self) -> LeakChecks | None:
        """The answer-leak checks its tests probe plays, if it declares any."""
        spec = self.harbor if self.harbor is not None else self.tests
        return spec.leaks if spec is not None else None

    def strength(self) -> Strength | None:
        """The wrong-fix controls its tests probe plays, if it declares any."""
        spec = self.harbor if self.harbor is not None else self.tests
        return spec.strength if spec is not None else None

    def spec_hash(self, kind: ProbeKind) -> str:
        """Hash of what the given probe kind checks: evidence counts only under one hash."""
        fields = _SPEC_FIELDS[kind]
        if kind is ProbeKind.TESTS and self.harbor is not None:  # others keep their hashes
            fields = fields | {"harbor"}
        dumped = self.model_dump(mode="json", include=fields)
        tests = dumped.get("tests")
        if isinstance(tests, dict):  # how deep, not what: switching keeps the evidence
            for key in _UNHASHED_TESTS_KEYS:
                tests.pop(key, None)
        # Sorted keys: reordering a mapping in the YAML does not change what is checked.
        blob = json.dumps(dumped, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The tests spec's depth settings say how much evidence to gather, not what is checked.
_UNHASHED_TESTS_KEYS = ("depth", "adaptive")
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}  # see Environment.model_post_init
_BASE_FIELDS = {"image", "workdir", "user", "shell", "limits"}
_SPEC_FIELDS: dict[ProbeKind, set[str]] = {
    ProbeKind.TERMINAL: _BASE_FIELDS | {"tools", "timeouts"},
    ProbeKind.DEPENDENCIES: _BASE_FIELDS | {"dependencies"},
    ProbeKind.TESTS: _BASE_FIELDS | {"tests"},
    ProbeKind.DATASOURCE: {"data_sources", "data_sources_in_sandbox"},
    ProbeKind.IMAGE: {"image"},
}


class SuiteEntry(CatalogueModel):
    description: str = ""
    allow_degraded: bool = False
    defaults: SuiteDefaults = SuiteDefaults()
    environments: list[EnvironmentEntry] = Field(default_factory=list)


class Suite(CatalogueModel):
    id: Ident
    description: str
    allow_degraded: bool
    environment_ids: tuple[str, ...]
    file: str


class Catalogue(CatalogueModel):
    suites: tuple[Suite, ...]
    environments: tuple[Environment, ...]
    data_sources: tuple[DataSource, ...]
    files: tuple[str, ...]
    registries: tuple[RegistryCredentials, ...] = ()
    # what the datasets expanded from: instance files, and Harbor task folders
    dataset_files: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()  # the ids of the dataset entries

    def environment(self, env_id: str) -> Environment:
        for env in self.environments:
            if env.id == env_id:
                return env
        raise KeyError(env_id)

    def suite(self, suite_id: str) -> Suite:
        for suite in self.suites:
            if suite.id == suite_id:
                return suite
        raise KeyError(suite_id)

    def data_source(self, source_id: str) -> DataSource:
        for source in self.data_sources:
            if source.id == source_id:
                return source
        raise KeyError(source_id)
