"""``POST /v1/rollouts`` served for real (uvicorn on 127.0.0.1, ``requests`` as the client) over
SQLite and PostgreSQL: what a batch adds to which rows, each record once whatever the retries,
unknown environments counted apart, bad batches refused whole with their record's index and
field, the three body forms, the token, the limits, and a store whose size per
environment-hour does not grow with the volume."""

from __future__ import annotations

import gzip
import http.client
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.api.routes.rollouts import DRAIN_BYTES
from envcheck.catalogue.models import Environment
from envcheck.rollouts.batch import MAX_BODY_BYTES, MAX_RECORDS
from envcheck.store import Store, open_store
from tests.rollouts_seed import ENV_IDS, H0, RETIRED, batch, fleet, record, tables

TOKEN = "rollouts-token-" + "y" * 16
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NDJSON = {"Content-Type": "application/x-ndjson"}


@dataclass
class Api:
    url: str
    http: requests.Session
    store: Store

    def post(self, body: Any, headers: dict[str, str] | None = None,
             token: str | None = TOKEN) -> requests.Response:
        """``body``: records (sent as a JSON array) or bytes as they are."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(f"{self.url}/v1/rollouts", data=data, headers=sent,
                              timeout=(2, 60))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        fleet(opened)
        yield opened


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    with serve_in_thread(create_app(store, token=TOKEN)) as url, requests.Session() as http:
        http.trust_env = False
        yield Api(url, http, store)


def rows_by_key(store: Store) -> dict[tuple[Any, ...], Any]:
    return {(r.env_id, r.hour, r.image_digest, r.outcome, r.period): r
            for r in store.rollout_rows()}


# --- counting ---------------------------------------------------------------------------------


def test_a_batch_is_counted_into_its_environment_hour_digest_and_outcome(api: Api) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    later = H0 + timedelta(hours=1)
    records = [
        record(0, reward=0.0, image_digest="sha256:a",
               durations={"sandbox_start_s": 1.5, "agent_s": 10.0, "verifier_s": 2.0}),
        record(1, reward=1.0, image_digest="sha256:a", durations={"agent_s": 20.0}),
        record(2, reward=0.5, image_digest="sha256:a"),
        record(3, image_digest="sha256:a"),  # no reward: counted, not in the reward's n
        record(4, outcome="sandbox_lost", image_digest="sha256:a"),
        record(5, image_digest="sha256:b", reward=1.0),  # another digest: its own row
        record(6, env_id="roll-b"),  # no digest: ''
        # 15:40 at +05:30 is 10:10 UTC: the UTC hour, whatever the offset
        record(7, env_id="roll-b", at=(later + timedelta(minutes=10)).astimezone(ist)),
    ]
    answer = api.post(records, headers={"Content-Type": "application/json; charset=utf-8"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"received": 8, "counted": 8, "duplicates": 0, "unknown": 0,
                             "unknown_ids": []}
    rows = rows_by_key(api.store)
    assert set(rows) == {("roll-a", H0, "sha256:a", "ok", "hour"),
                         ("roll-a", H0, "sha256:a", "sandbox_lost", "hour"),
                         ("roll-a", H0, "sha256:b", "ok", "hour"),
                         ("roll-b", H0, "", "ok", "hour"),
                         ("roll-b", later, "", "ok", "hour")}
    ok = rows[("roll-a", H0, "sha256:a", "ok", "hour")]
    assert (ok.count, ok.reward_n, ok.reward_zero, ok.reward_one) == (4, 3, 1, 1)
    assert math.isclose(ok.reward_sum, 1.5) and math.isclose(ok.reward_sq, 1.25)
    assert (ok.sandbox_start_s_sum, ok.sandbox_start_s_n) == (1.5, 1)
    assert (ok.agent_s_sum, ok.agent_s_n) == (30.0, 2)
    assert (ok.verifier_s_sum, ok.verifier_s_n) == (2.0, 1)
    assert (ok.first_at, ok.last_at) == (H0, H0 + timedelta(seconds=3))
    lost = rows[("roll-a", H0, "sha256:a", "sandbox_lost", "hour")]
    assert (lost.count, lost.reward_n, lost.agent_s_n) == (1, 0, 0)
    assert rows[("roll-b", later, "", "ok", "hour")].first_at == later + timedelta(minutes=10)
    # the readers the health model uses
    assert [r.env_id for r in api.store.rollout_rows(["roll-b"])] == ["roll-b", "roll-b"]
    assert len(api.store.rollout_rows(since=later)) == 1
    assert api.store.rollout_envs_since(H0 + timedelta(seconds=5)) == {"roll-a", "roll-b"}
    assert api.store.rollout_envs_since(later) == {"roll-b"}


def test_a_batch_sent_again_is_counted_once(api: Api) -> None:
    records = batch(0, 50, reward=1.0)
    assert api.post(records).json()["counted"] == 50
    before = tables(api.store)
    again = api.post(records)
    assert again.status_code == 200
    assert again.json() == {"received": 50, "counted": 0, "duplicates": 50, "unknown": 0,
                            "unknown_ids": []}
    assert tables(api.store)["rollup"] == before["rollup"]


def test_two_batches_of_a_producer_out_of_order_both_count(api: Api) -> None:
    second, first = batch(1000, 1000), batch(0, 1000)
    assert api.post(second).json()["counted"] == 1000
    assert api.post(first).json()["counted"] == 1000
    assert sum(r.count for r in api.store.rollout_rows()) == 2000
    # the producer's numbers are one range again, and both batches are known
    assert [(p, s) for p, s, _ in tables(api.store)["producer"]] == [("run-1", [[0, 1999]])]
    assert api.post(first + second).json()["duplicates"] == 2000


def test_a_number_twice_in_one_batch_is_counted_once(api: Api) -> None:
    answer = api.post([record(7, reward=1.0), record(7, reward=0.0), record(8),
                       record(7, producer="run-2")])  # another producer's 7 is its own
    assert answer.json()["counted"] == 3 and answer.json()["duplicates"] == 1
    row = api.store.rollout_rows()[0]
    assert (row.count, row.reward_n, row.reward_one) == (3, 1, 1)  # the first 7 counted


def test_batches_at_once_are_each_counted_once(api: Api) -> None:
    """Many senders at a time (written together): every record once, a batch sent twice at
    once too."""
    bodies = [batch(i * 100, 100, producer=f"run-{i % 3}", env_id=ENV_IDS[i % 3])
              for i in range(12)]
    bodies.append(bodies[0])  # the same batch again, concurrently with itself
    answers: list[dict[str, Any]] = []

    def send(body: list[dict[str, Any]]) -> None:
        with requests.Session() as http:
            http.trust_env = False
            got = http.post(f"{api.url}/v1/rollouts", json=body, headers=AUTH, timeout=60)
            answers.append(got.json())

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 13
    assert sum(a["counted"] for a in answers) == 1200
    assert sum(a["duplicates"] for a in answers) == 100
    assert sum(r.count for r in api.store.rollout_rows()) == 1200


# --- unknown environments ---------------------------------------------------------------------


def test_unknown_and_retired_environments_are_counted_apart_never_refused(api: Api) -> None:
    records = [record(0), record(1, env_id="nobody-knows"), record(2, env_id=RETIRED),
               record(3, env_id="nobody-knows", at=H0 + timedelta(hours=1))]
    answer = api.post(records)
    assert answer.status_code == 200
    assert answer.json() == {"received": 4, "counted": 1, "duplicates": 0, "unknown": 3,
                             "unknown_ids": ["nobody-knows", RETIRED]}
    assert {r.env_id for r in api.store.rollout_rows()} == {"roll-a"}
    assert api.store.unknown_rollouts() == (3, ["nobody-knows", RETIRED])
    assert api.store.unknown_rollouts(since=H0 + timedelta(hours=1)) == (1, ["nobody-knows"])
    # counted once too, and an environment back in the catalogue is known again
    assert api.post(records).json()["duplicates"] == 4
    api.store.reinstate([RETIRED])
    assert api.post([record(9, env_id=RETIRED)]).json()["counted"] == 1


def test_an_environment_synced_after_the_first_batch_is_known(api: Api) -> None:
    """The known ids are cached; an id the cache lacks is looked up, never taken as
    unknown."""
    assert api.post([record(0)]).json()["counted"] == 1
    api.store.sync_environments([Environment(id="roll-new", image="demo/new:1",
                                             suite="train")])
    assert api.post([record(1, env_id="roll-new")]).json()["counted"] == 1
    api.store.retire_absent(ENV_IDS)  # roll-new leaves: the feed's generation moves
    assert api.post([record(2, env_id="roll-new")]).json()["unknown"] == 1


# --- refused batches --------------------------------------------------------------------------


BAD = [
    ({"outcome": None}, "outcome", "enum"),
    ({"outcome": "exploded"}, "outcome", "enum"),
    ({"seq": -1}, "seq", "greater_than_equal"),
    ({"at": "2026-01-01T10:00:00"}, "at", "timezone_aware"),
    ({"at": (datetime.now(UTC) + timedelta(hours=3)).isoformat()}, "at", "in_the_future"),
    ({"durations": {"agent_s": -2}}, "durations.agent_s", "greater_than_equal"),
    ({"reward": "high"}, "reward", "float_parsing"),
    ({"colour": "red"}, "colour", "extra_forbidden"),
    ({"env_id": ""}, "env_id", "string_too_short"),
]


@pytest.mark.parametrize(("change", "field", "kind"), BAD, ids=[b[1] + "-" + b[2] for b in BAD])
@pytest.mark.parametrize("form", ["array", "ndjson"])
def test_a_bad_record_refuses_the_batch_naming_its_index_and_field(
        api: Api, change: dict[str, Any], field: str, kind: str, form: str) -> None:
    api.post(batch(0, 3, producer="earlier"))  # something in the store to keep as it is
    before = tables(api.store)
    records = batch(100, 5)
    records[3] = {**records[3], **change}
    if form == "array":
        answer = api.post(records)
    else:  # a blank line does not count as a record
        lines = [json.dumps(r) for r in records]
        answer = api.post(("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:])).encode(),
                          headers=NDJSON)
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert problem["error"] == "invalid_record"
    assert problem["reason"].startswith(f"record 3, field {field}: ")
    assert problem["fields"] == [{"field": field, "location": "body[3]", "type": kind,
                                  "message": problem["reason"]}]
    assert tables(api.store) == before  # nothing written, the producers' ranges included


@pytest.mark.parametrize(("body", "says"), [
    (b"", "must be a JSON array"), (b'{"env_id": "roll-a"}', "must be a JSON array"),
    (b"[{", "the body"), (b"[1]", "record 0")])
def test_a_body_that_is_no_batch_is_400(api: Api, body: bytes, says: str) -> None:
    answer = api.post(body)
    assert answer.status_code == 400 and says in answer.json()["reason"]


# --- body forms -------------------------------------------------------------------------------


def test_json_ndjson_and_gzip_bodies_count_alike(api: Api) -> None:
    def records(producer: str) -> list[dict[str, Any]]:
        return batch(0, 20, producer=producer, reward=1.0)

    def ndjson(rs: list[dict[str, Any]]) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in rs).encode()

    sent = [
        api.post(records("array")),
        api.post(ndjson(records("ndjson")), headers=NDJSON),
        api.post(gzip.compress(json.dumps(records("gzip")).encode()),
                 headers={"Content-Encoding": "gzip"}),
        api.post(gzip.compress(ndjson(records("gzip-ndjson"))),
                 headers={**NDJSON, "Content-Encoding": "GZIP"}),
        # two gzip members, one after the other, are one body
        api.post(gzip.compress(b"[" + json.dumps(records("members"))[1:-1].encode())
                 + gzip.compress(b"]"), headers={"Content-Encoding": "gzip"}),
    ]
    assert [a.status_code for a in sent] == [200] * 5
    assert [a.json()["counted"] for a in sent] == [20] * 5
    producers = [p for p, _, _ in tables(api.store)["producer"]]
    assert sorted(producers) == ["array", "gzip", "gzip-ndjson", "members", "ndjson"]
    assert sum(r.count for r in api.store.rollout_rows()) == 100


# --- the token, the limits, the encodings -----------------------------------------------------


def test_the_token_is_needed_and_a_read_only_server_refuses(api: Api) -> None:
    assert api.post([record(0)], token=None).status_code == 401
    wrong = api.post([record(0)], token="not-the-token")
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_token"
    with serve_in_thread(create_app(api.store, token=None)) as url:
        answer = requests.post(f"{url}/v1/rollouts", json=[record(0)], headers=AUTH,
                               timeout=10)
    assert answer.status_code == 403 and answer.json()["error"] == "read_only"
    assert api.store.rollout_rows() == []


def test_too_many_records_or_bytes_are_413_and_an_unknown_encoding_415(api: Api) -> None:
    small = {"env_id": "roll-a", "at": H0.isoformat(), "producer": "p", "outcome": "ok"}
    many = [{**small, "seq": i} for i in range(MAX_RECORDS + 1)]
    too_many = api.post(many)
    assert too_many.status_code == 413 and str(MAX_RECORDS) in too_many.json()["reason"]
    lines = "".join(json.dumps(r) + "\n" for r in many).encode()
    assert api.post(lines, headers=NDJSON).status_code == 413
    # inflates past the bound: refused part way
    bomb = gzip.compress(b"[" + b" " * (MAX_BODY_BYTES + 10) + b"]")
    inflated = api.post(bomb, headers={"Content-Encoding": "gzip"})
    assert inflated.status_code == 413 and "inflates" in inflated.json()["reason"]
    # a declared length past the bound of what is read to answer: answered before the body
    parts = urlsplit(api.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.putrequest("POST", "/v1/rollouts")
        conn.putheader("Authorization", AUTH["Authorization"])
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(DRAIN_BYTES + 1))
        conn.endheaders()
        declared = conn.getresponse()
        assert declared.status == 413
        assert "over" in json.loads(declared.read())["reason"]
    finally:
        conn.close()
    brotli = api.post(b"[]", headers={"Content-Encoding": "br"})
    assert brotli.status_code == 415 and brotli.json()["error"] == "unsupported_encoding"
    assert api.store.rollout_rows() == [] and tables(api.store)["producer"] == []


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(b"[]")[:-12]],
                         ids=["garbage", "truncated"])
def test_a_body_that_is_not_gzip_is_400(api: Api, body: bytes) -> None:
    answer = api.post(body, headers={"Content-Encoding": "gzip"})
    assert answer.status_code == 400 and answer.json()["error"] == "bad_encoding"


# --- the store's size -------------------------------------------------------------------------


def test_the_store_size_per_environment_hour_does_not_grow_with_the_volume(api: Api) -> None:
    hours = [H0 - timedelta(hours=h) for h in range(3)]

    def one_batch(n: int) -> list[dict[str, Any]]:
        out = []
        for i in range(300):
            seq = n * 300 + i
            out.append(record(seq, env_id=ENV_IDS[i % 3], at=hours[i // 3 % 3] + timedelta(
                seconds=seq % 3000), outcome="ok" if i // 9 % 10 else "verifier_error",
                reward=float(i % 2), image_digest="sha256:x"))
        return out

    assert api.post(one_batch(0)).json()["counted"] == 300
    first = len(tables(api.store)["rollup"])
    assert first == 3 * 3 * 2  # environments x hours x outcomes
    for n in range(1, 51):
        assert api.post(one_batch(n)).json()["counted"] == 300
    assert len(tables(api.store)["rollup"]) == first
    assert sum(r.count for r in api.store.rollout_rows()) == 51 * 300
