"""The catalogue: YAML files declaring suites of environments and data sources.

Parsed once into frozen pydantic models (unknown keys rejected). Every problem found while
loading is collected with its file, line and key path, then raised together as one
:class:`~envcheck.core.errors.CatalogueError`.

Suite ``defaults`` fill what an environment leaves unset, key by key; nested blocks
(``limits``, ``timeouts``, ``schedules``, ``tests``, ``dependencies``) merge per key; lists
and free-form mappings (``tools``, ``data_sources``, ``labels``, ``dependencies.python``)
are replaced whole, and so is ``tests.oracle`` (a script replaces a default path).

Beyond the schema, the loader checks across files: environment, suite and data source ids
are unique, and every data source an environment uses is defined somewhere.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin
from urllib.parse import urlsplit

import jsonschema
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import ErrorDetails

from envcheck.catalogue.yamlsrc import (
    KeyPath,
    SourceDoc,
    SourceLimits,
    file_kind,
    load_yaml,
    read_source,
)
from envcheck.core.errors import CatalogueError, CatalogueIssue
from envcheck.core.results import ProbeKind

__all__ = [
    "Auth",
    "Catalogue",
    "CatalogueFile",
    "DataSource",
    "DependencySpec",
    "Environment",
    "EnvironmentSettings",
    "Freshness",
    "InSandbox",
    "Limits",
    "Oracle",
    "Schedules",
    "Suite",
    "TestSpec",
    "Timeouts",
    "load_catalogue",
]

CATALOGUE_VERSION = 1
_ID = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_DURATION_RE = r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$"
_DURATION = re.compile(_DURATION_RE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds(value: Any) -> Any:
    """Accept ``30``, ``"30s"``, ``"5m"``, ``"1.5h"``; leave anything else to pydantic."""
    if isinstance(value, bool):  # YAML's ``yes``/``true`` must not read as one second
        raise ValueError(f"not a duration: {str(value).lower()} (use e.g. 30s, 5m, 1h)")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 1h)")
        return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    return value


Seconds = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(gt=0, allow_inf_nan=False),
    WithJsonSchema({"anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "string", "pattern": _DURATION_RE},
    ], "description": "seconds, or a duration such as 30s, 5m, 1.5h"}),
]
Ident = Annotated[str, Field(pattern=_ID)]

MIN_SCHEDULE_ENV = "ENVCHECK_MIN_SCHEDULE"
MIN_SCHEDULE_S = 10.0


def schedule_floor() -> float:
    """The shortest schedule a catalogue may declare: 10 s, or ``$ENVCHECK_MIN_SCHEDULE``
    (a duration, e.g. ``1s``: for development and tests), read at every catalogue load."""
    raw = os.environ.get(MIN_SCHEDULE_ENV, "").strip()
    if not raw:
        return MIN_SCHEDULE_S
    match = _DURATION.match(raw)
    floor = float(match.group(1)) * _UNIT_S[match.group(2) or "s"] if match else 0.0
    if floor <= 0:
        raise ValueError(f"{MIN_SCHEDULE_ENV}={raw!r} is not a valid floor: use a duration "
                         f"above 0, e.g. 1s")
    return floor


def _above_floor(value: float) -> float:
    floor = schedule_floor()
    if value < floor:
        raise ValueError(f"{value:g} s is more often than the schedule floor of {floor:g} s "
                         f"(lower the floor for development with {MIN_SCHEDULE_ENV}, e.g. "
                         f"{MIN_SCHEDULE_ENV}=1s)")
    return value


Schedule = Annotated[Seconds, AfterValidator(_above_floor)]
"""A probing interval: at least the schedule floor (a typo like ``1ms`` must not turn the
daemon into a busy loop)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Model):
    memory_mb: int = Field(1024, ge=16, description="memory limit of the sandbox (no swap)")
    cpus: float = Field(1.0, gt=0, le=64)
    pids: int = Field(256, ge=8, description="process limit: contains fork bombs")
    tmpfs_mb: int = Field(64, ge=1, description="size of the tmpfs mounted on /tmp")
    output_kb: int = Field(64, ge=1, description="output kept per command (head + tail)")


