"""Loading a catalogue: files and directories in, one frozen :class:`Catalogue` out.

Every problem found while loading, in any file, is collected with its file, line and key
path, then raised together as one :class:`~envcheck.core.errors.CatalogueError`: the author
fixes a catalogue in one pass, not one error per run. File sizes and nesting are bounded
(:class:`~envcheck.catalogue.sourcelimits.SourceLimits`) before anything is parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from envcheck.catalogue.crossfile import CrossFileChecks
from envcheck.catalogue.datasets import FORMATS, expand
from envcheck.catalogue.datasets.base import ISSUES_PER_DATASET, DatasetBase
from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.document import CatalogueFile
from envcheck.catalogue.fields import CATALOGUE_FILE, schedule_floor
from envcheck.catalogue.handover import Handover, Taken
from envcheck.catalogue.keypaths import KeyPath
from envcheck.catalogue.merge import resolve_environment
from envcheck.catalogue.messages import describe_error, show_value
from envcheck.catalogue.models import (
    Catalogue,
    Environment,
    EnvironmentEntry,
    Suite,
    SuiteDefaults,
)
from envcheck.catalogue.origins import Origins
from envcheck.catalogue.outline import at, in_file_order, split_environments
from envcheck.catalogue.registries import RegistryCredentials
from envcheck.catalogue.sharing import Sharing
from envcheck.catalogue.sourcefile import file_kind, read_source
from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.yamlsrc import SourceDoc, load_yaml
from envcheck.core.errors import CatalogueError, CatalogueIssue

__all__ = ["load_catalogue"]


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


def _issues(doc: SourceDoc, errors: Iterable[ErrorDetails]) -> None:
    """Pydantic's errors of a catalogue file as issues of ``doc``, in their order."""
    for err in errors:
        loc: KeyPath = tuple(err["loc"])
        if loc and loc[-1] == "[key]":  # the key itself is invalid (e.g. a suite id)
            loc = loc[:-1]
        if loc[:1] == ("datasets",) and len(loc) > 2 and loc[2] in FORMATS:
            loc = (*loc[:2], *loc[3:])  # a union's tag: the file has no such key
        doc.issues.append(doc.issue(loc, describe_error(err, CatalogueFile)))


def _options(file: str) -> dict[str, Any]:
    """How a catalogue file's models are validated."""
    # by_name=False: the file must use the documented key (``schema``), not the field name.
    return {"by_alias": True, "by_name": False, "context": {CATALOGUE_FILE: file}}


def _validate(doc: SourceDoc, unique: bool, handover: Handover
              ) -> tuple[CatalogueFile | None, list[Environment]]:
    """Validate one parsed document, adding every problem pydantic finds to ``doc.issues``;
    if it has none and its ids are ``unique``, its environments resolved (those the reader
    handed over already taken: :mod:`.handover`)."""
    if not doc.parsed:
        return None, []
    if doc.data is None:
        doc.issues.append(doc.issue((), "the file is empty (a catalogue starts with "
                                        "'version: 1')"))
        return None, []
    if not isinstance(doc.data, dict):
        doc.issues.append(doc.issue((), f"a catalogue file must be a mapping with 'version: 1', "
                                        f"got {show_value(doc.data)}"))
        return None, []
    options, sharing = handover.options, handover.sharing
    # The file without its environments, then each environment (resolved at once): the
    # models of a whole fleet are never alive together, and the memory each raw value frees
    # serves the environments that follow.
    outline, stream = split_environments(doc.data, release=not doc.shared)
    try:
        parsed: CatalogueFile | None = CatalogueFile.model_validate(outline, **options)
        errors: list[ErrorDetails] = []
    except ValidationError as exc:
        parsed, errors = None, exc.errors()
    resolve = parsed is not None and unique and not doc.issues
    environments: list[Environment] = []
    conflicts: list[CatalogueIssue] = []
    invalid: list[ErrorDetails] = []
    for suite_id, i, raw in stream:
        where: KeyPath = ("suites", suite_id, "environments", i)
        if type(raw) is Taken:
            if not resolve:
                continue
            assert parsed is not None
            if type(raw.value) is Environment:
                handover.check(suite_id, parsed.suites[suite_id].defaults)
                environments.append(raw.value)
                continue
            entry = raw.value
        else:
            try:
                entry = EnvironmentEntry.model_validate(raw, **options)
            except ValidationError as exc:
                invalid.extend(at(e, where) for e in exc.errors())
                resolve = False
                continue
            if not resolve:
                continue
        assert parsed is not None
        try:
            env = resolve_environment(suite_id, parsed.suites[suite_id].defaults, entry)
        except ValidationError as exc:  # defaults + entry conflict (cross-field rules)
            conflicts.extend(
                doc.issue((*where, *e["loc"]), "with the suite defaults applied: "
                          f"{describe_error(e, CatalogueFile)}")
                for e in exc.errors())
        else:
            environments.append(sharing.environment(env))
    _issues(doc, in_file_order(errors, invalid, doc.data))
    if parsed is None or doc.issues:
        return None, []
    doc.issues.extend(conflicts)
    return parsed, environments if unique else []


