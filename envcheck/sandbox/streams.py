"""The hijacked exec stream under the docker SDK: the socket, the bytes already read, the
multiplexed frames, and a terminal session read to a marker."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Protocol

from envcheck.sandbox.base import CappedOutput, Deadline, Section, SectionOutput

__all__ = ["DockerTty", "Sections", "close_stream", "drain_frames", "hijacked_stream"]

HEADER_MAX = 256  # a marker line's rest, kept as its section's header

RECV = 64 * 1024


def hijacked_stream(sock: Any) -> tuple[socket.socket, bytes]:
    """The real socket under the SDK's exec stream, and the bytes its HTTP client already
    read past the response headers.

    Private attributes, on purpose and only here: ``exec_start(socket=True)`` hands back the
    read-only ``SocketIO`` under the HTTP response (``._sock`` is the socket we can send on,
    set a timeout on and close), and a fast command's output can arrive with the headers,
    where it sits in the response's buffer (``._response.raw._fp.fp``) above that socket and
    would be lost (docker-py issues #425 and #3332: the SDK offers no public way to do either).
    ``tests/test_sandbox.py`` checks this chain on a real exec, so an SDK that changes it
    fails there, not in a probe.
    """
    raw = getattr(sock, "_sock", sock)
    try:
        reader = sock._response.raw._fp.fp
    except AttributeError:
        return raw, b""
    timeout = raw.gettimeout()
    raw.settimeout(0.0)
    try:
        return raw, bytes(reader.read1(RECV) or b"")
    except OSError:  # nothing buffered, and the socket has nothing ready either
        return raw, b""
    finally:
        raw.settimeout(timeout)


def close_stream(sock: Any, raw: socket.socket) -> None:
    """Close the hijacked exec stream; the SDK's wrapper alone leaves the socket open."""
    with suppress(OSError):
        raw.close()
    with suppress(OSError):
        sock.close()


class _Sink(Protocol):
    def feed(self, data: bytes) -> None: ...


def drain_frames(frames: bytearray, output: _Sink) -> None:
    """Docker multiplexes stdout/stderr as frames: 1 byte stream, 3 pad, 4 size, payload."""
    while len(frames) >= 8:
        size = int.from_bytes(frames[4:8], "big")
        if len(frames) < 8 + size:
            return
        output.feed(bytes(frames[8 : 8 + size]))
        del frames[: 8 + size]


class Sections:
    """An exec's output handed to the part it belongs to: the main output, then each section
    from its marker line on. A marker split across reads is found all the same (the bytes
    that could begin one are held back until the next read or :meth:`finish`)."""

    def __init__(self, main: CappedOutput, sections: Sequence[Section]) -> None:
        self._sections = list(sections)
        self._parts = [main]
        self._starts: list[float] = []
        self._headers: list[str] = []
        self._pending = bytearray()
        self._in_header = False
        self.total = 0

    @property
    def opened(self) -> int:
        """How many sections the output has reached."""
        return len(self._starts)

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._pending += data
        while self._pending:
            if self._in_header:
                end = self._pending.find(b"\n")
                if end < 0 and len(self._pending) < HEADER_MAX:
                    return
                cut = end if end >= 0 else HEADER_MAX
                self._headers.append(self._pending[:cut].decode("utf-8", "replace").strip())
                del self._pending[:cut + (end >= 0)]
                self._in_header = False
                continue
            if self.opened == len(self._sections):
                self._parts[-1].feed(bytes(self._pending))
                self._pending.clear()
                return
            section = self._sections[self.opened]
            at = self._pending.find(section.marker)
            if at < 0:
                ready = len(self._pending) - (len(section.marker) - 1)
                if ready > 0:
                    self._parts[-1].feed(bytes(self._pending[:ready]))
                    del self._pending[:ready]
                return
            self._parts[-1].feed(bytes(self._pending[:at]))
            del self._pending[:at + len(section.marker)]
            self._starts.append(time.monotonic())
            self._parts.append(CappedOutput(section.output_limit))
            self._in_header = True

    def finish(self, began: float) -> tuple[SectionOutput, ...]:
        """The sections reached, once the output has ended (``began``: the exec's start)."""
        if self._in_header:
            self._headers.append(self._pending.decode("utf-8", "replace").strip())
        else:
            self._parts[-1].feed(bytes(self._pending))
        self._pending.clear()
        ends = [*self._starts[1:], time.monotonic()][:self.opened]
        return tuple(SectionOutput(header, part, start - began, end - start)
                     for header, part, start, end in zip(self._headers, self._parts[1:],
                                                         self._starts, ends, strict=True))


class DockerTty:
    def __init__(self, raw: Any, limit: int = 64 * 1024, initial: bytes = b"") -> None:
        self._raw = raw
        self._seen = bytearray(initial)
        self._transcript = CappedOutput(limit)
        self._transcript.feed(initial)

    @property
    def transcript(self) -> CappedOutput:
        return self._transcript

    def send(self, data: bytes) -> None:
        self._raw.settimeout(5.0)
        self._raw.sendall(data)

    def read_until(self, marker: bytes, timeout_s: float) -> bool:
        deadline = Deadline(timeout_s)
        while marker not in self._seen:  # reads to a deadline, not a retry
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            self._raw.settimeout(min(remaining, 1.0))
            try:
                chunk = self._raw.recv(RECV)
            except TimeoutError:
                continue
            if not chunk:
                return marker in self._seen
            self._transcript.feed(chunk)
            # keep a bounded window to search in
            self._seen = (self._seen + chunk)[-(256 * 1024) :]
        return True

    def seen(self) -> bytes:
        return bytes(self._seen)
