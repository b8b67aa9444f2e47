"""Which survivors lie in a part of the fix the tests pass without (pure): the lines a
mutant changes in the gold post-image (an inserted line counts by its neighbours), the parts
the rewarded partial patches leave out (a hunk's lines after the patch; a whole file), and
every mutant of the gold patch mapped to the hunk it lies in."""

from __future__ import annotations

from pathlib import Path

from envcheck.kinds.strength import partial_patches, patch_mutants
from envcheck.kinds.strength.diffs import parse_patch
from envcheck.kinds.strength.uncovered import touched, uncovered_by, uncovered_parts
from tests.gitrepo import GitRepo
from tests.test_strength_mutants import gold_of

FILLER = "".join(f"\n\ndef f{i}():\n    return {i}\n" for i in range(4))
BASE = {"pkg/a.py": "def first(x):\n    return x\n" + FILLER + "\n\ndef second(y):\n"
                    "    return y\n",
        "pkg/b.py": "def other(z):\n    return z\n"}
POST = {"pkg/a.py": "def first(x):\n    if x < 0:\n        x = -x\n    return x\n" + FILLER
                    + "\n\ndef second(y):\n    if y > 10:\n        y = 10\n    return y\n",
        "pkg/b.py": "def other(z):\n    return z * 2\n"}


def test_the_lines_a_mutant_changes() -> None:
    diff = ("--- a/m.py\n+++ b/m.py\n@@ -3,4 +3,5 @@\n a\n-b\n+B\n c\n+inserted\n d\n")
    assert touched(diff) == {4, 5, 6}  # 4 replaced; the line inserted between 5 and 6
    assert touched("--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n-a\n+A\n+A2\n") == {1}
    assert touched("not a diff") is None


def test_survivors_map_to_the_hunk_whose_partial_patch_is_rewarded(tmp_path: Path) -> None:
    gold = gold_of(GitRepo(tmp_path / "repo"), BASE, POST)
    patch = parse_patch(gold)
    partials = partial_patches(gold, "seed", post_images=POST)
    by = {(p.file, p.hunk): p for p in partials}
    assert set(by) == {("pkg/a.py", 1), ("pkg/a.py", 2), ("pkg/a.py", None), ("pkg/b.py", None)}
    gen = patch_mutants(gold, POST, "seed", cap=None)
    second_hunk = patch.file("pkg/a.py").hunks[1]
    lines = range(second_hunk.new_start, second_hunk.new_start + second_hunk.new_len)

    parts = uncovered_parts(patch, [by["pkg/a.py", 2]], POST)
    inside = [m for m in gen.mutants if uncovered_by(m.file, m.diff, parts, m.fix_lines)]
    assert inside and all(m.file == "pkg/a.py" and m.line in lines for m in inside)
    outside = [m for m in gen.mutants if m not in inside]
    assert all(m.line not in lines for m in outside if m.file == "pkg/a.py")
    assert {uncovered_by(m.file, m.diff, parts, m.fix_lines) for m in inside} == {
        by["pkg/a.py", 2].description}
    # the file left out and rewarded: every mutant of it; none of the other file's
    parts = uncovered_parts(patch, [by["pkg/b.py", None]], POST)
    left_out = [m for m in gen.mutants if uncovered_by(m.file, m.diff, parts, m.fix_lines)]
    assert {m.file for m in left_out} == {"pkg/b.py"}
    assert {m for m in gen.mutants if m.file == "pkg/b.py"} == set(left_out)
    assert not any(uncovered_by(m.file, m.diff, {}) for m in gen.mutants)
