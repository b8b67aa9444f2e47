"""The HTTP API's documents: what each route returns and takes, as the OpenAPI spec shows it.

Responses are built from store rows by the ``*.of`` constructors here, so the routes stay
thin. Every error, whatever its status, has the one shape of :class:`Problem`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from envcheck.core.depth import RunCount
from envcheck.core.results import ProbeResult
from envcheck.feed.allowlist import Allowlist
from envcheck.health.sprt import KindHealth
from envcheck.health.taint import Basis, TaintInterval
from envcheck.store.tables.results import ResultFields
from envcheck.store.tables.runs import Incident, IncidentFields
from envcheck.store.tables.states import QuarantineListing, Transition, TransitionFields

__all__ = [
    "AllowlistOut",
    "DigestHistoryOut",
    "DigestKindOut",
    "DigestOut",
    "EnvironmentOut",
    "EvidenceOut",
    "FieldError",
    "KindHealthOut",
    "Problem",
    "QuarantineChange",
    "QuarantineChangeOut",
    "QuarantineEntryOut",
    "QuarantineOut",
    "ResultOut",
    "TaintIntervalOut",
    "TaintOut",
    "TransitionOut",
    "WilsonOut",
]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


# The documents built on the store's records, whose fields have defaults for writing: every
# field is in every answer, so the spec says each is required.
_EVERY_FIELD_SHOWN: Any = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class FieldError(_Out):
    field: str = Field(description="dotted path of the offending field, e.g. `reason`")
    location: str = Field(description="where it was: body, path, query or header")
    message: str
    type: str = Field(description="pydantic's error type, e.g. `string_too_short`")


class Problem(_Out):
    """Every 4xx/5xx answer: a stable code for programs, a sentence for people."""

    error: str = Field(description="stable code, e.g. `unknown_suite`, `invalid_token`")
    reason: str = Field(description="what went wrong and what to do about it")
    fields: list[FieldError] = Field(default_factory=list,
                                     description="per-field errors of a 422 answer (a "
                                                 "400's: the bad rollout record)")


class AllowlistOut(_Out):
    suite: str
    generation: int = Field(description="feed generation (newest transition id) it reflects")
    allowed: list[str] = Field(description="environment ids a scheduler may use now, sorted")
    excluded: dict[str, str] = Field(description="environment id -> why it is not allowed")
    healthy_fraction: float = Field(description="allowed / members (0 for an empty suite)")

    @classmethod
    def of(cls, listing: Allowlist) -> AllowlistOut:
        return cls(suite=listing.suite, generation=listing.generation, allowed=listing.allowed,
                   excluded=listing.excluded,
                   healthy_fraction=round(listing.healthy_fraction, 4))


# A quarantined environment: the store's record as it is. No docstring: the spec would show
# it as a description.
class QuarantineEntryOut(QuarantineListing):
    model_config = _EVERY_FIELD_SHOWN


class QuarantineOut(_Out):
    generation: int
    count: int
    quarantined: list[QuarantineEntryOut]


class WilsonOut(_Out):
    low: float
    high: float


class KindHealthOut(_Out):
    """One probe kind's health, from the evidence of its current image digest and spec."""

    state: str
    reason: str
    passes: int = Field(description="clean runs of the current identity (a tests probe "
                        "holds several: runs are counted, not probes)")
    failures: int = Field(description="failed runs of the current identity")
    runs: int
    failure_rate: float | None = Field(description="failures / runs; null before any run")
    wilson: WilsonOut = Field(description="95% Wilson interval of the failure rate")
    llr: float = Field(description="SPRT log-likelihood ratio (quarantine at +2.944)")
    image_digest: str | None
    spec_hash: str | None

    @classmethod
    def of(cls, health: KindHealth) -> KindHealthOut:
        rate = health.failure_rate
        return cls(state=str(health.state), reason=health.reason, passes=health.passes,
                   failures=health.failures, runs=health.runs,
                   failure_rate=round(rate, 4) if rate is not None else None,
                   wilson=WilsonOut(low=health.wilson[0], high=health.wilson[1]),
                   llr=health.llr, image_digest=health.image_digest,
                   spec_hash=health.spec_hash)


class TransitionOut(TransitionFields):
    """A stored transition (its fields are the store's), known by its generation."""

    model_config = _EVERY_FIELD_SHOWN

    generation: int = Field(description="the transition's id: the feed generation it made")

    @classmethod
    def of(cls, row: Transition) -> TransitionOut:
        fields = row.model_dump(include=set(TransitionFields.model_fields))
        return cls(generation=row.id or 0, **fields)


class IncidentOut(IncidentFields):
    """A check cycle judged an infrastructure incident (its fields are the store's): what
    failed, in which cycle, and what the health model did not count."""

    model_config = _EVERY_FIELD_SHOWN

    id: int
    run_id: str = Field(description="the check cycle (run) it happened in")

    @classmethod
    def of(cls, row: Incident) -> IncidentOut:
        fields = row.model_dump(include=set(IncidentFields.model_fields))
        return cls(id=row.id or 0, run_id=row.run_id, **fields)


class IncidentsOut(_Out):
    count: int
    incidents: list[IncidentOut] = Field(description="newest first")


class EvidenceOut(_Out):
    """One command a probe ran in the sandbox, with the head and tail of its output."""

    command: str
    exit_code: int | None
    duration_s: float
    output_head: str
    output_tail: str
    output_bytes: int
    truncated: bool
    timed_out: bool


