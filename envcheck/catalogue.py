"""The catalogue: YAML files declaring suites of environments and data sources.

Parsed once into frozen pydantic models (unknown keys rejected). Every problem found while
loading is collected with its file, line and key path, then raised together as one
:class:`~envcheck.errors.CatalogueError`.

Suite ``defaults`` fill what an environment leaves unset, key by key; nested blocks
(``limits``, ``timeouts``, ``schedules``) merge per key, lists are replaced whole.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from envcheck.errors import CatalogueError, CatalogueIssue
from envcheck.results import ProbeKind
from envcheck.yamlsrc import KeyPath, SourceDoc, load_yaml

__all__ = [
    "Catalogue",
    "CatalogueFile",
    "DataSource",
    "DependencySpec",
    "Environment",
    "EnvironmentSettings",
    "Limits",
    "Schedules",
    "Suite",
    "TestSpec",
    "Timeouts",
    "load_catalogue",
]

CATALOGUE_VERSION = 1
_ID = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds(value: Any) -> Any:
    """Accept ``30``, ``"30s"``, ``"5m"``, ``"1.5h"``; leave anything else to pydantic."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 1h)")
        return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    return value


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
Ident = Annotated[str, Field(pattern=_ID)]


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

    terminal: Seconds | None = 300.0
    dependencies: Seconds | None = 3600.0
    tests: Seconds | None = 21600.0
    datasource: Seconds | None = 300.0
    jitter_s: float = Field(30.0, ge=0)
    quarantined_factor: float = Field(4.0, ge=1, description="slow-down when quarantined")


class DependencySpec(_Model):
    python: dict[str, str] = Field(default_factory=dict, description="package -> PEP 440 spec")
    debian: dict[str, str] = Field(default_factory=dict, description="package -> version spec")
    executables: dict[str, str | None] = Field(
        default_factory=dict, description="tool -> regex its --version output must match"
    )
    imports: list[str] = Field(default_factory=list, description="modules that must import")
    pip_check: bool = True
    python_bin: str = "python3"
    lock: str | None = Field(None, description="pip freeze lock file, relative to the catalogue")


class Oracle(_Model):
    script: str | None = Field(None, description="shell script run in the workdir")
    path: str | None = Field(None, description="script already in the image")


class TestSpec(_Model):
    command: str = Field(description="runs the tests; must write JUnit XML to junit_path")
    junit_path: str = "/tmp/envcheck-junit.xml"
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    oracle: Oracle | None = None
    reruns: int = Field(3, ge=1, le=50)
    shuffle: bool = True
    timeout_s: Seconds = 300.0


class Auth(_Model):
    header: str = "Authorization"
    scheme: str = "Bearer"
    env: str | None = Field(None, description="environment variable holding the secret")
    file: str | None = Field(None, description="file holding the secret")


class Freshness(_Model):
    field: str = Field(description="dotted path to a timestamp in the JSON body")
    max_age_s: Seconds


class DataSource(_Model):
    id: Ident
    method: Literal["GET", "POST", "HEAD"] = "GET"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    auth: Auth | None = None
    expected_status: int = Field(200, ge=100, le=599)
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    latency_budget_ms: float = Field(1000.0, gt=0)
    freshness: Freshness | None = None
    samples: int = Field(5, ge=1, le=1000)
    connect_timeout_s: Seconds = 3.0
    read_timeout_s: Seconds = 10.0
    schedule: Seconds | None = 300.0

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


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
    labels: dict[str, str] = Field(default_factory=dict)


class EnvironmentEntry(EnvironmentSettings):
    id: Ident
    image: str = Field(min_length=1)


class Environment(EnvironmentEntry):
    """An environment with its suite's defaults applied: what probes see."""

    suite: Ident

    def spec_hash(self, kind: ProbeKind) -> str:
        """Hash of what the given probe kind checks: evidence counts only under one hash."""
        fields = _SPEC_FIELDS[kind]
        blob = self.model_dump_json(include=fields)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_BASE_FIELDS = {"image", "workdir", "user", "shell", "limits"}
_SPEC_FIELDS: dict[ProbeKind, set[str]] = {
    ProbeKind.TERMINAL: _BASE_FIELDS | {"tools", "timeouts"},
    ProbeKind.DEPENDENCIES: _BASE_FIELDS | {"dependencies"},
    ProbeKind.TESTS: _BASE_FIELDS | {"tests"},
    ProbeKind.DATASOURCE: {"data_sources"},
}


