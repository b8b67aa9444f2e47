"""Taint with real parts, on SQLite and PostgreSQL: a store filled through the real paths
(results recorded, states assessed by ``feed.assess.evaluate``, a person's quarantine, rollout
batches counted), read back as intervals by the feed, the API served for real, the client,
``envcheck taint`` as a process, and ``taint.jsonl`` on disk; a prune changes none of it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from envcheck.api.app import create_app, serve_in_thread
from envcheck.catalogue.models import Environment, Suite
from envcheck.catalogue.probe_specs import DependencySpec, TestSpec
from envcheck.client import EnvcheckClient
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.rollouts import Outcome, Rollout
from envcheck.feed.assess import assess_cycle, evaluate, set_quarantine_by_id
from envcheck.feed.exports import write_exports
from envcheck.feed.taint import TAINT_FILE, refresh_taint, taint, taint_text, write_taint
from envcheck.health.taint import Basis, TaintInterval
from envcheck.health.trust import UNTRUSTED_REASONS, UNTRUSTED_STATES
from envcheck.store import Store, open_store
from envcheck.store.retention import Retention
from envcheck.store.tables.states import TransitionRow
from tests.conftest import envcheck_cmd
from tests.docs_pages import blocks, page

# ten days ago, on the hour: every test's story fits in a 30-day window
T0 = (datetime.now(UTC) - timedelta(days=10)).replace(minute=0, second=0, microsecond=0)
A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64
T, D, X = ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS
P, F, FL, E = Status.PASS, Status.FAIL, Status.FLAKY, Status.ERROR


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def env(env_id: str, suite: str = "train", *, deps: bool = False, tests: bool = False
        ) -> Environment:
    return Environment(id=env_id, image=f"fleet/{env_id}:1", suite=suite, tools=["git"],
                       dependencies=DependencySpec(python={"requests": ">=2"}) if deps else None,
                       tests=TestSpec(command="pytest -q") if tests else None)


ENVS = {e.id: e for e in (
    env("t-broken"), env("t-flaky"), env("t-released"), env("t-newdigest"),
    env("t-hack", tests=True), env("t-degraded"), env("t-manual"),
    env("t-twokinds", deps=True), env("e-rollouts", "eval"), env("e-ok", "eval"))}


@dataclass
class Seeded:
    store: Store
    ids: dict[str, list[int]]  # env id -> its recorded result ids, oldest first


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store, self.ids = store, dict[str, list[int]]()
        self.run = store.start_run("test", [])
        self.results: list[ProbeResult] = []

    def result(self, env_id: str, hours: float, kind: ProbeKind = T, status: Status = P,
               reason: Reason = Reason.OK, digest: str = A) -> int:
        result = ProbeResult(
            env_id=env_id, kind=kind, status=status, reason=reason, summary=f"{kind} {status}",
            duration_s=0.5, image_digest=digest, spec_hash=ENVS[env_id].spec_hash(kind),
            started_at=at(hours))
        rid = self.store.record(self.run, result)
        self.results.append(result)
        self.ids.setdefault(env_id, []).append(rid)
        return rid

    def assess(self, env_id: str, hours: float) -> None:
        evaluate(self.store, [ENVS[env_id]], now=at(hours))


def seed(store: Store) -> Seeded:
    """Each environment's story, through the real paths."""
    envs = list(ENVS.values())
    store.sync_suites([Suite(id=s, description=s, allow_degraded=False, file=f"{s}.yaml",
                             environment_ids=tuple(e.id for e in envs if e.suite == s))
                       for s in ("train", "eval")])
    store.sync_environments(envs)
    r = Recorder(store)
    # broken from its first result (an error of envcheck's own first, which counts nothing)
    r.result("t-broken", 0, status=E, reason=Reason.CHECKER_CRASHED)
    r.result("t-broken", 1, status=F, reason=Reason.TOOL_MISSING)
    r.result("t-broken", 2, status=F, reason=Reason.TOOL_MISSING)
    r.assess("t-broken", 2.5)
    # passes, then a failure now and then: flaky from its first failure
    for h, (status, reason) in enumerate([(P, Reason.OK), (P, Reason.OK),
                                          (F, Reason.SHELL_SLOW), (P, Reason.OK),
                                          (F, Reason.SHELL_SLOW)]):
        r.result("t-flaky", h, status=status, reason=reason)
        r.assess("t-flaky", h + 0.5)
    # broken, then fixed in place: released after 15 clean probes
    r.result("t-released", 0, status=F, reason=Reason.WORKDIR_MISSING)
    r.result("t-released", 1, status=F, reason=Reason.WORKDIR_MISSING)
    r.assess("t-released", 1.5)
    for h in range(2, 17):
        r.result("t-released", h)
    r.assess("t-released", 16.5)
    # broken on digest A, then a new image that works
    r.result("t-newdigest", 0, status=F, reason=Reason.USER_MISSING)
    r.result("t-newdigest", 1, status=F, reason=Reason.USER_MISSING)
    r.assess("t-newdigest", 1.5)
    r.result("t-newdigest", 3, digest=B)
    r.assess("t-newdigest", 3.5)
    # clean from hour 0; at hour 5 a trick earned the reward: the image was hackable all along
    r.result("t-hack", 0)
    r.result("t-hack", 0, kind=X)
    r.assess("t-hack", 0.5)
    r.result("t-hack", 5, kind=X, reason=Reason.REWARD_HACKABLE)
    r.assess("t-hack", 5.5)
    # one slow shell: degraded, nothing to drop
    r.result("t-degraded", 0)
    r.result("t-degraded", 1, status=F, reason=Reason.SHELL_SLOW)
    r.assess("t-degraded", 1.5)
    # healthy, quarantined by a person at hour 3, released at hour 6
    r.result("t-manual", 0)
    r.assess("t-manual", 0.5)
    set_quarantine_by_id(store, "t-manual", add=True, actor="alice",
                         reason="rewards look too good", now=at(3))
    set_quarantine_by_id(store, "t-manual", add=False, actor="alice", reason="false alarm",
                         now=at(6))
    # its dependencies broken on A, its terminal fine
    for h in (0, 1):
        r.result("t-twokinds", h)
        r.result("t-twokinds", h, kind=D, status=F, reason=Reason.PACKAGE_MISSING)
    r.assess("t-twokinds", 1.5)
    r.result("e-ok", 0)
    r.assess("e-ok", 0.5)
    seed_rollouts(store, r)
    return Seeded(store, r.ids)


