"""Test-runner logs read as the released SWE-bench harness reads them (``swebench`` 5.0.2).

Datasets built by SWE-bench and its kin (SWE-Gym, SWE-smith, R2E-Gym, SWE-rebench) name their
fail-to-pass and pass-to-pass tests exactly as the harness's log parsers print them. The
parsers (:mod:`envcheck.core.swebench_logs`) mirror the release's Python parsers rule for rule,
under envcheck's names: ``pytest``, ``pytest_v2``, ``pytest_options``, ``django``, ``sympy``,
``matplotlib``, ``seaborn``; :data:`HARNESS_REPO_PARSERS` is the release's repository ->
parser map, :data:`HARNESS_LOG_PARSERS` its parser names (a record's ``log_parser``, as later
exports carry it) -> envcheck's. They are streams: each takes the log's lines
(:func:`log_lines` splits them as the harness does) and yields ``(test id, status)`` pairs,
later pairs overriding earlier ones, so a caller keeps only the ids it wants.

More parsers: :func:`register_parser`, or the ``envcheck.test_log_parsers`` entry-point group
(a name -> a callable with the same signature), loaded on first use.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache

from envcheck.core.swebench_logs import (
    RELEASE,
    TestStatus,
    parse_django,
    parse_matplotlib,
    parse_pytest,
    parse_pytest_options,
    parse_pytest_v2,
    parse_seaborn,
    parse_sympy,
)

__all__ = ["ENTRY_POINT_GROUP", "HARNESS_LOG_PARSERS", "HARNESS_REPO_PARSERS", "RELEASE",
           "LogParser", "TestStatus", "log_lines", "named_parser", "parser", "parser_names",
           "register_parser"]

ENTRY_POINT_GROUP = "envcheck.test_log_parsers"

LogParser = Callable[[Iterable[str]], Iterator[tuple[str, str]]]
"""Lines in, ``(test id, status)`` out; a status is a :class:`TestStatus` value, or the word
the log printed where the harness keeps one it does not know."""

_PARSERS: dict[str, LogParser] = {
    "pytest": parse_pytest,
    "pytest_v2": parse_pytest_v2,
    "pytest_options": parse_pytest_options,
    "django": parse_django,
    "sympy": parse_sympy,
    "matplotlib": parse_matplotlib,
    "seaborn": parse_seaborn,
}

# The release's MAP_REPO_TO_PARSER_PY, by envcheck's parser names (the parity test holds it to
# the release's own map).
HARNESS_REPO_PARSERS: dict[str, str] = {
    "astropy/astropy": "pytest_v2",
    "django/django": "django",
    "marshmallow-code/marshmallow": "pytest",
    "matplotlib/matplotlib": "matplotlib",
    "mwaskom/seaborn": "seaborn",
    "pallets/flask": "pytest",
    "psf/requests": "pytest_options",
    "pvlib/pvlib-python": "pytest",
    "pydata/xarray": "pytest",
    "pydicom/pydicom": "pytest_options",
    "pylint-dev/astroid": "pytest",
    "pylint-dev/pylint": "pytest_options",
    "pytest-dev/pytest": "pytest",
    "pyvista/pyvista": "pytest",
    "scikit-learn/scikit-learn": "pytest_v2",
    "sqlfluff/sqlfluff": "pytest",
    "sphinx-doc/sphinx": "pytest_v2",
    "sympy/sympy": "sympy",
}

# The release's PARSER_REGISTRY names of its Python parsers, by envcheck's parser names: its
# per-repository names are aliases (parse_log_pydicom = parse_log_pytest_options), mirrored as
# the release defines them (the parity test holds it to the release's own registry). Its
# parsers for other languages (parse_log_jest, parse_log_gotest, ...) have no counterpart here.
HARNESS_LOG_PARSERS: dict[str, str] = {
    "parse_log_pytest": "pytest",
    "parse_log_pytest_options": "pytest_options",
    "parse_log_django": "django",
    "parse_log_pytest_v2": "pytest_v2",
    "parse_log_seaborn": "seaborn",
    "parse_log_sympy": "sympy",
    "parse_log_matplotlib": "matplotlib",
    "parse_log_astroid": "pytest",
    "parse_log_flask": "pytest",
    "parse_log_marshmallow": "pytest",
    "parse_log_pvlib": "pytest",
    "parse_log_pyvista": "pytest",
    "parse_log_sqlfluff": "pytest",
    "parse_log_xarray": "pytest",
    "parse_log_pydicom": "pytest_options",
    "parse_log_requests": "pytest_options",
    "parse_log_pylint": "pytest_options",
    "parse_log_astropy": "pytest_v2",
    "parse_log_scikit": "pytest_v2",
    "parse_log_sphinx": "pytest_v2",
}


def log_lines(data: bytes) -> Iterator[str]:
    """The log's lines as the harness reads its log file: universal newlines (``\\r\\n`` and a
    lone ``\\r`` end a line, as ``open()`` in text mode reads them), then ``split("\\n")``.
    Bytes that are not UTF-8 are replaced (where the harness's ``open()`` would raise)."""
    with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace",
                          newline=None) as text:
        for line in text:
            yield line.removesuffix("\n")


def register_parser(name: str, fn: LogParser) -> None:
    """Add a log parser under ``name`` (a catalogue's ``report: name`` then selects it)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name == "junit":
        raise ValueError(f"invalid log parser name {name!r}: lowercase letters, digits, '_'")
    _PARSERS[name] = fn


@cache  # once per process
def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _PARSERS:
            register_parser(ep.name, ep.load())


def parser_names() -> list[str]:
    _load_entry_points()
    return sorted(_PARSERS)


def named_parser(name: str) -> str | None:
    """envcheck's parser for a parser name a record carries: the release's name of one of its
    Python parsers (``parse_log_pydicom`` -> ``pytest_options``), else a registered parser of
    that very name (a plug-in may register ``parse_log_jest``); None if there is neither."""
    if name in HARNESS_LOG_PARSERS:
        return HARNESS_LOG_PARSERS[name]
    return name if name in parser_names() else None


def parser(name: str) -> LogParser:
    """The parser registered as ``name``; KeyError if none is."""
    _load_entry_points()
    return _PARSERS[name]