class Timeouts(_Model):
    start_s: Seconds = Field(20.0, description="container start, until it runs")
    shell_s: Seconds = Field(5.0, description="login/interactive shell ready latency")
    exec_s: Seconds = Field(60.0, description="any single command in the sandbox")
    probe_s: Seconds = Field(600.0, description="one whole probe")


class Schedules(_Model):
    """How often the daemon runs each probe kind; ``null`` turns a kind off."""

    terminal: Schedule | None = 300.0
    dependencies: Schedule | None = 3600.0
    tests: Schedule | None = 21600.0
    datasource: Schedule | None = 300.0
    jitter_s: float = Field(30.0, ge=0)
    quarantined_factor: float = Field(4.0, ge=1, description="slow-down when quarantined")

    def interval(self, kind: ProbeKind, quarantined: bool) -> float | None:
        """Seconds between probes of ``kind`` (None: off), slowed down while quarantined."""
        base: float | None = getattr(self, str(kind))
        if base is None:
            return None
        return base * self.quarantined_factor if quarantined else base


_PY_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", re.ASCII)
_DEB_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$")
_DEB_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+~:-]*$")
# dpkg's relation operators, named as ``dpkg --compare-versions`` wants them.
DEB_OPERATORS = {"<<": "lt", "<=": "le", "=": "eq", ">=": "ge", ">>": "gt"}
_ANY_VERSION = ("", "*")
# Key of the pydantic validation context naming the catalogue file being loaded.
CATALOGUE_FILE = "catalogue_file"


class DependencySpec(_Model):
    """What an image promises about its installed software; every spec is checked at load.

    ``python`` specs are PEP 440 (``">=8,<9"``); ``debian`` specs are dpkg relations
    (``">= 1:2.39, << 3"``); ``""`` or ``"*"`` asks only that the package is installed.
    """

    python: dict[str, str] = Field(default_factory=dict, description="package -> PEP 440 spec")
    debian: dict[str, str] = Field(
        default_factory=dict,
        description="package -> dpkg relations, comma-separated: '>= 1:2.39, << 3'",
    )
    executables: dict[str, str | None] = Field(
        default_factory=dict, description="tool -> regex its --version output must match"
    )
    imports: list[str] = Field(default_factory=list, description="modules that must import")
    pip_check: bool = True
    python_bin: str = Field("python3", pattern=r"^\S+$")
    lock: str | None = Field(None, description="pip freeze lock file, relative to the catalogue")
    # Set by the loader, never written: the lock resolved against the file that declares it
    # (excluded from dumps, so spec hashes do not depend on the checkout's location), and a
    # digest of its content (a new lock is a new spec; evidence starts fresh).
    lock_path: SkipJsonSchema[str | None] = Field(None, exclude=True)
    lock_sha256: SkipJsonSchema[str | None] = None

    @field_validator("python")
    @classmethod
    def _python_specs(cls, value: dict[str, str]) -> dict[str, str]:
        for name, spec in value.items():
            if not _PY_NAME.match(name):
                raise ValueError(f"python: {name!r} is not a valid package name")
            python_specifier(spec, name)
        return value

    @field_validator("debian")
    @classmethod
    def _debian_specs(cls, value: dict[str, str]) -> dict[str, str]:
        for name, spec in value.items():
            if not _DEB_NAME.match(name):
                raise ValueError(f"debian: {name!r} is not a valid package name")
            debian_relations(spec, name)
        return value

    @field_validator("executables")
    @classmethod
    def _regexes(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for tool, pattern in value.items():
            if not tool or any(c.isspace() for c in tool):
                raise ValueError(f"executables: {tool!r} is not a command name")
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"executables.{tool}: invalid regex: {exc}") from None
        return value

    @field_validator("imports")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for module in value:
            if not _MODULE.match(module):
                raise ValueError(f"imports: {module!r} is not a dotted module name")
        return value

    @model_validator(mode="before")
    @classmethod
    def _resolve_lock(cls, data: Any, info: ValidationInfo) -> Any:
        file = (info.context or {}).get(CATALOGUE_FILE)
        if file is None or not isinstance(data, dict):
            return data  # not loading a file (e.g. a merge of loaded models): keep as is
        if "lock_path" in data or "lock_sha256" in data:
            raise ValueError("lock_path and lock_sha256 are set by envcheck; write 'lock'")
        lock = data.get("lock")
        if isinstance(lock, str):
            path = Path(file).resolve().parent / lock
            try:
                digest: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:  # not written yet (envcheck snapshot writes it): the probe says so
                digest = None
            return {**data, "lock_path": str(path), "lock_sha256": digest}
        if "lock" in data:  # an explicit null also drops a lock the suite defaults set
            return {**data, "lock_path": None, "lock_sha256": None}
        return data