def seed_rollouts(store: Store, r: Recorder) -> None:
    """Probes pass; the training run's sandboxes fail from 02:10 on; the rollouts flag it."""
    r.result("e-rollouts", 0)
    r.assess("e-rollouts", 0.5)
    seq = iter(range(10_000))
    batch = [Rollout("e-rollouts", at(h) + timedelta(minutes=m), "run-7", next(seq),
                     Outcome.OK, A, 1.0) for h in (1, 2, 3) for m in (5, 20, 40)]
    batch += [Rollout("e-rollouts", at(2) + timedelta(minutes=m), "run-7", next(seq),
                      Outcome.SANDBOX_START_FAILED, A) for m in (10, 30, 50)]
    batch += [Rollout("e-rollouts", at(3) + timedelta(minutes=15), "run-7", next(seq),
                      Outcome.VERIFIER_ERROR, A, 0.0),
              Rollout("e-rollouts", at(1) + timedelta(minutes=1), "run-7", next(seq),
                      Outcome.AGENT_TIMEOUT, A, 0.0)]  # the trainer's own: no evidence
    assert store.record_rollouts(batch).counted == len(batch)
    # what the health model's rollouts part writes when it flags (state and transition in one
    # write, as evaluate's own): stood in here by the store's write it makes
    flagged = at(4)
    store.apply("e-rollouts", "eval", {
        "state": "degraded", "reason": "rollouts: rollout_failures",
        "rollouts": {"state": "degraded", "flagged": True, "reason": "rollout_failures",
                     "image_digest": A, "flagged_at": flagged.isoformat(),
                     "first_failure_at": (at(2) + timedelta(minutes=10)).isoformat()}},
        TransitionRow(env_id="e-rollouts", at=flagged, old_state="healthy",
                      new_state="degraded", was_quarantined=False, quarantined=False,
                      actor="envcheck", reason="healthy -> degraded: rollouts: "
                      "rollout_failures", evidence=[], image_digest=A))


