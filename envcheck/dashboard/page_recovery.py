"""A dashboard page that recovers from a part of it that failed to load.

Streamlit's frontend loads most of itself on demand: each kind of element (a chart, a table,
a select box) is a chunk of script and a stylesheet fetched when a page first shows one. A
fetch that fails leaves a box in place of the element ("TypeError: Failed to fetch
dynamically imported module", "Unable to preload CSS"). On Linux, Chromium fails every
request in flight, loopback included, with ``net::ERR_NETWORK_CHANGED`` whenever an address
of the host it runs on comes or goes (``AddressTrackerLinux``, then the HTTP stream pools
flushed): the engine's networks and containers do that on the host they run on, and so a
browser on that host loses parts of the page while any container work goes on there.

The page then reloads itself: the parts that did arrive are in the browser's cache (Streamlit
serves them content-hashed, immutable, for a year), so each reload fetches only what is still
missing, and the page is whole within a reload or two. At most :data:`RELOADS` in a row; a
page still broken then keeps its error boxes in sight. The script is inline in every page's
HTML, ahead of Streamlit's own, so that it is there even when the first chunk fails;
:class:`PageRecovery` is the ASGI middleware that puts it there (``dashboards/serve.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from string import Template
from typing import Any

__all__ = ["RECOVERY_SCRIPT", "RELOADS", "PageRecovery", "with_recovery"]

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RELOADS = 8  # in a row; a reload 30 s after the last one starts the count again
# What the frontend says when a chunk or a stylesheet did not arrive (Chromium, Firefox,
# Safari, Vite's preload helper, Streamlit's own chunk error).
_FAILED = ("Failed to fetch dynamically imported module|error loading dynamically imported "
           "module|Importing a module script failed|Unable to preload CSS|Cannot load "
           "Streamlit frontend code")

RECOVERY_SCRIPT = Template("""<script>(() => {
  "use strict";
  const KEY = "envcheck.page-recovery", LIMIT = $reloads, QUIET_MS = 30000;
  const FAILED = /$failed/;
  const root = document.documentElement;
  let pending = false;
  function recover() {
    if (pending) return;
    let last = {};
    try { last = JSON.parse(sessionStorage.getItem(KEY) || "{}"); } catch (e) { last = {}; }
    const count = Date.now() - (last.at || 0) > QUIET_MS ? 0 : (last.count || 0);
    if (count >= LIMIT) { root.dataset.envcheckRecovery = "gave-up"; return; }
    pending = true;
    root.dataset.envcheckRecovery = "reloading";
    sessionStorage.setItem(KEY, JSON.stringify({count: count + 1, at: Date.now()}));
    setTimeout(() => location.reload(), 200 * (count + 1));
  }
  // a chunk or a stylesheet of Vite's preload helper
  addEventListener("vite:preloadError", recover);
  // a script or a stylesheet the page itself names
  addEventListener("error", (event) => {
    const node = event.target;
    if (node instanceof HTMLScriptElement || (node instanceof HTMLLinkElement
        && /stylesheet|modulepreload/.test(node.rel))) recover();
  }, true);
  addEventListener("unhandledrejection", (event) => {
    const reason = event.reason;
    if (FAILED.test(String(reason && reason.message || reason))) recover();
  });
  // an element's error box, however the failure reached it
  new MutationObserver(() => {
    if (pending) return;
    for (const box of document.querySelectorAll("[data-testid=stAlertContentError]")) {
      if (FAILED.test(box.textContent)) { recover(); return; }
    }
  }).observe(root, {childList: true, subtree: true});
})();</script>""").substitute(reloads=RELOADS, failed=_FAILED)


def with_recovery(page: bytes) -> bytes:
    """``page`` (an HTML document) with the recovery script first in its head."""
    head = page.find(b"<head>")
    if head < 0:
        return page
    at = head + len(b"<head>")
    return page[:at] + RECOVERY_SCRIPT.encode() + page[at:]


class PageRecovery:
    """ASGI middleware: every HTML page a browser navigates to gets the recovery script.

    Only a GET that accepts HTML is touched: it is asked for uncompressed and without
    conditions (so the answer is the whole page, never a 304 of one cached with another
    script), and an answer of type text/html gets the script and its new length. Everything
    else (scripts, stylesheets, the websocket, the health check) passes as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _navigation(scope):
            await self.app(scope, receive, send)
            return
        dropped = (b"accept-encoding", b"if-none-match", b"if-modified-since")
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                      if k.lower() not in dropped],
                 # a file answered by path (ASGI's pathsend) would carry no body to change
                 "extensions": {k: v for k, v in (scope.get("extensions") or {}).items()
                                if k != "http.response.pathsend"}}
        start: Message | None = None
        body = bytearray()

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and _html(message):
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            page = with_recovery(bytes(body))
            headers = [(k, v) for k, v in start["headers"]
                       if k.lower() not in (b"content-length", b"etag", b"last-modified")]
            await send({**start, "headers": [*headers,
                                             (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, rewrite)


def _navigation(scope: Scope) -> bool:
    if scope.get("type") != "http" or scope.get("method") != "GET":
        return False
    accept = b",".join(v for k, v in scope.get("headers") or () if k.lower() == b"accept")
    return b"text/html" in accept


def _html(start: Message) -> bool:
    for key, value in start.get("headers") or ():
        if key.lower() == b"content-type":
            return bool(value.lower().startswith(b"text/html"))
    return False
