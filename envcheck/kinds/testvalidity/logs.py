"""Per-test outcomes read from a test command's log, for ``report: <parser>`` specs.

The log is already capped (head kept, its size checked) by :mod:`.runs`; here it is read as a
stream of lines through the named parser (:mod:`envcheck.core.testlogs`), keeping only the
declared ids' last status and two counts, so memory does not grow with the log's test count.
Ids match as the released SWE-bench harness's grading matches them (:func:`read_log`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envcheck.core.testlogs import TestStatus, log_lines, parser
from envcheck.kinds.testvalidity.junit import Case, Outcome

__all__ = ["LogOutcomes", "read_log"]

_OUTCOME: dict[str, Outcome] = {TestStatus.PASSED: Outcome.PASSED, TestStatus.XFAIL: Outcome.PASSED,
            TestStatus.SKIPPED: Outcome.SKIPPED, TestStatus.FAILED: Outcome.FAILED,
            TestStatus.ERROR: Outcome.ERROR}
_PASSING = (TestStatus.PASSED, TestStatus.XFAIL)


@dataclass(frozen=True, slots=True)
class LogOutcomes:
    outcomes: dict[str, Case | None]  # each wanted id: its last status in the log, or None
    reported: int  # result lines the parser found (any test)
    failed: int  # of which FAILED or ERROR


def _cut(test_id: str) -> bool:
    """An id cut inside its parameters (``test_x[a,``): more ``[`` than ``]``."""
    return test_id.count("[") > test_id.count("]")


def read_log(data: bytes, parser_name: str, wanted: Sequence[str]) -> LogOutcomes:
    """Outcomes of ``wanted`` in the log ``data`` as the parser ``parser_name`` reads it.

    Ids match exactly, except an id cut inside its parameters, which the released harness's
    grading (swebench 5.0.2, ``grading._resolve_case``) lets match the ids it begins when it
    is in no report itself and they agree on passing or not: it then takes the first such
    id's status. (SWE-bench Verified declares 676 such ids, written when the harness's parser
    cut an id at its first space.)
    """
    keep = set(wanted)
    cut: dict[str, dict[str, str]] = {t: {} for t in keep if _cut(t)}
    found: dict[str, str] = {}
    reported = failed = 0
    for test_id, status in parser(parser_name)(log_lines(data)):
        reported += 1
        failed += status in (TestStatus.FAILED, TestStatus.ERROR)
        if test_id in keep:
            found[test_id] = status
        for prefix, begun in cut.items():
            if test_id.startswith(prefix):
                begun[test_id] = status
    for prefix, begun in cut.items():
        if prefix not in found and begun and len({s in _PASSING for s in begun.values()}) == 1:
            found[prefix] = next(iter(begun.values()))
    # A status word the harness does not know ('PASSED:') is neither a pass nor a failure in
    # its grading; here the test has no outcome, as if it were in no report.
    outcomes: dict[str, Case | None] = {
        t: Case("", t, _OUTCOME[found[t]]) if found.get(t) in _OUTCOME else None
        for t in wanted}
    return LogOutcomes(outcomes, reported, failed)
