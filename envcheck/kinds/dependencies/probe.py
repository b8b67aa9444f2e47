"""Dependency state: is what the environment declares installed, at the declared versions?

One exec of one POSIX sh script reads everything (:mod:`.state`); the comparison runs on the
host (:mod:`.diff`). Checked: Python packages against
PEP 440 specifiers or a pip-freeze lock (missing / changed / extra), Debian packages against
dpkg relations, executables and their ``--version`` output, one fresh interpreter per declared
import, and ``pip check``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.core.errors import EnvcheckError
from envcheck.core.results import CommandEvidence, ProbeKind, Reason, Status
from envcheck.kinds.base import Probe, ProbeContext, Verdict
from envcheck.kinds.dependencies.diff import PRIORITY, Diff, compare
from envcheck.kinds.dependencies.lock import LockError, Pin, read_lock
from envcheck.kinds.dependencies.state import InstalledState, read_state, step_timeout
from envcheck.kinds.startup import command_start_failure
from envcheck.sandbox.base import ExecResult, Sandbox

__all__ = ["DependenciesProbe", "Snapshot", "SnapshotFailed", "summarize", "take_snapshot"]

EVIDENCE_LABEL = "/bin/sh -c <dependency checks>"
_NOUNS = {  # reason -> (one, many)
    Reason.TIMEOUT: ("step timed out", "steps timed out"),
    Reason.OUTPUT_FLOOD: ("output flood", "output floods"),
    Reason.TOOL_MISSING: ("executable not found", "executables not found"),
    Reason.PACKAGE_MISSING: ("package missing", "packages missing"),
    Reason.VERSION_DRIFT: ("version drifted", "versions drifted"),
    Reason.IMPORT_BROKEN: ("import broken", "imports broken"),
    Reason.REQUIREMENTS_CONFLICT: ("requirement conflict", "requirement conflicts"),
}
_SHOWN = 4  # items named in a summary; all are in details


class DependenciesProbe(Probe):
    kind = ProbeKind.DEPENDENCIES
    reusable = True  # installed packages and imports are the image's

    def check(self, ctx: ProbeContext) -> Verdict:
        env = ctx.env
        spec = env.dependencies
        assert spec is not None  # applies() said so
        try:  # before any container: a catalogue problem is no reason to start one
            lock = _lock(spec)
        except LockError as exc:
            return Verdict(Status.ERROR, Reason.LOCK_UNREADABLE, str(exc))
        state, result = read_state(ctx.sandbox(), env, spec)
        evidence = (_evidence(result, env),)
        if (failure := _exec_failure(result, state, env)) is not None:
            status, reason, summary = failure
            return Verdict(status, reason, summary, {}, evidence)
        diff = compare(spec, state, lock, step_timeout(env))
        if state.workdir_ok is False:
            diff.notes.append(f"workdir {env.workdir} is missing: imports ran elsewhere")
        if result.timed_out:
            diff.problems.insert(0, (Reason.TIMEOUT, f"checks did not finish in "
                                                     f"{env.timeouts.exec_s:g}s"))
        elif result.output.truncated:
            diff.problems.insert(0, (Reason.OUTPUT_FLOOD, "the image printed past the output cap"))
        details = _details(spec, state, diff, lock)
        primary = diff.primary()
        if primary is None:
            return Verdict(Status.PASS, Reason.OK, _ok_summary(spec, state, lock), details,
                           evidence)
        return Verdict(Status.FAIL, primary, summarize(diff), details, evidence)


def _lock(spec: DependencySpec) -> dict[str, Pin] | None:
    if spec.lock is None:
        return None
    # lock_path is set by the loader; a spec built in code resolves against the cwd
    return read_lock(spec.lock_path or spec.lock)


def _exec_failure(result: ExecResult, state: InstalledState,
                  env: Environment) -> tuple[Status, Reason, str] | None:
    """The script did not run (the engine says why), or stopped before its end."""
    if state.workdir_ok is None and not result.timed_out:  # not even its first line
        start = command_start_failure(result, env.user, "/bin/sh", ready=None)
        if start is not None:
            return Status.FAIL, *start
    if not state.complete and not result.timed_out and not result.output.truncated:
        # killed by something other than our timeout, e.g. the sandbox's memory limit
        return (Status.ERROR, Reason.CHECKER_CRASHED,
                f"the dependency script stopped early (exit {result.exit_code})")
    return None


def summarize(diff: Diff) -> str:
    """The primary reason's items first, e.g. "2 drifted: pytest 6.2.5 (want >=7.2,<8), ..."."""
    primary = diff.primary()
    assert primary is not None
    items = [text for reason, text in diff.problems if reason is primary]
    shown = ", ".join(items[:_SHOWN]) + (f", +{len(items) - _SHOWN} more"
                                          if len(items) > _SHOWN else "")
    head = f"{len(items)} {_NOUNS[primary][len(items) > 1]}: {shown}"
    others = sorted({r for r, _ in diff.problems if r is not primary}, key=PRIORITY.index)
    if others:
        counts = [f"{sum(1 for r, _ in diff.problems if r is o)} {o}" for o in others]
        head += f"; also {', '.join(counts)}"
    if diff.unchecked:
        head += f"; {len(diff.unchecked)} check(s) could not run"
    return head