def python_specifier(spec: str, name: str = "") -> SpecifierSet | None:
    """A PEP 440 specifier set; None for "any version" (``""`` or ``"*"``)."""
    if spec.strip() in _ANY_VERSION:
        return None
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"python.{name}: {spec!r} is not a PEP 440 specifier "
                         f"(e.g. '>=8,<9', '==1.2.*')") from None


def debian_relations(spec: str, name: str = "") -> list[tuple[str, str]]:
    """``">= 1:2.39, << 3"`` -> [(">=", "1:2.39"), ("<<", "3")]; [] for any version."""
    if spec.strip() in _ANY_VERSION:
        return []
    relations: list[tuple[str, str]] = []
    for clause in spec.split(","):
        match = re.match(r"^\s*(<<|<=|=|>=|>>)\s*(\S+)\s*$", clause)
        if not match or not _DEB_VERSION.match(match.group(2)):
            raise ValueError(f"debian.{name}: {clause.strip()!r} is not a dpkg relation "
                             f"(use {', '.join(DEB_OPERATORS)} and a version, e.g. '>= 1:2.39')")
        relations.append((match.group(1), match.group(2)))
    return relations


class Oracle(_Model):
    """The reference solution: exactly one of ``script`` or ``path``."""

    merge_whole: ClassVar[bool] = True  # an environment's oracle replaces the default's

    script: str | None = Field(None, description="script copied into the sandbox and run in the "
                               "workdir as the sandbox user (by the declared shell, or by its "
                               "own #! line)")
    path: str | None = Field(None, pattern=r"^/", description="script already in the image, "
                             "run in the workdir as the sandbox user")

    @model_validator(mode="after")
    def _one_of(self) -> Oracle:
        if (self.script is None) == (self.path is None):
            raise ValueError("set exactly one of oracle.script or oracle.path")
        return self


# 8 positive runs: a test failing 1 run in 3 is seen both ways with probability
# 1 - (2/3)^8 - (1/3)^8 = 96.1% (97.4% for a pass-to-pass test, whose negative-control outcome
# is a 9th observation); 3 runs, the public practice, catch it only 67% of the time.
DEFAULT_RERUNS = 8


class TestSpec(_Model):
    """How to run an environment's tests, and what they must show (the ``tests`` probe)."""

    __test__: ClassVar[bool] = False  # not a pytest test class, though its name says so

    command: str = Field(description=(
        "shell command run by the declared shell, in the workdir, as the sandbox user; it must "
        "write a JUnit XML report to junit_path. '{tests}' in it is replaced by the test ids of "
        "the run (fail_to_pass + pass_to_pass), shell-quoted, in the run's order, and "
        "'{junit}' by junit_path; the same come in $ENVCHECK_TEST_IDS (one id per line, in "
        "order) and $ENVCHECK_JUNIT. A command that takes neither runs its own selection in "
        "its own order, so shuffling cannot reveal order dependence."))
    junit_path: str = Field("/tmp/envcheck-junit.xml", pattern=r"^/", description=(
        "the JUnit XML report the command writes; removed before each run, read back with a "
        "size cap"))
    fail_to_pass: list[str] = Field(default_factory=list, description=(
        "tests that must fail without the oracle and pass after it: pytest node ids "
        "(tests/test_x.py::TestClass::test_y[param]) or, for any JUnit runner, "
        "'classname::name'"))
    pass_to_pass: list[str] = Field(default_factory=list, description=(
        "tests that must pass both without and after the oracle"))
    oracle: Oracle | None = Field(None, description="the reference solution (positive control)")
    reruns: int = Field(DEFAULT_RERUNS, ge=1, le=50, description=(
        "runs of the positive control, each in a fresh container: the first in the declared "
        "order, the rest shuffled (if shuffle); any disagreement between runs is flaky. "
        f"{DEFAULT_RERUNS} catch a test failing 1 run in 3 with >= 95% probability"))
    shuffle: bool = Field(True, description="shuffle the test order of every rerun after the "
                          "first, to reveal order dependence")
    timeout_s: Seconds = Field(300.0, description=(
        "one run of the command (or of the oracle); a run past it is killed, the probe "
        "reports timeout and skips the remaining runs"))

    @model_validator(mode="after")
    def _distinct_ids(self) -> TestSpec:
        for name, ids in (("fail_to_pass", self.fail_to_pass),
                          ("pass_to_pass", self.pass_to_pass)):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            if twice:
                raise ValueError(f"{name} lists {', '.join(twice)} more than once")
        both = sorted(set(self.fail_to_pass) & set(self.pass_to_pass))
        if both:
            raise ValueError(f"in both fail_to_pass and pass_to_pass: {', '.join(both)}")
        return self


