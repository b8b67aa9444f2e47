"""Which entries of a Harbor task's ``tests/`` and ``solution/`` Harbor copies into the
container, mirrored from Harbor 0.26.0 (``models/task/file_filter.py``,
``utils/file_selection.py``, ``utils/path_safety.py``; 0.25.0 selects the same entries):

- every entry must stay inside the task folder once symlinks are resolved, and directory links
  must not form cycles, or Harbor refuses the task (0.24.0 checks the same, without rules);
- from 0.25.0, ``.harborignore`` files inside ``tests/`` and ``solution/`` (and their
  sub-folders) hold Git ignore patterns relative to their own folder; a folder's rules are
  inherited by the folders below it, a later match (``!pattern`` included) wins, an excluded
  folder is skipped whole, and a ``.harborignore`` file is never copied itself. A
  ``.harborignore`` elsewhere in the task has no effect. ``test.sh`` and ``solve.sh`` must not
  be excluded;
- 0.24.0 copies every entry.

Pure: no container. The catalogue checks a task's folders at load and the probe selects again
at each run (the folder as it is then).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pathspec import GitIgnoreSpec

__all__ = ["IGNORE_FILENAME", "TaskFileFilter", "TaskInputError", "select_inputs"]

IGNORE_FILENAME = ".harborignore"
_SCOPES = GitIgnoreSpec.from_lines(("/tests/", "/solution/", "/steps/*/tests/",
                                    "/steps/*/solution/"))


class TaskInputError(ValueError):
    """Harbor would refuse the task's input folder: the message says why, as Harbor does."""


def _validate_input_tree(path: Path, root: Path,
                         exclude: Callable[[Path], bool] | None = None) -> None:
    """Every input, descendants of task-internal directory links included, resolves inside
    ``root`` (Harbor's ``validate_input_tree``)."""
    root = root.resolve()
    checked: set[Path] = set()

    def visit(candidate: Path, ancestors: frozenset[Path]) -> None:
        if exclude is not None and exclude(candidate):
            return
        resolved = candidate.resolve()
        if not resolved.is_relative_to(root):
            raise TaskInputError(f"Input paths must stay within the task: {candidate}")
        if not candidate.is_dir():
            return
        if resolved in ancestors:
            raise TaskInputError(f"Input directory links must not form cycles: {candidate}")
        if exclude is None and resolved in checked:
            return
        for child in candidate.iterdir():
            visit(child, ancestors | {resolved})
        checked.add(resolved)

    visit(path, frozenset())


class TaskFileFilter:
    """The task's ``.harborignore`` rules (Harbor's ``TaskFileFilter``)."""

    def __init__(self, task_dir: Path) -> None:
        self.task_dir = task_dir.resolve()
        self._specs: dict[Path, GitIgnoreSpec] = {}

    def _rules(self, directory: Path) -> GitIgnoreSpec | None:
        """The folder's own rules; None outside the folders rules apply in."""
        relative = directory.relative_to(self.task_dir)
        if not _SCOPES.match_file(relative.as_posix() + "/"):
            return None
        if directory in self._specs:
            return self._specs[directory]
        path = directory / IGNORE_FILENAME
        _validate_input_tree(path, self.task_dir)
        if (path.exists() or path.is_symlink()) and not path.is_file():
            raise TaskInputError(f"Ignore rules must be a regular file: {path}")
        try:
            patterns = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        except UnicodeDecodeError as exc:
            raise TaskInputError(f"Ignore rules are not UTF-8 text ({exc.reason} at byte "
                                 f"{exc.start}): {path}") from None
        spec = GitIgnoreSpec.from_lines(patterns)
        self._specs[directory] = spec
        return spec

    def _matches(self, path: Path) -> bool:
        relative = path.relative_to(self.task_dir)
        if relative.name == IGNORE_FILENAME:
            return True
        suffix = "/" if path.is_dir() else ""
        if not _SCOPES.match_file(relative.as_posix() + suffix):
            return False
        specs: list[tuple[Path, GitIgnoreSpec]] = []
        candidate = self.task_dir
        for part in relative.parts:
            spec = self._rules(candidate)
            if spec is not None:
                specs.append((candidate, spec))
            candidate /= part
            suffix = "/" if candidate != path or path.is_dir() else ""
            if not _SCOPES.match_file(candidate.relative_to(self.task_dir).as_posix() + suffix):
                continue
            excluded = False
            for directory, rules in specs:
                match = rules.check_file(candidate.relative_to(directory).as_posix() + suffix)
                if match.include is not None:
                    excluded = match.include
            if excluded:
                return True
        return False

    def is_excluded(self, path: Path) -> bool:
        """The path, or the task-internal target of a link, is excluded."""
        path = Path(os.path.abspath(path))
        if not path.is_relative_to(self.task_dir):
            return False
        if self._matches(path):
            return True
        resolved = path.resolve()
        return resolved != path and resolved.is_relative_to(self.task_dir) \
            and self._matches(resolved)

    def require_included(self, path: Path) -> None:
        if self.is_excluded(path):
            relative = Path(os.path.abspath(path)).relative_to(self.task_dir)
            raise TaskInputError(f"Required task input is excluded by {IGNORE_FILENAME}: "
                                 f"{relative.as_posix()}")


def _select(source: Path, exclude: Callable[[Path], bool] | None) -> tuple[str, ...]:
    """Entries under ``source`` (relative, POSIX), as Harbor visits them: sorted per folder,
    an excluded folder's subtree skipped, links never followed."""
    if exclude is not None and exclude(source):
        return ()
    kept: list[str] = []

    def visit(directory: Path) -> None:
        for path in sorted(directory.iterdir()):
            if exclude is not None and exclude(path):
                continue
            kept.append(path.relative_to(source).as_posix())
            if path.is_dir() and not path.is_symlink():
                visit(path)

    visit(source)
    return tuple(kept)


def select_inputs(task_dir: Path, folder: str, required: str, *,
                  ignore_rules: bool) -> tuple[str, ...]:
    """The entries of ``task_dir/folder`` Harbor copies (relative to it), its ``required``
    script (``test.sh``, ``solve.sh``) among them; ``ignore_rules``: apply ``.harborignore``
    (Harbor 0.25.0 on). Raises :class:`TaskInputError` where Harbor refuses the folder."""
    root = task_dir.resolve()
    source = root / folder
    if not source.is_dir():
        raise TaskInputError(f"Source directory {source} does not exist")
    if not ignore_rules:
        _validate_input_tree(source, root)
        return _select(source, None)
    rules = TaskFileFilter(root)
    rules.require_included(source / required)
    _validate_input_tree(source, root, rules.is_excluded)
    return _select(source, rules.is_excluded)
