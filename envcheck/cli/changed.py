"""``envcheck check --changed-since REF``: only the environments a change touched.

The catalogue is read twice: as it is now (the working tree) and as it was at REF, written out
by git into a temporary folder through a temporary index (``git read-tree`` then
``git checkout-index``: the repository's own index, work tree and worktree list are never
touched, and a checkout's filters apply as they do to the work tree). The two loads are
compared environment by environment on what each resolved to
(:func:`envcheck.catalogue.changes.compare`); a Harbor task folder with any file changed since
REF (tracked or new) is selected too, its ``environment/`` being its image's build context.
Every git command runs within a timeout; a REF git does not know, or a catalogue outside the
repository, is bad input (exit 2).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.markup import escape

from envcheck.cli.common import EXIT_USAGE, err

if TYPE_CHECKING:
    from envcheck.catalogue.models import Catalogue, Environment

__all__ = ["CHECKOUT_TIMEOUT_S", "GIT_TIMEOUT_S", "ChangedSince", "Selection", "select_changed"]

ChangedSince = Annotated[str | None, typer.Option(
    "--changed-since", metavar="REF",
    help="check only the environments whose resolved definition changed since the git REF, "
         "and Harbor task folders with a changed file (a pull request's base: "
         "origin/main)")]

GIT_TIMEOUT_S = 60.0  # one look-up (rev-parse, diff, ls-files)
CHECKOUT_TIMEOUT_S = 600.0  # writing REF's tree out: a dataset repository may be large
# git's own variables that would point its commands elsewhere than the catalogue's repository
_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_COMMON_DIR", "GIT_NAMESPACE")


@dataclass(frozen=True)
class Selection:
    """The environments to check and why, one line each (added, changed and how, removed)."""

    ref: str
    commit: str
    selected: tuple[Environment, ...]
    lines: tuple[str, ...]
    total: int

    def heading(self) -> str:
        at = f"--changed-since {self.ref} ({self.commit[:10]})"
        if not self.selected:
            return f"{at}: no environment changed, nothing to check"
        return f"{at}: {len(self.selected)} of {self.total} environment(s) selected"


def _bad(message: str) -> NoReturn:
    err.print(f"[red]error[/red] --changed-since: {escape(message)}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(EXIT_USAGE)


def _git(root: Path, *args: str, timeout: float = GIT_TIMEOUT_S,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if k not in _GIT_VARS}
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              timeout=timeout, env={**clean, **(env or {})}, check=False)
    except FileNotFoundError:
        _bad("git is not installed (it reads the catalogue as it was at REF)")
    except subprocess.TimeoutExpired:
        _bad(f"git {args[0]} took more than {timeout:g}s")


def _repository(paths: Sequence[Path]) -> Path:
    first = paths[0] if paths[0].is_dir() else paths[0].parent
    done = _git(first.resolve(), "rev-parse", "--show-toplevel")
    if done.returncode:
        _bad(f"{paths[0]} is not in a git repository")
    return Path(done.stdout.decode().strip()).resolve()


def _tree_at(root: Path, commit: str, into: Path) -> None:
    """REF's tree written under ``into`` through a temporary index."""
    index = {"GIT_INDEX_FILE": str(into / ".index")}
    for args in (("read-tree", commit), ("checkout-index", "-a", "-f", f"--prefix={into}/tree/")):
        done = _git(root, *args, timeout=CHECKOUT_TIMEOUT_S, env=index)
        if done.returncode:
            _bad(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")


def _changed_files(root: Path, commit: str) -> list[str]:
    """Files that differ from ``commit`` in the work tree (tracked), and new untracked ones,
    relative to ``root``."""
    found: list[str] = []
    for args in (("diff", "--name-only", "--no-renames", "-z", commit, "--"),
                 ("ls-files", "-z", "--others", "--exclude-standard")):
        done = _git(root, *args)
        if done.returncode:
            _bad(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
        found.extend(p for p in done.stdout.decode(errors="surrogateescape").split("\0") if p)
    return found


def _before(root: Path, commit: str, paths: Sequence[Path], scratch: Path
            ) -> tuple[Catalogue | None, str]:
    """The catalogue at ``commit`` (empty when none of its files existed then), or None and
    why it did not load."""
    from envcheck.catalogue.loader import load_catalogue
    from envcheck.catalogue.models import Catalogue
    from envcheck.core.errors import CatalogueError

    _tree_at(root, commit, scratch)
    then = []
    for path in paths:
        try:
            relative = path.resolve().relative_to(root)
        except ValueError:
            _bad(f"{path} is outside the repository {root}")
        if (scratch / "tree" / relative).exists():
            then.append(scratch / "tree" / relative)
    if not then:
        return Catalogue(suites=(), environments=(), data_sources=(), files=()), ""
    try:
        return load_catalogue(then), ""
    except CatalogueError as exc:
        return None, f"the catalogue at the ref does not load ({len(exc.issues)} problem(s))"


def select_changed(paths: Sequence[Path], catalogue: Catalogue, ref: str) -> Selection:
    """The environments of ``catalogue`` (read from ``paths`` now) that changed since ``ref``."""
    from envcheck.catalogue.changes import compare

    root = _repository(paths)
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode:
        _bad(f"git does not know {ref!r} (a shallow clone? fetch the base first)")
    commit = done.stdout.decode().strip()
    with tempfile.TemporaryDirectory(prefix="envcheck-changed-") as scratch:
        before, why = _before(root, commit, paths, Path(scratch))
    what: dict[str, list[str]] = {}  # environment id -> what changed, in words
    added: set[str] = set()
    removed: list[str] = []
    if before is None:
        what = {env.id: [why] for env in catalogue.environments}
    else:
        changes, removed = compare(before, catalogue)
        for change in changes:
            what[change.env_id] = [", ".join(change.keys)] if change.keys else []
            if change.added:
                added.add(change.env_id)
    changed = _changed_files(root, commit)
    for env in catalogue.environments:
        files = _task_files(env, root, changed)
        if files and env.id not in added:
            what.setdefault(env.id, []).append(f"task files {', '.join(files)}")
    selected = tuple(env for env in catalogue.environments if env.id in what)
    lines = [f"added    {env.id}" if env.id in added else
             f"changed  {env.id}: {'; '.join(what[env.id])}" for env in selected]
    lines += [f"removed  {env_id} (not checked)" for env_id in removed]
    return Selection(ref, commit, selected, tuple(lines), len(catalogue.environments))


def _task_files(env: Environment, root: Path, changed: list[str]) -> list[str]:
    """The changed files of ``env``'s Harbor task folder, relative to it."""
    if env.harbor is None:
        return []
    try:
        folder = Path(env.harbor.task_dir).resolve().relative_to(root).as_posix()
    except ValueError:  # a task folder outside the repository: no file of it is tracked
        return []
    prefix = f"{folder}/"
    return [f[len(prefix):] for f in changed if f.startswith(prefix)]
