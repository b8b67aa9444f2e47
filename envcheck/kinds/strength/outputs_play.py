"""The wrong-output controls of a script oracle: its files read back in one container, the
sample made of them, each mutant played within probe_s (pure but for the target's runs).

A **target** is the protocol the oracle runs in: a Harbor task (``solve.sh``, then
``tests/test.sh`` and its reward: :mod:`.harbor`) or a catalogue tests spec whose oracle is a
script (``oracle.path`` / ``oracle.script``, then the tests: :mod:`.scripted`). Its first run
is the oracle's, as the positive control plays it, with the files it wrote read back after
it (and the verifier after that: the run must still be rewarded, or nothing is played); the
Python files among them the image had are read once more in a container of the image. Each
mutant then gets a fresh container: the oracle, the mutant written over its file, the
verifier. The outcome has the shape of the wrong-fix controls' (:mod:`.verdict`), so the
score, the survivors, ``weak_verifier``, reuse and the time budget work the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from envcheck.catalogue.probe_specs import Strength
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.harbor import HarborOutputs
from envcheck.kinds.strength.model import OutputMutant
from envcheck.kinds.strength.outputs import output_mutants
from envcheck.kinds.strength.play import Trial
from envcheck.kinds.strength.sampling import Generation
from envcheck.kinds.strength.scripted import ScriptedOutputs
from envcheck.kinds.strength.verdict import (
    OUTPUTS,
    RULES,
    Outcome,
    Played,
    StrengthOutcome,
    Survivor,
)
from envcheck.kinds.strength.written import Discovery, Owner, Written, read_originals
from envcheck.sandbox.base import Deadline, Sandbox

__all__ = ["OutputTarget", "output_target", "play_outputs"]

NO_SOLUTION = ("no solution/solve.sh: no oracle wrote an output for the wrong-output "
               "controls to change")
NO_ORACLE = "no oracle: neither a gold patch to mutate nor an oracle's output to change"


class OutputTarget(Protocol):
    @property
    def reader(self) -> str | None:
        """The user the oracle's files are read as."""
        ...

    def discover(self) -> Discovery: ...

    def pristine(self) -> AbstractContextManager[Sandbox]:
        """A container of the image as the oracle's runs start from, nothing run in it."""
        ...

    def trial(self, mutant: OutputMutant, owner: Owner, label: str) -> Trial: ...


def output_target(ctx: ProbeContext) -> OutputTarget | str | None:
    """What the environment's oracle writes to, if it is a script (Harbor's ``solve.sh``, a
    catalogue ``oracle.path`` or ``oracle.script``); None: a patch oracle (the wrong-fix
    controls); a string: why neither applies."""
    if ctx.env.harbor is not None:
        return HarborOutputs(ctx, ctx.env.harbor) if ctx.env.harbor.solution_hash else NO_SOLUTION
    spec = ctx.env.tests
    if spec is None or spec.oracle is None:
        return NO_ORACLE
    return None if spec.oracle.patch is not None else ScriptedOutputs(ctx, spec)


def _generated(gen: Generation[OutputMutant], seed: str, plan: Strength,
               written: Written) -> dict[str, Any]:
    rejected: Counter[str] = Counter()
    for (op, why), n in gen.rejected.items():
        rejected[f"{op}: {why}"] += n
    # partial: the plan's, so the stored sample matches (a script oracle has no hunks)
    return {"seed": seed, "cap": plan.mutants, "partial": plan.partial, "of": OUTPUTS,
            "rules": RULES, "mutants": len(gen.mutants),
            "sites": {str(k): v for k, v in gen.sites.items()},
            "tried": {str(k): v for k, v in gen.tried.items()}, "rejected": dict(rejected),
            **written.summary(),
            "skipped": [{"file": f"/{s.file}", "why": s.why} for s in gen.skipped]}


def play_outputs(ctx: ProbeContext, target: OutputTarget, plan: Strength,
                 seed: str) -> StrengthOutcome:
    """Read the oracle's files back, generate the sample, play it within probe_s."""
    started = time.monotonic()
    deadline = Deadline(ctx.env.timeouts.probe_s)
    outcome = StrengthOutcome(generated={"seed": seed, "of": OUTPUTS})
    found = target.discover()
    written = found.written
    outcome.runs += found.runs
    outcome.evidence = found.evidence
    if written.why is None and not written.files:
        left = ", ".join(f"{n} {why}" for why, n in sorted(written.left_out.items()))
        written.why = ("the oracle changed no file the wrong-output controls could change"
                       + (f" (left out: {left})" if left else ""))
    if written.why is None and written.wanted():  # the image had them: what it held
        with target.pristine() as sandbox:
            read_originals(sandbox, written, target.reader, ctx.env.timeouts.exec_s)
        outcome.runs += 1
    if written.why is not None:
        outcome.not_played = written.why
        outcome.generated = {"seed": seed, "of": OUTPUTS, **written.summary()}
        outcome.seconds = time.monotonic() - started
        return outcome
    # paths from the root, as git writes them: the diffs read a/app/out.csv, not a//app/...
    gen = output_mutants({p.lstrip("/"): data for p, data in written.files.items()}, seed,
                         cap=plan.mutants, originals={p.lstrip("/"): data for p, data
                                                      in written.originals.items()})
    outcome.generated = _generated(gen, seed, plan, written)
    if not gen.mutants:
        outcome.not_played = ("no mutant could be made of the files the oracle wrote ("
                              + ", ".join(sorted(written.files)) + ")")
    for i, relative in enumerate(gen.mutants):
        if deadline.expired():
            outcome.unplayed = [m.description for m in gen.mutants[i:]]
            break
        mutant = replace(relative, file=f"/{relative.file}")
        done = target.trial(mutant, written.owners[mutant.file],
                            f"wrong output {i + 1}: {mutant.file}: {mutant.description}")
        outcome.runs += done.runs
        # a wrong output differs from the oracle's by construction: a survivor is confirmed
        confirmed = done.outcome is Outcome.SURVIVED
        outcome.mutants.append(Played(
            mutant.description, done.outcome, done.detail, mutant.file, mutant.line,
            str(mutant.operator), mutant.diff, done.evidence,
            survivor=Survivor.CONFIRMED if confirmed else None,
            why="the file differs from the one the oracle wrote" if confirmed else ""))
    outcome.seconds = time.monotonic() - started
    return outcome
