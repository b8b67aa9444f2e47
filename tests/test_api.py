"""The HTTP API served for real (uvicorn on 127.0.0.1) over a seeded store, SQLite and
PostgreSQL alike: content, ETags, auth, errors, the spec, exports, agreement with the CLI
gate, and a short load test from a second process."""

from __future__ import annotations

import contextlib
import hmac
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.api.cache import Rendered, ResponseCache, render
from envcheck.catalogue.models import Environment, Suite
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.core.errors import StoreError
from envcheck.core.results import CommandEvidence, ProbeKind, ProbeResult, Reason, Status
from envcheck.feed.assess import evaluate, set_quarantine_by_id
from envcheck.net.apitoken import ApiConfigError, load_api_token
from envcheck.store import Store, open_store
from tests.conftest import envcheck_cmd
from tests.polling import stop, wait_for
from tests.ports import free_port

TOKEN = "t0ken-for-tests-" + "x" * 16
T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
T, D = ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES
P, F, E = Status.PASS, Status.FAIL, Status.ERROR

# env id -> (suite, has a dependency spec, [(kind, status, reason)] oldest first)
FLEET: dict[str, tuple[str, bool, list[tuple[ProbeKind, Status, Reason]]]] = {
    "train-ok-1": ("train", False, [(T, P, Reason.OK)] * 3),
    "train-ok-2": ("train", False, [(T, P, Reason.OK)] * 3),
    "train-deps-ok": ("train", True, [(T, P, Reason.OK), (D, P, Reason.OK)] * 3),
    "train-broken": ("train", False, [(T, F, Reason.TOOL_MISSING)] * 2),
    "train-flaky": ("train", False, [(T, P, Reason.OK), (T, F, Reason.SHELL_SLOW)] * 2),
    "train-degraded": ("train", False, [(T, P, Reason.OK)] * 2 + [(T, F, Reason.SHELL_SLOW)]),
    "train-deps-drift": ("train", True, [(T, P, Reason.OK)] * 3
                         + [(D, F, Reason.VERSION_DRIFT)] * 2),
    "train-new": ("train", False, []),
    "train-infra": ("train", False, [(T, E, Reason.CHECKER_CRASHED)] * 2),
    "train-manual": ("train", False, [(T, P, Reason.OK)] * 3),
    "eval-ok": ("eval", False, [(T, P, Reason.OK)] * 3),
    "eval-degraded": ("eval", False, [(T, P, Reason.OK)] * 2 + [(T, F, Reason.SHELL_SLOW)]),
    "eval-broken": ("eval", False, [(T, F, Reason.WORKDIR_NOT_WRITABLE)] * 2),
}
ALLOWED = {"train": ["train-deps-ok", "train-ok-1", "train-ok-2"],
           "eval": ["eval-degraded", "eval-ok"]}
QUARANTINED = {"train-broken": "auto", "train-flaky": "auto", "train-deps-drift": "auto",
               "train-manual": "manual", "eval-broken": "auto"}


def environments() -> list[Environment]:
    deps = DependencySpec(python={"requests": ">=2"})
    return [Environment(id=env_id, image=f"fleet/{env_id}:1", suite=suite, tools=["git"],
                        dependencies=deps if has_deps else None)
            for env_id, (suite, has_deps, _) in FLEET.items()]