class SuiteEntry(_Model):
    description: str = ""
    allow_degraded: bool = False
    defaults: EnvironmentSettings = EnvironmentSettings()
    environments: list[EnvironmentEntry] = Field(default_factory=list)


class CatalogueFile(_Model):
    """One catalogue file, as written. ``envcheck schema`` prints its JSON Schema."""

    version: Literal[1]
    suites: dict[Ident, SuiteEntry] = Field(default_factory=dict)
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
            if isinstance(mine, BaseModel) and isinstance(theirs, BaseModel):
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
    files: list[Path] = []
    issues: list[CatalogueIssue] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
            if not found:
                issues.append(CatalogueIssue(str(path), None, "", "no *.yaml files here"))
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            issues.append(CatalogueIssue(str(path), None, "", "no such file or directory"))
    return files, issues


def _validate(doc: SourceDoc) -> CatalogueFile | None:
    if doc.issues:
        return None
    if not isinstance(doc.data, dict):
        doc.issues.append(doc.issue((), "a catalogue file must be a mapping with 'version: 1'"))
        return None
    try:
        return CatalogueFile.model_validate(doc.data)
    except ValidationError as exc:
        for err in exc.errors():
            path: KeyPath = tuple(err["loc"])
            doc.issues.append(doc.issue(path, _message(err)))
        return None


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    if err["type"] == "literal_error" and err["loc"] == ("version",):
        return f"unsupported catalogue version (this envcheck reads version {CATALOGUE_VERSION})"
    return str(err["msg"])


def load_catalogue(paths: Sequence[str | Path]) -> Catalogue:
    """Load and validate catalogue files (or directories of them) into one frozen catalogue."""
    files, issues = _catalogue_files(paths)
    suites: list[Suite] = []
    environments: list[Environment] = []
    sources: list[DataSource] = []
    seen_env: dict[str, str] = {}
    seen_suite: dict[str, str] = {}
    seen_source: dict[str, str] = {}
    refs: list[tuple[SourceDoc, KeyPath, str]] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(CatalogueIssue(str(file), None, "", f"cannot read: {exc}"))
            continue
        doc = load_yaml(str(file), text)
        parsed = _validate(doc)
        if parsed is not None:
            for i, source in enumerate(parsed.data_sources):
                where = (*("data_sources", i), "id")
                if source.id in seen_source:
                    doc.issues.append(doc.issue(where, f"duplicate data source id {source.id!r} "
                                                       f"(first in {seen_source[source.id]})"))
                seen_source.setdefault(source.id, doc.issue(where, "").location())
                sources.append(source)
            for suite_id, entry in parsed.suites.items():
                spath: KeyPath = ("suites", suite_id)
                if suite_id in seen_suite:
                    doc.issues.append(doc.issue(spath, f"duplicate suite id {suite_id!r} "
                                                       f"(first in {seen_suite[suite_id]})"))
                seen_suite.setdefault(suite_id, doc.issue(spath, "").location())
                for i, env_entry in enumerate(entry.environments):
                    epath: KeyPath = (*spath, "environments", i, "id")
                    if env_entry.id in seen_env:
                        doc.issues.append(doc.issue(epath, f"duplicate environment id "
                                                           f"{env_entry.id!r} (first in "
                                                           f"{seen_env[env_entry.id]})"))
                        continue
                    seen_env[env_entry.id] = doc.issue(epath, "").location()
                    env = _resolve(suite_id, entry.defaults, env_entry)
                    for j, ref in enumerate(env.data_sources):
                        in_env = "data_sources" in env_entry.model_fields_set
                        base = (*spath, "environments", i) if in_env else (*spath, "defaults")
                        refs.append((doc, (*base, "data_sources", j), ref))
                    environments.append(env)
                suites.append(Suite(id=suite_id, description=entry.description,
                                    allow_degraded=entry.allow_degraded,
                                    environment_ids=tuple(e.id for e in entry.environments),
                                    file=str(file)))
        issues.extend(doc.issues)
    for doc, path, ref in refs:
        if ref not in seen_source:
            issues.append(doc.issue(path, f"unknown data source {ref!r}"))
    if issues:
        raise CatalogueError(issues)
    return Catalogue(suites=tuple(suites), environments=tuple(environments),
                     data_sources=tuple(sources), files=tuple(str(f) for f in files))
