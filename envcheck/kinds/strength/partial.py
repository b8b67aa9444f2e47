"""Partial patches: the gold patch with one hunk, or one file, left out. A verifier that
rewards one of them does not check that part of the fix (or the part was a refactor: they are
reported beside the score, not in it).

Never left out: documentation and changelog files, test files, and, when the file's text
after the patch is known, a Python hunk whose removal leaves the same program (comments,
blank lines, docstrings).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Mapping
from dataclasses import replace

from envcheck.kinds.strength.diffs import FilePatch, Patch, PatchError, parse_patch
from envcheck.kinds.strength.model import PartialPatch
from envcheck.kinds.strength.paths import is_doc_path, is_test_path
from envcheck.kinds.strength.placing import place, preimage
from envcheck.kinds.strength.pysource import without_docstrings
from envcheck.kinds.strength.sampling import seeded

__all__ = ["DEFAULT_PARTIAL_CAP", "partial_patches"]

DEFAULT_PARTIAL_CAP = 8
def _meaning(text: str) -> str | None:
    """What a Python text means (its AST, docstrings out), or None if the host cannot say."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return ast.dump(without_docstrings(tree))


def _placed(fp: FilePatch, post: str | None) -> FilePatch:
    """``fp`` with its hunks where they sit in ``post`` (the file after the patch), so the
    partial patch applies where the gold patch did; as written if a hunk is not found."""
    if post is None:
        return fp
    placed = place(fp, post)
    return fp if placed.missing else placed.fp


def _equivalent(fp: FilePatch, index: int, post: str | None) -> bool:
    """Whether leaving hunk ``index`` out of ``fp`` leaves the same Python program."""
    if post is None or not fp.path.endswith(".py"):
        return False
    try:
        without = preimage(replace(fp, hunks=(fp.hunks[index],)), post)
    except PatchError:
        return False
    full = _meaning(post)
    return full is not None and full == _meaning(without)


def _candidates(patch: Patch, post_images: Mapping[str, str]) -> list[PartialPatch]:
    code = [fp for fp in patch.files
            if fp.hunks and not is_doc_path(fp.path) and not is_test_path(fp.path)]
    if sum(len(fp.hunks) for fp in code) < 2:
        return []  # leaving the one hunk out is the no-op, which the negative control plays
    found: list[PartialPatch] = []
    for written in code:
        post = post_images.get(written.path)
        fp = _placed(written, post)
        if len(fp.hunks) > 1:
            for i, hunk in enumerate(fp.hunks):
                if _equivalent(fp, i, post):
                    continue
                kept = fp.hunks[:i] + fp.hunks[i + 1:]
                sections = [fp.render(kept) if f is written else f.raw for f in patch.files]
                head = hunk.render().split("\n")[0]
                found.append(PartialPatch(fp.path, i + 1, f"hunk {i + 1} of {fp.path} left "
                                          f"out ({head})", patch.render(sections)))
        if len(code) > 1 and not (len(fp.hunks) == 1 and _equivalent(fp, 0, post)):
            sections = [f.raw for f in patch.files if f is not written]
            found.append(PartialPatch(fp.path, None, f"{fp.path} left out",
                                      patch.render(sections)))
    return found


def partial_patches(gold: str, seed: str, cap: int = DEFAULT_PARTIAL_CAP,
                    post_images: Mapping[str, str] | None = None) -> tuple[PartialPatch, ...]:
    """Up to ``cap`` partial patches of ``gold``, sampled by ``seed`` when there are more,
    in the patch's order. ``post_images`` (a path's text after the patch), where given, lets
    a hunk that changes no Python meaning be passed over."""
    found = _candidates(parse_patch(gold), post_images or {})
    if len(found) > cap:
        keep = set(seeded(seed).sample(range(len(found)), cap))
        found = [p for i, p in enumerate(found) if i in keep]
    return tuple(found)