def seed(store: Store) -> dict[str, list[int]]:
    """The fleet above through the real path: sync, record, evaluate, a manual quarantine.
    Returns the ids of each environment's failing results."""
    envs = environments()
    store.sync_suites([
        Suite(id="train", description="training pool", allow_degraded=False, file="t.yaml",
              environment_ids=tuple(e.id for e in envs if e.suite == "train")),
        Suite(id="eval", description="eval pool", allow_degraded=True, file="e.yaml",
              environment_ids=tuple(e.id for e in envs if e.suite == "eval"))])
    store.sync_environments(envs)
    failing: dict[str, list[int]] = {}
    for env_id, (_, _, outcomes) in FLEET.items():
        run_id = store.start_run("test", [])
        for i, (kind, status, reason) in enumerate(outcomes):
            bad = status is not Status.PASS
            evidence = (CommandEvidence("command -v git", 127 if bad else 0, 0.01,
                                        output_head="git: not found" if bad else "/usr/bin/git",
                                        output_bytes=14),)
            result = ProbeResult(
                env_id=env_id, kind=kind, status=status, reason=reason,
                summary=f"{kind} {status}", duration_s=0.5 + i,
                image_digest=f"sha256:{env_id}", spec_hash=f"spec-{kind}",
                started_at=T0 + timedelta(minutes=i), evidence=evidence,
                details={"attempt": i})
            result_id = store.record(run_id, result)
            if status is Status.FAIL:
                failing.setdefault(env_id, []).append(result_id)
        store.finish_run(run_id)
    evaluate(store, envs, now=T0 + timedelta(hours=1))
    set_quarantine_by_id(store, "train-manual", add=True, actor="alice",
                         reason="reward hacking suspected", now=T0 + timedelta(hours=2))
    return failing


