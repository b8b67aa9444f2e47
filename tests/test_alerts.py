"""alerts.yaml with the real Debian binaries: ``promtool check rules``, the promtool unit tests
in tests/alerts/, ``promtool check metrics`` on envcheck's exposition, and end to end on
loopback: the daemon probes demo images, Prometheus scrapes it and evaluates alerts.yaml,
Alertmanager delivers to a webhook here, and a broken environment's quarantine alert fires,
then resolves once its image is replaced.

The binaries come from the Debian packages ``prometheus`` (promtool too) and
``prometheus-alertmanager``, which scripts/test.sh installs; without them these tests fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.core.rollouts import Outcome, Rollout
from envcheck.feed.assess import StoreAssessment, evaluate
from envcheck.metrics import StoreMetrics
from envcheck.metrics.images import RegistrySeries
from envcheck.metrics.own import own_registry
from envcheck.registry.stats import RegistryStats
from envcheck.sandbox.docker import DockerRuntime
from envcheck.schedule.budget import BudgetLimits
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store, open_store
from tests.conftest import ROOT, SESSION_TAG, envcheck_cmd
from tests.polling import wait_for
from tests.ports import free_port

ALERTS = ROOT / "alerts.yaml"
UNIT_TESTS = ROOT / "tests" / "alerts"
SEVERITIES = {"critical", "warning", "info"}
# Labels envcheck's metrics may carry: all bounded by the fleet or a fixed vocabulary.
# `trick`: the adversarial controls' fixed library (TRICK_NAMES), like `kind`.
# `depth`: a tests probe's depth (core.depth.Depth: full, light, fixed).
# `outcome`: a rollout's outcome (core.rollouts.Outcome, a closed vocabulary), or a registry
# look's or pull's (ok, timeout, a registry reason).
# `registry`: a registry host the catalogue's watched images name.
# `node`, `host`: an image cache's engine, the daemon's own (`local`) or a Ray node's (its ID
# and host): bounded by the cluster, a node silent for a day dropped.
BOUNDED_LABELS = {"env", "suite", "kind", "status", "state", "source", "stat", "le", "trick",
                  "depth", "outcome", "registry", "node", "host"}
HTTP_TIMEOUT = (2, 5)


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: install the Debian package {package} "
                    f"(apt-get install {package}; scripts/test.sh does it)")
    return path


def run(argv: list[str], *, timeout: float = 60, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=ROOT)


def load_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def promtool_metrics(exposition: str) -> subprocess.CompletedProcess[str]:
    return run([tool("promtool", "prometheus"), "check", "metrics"], stdin=exposition)


# --- rules and their unit tests --------------------------------------------------------------

def test_rules_are_valid() -> None:
    proc = run([tool("promtool", "prometheus"), "check", "rules", str(ALERTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    files = sorted(UNIT_TESTS.glob("*.yaml"))
    assert files, f"no promtool unit tests in {UNIT_TESTS}"
    proc = run([tool("promtool", "prometheus"), "test", "rules", *map(str, files)], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_complete_and_unit_tested_both_ways() -> None:
    alerts = {r["alert"]: r for r in load_rules() if "alert" in r}
    assert {"EnvironmentQuarantined", "SuiteHealthyFractionLow", "SuiteHealthyFractionCritical",
            "DataSourceDown", "DataSourceSchemaDrift", "EnvironmentRewardHackable",
            "EnvcheckInfraIncident", "StaleResults", "EnvcheckBudgetExhausted",
            "SuiteBudgetExhausted", "EnvcheckRolloutFlagged", "SuiteRolloutFailureRateHigh",
            "EnvcheckScheduleOverloaded", "EnvcheckRegistryUnreachable",
            "EnvcheckRegistryAuthFailed", "EnvcheckRegistryRateLimited",
            "EnvcheckDown", "EnvcheckAbsent"} <= set(alerts)
    for name, rule in alerts.items():
        assert rule.get("for"), f"{name}: no `for`"
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity"
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
    firing: set[str] = set()
    silent: set[str] = set()
    for path in UNIT_TESTS.glob("*.yaml"):
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert set(alerts) - firing == set(), "alerts never tested firing"
    assert set(alerts) - silent == set(), "alerts never tested not firing"


# --- metrics: promtool lint and the names the rules need -------------------------------------

CATALOGUE = """\
version: 1
suites:
  {suite}:
    description: envcheck alerting tests
    defaults:
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3]
      timeouts: {{ start_s: 15, shell_s: 2, exec_s: 30 }}
      schedules:
        terminal: {every}
        dependencies: null
        tests: null
        datasource: null
        jitter_s: 0
        quarantined_factor: {factor}
    environments:
{environments}
"""


def write_catalogue(path: Path, suite: str, envs: dict[str, str], every: str = "2s",
                    factor: float = 1) -> Path:
    lines = "\n".join(f"      - id: {env_id}\n        image: {image}"
                      for env_id, image in envs.items())
    path.write_text(CATALOGUE.format(suite=suite, every=every, factor=factor,
                                     environments=lines), encoding="utf-8")
    return path


def seed(store: Store, catalogue: Catalogue, now: datetime) -> None:
    """Results through the real path: two terminal failures quarantine ``lint-broken``; an
    environment no longer in the catalogue has old results; a data source drifts; an incident;
    the training run's rollouts, which flag ``lint-ok``."""
    store.sync_suites(catalogue.suites)
    # lint-gone was in an older catalogue: stored, no longer scheduled
    gone = catalogue.environment("lint-ok").model_copy(update={"id": "lint-gone"})
    store.sync_environments([*catalogue.environments, gone])
    run_id = store.start_run("test", [])

    def record(env_id: str, kind: ProbeKind, status: Status, reason: Reason, ago_s: float,
               details: dict[str, Any] | None = None) -> None:
        store.record(run_id, ProbeResult(
            env_id=env_id, kind=kind, status=status, reason=reason, summary=str(reason),
            duration_s=0.7, image_digest=f"sha256:{env_id}", spec_hash="spec",
            started_at=now - timedelta(seconds=ago_s), details=details or {}))

    for ago in (30, 20, 10):
        record("lint-ok", ProbeKind.TERMINAL, Status.PASS, Reason.OK, ago)
    for ago in (25, 15):
        record("lint-broken", ProbeKind.TERMINAL, Status.FAIL, Reason.TOOL_MISSING, ago)
    record("lint-gone", ProbeKind.TERMINAL, Status.PASS, Reason.OK, 86_400)
    sources = {"weather": {"status": "fail", "reason": "schema_drift", "availability": 1.0,
                           "latency_ms": {"p50": 12.0, "p95": 30.0, "max": 41.0}},
               "prices": {"status": "fail", "reason": "http_5xx", "availability": 0.0,
                          "latency_ms": None}}
    record("lint-ok", ProbeKind.DATASOURCE, Status.FAIL, Reason.SCHEMA_DRIFT, 5,
           {"sources": sources})
    record("lint-ok", ProbeKind.TESTS, Status.PASS, Reason.REWARD_HACKABLE, 5,
           {"adversarial": {"rewarded": ["tests_rewritten"]}})
    store.finish_run(run_id)
    incident_run = store.start_run("test", [])
    store.finish_run(incident_run)
    store.record_incident(incident_run, "failure_storm", 4, 5, "4 of 5 probes failed at once")
    evaluate(store, catalogue.environments)
    store.record_rollouts([Rollout("lint-ok", now - timedelta(minutes=5), "run-1", seq,
                                   Outcome.SANDBOX_LOST if seq % 4 == 0 else Outcome.OK)
                           for seq in range(40)])
    store.apply("lint-ok", "lint", {"rollouts": {"state": "degraded", "flagged": True,
                                                 "reason": "rollout_failures"}}, None)


