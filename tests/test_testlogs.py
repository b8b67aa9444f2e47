"""Runner logs read as the SWE-bench harness reads them: real pytest ``-rA`` output and a real
Django-format runner log, the harness's own edge cases, the registry, bounded reading, and the
patch helpers (test directives, the files a test patch resets)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from envcheck.core.testlogs import TestStatus, log_lines, parser, parser_names, register_parser
from envcheck.kinds.testvalidity.junit import Outcome
from envcheck.kinds.testvalidity.logs import read_log
from envcheck.kinds.testvalidity.patches import (
    directive_files,
    directive_modules,
    steps_for_test_patch,
)
from tests.conftest import ROOT

MINIDJANGO = ROOT / "images" / "demo" / "swe-pyutils" / "testbed"
LOGS = ROOT / "tests" / "swebench_logs"  # real and crafted logs (their README)


def parsed(name: str, log: str) -> dict[str, str]:
    return dict(parser(name)(log.split("\n")))


def test_real_pytest_report_lines_give_node_ids(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    pass\n\n"
        "def test_bad():\n    assert 1 == 2\n\n"
        "@pytest.mark.parametrize('v', ['a b', 'c::d'])\ndef test_p(v):\n    pass\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_skip():\n    pass\n\n"
        "@pytest.mark.xfail\ndef test_xfail():\n    assert 0\n\n"
        "class TestC:\n    def test_m(self):\n        pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "--no-header", "-rA", "--tb=no",
                          "-p", "no:cacheprovider", "tests/test_x.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    found = parsed("pytest", run.stdout)
    assert found == {
        "tests/test_x.py::test_ok": TestStatus.PASSED,
        "tests/test_x.py::test_bad": TestStatus.FAILED,
        "tests/test_x.py::test_p[a": TestStatus.PASSED,  # the harness's split, kept as it is
        "tests/test_x.py::test_p[c::d]": TestStatus.PASSED,
        "tests/test_x.py::test_xfail": TestStatus.XFAIL,
        "tests/test_x.py::TestC::test_m": TestStatus.PASSED,
    }, run.stdout


def test_real_django_format_log_gives_runner_ids() -> None:
    run = subprocess.run([sys.executable, "tests/runtests.py", "--verbosity", "2",
                          "mathkit_tests.tests"], cwd=MINIDJANGO, capture_output=True,
                         text=True, timeout=60, check=False)
    assert parsed("django", run.stderr) == {
        "test_below (mathkit_tests.tests.ClampTests)": TestStatus.PASSED,
        "test_inside (mathkit_tests.tests.ClampTests)": TestStatus.PASSED}


def test_django_rules_from_the_harness() -> None:
    log = "\n".join([
        "test_a (app.tests.T) ... ok",
        "test_b (app.tests.T) ... FAIL",
        "test_c (app.tests.T) ... ERROR",
        "test_d (app.tests.T) ... skipped 'no db'",
        "test_e (app.tests.T) ... System check identified no issues (0 silenced).",
        "ok",
        "test_f (app.tests.T) ... Internal Server Error: /x/",
        "ok",
        "FAIL: test_g (app.tests.T)",
        "ERROR: test_h (app.tests.T)",
        "test_i (app.tests.T) ...  OK",
    ])
    assert parsed("django", log) == {
        "test_a (app.tests.T)": TestStatus.PASSED, "test_b (app.tests.T)": TestStatus.FAILED,
        "test_c (app.tests.T)": TestStatus.ERROR, "test_d (app.tests.T)": TestStatus.SKIPPED,
        "test_e (app.tests.T)": TestStatus.PASSED, "test_f (app.tests.T)": TestStatus.PASSED,
        "test_g": TestStatus.FAILED, "test_h": TestStatus.ERROR,
        "test_i (app.tests.T)": TestStatus.PASSED}


def test_pytest_rules_from_the_harness() -> None:
    log = "\n".join([
        "PASSED tests/a.py::test_1",
        "FAILED tests/a.py::test_2 - assert 1 == 2",
        "SKIPPED [2] tests/a.py:10: later",  # a skip summary, not a test
        "tests/a.py::test_3 PASSED",  # id first: pytest_v2's rule, not pytest's
        "ERROR tests/a.py::test_4 - fixture",
        "\x1b[32mPASSED\x1b[0m tests/a.py::test_5",
    ])
    assert parsed("pytest", log) == {
        "tests/a.py::test_1": TestStatus.PASSED, "tests/a.py::test_2": TestStatus.FAILED,
        "tests/a.py::test_4": TestStatus.ERROR}
    assert parsed("pytest_v2", log)["tests/a.py::test_5"] is TestStatus.PASSED
    assert parsed("pytest_v2", log)["tests/a.py::test_3"] is TestStatus.PASSED
    assert parsed("pytest_options", "PASSED t.py::test[/tmp/x/y.txt]") == {
        "t.py::test[/y.txt]": TestStatus.PASSED}


def test_a_line_printed_after_the_summary_does_not_pass_a_failing_test() -> None:
    """A `<id> PASSED` line after pytest's summary (a conftest hook's, a plugin's) left the
    fail-to-pass test failing in the harness but read as passing in envcheck, so the negative
    control saw it pass and the instance was rejected (f2p_passes_before_oracle)."""
    data = (LOGS / "crafted" / "pytest-after-summary.log").read_bytes()
    read = read_log(data, "pytest", ["tests/test_slug.py::test_unicode",
                                     "tests/test_slug.py::test_ascii"])
    assert {t: c.outcome if c else None for t, c in read.outcomes.items()} == {
        "tests/test_slug.py::test_unicode": Outcome.FAILED,
        "tests/test_slug.py::test_ascii": Outcome.PASSED}


def test_pytest_v2_keeps_spaces_inside_parameters_on_a_real_log() -> None:
    """sphinx-doc__sphinx-8713's log (pytest_v2): three ids hold spaces in their parameters;
    the dataset declares them cut at the first space, which match them by prefix."""
    data = (LOGS / "real" / "sphinx-8713.gold.log").read_bytes()
    ids = {t for t, _ in parser("pytest_v2")(log_lines(data)) if " " in t}
    prefix = "tests/test_ext_napoleon_docstring.py::TestNumpyDocstring::"
    assert ids == {prefix + "test_escape_args_and_kwargs[x, y, z-x, y, z]",
                   prefix + "test_escape_args_and_kwargs[*args, **kwargs-\\\\*args, "
                            "\\\\*\\\\*kwargs]",
                   prefix + "test_escape_args_and_kwargs[*x, **y-\\\\*x, \\\\*\\\\*y]"}
    declared = [prefix + "test_escape_args_and_kwargs[x,", prefix + "test_pep526_annotations"]
    read = read_log(data, "pytest_v2", declared)
    assert all(c is not None and c.passed for c in read.outcomes.values())


def test_an_id_cut_in_its_parameters_matches_only_when_its_matches_agree() -> None:
    log = "\n".join(["PASSED t.py::test_a[x y]", "PASSED t.py::test_a[x z]",
                     "PASSED t.py::test_b[x y]", "FAILED t.py::test_b[x z]",
                     "FAILED t.py::test_c[x y]", "SKIPPED t.py::test_c[x z]"]).encode()
    read = read_log(log, "pytest_v2", ["t.py::test_a[x", "t.py::test_b[x", "t.py::test_c[x",
                                       "t.py::test_d[x"])
    assert {t: c.outcome if c else None for t, c in read.outcomes.items()} == {
        "t.py::test_a[x": Outcome.PASSED, "t.py::test_b[x": None,
        "t.py::test_c[x": Outcome.FAILED, "t.py::test_d[x": None}


def test_a_lone_carriage_return_ends_a_line() -> None:
    """The harness reads its log with universal newlines: after a progress bar's '\\r', a
    result line is a line of its own."""
    data = (LOGS / "crafted" / "lone-cr.log").read_bytes()
    read = read_log(data, "pytest", ["tests/test_cache.py::test_warm",
                                     "tests/test_cache.py::test_expiry",
                                     "tests/test_cache.py::test_evict"])
    assert {t: c.outcome if c else None for t, c in read.outcomes.items()} == {
        "tests/test_cache.py::test_warm": Outcome.PASSED,
        "tests/test_cache.py::test_expiry": Outcome.FAILED,
        "tests/test_cache.py::test_evict": Outcome.FAILED}


def test_sympy_matplotlib_and_seaborn_have_their_parsers() -> None:
    before = (LOGS / "real" / "sympy-24152.before.log").read_bytes()
    after = (LOGS / "real" / "sympy-24152.gold.log").read_bytes()
    ids = ["test_tensor_product_expand", "test_issue_5923"]
    assert [c.outcome for c in read_log(before, "sympy", ids).outcomes.values() if c] == [
        Outcome.FAILED, Outcome.PASSED]
    assert all(c and c.passed for c in read_log(after, "sympy", ids).outcomes.values())
    assert parsed("sympy", "___ sympy/a/tests/test_b.py:test_c ___\ntest_d E\n") == {
        "sympy/a/tests/test_b.py:test_c": TestStatus.FAILED, "test_d": TestStatus.ERROR}
    assert parsed("matplotlib", "PASSED lib/t.py::test_drag[MouseButton.LEFT-True]") == {
        "lib/t.py::test_drag[1-True]": TestStatus.PASSED}
    assert parsed("seaborn", "t.py::test_a PASSED [ 50%]\nERROR t.py::test_b - x") == {
        "t.py::test_a": TestStatus.PASSED}
    assert {"sympy", "matplotlib", "seaborn"} <= set(parser_names())


def test_an_unknown_status_word_is_kept_and_counts_as_no_result() -> None:
    log = b"PASSED t.py::test_a\nPASSED: t.py::test_a\n"
    assert parsed("pytest", log.decode()) == {"t.py::test_a": "PASSED:"}
    assert read_log(log, "pytest", ["t.py::test_a"]).outcomes == {"t.py::test_a": None}


def test_read_log_keeps_only_the_declared_ids_matched_exactly() -> None:
    lines = [f"PASSED tests/t.py::test_{i}" for i in range(20_000)]
    lines += ["FAILED tests/t.py::test_7 - boom", "XFAIL tests/t.py::test_x"]
    read = read_log("\n".join(lines).encode(), "pytest",
                    ["tests/t.py::test_7", "tests/t.py::test_8", "tests/t.py::test_x",
                     "t.py::test_8"])
    assert (read.reported, read.failed) == (20_002, 1)
    assert {t: c.outcome if c else None for t, c in read.outcomes.items()} == {
        "tests/t.py::test_7": Outcome.FAILED, "tests/t.py::test_8": Outcome.PASSED,
        "tests/t.py::test_x": Outcome.PASSED, "t.py::test_8": None}


def test_more_parsers_can_be_registered() -> None:
    def tap(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
        for line in lines:
            if line.startswith(("ok ", "not ok ")):
                status = TestStatus.PASSED if line.startswith("ok") else TestStatus.FAILED
                yield line.split(" - ", 1)[1], status

    register_parser("tap_demo", tap)
    assert "tap_demo" in parser_names()
    assert parsed("tap_demo", "ok 1 - adds\nnot ok 2 - subtracts") == {
        "adds": TestStatus.PASSED, "subtracts": TestStatus.FAILED}
    with pytest.raises(ValueError, match="invalid log parser name"):
        register_parser("junit", tap)


PATCH = """diff --git a/tests/test_a.py b/tests/test_a.py
index 1..2 100644
--- a/tests/test_a.py
+++ b/tests/test_a.py
@@ -1 +1,2 @@
 x = 1
+--- not a header
diff --git a/tests/forms_tests/test_new.py b/tests/forms_tests/test_new.py
new file mode 100644
--- /dev/null
+++ b/tests/forms_tests/test_new.py
@@ -0,0 +1 @@
+y = 2
diff --git a/tests/data.json b/tests/data.json
--- a/tests/data.json
+++ b/tests/data.json
@@ -1 +1 @@
-{}
+[]
"""


def test_test_directives_as_the_harness_derives_them() -> None:
    assert directive_files(PATCH) == ["tests/test_a.py", "tests/forms_tests/test_new.py"]
    assert directive_modules(PATCH) == ["test_a", "forms_tests.test_new"]
    assert directive_files(None) == []


def test_the_test_patch_resets_modified_files_and_removes_added_ones() -> None:
    script = steps_for_test_patch(PATCH, "/var/tmp/envcheck-test.patch")
    assert "git checkout HEAD -- tests/test_a.py tests/data.json 2>/dev/null" in script
    assert "rm -f -- tests/forms_tests/test_new.py" in script
    assert script.rstrip().endswith("git apply -v /var/tmp/envcheck-test.patch")
