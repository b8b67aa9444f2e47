"""Survivors classified by infection: each mutant every test let through, told apart from the
gold patch by what the functions the patch changes did while the fail-to-pass tests ran.

The gold patch's fail-to-pass tests run twice with the recorder (:mod:`.recording`), then
each survivor's once; :func:`~envcheck.kinds.strength.behaviour.difference` compares them
on what the two gold runs agree on, in values only (a call count alone is no difference). A
survivor is **confirmed** (``Survivor.CONFIRMED``) when it differs, the difference said in its
``why``; **not distinguished** when it does not (it
behaves as the fix on the tests' inputs: nothing the assertions could refuse); and
**unclassified** when nothing could be recorded (no function of the patch to record, the
recorder not installable, the gold patch's tests failing under it, the functions never
called, the time budget reached), the reason in its ``why``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from envcheck.catalogue.probe_specs import TestSpec
from envcheck.kinds.base import ProbeContext
from envcheck.kinds.strength.behaviour import difference
from envcheck.kinds.strength.diffs import Patch
from envcheck.kinds.strength.infection import changed_functions, targets
from envcheck.kinds.strength.model import Mutant
from envcheck.kinds.strength.placing import place
from envcheck.kinds.strength.played import Played, Survivor
from envcheck.kinds.strength.recording import Recorded, recorded
from envcheck.kinds.strength.reverts import change_blocks
from envcheck.sandbox.base import Deadline

__all__ = ["Classified", "classify", "functions_changed"]

def functions_changed(patch: Patch, texts: Mapping[str, str]) -> dict[str, set[str]]:
    """Per file, the functions around the lines the patch adds (or, where a change block
    only removes, around where the lines were), each hunk where it sits in ``texts``."""
    found: dict[str, set[str]] = {}
    for written in patch.files:
        text = texts.get(written.path)
        if text is None:
            continue
        fp = place(written, text).fp
        lines = set(fp.added_lines())
        lines.update(b.new_start for h in fp.hunks for b in change_blocks(h) if not b.added)
        try:
            names = changed_functions(text, lines)
        except (SyntaxError, ValueError):
            continue
        if names:
            found[fp.path] = names
    return found


@dataclass
class Classified:
    """The survivors with their class, and the container runs it took."""

    survivors: list[Played]
    runs: int = 0
    cut_short: bool = False


def _all(survivors: Sequence[Played], kind: Survivor, why: str) -> list[Played]:
    return [replace(s, survivor=kind, why=why) for s in survivors]


def classify(ctx: ProbeContext, spec: TestSpec, patch: Patch, texts: Mapping[str, str],
             survivors: Sequence[tuple[Played, Mutant]], deadline: Deadline) -> Classified:
    """Each of ``survivors`` (as played, and the mutant it is) with its class; ``texts``: the
    changed files after the gold patch."""
    played = [p for p, _ in survivors]
    wanted = functions_changed(patch, texts)
    rows = targets(texts, wanted)
    if not rows:
        return Classified(_all(played, Survivor.UNCLASSIFIED, "the gold patch changes no "
                                                              "function to record"))
    assert spec.oracle is not None and spec.oracle.patch is not None
    done = Classified([])
    golds: list[Recorded] = []
    for n in (1, 2):
        if deadline.expired():
            return replace(done, survivors=_all(played, Survivor.UNCLASSIFIED, "probe_s "
                           "reached before they were classified"), cut_short=True)
        gold = recorded(ctx, spec, spec.oracle.patch, rows, f"gold patch, recording {n}")
        done.runs += 1
        why = gold.why or (None if gold.passed else "the gold patch's fail-to-pass tests do "
                           "not pass with the recorder in place")
        if why is None and not gold.calls:
            why = ("the fail-to-pass tests never called a function the gold patch changes ("
                   + ", ".join(str(r[3]) for r in rows[:3]) + ")")
        if why is not None:
            return replace(done, survivors=_all(played, Survivor.UNCLASSIFIED, why))
        golds.append(gold)
    first, again = (g.calls or {} for g in golds)
    for survivor, mutant in survivors:
        if deadline.expired():
            done.survivors.append(replace(survivor, survivor=Survivor.UNCLASSIFIED,
                                          why="probe_s reached before it was classified"))
            done.cut_short = True
            continue
        files = {**texts, mutant.file: mutant.text} if mutant.text else dict(texts)
        found = recorded(ctx, spec, mutant.patch, targets(files, wanted),
                         f"survivor: {mutant.description}")
        done.runs += 1
        if found.calls is None:
            done.survivors.append(replace(survivor, survivor=Survivor.UNCLASSIFIED,
                                          why=found.why))
            continue
        differs = difference(first, again, found.calls)
        if differs is not None:
            done.survivors.append(replace(survivor, survivor=Survivor.CONFIRMED, why=differs))
        else:
            calls = sum(c.count for c in first.values())
            done.survivors.append(replace(
                survivor, survivor=Survivor.NOT_DISTINGUISHED,
                why=f"the same behaviour as the gold patch in {calls} recorded call(s) of "
                    f"{len({k.split(chr(9))[1] for k in first})} changed function(s)"))
    return done