def registry_stats() -> RegistryStats:
    """The registry stage's counters after a few looks and pulls, as the stage counts them."""
    stats = RegistryStats()
    stats.looked("127.0.0.1:5000", "ok", 0.01, rate_remaining=98)
    stats.looked("127.0.0.1:5000", "registry_auth_failed", 0.02)
    stats.looked_up(hit=False)
    stats.pulled("127.0.0.1:5000", "ok", 1.5, 2_000_000)
    stats.pulled("127.0.0.1:5000", "registry_rate_limited", 0.1, 0)
    stats.cache(2_000_000, 10_000_000)
    stats.evicted(1_000_000)
    stats.looked_up(hit=True)
    # and a Ray node's stage, folded in as the executor does with a task's outcome
    node = RegistryStats()
    node.pulled("127.0.0.1:5000", "ok", 2.0, 3_000_000)
    node.looked_up(hit=False)
    node.cache(3_000_000, 10_000_000)
    stats.fold("8f" * 28, "node-1", node.delta())
    return stats


def scrape_seeded(tmp_path: Path, per_environment: bool) -> str:
    """The exposition of envcheck's metrics over a seeded SQLite store, with a scheduler
    (built, never started) so the schedule-aware metrics are there too."""
    path = write_catalogue(tmp_path / "lint.yaml", "lint", {
        "lint-ok": "envcheck-demo/healthy:latest",
        "lint-broken": "envcheck-demo/tool-missing:latest"}, every="5m", factor=4)
    catalogue = load_catalogue([path])
    now = datetime.now(UTC)
    with open_store(f"sqlite:///{tmp_path / 'lint.db'}") as store:
        seed(store, catalogue, now)
        # with budgets, so the budget's metrics (read by two alerts) are there too
        scheduler = ProbeScheduler(catalogue, executor=None, store=store,  # type: ignore[arg-type]
                                   assessment=StoreAssessment(store),
                                   budget=BudgetLimits(fleet=36000.0, suites={"lint": 3600.0}))
        # in the daemon's registry: the process's and the lease's series beside the store's,
        # and the registry stage's (a watched image looked up, pulled, one look refused)
        series = own_registry(lambda: True)
        series.register(RegistrySeries(registry_stats().snapshot))
        return StoreMetrics(store, scheduler, now=now.timestamp, registry=series,
                            per_environment=per_environment).render().decode()


