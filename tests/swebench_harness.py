"""Runs the released SWE-bench harness's own log parsers and grading (swebench 5.0.2, from the
separate virtualenv scripts/test.sh makes: .venv-swebench) over log files, for the parity
test (tests/test_testlogs_parity.py). Not a test module: that test runs it as

    .venv-swebench/bin/python -W error tests/swebench_harness.py < request.json

Request: {"names": [parser names], "logs": [{"path", "parser", "fail_to_pass",
"pass_to_pass"}, ...]}. Answer, JSON on stdout: the release's version, its repository ->
parser map by parser name, its registry's names of its Python parsers by parser name and
its other names (other languages' parsers), and per log the parser's id -> status map and,
where tests are declared, the harness's grading of them.

``swebench/harness/__init__.py`` imports every harness module, the Docker client's and
Modal's among them, which are not installed here. So that ``__init__`` is not run: a bare
package module stands in for it, its path the real folder, and the real modules the parsers
and the grading need (``constants``, ``log_parsers``, ``grading``, ``infra_failure``, and
``swebench.types`` and ``swebench.utils`` above them) import from it unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"  # the eval script's markers


def load_harness() -> dict[str, types.ModuleType]:
    import swebench

    folder = Path(swebench.__file__).parent / "harness"
    package = types.ModuleType("swebench.harness")
    package.__path__ = [str(folder)]
    package.__spec__ = importlib.util.spec_from_file_location(
        "swebench.harness", folder / "__init__.py", submodule_search_locations=[str(folder)])
    sys.modules["swebench.harness"] = package
    return {"swebench": swebench,
            "log_parsers": importlib.import_module("swebench.harness.log_parsers"),
            "python": importlib.import_module("swebench.harness.log_parsers.python"),
            "grading": importlib.import_module("swebench.harness.grading"),
            "types": importlib.import_module("swebench.types")}


def graded(harness: dict[str, types.ModuleType], spec: Any, log: Path, scratch: Path,
           status_map: dict[str, str]) -> dict[str, Any]:
    """The harness's whole grading of the log, as the eval script would have printed it
    (between its markers): resolved or not, and each declared test's pass."""
    grading = harness["grading"]
    wrapped = scratch / "eval.log"
    wrapped.write_bytes(f"{START}\n".encode() + log.read_bytes() + f"\n{END}\n".encode())
    report = grading.get_eval_report(spec, {"instance_id": spec.instance_id,
                                            "model_patch": "-"}, str(wrapped),
                                     include_tests_status=True)[spec.instance_id]
    return {"resolved": report["resolved"], "tests_status": report.get("tests_status"),
            "passed": {t: grading.test_passed(t, status_map)
                       for t in spec.FAIL_TO_PASS + spec.PASS_TO_PASS}}


def main() -> None:
    harness = load_harness()
    registry = harness["log_parsers"].PARSER_REGISTRY
    request = json.load(sys.stdin)
    by_function: dict[int, str] = {}
    for name in request["names"]:  # a function's name: the first name given for it
        by_function.setdefault(id(registry[f"parse_log_{name}"]), name)
    repo_parsers = {repo: by_function.get(id(fn), fn.__name__)
                    for repo, fn in harness["python"].MAP_REPO_TO_PARSER_PY.items()}
    python = harness["python"].__name__
    log_parsers = {name: by_function.get(id(fn), fn.__name__)
                   for name, fn in registry.items() if fn.__module__ == python}
    other_parsers = sorted(name for name, fn in registry.items() if fn.__module__ != python)
    answers = []
    with tempfile.TemporaryDirectory() as scratch:
        for item in request["logs"]:
            spec = harness["types"].TestSpec(
                instance_id="parity", image="", eval_script_list=[], repo="", version="",
                FAIL_TO_PASS=item.get("fail_to_pass", []),
                PASS_TO_PASS=item.get("pass_to_pass", []),
                log_parser=f"parse_log_{item['parser']}", eval_type="pass_and_fail")
            with open(item["path"]) as f:  # as get_logs_eval opens a log: universal newlines
                content = f.read()
            answer: dict[str, Any] = {"map": registry[spec.log_parser](content, spec)}
            if spec.FAIL_TO_PASS or spec.PASS_TO_PASS:
                answer.update(graded(harness, spec, Path(item["path"]), Path(scratch),
                                     answer["map"]))
            answers.append(answer)
    json.dump({"version": harness["swebench"].__version__, "repo_parsers": repo_parsers,
               "log_parsers": log_parsers, "other_parsers": other_parsers,
               "logs": answers}, sys.stdout)


if __name__ == "__main__":
    main()
