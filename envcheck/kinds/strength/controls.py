"""The wrong-fix controls of one tests probe: which apply, the sample, the runs, reuse.

They run when the environment declares ``strength:``, its oracle is a patch (a dataset
task's gold patch, a catalogue ``oracle.patch``) and the probe's own verdict is a pass (a
broken task is broken already). The sample is seeded by the image digest and the spec hash,
so every probe of one identity plays the same mutants; the outcome can only change with
either, so a whole one is reused while both hold, through the ledger the adversarial
controls use (locally the store; on a Ray node what the caller sent). They get a
``timeouts.probe_s`` budget of their own; what it leaves unplayed is listed, and such an
outcome is never reused. Their runs are part of the probe's duration: the sandbox-seconds
the scheduler's budget charges.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from envcheck.catalogue.probe_specs import Strength, TestSpec
from envcheck.core.results import ProbeKind, Status
from envcheck.kinds.adversarial.ledger import ControlsLedger
from envcheck.kinds.base import ProbeContext, Verdict
from envcheck.kinds.strength.diffs import PatchError, parse_patch
from envcheck.kinds.strength.gold import patch_mutants
from envcheck.kinds.strength.model import Mutant, PartialPatch, Skipped
from envcheck.kinds.strength.outputs_play import output_target, play_outputs
from envcheck.kinds.strength.partial import partial_patches
from envcheck.kinds.strength.play import mutable_files, post_images, readable, trial
from envcheck.kinds.strength.sampling import Generation
from envcheck.kinds.strength.survivors import Classified, classify
from envcheck.kinds.strength.uncovered import uncovered_by, uncovered_parts
from envcheck.kinds.strength.verdict import (
    DETAIL_KEY,
    OUTPUTS,
    PATCH,
    RULES,
    Outcome,
    Played,
    StrengthOutcome,
    Survivor,
    judge,
    stored_outcome,
)
from envcheck.sandbox.base import Deadline

__all__ = ["seed_of", "with_strength_controls"]


def seed_of(ctx: ProbeContext) -> str:
    """What the sample is seeded by: the image digest (else its name) and the spec hash."""
    return f"{ctx.image_digest or ctx.env.image}|{ctx.env.spec_hash(ProbeKind.TESTS)}"


def _generated(gen: Generation[Mutant], seed: str, plan: Strength,
               read: tuple[Skipped, ...]) -> dict[str, object]:
    rejected: Counter[str] = Counter()
    for (op, why), n in gen.rejected.items():
        rejected[f"{op}: {why}"] += n
    # a file read back but not handed on: why it was not (not "its post-image was not given")
    unread = {s.file for s in read}
    skipped = [*read, *(s for s in gen.skipped if s.file not in unread)]
    return {"seed": seed, "cap": plan.mutants, "partial": plan.partial, "of": PATCH,
            "rules": RULES, "mutants": len(gen.mutants),
            "sites": {str(k): v for k, v in gen.sites.items()},
            "tried": {str(k): v for k, v in gen.tried.items()}, "rejected": dict(rejected),
            "skipped": [{"file": s.file, "why": s.why} for s in skipped],
            "notes": list(gen.notes)}


def play(ctx: ProbeContext, spec: TestSpec, plan: Strength, seed: str) -> StrengthOutcome:
    """Read the gold patch's files back, generate the sample, play it within probe_s."""
    started = time.monotonic()
    deadline = Deadline(ctx.env.timeouts.probe_s)
    outcome = StrengthOutcome(generated={"seed": seed, "of": PATCH})
    assert spec.oracle is not None and spec.oracle.patch is not None
    gold = spec.oracle.patch
    try:
        files = mutable_files(gold)
    except PatchError as exc:
        outcome.not_played = readable(exc)
        return outcome
    images = post_images(ctx, spec, files)
    outcome.runs += 1
    outcome.evidence = images.evidence
    if images.why is not None:
        outcome.not_played = images.why
        outcome.seconds = time.monotonic() - started
        return outcome
    try:
        gen = patch_mutants(gold, images.texts, seed, cap=plan.mutants,
                            test_patch=spec.test_patch)
        partials = partial_patches(gold, seed, post_images=images.texts) if plan.partial else ()
    except PatchError as exc:
        outcome.not_played = readable(exc)
        return outcome
    outcome.generated = _generated(gen, seed, plan, images.skipped)
    if not gen.mutants and not partials:
        outcome.not_played = ("no mutant could be made of the gold patch's added lines (no "
                              "Python line to mutate) and no partial patch")
    todo: list[Mutant | PartialPatch] = [*gen.mutants, *partials]
    survivors: list[tuple[Played, Mutant]] = []
    rewarded: list[PartialPatch] = []
    for i, control in enumerate(todo):
        if deadline.expired():
            outcome.unplayed = [c.description for c in todo[i:]]
            break
        mutant = control if isinstance(control, Mutant) else None
        kind = "mutant" if mutant is not None else "partial patch"
        done = trial(ctx, spec, control.patch, f"{kind} {i + 1}: {control.description}")
        outcome.runs += done.runs
        played = Played(control.description, done.outcome, done.detail, control.file,
                        mutant.line if mutant else None, str(mutant.operator) if mutant
                        else None, mutant.diff if mutant else "", done.evidence)
        (outcome.mutants if mutant is not None else outcome.partials).append(played)
        if done.outcome is Outcome.SURVIVED:
            if mutant is not None:
                survivors.append((played, mutant))
            elif isinstance(control, PartialPatch):
                rewarded.append(control)
    if survivors:
        _classified(ctx, spec, outcome, survivors, images.texts, deadline, rewarded)
    outcome.seconds = time.monotonic() - started
    return outcome


