"""The scheduler client against real servers on 127.0.0.1: retries, fail-closed and
fail-open when envcheck is gone, conditional requests, mutations."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envcheck.api.app import create_app, serve_in_thread
from envcheck.client import ApiError, EnvcheckClient, EnvcheckUnavailable
from envcheck.feed.exports import write_exports
from envcheck.store import Store, open_store
from tests.test_api import ALLOWED, QUARANTINED, TOKEN, seed

Seen = list[tuple[str, str | None, int]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'envcheck.db'}") as opened:
        seed(opened)
        yield opened


def recording(app: ASGIApp, seen: Seen) -> ASGIApp:
    """``app``, noting each request's path, If-None-Match and answer status in ``seen``."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        etag = dict(scope["headers"]).get(b"if-none-match")

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.append((scope["path"], etag.decode() if etag else None, message["status"]))
            await send(message)

        await app(scope, receive, noting)

    return wrapped


@pytest.fixture
def envcheck(store: Store, tmp_path: Path) -> Iterator[tuple[str, Seen]]:
    seen: Seen = []
    app = create_app(store, TOKEN, export_dir=tmp_path / "exports")
    with serve_in_thread(recording(app, seen)) as url:
        yield url, seen


@contextlib.contextmanager
def closed_port() -> Iterator[str]:
    """A URL whose port refuses connections: bound (so nobody else takes it), not listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def client(url: str, **kwargs: Any) -> EnvcheckClient:
    kwargs.setdefault("timeout", (1.0, 5.0))
    kwargs.setdefault("sleep", lambda _: None)
    return EnvcheckClient(url, **kwargs)


# --- retries ----------------------------------------------------------------------------------


def flaky_server(failures: int, status: int = 503) -> tuple[FastAPI, list[str]]:
    """Answers ``status`` ``failures`` times, then an allowlist."""
    app, calls = FastAPI(), []

    @app.get("/v1/suites/{suite}/allowlist")
    def listing(suite: str) -> JSONResponse:
        calls.append(suite)
        if len(calls) <= failures:
            return JSONResponse({"error": "busy", "reason": "try again"}, status_code=status)
        return JSONResponse({"suite": suite, "allowed": ["a", "b"], "excluded": {},
                             "generation": 1, "healthy_fraction": 1.0},
                            headers={"ETag": '"1-x"'})

    @app.get("/v1/quarantine")
    async def slow() -> JSONResponse:
        await asyncio.sleep(1.0)
        return JSONResponse({"quarantined": []})

    return app, calls


def test_retries_through_two_failures() -> None:
    app, calls = flaky_server(failures=2)
    sleeps: list[float] = []
    with serve_in_thread(app) as url, \
            client(url, retries=3, backoff_s=(0.2, 2.0), sleep=sleeps.append) as c:
        assert c.allowlist("train") == ["a", "b"]
    assert len(calls) == 3
    assert len(sleeps) == 2 and all(0 < s <= 2.0 for s in sleeps)


def test_gives_up_after_the_retries() -> None:
    app, calls = flaky_server(failures=10, status=500)
    with serve_in_thread(app) as url, client(url, retries=2) as c:
        with pytest.raises(EnvcheckUnavailable, match="HTTP 500"):
            c.allowlist("train")
        assert isinstance(c.last_error, Exception)
    assert len(calls) == 3


def test_a_4xx_is_an_answer_never_retried() -> None:
    app, calls = flaky_server(failures=10, status=404)
    with serve_in_thread(app) as url, client(url, retries=3, fail_mode="open") as c:
        with pytest.raises(ApiError) as caught:
            c.allowlist("train")
        # an unknown suite is not an outage: fail-open does not hide it either
        with pytest.raises(ApiError):
            c.is_allowed("a", "train")
    assert (caught.value.status, caught.value.error, caught.value.reason) == \
        (404, "busy", "try again")
    assert len(calls) == 2


def test_read_timeouts_are_retried_then_unavailable() -> None:
    app, _ = flaky_server(failures=0)
    sleeps: list[float] = []
    with serve_in_thread(app) as url, \
            client(url, timeout=(1.0, 0.2), retries=1, sleep=sleeps.append) as c, \
            pytest.raises(EnvcheckUnavailable, match="timed out"):
        c.quarantine()
    assert len(sleeps) == 1


# --- when envcheck is gone --------------------------------------------------------------------


def test_fail_closed_when_the_port_is_closed() -> None:
    with closed_port() as url, client(url, retries=2) as c:
        with pytest.raises(EnvcheckUnavailable, match="did not answer"):
            c.allowlist("train")
        assert c.is_allowed("train-ok-1", "train") is False
        with pytest.raises(EnvcheckUnavailable):
            c.quarantine()


def test_fail_closed_ignores_what_it_knew(envcheck: tuple[str, Seen]) -> None:
    url, _ = envcheck
    with client(url, fail_mode="closed") as c:
        assert c.allowlist("train") == ALLOWED["train"]
        c.base_url = url.rsplit(":", 1)[0] + ":1"  # now pointing at nothing
        with pytest.raises(EnvcheckUnavailable):
            c.allowlist("train")
        assert c.is_allowed("train-ok-1", "train") is False


def test_fail_open_serves_the_last_known_allowlist(store: Store, tmp_path: Path) -> None:
    app = create_app(store, TOKEN, export_dir=tmp_path / "exports")
    with client("http://unused", fail_mode="open", retries=1) as c:
        with serve_in_thread(app) as url:
            c.base_url = url
            assert c.allowlist("train") == ALLOWED["train"]
        # the server is gone now: its port refuses
        assert c.allowlist("train") == ALLOWED["train"]
        assert c.is_allowed("train-ok-1", "train") is True
        assert c.is_allowed("train-broken", "train") is False
        assert isinstance(c.last_error, Exception)
        # a suite it never saw: nothing to list, and an open gate for single questions
        with pytest.raises(EnvcheckUnavailable, match="no allowlist of 'eval'"):
            c.allowlist("eval")
        assert c.is_allowed("eval-broken", "eval") is True


def test_fail_open_falls_back_to_the_export_files(store: Store, tmp_path: Path) -> None:
    exports = write_exports(store, tmp_path / "exports")
    with closed_port() as url, \
            client(url, fail_mode="open", retries=0, fallback_dir=exports) as c:
        assert c.allowlist("eval") == ALLOWED["eval"]
        assert c.is_allowed("eval-broken", "eval") is False
        with pytest.raises(EnvcheckUnavailable):
            c.allowlist("missing-suite")
    (exports / "allowlist-eval.json").write_text("{broken")
    with closed_port() as url, \
            client(url, fail_mode="open", retries=0, fallback_dir=exports) as c, \
            pytest.raises(EnvcheckUnavailable):
        c.allowlist("eval")


# --- conditional requests ---------------------------------------------------------------------


def test_etag_is_sent_and_304_reuses_the_list(envcheck: tuple[str, Seen]) -> None:
    url, seen = envcheck
    path = "/v1/suites/train/allowlist"
    with client(url, token=TOKEN) as c:
        first = c.allowlist("train")
        second = c.allowlist("train")
        assert first == second == ALLOWED["train"]
        [(_, none, ok), (_, etag, not_modified)] = [s for s in seen if s[0] == path]
        assert (none, ok, not_modified) == (None, 200, 304)
        assert etag is not None and etag.startswith('"')
        assert c.quarantine_add("train-ok-2", "suspicious rewards", actor="dave")["changed"]
        third = c.allowlist("train")
        assert "train-ok-2" not in third
        assert [s[1:] for s in seen if s[0] == path][-1] == (etag, 200)
        assert c.is_allowed("train-ok-1", "train") is True
        assert [s[2] for s in seen if s[0] == path][-1] == 304


# --- the rest of the surface ------------------------------------------------------------------


def test_quarantine_environment_and_changes(envcheck: tuple[str, Seen]) -> None:
    url, _ = envcheck
    with client(url, token=TOKEN) as c:
        entries = {e.env_id: e for e in c.quarantine()}
        assert {k: e.source for k, e in entries.items()} == QUARANTINED
        manual = entries["train-manual"]
        assert (manual.actor, manual.reason, manual.since is not None) == \
            ("alice", "reward hacking suspected", True)
        assert [e.env_id for e in c.quarantine("eval")] == ["eval-broken"]
        doc = c.environment("train-deps-drift", history=5)
        assert doc["state"] == "broken" and doc["kinds"]["dependencies"]["failures"] == 2
        released = c.quarantine_release("train-manual", "false alarm", actor="alice")
        assert (released["changed"], released["quarantined"]) == (True, False)
        assert c.is_allowed("train-manual", "train")
        with pytest.raises(ApiError) as unknown:
            c.environment("nope")
        assert (unknown.value.status, unknown.value.error) == (404, "unknown_environment")
    for token, error in ((None, "missing_token"), ("wrong-" + TOKEN, "invalid_token")):
        with client(url, token=token) as c, pytest.raises(ApiError) as caught:
            c.quarantine_add("train-ok-1", "x")
        assert (caught.value.status, caught.value.error) == (401, error)
        assert TOKEN not in str(caught.value)


def test_repr_and_arguments() -> None:
    c = EnvcheckClient("http://127.0.0.1:1/", token=TOKEN)
    with c:
        assert TOKEN not in repr(c) and "token=set" in repr(c)
        assert c.base_url == "http://127.0.0.1:1"
    with pytest.raises(ValueError, match="fail_mode"):
        EnvcheckClient("http://127.0.0.1:1", fail_mode="maybe")  # type: ignore[arg-type]
