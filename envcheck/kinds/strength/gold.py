"""Wrong fixes for a patch oracle: mutants of the Python lines a gold patch adds, each a
candidate patch against the base.

The caller hands in the gold patch and each changed file as it reads after the patch (the
post-image, taken from a container where the patch was applied). Each hunk is placed where it
sits in the post-image (:mod:`.placing`: where ``git apply`` or ``patch`` put it, an offset from
its header's line, or context left off under fuzz), and its lines are mutated there; a hunk
found nowhere is not mutated, and the notes say so. The base text of a file is rebuilt from its
post-image and the placed hunks (or handed in), so the candidate is one diff from the base to
the mutant, in the gold patch's place: the same apply path takes it, and its own hunks' lines
are the image's (it applies with no offset).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from envcheck.kinds.strength.diffs import (
    FilePatch,
    Patch,
    PatchError,
    parse_patch,
    unified_section,
)
from envcheck.kinds.strength.model import Mutant, Operator, Skipped
from envcheck.kinds.strength.newcase import new_case_variants
from envcheck.kinds.strength.paths import is_doc_path, is_test_path
from envcheck.kinds.strength.placing import place
from envcheck.kinds.strength.pysource import PythonSource
from envcheck.kinds.strength.reverts import revert_variants
from envcheck.kinds.strength.sampling import Generation, Rejection, Variant, take
from envcheck.kinds.strength.tested import tested_variants
from envcheck.kinds.strength.testinputs import test_literals

__all__ = ["DEFAULT_CAP", "patch_mutants"]

DEFAULT_CAP = 24


class _File:
    def __init__(self, written: FilePatch, fp: FilePatch, source: PythonSource,
                 base: str) -> None:
        self.written = written  # the section as the gold patch has it
        self.fp = fp  # its hunks found in the post-image, numbered where they sit
        self.source = source
        self.base = base


def _prepare(patch: Patch, post_images: Mapping[str, str], base_images: Mapping[str, str]
             ) -> tuple[dict[str, _File], list[Skipped], list[str]]:
    files: dict[str, _File] = {}
    skipped: list[Skipped] = []
    notes: list[str] = []
    for fp in patch.files:
        path = fp.new_path
        if path is None or fp.binary or not path.endswith(".py") or not fp.hunks:
            continue  # deleted, binary, not Python, or only renamed: no added line
        if is_test_path(path) or is_doc_path(path):
            skipped.append(Skipped(path, "a test file" if is_test_path(path) else
                                   "documentation"))
            continue
        text = post_images.get(path)
        if text is None:
            skipped.append(Skipped(path, "its post-image was not given"))
            continue
        placed = place(fp, text)
        notes.extend(placed.notes())
        if placed.missing and path not in base_images:
            # without the hunk's place the file before the patch cannot be rebuilt, and a
            # candidate made from it would leave that hunk's change out as well
            skipped.append(Skipped(path, "hunk(s) " + ", ".join(map(str, placed.missing))
                                   + " of the gold patch not in the post-image: the file "
                                   "before the patch cannot be rebuilt"))
            continue
        try:
            source = PythonSource(path, text)
            base = base_images[path] if path in base_images else placed.preimage()
        except cst.ParserSyntaxError as exc:
            skipped.append(Skipped(path, f"not Python 3: line {exc.raw_line}: {exc.message}"))
            continue
        except PatchError as exc:
            skipped.append(Skipped(path, f"the post-image does not match the patch: {exc}"))
            continue
        files[path] = _File(fp, placed.fp, source, base)
    return files, skipped, notes


def patch_mutants(gold: str, post_images: Mapping[str, str], seed: str,
                  cap: int | None = DEFAULT_CAP,
                  base_images: Mapping[str, str] | None = None,
                  test_patch: str | None = None) -> Generation[Mutant]:
    """Up to ``cap`` mutants (None: every one) of the non-test Python files ``gold``
    changes, on the lines it adds, sampled by ``seed``. ``post_images`` maps a path (as the
    patch names it after the change) to its text after the patch; ``base_images``, if
    given, to its text before; ``test_patch``, the task's test patch, whose literals the fix
    kept only for the tested input uses (none without it: said in the notes).
    :class:`~envcheck.kinds.strength.diffs.PatchError` if ``gold`` is not a unified diff."""
    patch = parse_patch(gold)
    files, skipped, notes = _prepare(patch, post_images, base_images or {})
    literals = test_literals(test_patch)
    notes += [] if literals else [
        f"no {Operator.TESTED_INPUT_ONLY} mutant: " + (
            "no test patch to take the tested inputs from" if not test_patch else
            "the test patch's added lines hold no int, string, boolean or None")]
    variants: list[Variant] = []
    for file in files.values():
        variants.extend(file.source.variants(file.fp.added_lines()))
        variants.extend(revert_variants(file.fp, file.source, file.base))
        variants.extend(tested_variants(file.fp, file.source, file.base, literals))
        made, left_out = new_case_variants(file.fp, file.source, file.base)
        variants.extend(made)
        notes.extend(left_out)

    def accept(variant: Variant, text: str) -> Rejection | Mutant:
        file = files[variant.file]
        why = file.source.check(text)
        if why is not None:
            return why
        sections = [unified_section(fp.old_path, fp.new_path, file.base, text, fp.header)
                    if fp is file.written else fp.raw for fp in patch.files]
        if not any(s.strip() for s in sections):
            return Rejection.SAME_AS_BASE
        diff = unified_section(variant.file, variant.file, file.source.text, text)
        return Mutant(variant.operator, variant.file, variant.line, variant.description, diff,
                      patch.render(sections), text, variant.fix_lines)

    return take(variants, seed, cap, accept, skipped, notes)