@pytest.fixture
def seeded(store_url: str) -> Iterator[Seeded]:
    with open_store(store_url) as store:
        yield seed(store)


def expected(ids: dict[str, list[int]]) -> dict[str, list[tuple[Any, ...]]]:
    """env id -> [(start, end, basis, kind, reason, digest, evidence)] the stories make."""
    return {
        "t-broken": [(at(0), None, Basis.IDENTITY, "terminal", "tool_missing", A,
                      tuple(ids["t-broken"][1:]))],
        "t-flaky": [(at(2), None, Basis.FIRST_FAILURE, "terminal", "shell_slow", A,
                     (ids["t-flaky"][2], ids["t-flaky"][4]))],
        "t-released": [(at(0), at(16.5), Basis.IDENTITY, "terminal", "workdir_missing", A,
                        tuple(ids["t-released"][:2]))],
        "t-newdigest": [(at(0), at(3), Basis.IDENTITY, "terminal", "user_missing", A,
                         tuple(ids["t-newdigest"][:2]))],
        "t-hack": [(at(0), None, Basis.IDENTITY, "tests", "reward_hackable", A,
                    (ids["t-hack"][2],))],
        "t-manual": [(at(3), at(6), Basis.MANUAL, None, "rewards look too good", A, ())],
        "t-twokinds": [(at(0), None, Basis.IDENTITY, "dependencies", "package_missing", A,
                        (ids["t-twokinds"][1], ids["t-twokinds"][3]))],
        "e-rollouts": [(at(2) + timedelta(minutes=10), None, Basis.FIRST_FAILING_ROLLOUTS,
                        "rollouts", "rollout_failures", A, ())],
    }


