"""The files a script oracle wrote, found in its container, read back, and overwritten.

**Found**: the container's changes against its image (``docker diff``), added or changed
paths only, then regular files only (not a link, not a folder). Left out, and counted: what
the harness itself writes (``/logs``, ``/solution``, ``/tests``, its oracle copy under
``/var``), the system's trees (``/usr``, ``/etc``, ``/var``, ``/lib*``, ``/bin``, ...: an
``apt-get`` or ``pip install`` in the oracle is not its answer), caches and hidden paths
(``__pycache__``, ``.git``, ``.cache``, shell histories), compiled and log files. ``/tmp`` is a
tmpfs, never in the diff. Files under the workdir come first, at most :data:`FILES_MAX`.

**Read back** whole up to :data:`READ_MAX` bytes each (a file past it is left out: its text
would be cut), :data:`TOTAL_MAX` in all; a Python file the image had is read there too, in
a container the oracle never ran in, so its mutants stay on the lines the oracle changed.
**Overwritten** by the engine (a tar copied in), keeping the file's mode and owner, so the
verifier sees the file it would have seen, with one change.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field

from envcheck.core.errors import SandboxFailed
from envcheck.core.results import CommandEvidence, Reason
from envcheck.kinds.strength.model import OutputMutant
from envcheck.kinds.strength.readback import TOO_LARGE, UNREADABLE, read_back
from envcheck.kinds.testvalidity.runs import Problem
from envcheck.sandbox.base import Sandbox

__all__ = ["FILES_MAX", "READ_MAX", "Discovery", "MutantWrite", "Owner", "Written", "overwrite",
           "read_originals", "read_written"]

READ_MAX = 1024 * 1024  # bytes of one file read back
TOTAL_MAX = 8 * 1024 * 1024  # bytes read back in all
FILES_MAX = 20  # files read back at most
CANDIDATES_MAX = 400  # changed paths looked at at most (stat'ed in one command)
_HARNESS = ("/logs", "/solution", "/tests")
_SYSTEM = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
           "/run", "/sbin", "/snap", "/sys", "/tmp", "/usr", "/var")
_CACHES = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})
_SUFFIXES = (".pyc", ".pyo", ".log", ".swp")
_STAT = 'for p; do if [ -f "$p" ] && [ ! -L "$p" ]; then stat -c "%s %a %u %g %n" -- "$p"; fi; done'


@dataclass(frozen=True)
class Owner:
    """What a file is overwritten with besides its content."""

    mode: int
    uid: int
    gid: int


@dataclass
class Written:
    files: dict[str, bytes] = field(default_factory=dict)
    owners: dict[str, Owner] = field(default_factory=dict)
    left_out: Counter[str] = field(default_factory=Counter)  # why -> how many paths
    why: str | None = None  # why they could not be read: the controls are not played
    evidence: list[CommandEvidence] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)  # paths the image had (else: added)
    # the image's content of changed Python files (None: it could not be read whole)
    originals: dict[str, bytes | None] = field(default_factory=dict)

    def wanted(self) -> list[str]:
        """The files whose original the generator needs: Python sources the image had."""
        return sorted(p for p in self.files if p in self.changed and p.endswith(".py"))

    def summary(self) -> dict[str, object]:
        return {"outputs": sorted(self.files), "left_out": dict(sorted(self.left_out.items()))}


@dataclass
class Discovery:
    """The oracle's first run of the wrong-output controls: what it wrote (with why nothing
    can be played, if so), its container runs and what they showed."""

    written: Written = field(default_factory=Written)
    runs: int = 1
    evidence: tuple[CommandEvidence, ...] = ()


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(f"{r}/") for r in roots)


def _left_out(path: str) -> str | None:
    """Why a changed path is not an output of the oracle's, or None if it may be."""
    if _under(path, _HARNESS):
        return "the harness's"
    if _under(path, _SYSTEM):
        return "a system path"
    parts = path.strip("/").split("/")
    if any(p.startswith(".") or p in _CACHES for p in parts):
        return "a cache or hidden path"
    if path.endswith(_SUFFIXES):
        return "compiled or a log"
    return None


