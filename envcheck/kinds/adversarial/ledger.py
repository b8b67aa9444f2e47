"""Reuse of adversarial evidence: controls run once per image digest and spec.

The tricks cost a fresh container and a verification each; their answer can only change with
the image (its digest) or with what is checked (the spec hash, which covers the tests spec and
its ``adversarial`` block). So the newest stored outcome for the same environment, digest and
spec hash is reused until either changes, if it is whole: one with tricks the time budget left
out or that could not act is no evidence for the digest, and the tricks are played again
(``controls._reused`` decides). The answer-leak checks (``kinds.leaks``) and the wrong-fix
controls (``kinds.strength``) are reused the same way under their own keys (:data:`LEAKS_KEY`,
:data:`STRENGTH_KEY`).

One mechanism wherever the probe runs: the probe asks a :class:`ControlsLedger` over a
:class:`PriorEvidence`. Locally that is the store. A Ray node has no store and resolves the
image digest itself, so the caller looks up the environment's newest controls for its spec
(:meth:`ControlsLedger.newest`, any digest) and sends them with the task; the node's ledger
reads them through :class:`RecordedEvidence`, which applies the same digest and spec check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from envcheck.catalogue.models import Environment
from envcheck.core.errors import StoreUnavailable
from envcheck.core.outages import StoreOutages
from envcheck.core.results import ProbeKind, ProbeResult

__all__ = ["DETAIL_KEY", "LEAKS_KEY", "STRENGTH_KEY", "ControlsLedger", "PriorEvidence",
           "RecordedEvidence"]

DETAIL_KEY = "adversarial"
LEAKS_KEY = "leaks"  # the leak checks' outcome, reused the same way (kinds.leaks)
STRENGTH_KEY = "strength"  # the wrong-fix controls' outcome (kinds.strength.controls)
PART = "reading earlier controls"


@runtime_checkable
class PriorEvidence(Protocol):
    def latest_with_detail(self, env_id: str, kind: ProbeKind, image_digest: str | None,
                           spec_hash: str, key: str) -> ProbeResult | None:
        """The newest result of that identity whose details hold ``key``; ``image_digest``
        None: of any digest."""
        ...


class RecordedEvidence:
    """Prior evidence looked up by the caller and carried to where the probe runs."""

    def __init__(self, results: Iterable[ProbeResult]) -> None:
        self._newest = {r.env_id: r for r in results}

    def latest_with_detail(self, env_id: str, kind: ProbeKind, image_digest: str | None,
                           spec_hash: str, key: str) -> ProbeResult | None:
        found = self._newest.get(env_id)
        if found is None or found.kind is not kind or found.spec_hash != spec_hash \
                or key not in found.details:
            return None
        return found if image_digest is None or found.image_digest == image_digest else None


class ControlsLedger:
    """``outages``: where a store that does not answer is said, once per outage; meanwhile
    nothing is reused (a store that does not answer costs a run of the controls, never
    evidence)."""

    def __init__(self, store: PriorEvidence, outages: StoreOutages | None = None) -> None:
        self._store = store
        self._outages = outages or StoreOutages()

    def _read(self, read: Callable[[], ProbeResult | None]) -> ProbeResult | None:
        try:
            found = read()
        except StoreUnavailable as exc:
            self._outages.failed(PART, exc, then="the controls run in full")
            return None
        self._outages.ran(PART)
        return found

    def prior(self, env_id: str, image_digest: str | None, spec_hash: str,
              key: str = DETAIL_KEY) -> tuple[datetime, dict[str, Any]] | None:
        """When and what the controls found last for this identity; None: run them. ``key``:
        another check reused the same way (the leak checks: ``leaks``)."""
        if image_digest is None:  # no identity to key on: never reuse
            return None
        found = self._read(lambda: self._store.latest_with_detail(
            env_id, ProbeKind.TESTS, image_digest, spec_hash, key))
        if found is None:
            return None
        return found.started_at, found.details[key]

    def newest(self, env: Environment) -> ProbeResult | None:
        """``env``'s newest controls under its current spec, whatever the image digest (the
        caller does not know it yet): what a caller sends with a task run elsewhere. Without
        controls, its newest leak checks, else its newest wrong-fix controls (a result with
        several holds each of them: all run on the same pass)."""
        declared = ((DETAIL_KEY, env.adversarial()), (LEAKS_KEY, env.leaks()),
                    (STRENGTH_KEY, env.strength()))
        key = next((k for k, plan in declared if plan is not None), None)
        if key is None:
            return None
        return self._read(lambda: self._store.latest_with_detail(
            env.id, ProbeKind.TESTS, None, env.spec_hash(ProbeKind.TESTS), key))
