"""`envcheck daemon` end to end: the real console script on the real engine, its own store.

Each daemon gets a catalogue of demo images probed every 2 s (terminal only, no jitter), a
private data directory, port and container tag; the JSON log lines on its stderr are what an
operator would read, and what the store must agree with.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from envcheck.catalogue.fields import MIN_SCHEDULE_ENV
from envcheck.feed.allowlist import allowlist
from envcheck.sandbox.labels import LABEL_ENV, LABEL_TAG
from envcheck.store import Store, open_store
from envcheck.store.tables.results import ProbeResultRow
from tests.conftest import ROOT, SESSION_TAG, envcheck_cmd
from tests.polling import wait_for
from tests.ports import free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HEALTHY = ("demo-healthy", "envcheck-demo/healthy:latest")
TOOL_MISSING = ("demo-tool-missing", "envcheck-demo/tool-missing:latest")
READONLY = ("demo-workdir-readonly", "envcheck-demo/workdir-readonly:latest")
SLOW = ("demo-slow-shell", "envcheck-demo/slow-shell:latest")  # ~8 s per probe
HTTP_TIMEOUT_S = 10.0


def write_catalogue(path: Path, envs: list[tuple[str, str]], extra: str = "",
                    fields: dict[str, str] | None = None) -> None:
    """``envs`` (id, image) in a suite probing terminals every 2 s; ``fields``: more of an
    environment's fields, by id, in YAML's flow style (``tests: {...}``)."""
    more = {env_id: f", {text}" for env_id, text in (fields or {}).items()}
    body = "\n".join(f"      - {{ id: {env_id}, image: '{image}'{more.get(env_id, '')} }}"
                     for env_id, image in envs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""version: 1
suites:
  daemon:
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3, tmux]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules: {{ terminal: 2s, dependencies: null, tests: null, datasource: null,
                   jitter_s: 0 }}
    environments:
{body}
{extra}""", encoding="utf-8")


@dataclass(frozen=True)
class Row:
    id: int
    run_id: str
    env_id: str
    kind: str
    status: str
    started_at: Any


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    db_url: str
    tag: str
    stderr: Any = field(repr=False)

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if event is None or doc.get("event") == event:
                found.append(doc)
        return found

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=HTTP_TIMEOUT_S)

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        wait_for(check, timeout_s=timeout, what=what, proc=self.proc, interval_s=0.1)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def store(self) -> Store:
        return open_store(self.db_url)

    def rows(self) -> list[Row]:
        table: Any = ProbeResultRow.__table__  # type: ignore[attr-defined]
        with self.store() as store, store.engine.connect() as conn:
            found = conn.execute(select(table.c.id, table.c.run_id, table.c.env_id,
                                        table.c.kind, table.c.status, table.c.started_at))
            return [Row(*r) for r in found]

    def count(self, env_id: str) -> int:
        return sum(1 for r in self.rows() if r.env_id == env_id)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 90.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.stderr.close()


