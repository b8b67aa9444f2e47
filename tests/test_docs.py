"""The README documents what the code does: every reason code, the two first commands."""

from __future__ import annotations

from envcheck.core.results import REASON_DOCS, Reason, Status
from envcheck.core.rollouts import OUTCOME_DOCS, Outcome
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_reason_code_is_documented() -> None:
    assert set(REASON_DOCS) == set(Reason)
    for reason, doc in REASON_DOCS.items():
        assert f"| `{reason}` | {doc} |" in README, reason


def test_every_rollout_outcome_is_documented() -> None:
    assert set(OUTCOME_DOCS) == set(Outcome)
    for outcome, doc in OUTCOME_DOCS.items():
        assert f"| `{outcome}` | {doc} |" in README, outcome


def test_every_status_is_documented() -> None:
    for status in Status:
        assert f"| `{status}` |" in README, status


def test_first_screen_has_the_two_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:25])
    assert "scripts/run.sh" in first_screen
    assert "scripts/test.sh" in first_screen
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/test.sh" in ci
