"""Environment states and the observations they are judged from: the vocabulary the store
keeps and the health model computes, so the store needs none of the model's policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from envcheck.core.depth import Depth
from envcheck.core.results import Status

__all__ = ["NEVER_CHECKED", "EnvState", "Observation"]

# Why an environment is in the state it is, before the health model ever assessed it.
NEVER_CHECKED = "never checked"


class EnvState(StrEnum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FLAKY = "flaky"
    BROKEN = "broken"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def bad(self) -> bool:
        return self in (EnvState.FLAKY, EnvState.BROKEN)


_SEVERITY = {EnvState.HEALTHY: 0, EnvState.UNKNOWN: 1, EnvState.DEGRADED: 2,
             EnvState.FLAKY: 3, EnvState.BROKEN: 4}


@dataclass(frozen=True, slots=True)
class Observation:
    """One stored result, reduced to what the health model reads: ``runs`` it holds (a tests
    probe's reruns; one for other kinds), ``failed_runs`` of them (None: one of a failing
    result, none of a pass) and the ``depth`` its probe went to (None: not a tests probe,
    or one stored before depths existed, which always ran in full)."""

    status: Status
    reason: str
    started_at: datetime
    image_digest: str | None
    spec_hash: str
    run_id: str = ""
    result_id: int | None = None
    runs: int = 1
    failed_runs: int | None = None
    depth: Depth | None = None

    @property
    def identity(self) -> tuple[str | None, str]:
        return (self.image_digest, self.spec_hash)

    @property
    def run_split(self) -> tuple[int, int]:
        """(passed runs, failed runs): a failing result holds at least one failed run."""
        if self.depth is Depth.REUSED:  # an identity check: evidence reused, no run
            return 0, 0
        runs = max(self.runs, 1)
        failing = self.status in (Status.FAIL, Status.FLAKY)
        failed = self.failed_runs if self.failed_runs is not None else int(failing)
        failed = min(max(failed, int(failing)), runs)
        return runs - failed, failed
