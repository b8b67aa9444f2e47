"""Data-source API stability: do the data APIs an environment calls answer, fast, with the
same structure, with fresh data?

The ``datasource`` probe of an environment asks the cycle's :class:`DataSourceChecker` (an
injected service, see :meth:`ProbeContext.service`) for a report on each source it lists, and
names the failing ones. The checker samples each source once per check cycle, however many
environments share it (a single-flight cache keyed by run id), from the host with requests,
or from inside a short-lived container of the environment's image where the catalogue asks
(``in_sandbox`` on the source, or ``data_sources_in_sandbox`` on the environment).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future
from contextlib import ExitStack, closing
from functools import partial
from typing import Any

from envcheck.catalogue.datasources import DataSource
from envcheck.catalogue.models import Environment
from envcheck.core.clock import SYSTEM_CLOCK, Clock
from envcheck.core.errors import InfraError, SecretUnavailable
from envcheck.core.results import ProbeKind, ProbeResult, Reason, Status
from envcheck.kinds.base import Probe, ProbeContext, Verdict
from envcheck.kinds.datasource.insandbox import SandboxTransport
from envcheck.kinds.datasource.report import SourceReport, error_report, summarise
from envcheck.kinds.datasource.sampling import ShapeStore, SourceSampler, Transport, validator
from envcheck.kinds.datasource.shapewrites import ThrottledShapes
from envcheck.net.http import SessionFactory, build_request, new_session, send
from envcheck.net.secrets import Redactor, read_secret, redact_url, secrets_in_use

__all__ = ["DataSourceChecker", "DatasourceProbe", "combine"]

log = logging.getLogger(__name__)

# Where a source is probed from: None for the host, else (image digest, network).
Via = tuple[str, str] | None


class DataSourceChecker:
    """Probes data sources for the ``datasource`` probes of check cycles.

    Holds what every probe shares: the catalogue's sources, the fingerprint store (writes of
    unchanged shapes throttled, see :mod:`~envcheck.kinds.datasource.shapewrites`), the HTTP session
    factory (one session per source per probe) and the clock. Reports are cached per run id
    for the last ``keep_cycles`` cycles: a source is sampled once per cycle.
    """

    def __init__(self, sources: Iterable[DataSource], shapes: ShapeStore, *,
                 session_factory: SessionFactory = new_session, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None, keep_cycles: int = 4,
                 shape_write_interval_s: float = 300.0) -> None:
        self._sources = {s.id: s for s in sources}
        self._validators = {s.id: validator(s) for s in self._sources.values()}
        self._shapes = ThrottledShapes(shapes, clock, shape_write_interval_s)
        self._session_factory = session_factory
        self._clock = clock
        self._rng = rng or random.Random()
        self._keep = keep_cycles
        self._lock = threading.Lock()
        self._cycles: OrderedDict[str, dict[tuple[str, Via], Future[SourceReport]]] = (
            OrderedDict())
        self.sampled = 0  # probes actually sent (not served from the cycle cache)
        self._spec_blobs: dict[tuple[str, ...], str] = {}

    @property
    def clock(self) -> Clock:
        return self._clock

    def source(self, source_id: str) -> DataSource:
        try:
            return self._sources[source_id]
        except KeyError:
            raise InfraError(f"data source {source_id!r} is not in the checker's "
                             "catalogue") from None

    def spec_hash(self, base: str, source_ids: Iterable[str]) -> str:
        """``base`` (the environment's hash) combined with the sources' definitions: a
        changed URL, schema or budget is a new spec, so evidence restarts."""
        ids = tuple(source_ids)
        if ids not in self._spec_blobs:
            self._spec_blobs[ids] = json.dumps(
                [self.source(s).model_dump(mode="json") for s in ids], sort_keys=True)
        blob = base + self._spec_blobs[ids]
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def report(self, run_id: str, source: DataSource, via: Via = None,
               transport: Transport | None = None) -> SourceReport:
        """The cycle's report on ``source``; the first caller probes, the others wait."""
        with self._lock:
            cycle = self._cycles.setdefault(run_id, {})
            self._cycles.move_to_end(run_id)
            while len(self._cycles) > self._keep:
                self._cycles.popitem(last=False)
            future = cycle.get((source.id, via))
            mine = future is None
            if future is None:
                future = cycle[(source.id, via)] = Future()
        if mine:
            try:
                future.set_result(self.probe(source, via, transport))
            except BaseException as exc:
                future.set_exception(exc)
                raise
        return future.result()

    def probe(self, source: DataSource, via: Via = None,
              transport: Transport | None = None) -> SourceReport:
        """Sample ``source`` now (through ``transport``, else from the host)."""
        started = self._clock.monotonic()
        with self._lock:
            self.sampled += 1
        try:
            secret = read_secret(source.auth) if source.auth is not None else None
        except SecretUnavailable as exc:
            return error_report(source, exc.reason, str(exc))
        with secrets_in_use([secret] if secret else []) as redactor, ExitStack() as stack:
            request = build_request(source, secret)
            if transport is None:
                session = stack.enter_context(closing(self._session_factory()))
                transport = partial(send, session, clock=self._clock)
            compiled = self._validators.get(source.id) if self._sources.get(
                source.id) is source else None
            sampler = SourceSampler(source, transport, self._shapes, self._clock, self._rng,
                                    compiled)
            samples = sampler.run(request)
            report = summarise(
                source, samples, shown_url=redact_url(request.url),
                via="host" if via is None else f"sandbox (network {via[1]})",
                duration_s=self._clock.monotonic() - started,
                accepted=sampler.accepted_fingerprint, auto_accepted=sampler.auto_accepted,
                budget_exhausted=sampler.budget.exhausted, stopped=sampler.stopped)
            report = _redacted(report, redactor)
        log.debug("data source %s: %s %s", source.id, report.status, report.summary)
        return report


def _redacted(report: SourceReport, redactor: Redactor) -> SourceReport:
    evidence = tuple(dataclasses.replace(
        e, command=redactor.text(e.command), output_head=redactor.text(e.output_head),
        output_tail=redactor.text(e.output_tail)) for e in report.evidence)
    return dataclasses.replace(report, summary=redactor.text(report.summary),
                               details=redactor.value(report.details), evidence=evidence)


def combine(reports: list[SourceReport]) -> Verdict:
    """One environment's verdict from its sources' reports, naming the failing ones."""
    failing = [r for r in reports if r.status in (Status.FAIL, Status.FLAKY)]
    errored = [r for r in reports if r.status is Status.ERROR]
    degraded = [r for r in reports if r.degraded]
    details: dict[str, Any] = {
        "sources": {r.source_id: r.details for r in reports},
        "failing": [r.source_id for r in failing],
        "degraded": [r.source_id for r in degraded],
        "errors": [r.source_id for r in errored],
    }
    evidence = tuple(e for r in reports for e in r.evidence)
    n = len(reports)
    if failing:
        status = Status.FAIL if any(r.status is Status.FAIL for r in failing) else Status.FLAKY
        lead = next(r for r in failing if r.status is status)
        head = f"{len(failing)} of {n} data source(s) failing: " if n > 1 else ""
        return Verdict(status, lead.reason, head + "; ".join(r.summary for r in failing),
                       details, evidence)
    if errored:
        return Verdict(Status.ERROR, errored[0].reason,
                       "; ".join(r.summary for r in errored), details, evidence)
    reason = Reason.RECOVERED_AFTER_RETRY if degraded else Reason.OK
    summary = "; ".join(r.summary for r in (degraded or reports))
    if degraded:
        summary = f"degraded (passed after retries): {summary}"
    return Verdict(Status.PASS, reason, summary, details, evidence)


def _network(env: Environment, source: DataSource) -> str | None:
    if env.data_sources_in_sandbox is not None:
        return env.data_sources_in_sandbox.network
    return source.in_sandbox.network if source.in_sandbox is not None else None


class DatasourceProbe(Probe):
    kind = ProbeKind.DATASOURCE
    # From the host no engine is involved; an engine failure in-sandbox raises InfraError.
    uses_engine = False

    def check(self, ctx: ProbeContext) -> Verdict:
        checker = _checker(ctx)
        reports: list[SourceReport] = []
        with ExitStack() as stack:
            transports: dict[str, SandboxTransport] = {}  # one container per network
            for source_id in ctx.env.data_sources:
                source = checker.source(source_id)
                network = _network(ctx.env, source)
                if network is None:
                    reports.append(checker.report(ctx.run_id, source))
                    continue
                if network not in transports:
                    transports[network] = SandboxTransport.for_network(
                        ctx.runtime, ctx.spec(), network, ctx.env.user, checker.clock)
                    stack.callback(transports[network].close)
                via = (ctx.image_digest or ctx.env.image, network)
                reports.append(checker.report(ctx.run_id, source, via, transports[network]))
        return combine(reports)

    def run(self, ctx: ProbeContext) -> ProbeResult:
        result = super().run(ctx)
        checker = ctx.service(DataSourceChecker)
        if checker is None or not ctx.env.data_sources:
            return result
        try:
            spec_hash = checker.spec_hash(result.spec_hash, ctx.env.data_sources)
        except InfraError:  # an unknown source: the result already says so
            return result
        return dataclasses.replace(result, spec_hash=spec_hash)


def _checker(ctx: ProbeContext) -> DataSourceChecker:
    checker = ctx.service(DataSourceChecker)
    if checker is None:
        raise InfraError("no data-source checker was given to this check cycle")
    return checker