_ENV_VAR = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HEADER = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # an HTTP token (RFC 9110)
_NETWORK = re.compile(r"^(container:)?[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Network modes an in-sandbox probe may not use: the probe must never widen what a sandbox
# reaches beyond the network the catalogue names for it.
_RESERVED_NETWORKS = {
    "none": "has no network at all",
    "bridge": "is Docker's default network",
    "default": "is Docker's default network",
    "host": "is the host's own network (no isolation)",
}


class Auth(_Model):
    """A data source's secret: read at probe time from an environment variable or a file
    (exactly one), sent in a header or a query parameter; never stored, logged or shown."""

    env: str | None = Field(None, pattern=_ENV_VAR,
                            description="environment variable holding the secret")
    file: str | None = Field(None, pattern=r"^/", description="file holding the secret "
                             "(surrounding whitespace dropped), e.g. /run/secrets/weather")
    header: str = Field("Authorization", pattern=_HEADER, description="header carrying it")
    scheme: str = Field("Bearer", pattern=r"^[A-Za-z0-9._~+/-]*$", description=(
        "prefix of the header value: 'Bearer', 'Basic' (the secret is 'user:password', "
        "base64-encoded for you) or '' to send the secret as it is"))
    query: str | None = Field(None, min_length=1, description=(
        "send the secret as this query parameter instead of a header"))

    @model_validator(mode="after")
    def _one_source(self) -> Auth:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of auth.env or auth.file (a secret is never "
                             "written in the catalogue)")
        return self


class Freshness(_Model):
    """A timestamp in the JSON body that must be recent: ISO 8601 (without an offset: UTC)
    or seconds since the epoch."""

    field: str = Field(pattern=r"^[^.\s]+(\.[^.\s]+)*$", description=(
        "dotted path to the timestamp, list items by index: 'meta.updated_at', 'items.0.ts'"))
    max_age_s: Seconds = Field(description="older than this is stale_data")


def _in_sandbox(value: Any) -> Any:
    if value is True:  # the short form would leave the network to chance: say what to write
        raise ValueError("in-sandbox probing needs the Docker network to attach its probe "
                         "container to: {network: 'container:NAME'} or {network: USER_NETWORK}")
    return None if value is False else value


class InSandbox(_Model):
    """Probe from inside a short-lived container of the environment's image, attached to the
    network named here; every other sandbox keeps network ``none``."""

    network: str = Field(description=(
        "Docker network mode of the probe container: 'container:NAME' (share that "
        "container's network namespace, e.g. an egress proxy's) or a user-defined network"))

    @field_validator("network")
    @classmethod
    def _named(cls, value: str) -> str:
        if value in _RESERVED_NETWORKS:
            raise ValueError(f"network {value!r} {_RESERVED_NETWORKS[value]}: name the "
                             "network the sandbox is meant to use ('container:NAME' or a "
                             "user-defined network)")
        if not _NETWORK.match(value):
            raise ValueError(f"network {value!r} is not 'container:NAME' or a network name")
        return value


InSandboxOption = Annotated[InSandbox | None, BeforeValidator(_in_sandbox)]


class DataSource(_Model):
    """A data API that environments call; the ``datasource`` probe samples it."""

    id: Ident
    description: str = ""
    method: Literal["GET", "POST", "HEAD"] = "GET"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    body: Any = Field(None, description="JSON request body (POST only)")
    auth: Auth | None = None
    expected_status: int = Field(200, ge=100, le=599)
    format: Literal["json", "any"] = Field("json", description=(
        "'json': the body must be JSON (schema, freshness and drift checks need it); "
        "'any': only the status and the latency are checked"))
    json_schema: dict[str, Any] | None = Field(None, alias="schema", description=(
        "JSON Schema the body must validate against (draft 2020-12 unless $schema says "
        "otherwise)"))
    freshness: Freshness | None = None
    latency_budget_ms: float = Field(1000.0, gt=0, description=(
        "the p95 latency of the samples must stay under it, else slow_response"))
    samples: int = Field(5, ge=1, le=1000, description="requests per probe")
    connect_timeout_s: Seconds = 3.0
    read_timeout_s: Seconds = Field(10.0, description=(
        "for the first byte of the answer, and again for the whole body"))
    retries: int = Field(3, ge=0, le=10, description=(
        "retries per sample of a transient failure (timeouts, resets, refused, 5xx, 429)"))
    retry_budget_s: Seconds = Field(10.0, description=(
        "waiting between retries, Retry-After included, one probe of the source may spend"))
    max_body_kb: int = Field(1024, ge=1, le=256 * 1024, description="larger bodies are "
                             "body_too_large (and not read further)")
    verify_tls: bool = True
    ca_bundle: str | None = Field(None, pattern=r"^/", description=(
        "PEM file of the certificate authorities to trust instead of the system's"))
    in_sandbox: InSandboxOption = None
    # Placement, not spec: excluded from dumps, so pinning a source moves no spec hash.
    node: Ident | None = Field(None, exclude=True, description=(
        "with the ray executor: a custom resource that only the worker nodes able to reach "
        "this source declare (e.g. net-inside); the datasource probes of environments using "
        "the source run on such a node. The local executor ignores it"))
    schedule: Schedule | None = 300.0

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.match(_HEADER, name) or any(c in text for c in "\r\n\0"):
                raise ValueError(f"headers: {name!r} is not a valid header (name: a token; "
                                 "value: one line)")
        return value

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str) -> str:
        if urlsplit(value).password is not None:
            raise ValueError("a password in the URL would be written in the catalogue: "
                             "use auth (env or file)")
        return value

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                jsonschema.validators.validator_for(value).check_schema(value)
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "top level"
                raise ValueError(f"not a valid JSON Schema ({where}): {exc.message}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DataSource:
        if (self.method == "HEAD" or self.format == "any") and (
            self.json_schema is not None or self.freshness is not None
        ):
            raise ValueError("schema and freshness need a JSON body (format: json, not HEAD)")
        if self.body is not None and self.method != "POST":
            raise ValueError(f"a request body needs method POST, not {self.method}")
        if self.auth is not None and self.auth.query is not None and (
            self.auth.query in self.query or f"{self.auth.query}=" in self.url
        ):
            raise ValueError(f"query parameter {self.auth.query!r} is both auth.query and "
                             "set in the catalogue")
        if not self.verify_tls and self.ca_bundle is not None:
            raise ValueError("ca_bundle has no effect with verify_tls: false")
        return self


class EnvironmentSettings(_Model):
    """What a suite's ``defaults`` may set for all its environments."""

    workdir: str = Field("/workspace", pattern=r"^/")
    user: str = "root"
    shell: str = Field("/bin/bash", pattern=r"^/")
    tools: list[str] = Field(default_factory=list, description="executables required on PATH")
    limits: Limits = Limits()
    timeouts: Timeouts = Timeouts()
    schedules: Schedules = Schedules()
    dependencies: DependencySpec | None = None
    tests: TestSpec | None = None
    data_sources: list[Ident] = Field(default_factory=list)
    data_sources_in_sandbox: InSandboxOption = Field(None, description=(
        "probe this environment's data sources from inside its image, on this network"))
    labels: dict[str, str] = Field(default_factory=dict)


class EnvironmentEntry(EnvironmentSettings):
    id: Ident
    image: str = Field(min_length=1)


class Environment(EnvironmentEntry):
    """An environment with its suite's defaults applied: what probes see."""

    suite: Ident

    def declared_kinds(self) -> list[ProbeKind]:
        """The probe kinds that apply: what the environment declares (a terminal always).
        Catalogue data, so the scheduler, the feed and the metrics agree without a probe."""
        declared = {ProbeKind.TERMINAL: True, ProbeKind.DEPENDENCIES: self.dependencies is not None,
                    ProbeKind.TESTS: self.tests is not None,
                    ProbeKind.DATASOURCE: bool(self.data_sources)}
        return [kind for kind in ProbeKind if declared.get(kind, False)]

    def spec_hash(self, kind: ProbeKind) -> str:
        """Hash of what the given probe kind checks: evidence counts only under one hash."""
        fields = _SPEC_FIELDS[kind]
        # Sorted keys: reordering a mapping in the YAML does not change what is checked.
        blob = json.dumps(self.model_dump(mode="json", include=fields), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_BASE_FIELDS = {"image", "workdir", "user", "shell", "limits"}
_SPEC_FIELDS: dict[ProbeKind, set[str]] = {
    ProbeKind.TERMINAL: _BASE_FIELDS | {"tools", "timeouts"},
    ProbeKind.DEPENDENCIES: _BASE_FIELDS | {"dependencies"},
    ProbeKind.TESTS: _BASE_FIELDS | {"tests"},
    ProbeKind.DATASOURCE: {"data_sources", "data_sources_in_sandbox"},
}


class SuiteEntry(_Model):
    description: str = ""
    allow_degraded: bool = False
    defaults: EnvironmentSettings = EnvironmentSettings()
    environments: list[EnvironmentEntry] = Field(default_factory=list)


class CatalogueFile(_Model):
    """One catalogue file, as written. ``envcheck schema`` prints its JSON Schema."""

    version: Literal[1]
    suites: dict[Ident, SuiteEntry] = Field(
        default_factory=dict, json_schema_extra={"additionalProperties": False}
    )
    data_sources: list[DataSource] = Field(default_factory=list)


class Suite(_Model):
    id: Ident
    description: str
    allow_degraded: bool
    environment_ids: tuple[str, ...]
    file: str


class Catalogue(_Model):
    suites: tuple[Suite, ...]
    environments: tuple[Environment, ...]
    data_sources: tuple[DataSource, ...]
    files: tuple[str, ...]

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


M = TypeVar("M", bound=BaseModel)


def _merge(base: M, over: M) -> M:
    """``over``'s explicitly set fields win; nested models merge key by key."""
    values: dict[str, Any] = {}
    for name in type(base).model_fields:
        mine, theirs = getattr(over, name), getattr(base, name)
        if name in over.model_fields_set:
            if (isinstance(mine, BaseModel) and isinstance(theirs, BaseModel)
                    and not getattr(mine, "merge_whole", False)):
                mine = _merge(theirs, mine)
            values[name] = mine
        elif name in base.model_fields_set:
            values[name] = theirs
    return type(base).model_validate({**values})


def _resolve(suite_id: str, defaults: EnvironmentSettings, entry: EnvironmentEntry) -> Environment:
    merged = _merge(defaults, EnvironmentSettings.model_validate(
        {k: getattr(entry, k) for k in entry.model_fields_set if k not in ("id", "image")}
    ))
    fields = {k: getattr(merged, k) for k in EnvironmentSettings.model_fields}
    return Environment(id=entry.id, image=entry.image, suite=suite_id, **fields)


def _catalogue_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[CatalogueIssue]]:
    """Files named, and the ``*.yaml``/``*.yml`` entries of directories named (sorted, not
    recursive); a file reached twice is read once. An entry that is not a regular file (a
    directory, a FIFO, a device, a symlink loop or a broken symlink) is an issue, never
    skipped in silence nor opened."""
    files: list[Path] = []
    issues: list[CatalogueIssue] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            entries = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
            found = []
            for entry in entries:
                kind = file_kind(entry)
                if kind is None:
                    found.append(entry)
                else:
                    issues.append(CatalogueIssue(str(entry), None, "", f"{kind} (every *.yaml "
                                                 "and *.yml of a catalogue directory is read: "
                                                 "rename or remove it)"))
            if not entries:
                issues.append(CatalogueIssue(str(path), None, "",
                                             "no *.yaml or *.yml files in this directory"))
        else:
            kind = file_kind(path)
            if kind is not None:
                issues.append(CatalogueIssue(str(path), None, "", kind))
                continue
            found = [path]
        for file in found:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                files.append(file)
    return files, issues


def _limits() -> SourceLimits:
    """The file limits and the schedule floor from the environment, checked once per load."""
    problems: list[CatalogueIssue] = []
    limits = SourceLimits()
    try:
        limits = SourceLimits.from_env()
    except ValueError as exc:
        problems.append(CatalogueIssue("environment", None, "", str(exc)))
    try:
        schedule_floor()
    except ValueError as exc:
        problems.append(CatalogueIssue("environment", None, "", str(exc)))
    if problems:
        raise CatalogueError(problems)
    return limits


def _validate(doc: SourceDoc) -> CatalogueFile | None:
    """Validate one parsed document, adding every problem pydantic finds to ``doc.issues``."""
    if not doc.parsed:
        return None
    if doc.data is None:
        doc.issues.append(doc.issue((), "the file is empty (a catalogue starts with "
                                        "'version: 1')"))
        return None
    if not isinstance(doc.data, dict):
        doc.issues.append(doc.issue((), f"a catalogue file must be a mapping with 'version: 1', "
                                        f"got {_show(doc.data)}"))
        return None
    try:
        # by_name=False: the file must use the documented key (``schema``), not the field name.
        parsed = CatalogueFile.model_validate(doc.data, by_alias=True, by_name=False,
                                              context={CATALOGUE_FILE: doc.file})
    except ValidationError as exc:
        for err in exc.errors():
            loc: KeyPath = tuple(err["loc"])
            if loc and loc[-1] == "[key]":  # the key itself is invalid (e.g. a suite id)
                loc = loc[:-1]
            doc.issues.append(doc.issue(loc, _message(err)))
        return None
    return None if doc.issues else parsed


_PATTERN_HELP = {
    _ID: "invalid id {got}: use up to 63 lowercase letters, digits, '.', '_' or '-', "
         "starting with a letter or digit",
    r"^https?://": "expected an http:// or https:// URL, got {got}",
    r"^/": "expected an absolute path (starting with /), got {got}",
}
_EXPECTED = {
    "model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "string_type": "a string",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "finite_number": "a finite number",
}


def _message(err: ErrorDetails) -> str:
    """A pydantic error in words for the person editing the YAML."""
    kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx", {})
    got = _show(err["input"])
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _keys_at(loc[:-1]), n=1)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        if loc == ("version",):
            return "required key is missing (a catalogue starts with 'version: 1')"
        return "required key is missing"
    if loc == ("version",):
        return (f"unsupported catalogue version {got} "
                f"(this envcheck reads version {CATALOGUE_VERSION})")
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        if pattern in _PATTERN_HELP:
            return _PATTERN_HELP[pattern].format(got=got)
        return f"does not match the pattern {pattern!r}, got {got}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}, got {got}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind in _EXPECTED:
        hint = ""
        if kind == "string_type" and not isinstance(err["input"], dict | list | None):
            hint = " (quote it in the YAML)"
        return f"expected {_EXPECTED[kind]}, got {got}{hint}"
    msg = str(err["msg"])
    if msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    return f"{msg}, got {got}"


