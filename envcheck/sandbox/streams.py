"""The hijacked exec stream under the docker SDK: the socket, the bytes already read, the
multiplexed frames, and a terminal session read to a marker."""

from __future__ import annotations

import socket
from contextlib import suppress
from typing import Any

from envcheck.sandbox.base import CappedOutput, Deadline

__all__ = ["DockerTty", "close_stream", "drain_frames", "hijacked_stream"]

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


def drain_frames(frames: bytearray, output: CappedOutput) -> None:
    """Docker multiplexes stdout/stderr as frames: 1 byte stream, 3 pad, 4 size, payload."""
    while len(frames) >= 8:
        size = int.from_bytes(frames[4:8], "big")
        if len(frames) < 8 + size:
            return
        output.feed(bytes(frames[8 : 8 + size]))
        del frames[: 8 + size]


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
