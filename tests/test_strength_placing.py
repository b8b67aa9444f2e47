"""Hunks placed where they sit: a gold patch made on one tree and applied to another, its hunk
headers off by some lines (``git apply`` accepts the offset) or its context changed at the ends
(``patch --fuzz``). The mutants, the change blocks, the functions recorded, the partial
patches and the parts left out are all read where the hunks really applied, in the image's
file after the gold patch; a hunk found nowhere is not mutated, and the notes say so."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from envcheck.kinds.strength import partial_patches, patch_mutants
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.model import Mutant, Operator
from envcheck.kinds.strength.placing import place, preimage
from envcheck.kinds.strength.survivors import functions_changed
from envcheck.kinds.strength.uncovered import touched, uncovered_by, uncovered_parts
from tests.gitrepo import GitRepo

PATH = "pkg/m.py"
FILLER = "".join(f"\n\ndef f{i}():\n    return {i}\n" for i in range(3))
ABOVE = "\n\ndef above(x, scale=2):\n    if x < 0:\n        x = -x\n    count = 0\n" \
        "    return x * scale\n"
BEFORE = "\n\ndef fixed(a, b, scale=1):\n    total = a + b\n    count = 0\n    return total\n"
AFTER = ("\n\ndef fixed(a, b, scale=1):\n    total = a + b\n    if total < 0:\n"
         "        total = -total\n    count = 0\n    return total * scale\n")
OTHER, OTHER_FIXED = "\n\ndef other(c):\n    return c\n", "\n\ndef other(c):\n    return c + 1\n"
TEST_PATCH = ("diff --git a/tests/test_m.py b/tests/test_m.py\n--- a/tests/test_m.py\n"
              "+++ b/tests/test_m.py\n@@ -1,2 +1,3 @@\n from pkg.m import fixed\n \n"
              "+assert fixed(1, 2, scale=3) == 9\n")


def head(lines: int) -> str:
    return "".join(f"# note {i}\n" for i in range(lines))


def base(lines: int) -> str:
    """The file before the fix, with ``lines`` lines above the code (the record's tree: 8)."""
    return head(lines) + ABOVE + BEFORE + FILLER + OTHER


def gold(tmp_path: Path) -> str:
    repo = GitRepo(tmp_path / "record")
    repo.commit({PATH: base(8)})
    repo.write({PATH: head(8) + ABOVE + AFTER + FILLER + OTHER_FIXED})
    repo.git("add", "-A")
    return repo.git("diff", "--cached").stdout


def image(tmp_path: Path, text: str, name: str = "image") -> GitRepo:
    repo = GitRepo(tmp_path / name)
    repo.commit({PATH: text})
    return repo


def applied(repo: GitRepo, patch: str, tmp_path: Path, *, fuzz: bool = False) -> str:
    """``repo``'s file after ``patch``, applied as the sandbox applies it (``git apply``,
    with offsets; ``patch --fuzz=5`` where asked)."""
    if fuzz:
        assert repo.apply_check(patch).returncode != 0  # git apply refuses: only patch takes it
        tree = tmp_path / "fuzzed"
        repo.run("cp", "-r", str(repo.root), str(tree))
        repo.run("patch", "--batch", "--fuzz=5", "-p1", stdin=patch, cwd=tree)
        return (tree / PATH).read_text()
    return (repo.applied(patch, tmp_path / "tree") / PATH).read_text()


def fix_lines(before: str, after: str) -> set[int]:
    """The lines of ``after`` (from 1) the fix changed, and the one on either side (where an
    insertion before or after them touches)."""
    a, b = before.split("\n"), after.split("\n")
    found: set[int] = set()
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            found.update(range(j1, j2 + 2))  # lines j1 .. j2 + 1, from 1: one either side
    return found


def changed(m: Mutant) -> set[int]:
    """The lines of the gold post-image the mutant changes, or those of the fix it stands for
    (a function wrapped whole); none if its diff is unreadable."""
    return set(m.fix_lines) or touched(m.diff) or set()


def edits(mutants: Sequence[Mutant]) -> Counter[tuple[str, tuple[str, ...]]]:
    """Each mutant as its operator and its diff's changed lines (no line numbers)."""
    return Counter((str(m.operator), tuple(x for x in m.diff.split("\n")[2:]
                                           if x[:1] in "+-")) for m in mutants)


@pytest.mark.parametrize("shift", [5, -5, 23])
def test_mutants_land_in_the_fix_where_an_offset_hunk_applied(tmp_path: Path,
                                                              shift: int) -> None:
    patch = gold(tmp_path)
    repo = image(tmp_path, base(8 + shift))
    post = applied(repo, patch, tmp_path)
    assert "    return total * scale" in post
    gen = patch_mutants(patch, {PATH: post}, "seed", cap=None, test_patch=TEST_PATCH)
    allowed = fix_lines(base(8 + shift), post)
    assert len(gen.mutants) > 10
    for m in gen.mutants:
        lines = changed(m)
        assert lines and lines <= allowed and m.line in allowed, (m.description, m.diff)
        assert "above" not in m.description
    assert {Operator.PARTIAL_REVERT, Operator.TESTED_INPUT_ONLY} <= {
        m.operator for m in gen.mutants}
    # the same mutants as on the record's own tree, where the headers are right
    exact = patch_mutants(patch, {PATH: head(8) + ABOVE + AFTER + FILLER + OTHER_FIXED},
                          "seed", cap=None, test_patch=TEST_PATCH)
    assert edits(gen.mutants) == edits(exact.mutants)
    where = "below" if shift > 0 else "above"
    assert sum(f"applies {abs(shift)} line(s) {where} its header" in n
               for n in gen.notes) == 2, gen.notes
    assert not any("applies" in n for n in exact.notes)
    # each candidate is made against the image's own file: it applies with no offset
    for i, m in enumerate(gen.mutants):
        check = repo.git("apply", "--check", "-v", "-", stdin=m.patch, check=False)
        assert check.returncode == 0 and "offset" not in check.stderr, (m.description, check)
        if i % 5 == 0:
            assert applied(repo, m.patch, tmp_path) == m.text


def test_placed_hunks_rebuild_the_image_file_and_name_the_changed_functions(
        tmp_path: Path) -> None:
    patch = gold(tmp_path)
    [fp] = parse_patch(patch).files
    for shift in (5, -5):
        post = applied(image(tmp_path, base(8 + shift), f"image{shift}"), patch, tmp_path)
        placed = place(fp, post)
        assert placed.missing == []
        assert [h.new_start - w.new_start for h, w in zip(placed.fp.hunks, fp.hunks,
                                                          strict=True)] == [shift, shift]
        assert [h.old_start - w.old_start for h, w in zip(placed.fp.hunks, fp.hunks,
                                                          strict=True)] == [shift, shift]
        assert preimage(fp, post) == base(8 + shift)
        assert functions_changed(parse_patch(patch), {PATH: post}) == {PATH: {"fixed", "other"}}


def test_partial_patches_and_parts_left_out_where_the_hunks_applied(tmp_path: Path) -> None:
    patch = gold(tmp_path)
    repo = image(tmp_path, base(13))
    post = applied(repo, patch, tmp_path)
    partials = {p.hunk: p for p in partial_patches(patch, "seed", post_images={PATH: post})}
    assert set(partials) == {1, 2}
    for partial in partials.values():
        check = repo.git("apply", "--check", "-v", "-", stdin=partial.patch, check=False)
        assert check.returncode == 0 and "offset" not in check.stderr, check.stderr
    assert applied(repo, partials[2].patch, tmp_path) == head(13) + ABOVE + AFTER + FILLER \
        + OTHER
    gen = patch_mutants(patch, {PATH: post}, "seed", cap=None)
    parts = uncovered_parts(parse_patch(patch), [partials[1]], {PATH: post})
    first = fix_lines(head(13) + ABOVE + BEFORE + FILLER + OTHER_FIXED, post)
    second = fix_lines(head(13) + ABOVE + AFTER + FILLER + OTHER, post)
    inside = [m for m in gen.mutants if uncovered_by(m.file, m.diff, parts, m.fix_lines)]
    assert inside and all(m.line in first for m in inside)
    assert all(m.line in second for m in gen.mutants if m not in inside)
    assert uncovered_parts(parse_patch(patch), [partials[1]], {}) == {}


def test_a_hunk_whose_lines_are_not_in_the_file_gives_no_mutant_and_a_note(
        tmp_path: Path) -> None:
    patch = gold(tmp_path)
    # the file read back has the first fix but not the second hunk's line (another change)
    post = head(13) + ABOVE + AFTER + FILLER + "\n\ndef other(c):\n    return c + 2\n"
    gen = patch_mutants(patch, {PATH: post}, "seed", cap=None)
    assert gen.mutants == ()
    assert [s.file for s in gen.skipped] == [PATH]
    assert "hunk(s) 2 of the gold patch not in the post-image" in gen.skipped[0].why
    assert any("hunk 2 (@@ -" in n and "no mutant of its lines" in n for n in gen.notes)
    # the file before the patch handed in: the first hunk is still mutated, the second not
    with_base = patch_mutants(patch, {PATH: post}, "seed", cap=None,
                              base_images={PATH: base(13)})
    first = fix_lines(base(13), head(13) + ABOVE + AFTER + FILLER + OTHER)
    assert with_base.mutants and all(
        changed(m) <= first and not re.search(r"^[-+]\s*return c( \+ 2)?$", m.diff, re.M)
        for m in with_base.mutants)
    assert any("hunk 2 (@@ -" in n and "no mutant of its lines" in n for n in with_base.notes)
    assert any("hunk 1 (@@ -" in n and "5 line(s) below" in n for n in with_base.notes)


def test_a_hunk_applied_with_fuzz_is_placed_by_its_inner_lines(tmp_path: Path) -> None:
    """The image's line above the fix differs from the record's: ``git apply`` refuses the
    patch and ``patch --fuzz`` applies it, ignoring the hunk's first context lines."""
    patch = gold(tmp_path)
    theirs = base(10).replace("def fixed(a, b, scale=1):", "def fixed(a, b, scale=1):  # !")
    repo = image(tmp_path, theirs)
    post = applied(repo, patch, tmp_path, fuzz=True)
    [fp] = parse_patch(patch).files
    placed = place(fp, post)
    assert placed.missing == [] and preimage(fp, post) == theirs
    gen = patch_mutants(patch, {PATH: post}, "seed", cap=None, test_patch=TEST_PATCH)
    allowed = fix_lines(theirs, post)
    assert len(gen.mutants) > 10 and all(changed(m) <= allowed for m in gen.mutants)
    assert all(repo.apply_check(m.patch).returncode == 0 for m in gen.mutants)