class ResultOut(ResultFields):
    """A result (the fields every reader shows are the store's) in full."""

    model_config = _EVERY_FIELD_SHOWN

    details: dict[str, Any]
    evidence: list[EvidenceOut]

    @classmethod
    def of(cls, result: ProbeResult) -> ResultOut:
        count = RunCount.of(result.status, result.details)
        return cls(kind=str(result.kind), status=str(result.status), reason=str(result.reason),
                   summary=result.summary, started_at=result.started_at,
                   duration_s=result.duration_s, image_digest=result.image_digest,
                   spec_hash=result.spec_hash, runs=count.runs, failed_runs=count.failed,
                   depth=str(count.depth) if count.depth is not None else None,
                   details=result.details,
                   evidence=[EvidenceOut(**e.to_json()) for e in result.evidence])


class EnvironmentOut(_Out):
    env_id: str
    suite: str
    generation: int
    state: str
    reason: str
    allowed: bool = Field(description="in its suite's allowlist now")
    retired_at: datetime | None = Field(None, description="when it left the daemon's "
                                        "catalogue (then in no allowlist); null while current")
    image_digest: str | None
    updated_at: datetime | None = Field(description="when the health model last assessed it")
    quarantine: QuarantineEntryOut | None
    kinds: dict[str, KindHealthOut] = Field(description="probe kind -> its health")
    rollouts: dict[str, Any] | None = Field(
        None, description="the training run's rollouts as last judged (state, flagged, "
        "failure and fleet rates, the test's llr, flagged_at, notes, confirmed, by_outcome, "
        "reward); null without rollout evidence")
    history: list[TransitionOut] = Field(description="its transitions, newest first")
    latest_results: list[ResultOut] = Field(description="the newest result of each probe kind")


class DigestKindOut(_Out):
    """One probe kind's stored results under a digest (pruned ones not counted here)."""

    kind: str
    results: int
    failures: int = Field(description="of them failed or flaky")
    latest_result_id: int = Field(description="the newest of them (its evidence: the "
                                  "dashboard's environment page, `results=` that id)")
    latest_status: str
    latest_reason: str
    latest_at: datetime


class DigestOut(_Out):
    """A digest the environment's image named: for a watched image (`pull: watch`), a digest
    its tag pointed at in its registry; else the local image's."""

    image_digest: str | None = Field(description="null: results that named no image")
    current: bool = Field(description="the digest of the environment's newest result")
    first_seen: datetime = Field(description="its first result")
    last_seen: datetime = Field(description="its newest result")
    results: int = Field(description="results under it, those a prune folded away included")
    failures: int = Field(description="of them failed or flaky")
    kinds: list[DigestKindOut] = Field(description="per probe kind, by kind")


class DigestHistoryOut(_Out):
    env_id: str
    suite: str
    image: str = Field(description="the image reference the catalogue names")
    watched: bool = Field(description="its tag is followed in its registry (`pull: watch`)")
    generation: int
    digests: list[DigestOut] = Field(description="newest first (by last seen)")


_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
_Actor = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class QuarantineChange(BaseModel):
    """Body of a manual quarantine or release. The reason goes into the audit trail."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: _Text = Field(description="why (required): shown to everyone reading the feed")
    actor: _Actor | None = Field(None, description="who; default `api`. Name a person: the "
                                                   "token is shared, the audit trail is not")


class QuarantineChangeOut(_Out):
    env_id: str
    changed: bool = Field(description="false when it already was as asked (nothing written)")
    quarantined: bool = Field(description="quarantined after the request")
    generation: int = Field(description="feed generation after the request")
    transition: TransitionOut | None
    exports_written: bool = Field(description="the export files were rewritten (false when "
                                              "nothing changed or writing them failed)")


class RolloutsIngestedOut(_Out):
    """What one batch of rollouts added (``POST /v1/rollouts``)."""

    received: int = Field(description="records in the batch")
    counted: int = Field(description="records added to their environments' counters")
    duplicates: int = Field(description="records whose producer and sequence number were "
                            "counted before (a retried batch), or twice in this batch")
    unknown: int = Field(description="records naming no environment of the catalogue: "
                         "counted per hour, never an error")
    unknown_ids: list[str] = Field(description="a few of those environment ids")


class TaintIntervalOut(_Out):
    """A time in which an environment's rewards could not be trusted: samples taken in
    ``[start, end)`` are to be dropped, relabelled or replayed."""

    env_id: str
    suite: str
    start: datetime = Field(description="where the evidence reaches back to (inclusive)")
    end: datetime | None = Field(description="release or a new image digest (exclusive); "
                                 "null while it lasts")
    image_digest: str | None = Field(description="the image the evidence is about")
    kind: str | None = Field(description="the probe kind that found it, `rollouts`, or null "
                             "for a person's quarantine")
    reason: str = Field(description="the reason code (a person's own words for `manual`)")
    basis: Basis = Field(description="what `start` reaches back to: `identity` (the image "
                         "and spec's first appearance), `first_failure`, "
                         "`first_failing_rollouts` or `manual`")
    flagged_at: datetime = Field(description="when envcheck (or a person) decided")
    evidence: list[int] = Field(description="ids of the probe results that show it")

    @classmethod
    def of(cls, interval: TaintInterval) -> TaintIntervalOut:
        return cls(env_id=interval.env_id, suite=interval.suite, start=interval.start,
                   end=interval.end, image_digest=interval.image_digest, kind=interval.kind,
                   reason=interval.reason, basis=interval.basis,
                   flagged_at=interval.flagged_at, evidence=list(interval.evidence))


class TaintOut(_Out):
    generation: int = Field(description="feed generation (newest transition id) when read")
    since: datetime | None = Field(description="the window asked for (null: unbounded)")
    until: datetime | None
    count: int
    intervals: list[TaintIntervalOut] = Field(description="those that meet the window, by "
                                              "environment and start")
