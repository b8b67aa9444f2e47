"""The layout's rules hold on the real import graph (ARCHITECTURE.md): the contracts in
pyproject.toml are kept, a wrong import breaks them, and no two modules import each other,
in envcheck/ nor among the benches in bench/."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_contracts_are_kept() -> None:
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "envcheck", tree / "envcheck",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_an_import_running_back_up_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    tables = tree / "envcheck" / "store" / "tables" / "states.py"
    tables.write_text(tables.read_text() + "\nfrom envcheck.feed import allowlist  # noqa\n")
    proc = lint(tree)
    assert proc.returncode != 0
    assert "stages import only the stages before them BROKEN" in proc.stdout
    assert "envcheck.store.tables.states -> envcheck.feed.allowlist" in proc.stdout


def test_the_dashboard_reaching_the_probes_through_the_api_breaks_the_contract(
        tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    cached = tree / "envcheck" / "dashboard" / "cached.py"
    cached.write_text(cached.read_text() + "\nimport envcheck.api.app  # noqa\n")
    proc = lint(tree)
    assert proc.returncode != 0
    assert "the dashboard reads the store, never the probes or the API server BROKEN" \
        in proc.stdout


def test_no_two_modules_import_each_other() -> None:
    """No cycle of any length between envcheck's modules (function-level imports count)."""
    graph = grimp.build_graph("envcheck", cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain is not None:
                cycles.append(" -> ".join((module, *chain)))
    assert cycles == []


def bench_imports(folder: Path) -> dict[str, set[str]]:
    """Which of the folder's modules each of them imports (function-level imports count).
    The benches run as scripts with their folder on ``sys.path``: ``from common import``."""
    files = {path.stem: path for path in sorted(folder.glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
        graph[name] = found & set(files) - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import that its target imports back, through any chain: ``a -> b -> ... -> a``."""
    def chain(start: str, goal: str) -> list[str] | None:
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            if path[-1] == goal:
                return path
            for step in sorted(graph[path[-1]] - seen):
                seen.add(step)
                paths.append([*path, step])
        return None

    return [" -> ".join((module, *back)) for module in sorted(graph)
            for imported in sorted(graph[module])
            if (back := chain(imported, module)) is not None]


def test_no_two_benches_import_each_other() -> None:
    graph = bench_imports(ROOT / "bench")
    assert graph["catalogue"] >= {"common"} and graph["metrics"] >= {"daemon"}, graph
    assert import_cycles(graph) == []


def test_a_bench_importing_back_is_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "daemon.py").write_text("from common import x\n", encoding="utf-8")
    (tmp_path / "catalogue.py").write_text(
        "import common\n\ndef side():\n    from daemon import running\n", encoding="utf-8")
    (tmp_path / "common.py").write_text("def f():\n    import catalogue.sub\n",
                                        encoding="utf-8")
    assert import_cycles(bench_imports(tmp_path)) == [
        "catalogue -> common -> catalogue",
        "catalogue -> daemon -> common -> catalogue",
        "common -> catalogue -> common",
        "daemon -> common -> catalogue -> daemon",
    ]