class Daemons:
    """Starts daemons; whatever a test leaves running is stopped, its containers removed."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[Daemon] = []
        self.client = docker.from_env(timeout=30)

    def start(self, catalogue: Path, *, window: float = 2.0, data: str = "data",
              tag: str | None = None, concurrency: int = 2, args: Sequence[str] = (),
              database: str | None = None, ready: bool = True,
              env: dict[str, str] | None = None) -> Daemon:
        """A daemon on ``database`` (default: SQLite in its data directory), once it is
        ready unless not ``ready`` (one that waits or is refused); ``env``: variables of its
        own (an API token, say)."""
        tag = tag or f"{SESSION_TAG}-{uuid.uuid4().hex[:8]}"
        port = free_port()
        data_dir = self.tmp_path / data
        variables = {**os.environ, "ENVCHECK_DATA_DIR": str(data_dir),
                     "ENVCHECK_EXPORT_DIR": str(data_dir / "exports"),
                     "ENVCHECK_CONTAINER_TAG": tag, "ENVCHECK_LOG_LEVEL": "info",
                     MIN_SCHEDULE_ENV: "1s"}  # the catalogues here probe every 2 s
        for name in ("ENVCHECK_DATABASE_URL", "ENVCHECK_API_TOKEN", "ENVCHECK_WEBHOOK",
                     "ENVCHECK_WEBHOOKS_FILE"):
            variables.pop(name, None)
        variables.update(env or {})
        log = self.tmp_path / f"daemon-{len(self.started)}.log"
        stderr = log.open("wb")
        db_url = database or f"sqlite:///{data_dir / 'envcheck.db'}"
        proc = subprocess.Popen(
            [*envcheck_cmd(), "daemon", str(catalogue), "--port", str(port),
             "--window", str(window), "--concurrency", str(concurrency),
             *(["--database", database] if database else []), *args],
            env=variables, stdout=subprocess.DEVNULL, stderr=stderr)
        daemon = Daemon(proc, f"http://127.0.0.1:{port}", log, db_url, tag, stderr)
        self.started.append(daemon)
        if ready:
            daemon.wait("readiness", lambda: daemon.get("/readyz").status_code == 200)
        return daemon

    def containers(self, tag: str, env_id: str | None = None) -> list[str]:
        labels = [f"{LABEL_TAG}={tag}"] + ([f"{LABEL_ENV}={env_id}"] if env_id else [])
        return [c["Id"] for c in self.client.api.containers(all=True,
                                                             filters={"label": labels})]

    def close(self) -> None:
        try:
            for d in self.started:
                if d.proc.poll() is None:
                    d.proc.kill()
                    d.proc.wait(timeout=30)
                d.stderr.close()
                for cid in self.containers(d.tag):
                    self.client.api.remove_container(cid, force=True, v=True)
        finally:
            self.client.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path)
    yield d
    d.close()


def probe_results(d: Daemon) -> list[dict[str, Any]]:
    return d.events("probe result")


def problems(d: Daemon, *expected: str) -> list[dict[str, Any]]:
    """Warnings and errors the daemon logged, but for the ``expected`` events."""
    return [e for e in d.events() if e.get("level") in ("warning", "error", "critical")
            and e.get("event") not in expected]


def test_serves_health_metrics_and_reloads_on_sighup(daemons: Daemons, tmp_path: Path) -> None:
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING])
    d = daemons.start(catalogue)
    assert d.get("/healthz").json() == {"status": "ok"}
    ready = d.get("/readyz").json()
    assert (ready["ready"], ready["checks"]) == (True, {"store": "ok", "engine": "ok"}), ready
    assert set(ready["age_s"]) == {"store", "engine"}  # how old each answer is
    assert all(age >= 0 for age in ready["age_s"].values()), ready

    def state(env_id: str) -> tuple[str, bool] | None:
        with d.store() as store:
            row = store.env_state(env_id)
        return (row.state, row.quarantined) if row is not None else None

    d.wait("results and a quarantine",
           lambda: d.count(HEALTHY[0]) >= 2 and state(TOOL_MISSING[0]) == ("broken", True))
    before = len(d.rows())
    m = d.metrics()
    after = len(d.rows())
    counted = sum(v for (name, _), v in m.items() if name == "envcheck_probe_results_total")
    assert before <= counted <= after, (before, counted, after)
    assert m[("envcheck_scheduled_jobs", ())] == 2
    quarantined = (("env", TOOL_MISSING[0]), ("source", "auto"), ("suite", "daemon"))
    assert m[("envcheck_environment_quarantined", quarantined)] == 1
    assert state(HEALTHY[0]) == ("healthy", False)

    # the broken environment's taint, in the export the windows keep and from the API
    exported = tmp_path / "data" / "exports" / "taint.jsonl"

    def tainted() -> dict[str, dict[str, Any]]:
        try:
            return {x["env_id"]: x for x in map(json.loads, exported.read_text().splitlines())}
        except (OSError, ValueError):
            return {}

    d.wait("the taint export", lambda: TOOL_MISSING[0] in tainted())
    line = tainted()[TOOL_MISSING[0]]
    assert (line["basis"], line["kind"], line["reason"], line["end"]) == \
        ("identity", "terminal", "tool_missing", None)
    assert HEALTHY[0] not in tainted()
    [served] = d.get(f"/v1/environments/{TOOL_MISSING[0]}/taint").json()["intervals"]
    assert {k: served[k] for k in ("basis", "kind", "reason", "end", "evidence")} == \
        {k: line[k] for k in ("basis", "kind", "reason", "end", "evidence")}
    assert datetime.fromisoformat(served["start"]) == datetime.fromisoformat(line["start"])

    # SIGHUP, a good catalogue: the new environment is synced, scheduled and probed
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, READONLY])
    d.proc.send_signal(signal.SIGHUP)
    d.wait("the reload", lambda: len(d.events("catalogue reloaded")) == 1)
    d.wait("the added environment's results", lambda: d.count(READONLY[0]) >= 1, timeout=30)
    with d.store() as store:
        assert READONLY[0] in {e.id for e in store.environments()}
    assert d.metrics()[("envcheck_scheduled_jobs", ())] == 3

    # SIGHUP, a bad catalogue: refused with where and why; the old one keeps running
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, READONLY], extra="colour: red\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait("the refusal",
           lambda: len(d.events("catalogue refused, the old one keeps running")) == 1)
    [refused] = d.events("catalogue refused, the old one keeps running")
    assert refused["level"] == "error"
    assert any("fleet.yaml:" in issue and "colour" in issue for issue in refused["issues"]), \
        refused
    counts = {env_id: d.count(env_id) for env_id, _ in (HEALTHY, TOOL_MISSING, READONLY)}
    d.wait("probing to go on", lambda: all(d.count(e) > n for e, n in counts.items()),
           timeout=30)
    assert len(d.events("catalogue reloaded")) == 1
    assert d.metrics()[("envcheck_scheduled_jobs", ())] == 3
    assert d.stop() == 0
    assert problems(d, "catalogue refused, the old one keeps running") == []


def test_sighup_picks_up_added_and_removed_dataset_records(daemons: Daemons,
                                                          tmp_path: Path) -> None:
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY], extra="""datasets:
  - { id: tasks, format: swebench, path: tasks.jsonl, suite: daemon, image_field: image,
      command: 'pytest -rA {test_files}' }
