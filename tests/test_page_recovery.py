"""The page-recovery middleware on its own (pure ASGI, an app of the test's in place of
Streamlit's): a browser's navigation gets the whole page, uncompressed and unconditional, with
the script first in its head and its length right; every other request and answer passes as
it is. The served dashboard, in a real Chromium, is tests/test_dashboard_netchange.py's."""

from __future__ import annotations

import asyncio
from typing import Any

from envcheck.dashboard.page_recovery import RECOVERY_SCRIPT, PageRecovery, with_recovery

PAGE = b"<!DOCTYPE html><html><head><title>x</title></head><body></body></html>"
NAVIGATION = [(b"accept", b"text/html,application/xhtml+xml,*/*;q=0.8"),
              (b"accept-encoding", b"gzip, br"), (b"if-none-match", b'"abc"'),
              (b"if-modified-since", b"Mon, 07 Dec 2026 09:35:45 GMT")]


class Answer:
    """An ASGI app answering with ``body`` (in two chunks) of ``content_type``; it keeps the
    scope it was called with."""

    def __init__(self, body: bytes, content_type: bytes) -> None:
        self.body, self.content_type = body, content_type
        self.scope: dict[str, Any] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = dict(scope)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", self.content_type), (b"content-length", b"%d" % len(self.body)),
            (b"etag", b'"abc"'), (b"last-modified", b"Mon, 07 Dec 2026 09:35:45 GMT")]})
        half = len(self.body) // 2
        await send({"type": "http.response.body", "body": self.body[:half], "more_body": True})
        await send({"type": "http.response.body", "body": self.body[half:]})


def served(app: Answer, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None,
           kind: str = "http") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {"type": kind, "method": method, "path": "/", "headers": headers or NAVIGATION,
             "extensions": {"http.response.pathsend": {}}}
    asyncio.run(PageRecovery(app)(scope, receive, send))
    return sent


def test_a_navigation_gets_the_page_with_the_script_first_in_its_head() -> None:
    app = Answer(PAGE, b"text/html; charset=utf-8")
    start, body = served(app)
    page = body["body"]
    assert page == with_recovery(PAGE)
    assert page.startswith(b"<!DOCTYPE html><html><head>" + RECOVERY_SCRIPT.encode())
    assert page.endswith(b"<title>x</title></head><body></body></html>")
    headers = dict(start["headers"])
    assert headers[b"content-length"] == str(len(page)).encode()
    assert b"etag" not in headers and b"last-modified" not in headers  # never a 304 of it
    # asked for as a whole, uncompressed, and with a body to change
    asked = {k for k, _ in app.scope["headers"]}
    assert asked == {b"accept"}
    assert "http.response.pathsend" not in app.scope["extensions"]


def test_everything_else_passes_as_it_is() -> None:
    script = b"export const x = 1;" * 10
    # a script the page asks for (no text/html in its Accept)
    app = Answer(script, b"application/javascript")
    asked = [(b"accept", b"*/*"), (b"accept-encoding", b"gzip")]
    start, first, second = served(app, headers=asked)
    assert first["body"] + second["body"] == script
    assert dict(start["headers"])[b"etag"] == b'"abc"'
    assert app.scope["headers"] == asked
    # a navigation answered with something else than HTML (a redirect's body, say)
    app = Answer(b'{"ok": true}', b"application/json")
    start, first, second = served(app)
    assert first["body"] + second["body"] == b'{"ok": true}'
    # not a GET, or not HTTP
    for method, kind in (("POST", "http"), ("GET", "websocket")):
        app = Answer(PAGE, b"text/html")
        _, first, second = served(app, method=method, kind=kind)
        assert first["body"] + second["body"] == PAGE


def test_a_page_without_a_head_is_left_alone() -> None:
    assert with_recovery(b"<html><body>no head</body></html>") == \
        b"<html><body>no head</body></html>"