def shape(found: list[TaintInterval]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for i in found:
        out.setdefault(i.env_id, []).append(
            (i.start, i.end, i.basis, i.kind, i.reason, i.image_digest, i.evidence))
    return out


# --- the feed -------------------------------------------------------------------------------------


def test_each_story_gives_its_interval(seeded: Seeded) -> None:
    found = taint(seeded.store)
    assert shape(found) == expected(seeded.ids)
    assert {i.env_id: i.suite for i in found}["e-rollouts"] == "eval"
    # flagged when envcheck decided: after the evidence it reaches back to
    flagged = {i.env_id: i.flagged_at for i in found}
    assert flagged["t-broken"] == at(2.5) and flagged["t-hack"] == at(5.5)
    assert flagged["e-rollouts"] == at(4)


def test_a_window_a_suite_and_one_environment(seeded: Seeded) -> None:
    store = seeded.store
    assert {i.env_id for i in taint(store, suite="eval")} == {"e-rollouts"}
    assert [i.env_id for i in taint(store, env_id="t-released")] == ["t-released"]
    assert taint(store, env_id="e-ok") == []
    # those that meet [since, until] only: t-newdigest's ended at hour 3, t-manual's at 6
    late = {i.env_id for i in taint(store, since=at(7))}
    assert "t-newdigest" not in late and "t-manual" not in late and "t-released" in late
    early = {i.env_id for i in taint(store, until=at(1))}
    assert early == {"t-broken", "t-released", "t-newdigest", "t-hack", "t-twokinds"}
    # a window reads only the environments that may matter to it, and misses none
    every = taint(store)
    for hours in (-1, 2.5, 3, 5.9, 6, 7, 16.5, 17, 1000):
        assert taint(store, since=at(hours)) == [i for i in every if i.overlaps(at(hours), None)]
    read = store.taint_facts(states=UNTRUSTED_STATES, reasons=UNTRUSTED_REASONS,
                             active_since=at(17))
    assert "t-released" not in {f.env_id for f in read}  # released at 16.5, nothing since
    assert {"t-broken", "e-rollouts"} <= {f.env_id for f in read}


def test_a_prune_changes_no_interval(store_url: str) -> None:
    """The identity's first results pruned (folded into the rollups): its interval still
    reaches back to them."""
    with open_store(store_url) as store:
        seed(store)
        r = Recorder(store)
        for h in range(420):  # more clean probes than the health model's window keeps
            r.result("t-hack", -500 + h)
        before = taint(store)
        assert [i.start for i in before if i.env_id == "t-hack"] == [at(-500)]
        report = store.prune(Retention(), now=datetime.now(UTC))
        assert report.results_deleted >= 20
        assert taint(store) == before


def test_a_rollout_flag_through_the_daemons_look_taints_from_the_first_failing_rollout(
        store_url: str) -> None:
    """The real path: the trainer's batches counted, the daemon's look flags the one
    environment failing beside a clean fleet, the full probe passes here; the interval starts
    at its first failing rollout and stays open (a reason not to trust the cluster's
    rewards)."""
    from envcheck.feed.rollouts import RolloutLooks
    from envcheck.health.rollouts import RolloutPolicy

    fleet = {e.id: e for e in (env(f"r-{i}", "eval") for i in range(6))}
    now = datetime.now(UTC).replace(microsecond=0)
    first_failure = now - timedelta(minutes=100)
    with open_store(store_url) as store:
        store.sync_suites([Suite(id="eval", description="", allow_degraded=False, file="e",
                                 environment_ids=tuple(fleet))])
        store.sync_environments(list(fleet.values()))

        def probed(at_: datetime) -> None:
            run = store.start_run("test", [])
            for e in fleet.values():
                store.record(run, ProbeResult(e.id, T, P, Reason.OK, "ok", 0.5, A,
                                              e.spec_hash(T), at_))
            evaluate(store, list(fleet.values()), now=at_ + timedelta(minutes=1))

        probed(now - timedelta(hours=3))
        seq = iter(range(100_000))
        batch = [Rollout(e, now - timedelta(minutes=150), "run-9", next(seq), Outcome.OK, A,
                         1.0) for e in fleet for _ in range(200)]
        batch += [Rollout(e, now - timedelta(minutes=95), "run-9", next(seq),
                          Outcome.SANDBOX_LOST, A) for e in fleet if e != "r-0"]
        batch += [Rollout("r-0", first_failure + timedelta(minutes=m), "run-9", next(seq),
                          Outcome.SANDBOX_LOST, A) for m in range(30)]
        store.record_rollouts(batch)
        outcome = RolloutLooks(store, RolloutPolicy()).look(fleet)
        assert outcome.flagged == ("r-0",)
        [got] = taint(store)
        assert (got.env_id, got.basis, got.kind, got.reason, got.image_digest, got.end) == \
            ("r-0", Basis.FIRST_FAILING_ROLLOUTS, "rollouts", "rollout_failures", A, None)
        assert got.start == first_failure
        # the full probe passes here: fails on the cluster only, still not to be trusted
        probed(now)
        row = store.env_state("r-0")
        assert row is not None and row.reason.endswith("(fails on the cluster, passes here)")
        assert taint(store) == [got]


# --- the exports ----------------------------------------------------------------------------------


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_export_is_written_with_the_others_and_follows_every_window(
        seeded: Seeded, tmp_path: Path) -> None:
    store, exports = seeded.store, tmp_path / "exports"
    # the first window writes every export, taint.jsonl among them
    outcome = assess_cycle(store, store.start_run("test", []), [ENVS["e-ok"]], [], {},
                           export_dir=exports)
    assert outcome.transitions == []
    path = exports / TAINT_FILE
    assert lines(path) == [i.to_json() for i in taint(store)]
    assert path.read_text(encoding="utf-8") == taint_text(taint(store))
    assert (exports / "quarantine.json").exists()
    open_line = next(x for x in lines(path) if x["env_id"] == "t-twokinds")
    assert open_line["end"] is None and open_line["basis"] == "identity"
    # a window with no transition: t-twokinds' terminal probe sees a new image, which ends
    # the interval of the old one (its dependencies stay broken: no state moves)
    r = Recorder(store)
    r.result("t-twokinds", 20, digest=B)
    outcome = assess_cycle(store, r.run, [ENVS["t-twokinds"]], r.results, {},
                           export_dir=exports)
    assert outcome.transitions == []
    closed = next(x for x in lines(path) if x["env_id"] == "t-twokinds")
    assert closed["end"] == at(20).isoformat()
    # the window's environments brought up to date, the others kept: the whole file's text
    assert path.read_text(encoding="utf-8") == taint_text(taint(store))
    # a window with a transition: t-degraded fails again and is quarantined
    r = Recorder(store)
    r.result("t-degraded", 21, status=F, reason=Reason.SHELL_SLOW)
    outcome = assess_cycle(store, r.run, [ENVS["t-degraded"]], r.results, {},
                           export_dir=exports)
    assert [t.new_state for t in outcome.transitions] == ["flaky"]
    [flaky] = [x for x in lines(path) if x["env_id"] == "t-degraded"]
    assert (flaky["start"], flaky["end"], flaky["basis"]) == \
        (at(1).isoformat(), None, "first_failure")
    assert path.read_text(encoding="utf-8") == taint_text(taint(store))
    # nothing changed: not rewritten
    assert write_taint(store, exports) is False
    assert refresh_taint(store, exports, ["t-twokinds", "e-ok"]) is False
    # missing or not ours: written whole
    path.unlink()
    assert refresh_taint(store, exports, ["e-ok"]) is True
    assert path.read_text(encoding="utf-8") == taint_text(taint(store))
    path.write_text("not json\n", encoding="utf-8")
    assert refresh_taint(store, exports, []) is True
    assert path.read_text(encoding="utf-8") == taint_text(taint(store))
    assert not list(exports.glob(".taint.jsonl.*"))  # no temporary file left behind


def test_a_manual_change_rewrites_it(seeded: Seeded, tmp_path: Path) -> None:
    exports = write_exports(seeded.store, tmp_path / "exports")
    assert "t-degraded" not in {x["env_id"] for x in lines(exports / TAINT_FILE)}
    set_quarantine_by_id(seeded.store, "t-degraded", add=True, actor="bob", reason="odd",
                         now=at(30))
    write_exports(seeded.store, exports)
    [manual] = [x for x in lines(exports / TAINT_FILE) if x["env_id"] == "t-degraded"]
    assert (manual["basis"], manual["start"], manual["end"]) == \
        ("manual", at(30).isoformat(), None)


def test_a_quarantine_through_the_api_brings_the_file_up_to_date(seeded: Seeded,
                                                                 tmp_path: Path) -> None:
    exports = write_exports(seeded.store, tmp_path / "exports")
    token = "taint-token-" + "x" * 16
    app = create_app(seeded.store, token, export_dir=exports)
    with serve_in_thread(app) as url, requests.Session() as http:
        http.trust_env = False
        answer = http.post(f"{url}/v1/quarantine/e-ok", json={"reason": "odd", "actor": "dan"},
                           headers={"Authorization": f"Bearer {token}"}, timeout=(2, 30))
        assert answer.status_code == 200 and answer.json()["exports_written"]
    [line] = [x for x in lines(exports / TAINT_FILE) if x["env_id"] == "e-ok"]
    assert (line["basis"], line["reason"], line["end"]) == ("manual", "odd", None)
    assert (exports / TAINT_FILE).read_text(encoding="utf-8") == taint_text(taint(seeded.store))


# --- the API, the client, the CLI -----------------------------------------------------------------


@pytest.fixture
def api(seeded: Seeded) -> Iterator[tuple[str, requests.Session]]:
    with serve_in_thread(create_app(seeded.store)) as url, requests.Session() as http:
        http.trust_env = False
        yield url, http


def intervals_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**i, "start": datetime.fromisoformat(i["start"]),
             "end": datetime.fromisoformat(i["end"]) if i["end"] else None,
             "flagged_at": datetime.fromisoformat(i["flagged_at"])} for i in doc["intervals"]]


