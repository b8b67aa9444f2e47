"""JUnit XML reports: parsed defensively, then mapped onto the catalogue's test ids.

A hostile image writes the report, so it is treated as hostile input: the reader caps its size
before it gets here (:mod:`.runs`), ``defusedxml`` refuses any DTD (no entity
expansion, no external reference: a JUnit report never needs one), and every string kept is
truncated.

Any runner that writes JUnit XML works. A test case is ``(classname, name[, file])``; the
catalogue names tests as pytest does, ``tests/test_x.py::TestClass::test_y[param]``, which
pytest itself reports as ``classname="tests.test_x.TestClass" name="test_y[param]"``
(:func:`split_id` applies pytest's own mangling). Other runners' ids are written
``classname::name`` or ``pkg.Class.name``, or as a bare name if only one class has it.
Where the report's classnames carry a different path prefix (another rootdir, a
``junit_prefix``), a unique dotted-suffix match still finds the test; an ambiguous one finds
nothing, and a test not found counts as not passed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

__all__ = ["Case", "Outcome", "Report", "ReportError", "match", "parse_report", "split_id"]

MESSAGE_CHARS = 4000


class Outcome(StrEnum):
    PASSED = "passed"
    SKIPPED = "skipped"
    FAILED = "failed"
    ERROR = "error"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Outcome.PASSED: 0, Outcome.SKIPPED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3}
_CHILD_OUTCOME = {"skipped": Outcome.SKIPPED, "failure": Outcome.FAILED, "error": Outcome.ERROR}


@dataclass(frozen=True, slots=True)
class Case:
    classname: str
    name: str
    outcome: Outcome
    message: str = ""  # of the failure, error or skip: its message attribute and its text
    file: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    @property
    def key(self) -> tuple[str, str]:
        return self.classname, self.name


@dataclass(frozen=True, slots=True)
class Report:
    cases: tuple[Case, ...]

    @property
    def failed(self) -> int:
        """Cases that failed or errored (a skip is not a failure of the run)."""
        return sum(c.outcome in (Outcome.FAILED, Outcome.ERROR) for c in self.cases)


class ReportError(ValueError):
    """The report is not well-formed JUnit XML (or tries an XML attack)."""


def _local(tag: object) -> str:
    text = tag if isinstance(tag, str) else ""
    return text.rpartition("}")[2]  # drop an XML namespace


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " [...]"


def _case(element: Element) -> Case:
    outcome, message = Outcome.PASSED, ""
    for child in element:
        found = _CHILD_OUTCOME.get(_local(child.tag))
        if found is not None and found.severity > outcome.severity:
            outcome = found
            message = _clip(f"{child.get('message') or ''}\n{child.text or ''}".strip())
    return Case(classname=_clip(element.get("classname") or ""),
                name=_clip(element.get("name") or ""), outcome=outcome, message=message,
                file=element.get("file"))


def parse_report(data: bytes) -> Report:
    """Parse a JUnit XML report (``<testsuites>`` or a single ``<testsuite>`` at the root,
    suites nested to any depth). Raises :class:`ReportError`."""
    try:
        root = fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise ReportError(f"refused: {type(exc).__name__}: {exc}") from exc
    except ParseError as exc:
        raise ReportError(f"not well-formed XML: {exc}") from exc
    if _local(root.tag) not in ("testsuites", "testsuite"):
        raise ReportError(f"root element is <{_local(root.tag)[:40]}>, "
                          "not <testsuites> or <testsuite>")
    return Report(tuple(_case(e) for e in root.iter() if _local(e.tag) == "testcase"))


def split_id(test_id: str) -> tuple[str, str]:
    """The ``(classname, name)`` a JUnit report gives ``test_id``, as pytest mangles node ids.

    ``tests/test_x.py::C::test_y[a::b]`` -> ``("tests.test_x.C", "test_y[a::b]")``; an id with
    no ``::`` is a bare name: ``("", id)``.
    """
    path, bracket, params = test_id.partition("[")  # params may hold '::' or '.'
    parts = path.split("::")
    if len(parts) == 1:
        return "", test_id
    parts[0] = re.sub(r"\.py$", "", parts[0].replace("/", "."))
    return ".".join(parts[:-1]), parts[-1] + bracket + params


def _candidates(test_id: str) -> list[tuple[str, str]]:
    """Keys to look ``test_id`` up by: pytest's, ``file::name`` (for reports that give the
    file), then ``pkg.Class.name`` (Java-style)."""
    keys = [split_id(test_id)]
    path, bracket, params = test_id.partition("[")
    head, sep, tail = path.rpartition("::")
    if sep:
        keys.append((head, tail + bracket + params))
    elif "." in path.strip("."):
        head, _, tail = path.rpartition(".")
        keys.append((head, tail + bracket + params))
    return keys


def _related(reported: str, wanted: str) -> bool:
    """Same class up to a path prefix: one dotted classname ends the other on a dot."""
    if not wanted:
        return True  # a bare name: any class, if only one has it
    return (reported == wanted or reported.endswith("." + wanted)
            or wanted.endswith("." + reported))


def _worst(cases: Iterable[Case]) -> Case:
    # A name reported twice (a teardown error after a pass, a rerun plugin): the worst wins.
    return max(cases, key=lambda c: c.outcome.severity)


def match(report: Report, test_ids: Sequence[str]) -> dict[str, Case | None]:
    """Each id's case in the report, or None when the report has no (unambiguous) such test."""
    by_key: dict[tuple[str, str], list[Case]] = {}
    by_name: dict[str, list[Case]] = {}
    for case in report.cases:
        by_key.setdefault(case.key, []).append(case)
        by_name.setdefault(case.name, []).append(case)
        if case.file:  # runners that give the file: 'path::name' ids
            by_key.setdefault((case.file, case.name), []).append(case)
    found: dict[str, Case | None] = {}
    for test_id in test_ids:
        keys = _candidates(test_id)
        hits = next((by_key[k] for k in keys if k in by_key), None)
        for classname, name in keys if not hits else ():
            same_name = by_name.get(name, [])
            classes = {c.classname for c in same_name if _related(c.classname, classname)}
            if len(classes) == 1:  # more than one class: ambiguous, found nothing
                hits = [c for c in same_name if c.classname in classes]
                break
        found[test_id] = _worst(hits) if hits else None
    return found