@pytest.fixture
def seeded_scrape(tmp_path: Path) -> str:
    return scrape_seeded(tmp_path, per_environment=True)


@pytest.fixture
def seeded_suite_scrape(tmp_path: Path) -> str:
    """The same with per-suite series alone (``envcheck daemon --metrics-series suite``)."""
    return scrape_seeded(tmp_path, per_environment=False)


def samples(exposition: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_metrics_pass_promtool_lint(seeded_scrape: str, seeded_suite_scrape: str) -> None:
    for scrape in (seeded_scrape, seeded_suite_scrape):
        proc = promtool_metrics(scrape)
        assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
            proc.stdout + proc.stderr)


def test_metrics_the_rules_read_are_exported_with_bounded_labels(seeded_scrape: str) -> None:
    exported = samples(seeded_scrape)
    used = {name for rule in load_rules()
            for name in re.findall(r"\benvcheck_[a-z_]+\b", rule["expr"])}
    assert used, "alerts.yaml reads no envcheck metric?"
    assert used - set(exported) == set(), "rules read metrics envcheck does not export"
    for name, series in exported.items():
        for labels, _ in series:
            assert set(labels) <= BOUNDED_LABELS, f"{name}: unbounded label in {labels}"


# alerts that read per-environment series, and the variant that speaks for them without
PER_SUITE_VARIANTS = {"EnvironmentQuarantined": "SuiteEnvironmentsQuarantined",
                      "EnvironmentRewardHackable": "SuiteRewardHackable"}


def test_every_alert_works_with_per_suite_series_alone(seeded_suite_scrape: str) -> None:
    exported = samples(seeded_suite_scrape)
    assert not [name for name, series in exported.items()
                for labels, _ in series if "env" in labels]
    rules = {r["alert"]: r for r in load_rules() if "alert" in r}
    for name, rule in rules.items():
        missing = set(re.findall(r"\benvcheck_[a-z_]+\b", rule["expr"])) - set(exported)
        if missing:
            assert name in PER_SUITE_VARIANTS, f"{name} reads {missing}: not with per-suite series"
            variant = rules[PER_SUITE_VARIANTS[name]]
            assert set(re.findall(r"\benvcheck_[a-z_]+\b", variant["expr"])) <= set(exported)
    assert set(PER_SUITE_VARIANTS.values()) <= set(rules)


def test_stale_metrics_follow_the_schedule(seeded_scrape: str) -> None:
    exported = samples(seeded_scrape)
    interval = {(s["suite"], s["kind"]): v
                for s, v in exported["envcheck_probe_interval_seconds"]}
    # 5m schedule; lint-broken is quarantined and probed 4x more slowly
    assert interval == {("lint", "terminal"): 1200.0}
    age = {(s["suite"], s["kind"]): v
           for s, v in exported["envcheck_oldest_result_age_seconds"]}
    # lint-gone's day-old result is not scheduled any more: it does not count
    assert age[("lint", "terminal")] == pytest.approx(15, abs=1)
    quarantined = {s["env"]: (s.get("source"), v)
                   for s, v in exported["envcheck_environment_quarantined"]}
    assert quarantined["lint-broken"] == ("auto", 1.0)
    assert quarantined["lint-ok"][1] == 0.0
    assert {s["source"]: v for s, v in exported["envcheck_datasource_schema_drift"]} == {
        "weather": 1.0, "prices": 0.0}
    assert {s["kind"]: v for s, v in exported["envcheck_incidents_total"]} == {
        "engine_unreachable": 0.0, "failure_storm": 1.0}


