"""Wrong outputs of a catalogue tests spec whose oracle is a script (``oracle.path``,
``oracle.script``): the oracle, one of its files changed, then the tests.

Each run is a positive run of the spec (:func:`~envcheck.kinds.testvalidity.runs.execute`:
a fresh container, the oracle as the sandbox user, a dataset's test patch after it, the test
command and its report), with one step after the oracle: the first run reads back the files
the oracle wrote (as the sandbox user, their owner) and its fail-to-pass tests must pass; each
mutant is written over its file in every run it gets (:func:`~.play.trial`: fail-to-pass
tests, then pass-to-pass tests if they all passed), with the outcomes of the wrong-fix
controls. A mutant that could not be written proves nothing (incompetent).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.model import OutputMutant
from envcheck.kinds.strength.play import SHOWN, Trial, trial
from envcheck.kinds.strength.verdict import Outcome
from envcheck.kinds.strength.written import Discovery, MutantWrite, Owner, Written, read_written
from envcheck.kinds.testvalidity.runs import Phase, Problem, Run, execute
from envcheck.sandbox.base import Sandbox

__all__ = ["ScriptedOutputs"]


class ScriptedOutputs:
    """The wrong-output controls' runs of one tests spec with a script oracle."""

    def __init__(self, ctx: ProbeContext, spec: TestSpec) -> None:
        self.ctx, self.spec = ctx, spec
        self.reader = ctx.env.user  # the oracle's user: the owner of what it wrote

    def pristine(self) -> AbstractContextManager[Sandbox]:
        return self.ctx.fresh_sandbox()

    def discover(self) -> Discovery:
        found = Discovery()
        env = self.ctx.env

        def read(sandbox: Sandbox) -> Problem | None:
            found.written = read_written(sandbox, env.workdir, self.reader, env.timeouts.exec_s)
            return None

        ids = tuple(self.spec.fail_to_pass) or tuple(self.spec.pass_to_pass)
        run = execute(self.ctx, self.spec, Run(Phase.POSITIVE, ids, "wrong-output controls: "
                                               "the oracle's run"), after_oracle=read)
        found.evidence = (*run.evidence, *found.written.evidence)
        failed = run.not_passed(ids) if run.problem is None else []
        if found.written.why is None and (run.problem is not None or failed):
            why = run.problem.detail if run.problem is not None else f"{failed[0]} failed"
            found.written = Written(why=f"the oracle's run that read its files back did not "
                                    f"pass ({why}): no wrong output can be told from it")
        return found

    def trial(self, mutant: OutputMutant, owner: Owner, label: str) -> Trial:
        write = MutantWrite(mutant, owner)
        done = trial(self.ctx, self.spec, None, label, after_oracle=write)
        if write.why is not None:
            return Trial(Outcome.INCOMPETENT, write.why[:SHOWN], done.runs, done.evidence)
        return done
