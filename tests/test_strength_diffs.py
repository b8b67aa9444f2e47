"""Unified diffs read and written back: real ``git diff`` output (modes, renames, binary,
no newline at the end, CRLF) parsed into files and hunks, the base rebuilt from a post-image,
and generated diffs that real ``git apply`` takes (random files, hypothesis)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envcheck.kinds.strength.diffs import PatchError, parse_patch, unified_section
from envcheck.kinds.strength.placing import preimage
from tests.gitrepo import GitRepo

BASE = {"a.py": "".join(f"line {i}\n" for i in range(30)), "gone.txt": "bye\n",
        "old_name.py": "x = 1\ny = 2\nz = 3\n", "tail.txt": "one\ntwo", "crlf.txt": "a\r\nb\r\n",
        "blob.bin": "\0\1\2"}
POST = {"a.py": BASE["a.py"].replace("line 3\n", "line 3\nline 3b\n").replace(
            "line 25\n", "line 25\nline 25b\n"),
        "new.py": "def f():\n    return 1\n", "new_name.py": "x = 1\ny = 2\nz = 4\n",
        "tail.txt": "one\ntwo\nthree\n", "crlf.txt": "a\r\nB\r\n", "blob.bin": "\0\1\3"}


@pytest.fixture
def git_diff(tmp_path: Path) -> str:
    repo = GitRepo(tmp_path / "repo")
    repo.commit(BASE)
    for name in BASE:
        (repo.root / name).unlink()
    repo.write(POST)
    repo.git("add", "-A")
    return repo.git("diff", "--cached", "-M").stdout


def test_git_diff_read_into_files_and_hunks(git_diff: str) -> None:
    patch = parse_patch(git_diff)
    files = {fp.path: fp for fp in patch.files}
    assert set(files) == {"a.py", "gone.txt", "new_name.py", "tail.txt", "crlf.txt", "blob.bin",
                          "new.py"}
    assert (files["new_name.py"].old_path, files["gone.txt"].new_path) == ("old_name.py", None)
    assert files["new.py"].old_path is None and files["blob.bin"].binary
    assert len(files["a.py"].hunks) == 2
    assert files["a.py"].added_lines() == {5, 28}
    assert files["tail.txt"].added_lines() == {2, 3}
    assert "".join(fp.raw for fp in patch.files) == git_diff
    for path, fp in files.items():
        if fp.old_path is not None and fp.new_path is not None and not fp.binary:
            assert preimage(fp, POST[path]) == BASE[fp.old_path], path


def test_sections_written_back_apply(git_diff: str, tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "again")
    repo.commit(BASE)
    patch = parse_patch(git_diff)
    rewritten = patch.render([fp.render(fp.hunks) if not fp.binary else fp.raw
                              for fp in patch.files if not fp.binary])
    assert repo.apply_check(rewritten).returncode == 0, rewritten
    [a] = [fp for fp in patch.files if fp.path == "a.py"]
    second_only = patch.render([a.render(a.hunks[1:])])
    assert "@@ -24,6 +25,7 @@" in git_diff
    assert "@@ -24,6 +24,7 @@" in second_only  # the first hunk no longer shifts it
    tree = repo.applied(second_only, tmp_path / "tree")
    assert (tree / "a.py").read_text() == BASE["a.py"].replace("line 25\n", "line 25\nline 25b\n")


def test_plain_diff_u_and_errors() -> None:
    plain = "--- m.py\t2024-01-01\n+++ m.py\t2024-01-02\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n"
    [fp] = parse_patch(plain).files
    assert (fp.old_path, fp.new_path, fp.added_lines()) == ("m.py", "m.py", {2})
    with pytest.raises(PatchError, match="no file section"):
        parse_patch("hello\n")
    with pytest.raises(PatchError, match="hunk truncated"):
        parse_patch("--- a/m\n+++ b/m\n@@ -1,3 +1,3 @@\n x\n-y\n")
    with pytest.raises(PatchError, match="not in the file"):
        preimage(fp, "x\nw\n")


def test_an_offset_hunk_is_found_where_it_moved() -> None:
    [fp] = parse_patch("--- a/m\n+++ b/m\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n").files
    assert preimage(fp, "new\nlines\nx\nz\n") == "new\nlines\nx\ny\n"


lines = st.lists(st.sampled_from(["", "x", "y", "def f():", "    return 1", "\tz\r"]),
                 max_size=25)


@settings(max_examples=60, deadline=None)
@given(before=lines, after=lines, nl_before=st.booleans(), nl_after=st.booleans())
def test_generated_sections_apply_with_git(before: list[str], after: list[str],
                                           nl_before: bool, nl_after: bool) -> None:
    a = "\n".join(before) + ("\n" if nl_before and before else "")
    b = "\n".join(after) + ("\n" if nl_after and after else "")
    section = unified_section("f", "f", a, b)
    if a == b:
        assert section == ""
        return
    [fp] = parse_patch(section).files
    assert preimage(fp, b) == a
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "f").write_bytes(a.encode())
        done = subprocess.run(["git", "apply", "-"], cwd=folder, input=section.encode(),
                              capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, (done.stderr, section)
        assert Path(folder, "f").read_bytes().decode() == b