""")
    instances = tmp_path / "probes" / "tasks.jsonl"

    def write_records(*ids: str) -> None:
        instances.write_text("".join(json.dumps({
            "instance_id": i, "image": HEALTHY[1], "FAIL_TO_PASS": '["t::a"]',
            "PASS_TO_PASS": "[]"}) + "\n" for i in ids), encoding="utf-8")

    write_records("demo__task-1")
    d = daemons.start(catalogue)
    d.wait("the dataset task's results", lambda: d.count("demo__task-1") >= 1)
    assert d.metrics()[("envcheck_scheduled_jobs", ())] == 2

    write_records("demo__task-1", "Demo__Task-2")  # added: a dataset id kept as it is
    d.proc.send_signal(signal.SIGHUP)
    d.wait("the reload", lambda: len(d.events("catalogue reloaded")) == 1)
    d.wait("the added task's results", lambda: d.count("Demo__Task-2") >= 1, timeout=30)
    assert d.metrics()[("envcheck_scheduled_jobs", ())] == 3

    write_records("Demo__Task-2")  # removed: retired, its history kept
    d.proc.send_signal(signal.SIGHUP)
    d.wait("the second reload", lambda: len(d.events("catalogue reloaded")) == 2)
    assert d.metrics()[("envcheck_scheduled_jobs", ())] == 2
    with d.store() as store:
        assert {"demo__task-1", "Demo__Task-2"} <= {e.id for e in store.environments()}
        assert [r.env_id for r in store.retired()] == ["demo__task-1"]
        assert "demo__task-1" not in {*allowlist(store, "daemon").allowed,
                                      *allowlist(store, "daemon").excluded}
        assert store.transitions("demo__task-1")[0].new_state == "retired"
        assert store.latest_results(["demo__task-1"])  # its history stays
    assert not [key for key in d.metrics() if ("env", "demo__task-1") in key[1]]

    write_records("demo__task-1", "Demo__Task-2")  # back, with its history
    d.proc.send_signal(signal.SIGHUP)
    d.wait("the third reload", lambda: len(d.events("catalogue reloaded")) == 3)
    with d.store() as store:
        assert store.retired() == []
        assert store.transitions("demo__task-1")[0].old_state == "retired"
        assert "demo__task-1" in {*allowlist(store, "daemon").allowed,
                                  *allowlist(store, "daemon").excluded}
    assert d.stop() == 0
    assert problems(d) == []


def test_sigterm_in_flight_finishes_and_records_every_result_once(daemons: Daemons,
                                                                   tmp_path: Path) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, SLOW])
    d = daemons.start(catalogue)
    d.wait("probes in flight, results recorded",
           lambda: bool(daemons.containers(d.tag, SLOW[0])) and len(d.rows()) >= 2)
    grace_s = 120.0  # DaemonConfig.grace_s
    d.proc.send_signal(signal.SIGTERM)
    code = d.proc.wait(timeout=grace_s + 60)  # a hang guard: the logs below say which path
    d.stderr.close()
    assert code == 0, d.log.read_text()
    assert daemons.containers(d.tag) == [], "no container left behind"

    events = d.events()
    names = [e["event"] for e in events]
    stopping = names.index("daemon stopping")
    assert names[-1] == "daemon stopped"
    # the work in flight finished within the grace period; nothing was left running
    [stopped] = d.events("scheduler stopped")
    assert stopped["still_running"] == 0, stopped
    assert not d.events("probes still running after the grace period")
    slow_after = [i for i, e in enumerate(events) if e["event"] == "probe result"
                  and e["env"] == SLOW[0] and i > stopping]
    assert slow_after, "the slow probe in flight finished and was recorded after SIGTERM"

    logged = probe_results(d)
    ids = [e["result_id"] for e in logged]
    assert len(ids) == len(set(ids)), "a result logged twice"
    rows = {r.id: r for r in d.rows()}
    assert sorted(rows) == sorted(ids), "every result in the store was logged, and only those"
    for e in logged:
        r = rows[e["result_id"]]
        assert (r.run_id, r.env_id, r.kind, r.status) == (e["run"], e["env"], e["kind"],
                                                         e["status"])
    with d.store() as store:
        runs = store.runs(limit=1000)
    assert runs and {r.state for r in runs} == {"finished"}
    assert {r.run_id for r in rows.values()} <= {r.id for r in runs}
    assert problems(d) == []


def test_sigkill_then_restart_reaps_marks_and_assesses(daemons: Daemons,
                                                       tmp_path: Path) -> None:
    catalogue = tmp_path / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY, TOOL_MISSING, SLOW])
    # windows never close here: whatever the first daemon records stays unassessed
    first = daemons.start(catalogue, window=600)
    first.wait("two failures and a probe in flight",
               lambda: first.count(TOOL_MISSING[0]) >= 2
               and bool(daemons.containers(first.tag, SLOW[0])))
    first.proc.kill()
    first.proc.wait(timeout=30)
    first.stderr.close()
    # (a container whose removal the engine had already begun may still go by itself)
    leftovers = daemons.containers(first.tag, SLOW[0])
    assert leftovers, "SIGKILL cannot clean up after itself"
    recorded = {r.id: r for r in first.rows()}
    with first.store() as store:
        killed_runs = {r.id for r in store.runs(limit=1000) if r.pid == first.proc.pid}
        assert killed_runs and {store.run(i).state for i in killed_runs} == {"running"}  # type: ignore[union-attr]
        assert store.env_state(TOOL_MISSING[0]) is None, "nothing was assessed before the kill"

    second = daemons.start(catalogue, window=600, tag=first.tag)
    second.wait("the start-up assessment",
                lambda: len(second.events("unassessed results assessed")) == 1)
    [starting] = second.events("daemon starting")
    assert set(starting["interrupted_runs"]) == killed_runs
    # (any envcheck process starting on this host meanwhile, e.g. another test session, may
    # reap them first: what counts is that none is left once the daemon is back)
    assert not set(leftovers) & set(daemons.containers(first.tag)), "leftovers reaped"
    with second.store() as store:
        assert {store.run(i).state for i in killed_runs} == {"interrupted"}  # type: ignore[union-attr]
        row = store.env_state(TOOL_MISSING[0])
        assert row is not None and (row.state, row.quarantined) == ("broken", True), \
            "results recorded before the kill count"
    assert second.stop() == 0

    rows = {r.id: r for r in second.rows()}
    assert set(recorded) <= set(rows), "results recorded before the kill are kept"
    assert len({(r.env_id, r.kind, r.started_at) for r in rows.values()}) == len(rows), \
        "no result recorded twice"
    first_logged = {e["result_id"] for e in probe_results(first)}
    second_logged = [e["result_id"] for e in probe_results(second)]
    assert first_logged <= set(recorded)
    assert len(second_logged) == len(set(second_logged))
    assert set(second_logged) == set(rows) - set(recorded)
    with second.store() as store:
        states = {r.id: r.state for r in store.runs(limit=1000)}
    assert {states[i] for i in killed_runs} == {"interrupted"}
    assert {s for i, s in states.items() if i not in killed_runs} <= {"finished"}
    assert daemons.containers(first.tag) == []
    assert problems(first) == [] and problems(second) == []


def test_prunes_its_store_on_its_own(daemons: Daemons, tmp_path: Path) -> None:
    """Results of an environment probed 450 times ten days ago: the daemon's own prune folds
    the 50 its health model no longer reads and keeps the rest; the counts stay whole."""
    from datetime import UTC, datetime, timedelta

    from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
    from envcheck.store.feed import OBSERVATION_WINDOW

    data = tmp_path / "data"
    data.mkdir()
    old = datetime.now(UTC) - timedelta(days=10)
    with open_store(f"sqlite:///{data / 'envcheck.db'}") as store:
        run_id = store.start_run("test", [])
        for i in range(450):
            store.record(run_id, ProbeResult(
                env_id="gone-env", kind=ProbeKind.TERMINAL, status=Status.PASS,
                reason=Reason.OK, summary="ok", duration_s=1.0, spec_hash="s",
                started_at=old + timedelta(minutes=5 * i)))
        store.finish_run(run_id)
    catalogue = tmp_path / "probes" / "fleet.yaml"
    write_catalogue(catalogue, [HEALTHY])
    d = daemons.start(catalogue, args=["--prune-every", "2"])
    d.wait("a prune that folded results",
           lambda: any(e["results_deleted"] for e in d.events("store pruned")))
    [pruned] = [e for e in d.events("store pruned") if e["results_deleted"]]
    assert pruned["results_deleted"] == 450 - OBSERVATION_WINDOW
    assert pruned["incremental_vacuum"] is True
    with d.store() as store:
        assert len(store.history("gone-env", limit=1000)) == OBSERVATION_WINDOW
        [span] = store.digest_history("gone-env")
        assert span.results == 450
    assert d.stop() == 0
    assert problems(d) == []


def test_runs_the_verifier_strength_controls_and_leak_checks(daemons: Daemons,
                                                             tmp_path: Path) -> None:
    """The daemon's tests probe plays the wrong-fix controls (a dataset task's gold patch),
    the wrong-output controls (a Harbor task's solve.sh) and the leak checks, with the store
    as their ledger: each demo task gets its verdict there too, its evidence stored."""
    probes = tmp_path / "probes"
    probes.mkdir()
    datasets = ROOT / "probes" / "datasets"
    weak = (datasets / "swe-demo-strength.jsonl").read_text(encoding="utf-8").splitlines()[0]
    (probes / "tasks.jsonl").write_text(weak + "\n", encoding="utf-8")
    leaked = [line for line in (datasets / "swe-demo-leaks.jsonl").read_text(
        encoding="utf-8").splitlines() if '"envcheck-demo__pyutils-1-leaked"' in line]
    (probes / "leaked.jsonl").write_text(leaked[0] + "\n", encoding="utf-8")
    shutil.copytree(ROOT / "probes" / "harbor-strength" / "totals-exist-only",
                    probes / "harbor" / "totals-exist-only")
    swebench = """    format: swebench
    suite: daemon
    image_field: image_name
    workdir: /testbed
    command: /usr/bin/python3 -I -m pytest --noconftest -rA --tb=no -p no:cacheprovider {test_files}
    report: pytest
    reruns: 1
"""
    write_catalogue(probes / "fleet.yaml", [HEALTHY], extra=f"""datasets:
  - id: tasks
    path: tasks.jsonl
{swebench}    strength: {{ mutants: 3 }}
  - id: leaked
    path: leaked.jsonl
{swebench}    leaks: {{}}
  - id: outputs
    format: harbor
    path: harbor
    suite: daemon
    reruns: 1
    strength: {{ mutants: 3 }}
""")
    text = (probes / "fleet.yaml").read_text(encoding="utf-8")
    (probes / "fleet.yaml").write_text(text.replace("tests: null", "tests: 1h"),
                                       encoding="utf-8")
    d = daemons.start(probes / "fleet.yaml")
    wanted = {"envcheck-demo__pyutils-6-weak": "weak_verifier",
              "totals-exist-only": "weak_verifier",
              "envcheck-demo__pyutils-1-leaked": "solution_leaked"}
    d.wait("the tasks' tests results", lambda: {
        r.env_id for r in d.rows() if r.kind == "tests"} >= set(wanted), timeout=360)
    with d.store() as store:
        results = {r.env_id: r for r in store.latest_results(list(wanted))
                   if r.kind.value == "tests"}
    for env_id, reason in wanted.items():
        result = results[env_id]
        assert (result.status.value, result.reason.value) == ("pass", reason), result.summary
    for env_id, of in (("envcheck-demo__pyutils-6-weak", "patch"),
                       ("totals-exist-only", "outputs")):
        info = results[env_id].details["strength"]
        assert info["survivors"] and info["generated"]["mutants"] == 3
        assert info["generated"].get("of", "patch") == of
        # charged to the budget with the probe
        assert results[env_id].duration_s >= info["seconds"]
    assert results["envcheck-demo__pyutils-1-leaked"].details["leaks"]["found"]
    assert d.stop() == 0
