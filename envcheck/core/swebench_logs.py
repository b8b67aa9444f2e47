"""The released SWE-bench harness's Python log parsers (``swebench`` 5.0.2,
``swebench/harness/log_parsers/python.py``), rule for rule, as streams of lines.

Each harness parser takes the whole log and returns ``{test id: status}``; each one here takes
the log's lines (split as the harness splits them: :func:`envcheck.core.testlogs.log_lines`)
and yields ``(test id, status)`` pairs whose last value per id is the harness's map, exactly:
the parity test (tests/test_testlogs_parity.py) runs the released parsers and these over the
same real and crafted logs. A status is the word the harness keeps: one of :class:`TestStatus`
when it is one, else the word as printed (``PASSED:`` in ``PASSED: tests/x.py``), which the
harness's grading counts neither as a pass nor as a failure.

Where the harness reads the whole log at once, the stream keeps what it needs: sympy's failure
headers (``___ path.py:test ___``, read over the whole log before any result line, so a result
line for the same id wins wherever it is) and Django's three multi-line patterns (read after
every line, so they win), for which the Django parser keeps the log's lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from enum import StrEnum

__all__ = ["RELEASE", "TestStatus", "parse_django", "parse_matplotlib", "parse_pytest",
           "parse_pytest_options", "parse_pytest_v2", "parse_seaborn", "parse_sympy"]

RELEASE = "swebench 5.0.2"


class TestStatus(StrEnum):
    """The harness's statuses; PASSED and XFAIL count as a pass (``grading.test_passed``)."""

    __test__ = False  # not a pytest test class, though its name says so

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


Result = tuple[str, str]
_WORDS = tuple(s.value for s in TestStatus)  # the harness's `any(line.startswith(x.value))`
_KNOWN = {s.value: s for s in TestStatus}


def _status(word: str) -> str:
    """The status word as the harness keeps it, a :class:`TestStatus` when it is one."""
    return _KNOWN.get(word, word)


_SKIP_SUMMARY_COUNT = re.compile(r"^\[\d+\]$")


def _is_skip_summary(status: str, name: str) -> bool:
    """pytest's ``SKIPPED [N] path:line: reason`` summary, where ``[N]`` is not a test."""
    return status == TestStatus.SKIPPED and bool(_SKIP_SUMMARY_COUNT.match(name))


def _pytest_words(line: str) -> list[str] | None:
    """A ``-rA`` line split as ``parse_log_pytest`` splits it: the status word first (a
    FAILED line's `` - `` turned into a space), None when it is no result."""
    if not line.startswith(_WORDS):
        return None
    if line.startswith(TestStatus.FAILED):
        line = line.replace(" - ", " ")
    words = line.split()
    if len(words) <= 1 or _is_skip_summary(words[0], words[1]):
        return None
    return words