def _show(value: Any) -> str:
    """A value as the YAML author would recognise it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def _keys_at(loc: KeyPath) -> list[str]:
    """The keys the catalogue schema allows in the mapping at ``loc`` (for suggestions)."""
    tp: Any = CatalogueFile
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or name): f for name, f in tp.model_fields.items()}
            if part not in fields:
                return []
            tp = fields[str(part)].annotation
        elif get_origin(tp) in (list, tuple) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and isinstance(part, str):
            tp = get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """``Annotated[X, ...]`` -> X; ``X | None`` -> X."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _items(data: Any, key: str) -> list[tuple[int, dict[str, Any]]]:
    """The mappings in the list ``data[key]``, with their index (raw data: anything goes)."""
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _str_id(item: dict[str, Any]) -> str | None:
    value = item.get("id")
    return value if isinstance(value, str) else None


class _Loader:
    """Cross-file checks (duplicate ids, data source references), done on the raw data so
    that they are reported even for files with other problems."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], tuple[str, KeyPath, str]] = {}  # -> file, path, where
        self.refs: dict[tuple[str, KeyPath], tuple[SourceDoc, str]] = {}

    def claim(self, doc: SourceDoc, kind: str, path: KeyPath, ident: str) -> bool:
        """Record the first place an id is defined; report any later one."""
        here = (doc.file, path, doc.issue(path, "").location())
        first = self.first.setdefault((kind, ident), here)
        if first[:2] != here[:2]:
            doc.issues.append(doc.issue(path, f"duplicate {kind} id {ident!r} "
                                              f"(first in {first[2]})"))
            return False
        return True

    def scan(self, doc: SourceDoc) -> bool:
        """Check one file's ids and collect its references; False if an id is taken."""
        ok = True
        data = doc.data
        for i, source in _items(data, "data_sources"):
            if (sid := _str_id(source)) is not None:
                ok &= self.claim(doc, "data source", ("data_sources", i, "id"), sid)
        suites = data.get("suites") if isinstance(data, dict) else None
        for suite_id, suite in suites.items() if isinstance(suites, dict) else ():
            spath: KeyPath = ("suites", suite_id)
            ok &= self.claim(doc, "suite", spath, suite_id)
            defaults = suite.get("defaults") if isinstance(suite, dict) else None
            for i, env in _items(suite, "environments"):
                epath: KeyPath = (*spath, "environments", i)
                if (eid := _str_id(env)) is not None:
                    ok &= self.claim(doc, "environment", (*epath, "id"), eid)
                # An environment's own list replaces the defaults' list.
                holder, hpath = (env, epath) if "data_sources" in env else (defaults, (
                    *spath, "defaults"))
                refs = holder.get("data_sources") if isinstance(holder, dict) else None
                for j, ref in enumerate(refs if isinstance(refs, list) else ()):
                    if isinstance(ref, str) and re.match(_ID, ref):  # else: invalid id
                        self.refs[(doc.file, (*hpath, "data_sources", j))] = (doc, ref)
        return ok

    def check_refs(self) -> None:
        for (_, path), (doc, ref) in self.refs.items():
            if ("data source", ref) not in self.first:
                doc.issues.append(doc.issue(path, f"unknown data source {ref!r}"))


