"""Retired environments, on both backends: an environment that leaves the daemon's catalogue
leaves allowlists (the store's and ``envcheck gate``'s), quarantine lists, exports and counts,
keeps its history, and comes back with it when the catalogue names it again."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path

from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import evaluate, sync_fleet
from envcheck.store import Store, open_store
from envcheck.store.direct import open_direct
from envcheck.store.feed import RETIRED
from tests.conftest import envcheck_cmd
from tests.test_api import ALLOWED, QUARANTINED, T0, environments, seed

LEAVING = ["train-ok-1", "train-manual", "eval-broken"]  # allowed, quarantined by hand, auto


def fleet_answers(store: Store) -> dict[str, object]:
    direct = open_direct(str(store.engine.url.render_as_string(hide_password=False)))
    assert direct is not None
    with direct:
        gate = {s: allowlist(direct, s) for s in ("train", "eval")}
    return {
        "allowlists": {s: allowlist(store, s) for s in ("train", "eval")},
        "gate": gate,
        "quarantined": store.quarantined(),
        "overview": store.suite_overview(),
        "reasons": store.state_reasons(),
        # (the re-assessment in between moves each listing's assessed time only)
        "page": [(e.env_id, e.state, e.reason, e.quarantined, e.q_source, e.q_since)
                 for e in store.environment_page(limit=100).items],
        "quarantine_page": store.quarantine_page().items,
    }


def test_leaving_and_coming_back(store_url: str, tmp_path: Path) -> None:
    with open_store(store_url) as store:
        seed(store)
        envs = environments()
        before = fleet_answers(store)
        history = {e: (store.transitions(e), store.latest_results([e])) for e in LEAVING}
        generation = store.generation()

        staying = [e for e in envs if e.id not in LEAVING]
        moved = sync_fleet(store, staying, tmp_path / "exports", now=T0 + timedelta(hours=3))
        assert sorted(t.env_id for t in moved) == sorted(LEAVING)
        assert {t.new_state for t in moved} == {RETIRED}
        assert all(not t.quarantined for t in moved)
        assert {t.env_id for t in moved if t.was_quarantined} == {"train-manual", "eval-broken"}
        assert store.generation() > generation  # caches and ETags move on

        after = fleet_answers(store)
        for source in ("allowlists", "gate"):
            lists = after[source]
            assert isinstance(lists, dict)
            assert lists["train"].allowed == [e for e in ALLOWED["train"] if e not in LEAVING]
            assert "train-manual" not in lists["train"].excluded
            assert "eval-broken" not in lists["eval"].excluded
        assert sorted(q.env_id for q in store.quarantined()) == sorted(
            set(QUARANTINED) - set(LEAVING))
        counted = sum(s.environments for s in store.suite_overview())
        assert counted == len(envs) - len(LEAVING)
        assert not {e.env_id for e in store.environment_page(limit=100).items} & set(LEAVING)
        assert not {q.env_id for q in store.quarantine_page().items} & set(LEAVING)
        exported = json.loads((tmp_path / "exports" / "quarantine.json").read_text())
        assert not {q["env_id"] for q in exported["quarantined"]} & set(LEAVING)

        retired = {r.env_id: r for r in store.retired()}
        assert sorted(retired) == sorted(LEAVING)
        assert retired["train-manual"].quarantined and retired["train-ok-1"].state == "healthy"
        for env_id, (transitions, results) in history.items():  # history stays readable
            assert store.transitions(env_id)[1:] == transitions
            assert store.latest_results([env_id]) == results
            assert store.environment_record(env_id).retired_at is not None  # type: ignore[union-attr]

        # a re-assessment over the catalogue leaves them alone; a second sync moves nothing
        evaluate(store, staying, now=T0 + timedelta(hours=4))
        assert sync_fleet(store, staying, tmp_path / "exports") == []

        back = sync_fleet(store, envs, tmp_path / "exports", now=T0 + timedelta(hours=5))
        assert sorted(t.env_id for t in back) == sorted(LEAVING)
        assert {t.old_state for t in back} == {RETIRED}
        assert {t.env_id for t in back if t.quarantined} == {"train-manual", "eval-broken"}
        assert store.retired() == []
        returned = fleet_answers(store)
        for key in ("allowlists", "gate"):
            again, then = returned[key], before[key]
            assert isinstance(again, dict) and isinstance(then, dict)
            for suite in ("train", "eval"):  # the same answers, one generation on
                assert (again[suite].allowed, again[suite].excluded) == \
                    (then[suite].allowed, then[suite].excluded)
        for key in ("quarantined", "overview", "reasons", "page", "quarantine_page"):
            assert returned[key] == before[key], key


def test_envcheck_retired_lists_them(store_url: str, cli_env: dict[str, str],
                                     tmp_path: Path) -> None:
    with open_store(store_url) as store:
        seed(store)
        sync_fleet(store, [e for e in environments() if e.id not in LEAVING], tmp_path)
    proc = subprocess.run([*envcheck_cmd(), "retired", "--json", "--database", store_url],
                          check=False, env=cli_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert sorted(r["env_id"] for r in listed) == sorted(LEAVING)
    assert {r["env_id"]: r["state"] for r in listed}["eval-broken"] == "broken"
    table = subprocess.run([*envcheck_cmd(), "retired", "--database", store_url], check=False,
                           env=cli_env, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "retired: 3" in table.stdout
    gate = subprocess.run([*envcheck_cmd(), "gate", "--suite", "train", "--database",
                           store_url], check=False, env=cli_env, capture_output=True,
                          text=True, timeout=60)
    assert "train-ok-1" not in gate.stdout and "train-manual" not in gate.stderr
