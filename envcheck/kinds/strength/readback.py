"""One file read back from a sandbox whole, or not at all.

``head -c cap+1`` tells a file past ``cap`` from one of ``cap`` bytes; its output is kept in a
:class:`~envcheck.sandbox.base.CappedOutput` twice that size, whose head (half its limit) then
holds every byte read. A file past ``cap`` is "too large", never handed on cut.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from envcheck.sandbox.base import ExecResult, Sandbox

__all__ = ["TOO_LARGE", "UNREADABLE", "ReadBack", "read_back"]

UNREADABLE = "unreadable"
TOO_LARGE = "too large"


@dataclass(frozen=True)
class ReadBack:
    data: bytes | None  # the whole file; None: ``why``
    why: str | None
    result: ExecResult


def read_back(sandbox: Sandbox, path: str, cap: int, *, user: str | None, timeout_s: float,
              shell: str = "sh", cwd: str | None = None) -> ReadBack:
    """``path`` (relative to ``cwd`` if given) read as ``user``, whole up to ``cap`` bytes."""
    script = f'exec head -c {cap + 1} -- "$1"'
    if cwd is not None:
        script = f"cd -- {shlex.quote(cwd)} && {script}"
    read = sandbox.exec([shell, "-c", script, "envcheck", path], user=user,
                        timeout_s=timeout_s, output_limit=2 * (cap + 1))
    if read.exit_code != 0 or read.timed_out:
        return ReadBack(None, UNREADABLE, read)
    if read.output.total > cap:
        return ReadBack(None, TOO_LARGE, read)
    return ReadBack(read.output.head, None, read)
