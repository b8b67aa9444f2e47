"""One run of a Harbor task in a fresh container, as Harbor's trial does it.

Mirrored from Harbor 0.26.0 (``harbor/trial/single_step.py``, ``trial/trial.py``,
``agents/oracle.py``, ``agents/nop.py``, ``verifier/verifier.py``,
``environments/docker/docker.py``, ``models/task/file_filter.py``); the spec's ``protocol``
'0.24' keeps Harbor 0.24.0's verifier instead (steps 3a and 3b):

1. The container starts from the task's image with ``/logs/verifier`` and ``/logs/agent``
   empty and world-writable (Harbor bind-mounts fresh host folders there and ``chmod 777``\\s
   them). Commands run through ``bash -c`` in ``[environment].workdir`` (default: the image's
   WORKDIR), with ``[environment].env`` under each command's own variables.
2. **The agent acts.** nop: nothing. **Oracle**: ``solution/`` is copied into ``/solution``
   (merged, as ``docker cp SRC/.`` does; files owned by root, modes kept; through its
   ``.harborignore`` rules, :mod:`envcheck.catalogue.harbor_files`), then, as ``[agent].user``
   (default: the image's USER), ``solve.sh`` made executable (Harbor: ``chmod +x`` as root),
   then ``/solution/solve.sh > /logs/agent/oracle.txt 2>&1`` with
   ``DEBIAN_FRONTEND=noninteractive`` and ``[solution].env``, bounded by the agent timeout. A
   non-zero exit is recorded, and the verifier runs anyway, as in Harbor. (An adversarial
   trick, or a wrong-output control's write, acts here instead.)
3. **Verifier**: (a) as root, ``rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json``:
   a reward file written before the verifier is never read (Harbor 0.25.0 on; a failure is
   Harbor's error, so no reward); (b) ``tests/`` is copied into ``/tests`` the same way,
   through its ``.harborignore`` rules (0.25.0 on; 0.24.0 copies everything), ``test.sh`` made
   executable (Harbor: ``chmod +x`` as root); then, as ``[verifier].user`` (default: the
   image's USER), ``/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1`` with
   ``[verifier].env``, bounded by the verifier timeout. The reward files are read back in the
   same command (:mod:`.reward`); the exit code of ``test.sh`` is evidence only.

``${VAR}`` and ``${VAR:-default}`` in the env tables are resolved from envcheck's own
environment, as Harbor resolves them from the host's; a variable that is unset and has no
default is a deployment problem (``secret_unavailable``), never the task's.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from envcheck.catalogue.harbor_files import TaskInputError, select_inputs
from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.core.errors import SecretUnavailable
from envcheck.core.results import CommandEvidence, Reason
from envcheck.kinds.startup import READY, command_start_failure
from envcheck.kinds.testvalidity.reward import (
    MAX_REWARD_BYTES,
    REWARD_DIR,
    RewardFile,
    RewardReading,
    read_reward,
)
from envcheck.kinds.testvalidity.runs import Problem
from envcheck.sandbox.base import ENGINE_DEFAULT_CAPABILITIES, ExecResult, Sandbox, SandboxSpec

__all__ = ["HarborRun", "Phase", "harbor_sandbox", "resolve_env", "run_once", "tar_folder"]

Phase = Literal["nop", "oracle"]
ROOT = "0"
TAIL_BYTES = 16 * 1024
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_REWARD_LINE = re.compile(rb"envcheck:reward (reward\.json|reward\.txt) (\d*)\n")
_PREPARE = f"""rm -rf /logs/verifier /logs/agent 2>/dev/null
mkdir -p /logs/verifier /logs/agent /logs/artifacts "$@" || exit 3
chmod 777 /logs/verifier /logs/agent || exit 3
[ -z "$(ls -A /logs/verifier)" ] || {{ echo envcheck:stale-logs; exit 4; }}
echo {READY}
"""
# Before tests/ is copied in, as root. Harbor 0.25.0 on removes the reward files first
# (``Verifier._remove_reward_files``, ``"$@"`` here); ``docker cp`` makes /tests if it is absent.
_BEFORE_TESTS = f"""[ $# -eq 0 ] || rm -f -- "$@" || {{ echo envcheck:rewards-kept; exit 5; }}
mkdir -p /tests || exit 6
echo {READY}
"""
_STALE_REWARDS = (f"{REWARD_DIR}/reward.txt", f"{REWARD_DIR}/reward.json")
# Harbor's ``docker exec -w [environment].workdir`` (unset: the image's WORKDIR), as "$1".
_IN_COMMAND_DIR = """[ -z "$1" ] || cd -- "$1" || { echo "envcheck: no $1 to run in" >&2; exit 1; }
"""
_SOLVE = _IN_COMMAND_DIR + ("{ /solution/solve.sh > /logs/agent/oracle.txt 2>&1; }"
          f"\nrc=$?\ntail -c {TAIL_BYTES} /logs/agent/oracle.txt 2>/dev/null\nexit $rc\n")
# The shell's own complaint (a log folder the agent made read-only) must not come before the
# reward frames: the frames are read from the start of the output.
_VERIFY = _IN_COMMAND_DIR + f"""\
{{ /tests/test.sh > {REWARD_DIR}/test-stdout.txt 2>&1; }} 2>/dev/null
rc=$?
for f in reward.json reward.txt; do
  p={REWARD_DIR}/$f
  if [ -f "$p" ]; then
    printf 'envcheck:reward %s %s\\n' "$f" "$(wc -c < "$p")"
    head -c {MAX_REWARD_BYTES} -- "$p"; printf '\\n'
  elif [ -e "$p" ]; then  # there, not a file (a folder): Harbor fails to read it, no fallback
    printf 'envcheck:reward %s \\n\\n' "$f"
  fi
done
printf 'envcheck:verifier-exit %s\\n' "$rc"
tail -c {TAIL_BYTES} {REWARD_DIR}/test-stdout.txt 2>/dev/null
exit $rc
"""
# Room for both reward files whole in the kept head of the output, then the log's tail.
_VERIFY_LIMIT = 4 * (MAX_REWARD_BYTES + 64) + 2 * TAIL_BYTES


@dataclass
class HarborRun:
    phase: Phase
    label: str
    reward: RewardReading | None = None
    problem: Problem | None = None
    solve_exit: int | None = None
    verifier_exit: int | None = None
    evidence: list[CommandEvidence] = field(default_factory=list)
    start_s: float = 0.0
    duration_s: float = 0.0


def resolve_env(values: dict[str, str], table: str) -> dict[str, str]:
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is None and default is None:
            raise SecretUnavailable(f"{table}: ${{{name}}} is not set in envcheck's "
                                    "environment and has no default")
        return found if found is not None else default
    return {key: _VAR.sub(one, value) for key, value in values.items()}


def tar_folder(folder: Path, executable: str | None = None,
               entries: tuple[str, ...] | None = None) -> bytes:
    """The folder's entries (not the folder itself, so the target keeps its own mode), or
    only ``entries`` (relative paths), with ``executable`` made executable as ``chmod +x`` by
    root would."""
    buf = io.BytesIO()
    paths = sorted(folder.rglob("*")) if entries is None else [folder / e for e in entries]
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in paths:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.name == executable:
                info.mode |= 0o111
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _frames(data: bytes) -> tuple[RewardFile | None, RewardFile | None]:
    """The reward files framed at the start of the verifier command's output. Frames are read
    one after the other, by their sizes, and reading stops at the first line that is not a
    frame: a line in the verifier's log (which may echo what the agent wrote) never counts."""
    found: dict[str, RewardFile] = {}
    pos = 0
    while (match := _REWARD_LINE.match(data, pos)) is not None:
        name, size = match.group(1).decode(), match.group(2)
        total = int(size) if size else 0
        kept = min(total, MAX_REWARD_BYTES)
        found.setdefault(name, RewardFile(name, total, data[match.end():match.end() + kept]))
        pos = match.end() + kept + 1  # the newline printed after each file
    return found.get("reward.json"), found.get("reward.txt")


def _user_missing(result: ExecResult, user: str | None, key: str) -> Problem | None:
    """USER_MISSING when the engine could not run the command as the task's user."""
    found = command_start_failure(result, user, "bash")
    if found is None or found[0] is not Reason.USER_MISSING:
        return None
    return Problem(Reason.USER_MISSING, f"task.toml {key} {user!r} does not exist in the image")


class _Runner:
    def __init__(self, sandbox: Sandbox, spec: HarborVerifierSpec, run: HarborRun) -> None:
        self.sandbox, self.spec, self.run = sandbox, spec, run

    def bash(self, script: str, label: str | None, *, user: str | None, timeout_s: float,
             env: dict[str, str] | None = None, limit: int = 64 * 1024,
             args: tuple[str, ...] = ()) -> ExecResult:
        result = self.sandbox.exec(["bash", "-c", script, "envcheck", *args], user=user, env=env,
                                   timeout_s=timeout_s, output_limit=limit)
        if label is not None:
            self.run.evidence.append(result.evidence(label))
        return result

    def prepare(self, timeout_s: float) -> Problem | None:
        extra = ("/solution",) if self.run.phase == "oracle" else ()
        result = self.bash(_PREPARE, None, user=ROOT, timeout_s=timeout_s, args=extra)
        start = command_start_failure(result, "root", "bash")
        problem = Problem(*start) if start is not None else None
        if problem is None and "envcheck:stale-logs" in result.text:
            problem = Problem(Reason.REWARD_MALFORMED, "/logs/verifier in the image cannot be "
                              "emptied: no reward read there could be trusted")
        if problem is None and (result.timed_out or READY not in result.text):
            problem = Problem(Reason.LOGIN_SHELL_BROKEN, "bash -c did not prepare /logs and "
                              f"/tests (exit {result.exit_code})")
        if problem is not None:
            self.run.evidence.append(result.evidence("prepare /logs and /tests"))
        return problem

    def inputs(self, folder: str, script: str) -> bytes:
        """``folder`` of the task as Harbor copies it (raises TaskInputError)."""
        task = Path(self.spec.task_dir)
        entries = select_inputs(task, folder, script, ignore_rules=self.spec.ignore_rules)
        return tar_folder(task / folder, script, entries)

    def solve(self) -> Problem | None:
        spec = self.spec
        try:
            solution = self.inputs("solution", "solve.sh")
        except TaskInputError as exc:  # the folder changed since load: Harbor's oracle fails
            return Problem(Reason.ORACLE_FAILED, f"Harbor would not copy solution/: {exc}")
        self.sandbox.put_archive("/solution", solution)
        env = {**resolve_env(spec.task_env, "task.toml [environment].env"),
               "DEBIAN_FRONTEND": "noninteractive",
               **resolve_env(spec.solution_env, "task.toml [solution].env")}
        result = self.bash(_SOLVE, "oracle: /solution/solve.sh", user=spec.agent_user,
                           timeout_s=spec.agent_timeout_s, env=env,
                           args=(spec.command_dir or "",))
        if result.timed_out:
            return Problem(Reason.TIMEOUT, f"solve.sh ran past the agent timeout of "
                                           f"{spec.agent_timeout_s:g}s and was killed")
        self.run.solve_exit = result.exit_code
        return _user_missing(result, spec.agent_user, "[agent].user")

    def before_tests(self, timeout_s: float) -> Problem | None:
        """Step 3a, as root: the reward files removed (Harbor 0.25.0 on), /tests made."""
        stale = _STALE_REWARDS if self.spec.removes_stale_rewards else ()
        result = self.bash(_BEFORE_TESTS, None, user=ROOT, timeout_s=timeout_s, args=stale)
        if READY in result.text and not result.timed_out:
            return None
        self.run.evidence.append(result.evidence("verifier: before tests/ is copied in"))
        if "envcheck:rewards-kept" in result.text:
            what = "the reward files could not be removed"
        else:
            what = f"/tests could not be made (exit {result.exit_code})"
        return Problem(Reason.REWARD_MISSING, f"{what} before the verifier ran: Harbor stops "
                       "there, with no reward")

    def verify(self) -> Problem | None:
        spec = self.spec
        try:
            tests = self.inputs("tests", "test.sh")
        except TaskInputError as exc:  # the folder changed since load: Harbor refuses it
            return Problem(Reason.REWARD_MISSING, f"Harbor would not copy tests/: {exc}")
        self.sandbox.put_archive("/tests", tests)
        env = {**resolve_env(spec.task_env, "task.toml [environment].env"),
               **resolve_env(spec.verifier_env, "task.toml [verifier].env")}
        result = self.bash(_VERIFY, "verifier: /tests/test.sh", user=spec.verifier_user,
                           timeout_s=spec.verifier_timeout_s, env=env or None,
                           limit=_VERIFY_LIMIT, args=(spec.command_dir or "",))
        if result.timed_out:
            return Problem(Reason.TIMEOUT, f"test.sh ran past the verifier timeout of "
                                           f"{spec.verifier_timeout_s:g}s and was killed")
        self.run.verifier_exit = result.exit_code
        missing = _user_missing(result, spec.verifier_user, "[verifier].user")
        if missing is not None:
            return missing
        reading = read_reward(*_frames(result.output.head))
        self.run.reward = reading
        if reading.value is None:
            assert reading.reason is not None
            return Problem(reading.reason, f"{reading.detail} (test.sh exited "
                                           f"{result.exit_code})")
        return None


def harbor_sandbox(base: SandboxSpec, spec: HarborVerifierSpec, image: str) -> SandboxSpec:
    """The container a run of the task gets: its image and network, and Docker's default
    capabilities, which Harbor leaves on. Without them a root ``test.sh`` could not overwrite
    a reward file its agent made read-only, and envcheck would call a hole what Harbor refuses
    (or fail a ``chown`` that passes there)."""
    return dataclasses.replace(base, image=image, network=spec.network,
                               capabilities=ENGINE_DEFAULT_CAPABILITIES)


def run_once(sandbox: Sandbox, spec: HarborVerifierSpec, run: HarborRun,
             prepare_timeout_s: float,
             action: Callable[[Sandbox], CommandEvidence] | None = None,
             after_solve: Callable[[Sandbox], Problem | None] | None = None) -> HarborRun:
    """Do ``run`` in ``sandbox`` (fresh, the caller removes it) and fill in what it showed.
    ``action``, if given, is the agent's only action (an adversarial control's trick): it runs
    after the preparation, before the verifier's files are copied in. ``after_solve``, if
    given, runs between the oracle and the verifier (a wrong-output control's write); a
    problem it returns ends the run there."""
    started = time.monotonic()
    run.start_s = sandbox.start_duration_s
    runner = _Runner(sandbox, spec, run)
    run.problem = runner.prepare(prepare_timeout_s)
    if run.problem is None and action is not None:
        run.evidence.append(action(sandbox))
    if run.problem is None and run.phase == "oracle":
        run.problem = runner.solve()
    if run.problem is None and after_solve is not None:
        run.problem = after_solve(sandbox)
    if run.problem is None:
        run.problem = runner.before_tests(prepare_timeout_s)
    if run.problem is None:
        run.problem = runner.verify()
    run.duration_s = time.monotonic() - started
    return run