def _ok_summary(spec: DependencySpec, state: InstalledState, lock: dict[str, Pin] | None) -> str:
    parts = []
    for count, label in ((len(spec.python), "python package(s)"),
                         (len(lock or ()), "locked python package(s)"),
                         (len(spec.debian), "debian package(s)"),
                         (len(spec.executables), "executable(s)"),
                         (len(spec.imports), "import(s)")):
        if count:
            parts.append(f"{count} {label}")
    if spec.pip_check and state.pip_check is not None and state.pip_check.ok:
        parts.append("pip check")
    return "dependencies as declared: " + (", ".join(parts) or "nothing to check") + " ok"


def _details(spec: DependencySpec, state: InstalledState, diff: Diff,
             lock: dict[str, Pin] | None) -> dict[str, Any]:
    packages = state.packages or {}
    details: dict[str, Any] = {
        "python": {"bin": spec.python_bin, "path": state.python_path,
                   "version": state.python_version,
                   "installed": len(packages) if state.packages is not None else None},
        "packages": {name: {"want": want, "have": getattr(
            packages.get(canonicalize_name(name)), "version", None)}
            for name, want in spec.python.items()},
        "debian": {pkg: {"want": want, "have": state.debian.get(pkg)}
                   for pkg, want in spec.debian.items()},
        "executables": {tool: {"path": state.tools.get(tool), "want": pattern}
                        for tool, pattern in spec.executables.items()},
        "imports": {m: ("ok" if s.ok else "broken") for m, s in state.imports.items()},
        "pip_check": _pip_status(spec, state, diff),
        "workdir_ok": state.workdir_ok,
        "diff": diff.to_json(),
        "problems": [{"reason": str(r), "detail": d} for r, d in diff.problems],
        "unchecked": diff.unchecked,
        "notes": diff.notes,
    }
    if lock is not None:
        details["lock"] = {"file": spec.lock, "pins": len(lock)}
    return details


def _pip_status(spec: DependencySpec, state: InstalledState, diff: Diff) -> str:
    if not spec.pip_check:
        return "off"
    if state.pip_check is None:
        return "not run"
    if state.pip_check.ok:
        return "ok"
    return "not run: no pip" if any("pip check not run" in n for n in diff.notes) else "conflicts"


def _evidence(result: ExecResult, env: Environment) -> CommandEvidence:
    """The script's output, capped like any command's (the JSON inventory can be large)."""
    half = env.limits.output_kb * 512
    text = result.text
    head, tail = text[:half], text[-half:] if len(text) > half * 2 else ""
    return CommandEvidence(command=EVIDENCE_LABEL, exit_code=result.exit_code,
                           duration_s=round(result.duration_s, 4), output_head=head,
                           output_tail=tail, output_bytes=result.output.total,
                           truncated=len(text) > half * 2 or result.output.truncated,
                           timed_out=result.timed_out)


@dataclass(frozen=True, slots=True)
class Snapshot:
    packages: list[tuple[str, str]]
    python_version: str | None


def take_snapshot(sandbox: Sandbox, env: Environment) -> Snapshot:
    """The Python packages installed for the env's interpreter (for ``envcheck snapshot``)."""
    python_bin = env.dependencies.python_bin if env.dependencies else "python3"
    spec = DependencySpec(python_bin=python_bin, pip_check=False)
    state, result = read_state(sandbox, env, spec, python=True)
    if state.python_missing:
        raise SnapshotFailed(f"{python_bin} is not on PATH for user {env.user} in {env.image}")
    if state.packages is None:
        why = state.inventory.error(step_timeout(env)) if state.inventory else (
            f"exit {result.exit_code}: {result.text.strip()[-300:]}")
        raise SnapshotFailed(f"{python_bin} could not list its packages: {why}")
    return Snapshot([(p.name, p.version) for p in state.packages.values()],
                    state.python_version)


class SnapshotFailed(EnvcheckError):
    """The image cannot report its Python packages (no interpreter, a broken one): the
    environment's fault, unlike the :class:`~envcheck.core.errors.InfraError` family."""
