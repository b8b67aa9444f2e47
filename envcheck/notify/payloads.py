"""What the notifier says: alerts from transitions and incidents, and the two wire formats.

Pure functions. A transition opens or closes up to two alerts per environment:

- ``EnvcheckEnvironmentUnhealthy{state=flaky|broken}`` fires when the environment enters that
  state and resolves when it leaves it (flaky -> broken resolves one and fires the other, as
  a Prometheus rule per state would);
- ``EnvcheckEnvironmentQuarantined`` fires on quarantine and resolves on release.

An infrastructure incident fires ``EnvcheckInfrastructureIncident{kind=...}``. A resolved
alert carries the labels and ``startsAt`` of the alert it closes, so receivers match them by
labels or by fingerprint (Prometheus' FNV-1a over the sorted labels, as Alertmanager sends).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

from envcheck.store.tables.runs import IncidentRow
from envcheck.store.tables.states import TransitionRow

__all__ = [
    "Alert",
    "AlertGroup",
    "alertmanager_payload",
    "changes_alerts",
    "closes_alerts",
    "fingerprint",
    "incident_group",
    "slack_payload",
    "transition_group",
]

UNHEALTHY = "EnvcheckEnvironmentUnhealthy"
QUARANTINED = "EnvcheckEnvironmentQuarantined"
INCIDENT = "EnvcheckInfrastructureIncident"
BAD_STATES = frozenset({"flaky", "broken"})
SEVERITY = {"broken": "critical", "flaky": "warning"}
AUTO_ACTOR = "envcheck"
_SLACK_MAX_DETAIL = 2000  # a section's text may hold 3000 characters
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of a firing alert
Status = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class Alert:
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)


@dataclass(frozen=True, slots=True)
class AlertGroup:
    """The alerts one transition or incident changes: one message to each webhook."""

    group_labels: dict[str, str]
    alerts: list[Alert] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return "firing" if any(a.status == "firing" for a in self.alerts) else "resolved"


def fingerprint(labels: dict[str, str]) -> str:
    """Prometheus' label-set fingerprint (FNV-1a 64 over sorted names and values)."""
    h = 0xCBF29CE484222325
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode() + b"\xff":
                h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def closes_alerts(t: TransitionRow) -> bool:
    """Does ``t`` resolve an alert (so its opening must be looked up)?"""
    return (t.old_state in BAD_STATES and t.new_state != t.old_state) or \
        (t.was_quarantined and not t.quarantined)


def changes_alerts(t: TransitionRow) -> bool:
    """Does ``t`` fire or resolve any alert? Most transitions (unknown -> healthy) do not."""
    return closes_alerts(t) or (t.new_state in BAD_STATES and t.new_state != t.old_state) \
        or t.quarantined != t.was_quarantined


def _env_url(base: str, env_id: str) -> str:
    return f"{base.rstrip('/')}/v1/environments/{quote(env_id, safe='')}"


def _opening(history: Sequence[TransitionRow], before: int, *, state: str | None = None
             ) -> TransitionRow | None:
    """The newest transition before ``before`` that entered ``state`` (or quarantine)."""
    for t in sorted(history, key=lambda r: r.id or 0, reverse=True):
        if (t.id or 0) >= before:
            continue
        entered = (t.new_state == state and t.old_state != state) if state is not None \
            else (t.quarantined and not t.was_quarantined)
        if entered:
            return t
    return None


def transition_group(t: TransitionRow, suite: str | None, history: Sequence[TransitionRow],
                     base_url: str) -> AlertGroup | None:
    """The alerts ``t`` fires or resolves (None if it changes none: e.g. unknown -> healthy).

    ``history`` holds the environment's earlier transitions, to find what a resolution closes.
    """
    base = {"env": t.env_id, **({"suite": suite} if suite else {})}
    url, tid = _env_url(base_url, t.env_id), t.id or 0
    alerts: list[Alert] = []
    if t.old_state in BAD_STATES and t.new_state != t.old_state:
        opened = _opening(history, tid, state=t.old_state)
        alerts.append(Alert(
            "resolved", {"alertname": UNHEALTHY, **base, "severity": SEVERITY[t.old_state],
                         "state": t.old_state},
            {"summary": f"{t.env_id} is no longer {t.old_state} (now {t.new_state})",
             "description": t.reason},
            opened.at if opened is not None else t.at, t.at, url))
    if t.new_state in BAD_STATES and t.new_state != t.old_state:
        alerts.append(Alert(
            "firing", {"alertname": UNHEALTHY, **base, "severity": SEVERITY[t.new_state],
                       "state": t.new_state},
            {"summary": f"{t.env_id} is {t.new_state} (was {t.old_state})",
             "description": _described(t)}, t.at, None, url))
    if t.quarantined != t.was_quarantined:
        opened = t if t.quarantined else _opening(history, tid)
        source = "auto" if (opened or t).actor == AUTO_ACTOR else "manual"
        labels = {"alertname": QUARANTINED, **base, "severity": "warning",
                  "state": opened.new_state if opened is not None else t.old_state,
                  "source": source}
        if t.quarantined:
            alerts.append(Alert("firing", labels, {
                "summary": f"{t.env_id} quarantined ({source}): schedulers will not use it",
                "description": _described(t)}, t.at, None, url))
        else:
            alerts.append(Alert("resolved", labels, {
                "summary": f"{t.env_id} released from quarantine (now {t.new_state})",
                "description": f"{t.reason} (by {t.actor})"},
                opened.at if opened is not None else t.at, t.at, url))
    return AlertGroup({"env": t.env_id}, alerts) if alerts else None


