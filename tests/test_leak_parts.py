"""The leak checks' pure parts: the files a diff reads and leaves, the scripts' output read
back, the verdict, reuse, and the catalogue's ``leaks:`` block (tests/test_leaks.py plays
them on the real engine)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import LeakChecks, TestSpec
from envcheck.core.errors import CatalogueError
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.adversarial.ledger import ControlsLedger, RecordedEvidence
from envcheck.kinds.base import Verdict
from envcheck.kinds.leaks.check import declared_paths, host_targets, planned
from envcheck.kinds.leaks.diffs import FileChange, file_changes
from envcheck.kinds.leaks.files import MIN_BYTES, DeclaredPath, Target, read_files, text_target
from envcheck.kinds.leaks.gitstore import git_inputs, read_git
from envcheck.kinds.leaks.verdict import (
    Checked,
    Finding,
    LeakOutcome,
    judge,
    stored_outcome,
)
from tests.conftest import ROOT

DEMO = ROOT / "probes" / "demo-leaks.yaml"
PASSED = Verdict(Status.PASS, Reason.OK, "2 runs agree", {"runs": []},
                 (CommandEvidence("negative", 1, 0.5),))
LEAK_EVIDENCE = (CommandEvidence("leak check: git", 0, 0.1),)

# --- diffs ---------------------------------------------------------------------------------------

GIT_DIFF = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 a = 1
--- not a header: a removed line reading '-- x'
+++ nor this one: an added line reading '++ y'
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1 @@
+b = 2
diff --git a/old.txt b/old.txt
deleted file mode 100644
index 4444444..0000000
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/from.py b/to.py
similarity index 100%
rename from from.py
rename to to.py
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


def test_a_diff_names_the_files_it_reads_and_those_it_leaves() -> None:
    assert file_changes(GIT_DIFF) == [
        FileChange("pkg/mod.py", "pkg/mod.py"), FileChange(None, "pkg/new.py"),
        FileChange("old.txt", None), FileChange("from.py", "to.py"),
        FileChange("run.sh", "run.sh")]
    plain = "--- a/x.py\t2024-01-01\n+++ b/x.py\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n"
    assert file_changes(plain) == [FileChange("x.py", "x.py")]
    quoted = 'diff --git "a/sp ace" "b/sp ace"\n--- "a/sp ace"\n+++ "b/sp ace"\n@@ -1 +1 @@\n'
    assert file_changes(quoted) == []  # a quoted path is not looked up


def test_the_git_check_gets_each_patch_and_its_paths() -> None:
    spec = TestSpec(command="pytest", fail_to_pass=["t::a"], oracle={"patch": GIT_DIFF},
                    test_patch=GIT_DIFF.split("diff --git a/pkg/new.py", maxsplit=1)[0],
                    base_commit="abc1234")
    patches, variables = git_inputs(spec)
    assert [p.what for p in patches] == ["gold patch", "test patch"]
    assert variables["ENVCHECK_BASE"] == "abc1234"
    assert variables["ENVCHECK_GOLD_READS"].splitlines() == ["pkg/mod.py", "old.txt", "from.py",
                                                            "run.sh"]
    assert variables["ENVCHECK_GOLD_LEAVES"].splitlines() == ["pkg/mod.py", "pkg/new.py",
                                                             "to.py", "run.sh"]
    assert variables["ENVCHECK_TESTS_LEAVES"] == "pkg/mod.py"
    assert patches[0].steps("/tmp/p q.patch") == "gold='/tmp/p q.patch'"


# --- the git check's output ----------------------------------------------------------------------

BASE = "df72c21d515e0a8193de878a16c77d23c4ae9c12"
FIX, OLD = "8fd29060f4dc780e17faa59be656c3a067722881", "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
SHA = "d" * 64


def git_output(*lines: str) -> str:
    head = [f"base\t{BASE}\t/testbed/.git", "after\t1\t3",
            f"commit\t{'4' * 40}\trefs/stash \t2024-02-01T00:00:00+00:00 slug: lowercase"]
    return "\n".join(f"envcheck:leaks:{x}" for x in [*head, *lines]) + "\n"


def test_commits_after_the_base_and_the_fix_in_the_store_are_leaks() -> None:
    found, checked, targets = read_git(git_output(
        f"post\tgold\t{FIX}\tloose\t{SHA}\t169\ttextkit/slug.py",
        f"post\tgold\t{OLD}\tbase\t{'e' * 64}\t0\tpkg/__init__.py",
        f"post\ttests\t{'7' * 40}\tpacked\t{'f' * 64}\t256\ttests/test_slug.py",
        f"post\tgold\t{'9' * 40}\tabsent\t{'a' * 64}\t40\ttextkit/wrap.py",
        "history-rc\t0", "done\t-"), timed_out=False)
    assert [(f.reason, f.what) for f in found] == [
        (Reason.SOLUTION_LEAKED, "commit 444444444444 2024-02-01T00:00:00+00:00 slug: lowercase"),
        (Reason.SOLUTION_LEAKED, "textkit/slug.py as the gold patch leaves it (blob 8fd29060f4dc)"),
        (Reason.TESTS_IN_IMAGE, "tests/test_slug.py as the test patch leaves it (blob "
                                "777777777777)")]
    assert found[0].where == "after the base commit df72c21d515e, reachable from refs/stash"
    assert found[1].where == "a loose object in /testbed/.git"
    assert checked.played and not checked.cut_short
    assert "1 commit(s) after it" in checked.summary
    assert "2 on other lines of history (not counted)" in checked.summary
    # what the files check looks for next: every file the patches leave but the base's own
    assert [(t.group, t.what) for t in targets] == [
        ("solution", "textkit/slug.py as the gold patch leaves it"),
        ("tests", "tests/test_slug.py as the test patch leaves it"),
        ("solution", "textkit/wrap.py as the gold patch leaves it")]


def test_a_file_in_the_base_commits_history_is_the_repositorys_not_a_leak() -> None:
    found, checked, _ = read_git(git_output(
        f"post\tgold\t{FIX}\tpacked\t{SHA}\t169\ttextkit/slug.py", f"history\t{FIX}",
        "history-rc\t0", "done\t-"), timed_out=False)
    assert [f.check for f in found] == ["git"]  # the commit only
    assert "1 of them in the base commit's history (not counted)" in checked.summary
    found, _, _ = read_git(git_output(
        f"post\tgold\t{FIX}\tpacked\t{SHA}\t169\ttextkit/slug.py", "history-rc\t124",
        "done\t-"), timed_out=False)
    assert "the walk did not finish" in found[1].where  # counted, and said to be unsure


def test_a_git_check_that_could_not_run_says_why_and_is_never_clean() -> None:
    found, checked, _ = read_git("envcheck:leaks:unplayed\tno git on the sandbox user's PATH\n",
                                 timed_out=False)
    assert (found, checked.played, checked.cut_short) == ([], False, False)
    assert checked.summary == "no git on the sandbox user's PATH"
    _, checked, _ = read_git("", timed_out=True)
    assert (checked.played, checked.cut_short) == (False, True)
    found, checked, _ = read_git(git_output(), timed_out=True)  # cut short after the commits
    assert len(found) == 1 and checked.cut_short and "cut short: timed out" in checked.summary
    _, checked, _ = read_git(git_output("noapply\tgold", "done\t-"), timed_out=False)
    assert "the gold patch does not apply to the base commit's files" in checked.summary


# --- the files and paths checks' output ---------------------------------------------------------


def target(text: str, group: str = "solution", what: str = "solution/solve.sh") -> Target:
    made = text_target(text, "solution" if group == "solution" else "tests", what)
    assert made is not None
    return made


def test_a_file_found_by_its_hash_names_what_and_where() -> None:
    solve, short = target("#!/bin/bash\necho the answer\n"), target("1\n", what="solution/x")
    tests = target("assert answer() == 42\n", "tests", "tests/test_a.py")
    out = (f"envcheck:leaks:user\tagent\nenvcheck:leaks:paths-done\t-\n"
           f"envcheck:leaks:file\t{solve.sha256}  /opt/ref/solve.sh\n"
           f"envcheck:leaks:file\t{tests.sha256}  /srv/t a.py\n"
           f"envcheck:leaks:file\t{'0' * 64}  /not/asked\n"
           "envcheck:leaks:files-done\t-\n")
    found, checked = read_files(out, False, [solve, short, tests], [], "root")
    assert [(f.reason, f.what, f.where) for f in found] == [
        (Reason.SOLUTION_IN_IMAGE, "solution/solve.sh", "/opt/ref/solve.sh"),
        (Reason.TESTS_IN_IMAGE, "tests/test_a.py", "/srv/t a.py")]
    [line] = checked
    assert line.played and "2 file(s) looked for" in line.summary and "as agent" in line.summary
    assert f"1 under {MIN_BYTES} bytes not looked for" in line.summary
    assert len(short.sha256) == 64 and short.size < MIN_BYTES


def test_readable_declared_paths_are_leaks_and_a_cut_short_scan_is_partial() -> None:
    paths = [DeclaredPath("solution", "/opt/task/oracle.sh", "the oracle (oracle.path)"),
             DeclaredPath("tests", "/opt/task/pristine", "leaks.tests"),
             DeclaredPath("tests", "/opt/none", "leaks.tests")]
    out = ("envcheck:leaks:readable\t/opt/task/pristine\t/opt/task/pristine/test_a.py\n"
           "envcheck:leaks:absent\t/opt/none\nenvcheck:leaks:paths-done\t-\n")
    found, checked = read_files(out, True, [target("#!/bin/sh\nexit 0 # long enough\n")],
                                paths, "agent")
    assert [(f.reason, f.what, f.where) for f in found] == [
        (Reason.TESTS_IN_IMAGE, "leaks.tests: /opt/task/pristine/test_a.py", "readable by agent")]
    assert [(c.check, c.played, c.cut_short) for c in checked] == [
        ("paths", True, False), ("files", False, True)]
    assert "1 not in the image" in checked[0].summary
    _, checked = read_files("envcheck:leaks:paths-done\t-\nenvcheck:leaks:unplayed\tno "
                            "sha256sum on the sandbox user's PATH\n", False,
                            [target("#!/bin/sh\nexit 0 # long enough\n")], [], "agent")
    assert [(c.played, c.cut_short, c.summary) for c in checked] == [
        (False, False, "no sha256sum on the sandbox user's PATH")]


# --- the verdict ---------------------------------------------------------------------------------

COMMIT = Finding(Reason.SOLUTION_LEAKED, "git", "commit 4a1fbc0 fix", "reachable from a reflog")
IN_TESTS = Finding(Reason.TESTS_IN_IMAGE, "files", "tests/test.sh", "/opt/t/test.sh")
GIT = Checked("git", True, "base commit df72c21: 1 commit(s) after it")


def outcome(*found: Finding, checked: tuple[Checked, ...] = (GIT,)) -> LeakOutcome:
    return LeakOutcome(list(found), list(checked), LEAK_EVIDENCE)


def test_no_leak_keeps_the_pass_and_lists_what_was_checked() -> None:
    verdict = judge(PASSED, outcome(), require=True)
    assert (verdict.status, verdict.reason, verdict.evidence) == (
        Status.PASS, Reason.OK, PASSED.evidence)
    assert verdict.summary == "2 runs agree; no answer leak found (1 check(s))"
    assert verdict.details["leaks"] == {"found": [], "checked": [GIT.to_json()],
                                        "require": True}
    assert verdict.details["runs"] == []


@pytest.mark.parametrize(("require", "status"), [(False, Status.PASS), (True, Status.FAIL)])
def test_a_leak_is_degraded_or_a_fail_where_required(require: bool, status: Status) -> None:
    verdict = judge(PASSED, outcome(IN_TESTS, COMMIT), require=require)
    assert (verdict.status, verdict.reason) == (status, Reason.SOLUTION_LEAKED)
    assert verdict.summary.startswith("the answer is in the image's git history: commit "
                                      "4a1fbc0 fix (reachable from a reflog); tests/test.sh")
    assert [f["reason"] for f in verdict.details["leaks"]["found"]] == [
        "solution_leaked", "tests_in_image"]
    assert verdict.evidence == LEAK_EVIDENCE + PASSED.evidence
    result = ProbeResult("e", ProbeKind.TESTS, verdict.status, verdict.reason, "", 1.0)
    assert result.degraded is (not require)


def test_a_pass_degraded_already_keeps_its_reason_and_names_the_leak() -> None:
    hackable = Verdict(Status.PASS, Reason.REWARD_HACKABLE, "reward hackable: 1 of 8", {})
    verdict = judge(hackable, outcome(IN_TESTS), require=False)
    assert (verdict.status, verdict.reason) == (Status.PASS, Reason.REWARD_HACKABLE)
    assert "the hidden tests are readable in the image too: tests/test.sh" in verdict.summary
    required = judge(hackable, outcome(IN_TESTS), require=True)
    assert (required.status, required.reason) == (Status.FAIL, Reason.TESTS_IN_IMAGE)


def test_a_check_not_played_is_said_and_its_evidence_kept() -> None:
    unplayed = Checked("git", False, "no git on the sandbox user's PATH")
    verdict = judge(PASSED, outcome(checked=(unplayed,)), require=False)
    assert verdict.summary.endswith("no answer leak found (0 check(s); not played: git: no git "
                                    "on the sandbox user's PATH)")
    assert verdict.details["leaks"]["unplayed"] == ["git"]
    assert "partial" not in verdict.details["leaks"]
    assert verdict.evidence == LEAK_EVIDENCE + PASSED.evidence


def test_only_a_whole_outcome_of_the_same_checks_is_reused() -> None:
    info = judge(PASSED, outcome(COMMIT), require=False).details["leaks"]
    again = stored_outcome(info, ["git"])
    assert again is not None and again.found == [COMMIT] and again.evidence == ()
    assert judge(PASSED, again, require=False, reused={"from": "t"}).details["leaks"][
        "reused"] == {"from": "t"}
    assert stored_outcome(info, ["git", "files"]) is None  # other checks: play them
    cut = Checked("files", False, "not played: probe_s reached", cut_short=True)
    partial = judge(PASSED, outcome(checked=(GIT, cut)), require=False).details["leaks"]
    assert partial["partial"] is True and stored_outcome(partial, ["git", "files"]) is None
    assert stored_outcome({**info, "found": [{"reason": "ok"}]}, ["git"]) is None


def test_leak_reasons_go_with_a_pass_or_a_fail_only() -> None:
    for reason in (Reason.SOLUTION_LEAKED, Reason.SOLUTION_IN_IMAGE, Reason.TESTS_IN_IMAGE):
        with pytest.raises(ValueError, match="does not go with"):
            ProbeResult("e", ProbeKind.TESTS, Status.FLAKY, reason, "", 1.0)


# --- the catalogue -------------------------------------------------------------------------------


def test_a_spec_without_leaks_keeps_its_hash() -> None:
    spec = TestSpec(command="pytest", fail_to_pass=["t::a"])
    env = Environment(id="e", image="i", suite="s", tests=spec)
    assert "leaks" not in spec.model_dump(mode="json")
    checked = env.model_copy(update={"tests": spec.model_copy(update={"leaks": LeakChecks()})})
    assert checked.spec_hash(ProbeKind.TESTS) != env.spec_hash(ProbeKind.TESTS)
    required = LeakChecks(require=True)
    assert checked.model_copy(update={"tests": spec.model_copy(update={"leaks": required})}
                              ).spec_hash(ProbeKind.TESTS) != checked.spec_hash(ProbeKind.TESTS)


def test_the_demo_declares_leak_checks_on_every_kind_of_entry() -> None:
    catalogue = load_catalogue([DEMO])
    plans = {e.id: (e.leaks(), planned(e, e.leaks() or LeakChecks())) for e in
             catalogue.environments}
    assert {k: v[1] for k, v in plans.items()} == {
        "demo-leaks-task": ["git", "paths"],
        "envcheck-demo__pyutils-1-clean": ["git", "files"],
        "envcheck-demo__pyutils-1-leaked": ["git", "files"],
        "solution-kept-out": ["files"], "solution-in-image": ["files"]}
    assert all(plan is not None and not plan.require for plan, _ in plans.values())
    task = catalogue.environment("demo-leaks-task")
    plan = task.leaks()
    assert plan is not None
    assert [(p.group, p.path) for p in declared_paths(task, plan)] == [
        ("solution", "/opt/task/oracle.sh"), ("solution", "/opt/task/fix.patch"),
        ("tests", "/opt/task/pristine-tests")]
    kept_out = host_targets(catalogue.environment("solution-kept-out"))
    solve = ROOT / "probes" / "harbor-leaks" / "solution-kept-out" / "solution" / "solve.sh"
    assert [t.what for t in kept_out] == ["solution/solve.sh", "tests/test.sh"]
    assert kept_out[0].sha256 == hashlib.sha256(solve.read_bytes()).hexdigest()
    clean = catalogue.environment("envcheck-demo__pyutils-1-clean")
    assert [t.what for t in host_targets(clean)] == [
        "the gold patch (oracle.patch)", "the test patch (test_patch)"]


def test_a_bad_leaks_block_is_refused_at_load(tmp_path: Path) -> None:
    bad = tmp_path / "leaks.yaml"
    bad.write_text(DEMO.read_text().replace("solution: [/opt/task/fix.patch]",
                                            "solution: [opt/task/fix.patch]"))
    with pytest.raises(CatalogueError) as caught:
        load_catalogue([bad])
    assert f"{bad}:" in str(caught.value) and "tests.leaks.solution" in str(caught.value)


def test_a_ray_task_carries_the_newest_leak_checks_without_controls() -> None:
    env = load_catalogue([DEMO]).environment("solution-kept-out")
    spec = env.spec_hash(ProbeKind.TESTS)

    def stored(details: dict[str, object]) -> ProbeResult:
        return ProbeResult(env.id, ProbeKind.TESTS, Status.PASS, Reason.OK, "", 1.0,
                           image_digest="sha256:a", spec_hash=spec, details=details,
                           started_at=datetime(2026, 1, 1, tzinfo=UTC))

    with_leaks = stored({"leaks": {"found": []}})
    assert ControlsLedger(RecordedEvidence([with_leaks])).newest(env) == with_leaks
    assert ControlsLedger(RecordedEvidence([stored({})])).newest(env) is None
    node = ControlsLedger(RecordedEvidence([with_leaks]))
    assert node.prior(env.id, "sha256:a", spec, key="leaks") == (with_leaks.started_at,
                                                                  {"found": []})
    assert node.prior(env.id, "sha256:b", spec, key="leaks") is None
