"""Compare what an environment declares with what its image has installed. Pure: no Docker.

Python versions are compared as PEP 440 versions (names canonicalized), never as strings;
Debian relations arrive already decided by ``dpkg --compare-versions`` in the container.
Every problem lands in one structured diff; the primary reason is the first by ``PRIORITY``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envcheck.catalogue.fields import DEB_OPERATORS, debian_relations, python_specifier
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.core.results import Reason
from envcheck.kinds.dependencies.lock import Pin
from envcheck.kinds.dependencies.state import InstalledState, Step

__all__ = ["PRIORITY", "Diff", "compare", "same_version", "satisfies"]

# Absence before wrongness, declared before derived: a missing interpreter or package explains
# the drift, broken imports and conflicts that follow from it, not the other way round.
PRIORITY = [
    Reason.TIMEOUT,
    Reason.OUTPUT_FLOOD,
    Reason.TOOL_MISSING,
    Reason.PACKAGE_MISSING,
    Reason.VERSION_DRIFT,
    Reason.IMPORT_BROKEN,
    Reason.REQUIREMENTS_CONFLICT,
]
_OP_SYMBOL = {word: op for op, word in DEB_OPERATORS.items()}
_PIP_LINES = [
    re.compile(r"^(?P<package>\S+ \S+) requires (?P<requires>.+), which is not installed\.$"),
    re.compile(r"^(?P<package>\S+ \S+) has requirement (?P<requires>.+), "
               r"but you have (?P<have>\S+ \S+)\.$"),
    re.compile(r"^(?P<package>\S+ \S+) is not supported on this platform$"),
]


@dataclass
class Diff:
    """Every problem found, by kind; ``problems`` keeps (reason, one-line text) in order."""

    missing: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)
    tools_missing: list[dict[str, Any]] = field(default_factory=list)
    import_broken: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[Reason, str]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"missing": self.missing, "changed": self.changed, "extra": self.extra,
                "tools_missing": self.tools_missing, "import_broken": self.import_broken,
                "conflicts": self.conflicts}

    def primary(self) -> Reason | None:
        reasons = {reason for reason, _ in self.problems}
        return next((r for r in PRIORITY if r in reasons), None)


def satisfies(version: str, specifier: SpecifierSet) -> bool:
    """PEP 440 containment; pre-releases count (we judge what is installed, not choose)."""
    try:
        return specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False  # a legacy version satisfies no specifier, as pip sees it


def same_version(a: str, b: str) -> bool:
    """``1.0 == 1.0.0`` as PEP 440 says; exact text only for versions that are not PEP 440."""
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def compare(spec: DependencySpec, state: InstalledState, lock: dict[str, Pin] | None,
            step_s: float) -> Diff:
    diff = Diff()
    if state.python_missing and not (spec.python or spec.imports or lock is not None):
        diff.notes.append(f"pip check not run: {spec.python_bin} is not on PATH")
    elif state.python_missing:
        diff.tools_missing.append({"name": spec.python_bin, "source": "python_bin"})
        diff.problems.append((Reason.TOOL_MISSING, f"{spec.python_bin} (python_bin)"))
        diff.unchecked += [f"python:{n}" for n in spec.python] + [
            f"import:{m}" for m in spec.imports] + (["lock"] if lock is not None else [])
    elif state.packages is None and state.inventory is not None:
        error = state.inventory.error(step_s)
        if state.inventory.status == 124:
            diff.problems.append((Reason.TIMEOUT, f"{spec.python_bin} package listing {error}"))
        else:
            diff.import_broken.append({"module": "(python startup)", "error": error})
            diff.problems.append((Reason.IMPORT_BROKEN, f"{spec.python_bin} fails: {error}"))
    if state.packages is not None:
        _python(spec, state.packages, diff)
        if lock is not None:
            _lock(lock, state.packages, diff)
    elif not state.python_missing:  # cut short, or the interpreter failed
        diff.unchecked += [f"python:{n}" for n in spec.python] + (
            ["lock"] if lock is not None else [])
    if not state.python_missing:
        diff.unchecked += [f"import:{m}" for m in spec.imports if m not in state.imports]
        if spec.pip_check and state.pip_check is None and not state.complete:
            diff.unchecked.append("pip check")
    _imports(state, step_s, diff)
    _executables(spec, state, step_s, diff)
    _debian(spec, state, diff)
    _pip_check(state, spec.python_bin, step_s, diff)
    return diff


def _python(spec: DependencySpec, packages: dict[str, Any], diff: Diff) -> None:
    for name, want in spec.python.items():
        have = packages.get(canonicalize_name(name))
        specifier = python_specifier(want, name)
        if have is None:
            diff.missing.append({"name": name, "source": "python", "want": want})
            diff.problems.append((Reason.PACKAGE_MISSING, f"{name} (python)"))
        elif specifier is not None and not satisfies(have.version, specifier):
            diff.changed.append({"name": name, "source": "python", "want": want,
                                 "have": have.version})
            diff.problems.append((Reason.VERSION_DRIFT, f"{name} {have.version} (want {want})"))


def _lock(lock: dict[str, Pin], packages: dict[str, Any], diff: Diff) -> None:
    for key, pin in sorted(lock.items()):
        have = packages.get(key)
        if have is None:
            diff.missing.append({"name": pin.name, "source": "lock", "want": pin.want})
            diff.problems.append((Reason.PACKAGE_MISSING, f"{pin.name} (lock {pin.want})"))
        elif pin.version is not None and not same_version(have.version, pin.version):
            diff.changed.append({"name": pin.name, "source": "lock", "want": pin.want,
                                 "have": have.version})
            diff.problems.append((Reason.VERSION_DRIFT,
                                  f"{pin.name} {have.version} (lock {pin.want})"))
    for key, have in sorted(packages.items()):
        if key not in lock:
            diff.extra.append({"name": have.name, "source": "lock", "have": have.version})
            diff.problems.append((Reason.VERSION_DRIFT, f"{have.name} {have.version} "
                                                        f"(not in lock)"))


def _imports(state: InstalledState, step_s: float, diff: Diff) -> None:
    for module, step in state.imports.items():
        if not step.ok:
            error = step.error(step_s)
            diff.import_broken.append({"module": module, "error": error})
            diff.problems.append((Reason.IMPORT_BROKEN, f"{module} ({error})"))


def _executables(spec: DependencySpec, state: InstalledState, step_s: float,
                 diff: Diff) -> None:
    for tool, pattern in spec.executables.items():
        if tool == spec.python_bin and state.python_missing:
            continue  # reported once, as the missing interpreter
        if tool not in state.tools:
            diff.unchecked.append(f"executable:{tool}")
        elif state.tools[tool] is None:
            diff.tools_missing.append({"name": tool, "source": "executable"})
            diff.problems.append((Reason.TOOL_MISSING, tool))
        elif pattern is not None:
            step = state.versions.get(tool, Step(None))
            output = step.head if step.ok else ""
            if not re.search(pattern, output, re.MULTILINE):
                first = output.strip().splitlines()[0] if output.strip() else (
                    f"no version output: {step.error(step_s)}")
                diff.changed.append({"name": tool, "source": "executable", "want": pattern,
                                     "have": first})
                diff.problems.append((Reason.VERSION_DRIFT, f"{tool} {first!r} (want /{pattern}/)"))


def _debian(spec: DependencySpec, state: InstalledState, diff: Diff) -> None:
    if state.dpkg_missing and spec.debian:
        diff.tools_missing.append({"name": "dpkg-query", "source": "debian"})
        diff.problems.append((Reason.TOOL_MISSING, "dpkg-query (needed for debian packages)"))
        diff.unchecked += [f"debian:{p}" for p in spec.debian]
        return
    for pkg, want in spec.debian.items():
        if pkg not in state.debian:
            diff.unchecked.append(f"debian:{pkg}")
            continue
        have = state.debian[pkg]
        if have is None:
            diff.missing.append({"name": pkg, "source": "debian", "want": want})
            diff.problems.append((Reason.PACKAGE_MISSING, f"{pkg} (debian)"))
            continue
        decided = state.relations.get(pkg, [])
        failed = [f"{_OP_SYMBOL.get(op, op)} {ver}" for op, ver, verdict in decided
                  if verdict != "yes"]
        if len(decided) < len(debian_relations(want, pkg)):
            diff.unchecked.append(f"debian:{pkg}")
        if failed:
            diff.changed.append({"name": pkg, "source": "debian", "want": want, "have": have})
            diff.problems.append((Reason.VERSION_DRIFT, f"{pkg} {have} (want {want})"))


def _pip_check(state: InstalledState, python_bin: str, step_s: float, diff: Diff) -> None:
    step = state.pip_check
    if step is None or step.ok:
        return
    if "No module named pip" in step.head:
        diff.notes.append(f"pip check not run: pip is not installed for {python_bin}")
        return
    if step.status == 124:
        diff.problems.append((Reason.TIMEOUT, f"pip check {step.error(step_s)}"))
        return
    found: list[dict[str, Any]] = []
    for raw in step.head.splitlines():
        line = raw.strip()
        if not line or line.startswith("No broken requirements"):
            continue
        match = next((m for p in _PIP_LINES if (m := p.match(line))), None)
        found.append({"package": None, "requires": None, "have": None, "line": line}
                     | ({k: v for k, v in match.groupdict().items()} if match else {}))
    if not found:
        found.append({"package": None, "requires": None, "have": None,
                      "line": step.error(step_s)})
    diff.conflicts += found
    diff.problems += [(Reason.REQUIREMENTS_CONFLICT, c["line"].rstrip(".")) for c in found]
