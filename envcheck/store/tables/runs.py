"""Check runs, and the incidents a run's results were judged to be."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON
from sqlmodel import Field, SQLModel

from envcheck.store.tables.columns import FROZEN, WRITABLE, UTCDateTime, now

__all__ = ["CheckRun", "Incident", "IncidentFields", "IncidentRow", "RunState"]


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"



class CheckRun(SQLModel, table=True):
    """One invocation of ``envcheck check`` or one daemon cycle."""

    __tablename__ = "check_run"

    id: str = Field(primary_key=True)
    started_at: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    # NULL while running, and for runs found dead by interrupt_stale_runs: their end is unknown.
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    state: str = RunState.RUNNING.value
    trigger: str
    host: str
    pid: int
    catalogue_files: list[str] = Field(default_factory=list, sa_type=JSON)



class IncidentFields(SQLModel):
    """A check cycle judged an infrastructure incident, as every reader shows it (the API's
    document builds on it): its results move no state."""

    model_config = FROZEN

    at: datetime = Field(default_factory=now, sa_type=UTCDateTime)
    kind: str = Field(description="engine_unreachable, failure_storm (probes) or "
                                  "rollout_storm (the training run's rollouts)")
    failing: int = Field(description="probes that failed (or hit the engine's failure)")
    total: int = Field(description="probes judged")
    detail: str
    # What the health model did not count: the cycle's results, and the failing ones among
    # them (env_id, kind, status, reason; the first few), whose states stood still.
    held_back: int = Field(0, description="results of the cycle kept out of the health model")
    held_back_failures: list[dict[str, str]] = Field(
        default_factory=list, sa_type=JSON,
        description="the failing results among them (env_id, kind, status, reason), the "
                    "first 50")


class Incident(IncidentFields):
    """A stored incident, known by its id and the check cycle (run) it happened in."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="check_run.id", index=True)


class IncidentRow(Incident, table=True):
    __tablename__ = "incident"
    model_config = WRITABLE