# --- end to end: daemon -> Prometheus -> Alertmanager -> webhook -----------------------------

class Receiver:
    """Alertmanager's webhook target: records every notification (payload version 4)."""

    def __init__(self) -> None:
        self.payloads: list[tuple[float, dict[str, Any]]] = []  # (monotonic time, payload)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with receiver._lock:
                    receiver.payloads.append((time.monotonic(), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self, alertname: str, env: str, status: str, since: float = 0.0
               ) -> list[dict[str, Any]]:
        with self._lock:
            return [a for at, p in self.payloads if at >= since for a in p["alerts"]
                    if a["labels"].get("alertname") == alertname
                    and a["labels"].get("env") == env and a["status"] == status]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=HTTP_TIMEOUT).status_code == 200
    except requests.RequestException:
        return False


class Processes:
    """Every process the test starts, stopped (SIGTERM, then SIGKILL) on exit, newest first."""

    def __init__(self, logdir: Path) -> None:
        self._logdir = logdir
        self._procs: list[tuple[str, subprocess.Popen[bytes], float]] = []
        self.exit_codes: dict[str, int] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              grace_s: float = 15) -> subprocess.Popen[bytes]:
        with (self._logdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=self._logdir)
        self._procs.append((name, proc, grace_s))
        return proc

    def stop(self, name: str) -> int:
        for entry in list(self._procs):
            if entry[0] == name:
                self._procs.remove(entry)
                return self._stop(*entry)
        raise KeyError(name)

    def _stop(self, name: str, proc: subprocess.Popen[bytes], grace_s: float) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.exit_codes[name] = proc.returncode
        return proc.returncode

    def close(self) -> None:
        while self._procs:
            self._stop(*self._procs.pop())

    def logs(self, tail: int = 25) -> str:
        out = []
        for path in sorted(self._logdir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {path.name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(out)


def fast_rules(target: Path) -> Path:
    """alerts.yaml as shipped, with every `for` cut to 1s and `keep_firing_for` to 5s (still
    bridging a missed scrape), so the chain answers in seconds; expressions are untouched."""
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "1s"
                if "keep_firing_for" in rule:
                    rule["keep_firing_for"] = "5s"
    target.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return target


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quarantine_alert_fires_and_resolves_end_to_end(tmp_path: Path,
                                                        runtime: DockerRuntime) -> None:
    prometheus = tool("prometheus", "prometheus")
    alertmanager = tool("prometheus-alertmanager", "prometheus-alertmanager")
    promtool = tool("promtool", "prometheus")
    assert Path("/usr/share/prometheus/alertmanager/default.tmpl").exists(), \
        "Alertmanager's default.tmpl is missing: reinstall prometheus-alertmanager"
    engine = docker.from_env(timeout=30)
    # A test-owned tag: the broken image now, the healthy one once "fixed".
    flip_image = f"envcheck-alerttest/flip-{uuid.uuid4().hex[:10]}:latest"
    catalogue = write_catalogue(tmp_path / "alerting.yaml", "alerting", {
        "at-healthy": "envcheck-demo/healthy:latest",
        "at-flip": flip_image,
        "at-broken": "envcheck-demo/shell-missing:latest"})
    ports = {name: free_port() for name in ("daemon", "prometheus", "alertmanager")}
    procs = Processes(tmp_path)
    receiver = Receiver()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(engine.close)
        cleanup.callback(receiver.close)
        engine.images.get("envcheck-demo/tool-missing:latest").tag(flip_image)
        cleanup.callback(lambda: engine.images.remove(flip_image, noprune=True))
        cleanup.callback(procs.close)

        # Hermetic: no inherited store, token, webhook or executor settings; the session's
        # container tag (tests/conftest.py) so the leak checks see the daemon's containers.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENVCHECK_")}
        env["ENVCHECK_CONTAINER_TAG"] = SESSION_TAG
        env["ENVCHECK_DATA_DIR"] = str(tmp_path / "data")
        env["ENVCHECK_EXPORT_DIR"] = str(tmp_path / "exports")
        env["ENVCHECK_MIN_SCHEDULE"] = "1s"  # the catalogue probes every 2 s
        started = time.monotonic()
        procs.start("daemon", [*envcheck_cmd(), "daemon", str(catalogue), "--port",
                               str(ports["daemon"]), "--window", "2"], env=env, grace_s=90)
        daemon_url = f"http://127.0.0.1:{ports['daemon']}"

        am_config = tmp_path / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump({
            "route": {"receiver": "hook", "group_by": ["alertname", "env"],
                      "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "hook", "webhook_configs": [
                {"url": receiver.url, "send_resolved": True}]}],
        }), encoding="utf-8")
        procs.start("alertmanager", [
            alertmanager, f"--config.file={am_config}", f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
            "--cluster.listen-address=", "--log.level=warn"])

        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(fast_rules(tmp_path / "alerts.yaml"))],
            "alerting": {"alertmanagers": [{"static_configs": [
                {"targets": [f"127.0.0.1:{ports['alertmanager']}"]}]}]},
            "scrape_configs": [{"job_name": "envcheck", "static_configs": [
                {"targets": [f"127.0.0.1:{ports['daemon']}"]}]}],
        }), encoding="utf-8")
        procs.start("prometheus", [
            prometheus, f"--config.file={prom_config}",
            f"--storage.tsdb.path={tmp_path / 'prometheus'}",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--log.level=warn"])
        prom_url = f"http://127.0.0.1:{ports['prometheus']}"

        wait_for(lambda: answers(f"{daemon_url}/healthz"),
                 timeout_s=60, what="the daemon's /healthz", interval_s=0.5, details=procs.logs)
        wait_for(lambda: answers(f"http://127.0.0.1:{ports['alertmanager']}/-/ready"),
                 timeout_s=30, what="Alertmanager", interval_s=0.5, details=procs.logs)
        wait_for(lambda: answers(f"{prom_url}/-/ready"),
                 timeout_s=30, what="Prometheus", interval_s=0.5, details=procs.logs)

        # 1. the broken image is quarantined, and the alert reaches the webhook
        fired = wait_for(
            lambda: receiver.alerts("EnvironmentQuarantined", "at-flip", "firing"), timeout_s=90,
            what="a firing EnvironmentQuarantined for at-flip", interval_s=0.5, details=procs.logs)
        fired_after = time.monotonic() - started
        assert fired[0]["labels"]["severity"] == "warning"
        assert fired[0]["labels"]["suite"] == "alerting"
        assert "envcheck quarantine history at-flip" in fired[0]["annotations"]["description"]
        wait_for(
            lambda: receiver.alerts("EnvironmentQuarantined", "at-broken", "firing"), timeout_s=30,
            what="a firing EnvironmentQuarantined for at-broken", interval_s=0.5,
            details=procs.logs)

        # a real scrape of the running daemon is lint-clean
        scrape = requests.get(f"{daemon_url}/metrics", timeout=HTTP_TIMEOUT).text
        lint = run([promtool, "check", "metrics"], stdin=scrape)
        assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), \
            lint.stdout + lint.stderr
        assert "envcheck_probe_interval_seconds" in scrape

        # 2. "fixed": a new image (digest) under the same name; its passes release it
        engine.images.get("envcheck-demo/healthy:latest").tag(flip_image)
        fixed_at = time.monotonic()
        assert receiver.alerts("EnvironmentQuarantined", "at-flip", "resolved") == [], \
            "resolved before the image was replaced"
        wait_for(lambda: receiver.alerts(
            "EnvironmentQuarantined", "at-flip", "resolved", since=fixed_at), timeout_s=90,
            what="a resolved EnvironmentQuarantined for at-flip", interval_s=0.5,
            details=procs.logs)
        resolved_after = time.monotonic() - fixed_at

        # every rule evaluated without error against the real metrics
        rules = requests.get(f"{prom_url}/api/v1/rules", timeout=HTTP_TIMEOUT).json()
        broken_rules = [(r["name"], r.get("lastError")) for g in rules["data"]["groups"]
                        for r in g["rules"] if r["health"] != "ok"]
        assert broken_rules == []
        assert receiver.alerts("EnvironmentQuarantined", "at-healthy", "firing") == []
        assert receiver.alerts("EnvironmentQuarantined", "at-broken", "resolved") == []

        # 3. the daemon stops on SIGTERM and removes its containers
        assert procs.stop("daemon") == 0, procs.logs()
        assert runtime.containers(SESSION_TAG) == []
        print(f"quarantine alert at the webhook {fired_after:.1f} s after the daemon started; "
              f"resolved {resolved_after:.1f} s after the image was replaced")


def test_reward_hackable_environments_are_counted_with_their_tricks(seeded_scrape: str) -> None:
    exported = samples(seeded_scrape)
    assert exported["envcheck_reward_hackable_environments"] == [({}, 1.0)]
    assert exported["envcheck_reward_hackable_tricks"] == [
        ({"env": "lint-ok", "trick": "tests_rewritten"}, 1.0)]
