"""A data API on 127.0.0.1 that misbehaves on command, for the data-source probe's tests.

Each path has a script of actions, one consumed per request, then a default::

    with MisbehavingServer() as api:
        api.route("/v1", fail(503), fail(503), default=ok({"temp": 21.5}))
        url = api.url("/v1")

Actions answer (optionally late), fail, hang, reset the connection or truncate the body.
Only loopback, ephemeral ports; every socket and thread is closed by ``close()``.

Run as a script for the demo catalogue (``probes/demo-sources.yaml``)::

    .venv/bin/python -m tests.http_server --port 8765
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["Action", "MisbehavingServer", "answer", "echo", "fail", "hang", "ok", "raw_close",
           "reset", "truncate"]

Action = Callable[["_Handler"], None]


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None,
           delay_s: float = 0.0) -> Action:
    def act(h: _Handler) -> None:
        if delay_s and h.server.closing.wait(delay_s):
            return
        h.send_response(status)
        for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)
    return act


def ok(doc: Any, delay_s: float = 0.0, status: int = 200) -> Action:
    return answer(status, json.dumps(doc).encode(), delay_s=delay_s)


def fail(status: int, retry_after: str | None = None, body: bytes = b'{"error": "x"}'
         ) -> Action:
    return answer(status, body, {"Retry-After": retry_after} if retry_after else None)


def hang(seconds: float) -> Action:
    """Accept the request, then say nothing (until ``seconds`` or the server closes)."""
    def act(h: _Handler) -> None:
        h.server.closing.wait(seconds)
        h.close_connection = True
    return act


def reset() -> Action:
    """Abort the connection with a TCP RST before any answer."""
    def act(h: _Handler) -> None:
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.close_connection = True
    return act


def truncate(body: bytes, sent: int) -> Action:
    """Promise the whole body, send ``sent`` bytes of it, close."""
    def act(h: _Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:sent])
        h.wfile.flush()
        h.close_connection = True
    return act


def echo(status: int = 200) -> Action:
    """Answer with what the request carried: path (query included) and headers."""
    def act(h: _Handler) -> None:
        answer(status, json.dumps({"path": h.path, "headers": dict(h.headers)}).encode())(h)
    return act


def raw_close() -> Action:
    """Close without a word (the client sees the connection end)."""
    def act(h: _Handler) -> None:
        h.close_connection = True
    return act


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs do
    server: _Server
    timeout = 5  # an idle keep-alive connection ends by itself

    def _serve(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.seen.append({"method": self.command, "path": self.path,
                                     "headers": dict(self.headers), "body": body})
            script = self.server.scripts.get(path)
            action = None
            if script is not None:
                queue, default = script
                action = queue.pop(0) if queue else default
        (action or answer(404, b'{"error": "no route"}'))(self)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read ``seen`` instead


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # close() joins every handler thread: nothing outlives a test

    def __init__(self, tls: ssl.SSLContext | None, port: int = 0) -> None:
        self.tls = tls
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.scripts: dict[str, tuple[list[Action], Action]] = {}
        self.seen: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", port), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:  # handshake later, in the handler's thread
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up or fail the TLS handshake are what these tests do


class MisbehavingServer:
    def __init__(self, tls: ssl.SSLContext | None = None, port: int = 0) -> None:
        self._server = _Server(tls, port)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self.scheme = "https" if tls is not None else "http"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def route(self, path: str, *actions: Action, default: Action) -> None:
        with self._server.lock:
            self._server.scripts[path] = (list(actions), default)

    @property
    def seen(self) -> list[dict[str, Any]]:
        with self._server.lock:
            return list(self._server.seen)

    def hits(self, path: str) -> int:
        return sum(1 for r in self.seen if r["path"].split("?", 1)[0] == path)

    def start(self) -> MisbehavingServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.closing.set()
        self._server.shutdown()
        self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self) -> MisbehavingServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _demo(port: int) -> None:
    """The endpoints ``probes/demo-sources.yaml`` points at, one per behaviour."""
    now = datetime.now(UTC)
    weather = {"city": "Paris", "temp": 21.5, "updated_at": now.isoformat()}
    with MisbehavingServer(port=port) as api:
        api.route("/weather", default=ok(weather))
        api.route("/prices", fail(503), default=ok({"items": [{"sku": "a", "price": 3.5}]}))
        api.route("/slow", default=ok({"value": 1}, delay_s=1.5))
        api.route("/broken", default=fail(500))
        api.route("/stale", default=ok({**weather, "updated_at": (
            now - timedelta(days=3)).isoformat()}))
        print(f"demo data API on http://127.0.0.1:{api.port} (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    _demo(parser.parse_args().port)