@dataclass
class Api:
    url: str
    http: requests.Session
    store: Store
    exports: Path
    failing: dict[str, list[int]]

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.get(self.url + path, timeout=(2, 10), **kwargs)

    def change(self, method: str, env_id: str, body: Any = None, token: str | None = TOKEN,
               **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.request(method, f"{self.url}/v1/quarantine/{env_id}", json=body,
                                 headers=headers, timeout=(2, 30), **kwargs)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


@pytest.fixture
def serve(store: Store, tmp_path: Path) -> Iterator[Callable[..., Api]]:
    """Start the API over the seeded store with create_app's keyword arguments."""
    failing = seed(store)
    with contextlib.ExitStack() as stack:
        def start(**kwargs: Any) -> Api:
            kwargs.setdefault("token", TOKEN)
            kwargs.setdefault("export_dir", tmp_path / "exports")
            url = stack.enter_context(serve_in_thread(create_app(store, **kwargs)))
            http = stack.enter_context(requests.Session())
            http.trust_env = False
            return Api(url, http, store, kwargs["export_dir"], failing)

        yield start


@pytest.fixture
def api(serve: Callable[..., Api]) -> Api:
    return serve()


# --- content ----------------------------------------------------------------------------------


def test_allowlist_content(api: Api) -> None:
    doc = api.get("/v1/suites/train/allowlist").json()
    assert doc["suite"] == "train"
    assert doc["allowed"] == ALLOWED["train"]
    assert doc["generation"] == api.store.generation() > 0
    assert doc["excluded"] == {
        "train-broken": "quarantined (auto): broken: terminal: tool_missing",
        "train-deps-drift": "quarantined (auto): broken: dependencies: version_drift",
        "train-flaky": "quarantined (auto): flaky: terminal: shell_slow",
        "train-manual": "quarantined (manual): reward hacking suspected",
        "train-degraded": "degraded: terminal: shell_slow",
        "train-infra": "unknown: not yet validated: terminal",
        "train-new": "unknown: not yet validated: terminal",
    }
    assert doc["healthy_fraction"] == 0.3
    # a suite that allows degraded environments lets them through
    assert api.get("/v1/suites/eval/allowlist").json()["allowed"] == ALLOWED["eval"]


def test_allowlist_matches_the_cli_gate(api: Api, store_url: str) -> None:
    for suite in ("train", "eval"):
        gate = subprocess.run([*envcheck_cmd(), "gate", "--suite", suite, "--json",
                               "--database", store_url], capture_output=True, text=True,
                              timeout=120, check=False)
        assert gate.returncode in (0, 1), gate.stderr
        cli = json.loads(gate.stdout)
        doc = api.get(f"/v1/suites/{suite}/allowlist").json()
        for key in ("allowed", "excluded", "generation", "healthy_fraction"):
            assert doc[key] == cli[key], key


def test_suite_feed_rows_agree_with_the_state_rows(api: Api) -> None:
    api.store.sync_environments([Environment(id="train-late", image="x:1", suite="train")])
    rows = api.store.suite_feed_rows("train")
    members = api.store.suite_members("train")
    states = {r.env_id: r for r in api.store.env_states(members)}
    assert [r.env_id for r in rows] == members
    for row in rows:
        full = states.get(row.env_id)
        assert (row.state, row.reason, row.quarantined, row.q_source, row.q_reason) == (
            (full.state, full.reason, full.quarantined, full.q_source, full.q_reason)
            if full is not None else (None, None, False, None, None))
    assert api.store.suite_feed_rows("nope") == []


def test_quarantine_list(api: Api) -> None:
    doc = api.get("/v1/quarantine").json()
    entries = {e["env_id"]: e for e in doc["quarantined"]}
    assert doc["count"] == len(entries) == len(QUARANTINED)
    assert {k: e["source"] for k, e in entries.items()} == QUARANTINED
    assert doc["generation"] == api.store.generation()
    manual = entries["train-manual"]
    assert (manual["actor"], manual["reason"], manual["state"]) == \
        ("alice", "reward hacking suspected", "healthy")
    assert manual["since"] == "2026-01-05T10:00:00Z"
    assert manual["evidence"] == []
    broken = entries["train-broken"]
    assert broken["actor"] == "envcheck"
    assert broken["reason"] == "broken: terminal: tool_missing"
    assert broken["evidence"] == api.failing["train-broken"]
    assert entries["train-flaky"]["evidence"] == api.failing["train-flaky"]
    eval_only = api.get("/v1/quarantine", params={"suite": "eval"}).json()
    assert [e["env_id"] for e in eval_only["quarantined"]] == ["eval-broken"]


def test_environment_detail(api: Api) -> None:
    doc = api.get("/v1/environments/train-deps-drift").json()
    assert (doc["suite"], doc["state"], doc["allowed"]) == ("train", "broken", False)
    assert doc["reason"] == "dependencies: version_drift"
    assert doc["generation"] == api.store.generation()
    deps, terminal = doc["kinds"]["dependencies"], doc["kinds"]["terminal"]
    assert (deps["state"], deps["failures"], deps["passes"], deps["runs"]) == ("broken", 2, 0, 2)
    assert deps["failure_rate"] == 1.0
    assert deps["wilson"]["high"] == 1.0 and 0.3 < deps["wilson"]["low"] < 0.4
    assert (terminal["state"], terminal["passes"], terminal["failure_rate"]) == ("healthy", 3, 0)
    assert terminal["wilson"]["low"] == 0.0 and 0.5 < terminal["wilson"]["high"] < 0.6
    assert terminal["image_digest"] == "sha256:train-deps-drift"
    q = doc["quarantine"]
    assert (q["source"], q["actor"]) == ("auto", "envcheck")
    assert q["evidence"] == api.failing["train-deps-drift"]
    [transition] = doc["history"]
    assert (transition["old_state"], transition["new_state"], transition["quarantined"]) == \
        ("unknown", "broken", True)
    latest = {r["kind"]: r for r in doc["latest_results"]}
    assert set(latest) == {"terminal", "dependencies"}
    assert (latest["dependencies"]["status"], latest["dependencies"]["reason"]) == \
        ("fail", "version_drift")
    assert latest["dependencies"]["evidence"][0]["exit_code"] == 127
    assert latest["dependencies"]["evidence"][0]["output_head"] == "git: not found"
    assert latest["dependencies"]["details"] == {"attempt": 4}


def test_environment_history_newest_first_and_limited(api: Api) -> None:
    doc = api.get("/v1/environments/train-manual").json()
    assert (doc["state"], doc["allowed"]) == ("healthy", False)
    assert [(t["actor"], t["quarantined"]) for t in doc["history"]] == \
        [("alice", True), ("envcheck", False)]
    assert doc["history"][0]["generation"] > doc["history"][1]["generation"]
    assert api.get("/v1/environments/train-manual", params={"history": 1}).json()["history"] \
        == doc["history"][:1]
    assert api.get("/v1/environments/train-manual", params={"history": 0}).json()["history"] \
        == []


def test_never_checked_environment(api: Api) -> None:
    api.store.sync_environments([Environment(id="train-late", image="x:1", suite="train")])
    doc = api.get("/v1/environments/train-late").json()
    assert (doc["state"], doc["reason"], doc["allowed"]) == ("unknown", "never checked", False)
    assert (doc["kinds"], doc["history"], doc["latest_results"], doc["quarantine"]) == \
        ({}, [], [], None)


# --- ETags ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/suites/train/allowlist", "/v1/quarantine",
                                  "/v1/quarantine?suite=train", "/v1/environments/train-ok-1"])
