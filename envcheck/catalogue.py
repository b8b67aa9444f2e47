"""The catalogue: YAML files declaring suites of environments and data sources.

Parsed once into frozen pydantic models (unknown keys rejected). Every problem found while
loading is collected with its file, line and key path, then raised together as one
:class:`~envcheck.errors.CatalogueError`.

Suite ``defaults`` fill what an environment leaves unset, key by key; nested blocks
(``limits``, ``timeouts``, ``schedules``, ``tests``, ``dependencies``) merge per key; lists
and free-form mappings (``tools``, ``data_sources``, ``labels``, ``dependencies.python``)
are replaced whole.

Beyond the schema, the loader checks across files: environment, suite and data source ids
are unique, and every data source an environment uses is defined somewhere.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import ErrorDetails

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
    __test__: ClassVar[bool] = False  # not a pytest test class, though its name says so

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
        # Sorted keys: reordering a mapping in the YAML does not change what is checked.
        blob = json.dumps(self.model_dump(mode="json", include=fields), sort_keys=True)
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
    """Files named, and the ``*.yaml``/``*.yml`` files of directories named (sorted, not
    recursive); a file reached twice is read once."""
    files: list[Path] = []
    issues: list[CatalogueIssue] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir()
                           if p.suffix in (".yaml", ".yml") and p.is_file())
            if not found:
                issues.append(CatalogueIssue(str(path), None, "",
                                             "no *.yaml or *.yml files in this directory"))
        elif path.is_file():
            found = [path]
        else:
            issues.append(CatalogueIssue(str(path), None, "", "no such file or directory"))
            continue
        for file in found:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                files.append(file)
    return files, issues


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
        parsed = CatalogueFile.model_validate(doc.data, by_alias=True, by_name=False)
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
    files, missing = _catalogue_files(paths)
    loader = _Loader()
    per_file: list[list[CatalogueIssue]] = [missing]
    suites: list[Suite] = []
    environments: list[Environment] = []
    sources: list[DataSource] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            per_file.append([CatalogueIssue(str(file), None, "", f"cannot read: {exc}")])
            continue
        doc = load_yaml(str(file), text)
        per_file.append(doc.issues)  # check_refs may add to it later
        parsed = _validate(doc)
        unique = loader.scan(doc)
        if parsed is None or not unique:
            continue
        sources.extend(parsed.data_sources)
        for suite_id, entry in parsed.suites.items():
            environments.extend(_resolve(suite_id, entry.defaults, e) for e in entry.environments)
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