def as_dicts(found: list[TaintInterval]) -> list[dict[str, Any]]:
    return [{**i.to_json(), "start": i.start, "end": i.end, "flagged_at": i.flagged_at}
            for i in found]


def test_the_api_answers_what_the_feed_says(seeded: Seeded,
                                            api: tuple[str, requests.Session]) -> None:
    url, http = api
    doc = http.get(f"{url}/v1/taint", timeout=(2, 30)).json()
    assert doc["count"] == len(doc["intervals"]) == len(taint(seeded.store))
    assert intervals_of(doc) == as_dicts(taint(seeded.store))
    assert doc["since"] is None and doc["until"] is None
    assert doc["generation"] == seeded.store.generation()
    since, until = at(7).isoformat(), at(8).isoformat()
    window = http.get(f"{url}/v1/taint", params={"since": since, "until": until,
                                                 "suite": "train"}, timeout=(2, 30)).json()
    assert intervals_of(window) == as_dicts(taint(seeded.store, since=at(7), until=at(8),
                                                  suite="train"))
    assert datetime.fromisoformat(window["since"]) == at(7)
    one = http.get(f"{url}/v1/environments/t-released/taint", timeout=(2, 30))
    assert intervals_of(one.json()) == as_dicts(taint(seeded.store, env_id="t-released"))
    # conditional like every GET
    again = http.get(f"{url}/v1/environments/t-released/taint", timeout=(2, 30),
                     headers={"If-None-Match": one.headers["ETag"]})
    assert again.status_code == 304
    recent = http.get(f"{url}/v1/taint", params={"since": "30d"}, timeout=(2, 30)).json()
    assert recent["count"] == doc["count"]
    # cached like the lists, but a transition shows at once
    set_quarantine_by_id(seeded.store, "e-ok", add=True, actor="carol", reason="odd rewards",
                         now=at(40))
    moved = http.get(f"{url}/v1/taint", params={"since": "30d"}, timeout=(2, 30)).json()
    assert moved["count"] == doc["count"] + 1
    assert [(i["basis"], i["reason"]) for i in moved["intervals"] if i["env_id"] == "e-ok"] \
        == [("manual", "odd rewards")]