def test_etag_304_until_a_mutation(api: Api, path: str) -> None:
    first = api.get(path)
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith(f'"{api.store.generation()}-')
    assert first.headers["Cache-Control"] == "no-cache"
    again = api.get(path, headers={"If-None-Match": etag})
    assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", etag)
    assert api.get(path).headers["ETag"] == etag  # stable while nothing changes
    assert api.change("POST", "train-ok-1", {"reason": "audit"}).json()["changed"]
    after = api.get(path, headers={"If-None-Match": etag})
    assert after.status_code == 200
    assert after.headers["ETag"] != etag
    assert after.json()["generation"] == api.store.generation()


def test_etags_differ_between_resources(api: Api) -> None:
    tags = {api.get(p).headers["ETag"] for p in ("/v1/suites/train/allowlist",
                                                 "/v1/suites/eval/allowlist", "/v1/quarantine")}
    assert len(tags) == 3


def test_if_none_match_forms(api: Api) -> None:
    path = "/v1/suites/eval/allowlist"
    etag = api.get(path).headers["ETag"]
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        assert api.get(path, headers={"If-None-Match": header}).status_code == 304, header
    assert api.get(path, headers={"If-None-Match": '"0-stale"'}).status_code == 200


def test_cache_never_answers_a_new_generation_from_an_old_one() -> None:
    now = [0.0]
    cache = ResponseCache(5.0, lambda: now[0])
    a = cache.get("k", 1, lambda: b"a")
    assert cache.get("k", 1, lambda: b"b") is a  # cached
    c = cache.get("k", 2, lambda: b"c")  # a new generation rebuilds at once
    assert c.body == b"c" and c.etag != a.etag and c.etag.startswith('"2-')
    assert render("k", 2, b"c", 0.0).etag == c.etag  # same content, same tag
    assert render("other", 2, b"c", 0.0).etag != c.etag
    now[0] = 10.0  # expired: one caller rebuilds, the others get the previous body meanwhile
    started, release = threading.Event(), threading.Event()
    refreshed: list[Rendered] = []

    def slow() -> bytes:
        started.set()
        release.wait(10)
        return b"d"

    refresher = threading.Thread(target=lambda: refreshed.append(cache.get("k", 2, slow)))
    refresher.start()
    assert started.wait(10)
    assert cache.get("k", 2, lambda: b"x") is c
    release.set()
    refresher.join(10)
    assert refreshed[0].body == b"d"
    assert cache.get("k", 2, lambda: b"y").body == b"d"


