"""The sandbox interface probe kinds program against, and bounded command output.

A runtime owns the engine; a sandbox is one running container of one environment for one
check cycle. Everything that can hang has a deadline; everything that can flood is capped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from envcheck.catalogue.models import Limits
from envcheck.core.results import CommandEvidence

__all__ = [
    "ENGINE_DEFAULT_CAPABILITIES",
    "BuildOptions",
    "CappedOutput",
    "Change",
    "ExecResult",
    "Sandbox",
    "SandboxRuntime",
    "SandboxSpec",
    "Section",
    "SectionOutput",
    "TtySession",
]


class CappedOutput:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest.

    Memory stays bounded whatever a command prints.
    """

    def __init__(self, limit: int) -> None:
        self._half = max(limit // 2, 1)
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_len += len(data)
        while self._tail_len - len(self._tail[0]) >= self._half:
            self._tail_len -= len(self._tail.popleft())

    @property
    def head(self) -> bytes:
        return bytes(self._head)

    @property
    def tail(self) -> bytes:
        return b"".join(self._tail)[-self._half :]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self.tail)

    def text(self) -> str:
        """Everything kept, as text; a marker stands where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", "replace")
        dropped = self.total - len(self._head) - len(self.tail)
        return f"{head}\n[... {dropped} bytes dropped ...]\n{self.tail.decode('utf-8', 'replace')}"


@dataclass(frozen=True, slots=True)
class Section:
    """A later part of one exec's output: from a line the command prints, starting with
    ``marker``, on. The rest of that line is the section's ``header`` (e.g. the exit code of
    the step before); the section has an output cap of its own and a deadline that starts when
    the marker arrives. An exec costs a process start in the container and engine round
    trips, often more than a step takes: one exec with sections does what several would, each
    step still bounded as if it ran alone."""

    marker: bytes
    timeout_s: float
    output_limit: int = 64 * 1024


@dataclass(frozen=True, slots=True)
class SectionOutput:
    header: str
    output: CappedOutput
    started_s: float  # since the exec began
    duration_s: float


@dataclass(frozen=True, slots=True)
class ExecResult:
    command: str
    exit_code: int | None
    output: CappedOutput  # with sections: the output before the first
    duration_s: float
    first_output_s: float | None = None
    timed_out: bool = False  # with sections: the last one reached ran out of time
    flooded: bool = False
    sections: tuple[SectionOutput, ...] = ()  # those the output reached, in order

    @property
    def text(self) -> str:
        return self.output.text()

    def evidence(self, label: str | None = None) -> CommandEvidence:
        head = self.output.head.decode("utf-8", "replace")
        tail = self.output.tail.decode("utf-8", "replace") if self.output.truncated else ""
        return CommandEvidence(
            command=label or self.command,
            exit_code=self.exit_code,
            duration_s=round(self.duration_s, 4),
            output_head=head,
            output_tail=tail,
            output_bytes=self.output.total,
            truncated=self.output.truncated,
            timed_out=self.timed_out,
        )


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """A build's settings besides its context (a compose service's ``build:``)."""

    dockerfile: str | None = None  # relative to the context; None: its Dockerfile
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    env_id: str
    image: str
    run_id: str
    limits: Limits = field(default_factory=Limits)
    start_timeout_s: float = 20.0
    # Docker network mode. Only the data-source probe's in-sandbox containers ever set it,
    # to a network the catalogue names explicitly; every other sandbox has no network.
    network: str = "none"
    # Capabilities added back after every one is dropped. Empty for envcheck's own probes; a
    # protocol that runs its tasks with the engine's defaults (Harbor) asks for those, so its
    # root verifier can do what it does there (overwrite a file its agent made read-only).
    capabilities: tuple[str, ...] = ()


# What a Docker container gets when nobody drops or adds a capability: the set a harness that
# leaves them alone (Harbor's) runs its tasks with.
ENGINE_DEFAULT_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)


@dataclass(frozen=True, slots=True)
class Change:
    """A path the container's writable layer changed against its image (``docker diff``)."""

    path: str
    kind: str  # "changed", "added" or "deleted"


class TtySession(Protocol):
    """An interactive command on a pseudo-terminal, driven as a tmux-based agent would."""

    def send(self, data: bytes) -> None: ...

    def read_until(self, marker: bytes, timeout_s: float) -> bool:
        """Read until ``marker`` has been seen or the timeout passes; True if seen."""
        ...

    def seen(self) -> bytes:
        """The recent output (a bounded window), to search for markers."""
        ...

    @property
    def transcript(self) -> CappedOutput: ...


class Sandbox(Protocol):
    @property
    def container_id(self) -> str: ...

    @property
    def start_duration_s(self) -> float: ...

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        user: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = 64 * 1024,
        sections: Sequence[Section] = (),
    ) -> ExecResult: ...

    def tty(self, argv: Sequence[str], *, user: str | None = None,
            env: dict[str, str] | None = None) -> AbstractContextManager[TtySession]: ...

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None: ...

    def put_archive(self, directory: str, archive: bytes) -> None:
        """Unpack a tar archive into ``directory`` (which must exist), merging with what is
        there, as ``docker cp SRC/. CONTAINER:DIR`` does."""
        ...

    def changes(self) -> list[Change]:
        """The paths changed, added or deleted against the image, as the engine sees them
        (tmpfs mounts such as /tmp are not in the writable layer: never listed)."""
        ...


class SandboxRuntime(Protocol):
    def ping(self) -> None:
        """Raise :class:`~envcheck.core.errors.EngineUnreachable` if the engine does not answer."""

    def image_digest(self, image: str) -> str:
        """The image's content digest; raise ``ImageMissing`` if it is not on the host."""
        ...

    def sandbox(self, spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        """Start a hardened container for ``spec`` and remove it on exit, whatever happens."""
        ...

    def reap(self) -> int:
        """Remove envcheck's containers left by processes that no longer run."""
        ...


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.end = self.start + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def expired(self) -> bool:
        return self.remaining() <= 0


def iter_lines(text: str) -> Iterator[list[str]]:
    for line in text.splitlines():
        parts = line.strip().split()
        if parts:
            yield parts