@pytest.mark.parametrize(("path", "params", "status", "error", "field"), [
    ("/v1/taint", {"suite": "nope"}, 404, "unknown_suite", None),
    ("/v1/taint", {"since": "yesterday"}, 422, "invalid_request", "since"),
    ("/v1/taint", {"until": "2026-13-40"}, 422, "invalid_request", "until"),
    ("/v1/taint", {"since": "1d", "until": "3d"}, 422, "invalid_request", "until"),
    ("/v1/environments/nope/taint", {}, 404, "unknown_environment", None),
    ("/v1/environments/t-broken/taint", {"since": "soon"}, 422, "invalid_request", "since"),
])
def test_bad_requests_are_told_why(api: tuple[str, requests.Session], path: str,
                                   params: dict[str, str], status: int, error: str,
                                   field: str | None) -> None:
    url, http = api
    answer = http.get(url + path, params=params, timeout=(2, 30))
    assert answer.status_code == status
    body = answer.json()
    assert body["error"] == error and body["reason"]
    if field is not None:
        assert [f["field"] for f in body["fields"]] == [field]
        assert body["fields"][0]["location"] == "query"
    if error == "unknown_suite":
        assert "train" in body["reason"] and "eval" in body["reason"]


def test_the_client_reads_one_environment_and_all(seeded: Seeded,
                                                 api: tuple[str, requests.Session]) -> None:
    url, _ = api
    with EnvcheckClient(url, retries=0) as client:
        [released] = client.taint("t-released")
        assert (released.start, released.end, released.basis, released.kind) == \
            (at(0), at(16.5), "identity", "terminal")
        assert released.covers(at(16)) and not released.covers(at(16.5))
        assert released.evidence == tuple(seeded.ids["t-released"][:2])
        assert client.taint("t-released", since=at(17)) == []
        every = client.taint_all(since="30d")
        assert [(i.env_id, i.start, i.end, i.basis) for i in every] == \
            [(i.env_id, i.start, i.end, str(i.basis)) for i in taint(seeded.store)]
        assert {i.env_id for i in client.taint_all(suite="eval", since=at(0), until=at(50))} \
            == {"e-rollouts"}
        from envcheck.client import ApiError

        with pytest.raises(ApiError, match="unknown_suite"):
            client.taint_all(suite="nope")


def cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*envcheck_cmd(), "taint", *args, "--database", store_url],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "250"})