def load_catalogue(paths: Sequence[str | Path]) -> Catalogue:
    """Load and validate catalogue files (or directories of them) into one frozen catalogue.

    Raises :class:`CatalogueError` with every problem found in every file, each with its file,
    line and key path: paths that do not exist first, then file by file, by line.
    """
    limits = _limits()
    files, missing = _catalogue_files(paths)
    loader = _Loader()
    per_file: list[list[CatalogueIssue]] = [missing]
    suites: list[Suite] = []
    environments: list[Environment] = []
    sources: list[DataSource] = []
    for file in files:
        text, why = read_source(file, limits)
        if text is None:
            per_file.append([CatalogueIssue(str(file), None, "", why or "cannot read")])
            continue
        doc = load_yaml(str(file), text, limits)
        per_file.append(doc.issues)  # check_refs may add to it later
        parsed = _validate(doc)
        unique = loader.scan(doc)
        if parsed is None or not unique:
            continue
        sources.extend(parsed.data_sources)
        for suite_id, entry in parsed.suites.items():
            for i, env_entry in enumerate(entry.environments):
                try:
                    environments.append(_resolve(suite_id, entry.defaults, env_entry))
                except ValidationError as exc:  # defaults + entry conflict (cross-field rules)
                    where: KeyPath = ("suites", suite_id, "environments", i)
                    doc.issues.extend(doc.issue((*where, *e["loc"]), "with the suite "
                                                f"defaults applied: {_message(e)}")
                                      for e in exc.errors())
            suites.append(Suite(id=suite_id, description=entry.description,
                                allow_degraded=entry.allow_degraded,
                                environment_ids=tuple(e.id for e in entry.environments),
                                file=str(file)))
    loader.check_refs()
    issues = [i for found in per_file for i in sorted(found, key=lambda i: i.line or 0)]
    if issues:
        raise CatalogueError(issues)
    return Catalogue(suites=tuple(suites), environments=tuple(environments),
                     data_sources=tuple(sources), files=tuple(str(f) for f in files))
