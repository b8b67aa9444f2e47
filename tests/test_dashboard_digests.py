"""The Environment page's digest history under ``streamlit.testing.v1.AppTest``, over a store
holding a watched tag that moved (``tests/digest_seed.py``): one row per digest the tag
pointed at, newest first, each with its results per kind; no error box."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from envcheck.catalogue.models import Environment, Suite
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.feed.assess import evaluate
from envcheck.store import open_store
from tests.conftest import ROOT
from tests.digest_seed import LOCAL, NEW, OLD, T0, seed_moved_tag

APP = ROOT / "dashboards" / "app.py"


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'envcheck.db'}"
    with open_store(url) as store:
        seed_moved_tag(store)
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", url)
    for name in ("ENVCHECK_API_URL", "ENVCHECK_API_TOKEN", "ENVCHECK_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    yield url
    st.cache_data.clear()
    st.cache_resource.clear()  # closes the stores the app opened


def environment_page(env_id: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(env=env_id)
    at.run()
    at.switch_page("views/environment.py")
    at.query_params.update(env=env_id)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def digests(at: AppTest) -> pd.DataFrame:
    [table] = [d.value for d in at.dataframe if "newest by kind" in d.value.columns]
    return table


def test_a_moved_tag_shows_each_digest_with_its_kinds(store_url: str) -> None:
    at = environment_page("watched-task")
    text = "\n".join(m.value for m in (*at.markdown, *at.caption))
    assert "`127.0.0.1:5055/team/task:latest` is followed in its registry" in text
    assert "GET /v1/environments/watched-task/digests" in text
    table = digests(at)
    assert table["digest"].tolist() == [NEW, OLD]
    assert table["now"].tolist() == ["◀", ""]
    assert table["results"].tolist() == [4, 5]
    assert table["failures"].tolist() == [0, 1]
    assert table["newest by kind"].tolist() == [
        "dependencies pass · image pass · terminal pass · tests pass",
        "dependencies fail · image pass (3) · terminal pass"]
    assert table["first seen"].tolist() == ["2026-01-05 08:15 UTC", "2026-01-05 08:00 UTC"]


def test_a_local_image_has_no_tag_to_follow(store_url: str) -> None:
    at = environment_page("local-task")
    text = "\n".join(m.value for m in at.markdown)
    assert "is followed in its registry" not in text
    assert digests(at)["digest"].tolist() == [LOCAL]


def test_an_environment_with_errors_only_draws_no_rate(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind assessed with no run (the registry's errors alone: a tag never pushed) shows
    its table and no chart, not an error box."""
    url = f"sqlite:///{tmp_path / 'envcheck.db'}"
    env = Environment(id="never-pushed", suite="reg", pull="watch",
                      image="127.0.0.1:5055/team/gone:latest")
    with open_store(url) as store:
        store.sync_suites([Suite(id="reg", description="", file="r.yaml", allow_degraded=False,
                                 environment_ids=(env.id,))])
        store.sync_environments([env])
        run_id = store.start_run("test", [])
        for minute, kind in enumerate((ProbeKind.IMAGE, ProbeKind.TERMINAL)):
            store.record(run_id, ProbeResult(
                env_id=env.id, kind=kind, status=Status.ERROR,
                reason=Reason.REGISTRY_UNREACHABLE, summary="the registry did not answer",
                duration_s=0.1, started_at=T0 + timedelta(minutes=minute)))
        store.finish_run(run_id)
        evaluate(store, [env], now=T0 + timedelta(minutes=5))
    monkeypatch.setenv("ENVCHECK_DATABASE_URL", url)
    for name in ("ENVCHECK_API_URL", "ENVCHECK_API_TOKEN", "ENVCHECK_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    try:
        at = environment_page(env.id)
        kinds = [d.value for d in at.dataframe if "SPRT LLR" in d.value.columns]
        assert kinds and set(kinds[0]["kind"]) == {"image", "terminal"}
        assert (kinds[0]["runs"] == 0).all()
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()
