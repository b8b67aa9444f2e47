"""The image cache's decisions taken one at a time across processes, and who a pull under way
belongs to.

Worker processes on one host (a Ray node's, or a daemon beside an ``envcheck check``) share
one engine and its ledger (``image-cache/<engine id>.db``). Each decides on its own whether a
pull fits the budget and what to evict for it; two deciding at once could both find room for
their pull and pass the budget together. :class:`DecisionLock` is an ``flock`` on a file
beside the ledger (``<ledger>.lock``), taken around each such decision (room reserved for a
pull, evictions) and released before the pull itself: the kernel drops it when the process
ends, SIGKILL included. Inside a process it is re-entrant and its threads take turns.

A pull's reserved room is written in the ledger with its owner (:func:`this_process`), so the
other processes count it until the pull ends; a reservation whose owner is gone (the process
died mid-pull: its pid is no longer the process that wrote it) counts for nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from envcheck.core.errors import RegistryFailed
from envcheck.core.results import Reason

__all__ = ["DEFAULT_TIMEOUT_S", "DecisionLock", "alive", "this_process"]

DEFAULT_TIMEOUT_S = 120.0  # an eviction pass (a /system/df, a few removals) takes far less
_POLL_S = 0.05


def _started(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (Linux's ``/proc``), so that a
    pid reused by another process is not taken for the one that wrote a reservation."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def this_process() -> str:
    """Who this process is, as a reservation names it: ``host:pid:start``."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_started(pid) or ''}"


def alive(owner: str) -> bool:
    """Whether the process an owner names runs still. One of another host (a data directory
    shared between hosts) cannot be asked: it counts as alive, and its reservation ends with
    its deadline."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid: not ours
        return _started(pid) == start if start else True
    return not start or _started(pid) == start


class DecisionLock:
    """An ``flock`` on ``path`` (created if missing), re-entrant within a process, waited for
    at most ``timeout_s``; past it the decision is not taken (``error image_cache_full``:
    envcheck's, naming the lock)."""

    def __init__(self, path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._local = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        deadline = time.monotonic() + self.timeout_s
        if not self._local.acquire(timeout=self.timeout_s):
            raise self._timeout()
        try:
            if self._depth == 0:
                self._lock_file(deadline)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._unlock_file()
        finally:
            self._local.release()

    def _lock_file(self, deadline: float) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._timeout() from None
                    time.sleep(_POLL_S)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _unlock_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _timeout(self) -> RegistryFailed:
        return RegistryFailed(f"the image cache's lock {self.path} was held by another process "
                              f"for more than {self.timeout_s:g} s: no room could be decided",
                              reason=Reason.IMAGE_CACHE_FULL,
                              details={"lock": str(self.path), "waited_s": self.timeout_s})
