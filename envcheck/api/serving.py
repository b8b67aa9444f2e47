"""Serving an app over HTTP with uvicorn: in the foreground until a signal (:func:`serve`), or
from a thread (:class:`ServerThread`, :func:`serve_in_thread`).

The daemon binds its port once (:func:`listen`) and keeps it for its whole life. While it waits
for the store's lease and while it starts, a :class:`ServerThread` answers on it (the status
app: ``/healthz``, ``/readyz``, ``/metrics``); it hands the port over by stopping, which closes
the duplicates it was given and leaves the bound socket listening. A connection that comes
before :func:`serve` takes the socket waits in the kernel's queue and is answered then: the
port never refuses one, and is never bound twice.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from envcheck.core.errors import ConfigError

__all__ = ["DEFAULT_PORT", "ServerThread", "listen", "serve", "serve_in_thread"]

DEFAULT_PORT = 8787
BACKLOG = 2048  # uvicorn's own: connections the kernel queues while nobody accepts


def _config(app: ASGIApp, access_log: bool, **kwargs: Any) -> uvicorn.Config:
    # log_config=None: uvicorn must not replace the host program's logging configuration.
    return uvicorn.Config(app, access_log=access_log, log_config=None, backlog=BACKLOG,
                          server_header=False, timeout_graceful_shutdown=5, **kwargs)


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGINT or SIGTERM makes :meth:`run` *return*.

    uvicorn re-raises the signal after its graceful shutdown; with SIGTERM's default action
    that kills the process before the caller's ``finally`` (stop the scheduler, let probes
    finish, remove their containers) can run.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``host:port``, one per address the host names (as uvicorn binds
    them); a port in use or an address not of this host: :class:`ConfigError`, one line."""
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror} (--host, "
                          f"ENVCHECK_HOST)") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            # proto: IPPROTO_TCP, so asyncio sets TCP_NODELAY (a keep-alive answer would
            # otherwise wait ~40 ms on Nagle and the peer's delayed ACK)
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (--host, "
                          f"--port, ENVCHECK_HOST, ENVCHECK_PORT)") from None
    return sockets


def serve(app: ASGIApp, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
          sockets: Sequence[socket.socket] | None = None, access_log: bool = False) -> None:
    """Serve until SIGINT or SIGTERM, then return after requests in flight are answered
    (blocking; signals are caught only when called from the main thread). ``sockets``: the
    ones :func:`listen` bound (closed on return), else ``host:port`` is bound here."""
    server = _Server(_config(app, access_log, host=host, port=port))
    server.run(sockets=list(sockets) if sockets is not None else None)


class ServerThread:
    """``app`` served from a thread of its own on duplicates of ``sockets``, from
    :meth:`start` until :meth:`stop`, which waits for requests in flight and leaves
    ``sockets`` open and listening (the caller's)."""

    def __init__(self, app: ASGIApp, sockets: Sequence[socket.socket], *,
                 access_log: bool = False, startup_timeout_s: float = 10.0) -> None:
        self._sockets = sockets
        self._server = uvicorn.Server(_config(app, access_log))
        self._startup_timeout_s = startup_timeout_s
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # uvicorn closes the sockets it serves when it stops: duplicates, so ours stay open
        duplicates = [sock.dup() for sock in self._sockets]
        port = self._sockets[0].getsockname()[1] if self._sockets else 0
        thread = threading.Thread(target=self._server.run, kwargs={"sockets": duplicates},
                                  name=f"envcheck-http-{port}", daemon=True)
        self._thread = thread
        thread.start()
        # poll until it listens, or its thread ended (a failed start), or the time is up
        polling = Retrying(retry=retry_if_result(lambda settled: not settled),
                           stop=stop_after_delay(self._startup_timeout_s),
                           wait=wait_fixed(0.01), retry_error_callback=lambda state: False)
        polling(lambda: bool(self._server.started) or not thread.is_alive())
        if not self._server.started:
            self.stop()
            for sock in duplicates:
                sock.close()
            raise RuntimeError(f"the HTTP server did not start on port {port}")

    def stop(self) -> None:
        """Stop answering (requests in flight are answered first); idempotent."""
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(self._startup_timeout_s + 5)
            self._thread = None

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *,
                    access_log: bool = False, startup_timeout_s: float = 10.0
                    ) -> Iterator[str]:
    """Serve from a background thread (``port=0``: any free port); yields the base URL and
    stops the server, waiting for requests in flight, on exit."""
    sockets = listen(host, port)
    try:
        bound = sockets[0].getsockname()[1]
        with ServerThread(app, sockets, access_log=access_log,
                          startup_timeout_s=startup_timeout_s):
            yield f"http://{host}:{bound}" if ":" not in host else f"http://[{host}]:{bound}"
    finally:
        for sock in sockets:
            sock.close()
