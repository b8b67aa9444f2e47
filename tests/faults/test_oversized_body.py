"""A batch of rollouts over the body limit (``POST /v1/rollouts``, 16 MiB) is answered with its
413 and reason, which the sender reads: the server reads and drops the rest of a moderately
oversized body (up to four times the limit) before it answers, so a client that writes its
whole body before reading, and says ``Connection: close`` as the standard library's
``urllib.request`` does, is not reset mid-body. Past that bound the 413 goes at once and the
connection is closed.

Real parts: the API served by uvicorn on 127.0.0.1 over a SQLite store, real clients
(``http.client``, ``urllib.request``, ``requests``) sending the bodies.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.api.routes.rollouts import DRAIN_BYTES
from envcheck.rollouts.batch import MAX_BODY_BYTES
from envcheck.store import open_store

TOKEN = "oversized-body-token-" + "z" * 16
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
OVER = f"over {MAX_BODY_BYTES} bytes"
# (name, body, headers): each over the limit as sent, or once inflated
BODIES: list[tuple[str, bytes, dict[str, str]]] = [
    ("json", b"[" + b" " * (MAX_BODY_BYTES - 1) + b"]", {}),  # 16 MiB + 1
    # incompressible: gzip as sent is over the limit before anything is inflated
    ("gzip-sent", os.urandom(MAX_BODY_BYTES + 1), {"Content-Encoding": "gzip"}),
    ("gzip-inflated", gzip.compress(b"[" + b" " * MAX_BODY_BYTES + b"]"),
     {"Content-Encoding": "gzip"}),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("oversized")
    with open_store(f"sqlite:///{path / 'envcheck.db'}") as store, \
            serve_in_thread(create_app(store, TOKEN)) as base:
        yield base


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)


def _post_closing(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """What ``urllib.request`` gets: it sends ``Connection: close`` and the whole body before
    it reads the answer."""
    request = urllib.request.Request(f"{url}/v1/rollouts", data=body, method="POST",
                                     headers={**HEADERS, **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read())


def _post_chunked(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """``http.client`` with no length declared (chunked), closing after the answer."""
    conn = _connection(url)
    try:
        step = 1 << 20
        pieces = (body[i:i + step] for i in range(0, len(body), step))
        conn.request("POST", "/v1/rollouts", body=pieces, encode_chunked=True,
                     headers={**HEADERS, **headers, "Connection": "close",
                              "Transfer-Encoding": "chunked"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def _post_kept_alive(url: str, body: bytes, headers: dict[str, str]
                     ) -> tuple[int, dict[str, Any]]:
    """``requests`` on a kept-alive connection, which then carries a valid batch too."""
    with requests.Session() as http:
        http.trust_env = False
        answer = http.post(f"{url}/v1/rollouts", data=body, headers={**HEADERS, **headers},
                           timeout=(2, 60))
        after = http.post(f"{url}/v1/rollouts", data=b"[]", headers=HEADERS, timeout=(2, 60))
        assert after.status_code == 200, after.text  # the connection was left usable
        return answer.status_code, answer.json()


CLIENTS = {"urllib-closing": _post_closing, "http.client-chunked": _post_chunked,
           "requests-kept-alive": _post_kept_alive}


@pytest.mark.slow
@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(("name", "body", "headers"), BODIES, ids=[b[0] for b in BODIES])
def test_a_moderately_oversized_body_gets_its_413_and_reason(
        url: str, client: str, name: str, body: bytes, headers: dict[str, str]) -> None:
    status, problem = CLIENTS[client](url, body, headers)
    assert status == 413, problem
    assert problem["error"] == "too_large", problem
    expected = "inflates past" if name == "gzip-inflated" else OVER
    assert expected in problem["reason"], problem


def test_past_the_bound_the_413_goes_at_once_and_the_connection_closes(url: str) -> None:
    conn = _connection(url)
    try:
        conn.putrequest("POST", "/v1/rollouts")
        for key, value in HEADERS.items():
            conn.putheader(key, value)
        conn.putheader("Content-Length", str(DRAIN_BYTES + 1))
        conn.endheaders()  # and not a byte of the body: the answer comes from the length
        answer = conn.getresponse()
        assert answer.status == 413
        assert OVER in json.loads(answer.read())["reason"]
        # the server reads none of it: it closes rather than drain 64 MiB for nothing
        assert answer.getheader("Connection") == "close"
        assert conn.sock is None or conn.sock.recv(1) == b""
    finally:
        conn.close()
