"""SWE-bench-style instance files: one record per task, as SWE-bench, SWE-Gym, SWE-smith,
R2E-Gym and SWE-rebench ship them (JSONL, a JSON array, or Parquet).

A record needs ``instance_id``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists, or JSON-encoded
strings of lists as the hub files hold them); ``patch`` (the gold patch) and ``test_patch`` are
used when present, ``base_commit`` is what the files the test patch modifies are reset to
(else HEAD, the commit the image holds), ``repo`` chooses a per-repository command,
``log_parser`` (the harness's name of a parser, as later exports carry it) how its log is read
where the entry sets no ``report:``, and any field may fill the image template. Each record
becomes an environment of the dataset's suite, its id the record's ``instance_id`` (escaped
only if it is not a plain id), its tests probe the harness's protocol
(:mod:`envcheck.kinds.testvalidity`).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from envcheck.catalogue.datasets.base import DatasetBase, Expansion, env_id, resolve_paths
from envcheck.catalogue.datasets.records import read_records
from envcheck.catalogue.fields import Seconds
from envcheck.catalogue.keypaths import format_path
from envcheck.catalogue.messages import describe_error
from envcheck.catalogue.models import Environment, SuiteDefaults
from envcheck.catalogue.probe_specs import CONTROL_KEYS, ReportName, TestSpec, repeated
from envcheck.core.testlogs import (
    HARNESS_LOG_PARSERS,
    HARNESS_REPO_PARSERS,
    RELEASE,
    named_parser,
    parser_names,
)

__all__ = ["SwebenchDataset", "SwebenchRecord", "expand"]


class SwebenchDataset(DatasetBase):
    """A SWE-bench-style instance file (or files) and how its records map onto environments."""

    TESTS_KEYS: ClassVar[tuple[str, ...]] = (*CONTROL_KEYS, "junit_path", "reruns", "shuffle",
                                             "timeout_s")

    format: Literal["swebench"]
    image: str | None = Field(None, min_length=1, description=(
        "image name template: '{field}' is replaced by the record's field, e.g. "
        "'swebench/sweb.eval.x86_64.{instance_id}:latest'"))
    image_field: str | None = Field(None, min_length=1, description=(
        "or: the record field naming the image (SWE-smith's 'image_name')"))
    command: str | None = Field(None, min_length=1, description=(
        "the test command (TestSpec.command: {tests}, {test_files}, {test_modules}, {junit}); "
        "e.g. 'pytest -rA {test_files}' as the harness runs pytest"))
    commands: dict[str, str] = Field(default_factory=dict, description=(
        "per repository (the record's 'repo'): its test command; 'command' is the fallback"))
    report: ReportName = Field("pytest", description=(
        "'junit' or a log parser: pytest, pytest_v2, pytest_options, django, sympy, "
        "matplotlib, seaborn, or a registered one; unset, a record gets the parser its "
        "'log_parser' names (the harness's name: parse_log_pydicom), else the harness's "
        "parser for its repository, else the suite's defaults.tests.report, else pytest"))
    reports: dict[str, ReportName] = Field(default_factory=dict, description=(
        "per repository: its report, as the harness maps a repository to its log parser; "
        "'report' is the fallback"))
    junit_path: str | None = Field(None, pattern=r"^/")
    reruns: int | None = Field(None, ge=1, le=50)
    shuffle: bool | None = None
    timeout_s: Seconds | None = None

    @model_validator(mode="after")
    def _mapping(self) -> SwebenchDataset:
        if (self.image is None) == (self.image_field is None):
            raise ValueError("set exactly one of image (a template) or image_field")
        if self.command is None and not self.commands:
            raise ValueError("set command, or commands per repository")
        if self.image is not None:
            for _, name, spec, conversion in string.Formatter().parse(self.image):
                if name is not None and (not name.isidentifier() or spec or conversion):
                    raise ValueError(f"image: '{{{name}{'!' + conversion if conversion else ''}"
                                     f"{':' + spec if spec else ''}}}' is not a plain "
                                     f"'{{field}}'")
        return self


def _distinct(ids: list[str]) -> list[str]:
    twice = repeated(ids)
    if twice:
        raise ValueError(f"lists {', '.join(twice[:5])} more than once")
    return ids


def _json_list(value: Any) -> Any:
    """Hub files hold lists as JSON-encoded strings: '["a", "b"]'."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a list of test ids, or a JSON-encoded one; this string "
                             f"is not valid JSON ({exc.msg} at column {exc.colno})") from None
    return value


IdList = Annotated[list[str], BeforeValidator(_json_list), AfterValidator(_distinct)]


class SwebenchRecord(BaseModel):
    """The fields of a record envcheck reads; the others are kept for the image template."""

    model_config = ConfigDict(extra="allow", frozen=True)

    instance_id: str = Field(min_length=1)
    FAIL_TO_PASS: IdList
    PASS_TO_PASS: IdList
    patch: str | None = None
    test_patch: str | None = None
    base_commit: str | None = None
    repo: str | None = None
    log_parser: str | None = None  # the harness's parser name, as later exports carry it


_SPEC_KEYS = {"fail_to_pass": "FAIL_TO_PASS", "pass_to_pass": "PASS_TO_PASS",
              "test_patch": "test_patch", "oracle": "patch", "command": "repo",
              "base_commit": "base_commit"}


