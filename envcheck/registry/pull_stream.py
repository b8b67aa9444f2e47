"""One pull's stream read to a deadline: docker-py's ``api.pull(..., stream=True,
decode=True)`` consumed in a thread of its own, its progress counted, its ``error`` events
classified, and the connection shut at the deadline so that the engine cancels the pull.

Why a thread and a socket shutdown: docker-py posts ``/images/create`` with no timeout, and
the engine writes nothing (not even the response's headers) while the registry hangs on the
manifest, nor while it hangs mid-blob; a blocked read is only woken by shutting its socket.
Closing the connection is the engine's one cancel signal for a pull ("context canceled"):
the layers it had are dropped and no image is recorded.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
import requests

from envcheck.registry.engine_failures import (
    EngineFailure,
    classify_api_error,
    classify_event,
    engine_gone,
)

__all__ = ["Progress", "StreamOutcome", "read_pull_stream"]

log = logging.getLogger("envcheck.registry.pull")

# After the deadline, how long the reading thread gets to notice its shut socket and end.
CANCEL_GRACE_S = 10.0


@dataclass
class Progress:
    """Bytes the engine reported downloading, per layer (``Downloading`` events' ``current``,
    the layer's ``total`` once it completes); layers it already had count nothing."""

    layers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (current, total)
    done: set[str] = field(default_factory=set)
    events: int = 0

    def note(self, event: dict[str, Any]) -> None:
        self.events += 1
        layer = str(event.get("id") or "")
        status = str(event.get("status") or "")
        detail = event.get("progressDetail") or {}
        if not layer:
            return
        if status == "Downloading" and isinstance(detail, dict):
            current, total = int(detail.get("current") or 0), int(detail.get("total") or 0)
            seen = self.layers.get(layer, (0, 0))
            self.layers[layer] = (max(current, seen[0]), max(total, seen[1]))
        elif status in ("Download complete", "Pull complete"):
            current, total = self.layers.get(layer, (0, 0))
            if layer in self.layers:
                self.layers[layer] = (max(current, total), total)
            self.done.add(layer)

    @property
    def downloaded(self) -> int:
        return sum(current for current, _ in self.layers.values())

    @property
    def total(self) -> int:
        return sum(total for _, total in self.layers.values())


@dataclass
class StreamOutcome:
    """How one read of a pull's stream ended: ``failure`` set when the engine reported one,
    ``timed_out`` when the deadline cut it, ``completed`` when the stream ended cleanly."""

    progress: Progress
    seconds: float
    failure: EngineFailure | None = None
    timed_out: bool = False
    completed: bool = False
    error: BaseException | None = None  # the engine itself failed (not the registry)


def read_pull_stream(start: Callable[[], Iterator[Any]], deadline: float, *,
                     what: str, log_every_s: float = 5.0) -> StreamOutcome:
    """Run ``start()`` (a call of ``api.pull(..., stream=True, decode=True)``) and read its
    events in a thread until the stream ends or ``deadline`` (``time.monotonic()``) passes."""
    begun = time.monotonic()
    outcome = StreamOutcome(Progress(), 0.0)
    cancelled = threading.Event()

    def read() -> None:
        stream: Any = None
        last_log = begun
        try:
            stream = start()
            for event in stream:
                if cancelled.is_set():
                    return
                if not isinstance(event, dict):
                    continue
                failure = classify_event(event)
                if failure is not None:
                    outcome.failure = failure
                    return
                outcome.progress.note(event)
                now = time.monotonic()
                if now - last_log >= log_every_s:  # bounded: one line per interval
                    last_log = now
                    log.info("pull progress", extra={
                        "image": what, "downloaded_bytes": outcome.progress.downloaded,
                        "layer_bytes": outcome.progress.total,
                        "layers": len(outcome.progress.layers),
                        "layers_done": len(outcome.progress.done)})
            outcome.completed = not cancelled.is_set()
        except docker.errors.APIError as exc:
            if not cancelled.is_set():
                outcome.failure = classify_api_error(exc)
        except Exception as exc:
            if not cancelled.is_set():
                gone = engine_gone(exc)
                outcome.error = gone if gone is not None else exc
        finally:
            if stream is not None:
                _close(stream)

    reader = threading.Thread(target=read, name="envcheck-pull", daemon=True)
    reader.start()
    reader.join(max(deadline - time.monotonic(), 0.0))
    if reader.is_alive():
        cancelled.set()
        outcome.timed_out = True
        _cancel(reader)
    outcome.seconds = time.monotonic() - begun
    return outcome


def _close(stream: Any) -> None:
    """End a pull's stream read or left early (an error event, a cancel): its response is
    closed, and with it the connection (closing the generator alone leaves the socket to the
    garbage collector, and an unread response to the engine)."""
    generator = stream
    while generator is not None:
        frame = getattr(generator, "gi_frame", None)
        if frame is not None:
            for value in list(frame.f_locals.values()):
                if isinstance(value, requests.Response):
                    with contextlib.suppress(Exception):
                        value.close()
        generator = getattr(generator, "gi_yieldfrom", None)
    with contextlib.suppress(Exception):
        stream.close()


def _cancel(reader: threading.Thread) -> None:
    """Shut the sockets ``reader`` is blocked on until it ends (a read it had not begun when
    first looked at is caught on a later look), within ``CANCEL_GRACE_S``."""
    give_up = time.monotonic() + CANCEL_GRACE_S
    while reader.is_alive() and time.monotonic() < give_up:
        _shut_sockets_of(reader)
        reader.join(0.2)
    if reader.is_alive():
        log.warning("a cancelled pull's reader did not end", extra={"thread": reader.name})


def _shut_sockets_of(thread: threading.Thread) -> int:
    """Shut down every socket the frames of ``thread`` hold: the pull's one connection to the
    engine, whether it waits for the response's headers or for the next chunk. docker-py
    keeps that connection in local variables only; the reading thread does nothing else, so
    any socket on its stack is the pull's."""
    frame = sys._current_frames().get(thread.ident or -1)
    shut: set[int] = set()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            sock = _socket_in(value)
            if sock is not None and id(sock) not in shut:
                shut.add(id(sock))
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        frame = frame.f_back
    return len(shut)


def _socket_in(value: object) -> socket.socket | None:
    """The socket ``value`` is or directly wraps: a socket, the file object a response reads
    (``socket.SocketIO``), an HTTP connection (http.client's, urllib3's, docker-py's)."""
    if isinstance(value, socket.socket):
        return value
    if isinstance(value, socket.SocketIO):
        inner = getattr(value, "_sock", None)
        return inner if isinstance(inner, socket.socket) else None
    if isinstance(value, http.client.HTTPConnection):
        inner = getattr(value, "sock", None)
        return inner if isinstance(inner, socket.socket) else None
    return None