def test_the_cli_prints_what_the_api_answers(seeded: Seeded, store_url: str,
                                             api: tuple[str, requests.Session]) -> None:
    url, http = api
    doc = cli(store_url, "--since", "30d", "--json")
    assert doc.returncode == 0, doc.stderr
    printed = json.loads(doc.stdout)
    served = http.get(f"{url}/v1/taint", params={"since": "30d"}, timeout=(2, 30)).json()
    assert intervals_of(printed) == intervals_of(served)
    jsonl = cli(store_url, "--since", "30d", "--jsonl", "--suite", "eval")
    assert jsonl.returncode == 0, jsonl.stderr
    assert [json.loads(x) for x in jsonl.stdout.splitlines()] == \
        [i.to_json() for i in taint(seeded.store, suite="eval")]
    table = cli(store_url, "--since", at(-1).isoformat(), "--until", at(2).isoformat())
    assert table.returncode == 0, table.stderr
    # until is inclusive: t-flaky's, from hour 2, meets it
    for env_id in ("t-broken", "t-flaky", "t-released", "t-newdigest", "t-hack", "t-twokinds"):
        assert env_id in table.stdout
    assert "e-rollouts" not in table.stdout and "open" in table.stdout
    assert re.search(r"tainted intervals: 6\b", table.stdout), table.stdout
    # the default window is the last 24 hours: every story is older, the open ones remain
    recent = cli(store_url, "--jsonl")
    assert {json.loads(x)["env_id"] for x in recent.stdout.splitlines()} == \
        {i.env_id for i in taint(seeded.store) if i.end is None}


@pytest.mark.parametrize(("args", "says"), [
    (("--since", "yesterday"), "--since: 'yesterday' is neither"),
    (("--since", "1d", "--until", "2d"), "--until:"),
    (("--suite", "nope"), "unknown suite 'nope'"),
    (("--env", "nope"), "unknown environment 'nope'"),
])
def test_the_cli_says_what_is_wrong_and_exits_2(seeded: Seeded, store_url: str,
                                                args: tuple[str, ...], says: str) -> None:
    done = cli(store_url, *args)
    assert done.returncode == 2
    assert says in done.stderr and "Traceback" not in done.stderr


def test_the_cli_exits_3_when_the_store_does_not_answer() -> None:
    from tests.ports import free_port

    done = cli(f"postgresql://postgres@127.0.0.1:{free_port()}/none", "--since", "1d")
    assert done.returncode == 3
    assert "error" in done.stderr and "Traceback" not in done.stderr


# --- the documented trainer (docs/how-to/tainted-samples.md) -------------------------------------


TRAINER_PAGE = "how-to/tainted-samples.md"


def documented_trainer() -> str:
    [code] = [b for b in blocks(page(TRAINER_PAGE), "python") if "def triage" in b]
    return code


def test_the_documented_trainer_drops_relabels_and_replays(
        seeded: Seeded, api: tuple[str, requests.Session]) -> None:
    url, _ = api
    code = documented_trainer()
    assert "http://127.0.0.1:8787" in code
    names: dict[str, Any] = {}
    # the page's samples are the reader's own; these are the trainer's for the test
    prelude = code.split("with EnvcheckClient", 1)[0]
    exec(compile(prelude, TRAINER_PAGE, "exec"), names)
    sample = names["Sample"]
    samples = [sample("t-hack", at(3), 1.0, "task-1"),        # hackable all along: replay
               sample("t-flaky", at(3), 0.0, "task-2"),       # a zero of a flaky sandbox
               sample("t-flaky", at(3), 1.0, "task-3"),       # a one of a flaky sandbox
               sample("t-flaky", at(1), 0.0, "task-4"),       # before it failed: kept
               sample("t-released", at(17), 1.0, "task-5"),   # after its release: kept
               sample("e-ok", at(3), 0.0, "task-6")]          # never tainted
    names["samples"] = samples
    rest = "with EnvcheckClient" + code.split("with EnvcheckClient", 1)[1]
    exec(compile(rest.replace("http://127.0.0.1:8787", url).replace('suite="demo"',
                                                                     'suite="train"'),
                 TRAINER_PAGE, "exec"), names)
    kept, dropped, replay = names["kept"], names["dropped"], names["replay"]
    assert [s.task for s in kept] == ["task-2", "task-4", "task-5", "task-6"]
    assert kept[0].reward is None and kept[0].weight == 0.0  # relabelled
    assert [s.task for s in dropped] == ["task-1", "task-3"]
    assert replay == ["task-1"]