def load_catalogue(paths: Sequence[str | Path], previous: Catalogue | None = None,
                   origins: Origins | None = None) -> Catalogue:
    """Load and validate catalogue files (or directories of them) into one frozen catalogue.

    Raises :class:`CatalogueError` with every problem found in every file, each with its file,
    line and key path: paths that do not exist first, then file by file, by line.
    ``previous``: the catalogue this one replaces (a daemon's reload): environments equal
    there are the same objects, the copies freed as they are made. ``origins``, if given, is
    filled with where each environment is written (for reports that point at it).
    """
    limits = _limits()
    files, missing = _catalogue_files(paths)
    checks = CrossFileChecks()
    sharing = Sharing(previous.environments if previous is not None else ())
    per_file: list[list[CatalogueIssue]] = [missing]
    suites: list[Suite] = []
    environments: list[Environment] = []
    sources: list[DataSource] = []
    registries: list[RegistryCredentials] = []
    defaults: dict[str, SuiteDefaults] = {}
    datasets: list[tuple[SourceDoc, int, DatasetBase]] = []
    for file in files:
        text, why = read_source(file, limits)
        if text is None:
            per_file.append([CatalogueIssue(str(file), None, "", why or "cannot read")])
            continue
        handover = Handover(_options(str(file)), sharing)
        doc = load_yaml(str(file), text, limits, take=handover)
        handover.flush()
        per_file.append(doc.issues)  # check_refs may add to it later
        taken = len(doc.issues)
        unique = checks.scan(doc)
        # A duplicate id follows the file's own problems, as where it is found follows them.
        duplicates = doc.issues[taken:]
        del doc.issues[taken:]
        parsed, resolved = _validate(doc, unique, handover)
        doc.issues.extend(duplicates)
        if parsed is None or not unique:
            continue
        environments.extend(resolved)
        sources.extend(parsed.data_sources)
        registries.extend(parsed.registries)
        datasets.extend((doc, i, entry) for i, entry in enumerate(parsed.datasets))
        for suite_id, entry in parsed.suites.items():
            defaults[suite_id] = entry.defaults
            # its environment ids: set below, with the datasets' environments
            suites.append(Suite(id=suite_id, description=entry.description,
                                allow_degraded=entry.allow_degraded, environment_ids=(),
                                file=str(file)))
    read = _expand_datasets(datasets, defaults, checks, environments, per_file, sharing,
                            origins)
    if origins is not None:
        origins.defined.update(checks.environments)
    members: dict[str, list[str]] = {s.id: [] for s in suites}
    for env in environments:
        members[env.suite].append(env.id)
    suites = [s.model_copy(update={"environment_ids": tuple(members[s.id])}) for s in suites]
    checks.check_refs()
    issues = [i for found in per_file for i in sorted(found, key=lambda i: i.line or 0)]
    if issues:
        raise CatalogueError(issues)
    return Catalogue(suites=tuple(suites), environments=tuple(environments),
                     data_sources=tuple(sources), registries=tuple(registries),
                     files=tuple(str(f) for f in files),
                     dataset_files=tuple(read),
                     datasets=tuple(entry.id for _, _, entry in datasets))


def _expand_datasets(datasets: list[tuple[SourceDoc, int, DatasetBase]],
                     defaults: dict[str, SuiteDefaults], checks: CrossFileChecks,
                     environments: list[Environment],
                     per_file: list[list[CatalogueIssue]], sharing: Sharing,
                     origins: Origins | None) -> list[str]:
    """Expand every dataset into ``environments`` (ids unique across the catalogue), its
    problems into ``per_file``, where each environment is into ``origins``; returns the
    dataset files read."""
    # None: defined in a catalogue file, located (checks.where) only for a duplicate
    taken: dict[str, str | None] = dict.fromkeys(checks.environments)
    read: list[str] = []
    for doc, i, entry in datasets:
        where: KeyPath = ("datasets", i)
        if entry.suite not in defaults:
            doc.issues.append(doc.issue((*where, "suite"), f"unknown suite {entry.suite!r} "
                                        "(declare it under suites: in any catalogue file)"))
            continue

        def on_entry(key: str, message: str, where: KeyPath = where,
                     doc: SourceDoc = doc) -> None:
            doc.issues.append(doc.issue((*where, key), message))

        found = expand(entry, doc.file, defaults[entry.suite], on_entry)
        for env, (_, file, line, key) in zip(found.environments, found.origins, strict=True):
            here = f"{file}:{line}" if line is not None else f"{file} {key}".rstrip()
            first = taken.setdefault(env.id, here)
            if first is None:
                first = taken[env.id] = checks.where("environment", env.id)
            if first != here:
                found.issue(file, line, key, f"duplicate environment id {env.id!r} "
                                             f"(first in {first})")
            else:
                environments.append(sharing.environment(env))
        if found.dropped:
            doc.issues.append(doc.issue(where, f"{found.dropped} more problem(s) in its records "
                                        f"(the first {ISSUES_PER_DATASET} are listed)"))
        by_file: dict[str, list[CatalogueIssue]] = {}
        for issue in found.issues:
            by_file.setdefault(issue.file, []).append(issue)
        per_file.extend(by_file.values())
        read.extend(found.files)
        if origins is not None:
            origins.expanded.update((env_id, (file, line))
                                    for env_id, file, line, _ in found.origins)
    return read
