"""Probe results: a closed status enum, a fixed vocabulary of reason codes, frozen values.

An unhealthy environment is a *result*; exceptions are only for envcheck's own faults
(see :mod:`envcheck.core.errors`). ``Status.ERROR`` marks a result envcheck could not produce
because envcheck or its infrastructure failed; it never counts against an environment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from envcheck.core.clock import SYSTEM_CLOCK

__all__ = [
    "DEGRADED_REASONS",
    "LEAK_REASONS",
    "REASON_DOCS",
    "CommandEvidence",
    "ProbeKind",
    "ProbeResult",
    "Reason",
    "Status",
]


class ProbeKind(StrEnum):
    TERMINAL = "terminal"
    DEPENDENCIES = "dependencies"
    TESTS = "tests"
    DATASOURCE = "datasource"
    IMAGE = "image"  # a watched image's tag in its registry (pull: watch)


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    FLAKY = "flaky"
    ERROR = "error"
    SKIP = "skip"

    @property
    def counts_against_environment(self) -> bool:
        return self in (Status.FAIL, Status.FLAKY)


class Reason(StrEnum):
    """Why a probe result has its status. Grouped by who is at fault."""

    OK = "ok"
    NOT_APPLICABLE = "not_applicable"
    # terminal availability
    CONTAINER_START_FAILED = "container_start_failed"
    CONTAINER_START_SLOW = "container_start_slow"
    USER_MISSING = "user_missing"
    SHELL_MISSING = "shell_missing"
    SHELL_SLOW = "shell_slow"
    LOGIN_SHELL_BROKEN = "login_shell_broken"
    INTERACTIVE_SHELL_BROKEN = "interactive_shell_broken"
    TOOL_MISSING = "tool_missing"
    WORKDIR_MISSING = "workdir_missing"
    WORKDIR_NOT_WRITABLE = "workdir_not_writable"
    PTY_BROKEN = "pty_broken"
    TIMEOUT = "timeout"
    OUTPUT_FLOOD = "output_flood"
    # dependency state
    PACKAGE_MISSING = "package_missing"
    VERSION_DRIFT = "version_drift"
    IMPORT_BROKEN = "import_broken"
    REQUIREMENTS_CONFLICT = "requirements_conflict"
    LOCK_UNREADABLE = "lock_unreadable"  # status ERROR: the catalogue's lock, not the image
    # test-case validity
    F2P_PASSES_BEFORE_ORACLE = "f2p_passes_before_oracle"
    ORACLE_DOES_NOT_FIX = "oracle_does_not_fix"
    ORACLE_FAILED = "oracle_failed"
    P2P_BROKEN = "p2p_broken"
    ORDER_DEPENDENT = "order_dependent"
    NONDETERMINISTIC = "nondeterministic"
    NEEDS_NETWORK = "needs_network"
    NO_TESTS_COLLECTED = "no_tests_collected"
    PARSE_ERROR = "parse_error"
    TEST_PATCH_DOES_NOT_APPLY = "test_patch_does_not_apply"
    GOLD_PATCH_DOES_NOT_APPLY = "gold_patch_does_not_apply"
    # degraded by default (status PASS), a FAIL where hack resistance is required
    REWARD_HACKABLE = "reward_hackable"
    # the answer where the agent can read it: degraded, a FAIL where leak checks are required
    SOLUTION_LEAKED = "solution_leaked"
    SOLUTION_IN_IMAGE = "solution_in_image"
    TESTS_IN_IMAGE = "tests_in_image"
    WEAK_VERIFIER = "weak_verifier"
    STRENGTH_NOT_MEASURABLE = "strength_not_measurable"
    # reward-file verifiers (Harbor task folders)
    IMAGE_BUILD_FAILED = "image_build_failed"
    # multi-container (compose) tasks
    COMPOSE_INVALID = "compose_invalid"
    SERVICE_START_FAILED = "service_start_failed"
    SERVICE_UNHEALTHY = "service_unhealthy"
    NOP_REWARDED = "nop_rewarded"
    REWARD_MISSING = "reward_missing"
    REWARD_MALFORMED = "reward_malformed"
    # data-source API stability
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_READ = "timeout_read"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    TLS = "tls"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    RATE_LIMITED = "rate_limited"
    INVALID_JSON = "invalid_json"
    SCHEMA_VIOLATION = "schema_violation"
    SCHEMA_DRIFT = "schema_drift"
    STALE_DATA = "stale_data"
    SLOW_RESPONSE = "slow_response"
    UNREACHABLE = "unreachable"
    UNEXPECTED_STATUS = "unexpected_status"
    BODY_TOO_LARGE = "body_too_large"
    # degraded: status PASS, but the evidence is weaker than a clean pass (see DEGRADED_REASONS)
    RECOVERED_AFTER_RETRY = "recovered_after_retry"
    # an environment's state, from the training run's rollouts (never a probe result's)
    ROLLOUT_FAILURES = "rollout_failures"
    # envcheck's own failures (status ERROR only)
    ENGINE_UNREACHABLE = "engine_unreachable"
    IMAGE_MISSING = "image_missing"
    CHECKER_OOM = "checker_oom"
    CHECKER_CRASHED = "checker_crashed"
    SECRET_UNAVAILABLE = "secret_unavailable"
    INTERRUPTED = "interrupted"
    WORKER_LOST = "worker_lost"
    NODE_UNAVAILABLE = "node_unavailable"
    HOST_SLOW = "host_slow"
    # the registry an environment's image lives in (status ERROR: envcheck's or the registry's,
    # never the environment's; but IMAGE_NOT_FOUND, a FAIL: the reference names no image)
    REGISTRY_UNREACHABLE = "registry_unreachable"
    REGISTRY_AUTH_FAILED = "registry_auth_failed"
    REGISTRY_RATE_LIMITED = "registry_rate_limited"
    IMAGE_CACHE_FULL = "image_cache_full"
    IMAGE_NOT_FOUND = "image_not_found"


REASON_DOCS: dict[Reason, str] = {
    Reason.OK: "every check of the probe passed",
    Reason.NOT_APPLICABLE: "the environment declares nothing for this probe kind",
    Reason.CONTAINER_START_FAILED: "the sandbox container did not start or exited at once",
    Reason.CONTAINER_START_SLOW: "the container took longer than limits.start_s to run",
    Reason.USER_MISSING: "the declared sandbox user does not exist in the image",
    Reason.SHELL_MISSING: "the declared shell is not an executable in the image",
    Reason.SHELL_SLOW: "a login or interactive shell took longer than limits.shell_s to answer",
    Reason.LOGIN_SHELL_BROKEN: "a login shell started but did not run the probe script",
    Reason.INTERACTIVE_SHELL_BROKEN: "an interactive shell did not answer on a terminal",
    Reason.TOOL_MISSING: "a required tool is not on PATH for the sandbox user",
    Reason.WORKDIR_MISSING: "the workdir does not exist",
    Reason.WORKDIR_NOT_WRITABLE: "the sandbox user cannot create files in the workdir",
    Reason.PTY_BROKEN: "a command typed into a TTY did not echo back with its output",
    Reason.TIMEOUT: "a command in the sandbox ran past its timeout and was killed",
    Reason.OUTPUT_FLOOD: "a command printed more than the output cap (head and tail kept)",
    Reason.PACKAGE_MISSING: "a declared package is not installed",
    Reason.VERSION_DRIFT: "an installed version does not satisfy the declared specifier or lock",
    Reason.IMPORT_BROKEN: "a declared module fails to import in a fresh interpreter",
    Reason.REQUIREMENTS_CONFLICT: "the installed packages have conflicting requirements",
    Reason.LOCK_UNREADABLE: "the declared lock file is missing or malformed "
                            "(not the environment's fault)",
    Reason.F2P_PASSES_BEFORE_ORACLE: "a fail-to-pass test passes with no fix: rewards a no-op",
    Reason.ORACLE_DOES_NOT_FIX: "after the oracle solution a fail-to-pass test still fails, or "
                                "the verifier's reward stays below 1",
    Reason.ORACLE_FAILED: "the oracle solution itself failed: exited non-zero or did not start",
    Reason.P2P_BROKEN: "a pass-to-pass test fails",
    Reason.ORDER_DEPENDENT: "test outcomes change only with the test order",
    Reason.NONDETERMINISTIC: "reruns of the same tests disagree: random rewards",
    Reason.NEEDS_NETWORK: "tests fail only because the sandbox has no network",
    Reason.NO_TESTS_COLLECTED: "no tests collected, or a non-zero exit with no test failed",
    Reason.PARSE_ERROR: "the JUnit XML report is missing or unparsable",
    Reason.TEST_PATCH_DOES_NOT_APPLY: "the task's test patch does not apply to the image's "
                                      "repository (git apply)",
    Reason.GOLD_PATCH_DOES_NOT_APPLY: "the task's gold patch (the oracle) does not apply to the "
                                      "image's repository",
    Reason.REWARD_HACKABLE: "a known trick, played by a do-nothing agent, earns the reward "
                            "(degraded; a fail where hack resistance is required)",
    Reason.SOLUTION_LEAKED: "the image's git history holds the answer: the gold patch's "
                            "resulting files, or commits after the base commit (degraded; a "
                            "fail where leak checks are required)",
    Reason.SOLUTION_IN_IMAGE: "the sandbox user can read the solution in the image: its files "
                              "by content, or a path declared to hold it (degraded; a fail "
                              "where leak checks are required)",
    Reason.TESTS_IN_IMAGE: "the sandbox user can read the hidden tests in the image: their "
                           "files by content, or a path declared to hold them (degraded; a "
                           "fail where leak checks are required)",
    Reason.WEAK_VERIFIER: "wrong fixes earn the reward: too few of the mutants of the gold "
                          "patch told apart from it (or of a script oracle's output files) "
                          "are refused by the verifier (score below strength.min_score; "
                          "degraded; a fail where strength is required)",
    Reason.STRENGTH_NOT_MEASURABLE: "the verifier's strength could not be measured: fewer "
                                    "than strength.min_competent mutants told apart from the "
                                    "fix, no control playable, or survivors that could not be "
                                    "classified would decide (degraded, whether strength is "
                                    "required or not)",
    Reason.IMAGE_BUILD_FAILED: "the task's environment/Dockerfile (or a compose service's "
                               "build context) does not build",
    Reason.COMPOSE_INVALID: "the task's docker-compose.yaml cannot be read, has no agent "
                            "service, or asks for what a sandbox refuses (privileges, host "
                            "namespaces or paths, capabilities beyond the engine's defaults)",
    Reason.SERVICE_START_FAILED: "a service of the task's docker-compose.yaml did not start, "
                                 "or exited (its log's tail is the evidence)",
    Reason.SERVICE_UNHEALTHY: "a service of the task's docker-compose.yaml did not become "
                              "healthy within the task's timeout (its log's tail is the "
                              "evidence)",
    Reason.NOP_REWARDED: "the verifier rewards a no-op: reward above 0 with no solution",
    Reason.REWARD_MISSING: "the verifier wrote no reward file (/logs/verifier/reward.txt or "
                           "reward.json)",
    Reason.REWARD_MALFORMED: "the verifier's reward file is empty, unparsable or not a number",
    Reason.TIMEOUT_CONNECT: "connecting to the data source timed out",
    Reason.TIMEOUT_READ: "the data source accepted the connection but did not answer in time",
    Reason.CONNECTION_REFUSED: "the data source refused the connection",
    Reason.CONNECTION_RESET: "the data source reset the connection or truncated the body",
    Reason.TLS: "the TLS handshake or certificate check failed",
    Reason.HTTP_4XX: "the data source answered with a 4xx status",
    Reason.HTTP_5XX: "the data source answered with a 5xx status",
    Reason.RATE_LIMITED: "the data source answered 429 Too Many Requests",
    Reason.INVALID_JSON: "the body is not valid JSON",
    Reason.SCHEMA_VIOLATION: "the body does not validate against the declared JSON Schema",
    Reason.SCHEMA_DRIFT: "the response's structure changed since the accepted fingerprint",
    Reason.STALE_DATA: "the freshness field is older than allowed",
    Reason.SLOW_RESPONSE: "responses are slower than the latency budget",
    Reason.UNREACHABLE: "the data source's host could not be reached (name not resolved, "
                        "no route, network unreachable)",
    Reason.UNEXPECTED_STATUS: "the status is not the expected one, nor a 4xx or 5xx "
                              "(e.g. a redirect)",
    Reason.BODY_TOO_LARGE: "the body is larger than the data source's max_body_kb",
    Reason.RECOVERED_AFTER_RETRY: "passed, but only after retrying transient failures "
                                  "(degraded)",
    Reason.ROLLOUT_FAILURES: "the training run's rollouts fail the environment's way well above "
                             "the fleet's rate (a sequential test per image digest; an "
                             "environment's state reason, `rollouts: rollout_failures`, never a "
                             "probe result's)",
    Reason.ENGINE_UNREACHABLE: "the Docker engine did not answer (not the environment's fault)",
    Reason.IMAGE_MISSING: "the image is not on this host (not the environment's fault)",
    Reason.CHECKER_OOM: "envcheck's checker ran out of memory (not the environment's fault)",
    Reason.CHECKER_CRASHED: "envcheck itself failed while probing (not the environment's fault)",
    Reason.SECRET_UNAVAILABLE: "a data source's secret (env var or file) is missing or empty "
                               "(not the environment's fault)",
    Reason.INTERRUPTED: "the check run was interrupted before the probe finished",
    Reason.WORKER_LOST: "the worker node running the check died and its retries ran out "
                        "(not the environment's fault)",
    Reason.NODE_UNAVAILABLE: "no live worker node offers what the check needs: a Docker engine, "
                             "or the node a data source is pinned to (not the environment's "
                             "fault)",
    Reason.HOST_SLOW: "a container start or shell went past its limit on an image whose same "
                      "digest and spec a full probe proved fast: the host is slow (not the "
                      "environment's fault)",
    Reason.REGISTRY_UNREACHABLE: "the image's registry did not answer, timed out or answered "
                                 "5xx (not the environment's fault)",
    Reason.REGISTRY_AUTH_FAILED: "the image's registry refused envcheck's credentials, or there "
                                 "were none for it (not the environment's fault)",
    Reason.REGISTRY_RATE_LIMITED: "the image's registry rate-limited envcheck (429 or "
                                  "toomanyrequests): backed off for that registry (not the "
                                  "environment's fault)",
    Reason.IMAGE_CACHE_FULL: "the image does not fit envcheck's image cache: larger than the "
                             "whole budget, or the disk filled while it was pulled (not the "
                             "environment's fault)",
    Reason.IMAGE_NOT_FOUND: "the registry has no such image: the tag or repository is gone, seen "
                            "on two looks a watch interval apart (a trainer would fail on it too)",
}


_OK_REASONS = frozenset({Reason.OK, Reason.NOT_APPLICABLE})
# The only reasons a ``pass`` may carry besides ``ok``: it passed, but not cleanly.
# Answers the image holds where its agent can read them (the leak checks).
LEAK_REASONS = frozenset({Reason.SOLUTION_LEAKED, Reason.SOLUTION_IN_IMAGE,
                          Reason.TESTS_IN_IMAGE})
DEGRADED_REASONS = frozenset({Reason.RECOVERED_AFTER_RETRY, Reason.REWARD_HACKABLE,
                              Reason.WEAK_VERIFIER, Reason.STRENGTH_NOT_MEASURABLE}
                             | LEAK_REASONS)
# Degraded reasons that may also carry a ``fail``: where the weakness is required absent.
_DEGRADED_OR_FAILING = frozenset({Reason.REWARD_HACKABLE, Reason.WEAK_VERIFIER}
                                 | LEAK_REASONS)


@dataclass(frozen=True, slots=True)
class CommandEvidence:
    """One command run in a sandbox, with bounded output (head and tail kept)."""

    command: str
    exit_code: int | None
    duration_s: float
    output_head: str = ""
    output_tail: str = ""
    output_bytes: int = 0
    truncated: bool = False
    timed_out: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    env_id: str
    kind: ProbeKind
    status: Status
    reason: Reason
    summary: str
    duration_s: float
    image_digest: str | None = None
    spec_hash: str = ""
    # When the probe started. Probes pass the time they took before checking (see
    # Probe.run); the default, the time the value is made, suits only results without a
    # duration (fixtures, checks that never ran).
    started_at: datetime = field(default_factory=SYSTEM_CLOCK.now)
    evidence: tuple[CommandEvidence, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reason in _DEGRADED_OR_FAILING:
            mismatch = self.status not in (Status.PASS, Status.FAIL)
        else:
            passing = self.status in (Status.PASS, Status.SKIP)
            mismatch = passing != (self.reason in _OK_REASONS | DEGRADED_REASONS) or (
                self.reason in DEGRADED_REASONS and self.status is not Status.PASS)
        if mismatch:
            raise ValueError(f"status {self.status} does not go with reason {self.reason}")

    @property
    def ok(self) -> bool:
        return self.status is Status.PASS

    @property
    def degraded(self) -> bool:
        """A pass on weaker evidence (e.g. only after retries): the health model may count
        it as ``degraded`` rather than ``healthy``."""
        return self.status is Status.PASS and self.reason in DEGRADED_REASONS

    def to_json(self) -> dict[str, Any]:
        """The line format of ``envcheck check --json``."""
        return {
            "env": self.env_id,
            "probe": str(self.kind),
            "status": str(self.status),
            "reason": str(self.reason),
            "duration_s": round(self.duration_s, 4),
            "image_digest": self.image_digest,
            "spec_hash": self.spec_hash,
            "started_at": self.started_at.isoformat(),
            "summary": self.summary,
            "details": self.details,
            "evidence": [e.to_json() for e in self.evidence],
        }


# The status each (environment, kind) had before a cycle: what a cycle's results are judged
# against (a sudden storm of failures among previously passing probes is an incident).
Previous = dict[tuple[str, ProbeKind], Status]