def _candidates(sandbox: Sandbox, workdir: str, found: Written) -> list[str]:
    paths = []
    for change in sandbox.changes():
        if change.kind == "deleted":
            found.left_out["deleted"] += 1
            continue
        why = _left_out(change.path)
        if why is not None:
            found.left_out[why] += 1
            continue
        paths.append(change.path)
        if change.kind == "changed":
            found.changed.add(change.path)
    root = workdir.rstrip("/")
    # the workdir's files first: what a task's verifier reads is most often there
    paths.sort(key=lambda p: (not (root == "" or p.startswith(f"{root}/")), p))
    if len(paths) > CANDIDATES_MAX:
        found.left_out["past the paths looked at"] += len(paths) - CANDIDATES_MAX
    return paths[:CANDIDATES_MAX]


def read_written(sandbox: Sandbox, workdir: str, user: str | None, timeout_s: float) -> Written:
    """The files the oracle wrote in ``sandbox`` (after it ran), read as ``user``."""
    found = Written()
    paths = _candidates(sandbox, workdir, found)
    if not paths:
        return found
    listed = sandbox.exec(["sh", "-c", _STAT, "envcheck", *paths], user=user,
                          timeout_s=timeout_s, output_limit=2 * 1024 * 1024)
    found.evidence.append(listed.evidence("wrong-output controls: the files the oracle wrote"))
    if listed.timed_out or listed.output.truncated:
        found.why = "the files the oracle changed could not be listed (stat)"
        return found
    regular = set()
    for line in listed.text.splitlines():
        size, mode, uid, gid, path = (line.split(" ", 4) + [""] * 5)[:5]
        if path in paths and size.isdigit():
            regular.add(path)
            found.owners[path] = Owner(int(mode, 8), int(uid), int(gid))
    found.left_out["not a regular file"] += len(set(paths) - regular)
    total = 0
    for path in [p for p in paths if p in regular]:
        if len(found.files) >= FILES_MAX:
            found.left_out["past the files read"] += 1
            continue
        read = read_back(sandbox, path, READ_MAX, user=user, timeout_s=timeout_s)
        if read.why == UNREADABLE:
            found.left_out["unreadable"] += 1
            found.evidence.append(read.result.evidence(f"read {path}"))
            continue
        got = read.result.output.total
        if read.data is None or total + got > TOTAL_MAX:
            found.left_out[TOO_LARGE] += 1
            continue
        total += got
        found.files[path] = read.data
    return found


def read_originals(sandbox: Sandbox, written: Written, user: str | None,
                   timeout_s: float) -> None:
    """Into ``written.originals``: the image's content of each file :meth:`Written.wanted`
    names, read in ``sandbox``, a container of the image the oracle never ran in."""
    for path in written.wanted():
        written.originals[path] = read_back(sandbox, path, READ_MAX, user=user,
                                            timeout_s=timeout_s).data


def overwrite(sandbox: Sandbox, path: str, content: str, owner: Owner) -> str | None:
    """Write ``content`` over ``path`` with its mode and owner; why it could not be, or None."""
    data = content.encode("utf-8")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(posixpath.basename(path))
        info.size, info.mode, info.mtime = len(data), owner.mode, int(time.time())
        info.uid, info.gid = owner.uid, owner.gid
        tar.addfile(info, io.BytesIO(data))
    try:
        sandbox.put_archive(posixpath.dirname(path) or "/", buf.getvalue())
    except (SandboxFailed, ValueError) as exc:  # the engine refused this one path
        return f"{path} could not be written: {exc}"[:200]
    return None


class MutantWrite:
    """The step that writes one mutant over its file after the oracle ran; ``why`` it could
    not, once it was tried (a problem that ends the run: the mutant proves nothing)."""

    def __init__(self, mutant: OutputMutant, owner: Owner) -> None:
        self.mutant, self.owner = mutant, owner
        self.why: str | None = None

    def __call__(self, sandbox: Sandbox) -> Problem | None:
        self.why = overwrite(sandbox, self.mutant.file, self.mutant.content, self.owner)
        return None if self.why is None else Problem(Reason.ORACLE_FAILED, self.why)
