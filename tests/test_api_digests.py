"""``GET /v1/environments/{id}/digests``, served for real (uvicorn on 127.0.0.1) over a store
holding a watched tag that moved: each digest it pointed at, first and last seen, the results
under each per kind, SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.store import open_store
from tests.digest_seed import LOCAL, NEW, OLD, T0, seed_moved_tag


@pytest.fixture
def api(store_url: str) -> Iterator[tuple[str, list[int]]]:
    with open_store(store_url) as store:
        ids = seed_moved_tag(store)
        with serve_in_thread(create_app(store)) as url:
            yield url, ids


def get(url: str, path: str, **kwargs: object) -> requests.Response:
    with requests.Session() as http:
        http.trust_env = False
        return http.get(url + path, timeout=(2, 10), **kwargs)  # type: ignore[arg-type]


def at(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


def test_a_moved_tag_lists_each_digest_with_its_results(api: tuple[str, list[int]]) -> None:
    url, ids = api
    answer = get(url, "/v1/environments/watched-task/digests")
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert (doc["env_id"], doc["suite"], doc["image"], doc["watched"]) == (
        "watched-task", "reg", "127.0.0.1:5055/team/task:latest", True)
    new, old = doc["digests"]  # newest first
    assert (new["image_digest"], new["current"], old["image_digest"], old["current"]) == (
        NEW, True, OLD, False)
    assert (old["first_seen"], old["last_seen"], old["results"], old["failures"]) == (
        at(0), at(10), 5, 1)
    assert (new["first_seen"], new["last_seen"], new["results"], new["failures"]) == (
        at(15), at(18), 4, 0)
    # the new digest validated in full: every kind the environment declares has a result on it
    assert [(k["kind"], k["results"], k["latest_status"]) for k in new["kinds"]] == [
        ("dependencies", 1, "pass"), ("image", 1, "pass"), ("terminal", 1, "pass"),
        ("tests", 1, "pass")]
    by_kind = {k["kind"]: k for k in old["kinds"]}
    assert sorted(by_kind) == ["dependencies", "image", "terminal"]
    assert (by_kind["image"]["results"], by_kind["image"]["latest_at"],
            by_kind["image"]["latest_result_id"]) == (3, at(10), ids[4])
    assert (by_kind["dependencies"]["failures"], by_kind["dependencies"]["latest_status"],
            by_kind["dependencies"]["latest_reason"]) == (1, "fail", "version_drift")


def test_a_local_image_and_an_environment_never_probed(api: tuple[str, list[int]]) -> None:
    url, _ = api
    local = get(url, "/v1/environments/local-task/digests").json()
    assert local["watched"] is False
    [only] = local["digests"]
    assert (only["image_digest"], only["current"], only["results"]) == (LOCAL, True, 1)
    never = get(url, "/v1/environments/never-probed/digests").json()
    assert (never["watched"], never["digests"]) == (True, [])


def test_unknown_environment_is_404_and_an_unchanged_answer_304(
        api: tuple[str, list[int]]) -> None:
    url, _ = api
    missing = get(url, "/v1/environments/nope/digests")
    assert missing.status_code == 404
    assert missing.json()["error"] == "unknown_environment"
    first = get(url, "/v1/environments/watched-task/digests")
    again = get(url, "/v1/environments/watched-task/digests",
                headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
