"""Wrong outputs in Harbor's protocol: ``solve.sh``, one of its files changed, ``test.sh``.

Each run is the oracle run of the positive control (:func:`~envcheck.kinds.testvalidity.
harbor_run.run_once`: ``/logs`` prepared, ``solution/`` copied in, ``solve.sh`` as the
agent's user) with one step between the oracle and the verifier: the first run reads the
files ``solve.sh`` wrote (as root, Harbor's default user); each later one writes a mutant over
its file. The verifier then runs as ever (``tests/`` copied in, ``test.sh``, the reward read
from ``/logs/verifier/``). A reward below 1 refuses the wrong output (killed); 1 pays for it
(survived); a mutant that could not be written, or a verifier that gave no reward, proves
nothing (incompetent); a verifier past its timeout is a timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from envcheck.catalogue.harbor_spec import HarborVerifierSpec
from envcheck.core.results import Reason
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.model import OutputMutant
from envcheck.kinds.strength.play import SHOWN, Trial
from envcheck.kinds.strength.verdict import Outcome
from envcheck.kinds.strength.written import Discovery, MutantWrite, Owner, Written, read_written
from envcheck.kinds.testvalidity.harbor_run import ROOT, HarborRun, harbor_sandbox, run_once
from envcheck.kinds.testvalidity.runs import Problem
from envcheck.sandbox.base import Sandbox
from envcheck.sandbox.build import BuiltImage

__all__ = ["HarborOutputs"]

_EPS = 1e-9


class HarborOutputs:
    """The wrong-output controls' runs of one Harbor task."""

    def __init__(self, ctx: ProbeContext, spec: HarborVerifierSpec) -> None:
        self.ctx, self.spec = ctx, spec
        built = ctx.service(BuiltImage)
        image = spec.image if built is None else built.tag
        self.image = image or ctx.env.image
        self.reader = ROOT

    def pristine(self) -> AbstractContextManager[Sandbox]:
        return self.ctx.open_sandbox(harbor_sandbox(self.ctx.spec(), self.spec, self.image))

    def _run(self, label: str, step: Callable[[Sandbox], Problem | None]) -> HarborRun:
        ctx = self.ctx
        with self.pristine() as sandbox:
            return run_once(sandbox, self.spec, HarborRun("oracle", label),
                            ctx.env.timeouts.exec_s, after_solve=step)

    def discover(self) -> Discovery:
        found = Discovery()
        exec_s = self.ctx.env.timeouts.exec_s

        def read(sandbox: Sandbox) -> Problem | None:
            found.written = read_written(sandbox, self.ctx.env.workdir, self.reader, exec_s)
            return None

        run = self._run("wrong-output controls: the oracle's run", read)
        found.evidence = (*run.evidence, *found.written.evidence)
        value = None if run.reward is None else run.reward.value
        if found.written.why is None and (run.problem is not None or value is None
                                          or abs(value - 1.0) > _EPS):
            why = run.problem.detail if run.problem is not None else f"reward {value}"
            found.written = Written(why=f"the oracle's run that read its files back was not "
                                    f"rewarded ({why}): no wrong output can be told from it")
        return found

    def trial(self, mutant: OutputMutant, owner: Owner, label: str) -> Trial:
        write = MutantWrite(mutant, owner)
        run = self._run(label, write)
        evidence = tuple(run.evidence)
        if write.why is not None:
            return Trial(Outcome.INCOMPETENT, write.why[:SHOWN], 1, evidence)
        if run.problem is not None:
            outcome = Outcome.TIMEOUT if run.problem.reason is Reason.TIMEOUT \
                else Outcome.INCOMPETENT
            return Trial(outcome, f"{run.problem.reason}: {run.problem.detail}"[:SHOWN], 1,
                         evidence)
        assert run.reward is not None and run.reward.value is not None
        value = run.reward.value
        said = f"reward {value:g} ({run.reward.source}; test.sh exited {run.verifier_exit})"
        if abs(value - 1.0) <= _EPS or value > 1.0:
            return Trial(Outcome.SURVIVED, f"rewarded: {said}"[:SHOWN], 1, evidence)
        return Trial(Outcome.KILLED, f"refused: {said}"[:SHOWN], 1, evidence)