def _classified(ctx: ProbeContext, spec: TestSpec, outcome: StrengthOutcome,
                survivors: list[tuple[Played, Mutant]], texts: dict[str, str],
                deadline: Deadline, rewarded: list[PartialPatch]) -> None:
    """The survivors in ``outcome`` replaced by themselves classified: those in a part of the
    fix a rewarded partial patch left out (:mod:`.uncovered`) apart, the others by infection
    (:mod:`.survivors`)."""
    assert spec.oracle is not None and spec.oracle.patch is not None
    gold = parse_patch(spec.oracle.patch)
    parts = uncovered_parts(gold, rewarded, texts)
    classes: dict[int, Played] = {}
    recorded: list[tuple[Played, Mutant]] = []
    for played, mutant in survivors:
        left_out = uncovered_by(mutant.file, mutant.diff, parts, mutant.fix_lines)
        if left_out is None:
            recorded.append((played, mutant))
        else:
            classes[id(played)] = replace(played, survivor=Survivor.UNCOVERED, why=(
                f"in a part of the fix the tests pass without: {left_out} is rewarded"))
    done = classify(ctx, spec, gold, texts, recorded, deadline) if recorded else Classified([])
    classes.update({id(played): found for (played, _), found in zip(recorded, done.survivors,
                                                                     strict=True)})
    outcome.mutants = [classes.get(id(m), m) for m in outcome.mutants]
    outcome.runs += done.runs
    outcome.cut_short = done.cut_short


def with_strength_controls(ctx: ProbeContext, verdict: Verdict) -> Verdict:
    """``verdict`` with the wrong-fix controls' outcome, if the environment declares them:
    the stored outcome for this image digest and spec if there is a whole one, else played."""
    plan = ctx.env.strength()
    spec = ctx.env.tests
    if plan is None or verdict.status is not Status.PASS:
        return verdict
    target = output_target(ctx)  # a script oracle: its outputs are what is changed
    if isinstance(target, str):  # a Harbor task without solve.sh has outputs, none written
        of = OUTPUTS if ctx.env.harbor is not None else PATCH
        return judge(verdict, StrengthOutcome(not_played=target, generated={"of": of}), plan)
    seed = seed_of(ctx)
    ledger = ctx.service(ControlsLedger)
    prior = ledger.prior(ctx.env.id, ctx.image_digest, ctx.env.spec_hash(ProbeKind.TESTS),
                         key=DETAIL_KEY) if ledger is not None else None
    stored = stored_outcome(prior[1], seed, plan.mutants, plan.partial) \
        if prior is not None else None
    if prior is not None and stored is not None:
        return judge(verdict, stored, plan, reused={"from": prior[0].isoformat()})
    if target is not None:
        return judge(verdict, play_outputs(ctx, target, plan, seed), plan)
    assert spec is not None
    return judge(verdict, play(ctx, spec, plan, seed), plan)
