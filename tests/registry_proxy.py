"""A fault proxy before the test registry: a port of its own on 127.0.0.1 that passes
everything through to the real registry until told to misbehave:

- ``refuse()``: the registry is gone (live connections dropped, new ones refused);
- ``hang()``: connections are accepted and requests taken, nothing comes back (``thaw()``);
- ``answer(status, ...)``: each request gets this HTTP answer instead of the registry's (a 429
  with ``Retry-After`` and the rate-limit headers, a 500 with text), ``times`` times or until
  ``passthrough()``.

Switching to a fault drops the connections a client keeps alive, so the next request meets
the fault rather than slipping through a pooled connection opened before it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tests.engine_proxy import TcpProxy

__all__ = ["RegistryProxy", "ThrottledProxy", "too_many_requests"]

_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable", 401: "Unauthorized", 404: "Not Found"}


def too_many_requests(retry_after: str = "30", remaining: str | None = "0;w=21600"
                      ) -> tuple[int, dict[str, str], bytes]:
    """Docker Hub's pull-limit answer: 429, ``Retry-After``, the rate-limit headers and the
    distribution error body with ``TOOMANYREQUESTS``."""
    headers = {"Retry-After": retry_after, "Content-Type": "application/json",
               "ratelimit-limit": "100;w=21600"}
    if remaining is not None:
        headers["ratelimit-remaining"] = remaining
    body = (b'{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate '
            b'limit. You may increase the limit by authenticating and upgrading"}]}')
    return 429, headers, body


class RegistryProxy(TcpProxy):
    """``host`` (``127.0.0.1:port``) is what a client names instead of the registry's."""

    def __init__(self, registry_port: int) -> None:
        super().__init__(registry_port)
        self.host = f"127.0.0.1:{self.port}"
        self._answer: tuple[int, dict[str, str], bytes] | None = None
        self._answers_left: int | None = None
        self._answer_lock = threading.Lock()
        self.answered = 0

    def answer(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"",
               *, times: int | None = None) -> None:
        with self._answer_lock:
            self._answer = (status, dict(headers or {}), body)
            self._answers_left = times
        self._drop_live()

    def passthrough(self) -> None:
        with self._answer_lock:
            self._answer = None
        self.thaw()

    def hang(self) -> None:
        self._drop_live()
        self.freeze()

    def refuse(self) -> None:
        self.cut()

    def _drop_live(self) -> None:
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _intercept(self, client: socket.socket) -> bool:
        with self._answer_lock:
            canned = self._answer
            if canned is None:
                return False
            if self._answers_left is not None:
                self._answers_left -= 1
                if self._answers_left <= 0:
                    self._answer = None
            self.answered += 1
        threading.Thread(target=self._reply, args=(client, canned), daemon=True).start()
        return True

    @staticmethod
    def _reply(client: socket.socket, canned: tuple[int, dict[str, str], bytes]) -> None:
        status, headers, body = canned
        with contextlib.suppress(OSError), client:
            client.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            method = head.split(b" ", 1)[0]
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
                     f"Content-Length: {len(body)}", "Connection: close",
                     *(f"{k}: {v}" for k, v in headers.items())]
            payload = ("\r\n".join(lines) + "\r\n\r\n").encode()
            client.sendall(payload + (b"" if method == b"HEAD" else body))
            client.shutdown(socket.SHUT_WR)


class ThrottledProxy(TcpProxy):
    """A proxy before the registry that passes at most ``rate_bps`` bytes a second, all its
    connections together (as a remote registry's link would): each chunk waits for its turn
    on one shared clock. ``rate_bps = None``: unthrottled."""

    def __init__(self, registry_port: int, rate_bps: float | None) -> None:
        super().__init__(registry_port)
        self.host = f"127.0.0.1:{self.port}"
        self.rate_bps = rate_bps
        self._turn = time.monotonic()
        self._turn_lock = threading.Lock()
        self.passed = 0

    def _wait_turn(self, size: int) -> None:
        rate = self.rate_bps
        with self._turn_lock:
            self.passed += size
            if rate is None:
                return
            now = time.monotonic()
            start = max(self._turn, now)
            self._turn = start + size / rate
        if start > now:
            time.sleep(start - now)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                self._flowing.wait()
                self._wait_turn(len(data))
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
