"""Wrong outputs for script oracles (text, CSV, JSON, Python; binary and empty files skipped)
and partial patches of a gold patch (a hunk or a file left out, docs and no-op hunks never),
which real ``git apply`` takes against the base in a real repository."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path

from envcheck.kinds.strength import (
    Family,
    Operator,
    OutputMutant,
    Rejection,
    output_mutants,
    partial_patches,
)
from tests.gitrepo import GitRepo

REPORT = {"id": 7, "scores": [0.5, 12, -3], "items": [{"name": "a1", "n": 2}, {"name": "b"}],
          "ok": True, "label": "v2"}
TABLE = "city,population,area\nOslo,709037,454.0\n\"Bergen, west\",291940,465\nTromso,77544,2521\n"


def by_operator(mutants: tuple[OutputMutant, ...]) -> dict[Operator, list[OutputMutant]]:
    found: dict[Operator, list[OutputMutant]] = {}
    for m in mutants:
        found.setdefault(m.operator, []).append(m)
    return found


def test_json_numbers_and_members_change_and_still_parse() -> None:
    text = json.dumps(REPORT, indent=2) + "\n"
    gen = output_mutants({"out/report.json": text}, "seed", cap=None)
    ops = by_operator(gen.mutants)
    changed = [json.loads(m.content) for m in ops[Operator.NUMBER_CHANGED]]
    # the numbers, not the digits inside strings, nor the boolean
    assert sorted(d["id"] for d in changed) == [7] * 4 + [8]
    assert {json.dumps(d["scores"]) for d in changed} >= {"[1.5, 12, -3]", "[0.5, 13, -3]",
                                                           "[0.5, 12, -2]"}
    assert all(d["label"] == "v2" and d["items"][0]["name"] == "a1" for d in changed)
    dropped = [json.loads(m.content) for m in ops[Operator.RECORD_DROPPED]]
    assert {k: v for k, v in REPORT.items() if k != "ok"} in dropped
    assert {**REPORT, "items": [{"name": "b"}]} in dropped
    assert {**REPORT, "scores": [0.5, 12]} in dropped
    [cut] = ops[Operator.TRUNCATED]
    assert text.startswith(cut.content) and len(cut.content) < len(text)
    assert cut.diff.startswith("diff --git a/out/report.json b/out/report.json\n")
    assert gen.rejected == {}


def test_csv_records_drop_but_never_the_header() -> None:
    gen = output_mutants({"result.csv": TABLE}, "seed", cap=None)
    ops = by_operator(gen.mutants)
    rows = [list(csv.reader(io.StringIO(m.content))) for m in ops[Operator.RECORD_DROPPED]]
    assert len(rows) == 3
    assert all(r[0] == ["city", "population", "area"] and len(r) == 3 for r in rows)
    assert [["Bergen, west", "291940", "465"] in r for r in rows].count(False) == 1
    numbers = {m.description for m in ops[Operator.NUMBER_CHANGED]}
    assert numbers == {"709037 -> 709038", "454.0 -> 455.0", "291940 -> 291941",
                       "465 -> 466", "77544 -> 77545", "2521 -> 2522"}
    assert Operator.LINE_DROPPED not in ops


def test_text_lines_numbers_and_truncation() -> None:
    text = "total: 42\nversion 1.2.3 on x86\n\nstatus ok\n"
    gen = output_mutants({"answer.txt": text.encode()}, "seed", cap=None)
    ops = by_operator(gen.mutants)
    assert [m.content for m in ops[Operator.NUMBER_CHANGED]] == [text.replace("42", "43")]
    assert sorted(m.line for m in ops[Operator.LINE_DROPPED]) == [1, 2, 4]
    assert [m.content for m in ops[Operator.TRUNCATED]] == ["total: 42\nversion 1.2.3 on x86\n"]


def test_python_outputs_get_the_python_operators_on_every_line() -> None:
    code = "def solve(xs):\n    return sum(x for x in xs if x > 0)\n"
    gen = output_mutants({"solution.py": code}, "seed", cap=None)
    assert {m.operator for m in gen.mutants} == {
        Operator.RETURN_NONE, Operator.ARGUMENT_DROPPED, Operator.COMPARISON_FLIP,
        Operator.INT_PLUS_ONE, Operator.INT_MINUS_ONE, Operator.CALL_UNWRAPPED,
        Operator.EARLY_RETURN}
    for m in gen.mutants:
        compile(m.content, "solution.py", "exec")


STATS = ("def median(xs):\n    ordered = sorted(xs)\n    return ordered[len(ordered) // 2]\n\n\n"
         "def mode(xs):\n    best = max(set(xs), key=xs.count)\n    return best if xs else 0\n")


def test_a_python_file_the_image_had_is_mutated_on_the_lines_the_oracle_changed() -> None:
    fixed = STATS.replace("    return ordered[len(ordered) // 2]\n", "    mid = len(ordered) // 2\n"
                          "    if len(ordered) % 2:\n        return ordered[mid]\n"
                          "    return (ordered[mid - 1] + ordered[mid]) / 2\n")
    changed = range(3, 7)  # the lines of median() the fix wrote
    gen = output_mutants({"calc/stats.py": fixed, "calc/new.py": STATS}, "seed", cap=None,
                         originals={"calc/stats.py": STATS.encode()})
    ours = [m for m in gen.mutants if m.file == "calc/stats.py"]
    assert ours and all(m.line in changed for m in ours), [(m.line, m.description) for m in ours]
    assert {m.operator for m in ours} >= {Operator.ARITHMETIC_FLIP, Operator.RETURN_NONE}
    # a file the oracle created keeps every line: mode() is mutated there
    assert any(m.line >= 6 for m in gen.mutants if m.file == "calc/new.py")
    # without its original, the lines are every line again (mode() too)
    every = output_mutants({"calc/stats.py": fixed}, "seed", cap=None)
    assert any(m.line > 7 for m in every.mutants)
    # an original that could not be read, or the same text: no line to anchor on, said so
    gen = output_mutants({"a.py": fixed, "b.py": STATS}, "seed", cap=None,
                         originals={"a.py": None, "b.py": STATS})
    assert gen.mutants == ()
    assert [(s.file, s.why.split(":")[0]) for s in gen.skipped] == [
        ("a.py", "its text in the image could not be read"),
        ("b.py", "the oracle added or changed no line of it")]


def test_binary_and_empty_files_are_skipped_and_said() -> None:
    gen = output_mutants({"model.bin": b"\x00\x01weights", "latin.txt": "caf\xe9".encode(
        "latin-1"), "empty.txt": "\n\n", "ok.txt": "1\n"}, "seed", cap=None)
    assert sorted((s.file, s.why) for s in gen.skipped) == [
        ("empty.txt", "empty"), ("latin.txt", "binary"), ("model.bin", "binary")]
    assert {m.file for m in gen.mutants} == {"ok.txt"}


def test_output_sampling_is_seeded_and_spread_across_families() -> None:
    files = {"a.json": json.dumps(REPORT), "b.csv": TABLE,
             "c.txt": "".join(f"line {i}\n" for i in range(300))}
    first = output_mutants(files, "sha256:1|spec", cap=6)
    again = output_mutants(files, "sha256:1|spec", cap=6)
    other = output_mutants(files, "sha256:2|spec", cap=6)
    assert first.mutants == again.mutants != other.mutants
    assert Counter(m.family for m in first.mutants) == {
        Family.NUMBER: 2, Family.RECORD: 2, Family.TRUNCATION: 2}
    big = output_mutants({"c.txt": files["c.txt"]}, "s", cap=None)
    assert big.sites[Operator.NUMBER_CHANGED] == 64  # a seeded 64 of its 300 numbers


def test_a_change_that_changes_nothing_is_dropped() -> None:
    # Python's json writes NaN; one more than NaN is NaN: the same file, not a mutant
    gen = output_mutants({"x.json": '{"a": NaN, "b": [0]}'}, "s", cap=None)
    assert gen.rejected == {(Operator.NUMBER_CHANGED, Rejection.SAME_AS_ORIGINAL): 1}
    assert [m.content for m in gen.mutants if m.operator is Operator.NUMBER_CHANGED] == [
        '{"a": NaN, "b": [1]}']


# -- partial patches ---------------------------------------------------------------------

BASE = {"pkg/core.py": "".join(f"def f{i}(x):\n    return x\n\n\n" for i in range(8)),
        "pkg/util.py": "def g(x):\n    return x\n",
        "CHANGES.rst": "Changes\n=======\n"}
POST = {"pkg/core.py": BASE["pkg/core.py"].replace("def f1(x):\n    return x",
                                                   "def f1(x):\n    return x + 1")
        .replace("def f4(x):\n    return x", "def f4(x):\n    # why\n    return x")
        .replace("def f7(x):\n    return x", "def f7(x):\n    return -x"),
        "pkg/util.py": "def g(x):\n    return x * 2\n",
        "CHANGES.rst": "Changes\n=======\n\n- fixed f1\n"}


def gold(tmp_path: Path) -> tuple[GitRepo, str]:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(BASE)
    repo.write(POST)
    patch = repo.git("diff").stdout
    repo.git("checkout", "-q", "--", ".")
    return repo, patch


def test_partial_patches_leave_out_one_hunk_or_one_file(tmp_path: Path) -> None:
    repo, patch = gold(tmp_path)
    found = partial_patches(patch, "seed", post_images=POST)
    assert [(p.file, p.hunk) for p in found] == [
        ("pkg/core.py", 1), ("pkg/core.py", 3), ("pkg/core.py", None), ("pkg/util.py", None)]
    for p in found:
        assert repo.apply_check(p.patch).returncode == 0, p.description
        assert repo.patch_dry_run(p.patch).returncode == 0, p.description
    tree = repo.applied(found[0].patch, tmp_path / "tree")
    core = (tree / "pkg/core.py").read_text()
    assert "return x + 1" not in core and "return -x" in core and "# why" in core
    assert (tree / "CHANGES.rst").read_text() == POST["CHANGES.rst"]
    assert found[0].description.startswith("hunk 1 of pkg/core.py left out (@@ -")


def test_partial_patches_without_post_images_keep_comment_hunks(tmp_path: Path) -> None:
    _, patch = gold(tmp_path)
    found = partial_patches(patch, "seed")
    assert [(p.file, p.hunk) for p in found] == [
        ("pkg/core.py", 1), ("pkg/core.py", 2), ("pkg/core.py", 3), ("pkg/core.py", None),
        ("pkg/util.py", None)]


def test_partial_patches_capped_by_seed_and_none_for_one_hunk(tmp_path: Path) -> None:
    _, patch = gold(tmp_path)
    two = partial_patches(patch, "seed", cap=2)
    assert len(two) == 2 and two == partial_patches(patch, "seed", cap=2)
    assert {(p.file, p.hunk) for p in two} <= {(p.file, p.hunk)
                                               for p in partial_patches(patch, "seed")}
    one = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    assert partial_patches(one, "seed") == ()
