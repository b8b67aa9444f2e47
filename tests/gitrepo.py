"""A real git repository in a temporary folder, for the tests that check a candidate patch
applies to its base the way the sandbox applies it (``git apply``, ``patch``), and for the
tests of what envcheck reads from a repository's history (``check --changed-since``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

__all__ = ["GitRepo"]

_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null",
        "PATH": "/usr/local/bin:/usr/bin:/bin"}


class GitRepo:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    @classmethod
    def cloned(cls, source: GitRepo, root: Path) -> GitRepo:
        """A clone of ``source`` at ``root`` (``source`` its remote ``origin``)."""
        repo = cls.__new__(cls)
        repo.root = root
        source.git("clone", "-q", str(source.root), str(root))
        return repo

    def run(self, *cmd: str, stdin: str | None = None, check: bool = True,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``cmd``'s output as text with its carriage returns kept (``text=True`` would
        read CRLF as LF, and a patch of a CRLF file would lose them)."""
        done = subprocess.run(list(cmd), cwd=cwd or self.root, capture_output=True,
                              input=None if stdin is None else stdin.encode(), timeout=60,
                              env=_ENV, check=False)
        out = subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                          done.stderr.decode())
        if check and done.returncode:
            raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}: {out.stderr}")
        return out

    def git(self, *args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        return self.run("git", *args, stdin=stdin, check=check)

    def write(self, files: Mapping[str, str]) -> None:
        for path, text in files.items():
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode())

    def commit(self, files: Mapping[str, str], message: str = "c") -> str:
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").stdout.strip()

    def read(self, path: str) -> str:
        return (self.root / path).read_bytes().decode()

    def apply_check(self, patch: str) -> subprocess.CompletedProcess[str]:
        return self.git("apply", "--check", "-", stdin=patch, check=False)

    def applied(self, patch: str, folder: Path) -> Path:
        """A copy of the work tree (clean, at HEAD) with ``patch`` applied by ``git apply``
        (AssertionError with git's message if it does not apply)."""
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(self.root, folder, ignore=shutil.ignore_patterns(".git"))
        self.run("git", "apply", "-", stdin=patch, cwd=folder)
        return folder

    def patch_dry_run(self, patch: str) -> subprocess.CompletedProcess[str]:
        return self.run("patch", "--batch", "-p1", "--dry-run", stdin=patch, check=False)