def _described(t: TransitionRow) -> str:
    parts = [f"{t.reason} (by {t.actor})"]
    if t.image_digest:
        parts.append(f"image {t.image_digest}")
    if t.evidence:
        parts.append("evidence: results " + ", ".join(str(i) for i in t.evidence[:10]))
    return "; ".join(parts)


def incident_group(incident: IncidentRow, base_url: str, resolved_at: datetime | None = None
                   ) -> AlertGroup:
    """An infrastructure incident: firing, or resolved at ``resolved_at``."""
    labels = {"alertname": INCIDENT, "kind": incident.kind, "severity": "critical"}
    if resolved_at is None:
        annotations = {"summary": f"infrastructure incident: {incident.kind}",
                       "description": f"{incident.detail} ({incident.failing} of "
                                      f"{incident.total}); the cycle moved no state"}
    else:
        annotations = {"summary": f"infrastructure incident over: {incident.kind}",
                       "description": "a later check cycle ran without an incident"}
    alert = Alert("resolved" if resolved_at is not None else "firing", labels, annotations,
                  incident.at, resolved_at, f"{base_url.rstrip('/')}/metrics")
    return AlertGroup({"alertname": INCIDENT, "kind": incident.kind}, [alert])


def _time(at: datetime | None) -> str:
    if at is None:
        return _ZERO_TIME
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    return {k: v for k, v in maps[0].items() if all(m.get(k) == v for m in maps[1:])}


def _group_key(labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(
        (k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in labels.items()))
    return "{}:{" + inner + "}"


def alertmanager_payload(group: AlertGroup, receiver: str, external_url: str
                         ) -> dict[str, Any]:
    """Alertmanager's webhook payload, version "4"."""
    return {
        "receiver": receiver,
        "status": group.status,
        "alerts": [{"status": a.status, "labels": a.labels, "annotations": a.annotations,
                    "startsAt": _time(a.starts_at), "endsAt": _time(a.ends_at),
                    "generatorURL": a.generator_url, "fingerprint": a.fingerprint}
                   for a in group.alerts],
        "groupLabels": group.group_labels,
        "commonLabels": _common([a.labels for a in group.alerts]),
        "commonAnnotations": _common([a.annotations for a in group.alerts]),
        "externalURL": external_url,
        "version": "4",
        "groupKey": _group_key(group.group_labels),
        "truncatedAlerts": 0,
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_line(a: Alert) -> str:
    icon = ":rotating_light:" if a.status == "firing" else ":white_check_mark:"
    return f"{icon} *{a.status.upper()}* {_slack_escape(a.annotations['summary'])}"


def slack_payload(group: AlertGroup) -> dict[str, Any]:
    """A Slack incoming-webhook message: ``text`` (notifications, fallbacks) and blocks."""
    blocks: list[dict[str, Any]] = []
    for a in group.alerts:
        detail = _slack_escape(a.annotations.get("description", ""))[:_SLACK_MAX_DETAIL]
        labels = " ".join(f"`{k}={_slack_escape(v)}`" for k, v in sorted(a.labels.items())
                          if k != "alertname" and v)
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": f"{_slack_line(a)}\n{detail}\n{labels}"}})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
            f"{a.labels['alertname']} · since {_time(a.starts_at)} · "
            f"<{a.generator_url}|details>")}]})
    return {"text": "\n".join(_slack_line(a) for a in group.alerts), "blocks": blocks}