def test_changes_without_a_transition_show_after_the_ttl(serve: Callable[..., Api]) -> None:
    now = [1000.0]
    api = serve(cache_ttl_s=5.0, clock=lambda: now[0])
    path = "/v1/suites/train/allowlist"
    before = api.get(path)
    # A catalogue sync lets degraded environments in: no transition, so no new generation.
    api.store.sync_suites([Suite(id="train", description="", allow_degraded=True,
                                 environment_ids=(), file="t.yaml")])
    assert api.get(path).json() == before.json()  # within the TTL: the cached body
    now[0] += 5.0
    after = api.get(path, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200
    assert "train-degraded" in after.json()["allowed"]


# --- auth -------------------------------------------------------------------------------------


def test_mutations_need_the_token(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    body = {"reason": "suspicious rewards", "actor": "bob"}
    missing = api.change("POST", "train-ok-1", body, token=None)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="envcheck"'
    assert missing.json()["error"] == "missing_token"
    basic = api.change("POST", "train-ok-1", body, token=None,
                       auth=("user", TOKEN))  # right secret, wrong scheme
    assert basic.status_code == 401
    wrong = api.change("POST", "train-ok-1", body, token=TOKEN[:-1] + "y")
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == 'Bearer realm="envcheck", error="invalid_token"'
    assert wrong.json() == {"error": "invalid_token", "reason": "the bearer token is not valid",
                            "fields": []}
    assert TOKEN not in wrong.text
    assert "train-ok-1" in api.get("/v1/suites/train/allowlist").json()["allowed"]
    assert len(calls) == 1  # the wrong token went through the constant-time comparison
    right = api.change("POST", "train-ok-1", body)
    assert right.status_code == 200, right.text
    assert len(calls) == 2
    doc = right.json()
    assert (doc["changed"], doc["quarantined"], doc["exports_written"]) == (True, True, True)
    assert doc["transition"]["actor"] == "bob"
    assert doc["generation"] == doc["transition"]["generation"] == api.store.generation()
    assert "train-ok-1" not in api.get("/v1/suites/train/allowlist").json()["allowed"]


def test_read_only_without_a_token(serve: Callable[..., Api]) -> None:
    api = serve(token=None)
    for method in ("POST", "DELETE"):
        answer = api.change(method, "train-ok-1", {"reason": "x"}, token=TOKEN)
        assert answer.status_code == 403
        assert answer.json()["error"] == "read_only"
        assert "ENVCHECK_API_TOKEN" in answer.json()["reason"]
    assert api.get("/v1/suites/train/allowlist").status_code == 200


def test_release_and_add_round_trip(api: Api) -> None:
    released = api.change("DELETE", "train-manual", {"reason": "false alarm", "actor": "alice"})
    assert released.status_code == 200
    assert (released.json()["changed"], released.json()["quarantined"]) == (True, False)
    assert "train-manual" in api.get("/v1/suites/train/allowlist").json()["allowed"]
    again = api.change("DELETE", "train-manual", {"reason": "false alarm"}).json()
    assert (again["changed"], again["transition"], again["exports_written"]) == \
        (False, None, False)
    # releasing an automatic entry by hand lets it out of quarantine, not into the allowlist
    api.change("DELETE", "train-broken", {"reason": "fixed upstream"})
    listing = api.get("/v1/suites/train/allowlist").json()
    assert listing["excluded"]["train-broken"] == "broken: terminal: tool_missing"
    added = api.change("POST", "eval-ok", {"reason": "  leaking answers  "}).json()
    assert added["transition"]["reason"] == "leaking answers"
    assert added["transition"]["actor"] == "api"


def test_exports_written_after_a_mutation(api: Api) -> None:
    api.change("POST", "eval-ok", {"reason": "leaking answers", "actor": "carol"})
    doc = json.loads((api.exports / "quarantine.json").read_text())
    assert doc["generation"] == api.store.generation()
    entry = next(e for e in doc["quarantined"] if e["env_id"] == "eval-ok")
    assert (entry["source"], entry["actor"], entry["reason"]) == \
        ("manual", "carol", "leaking answers")
    assert "eval-ok\n" in (api.exports / "quarantine.txt").read_text()
    assert (api.exports / "allowlist-eval.txt").read_text() == "eval-degraded\n"
    exported = json.loads((api.exports / "allowlist-train.json").read_text())
    assert exported["allowed"] == api.get("/v1/suites/train/allowlist").json()["allowed"]


# --- errors -----------------------------------------------------------------------------------


def test_unknown_things_are_404_with_a_reason(api: Api) -> None:
    suite = api.get("/v1/suites/nope/allowlist")
    assert suite.status_code == 404
    assert suite.json()["error"] == "unknown_suite"
    assert suite.json()["reason"] == "unknown suite 'nope' (known: eval, train)"
    assert api.get("/v1/quarantine", params={"suite": "nope"}).json()["error"] == \
        "unknown_suite"
    env = api.get("/v1/environments/nope")
    assert (env.status_code, env.json()["error"]) == (404, "unknown_environment")
    change = api.change("POST", "nope", {"reason": "x"})
    assert (change.status_code, change.json()["error"]) == (404, "unknown_environment")
    route = api.get("/v2/nothing")
    assert (route.status_code, route.json()["error"]) == (404, "not_found")
    method = api.http.put(api.url + "/v1/quarantine", timeout=5)
    assert (method.status_code, method.json()["error"]) == (405, "method_not_allowed")


@pytest.mark.parametrize(("body", "field", "kind"), [
    ({}, "reason", "missing"),
    ({"reason": "   "}, "reason", "string_too_short"),
    ({"reason": 5}, "reason", "string_type"),
    ({"reason": "x", "actor": ""}, "actor", "string_too_short"),
    ({"reason": "x", "why": "y"}, "why", "extra_forbidden"),
    ({"reason": "x" * 2001}, "reason", "string_too_long"),
    (None, "", "missing"),
    ("not json", "", "json_invalid"),
])
def test_bad_bodies_are_422_with_field_errors(api: Api, body: Any, field: str,
                                              kind: str) -> None:
    if body == "not json":
        answer = api.http.post(api.url + "/v1/quarantine/train-ok-1", data="{reason",
                               headers={"Authorization": f"Bearer {TOKEN}",
                                        "Content-Type": "application/json"}, timeout=5)
    else:
        answer = api.change("POST", "train-ok-1", body)
    assert answer.status_code == 422, answer.text
    doc = answer.json()
    assert doc["error"] == "invalid_request"
    assert doc["reason"].startswith("invalid request: ")
    assert [(f["field"] if field else "", f["location"], f["type"]) for f in doc["fields"]] \
        == [(field, "body", kind)]
    assert "train-ok-1" in api.get("/v1/suites/train/allowlist").json()["allowed"]


def test_a_store_outage_is_503(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def down() -> int:
        raise StoreError("cannot open the result store: connection refused")

    monkeypatch.setattr(api.store, "generation", down)
    answer = api.get("/v1/suites/train/allowlist")
    assert answer.status_code == 503
    assert answer.json()["error"] == "store_unavailable"
    assert answer.headers["Retry-After"] == "5"


def test_bad_query_is_422(api: Api) -> None:
    answer = api.get("/v1/environments/train-ok-1", params={"history": "many"})
    assert answer.status_code == 422
    assert [(f["field"], f["location"]) for f in answer.json()["fields"]] == \
        [("history", "query")]
    assert api.get("/v1/environments/train-ok-1", params={"history": 5000}).status_code == 422


# --- the spec ---------------------------------------------------------------------------------


def test_openapi_lists_every_route(api: Api) -> None:
    spec = api.get("/openapi.json").json()
    assert spec["info"]["title"] == "envcheck"
    routes = {(path, method) for path, ops in spec["paths"].items() for method in ops}
    assert routes == {("/v1/quarantine", "get"), ("/v1/suites/{suite}/allowlist", "get"),
                      ("/v1/environments/{env_id}", "get"), ("/v1/quarantine/{env_id}", "post"),
                      ("/v1/quarantine/{env_id}", "delete"), ("/v1/incidents", "get"),
                      ("/v1/rollouts", "post"), ("/v1/taint", "get"),
                      ("/v1/environments/{env_id}/taint", "get"),
                      ("/v1/environments/{env_id}/digests", "get")}
    taint = spec["paths"]["/v1/taint"]["get"]
    assert {"200", "404", "422"} <= set(taint["responses"])
    assert {p["name"] for p in taint["parameters"]} == {"since", "until", "suite"}
    post = spec["paths"]["/v1/quarantine/{env_id}"]["post"]
    assert post["security"] == [{"HTTPBearer": []}]
    assert {"401", "403", "404", "422"} <= set(post["responses"])
    allowlist = spec["paths"]["/v1/suites/{suite}/allowlist"]["get"]
    assert {"200", "304", "404"} <= set(allowlist["responses"])
    schemas = spec["components"]["schemas"]
    assert {"AllowlistOut", "EnvironmentOut", "QuarantineOut", "Problem",
            "QuarantineChange", "TaintOut", "TaintIntervalOut"} <= set(schemas)
    assert schemas["QuarantineChange"]["required"] == ["reason"]
    rollouts = spec["paths"]["/v1/rollouts"]["post"]
    assert {"400", "401", "403", "413", "415"} <= set(rollouts["responses"])
    record = rollouts["requestBody"]["content"]["application/json"]["schema"]["items"]
    assert record["required"] == ["env_id", "at", "producer", "seq", "outcome"]
    assert "$ref" not in json.dumps(record)  # inlined: nothing points outside the body


# --- tokens -----------------------------------------------------------------------------------


def test_token_from_variable_or_file(tmp_path: Path) -> None:
    assert load_api_token({}) is None
    assert load_api_token({"ENVCHECK_API_TOKEN": f" {TOKEN}\n"}) == TOKEN
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    assert load_api_token({"ENVCHECK_API_TOKEN_FILE": str(secret)}) == TOKEN
    bad = {
        "not both": {"ENVCHECK_API_TOKEN": TOKEN, "ENVCHECK_API_TOKEN_FILE": str(secret)},
        "cannot read": {"ENVCHECK_API_TOKEN_FILE": str(tmp_path / "missing")},
        "at least 16": {"ENVCHECK_API_TOKEN": "short"},
    }
    for message, environ in bad.items():
        with pytest.raises(ApiConfigError, match=message) as caught:
            load_api_token(environ)
        assert TOKEN not in str(caught.value)
    secret.write_text("\n")
    with pytest.raises(ApiConfigError, match="empty"):
        load_api_token({"ENVCHECK_API_TOKEN_FILE": str(secret)})


# --- serving ----------------------------------------------------------------------------------

SERVE = r"""
import sys
from envcheck.api.app import create_app, serve
from envcheck.store import open_store

with open_store(sys.argv[1]) as store:
    serve(create_app(store), port=int(sys.argv[2]))
    print("serve returned", flush=True)
"""


def test_serve_returns_on_sigterm(tmp_path: Path) -> None:
    """The daemon's shutdown code runs after serve(): a SIGTERM must not kill the process."""
    port = free_port()
    url = f"sqlite:///{tmp_path / 'envcheck.db'}"
    with subprocess.Popen([sys.executable, "-c", SERVE, url, str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/openapi.json",
                                          timeout=(1, 5)).status_code == 200,
                     timeout_s=60, what="the API to serve", interval_s=0.1, proc=proc)
        finally:
            out, err = stop(proc, 30)
    assert proc.returncode == 0, err
    assert out.strip() == "serve returned"


# --- load -------------------------------------------------------------------------------------

LOAD = r"""
import json, sys, threading, time
import requests

url, seconds, workers, cap = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
latencies, statuses, errors, lock = [], {}, [], threading.Lock()
deadline = time.monotonic() + seconds

def work():
    with requests.Session() as session:
        session.trust_env = False
        for _ in range(cap):
            if time.monotonic() > deadline:
                return
            started = time.perf_counter()
            try:
                response = session.get(url, timeout=(2, 10))
                response.json()
                outcome = response.status_code
            except Exception as exc:
                outcome = None
                with lock:
                    errors.append(repr(exc))
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                statuses[str(outcome)] = statuses.get(str(outcome), 0) + 1

begun = time.perf_counter()
threads = [threading.Thread(target=work) for _ in range(workers)]
for t in threads: t.start()
for t in threads: t.join()
wall = time.perf_counter() - begun
latencies.sort()
print(json.dumps({"requests": len(latencies), "wall_s": wall, "statuses": statuses,
                  "errors": errors[:5], "rps": len(latencies) / wall,
                  "p50_ms": 1000 * latencies[len(latencies) // 2],
                  "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)]}))
"""


@pytest.mark.slow
def test_allowlist_holds_under_load(api: Api, store_url: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = api.url + "/v1/suites/train/allowlist"
    load = subprocess.run([sys.executable, "-c", LOAD, url, "5", "4", "20000"],
                          capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(load.stdout)
    with capsys.disabled():
        print(f"\nload on {store_url.split(':', 1)[0]}: {report['requests']} requests, 4 "
              f"connections, {report['rps']:.0f} req/s, p50 {report['p50_ms']:.1f} ms, "
              f"p99 {report['p99_ms']:.1f} ms")
    assert report["errors"] == []
    assert report["statuses"] == {"200": report["requests"]}
    assert report["requests"] > 100