class _Mapper:
    """One dataset entry's record -> environment, its shared parts computed once."""

    def __init__(self, entry: SwebenchDataset, defaults: SuiteDefaults,
                 suite_id: str) -> None:
        self.entry, self.suite_id = entry, suite_id
        settings = entry.settings(defaults)  # the entry's tests keys over the suite's
        self.fields = entry.fields(settings)
        tests = settings.tests
        self.tests: dict[str, Any] = ({k: getattr(tests, k) for k in tests.model_fields_set}
                                      if tests is not None else {})

    def image(self, record: SwebenchRecord, raw: dict[str, Any]) -> tuple[str | None, str]:
        """(image, '') or (None, why) naming the field at fault."""
        entry = self.entry
        if entry.image_field is not None:
            value = raw.get(entry.image_field)
            if not isinstance(value, str) or not value:
                return None, f"{entry.image_field}: the image field is missing or not a string"
            return value, ""
        assert entry.image is not None
        values = {}
        for _, name, _, _ in string.Formatter().parse(entry.image):
            if name is None:
                continue
            value = raw.get(name)
            if not isinstance(value, str | int) or isinstance(value, bool):
                return None, (f"{name}: the image template needs this field, as a string "
                              "(the record has none)")
            values[name] = value
        return entry.image.format_map(values), ""

    def command(self, record: SwebenchRecord) -> str | None:
        if record.repo is not None and record.repo in self.entry.commands:
            return self.entry.commands[record.repo]
        return self.entry.command or self.tests.get("command")

    def report(self, record: SwebenchRecord) -> tuple[str | None, str]:
        """(report, '') or (None, why): the dataset's report for the record's repository,
        else the dataset's report if it sets one, else the parser the record's ``log_parser``
        names, else the harness's parser for its repository, else the suite's
        ``defaults.tests.report``, else pytest."""
        entry, repo = self.entry, record.repo
        if repo is not None and repo in entry.reports:
            return entry.reports[repo], ""
        if "report" in entry.model_fields_set:
            return entry.report, ""
        if record.log_parser is not None:
            named = named_parser(record.log_parser)
            if named is None:
                return None, (
                    f"record {record.instance_id!r}: {record.log_parser!r} is not a parser "
                    f"envcheck has: it reads the {RELEASE} names of the harness's Python "
                    f"parsers (parse_log_pytest, parse_log_django, parse_log_pydicom, ...; "
                    f"{len(HARNESS_LOG_PARSERS)} in all) and its own ("
                    f"{', '.join(parser_names())}); set the dataset's report: (or reports: "
                    "per repository) to read this record's log another way")
            return named, ""
        harness = HARNESS_REPO_PARSERS.get(repo or "")
        if harness is not None:
            return harness, ""
        return self.tests.get("report", entry.report), ""

    def environment(self, record: SwebenchRecord, raw: dict[str, Any],
                    problem: Callable[[str, str], None]) -> Environment | None:
        image, why = self.image(record, raw)
        if image is None:
            key, _, message = why.partition(": ")
            problem(key, message)
            return None
        command = self.command(record)
        if command is None:
            problem("repo", f"no command for repository {record.repo!r} (add it to "
                            "commands, or set command)")
            return None
        oracle = {"patch": record.patch} if record.patch else self.tests.get("oracle")
        report, why = self.report(record)
        if report is None:
            problem("log_parser", why)
            return None
        # Reruns are shuffled only where the command takes the ids (the harness's commands take
        # test files): a reshuffled list the command ignores would reveal nothing.
        takes_ids = "{tests}" in command or "ENVCHECK_TEST_IDS" in command
        try:
            spec = TestSpec.model_validate({
                "shuffle": takes_ids, **self.tests, "command": command, "report": report,
                "fail_to_pass": record.FAIL_TO_PASS, "pass_to_pass": record.PASS_TO_PASS,
                "test_patch": record.test_patch or None, "oracle": oracle,
                "base_commit": record.base_commit or None})
            return Environment(id=env_id(record.instance_id), image=image, suite=self.suite_id,
                               tests=spec, **self.fields)
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                problem(_SPEC_KEYS.get(str(loc[0]), str(loc[0])) if loc else "",
                        describe_error(err))
        except ValueError as exc:  # env_id
            problem("instance_id", str(exc))
        return None


def expand(entry: SwebenchDataset, catalogue_file: str, defaults: SuiteDefaults,
           suite_id: str, on_entry: Callable[[str, str], None]) -> Expansion:
    """Every record of the dataset's files as an environment; bad records as issues naming
    the file, the line (JSONL) or index (JSON, Parquet), and the field."""
    out = Expansion()
    files, why = resolve_paths(catalogue_file, entry.path)
    if why is not None:
        on_entry("path", why)
        return out
    mapper = _Mapper(entry, defaults, suite_id)
    for path in files:
        out.files.append(str(path))
        for rec in read_records(path):
            report = partial(_record_issue, out, str(path), rec.line, rec.key)
            if rec.data is None:
                report("", rec.error or "unreadable record")
                continue
            try:
                record = SwebenchRecord.model_validate(rec.data)
            except ValidationError as exc:
                for err in exc.errors():
                    report(format_path(tuple(err["loc"])), describe_error(err))
                continue
            env = mapper.environment(record, rec.data, report)
            if env is not None:
                out.environments.append(env)
                key = ".".join(k for k in (rec.key, "instance_id") if k)
                out.origins.append((env.id, str(path), rec.line, key))
    return out


def _record_issue(out: Expansion, file: str, line: int | None, record_key: str, key: str,
                  message: str) -> None:
    """An issue of one record: ``file:LINE: field`` (JSONL) or ``file: [index].field``."""
    full = ".".join(k for k in (record_key, key) if k)
    out.issue(file, line, full, message)
