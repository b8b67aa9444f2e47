"""Socket proxies in front of real servers, which a test can cut or freeze: a Unix-socket one
before the real Docker engine, a TCP one on 127.0.0.1 before the machine's PostgreSQL.

Through it, envcheck talks to the real server; ``cut()`` makes it vanish mid-cycle exactly as
a crashed dockerd would look to a client: live connections drop, new ones are refused.
``freeze()`` makes it stop answering as a process under SIGSTOP does: connections are still
accepted and what a client sends is taken, but nothing passes either way until ``thaw()``,
when the held bytes go on as the server wakes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

ENGINE = "/var/run/docker.sock"


class SocketProxy:
    """Accepts on ``listener`` and pipes each connection to a new one from ``connect``."""

    def __init__(self, listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
        self._listener = listener
        self._connect = connect
        self._listener.listen(64)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, name="engine-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._intercept(client):
                continue
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._cut.is_set():  # cut while this one was being accepted: drop it
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _intercept(self, client: socket.socket) -> bool:
        """Whether a subclass took ``client`` over (answered it itself): then it is not piped."""
        return False

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                self._flowing.wait()  # frozen: taken, held, not passed on
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def freeze(self) -> None:
        """The server stops answering, its connections open: nothing passes until thaw."""
        self._flowing.clear()

    def thaw(self) -> None:
        """The server wakes: what was held goes on, and everything after it."""
        self._flowing.set()

    def cut(self) -> None:
        """The server is gone: drop every connection and refuse new ones."""
        self._cut.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()
        self._flowing.set()  # what a frozen pipe held meets a closed socket: its thread ends
        # leave the socket file behind, as a crashed engine does: connecting is refused
        self._thread.join(timeout=5)

    def close(self) -> None:
        if not self._cut.is_set():
            self.cut()


class EngineProxy(SocketProxy):
    """A Unix socket at ``path`` before the engine's."""

    def __init__(self, path: Path, engine: str = ENGINE) -> None:
        self.path = path
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))

        def connect() -> socket.socket:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(engine)
            except OSError:
                upstream.close()
                raise
            return upstream

        super().__init__(listener, connect)

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def close(self) -> None:
        super().close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class TcpProxy(SocketProxy):
    """A port of its own on 127.0.0.1 (``listen``, or any free one) before a server's port
    there."""

    def __init__(self, port: int, listen: int = 0) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart's port
        listener.bind(("127.0.0.1", listen))
        self.port: int = listener.getsockname()[1]

        def connect() -> socket.socket:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
            upstream.settimeout(None)  # an idle connection waits as long as its client does
            return upstream

        super().__init__(listener, connect)


class TcpServer:
    """A server's port on 127.0.0.1 behind a proxy that can be cut (the server stops: live
    connections drop, new ones are refused) and restored (it starts again at the same
    port)."""

    def __init__(self, port: int) -> None:
        self._upstream = port
        self.proxy = TcpProxy(port)
        self.port = self.proxy.port

    def cut(self) -> None:
        self.proxy.cut()

    def restore(self) -> None:
        self.proxy.close()
        self.proxy = TcpProxy(self._upstream, listen=self.port)

    def close(self) -> None:
        self.proxy.close()
