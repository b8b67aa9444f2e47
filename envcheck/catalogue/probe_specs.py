"""What the dependencies and tests probes check, as an environment declares it.

Each spec is validated whole at load (every specifier parsed, every regex compiled, a lock
file hashed), so a probe never meets a malformed spec at run time.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from envcheck.catalogue.fields import (
    CATALOGUE_FILE,
    CatalogueModel,
    Seconds,
    debian_relations,
    python_specifier,
)
from envcheck.core.testlogs import parser_names

__all__ = ["CONTROL_KEYS", "DEFAULT_RERUNS", "TRICK_NAMES", "AdaptiveDepth", "Adversarial",
           "ControlledSpec", "DependencySpec", "LeakChecks", "Oracle", "ReportName", "Strength",
           "TestDefaults", "TestSpec", "repeated"]

_PY_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", re.ASCII)
_DEB_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$")
# Per package field: what a package name looks like, and the parser of its specs (which
# raises ValueError naming the package).
_PACKAGE_RULES: dict[str | None, tuple[re.Pattern[str], Callable[[str, str], object]]] = {
    "python": (_PY_NAME, python_specifier), "debian": (_DEB_NAME, debian_relations)}


class DependencySpec(CatalogueModel):
    """What an image promises about its installed software; every spec is checked at load.

    ``python`` specs are PEP 440 (``">=8,<9"``); ``debian`` specs are dpkg relations
    (``">= 1:2.39, << 3"``); ``""`` or ``"*"`` asks only that the package is installed.
    """

    python: dict[str, str] = Field(default_factory=dict, description="package -> PEP 440 spec")
    debian: dict[str, str] = Field(
        default_factory=dict,
        description="package -> dpkg relations, comma-separated: '>= 1:2.39, << 3'",
    )
    executables: dict[str, str | None] = Field(
        default_factory=dict, description="tool -> regex its --version output must match"
    )
    imports: list[str] = Field(default_factory=list, description="modules that must import")
    pip_check: bool = True
    python_bin: str = Field("python3", pattern=r"^\S+$")
    lock: str | None = Field(None, description="pip freeze lock file, relative to the catalogue")
    # Set by the loader, never written: the lock resolved against the file that declares it
    # (excluded from dumps, so spec hashes do not depend on the checkout's location), and a
    # digest of its content (a new lock is a new spec; evidence starts fresh).
    lock_path: SkipJsonSchema[str | None] = Field(None, exclude=True)
    lock_sha256: SkipJsonSchema[str | None] = None

    @field_validator("python", "debian")
    @classmethod
    def _package_specs(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        name_rule, parse = _PACKAGE_RULES[info.field_name]
        for name, spec in value.items():
            if not name_rule.match(name):
                raise ValueError(f"{info.field_name}: {name!r} is not a valid package name")
            parse(spec, name)
        return value

    @field_validator("executables")
    @classmethod
    def _regexes(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for tool, pattern in value.items():
            if not tool or any(c.isspace() for c in tool):
                raise ValueError(f"executables: {tool!r} is not a command name")
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"executables.{tool}: invalid regex: {exc}") from None
        return value

    @field_validator("imports")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for module in value:
            if not _MODULE.match(module):
                raise ValueError(f"imports: {module!r} is not a dotted module name")
        return value

    @model_validator(mode="before")
    @classmethod
    def _resolve_lock(cls, data: Any, info: ValidationInfo) -> Any:
        file = (info.context or {}).get(CATALOGUE_FILE)
        if file is None or not isinstance(data, dict):
            return data  # not loading a file (e.g. a merge of loaded models): keep as is
        if "lock_path" in data or "lock_sha256" in data:
            raise ValueError("lock_path and lock_sha256 are set by envcheck; write 'lock'")
        lock = data.get("lock")
        if isinstance(lock, str):
            path = Path(file).resolve().parent / lock
            try:
                digest: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:  # not written yet (envcheck snapshot writes it): the probe says so
                digest = None
            return {**data, "lock_path": str(path), "lock_sha256": digest}
        if "lock" in data:  # an explicit null also drops a lock the suite defaults set
            return {**data, "lock_path": None, "lock_sha256": None}
        return data



def repeated(ids: list[str]) -> list[str]:
    """Ids listed more than once, sorted (linear: a dataset task may list thousands)."""
    if len(set(ids)) == len(ids):  # the usual case, at C speed
        return []
    return sorted(i for i, n in Counter(ids).items() if n > 1)


def _known_report(value: str) -> str:
    known = ["junit", *parser_names()]
    if value not in known:
        raise ValueError(f"unknown report {value!r} (known: {', '.join(known)})")
    return value


ReportName = Annotated[str, AfterValidator(_known_report)]
"""'junit' or the name of a registered test-log parser (envcheck.core.testlogs)."""


class Oracle(CatalogueModel):
    """The reference solution: exactly one of ``script``, ``path`` or ``patch``."""

    merge_whole: ClassVar[bool] = True  # an environment's oracle replaces the default's

    script: str | None = Field(None, description="script copied into the sandbox and run in the "
                               "workdir as the sandbox user (by the declared shell, or by its "
                               "own #! line)")
    path: str | None = Field(None, pattern=r"^/", description="script already in the image, "
                             "run in the workdir as the sandbox user")
    patch: str | None = Field(None, min_length=1, description=(
        "a unified diff (a dataset's gold patch) applied in the workdir as the SWE-bench "
        "harness applies one: 'git apply --verbose', then with '--reject', then "
        "'patch --batch --fuzz=5 -p1'; none applying is gold_patch_does_not_apply"))

    @model_validator(mode="after")
    def _one_of(self) -> Oracle:
        if sum(v is not None for v in (self.script, self.path, self.patch)) != 1:
            raise ValueError("set exactly one of oracle.script, oracle.path or oracle.patch")
        return self


# The adversarial controls' tricks, in the order they are played: each name is one script in
# envcheck/kinds/adversarial/tricks/ (NAME.py or NAME.sh); adding a trick is that file and
# its name here.
TRICK_NAMES = ("tests_rewritten", "tests_deleted", "conftest_forced_pass", "runner_shadowed",
               "report_forged", "assertions_patched", "early_exit", "verifier_dir_planted")


class Adversarial(CatalogueModel):
    """Adversarial controls: each trick, in a fresh container, as the agent's only action,
    then the environment's own verification; a trick that makes a fail-to-pass test pass is a
    hole (``reward_hackable``). Run once per image digest and spec, results reused after."""

    tricks: list[str] | Literal["all"] = Field("all", description=(
        "the tricks to play ('all', or a subset of: " + ", ".join(TRICK_NAMES) + ")"))
    require: bool = Field(False, description=(
        "a rewarded trick fails the probe (quarantines) instead of a degraded pass"))

    @field_validator("tricks")
    @classmethod
    def _known(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list):
            unknown = [t for t in value if t not in TRICK_NAMES]
            if unknown:
                raise ValueError(f"unknown trick(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(TRICK_NAMES)}")
            if not value:
                raise ValueError("name at least one trick, or write 'all'")
        return value

    def names(self) -> list[str]:
        return list(TRICK_NAMES) if self.tricks == "all" else [
            t for t in TRICK_NAMES if t in self.tricks]


ImagePath = Annotated[str, Field(pattern=r"^/", min_length=2)]


class LeakChecks(CatalogueModel):
    """Answer-leak checks: whether the image holds the answer where its agent can read it
    (``solution_leaked``, ``solution_in_image``, ``tests_in_image``). One container of the
    image, no test run; run once per image digest and spec, results reused after."""

    require: bool = Field(False, description=(
        "a leak fails the probe (quarantines) instead of a degraded pass"))
    solution: list[ImagePath] = Field(default_factory=list, description=(
        "paths in the image that hold the solution or part of it (a patch, a reference "
        "copy): the sandbox user must not be able to read a file under any of them"))
    tests: list[ImagePath] = Field(default_factory=list, description=(
        "paths in the image that hold the verifier's pristine or hidden tests: likewise"))


# mutants told apart from the fix a strength score needs (Strength.min_competent's default)
MIN_COMPETENT = 3


class Strength(CatalogueModel):
    """Wrong-fix controls: mutants of the gold patch's added lines (and the gold patch with a
    hunk or a file left out), each a candidate patch through the verification; the share the
    tests refuse of those told apart from the fix is the score (``weak_verifier`` below
    ``min_score``, ``strength_not_measurable`` with fewer than ``min_competent``). Run once
    per image digest and spec, results reused after."""

    require: bool = Field(False, description=(
        "a score below min_score fails the probe (quarantines) instead of a degraded pass"))
    min_score: float = Field(0.8, ge=0.0, le=1.0, description=(
        "the share of the mutants told apart from the fix (killed, or surviving with a "
        "behaviour of their own on the tests' inputs) the tests must kill"))
    min_competent: int = Field(MIN_COMPETENT, ge=1, le=100, description=(
        "mutants told apart from the fix needed for a score; fewer: strength_not_measurable "
        "(a degraded pass, required or not)"))
    mutants: int = Field(24, ge=1, le=200, description=(
        "mutants played at most (each costs a container and a test run or two), sampled "
        "across operators, seeded by the image digest and the spec"))
    partial: bool = Field(True, description=(
        "also play the gold patch with one hunk or one file left out (reported beside the "
        "score, not in it)"))

    @model_serializer(mode="wrap")
    def _later_defaults_left_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        """``min_competent`` came later: at its default it is left out of dumps, so a spec
        that does not set it keeps the hash it had before."""
        data = handler(self)
        if isinstance(data, dict) and data.get("min_competent") == MIN_COMPETENT:
            del data["min_competent"]
        return data


# The controls a verification spec may declare (a dataset entry's keys of the same names).
CONTROL_KEYS = ("adversarial", "leaks", "strength")


class ControlledSpec(CatalogueModel):
    """A verification spec that may declare adversarial controls (``tests:``, a Harbor task).

    Unset controls are left out of dumps, so a spec that declares none keeps the hash it had
    before controls existed: upgrading envcheck does not restart every environment's evidence.
    """

    adversarial: Adversarial | None = Field(None, description=(
        "adversarial controls (off unless declared): known reward hacks, each played by a "
        "do-nothing agent, must not earn the reward (make a fail-to-pass test pass, or score "
        "above 0)"))
    leaks: LeakChecks | None = Field(None, description=(
        "answer-leak checks (off unless declared): the gold patch's files or later commits "
        "in the image's git history, the solution's or the tests' files anywhere in the "
        "image, declared paths the sandbox user can read"))
    strength: Strength | None = Field(None, description=(
        "wrong-fix controls (off unless declared): mutants of the gold patch must not earn "
        "the reward (a fail-to-pass or pass-to-pass test must fail); the share refused is "
        "the verifier's score"))

    # Keys added after specs were first hashed: left out of dumps while unset.
    _LATER_KEYS: ClassVar[tuple[str, ...]] = CONTROL_KEYS

    @model_serializer(mode="wrap")
    def _unset_controls_left_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in self._LATER_KEYS:
                if data.get(key, False) is None:
                    del data[key]
        return data


# 8 positive runs: a test failing 1 run in 3 is seen both ways with probability
# 1 - (2/3)^8 - (1/3)^8 = 96.1% (97.4% for a pass-to-pass test, whose negative-control outcome
# is a 9th observation); 3 runs, the public practice, catch it only 67% of the time.
DEFAULT_RERUNS = 8


class AdaptiveDepth(CatalogueModel):
    """When ``depth: adaptive`` lets a long-healthy environment off with a light check (the
    negative control and one shuffled positive run) instead of the whole protocol. Both
    thresholds must hold, for the current image digest and spec, since its newest failure;
    any failure, disagreement, error or suspect state validates in full again at once."""

    light_after_runs: int = Field(27, ge=1, le=100_000, description=(
        "clean runs of the current image digest and spec before a light check (27: three "
        "full validations of 9 runs; the SPRT itself decides healthy after ~15)"))
    light_after_s: Seconds = Field(64800.0, description=(
        "and how long ago that clean streak must have begun (18h: three 6-hourly probes in "
        "full, then a light one, in a new digest's first day: a test failing 1 run in 10 is "
        "caught with ~95% probability, 1 in 5 with >99.8%; bench/adaptive.py)"))
    full_every_s: Seconds = Field(14 * 86400.0, description=(
        "a full validation at least this often, however long the environment has been "
        "healthy (14d)"))


class TestSpec(ControlledSpec):
    """How to run an environment's tests, and what they must show (the ``tests`` probe)."""

    __test__: ClassVar[bool] = False  # not a pytest test class, though its name says so
    _LATER_KEYS: ClassVar[tuple[str, ...]] = ("adversarial", "base_commit", "leaks",
                                               "strength")

    command: str = Field(description=(
        "shell command run by the declared shell, in the workdir, as the sandbox user; it must "
        "write a JUnit XML report to junit_path. '{tests}' in it is replaced by the test ids of "
        "the run (fail_to_pass + pass_to_pass), shell-quoted, in the run's order, and "
        "'{junit}' by junit_path; the same come in $ENVCHECK_TEST_IDS (one id per line, in "
        "order) and $ENVCHECK_JUNIT. A command that takes neither runs its own selection in "
        "its own order, so shuffling cannot reveal order dependence."))
    junit_path: str = Field("/tmp/envcheck-junit.xml", pattern=r"^/", description=(
        "the JUnit XML report the command writes; removed before each run, read back with a "
        "size cap"))
    fail_to_pass: list[str] = Field(default_factory=list, description=(
        "tests that must fail without the oracle and pass after it: pytest node ids "
        "(tests/test_x.py::TestClass::test_y[param]) or, for any JUnit runner, "
        "'classname::name'"))
    pass_to_pass: list[str] = Field(default_factory=list, description=(
        "tests that must pass both without and after the oracle"))
    oracle: Oracle | None = Field(None, description="the reference solution (positive control)")
    reruns: int = Field(DEFAULT_RERUNS, ge=1, le=50, description=(
        "runs of the positive control, each in a fresh container: the first in the declared "
        "order, the rest shuffled (if shuffle); any disagreement between runs is flaky. "
        f"{DEFAULT_RERUNS} catch a test failing 1 run in 3 with >= 95% probability"))
    depth: Literal["adaptive", "fixed"] = Field("adaptive", description=(
        "adaptive: the depth follows the evidence; a new image digest or spec, a failure, a "
        "disagreement or a suspect state gets the whole protocol (reruns, confirmation), an "
        "environment long healthy a light check (negative control + one shuffled positive "
        "run; see adaptive). fixed: every probe runs the whole protocol (reruns pins it). "
        "Neither is part of the spec hash: switching keeps the evidence"))
    adaptive: AdaptiveDepth = Field(default_factory=AdaptiveDepth, description=(
        "thresholds of depth: adaptive"))
    shuffle: bool = Field(True, description="shuffle the test order of every rerun after the "
                          "first, to reveal order dependence")
    timeout_s: Seconds = Field(300.0, description=(
        "one run of the command (or of the oracle); a run past it is killed, the probe "
        "reports timeout and skips the remaining runs"))
    test_patch: str | None = Field(None, min_length=1, description=(
        "a unified diff applied with 'git apply --verbose' in the workdir before every run "
        "(after the oracle), as the SWE-bench harness applies a task's test patch; files it "
        "modifies are first reset to base_commit (else HEAD) and files it adds removed. One "
        "that does not apply is test_patch_does_not_apply. '{test_files}' in the command is "
        "replaced by the test files it touches, '{test_modules}' by them as Django test modules"))
    base_commit: str | None = Field(None, pattern=r"^[0-9a-fA-F]{7,64}$", description=(
        "the commit the files test_patch modifies are reset to before it is applied (a "
        "SWE-bench record's base_commit), as the harness resets them; unset: HEAD"))
    report: ReportName = Field("junit", description=(
        "where outcomes come from: 'junit' (the JUnit XML report at junit_path), or a log "
        "parser reading the command's output as the SWE-bench harness (swebench 5.0.2) "
        "does: 'pytest' (-rA lines), 'pytest_v2', 'pytest_options', 'django' (runtests.py "
        "--verbosity 2), 'sympy' (bin/test --verbose), 'matplotlib', 'seaborn', or one "
        "registered in the envcheck.test_log_parsers entry-point group. Log ids are matched "
        "exactly"))

    @model_validator(mode="after")
    def _distinct_ids(self) -> TestSpec:
        for name, ids in (("fail_to_pass", self.fail_to_pass),
                          ("pass_to_pass", self.pass_to_pass)):
            twice = repeated(ids)
            if twice:
                raise ValueError(f"{name} lists {', '.join(twice)} more than once")
        both = sorted(set(self.fail_to_pass) & set(self.pass_to_pass))
        if both:
            raise ValueError(f"in both fail_to_pass and pass_to_pass: {', '.join(both)}")
        return self


class TestDefaults(TestSpec):
    """A suite's ``defaults.tests``: a :class:`TestSpec` whose ``command`` may be left out.

    With a command it gives every environment of the suite that declares no tests of its own
    a tests probe (:meth:`spec`). Without one it gives none: its keys (``strength``, ``leaks``,
    ``adversarial``, ``reruns``, ...) fill, key by key, the tests an environment declares and
    those a dataset's tasks get."""

    __test__: ClassVar[bool] = False
    command: str | None = Field(None, description=(  # type: ignore[assignment]
        "as an environment's tests.command; unset, the suite's environments get no tests "
        "probe from the defaults, whose other keys apply to the tests they declare (and to "
        "every task of a dataset in the suite)"))
    # The spec an environment without tests of its own gets: built once, shared by them all.
    _spec: TestSpec | None = PrivateAttr(None)

    def model_post_init(self, context: Any, /) -> None:
        if self.command is not None:
            self._spec = TestSpec.model_validate(
                {name: getattr(self, name) for name in self.model_fields_set})

    def spec(self) -> TestSpec | None:
        """The tests of an environment that declares none: these, if they name a command."""
        return self._spec
