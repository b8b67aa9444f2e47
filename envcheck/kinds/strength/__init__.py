"""Verifier strength: wrong fixes and wrong outputs a verifier must refuse.

Pure logic, no sandbox: mutants of the lines a gold patch adds, as candidate patches
(:func:`patch_mutants`); the gold patch with a hunk or a file left out
(:func:`partial_patches`); mutants of the files a script oracle wrote
(:func:`output_mutants`). Each is sampled under a cap, families in turn, seeded by a string
the caller derives from the task's identity, so one identity always plays the same set.
"""

from __future__ import annotations

from envcheck.kinds.strength.diffs import PatchError
from envcheck.kinds.strength.gold import DEFAULT_CAP, patch_mutants
from envcheck.kinds.strength.model import (
    Family,
    Mutant,
    Operator,
    OutputMutant,
    PartialPatch,
    Skipped,
)
from envcheck.kinds.strength.outputs import output_mutants
from envcheck.kinds.strength.partial import DEFAULT_PARTIAL_CAP, partial_patches
from envcheck.kinds.strength.sampling import Generation, Rejection

__all__ = ["DEFAULT_CAP", "DEFAULT_PARTIAL_CAP", "Family", "Generation", "Mutant", "Operator",
           "OutputMutant", "PartialPatch", "PatchError", "Rejection", "Skipped",
           "output_mutants", "partial_patches", "patch_mutants"]
