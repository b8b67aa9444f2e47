"""A recorded run: a candidate patch's fail-to-pass tests run with envcheck's behaviour
recorder in the sandbox, and what it recorded read back.

Only the wrong-fix controls' own runs carry the recorder; a run that judges a verifier never
does. The task's command is left as it is (a hardened one blocks plugins, ``conftest.py`` and
``PYTHONPATH``): the recorder goes where every interpreter looks at start-up, a ``.pth`` file
in site-packages. Each Python the run may use (on the sandbox user's ``PATH``, named in the
test command, or in the usual places of conda, pyenv and system installs) installs it into
its own site-packages, as root, else as the sandbox user; a ``targets.json`` beside the
module names the functions to record, and the module does nothing without it. Each process
writes its record to ``/tmp/envcheck-record`` at exit, read back after the tests.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from importlib.resources import files

from envcheck.catalogue.probe_specs import Oracle, TestSpec
from envcheck.core.results import CommandEvidence, Reason
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.behaviour import Calls, RecordError, parse_recording
from envcheck.kinds.testvalidity.runs import Phase, Problem, Run, execute
from envcheck.sandbox.base import Sandbox

__all__ = ["RECORDING_MAX", "Recorded", "recorded"]

FOLDER = "/var/tmp/envcheck-record"  # the module, its installer and the targets
OUT = "/tmp/envcheck-record"  # what each process records
RECORDING_MAX = 8 * 1024 * 1024  # bytes of records read back
# distinct events kept per test and function: past them the record is not whole and is not
# compared. A runner that sets no test name per test (sympy's own) puts a whole file's calls
# under one key: 32 was too few for one function called with 120 inputs.
DISTINCT = 256
_INSTALLED = "envcheck:recorder-in:"
_SOURCE = files(__package__).joinpath("recorder")
# where interpreters live besides PATH: system, conda (SWE-bench's images), pyenv, venvs
_PLACES = ("/usr/bin/python3 /usr/local/bin/python3 /opt/*/bin/python3 "
           "/opt/*/envs/*/bin/python3 /root/.pyenv/versions/*/bin/python3 "
           "/usr/local/*/bin/python3 ./.venv/bin/python3 ./venv/bin/python3")
_NAMED = re.compile(r"(/[\w./+-]*/python[0-9.]*)(?![\w.])")


def _archive(config: bytes) -> bytes:
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo("envcheck-record")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        for name, data in (("_envcheck_record.py", _SOURCE.joinpath(
                "_envcheck_record.py").read_bytes()), ("install.py", _SOURCE.joinpath(
                "install.py").read_bytes()), ("targets.json", config)):
            info = tarfile.TarInfo(f"envcheck-record/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _install_script(command: str, workdir: str) -> str:
    named = " ".join(shlex.quote(p) for p in dict.fromkeys(_NAMED.findall(command)))
    return (f"mkdir -p -m 1777 {OUT} 2>/dev/null; chmod 1777 {OUT} 2>/dev/null\n"
            f"cd -- {shlex.quote(workdir)} 2>/dev/null\n"
            f"for py in {named} $(command -v python3 python 2>/dev/null) {_PLACES}; do\n"
            '  [ -x "$py" ] || continue\n'
            f'  "$py" {FOLDER}/install.py {FOLDER}/_envcheck_record.py 2>/dev/null\n'
            "done\n")


@dataclass
class Recorded:
    """What one recorded run gave: the calls per test and function, or why there are
    none; whether every fail-to-pass test passed under the recorder."""

    calls: dict[str, Calls] | None = None
    why: str = ""
    passed: bool = False
    evidence: list[CommandEvidence] = field(default_factory=list)


class _Recorder:
    def __init__(self, ctx: ProbeContext, spec: TestSpec, rows: list[list[object]]) -> None:
        self.ctx, self.spec = ctx, spec
        self.config = json.dumps({"out": OUT, "targets": rows,
                                  "distinct": DISTINCT}).encode()
        self.result = Recorded()

    def install(self, sandbox: Sandbox) -> Problem | None:
        env = self.ctx.env
        sandbox.put_archive("/var/tmp", _archive(self.config))
        script = _install_script(self.spec.command, env.workdir)
        for user in ("0", env.user):
            done = sandbox.exec([env.shell, "-c", script], user=user,
                                timeout_s=env.timeouts.exec_s)
            self.result.evidence.append(done.evidence(f"install the recorder as {user}"))
            if _INSTALLED in done.text:
                return None
        self.result.why = ("the recorder could not be installed: no Python in the sandbox "
                           "could write to its site-packages")
        return Problem(Reason.CHECKER_CRASHED, self.result.why)

    def collect(self, sandbox: Sandbox) -> None:
        env = self.ctx.env
        read = sandbox.exec([env.shell, "-c", f"cat {OUT}/*.json 2>/dev/null; true"],
                            user=env.user, timeout_s=env.timeouts.exec_s,
                            output_limit=2 * (RECORDING_MAX + 1))
        if read.timed_out or read.output.total > RECORDING_MAX:
            self.result.why = f"the recording is larger than {RECORDING_MAX >> 20} MiB"
            return
        try:
            self.result.calls = parse_recording(read.output.head.decode("utf-8", "replace"))
        except RecordError as exc:
            self.result.why = str(exc)


def recorded(ctx: ProbeContext, spec: TestSpec, patch: str, rows: list[list[object]],
             label: str) -> Recorded:
    """``patch`` in the gold patch's place, its fail-to-pass tests run with the recorder
    told to record ``rows`` (``infection.targets``)."""
    recorder = _Recorder(ctx, spec, rows)
    candidate = spec.model_copy(update={"oracle": Oracle(patch=patch)})
    ids = tuple(spec.fail_to_pass)
    run = execute(ctx, candidate, Run(Phase.POSITIVE, ids, f"{label}: fail-to-pass tests, "
                                      "recorded"), after_oracle=recorder.install,
                  after_tests=recorder.collect)
    result = recorder.result
    result.evidence.extend(run.evidence)
    if run.problem is not None and not result.why:
        result.why = f"the recorded run did not complete: {run.problem.detail}"[:200]
    if run.problem is not None:
        result.calls = None
    result.passed = run.problem is None and not run.not_passed(ids)
    return result