def parse_pytest(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_pytest``: a line that starts with a status word, the id the word after it
    (flask, pytest, xarray, sqlfluff, ...). A line with the id first (``tests/x.py::t PASSED``,
    pytest's verbose progress) is not read: the harness reads it only in ``pytest_v2``."""
    for line in lines:
        words = _pytest_words(line)
        if words is not None:
            yield words[1], _status(words[0])


def parse_matplotlib(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_matplotlib``: ``parse_log_pytest`` with ``MouseButton.LEFT`` read as ``1``
    and ``MouseButton.RIGHT`` as ``3`` (the ids the dataset declares)."""
    for line in lines:
        words = _pytest_words(line.replace("MouseButton.LEFT", "1")
                              .replace("MouseButton.RIGHT", "3"))
        if words is not None:
            yield words[1], _status(words[0])


_OPTION = re.compile(r"(.*?)\[(.*)\]")


def parse_pytest_options(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_pytest_options`` (requests, pylint, pydicom): a parameter that is a path
    keeps its last part only; text after the last ``]`` is dropped."""
    for line in lines:
        words = _pytest_words(line)
        if words is None:
            continue
        test = words[1]
        found = _OPTION.search(test)
        if found:
            main, option = found.groups()
            if option.startswith("/") and not option.startswith("//") and "*" not in option:
                option = "/" + option.split("/")[-1]
            test = f"{main}[{option}]"
        yield test, _status(words[0])


_COLOUR = re.compile(r"\[(\d+)m")
_ESCAPES = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def parse_pytest_v2(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_pytest_v2`` (astropy, scikit-learn, sphinx): colour codes and control
    characters removed; the id is the rest of the line, spaces inside its parameters kept
    (a FAILED line's message after `` - `` dropped); a line ending with a status word (verbose
    progress, ``-vv -o console_output_style=classic``) gives the words before it."""
    for raw in lines:
        line = _COLOUR.sub("", raw).translate(_ESCAPES)
        if line.startswith(_WORDS):
            if line.startswith(TestStatus.FAILED):
                line = line.split(" - ", 1)[0]
            words = line.split()
            if len(words) >= 2 and not _is_skip_summary(words[0], words[1]):
                yield " ".join(words[1:]), _status(words[0])
        elif line.endswith(_WORDS):
            words = line.split()
            if len(words) >= 2:
                yield " ".join(words[:-1]), _status(words[-1])


def parse_seaborn(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_seaborn``: FAILED and PASSED only, status first or id first."""
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        if line.startswith(TestStatus.FAILED):
            yield parts[1], TestStatus.FAILED
        elif f" {TestStatus.PASSED} " in line:
            if parts[1] == TestStatus.PASSED:
                yield parts[0], TestStatus.PASSED
        elif line.startswith(TestStatus.PASSED):
            yield parts[1], TestStatus.PASSED


_SYMPY_HEADER = re.compile(r"(_*) (.*)\.py:(.*) (_*)")
_SYMPY_ENDINGS = ((" E", TestStatus.ERROR), (" F", TestStatus.FAILED), (" ok", TestStatus.PASSED))


def parse_sympy(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_sympy``: sympy's ``bin/test --verbose`` lines (``test_x ok``, ``test_y F``,
    ``test_z E``), and ``path.py:test`` FAILED for every failure header
    (``___ sympy/a/tests/test_b.py:test_c ___``).

    The harness reads the headers over the whole log first, then the result lines, so a result
    line decides an id whatever their order: a header's id that a result line already gave is
    not yielded again. (Headers give ``path.py:test`` ids, result lines bare names; they meet
    only on a result line that names a ``.py:`` id, so only those are remembered.)
    """
    decided: set[str] = set()
    for raw in lines:
        for _, path, name, _ in _SYMPY_HEADER.findall(raw):  # no part of it spans a newline
            test = f"{path}.py:{name}"
            if test not in decided:
                yield test, TestStatus.FAILED
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        for ending, status in _SYMPY_ENDINGS:
            if line.endswith(ending):
                test = line.split()[0]
                if ".py:" in test:
                    decided.add(test)
                yield test, status


_DJANGO_PASS = (" ... ok", " ... OK", " ...  OK")
# The harness's three patterns over the whole log, run after its line loop: a test whose
# result the runner's own output cut off ('X ... <something>' then 'ok' on its own line).
_DJANGO_SPLIT = [
    re.compile(r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ "
               r"silenced\)\.\nok$", re.MULTILINE),
    re.compile(r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$", re.MULTILINE),
    re.compile(r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
               re.MULTILINE),
]
_DJANGO_SPLIT_WORDS = ("Testing against Django installed in ", "Internal Server Error: /",
                       "System check identified no issues (0 silenced)")


def parse_django(lines: Iterable[str]) -> Iterator[Result]:
    """``parse_log_django``: Django's ``runtests.py --verbosity 2`` (``test_x (app.T) ... ok``,
    ``... FAIL``, ``... ERROR``, ``... skipped``, ``FAIL: test_x``, a lone ``ok`` after a test's
    own output), then the harness's three multi-line patterns over the whole log, which win.

    The lines are kept for those patterns (the log is capped upstream); they are matched only
    if a line holds one of their fixed phrases. Where the harness raises IndexError (a line
    ``FAIL:`` or ``ERROR:`` with nothing after it), the line is skipped.
    """
    kept: list[str] = []
    split_seen = False
    previous: str | None = None
    for raw in lines:
        kept.append(raw)
        split_seen = split_seen or any(w in raw for w in _DJANGO_SPLIT_WORDS)
        line = raw.strip()
        if "--version is equivalent to version" in line:
            yield "--version is equivalent to version", TestStatus.PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        for suffix in _DJANGO_PASS:
            if line.endswith(suffix):
                # the harness's own exception for django__django-7188
                if line.startswith("Applying sites.0002_alter_domain_unique...test_no_migrations"):
                    line = line.split("...", 1)[-1].strip()
                yield line.rsplit(suffix, 1)[0], TestStatus.PASSED
                break
        if " ... skipped" in line:
            yield line.split(" ... skipped")[0], TestStatus.SKIPPED
        if line.endswith(" ... FAIL"):
            yield line.split(" ... FAIL")[0], TestStatus.FAILED
        if line.startswith("FAIL:") and len(line.split()) > 1:
            yield line.split()[1].strip(), TestStatus.FAILED
        if line.endswith(" ... ERROR"):
            yield line.split(" ... ERROR")[0], TestStatus.ERROR
        if line.startswith("ERROR:") and len(line.split()) > 1:
            yield line.split()[1].strip(), TestStatus.ERROR
        if line.lstrip().startswith("ok") and previous is not None:
            yield previous, TestStatus.PASSED
    if split_seen:
        log = "\n".join(kept)
        for pattern in _DJANGO_SPLIT:
            for found in pattern.finditer(log):
                yield found.group(1), TestStatus.PASSED
