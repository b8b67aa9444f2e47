"""The layout's rules hold on the real import graph (ARCHITECTURE.md): the contracts in
pyproject.toml are kept, a wrong import breaks them, and no two modules import each other."""

from __future__ import annotations

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
    tables = tree / "envcheck" / "store" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom envcheck.feed import allowlist  # noqa\n")
    proc = lint(tree)
    assert proc.returncode != 0
    assert "stages import only the stages before them BROKEN" in proc.stdout
    assert "envcheck.store.tables -> envcheck.feed.allowlist" in proc.stdout


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
