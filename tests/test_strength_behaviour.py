"""The recorded behaviour compared (pure): only a value a function hands back (a return, a
raise, an argument's state, an output) tells a mutant from the gold patch, never how often the
function was called; the recorder itself, run in this process on real calls, catches what a
call writes (nested calls counted for both) and keeps the distinct events."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envcheck.kinds.strength.behaviour import Calls, RecordError, difference, parse_recording
from tests.conftest import ROOT

KEY = "tests/test_m.py::test_it\tpkg/m.py:index"
OTHER = "tests/test_m.py::test_other\tpkg/m.py:index"


def ev(value: str, kind: str = "return", wrote: str = "", *state: str) -> tuple[str, ...]:
    return (kind, value, wrote, *state)


def calls(*events: tuple[str, ...], count: int | None = None, more: bool = False,
          digest: str | None = None) -> Calls:
    """Calls giving ``events`` in order (then repeated up to ``count``)."""
    count = len(events) if count is None else count
    seen: dict[str, tuple[int, tuple[str, ...]]] = {}
    for i, event in enumerate(events):
        seen.setdefault("|".join(event), (i, event))
    return Calls(count, digest or f"{count}:{'/'.join('|'.join(e) for e in events)}",
                 tuple(events[:20]), seen, more)


def test_a_call_count_alone_is_no_difference() -> None:
    """sympy-23117: the index checker called 223 times instead of 226, giving nothing the
    gold patch never gave: not a confirmation."""
    values = [ev("0"), ev("1"), ev("None")]
    gold = calls(*values, count=226)
    mutant = calls(values[1], values[0], values[2], count=223)
    assert difference({KEY: gold}, {KEY: gold}, {KEY: mutant}) is None
    # fewer calls shift every call after: no value is compared by position when counts differ
    shifted = calls(values[2], values[0], count=225)
    assert difference({KEY: gold}, {KEY: gold}, {KEY: shifted}) is None


def test_a_value_no_gold_run_gave_confirms_whatever_the_count() -> None:
    gold = calls(ev("0"), ev("1"), count=226)
    mutant = calls(ev("0"), ev("1"), ev("-1"), count=223)
    said = difference({KEY: gold}, {KEY: gold}, {KEY: mutant})
    assert said == ("`pkg/m.py:index` returned -1 in tests/test_m.py::test_it (call 3 of 223), "
                    "which it never did under the gold patch (226 call(s))")
    raised = calls(ev("0"), ev("IndexError('x',)", kind="raise"), count=5)
    assert "raised IndexError('x',)" in (difference({KEY: gold}, {KEY: gold}, {KEY: raised})
                                         or "")
    state = calls(ev("0", "return", "", "self=A(n=2)"), count=3)
    base = calls(ev("0", "return", "", "self=A(n=1)"), ev("1", "return", "", "self=A(n=1)"))
    assert "left self=A(n=2)" in (difference({KEY: base}, {KEY: base}, {KEY: state}) or "")
    # more distinct events than the recorder keeps, where the gold runs gave two: a new one
    many = calls(ev("0"), count=400, more=True)
    assert "gave more than 1 different results" in (
        difference({KEY: gold}, {KEY: gold}, {KEY: many}) or "")


def test_counts_that_differ_with_unstable_gold_values_decide_nothing() -> None:
    first, again = calls(ev("t=1"), count=3), calls(ev("t=2"), count=3)
    assert difference({KEY: first}, {KEY: again}, {KEY: calls(ev("t=3"), count=2)}) is None
    # a gold record that lost events (more than kept, past the calls looked at) decides nothing
    lossy = calls(ev("0"), count=5000)
    assert difference({KEY: lossy}, {KEY: lossy}, {KEY: calls(ev("9"), count=10)}) is None


def test_a_function_called_in_a_test_or_not_is_judged_by_its_values() -> None:
    gold = {KEY: calls(ev("0"), ev("1"))}
    assert difference(gold, gold, {}) is None  # never called under the mutant: no value
    assert difference(gold, gold, {**gold, OTHER: calls(ev("1"))}) is None  # a known value
    said = difference(gold, gold, {**gold, OTHER: calls(ev("7"))})
    assert said is not None and said.startswith("`pkg/m.py:index` returned 7 in tests/test_m.py"
                                                "::test_other (call 1 of 1)")
    # a function the gold patch's tests never call at all: nothing to compare with
    assert difference({}, {}, {OTHER: calls(ev("7"))}) is None


def test_calls_that_line_up_are_compared_call_by_call() -> None:
    gold = calls(ev("1"), ev("2"))
    assert difference({KEY: gold}, {KEY: gold}, {KEY: calls(ev("2"), ev("1"))}) == (
        "`pkg/m.py:index` returned 2 in tests/test_m.py::test_it where under the gold patch "
        "it returned 1")
    wrote = calls(ev("None", "return", "stdout 'Host Endpoint\\n'"))
    printed = calls(ev("None", "return", "stdout 'Endpoint\\n'"))
    assert difference({KEY: printed}, {KEY: printed}, {KEY: wrote}) == (
        "`pkg/m.py:index` wrote stdout 'Host Endpoint\\n' in tests/test_m.py::test_it where "
        "under the gold patch it wrote stdout 'Endpoint\\n'")
    silent = calls(ev("None"))
    assert "wrote nothing" in (difference({KEY: printed}, {KEY: printed}, {KEY: silent}) or "")
    # the same first calls, another digest: what comes after differs
    later = calls(ev("1"), ev("2"), digest="other")
    assert difference({KEY: gold}, {KEY: gold}, {KEY: later}) == (
        "`pkg/m.py:index` behaved differently in tests/test_m.py::test_it after its first 2 "
        "call(s)")


def test_recordings_are_read_and_merged_across_processes() -> None:
    line = {"v": 2, "calls": {KEY: [2, "d1", [["return", "1", [], ""]],
                                    {"a": [0, ["return", "1", [], ""]]}, False]}}
    other = {"v": 2, "calls": {KEY: [1, "d0", [["return", "2", [["self", "X()"]], "stdout 'x'"]],
                                     {"b": [0, ["return", "2", [["self", "X()"]], "stdout 'x'"]]},
                                     True]}}
    found = parse_recording(json.dumps(line) + "\n" + json.dumps(other) + "\n")[KEY]
    assert found.count == 3 and found.digest == "d0+d1" and found.more
    assert found.first == (("return", "2", "stdout 'x'", "self=X()"), ("return", "1", ""))
    assert found.seen is not None and set(found.seen) == {"a", "b"}
    old = {"v": 1, "calls": {KEY: [1, "d", [["return", "1", []]]]}}  # an older recorder's
    assert parse_recording(json.dumps(old))[KEY].seen is None
    with pytest.raises(RecordError, match="displaced"):
        parse_recording(json.dumps({"displaced": True, "calls": {}}))
    with pytest.raises(RecordError, match="unreadable"):
        parse_recording('{"calls": {"k": [1]}}')


# -- the recorder itself, in this process ----------------------------------------------------

SOURCE = '''import sys


def inner(n):
    print("inner", n, object())
    return n


def outer(n):
    sys.stdout.write("outer ")
    sys.stderr.write("warn")
    return inner(n) + 1


def quiet(values):
    values.append(1)
    return len(values)


def reraised(path):
    try:
        open(path)
    except OSError as exc:
        exc.strerror = "gone"
        raise


def handled(path):
    try:
        open(path)
    except OSError:
        pass
    return None
'''


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator[tuple[ModuleType, ModuleType]]:
    path = ROOT / "envcheck" / "kinds" / "strength" / "recorder" / "_envcheck_record.py"
    spec = importlib.util.spec_from_file_location("_recorder_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no targets file: it starts nothing
    code = tmp_path / "shown.py"
    code.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("shown", code)
    assert spec is not None and spec.loader is not None
    shown = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shown)
    yield module, shown


def test_the_recorder_catches_what_each_call_writes(
        recorder: tuple[ModuleType, ModuleType], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    module, shown = recorder
    targets = [[str(tmp_path / "shown.py"), name, [line], f"shown:{name}"]
               for name, line in (("inner", 4), ("outer", 9), ("quiet", 15))]
    rec: Any = module._Recorder({"out": str(tmp_path), "targets": targets})
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "t.py::t (call)")
    previous = sys.gettrace()
    sys.settrace(rec.tracer)
    try:
        assert shown.outer(2) == 3 and shown.quiet([]) == 1 and shown.inner(5) == 5
        rec.write()  # at exit, its tracer still in place
    finally:
        sys.settrace(previous)
    assert sys.stdout is out and sys.stderr is err  # the streams put back
    assert out.getvalue().startswith("outer inner 2 <object object at 0x")  # passed on
    assert err.getvalue() == "warn"
    found = parse_recording((tmp_path / next(p.name for p in tmp_path.glob("*.json")))
                            .read_text())
    inner = found["t.py::t\tshown:inner"]
    assert inner.count == 2 and inner.first[0][2] == (
        "stdout 'inner 2 <object object at 0x?>\\n'")  # the address normalised
    outer = found["t.py::t\tshown:outer"].first[0]
    assert outer[:3] == ("return", "3", "stdout 'outer inner 2 <object object at 0x?>\\n'; "
                         "stderr 'warn'")  # the inner call's output is the outer's too
    quiet = found["t.py::t\tshown:quiet"].first[0]
    assert quiet == ("return", "1", "", "values=[1]")
    assert inner.seen is not None and len(inner.seen) == 2 and not inner.more


def test_a_long_output_is_kept_as_its_length_a_digest_and_a_head() -> None:
    path = ROOT / "envcheck" / "kinds" / "strength" / "recorder" / "_envcheck_record.py"
    spec = importlib.util.spec_from_file_location("_recorder_output", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    output = module._Output("stdout", 10)
    for _ in range(30):
        output.add("abc ")
    said = output.said()
    assert said.startswith("stdout 'abc abc ab'...(120 chars, ") and len(said) < 60
    again = module._Output("stdout", 10)
    again.add("abc " * 30)  # written at once or in pieces: the same
    assert again.said() == said


def test_a_re_raise_is_a_raise_a_handled_error_a_return_and_quiet_calls_are_not_recorded(
        recorder: tuple[ModuleType, ModuleType], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``except OSError: ...; raise`` leaves no "exception" event after its lines: it is
    still recorded as the raise it is (the gold patch's own re-raise was "returned None",
    and a mutant that only adds a frame around it looked different); an error handled inside
    is a return; calls while ``QUIET`` is up (a control's own comparison run) are not
    recorded."""
    module, shown = recorder
    lines = {n: i + 1 for i, n in enumerate(SOURCE.split("\n"))}
    targets = [[str(tmp_path / "shown.py"), name, [lines[f"def {name}(path):"]],
                f"shown:{name}"] for name in ("reraised", "handled")]
    rec: Any = module._Recorder({"out": str(tmp_path), "targets": targets})
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "t.py::t (call)")
    missing = str(tmp_path / "missing")
    previous = sys.gettrace()
    sys.settrace(rec.tracer)
    try:
        with pytest.raises(FileNotFoundError):
            shown.reraised(missing)
        assert shown.handled(missing) is None
        module.QUIET[0] += 1
        try:
            assert shown.handled(missing) is None
        finally:
            module.QUIET[0] -= 1
        rec.write()
    finally:
        sys.settrace(previous)
    found = parse_recording(next(tmp_path.glob("*.json")).read_text())
    [raised] = found["t.py::t\tshown:reraised"].first
    assert raised[:2] == ("raise", "builtins.FileNotFoundError(2, 'No such file or directory')")
    handled = found["t.py::t\tshown:handled"]
    assert handled.count == 1 and handled.first[0][:2] == ("return", "None")
