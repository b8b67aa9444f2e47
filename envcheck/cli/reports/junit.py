"""``envcheck check --junit FILE``: the results as a JUnit XML report, which CI systems show as
test results (GitHub, GitLab, Jenkins, Buildkite read it as they read a test runner's).

A catalogue suite is a ``<testsuite>``, an environment and probe kind a ``<testcase>``
(``classname`` the environment, ``name`` the kind, ``file`` and ``line`` where the environment
is written). A ``fail`` or ``flaky`` result is a ``<failure>`` whose ``type`` is the reason
code and whose message is the summary; ``skip`` (the environment declares nothing for the kind)
is ``<skipped>``; ``error`` (envcheck, or its infrastructure, could not check) is an
``<error>``, never a failure of the environment. A degraded pass stays a pass and says so in
its ``<system-out>``. Each result's evidence (commands, exit codes, the output's tail) goes in
the failure's text, within :data:`EVIDENCE_CHARS`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from datetime import datetime

from envcheck.catalogue.origins import Origin
from envcheck.core.results import ProbeResult, Status

__all__ = ["EVIDENCE_CHARS", "junit_xml"]

EVIDENCE_CHARS = 4000  # of each result's evidence in the report: a CI page, not an archive
# Characters XML 1.0 cannot hold, even escaped (a probe's output may carry any byte).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


# A terminal's control sequences (colours, titles, modes) in an interactive shell's output.
_TERMINAL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", _TERMINAL.sub("", value))


def _evidence(result: ProbeResult) -> str:
    parts = [result.summary]
    for ev in result.evidence:
        exit_code = "timed out" if ev.timed_out else f"exit {ev.exit_code}"
        parts.append(f"$ {ev.command}  ({exit_code}, {ev.duration_s:.2f}s)")
        tail = ev.output_tail or ev.output_head
        if tail:
            parts.append(tail.rstrip("\n"))
    text = "\n".join(parts)
    if len(text) > EVIDENCE_CHARS:
        text = text[:EVIDENCE_CHARS] + f"\n... ({len(text) - EVIDENCE_CHARS} more characters)"
    return _text(text)


def _case(parent: ET.Element, result: ProbeResult, origin: Origin | None) -> None:
    case = ET.SubElement(parent, "testcase", classname=result.env_id, name=str(result.kind),
                         time=f"{result.duration_s:.3f}")
    if origin is not None:
        case.set("file", origin.file)
        if origin.line is not None:
            case.set("line", str(origin.line))
    message = _text(f"{result.reason}: {result.summary}")
    if result.status in (Status.FAIL, Status.FLAKY):
        failure = ET.SubElement(case, "failure", type=str(result.reason), message=message)
        failure.text = (f"{result.status}\n" if result.status is Status.FLAKY else ""
                        ) + _evidence(result)
    elif result.status is Status.ERROR:
        error = ET.SubElement(case, "error", type=str(result.reason), message=message)
        error.text = "envcheck could not check (not the environment's fault)\n" + \
            _evidence(result)
    elif result.status is Status.SKIP:
        ET.SubElement(case, "skipped", message=message)
    else:
        out = ET.SubElement(case, "system-out")
        out.text = _text(f"degraded: {message}" if result.degraded else result.summary)


def _counts(element: ET.Element, results: Sequence[ProbeResult]) -> None:
    statuses = [r.status for r in results]
    element.set("tests", str(len(results)))
    element.set("failures", str(sum(s in (Status.FAIL, Status.FLAKY) for s in statuses)))
    element.set("errors", str(statuses.count(Status.ERROR)))
    element.set("skipped", str(statuses.count(Status.SKIP)))
    element.set("time", f"{sum(r.duration_s for r in results):.3f}")


def junit_xml(results: Sequence[ProbeResult], suite_of: Callable[[str], str],
              where: Callable[[str], Origin | None], started: datetime) -> bytes:
    """The report of ``results`` (in their order), grouped by each environment's suite."""
    root = ET.Element("testsuites", name="envcheck")
    _counts(root, results)
    by_suite: dict[str, list[ProbeResult]] = {}
    for result in results:
        by_suite.setdefault(suite_of(result.env_id), []).append(result)
    for suite_id, members in by_suite.items():
        suite = ET.SubElement(root, "testsuite", name=suite_id,
                              timestamp=started.isoformat(timespec="seconds"))
        _counts(suite, members)
        origins = {env_id: where(env_id) for env_id in dict.fromkeys(r.env_id for r in members)}
        for result in members:
            _case(suite, result, origins[result.env_id])
    ET.indent(root)
    written: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return written + b"\n"
