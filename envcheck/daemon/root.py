"""``envcheck daemon``: the composition root of the long-running process.

Builds the real engine client, store, scheduler and HTTP server once, here, and wires
signals: SIGHUP reloads the catalogue (a bad one is refused, the old keeps running); SIGTERM
and SIGINT stop scheduling, let in-flight probes finish and remove their containers, and
assess what they produced. A restart after SIGKILL reaps leftovers and marks the run.
Containers an engine outage left behind are removed once the engine answers again (checked
every few seconds), and at shutdown. The store is pruned every ``prune_every_s`` (hourly), a
first time a few minutes after the start, in short batches beside the probing.

The training run's rollouts are judged every window without waiting for a probe
(:mod:`envcheck.feed.rollouts`): an environment they flag anew gets every declared probe kind
queued now, ahead of the queue (the tests probe in full while flagged), and one they note
``always_solved`` its tests probe.

A store that refuses writes (a full disk) stops nothing: results are held and written when
it recovers (:mod:`envcheck.store.pending`); meanwhile ``/readyz`` answers 503 with the
count held and the store's reason, and 200 again once everything is written.

``/readyz`` reads what watcher threads last heard from the engine and the store
(:mod:`envcheck.core.readiness`), never asks them itself: an engine or a database that does
not answer makes it answer 503 "not answering for N s" at once, not hang.

One daemon writes a store (:mod:`envcheck.store.lease`): the lease is taken before anything
touches the store or the engine. Held by another daemon, the start is refused naming it, or,
``standby``, waits for it (SIGTERM ends the wait), then reads the catalogue again. Lost while
running, writes stop at once and the lease is taken back; if another daemon took it, this one
stops (exit 3) without waiting for its probes: it may write nothing more.

The HTTP port is bound once, before the wait (:func:`envcheck.api.serving.listen`), and
answers from then on: while the daemon waits as a standby and while it starts, the status app
alone (:mod:`envcheck.api.status`: ``/healthz`` 200, ``/readyz`` 503 naming the lease's holder
or saying it starts, ``/metrics`` with the process's and the lease's series), then the full
app on the same socket, handed over without closing it.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from fastapi import FastAPI
from prometheus_client import generate_latest

from envcheck.api.app import DEFAULT_PORT
from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Catalogue
from envcheck.core.depth import DEFAULT_HOST_SAMPLE_S
from envcheck.core.errors import CatalogueError
from envcheck.core.memory import give_back
from envcheck.core.outages import StoreOutages, every
from envcheck.core.readiness import Readiness
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.daemon.upkeep import pruner, rollout_look
from envcheck.executors.base import ExecutorConfig
from envcheck.executors.local import LocalExecutor
from envcheck.executors.registry import wait_for_executor
from envcheck.feed.assess import StoreAssessment
from envcheck.feed.depth import StoreDepth
from envcheck.feed.reuse import HostSamples, StoreReuse
from envcheck.feed.rollouts import RolloutLooks
from envcheck.health.rollouts import RolloutPolicy
from envcheck.kinds.base import Services
from envcheck.kinds.collaborators import build_services
from envcheck.notify.config import WebhookConfig
from envcheck.registry.fleet import RegistrySettings, RegistryStage
from envcheck.registry.stats import StatsSnapshot
from envcheck.schedule.budget import BudgetLimits
from envcheck.schedule.scheduler import ProbeScheduler
from envcheck.store import Store
from envcheck.store.lease import StoreLease
from envcheck.store.retention import Retention
from envcheck.store.urls import data_dir, default_database_url

if TYPE_CHECKING:
    from socket import socket

    from envcheck.api.status import Ready
    from envcheck.metrics import StoreMetrics

__all__ = ["DaemonConfig", "build_app", "run_daemon"]

log = logging.getLogger("envcheck.daemon")

EXIT_LEASE_LOST = 3  # the CLI's "could not check": another daemon writes the store now
TIDY_INTERVAL_S = 5.0  # how often a local executor looks for an outage's leftovers
PRUNE_FIRST_S = 300.0  # the first prune, after the start's catch-up (or sooner, if more often)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    catalogue: tuple[Path, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    concurrency: int = 2
    per_image: int | None = None
    window_s: float = 60.0
    database: str | None = None
    grace_s: float = 120.0
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)  # local engine, or ray
    webhooks: tuple[WebhookConfig, ...] = ()  # URLs are secrets: never in a repr or a log
    external_url: str | None = None  # envcheck's address in alert links (http://host:port)
    notify_flush_s: float = 10.0  # at shutdown, then undelivered alerts wait for next start
    store_flush_s: float = 10.0  # at shutdown, results the store refused wait this long more
    retention: Retention = field(default_factory=Retention)
    prune_every_s: float = 3600.0  # 0: never (prune by hand, `envcheck store prune`)
    # /metrics: series per environment and per suite, or per suite alone (a large fleet)
    metrics_series: Literal["environment", "suite"] = "environment"
    # enables the API's mutations; read and checked by the CLI before anything starts
    api_token: str | None = field(default=None, repr=False)  # a secret: never in a repr
    # sandbox-seconds per hour: the fleet's, and (suite, seconds) per suite; None: no budget
    budget_s: float | None = None
    suite_budgets: tuple[tuple[str, float], ...] = ()
    standby: bool = False  # the store's lease held by another daemon: wait for it, not exit
    rollouts: RolloutPolicy = field(default_factory=RolloutPolicy)  # how rollouts are judged
    # one full terminal probe this often measures the host (None: never; feed.reuse)
    host_sample_s: float | None = DEFAULT_HOST_SAMPLE_S
    image_cache: str | None = None  # the budget of the images envcheck pulls (None: none)
    prefetch: int = 4  # images pulled ahead of their probes, at most (0: none)


def build_app(store: Store, scheduler: ProbeScheduler, readiness: Readiness,
              metrics: StoreMetrics, token: str | None) -> FastAPI:
    from envcheck.api.app import create_app
    from envcheck.api.status import mount_status

    app = create_app(store, token)
    mount_status(app, partial(_ready, readiness, scheduler), metrics.render_parts)
    return app


def _ready(readiness: Readiness, scheduler: ProbeScheduler) -> Ready:
    """``/readyz`` of the running daemon: what the watchers last recorded (a hung engine or
    store never holds this answer), and the writes the store refused."""
    from envcheck.api.status import ACTIVE, Ready

    kept = readiness.checks()
    checks = {name: check.status for name, check in kept.items()}
    # Writes first: a full disk still answers reads. While the store refuses writes, or
    # results wait to be written, this daemon's feed lags its probes: not ready.
    held = scheduler.writes.status()
    if held is not None:
        checks["store"] = f"error: {held}"
    ready = all(v == "ok" for v in checks.values())
    return Ready(ready, {"ready": ready, "role": ACTIVE, "checks": checks,
                         "age_s": {name: check.age_s for name, check in kept.items()}})


def run_daemon(config: DaemonConfig, catalogue: Catalogue | None = None) -> int:
    """Run until stopped. ``config`` is already checked (the CLI does it before calling):
    nothing here refuses a setting after the engine or the scheduler has started.
    ``catalogue``: ``config.catalogue`` as the caller loaded it to check it (else read here:
    a fleet's catalogue costs a second to read, not to be paid twice at every start)."""
    from envcheck.api.serving import ServerThread, listen
    from envcheck.api.status import status_app, waiting_ready
    from envcheck.metrics.own import own_registry

    if catalogue is None:
        catalogue = load_catalogue(config.catalogue)
    url = config.database or default_database_url()
    lease = StoreLease.of(url)
    if not config.standby:  # refused before the port is bound: the one line names the holder
        lease.take(standby=False, stop=threading.Event())
    try:
        sockets = listen(config.host, config.port)  # for the daemon's life: never bound twice
    except Exception:
        lease.release()
        raise
    own = own_registry(lambda: lease.held)
    waiting = ServerThread(status_app(waiting_ready(lease), lambda: [generate_latest(own)]),
                           sockets)
    try:
        waiting.start()  # /healthz answers from here on, /readyz says standby or starting
        if config.standby:
            waited = _take_lease(lease)
            if waited is None:
                log.info("daemon stopped while waiting for the store's lease")
                return 0
            if waited:  # the catalogue may have changed meanwhile (the holder's reloads)
                catalogue = _reread(config.catalogue, catalogue)
        return _run(config, catalogue, url, lease, sockets, waiting.stop)
    finally:
        waiting.stop()
        for sock in sockets:
            sock.close()
        lease.release()


def _run(config: DaemonConfig, catalogue: Catalogue, url: str, lease: StoreLease,
         sockets: list[socket], handover: Callable[[], None]) -> int:
    """The daemon, its lease held; ``handover()`` stops what answered on ``sockets`` until
    the full app serves them."""
    from envcheck.api.serving import serve
    from envcheck.metrics import StoreMetrics
    from envcheck.metrics.images import RegistrySeries
    from envcheck.metrics.own import own_registry
    from envcheck.notify.notifier import Notifier
    from envcheck.store import open_store

    store = open_store(url)
    lease.guard(store.engine)
    stop, lost = threading.Event(), threading.Event()
    lease.watch(stop, lambda _holder: _stop_for_another(lost))  # the watch logs who
    outages = StoreOutages()  # what the store being unavailable stops, said once per outage
    executor = wait_for_executor(config.executor, stop, shapes=store,  # local: connects, reaps
                                 outages=outages)
    interrupted = store.interrupt_stale_runs(daemon_runs=True)  # under the lease: no other
    reaped = executor.reaped if isinstance(executor, LocalExecutor) else 0  # ray: per node
    log.info("daemon starting", extra={"environments": len(catalogue.environments),
                                       "reaped": reaped, "interrupted_runs": interrupted,
                                       "port": config.port})
    notifier = Notifier(store, config.webhooks, external_url=config.external_url
                        or f"http://{config.host}:{config.port}",
                        outages=outages) if config.webhooks else None
    # the images envcheck pulls (pull: watch): their tags watched, pulled under the budget
    registry = RegistryStage(RegistrySettings(data_dir(), image_cache=config.image_cache,
                                              prefetch_count=config.prefetch))
    # Ray: one waiting thread per docker slot of the cluster; Ray places and bounds the work
    concurrency = max(config.concurrency, executor.capacity())
    assessment = StoreAssessment(store, looks=RolloutLooks(store, config.rollouts))
    scheduler = ProbeScheduler(catalogue, executor, store, concurrency=concurrency,
                               per_image=config.per_image, window_s=config.window_s,
                               services=partial(_services,
                                                samples=HostSamples(config.host_sample_s),
                                                outages=outages, registry=registry),
                               assessment=assessment,
                               on_cycle=notifier.wake if notifier is not None else None,
                               budget=BudgetLimits(config.budget_s, dict(config.suite_budgets)),
                               outages=outages)
    # before the scheduler starts: the probe counters count from here
    series = own_registry(lambda: lease.held)
    series.register(RegistrySeries(partial(_registry_snapshot, registry)))
    metrics = StoreMetrics(store, scheduler, registry=series,
                           per_environment=config.metrics_series == "environment")
    _install_reload(config.catalogue, scheduler, store)
    if notifier is not None:
        notifier.start()
    scheduler.start()
    _settle()
    give_back()  # what the start's reads and syncs freed
    if isinstance(executor, LocalExecutor):
        every("envcheck-tidy", TIDY_INTERVAL_S, stop, executor.tidy,
               "looking for leftover containers", outages)
    every("envcheck-rollouts", config.window_s, stop,
           rollout_look(assessment, scheduler, notifier.wake if notifier else None),
           "judging the rollouts", outages, "judged once it is back")
    if config.prune_every_s > 0:
        every("envcheck-prune", config.prune_every_s, stop, pruner(store, config.retention),
               "pruning the store", outages, "pruned at the next round",
               first_s=min(PRUNE_FIRST_S, config.prune_every_s))
    # uvicorn handles SIGTERM/SIGINT while serving, then re-raises the signal it caught to
    # the handler installed before it: this one, so the shutdown below runs instead of the
    # default action killing the process mid-cleanup.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _note_signal)
    readiness = Readiness({"store": store.generation, "engine": executor.ping})
    readiness.start()
    try:
        app = build_app(store, scheduler, readiness, metrics, config.api_token)
        handover()  # the socket stays open: a request meanwhile waits for the full app
        serve(app, sockets=sockets)
    finally:
        log.info("daemon stopping")
        stop.set()
        readiness.stop()
        # the lease lost to another daemon: nothing more is written, so nothing to wait for
        keep = 0.0 if lost.is_set() else 1.0
        scheduler.stop(config.grace_s * keep, config.store_flush_s * keep)
        if notifier is not None:  # after the scheduler: its last window may alert too
            notifier.stop(config.notify_flush_s * keep)
        executor.close()
        registry.close()
        store.close()
        lease.release()
        log.info("daemon stopped")
    return EXIT_LEASE_LOST if lost.is_set() else 0


def _registry_snapshot(stage: RegistryStage) -> StatsSnapshot | None:
    """The registry stage's counters at a scrape; None before a catalogue opened it."""
    current = stage.current
    return current.stats.snapshot() if current is not None else None


def _take_lease(lease: StoreLease) -> float | None:
    """The store's lease, waited for as a standby, before anything writes the store; how
    long it was waited for, or None if SIGTERM or SIGINT ended the wait (SIGHUP is noted:
    the catalogue is read when the lease is taken)."""
    wait = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        _note_signal(signum, frame)
        if signum != signal.SIGHUP:
            wait.set()

    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    try:
        return lease.take(standby=True, stop=wait)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _reread(paths: Sequence[Path], catalogue: Catalogue) -> Catalogue:
    """The catalogue as it is now, after a wait; refused, the one read at the start."""
    try:
        return load_catalogue(paths, previous=catalogue)
    except Exception as exc:  # whatever it is, the start's catalogue (checked) runs
        issues = exc.issues if isinstance(exc, CatalogueError) else [exc]
        log.error("catalogue refused, the old one keeps running",
                  extra={"issues": [str(i) for i in issues]})
        return catalogue


def _stop_for_another(lost: threading.Event) -> None:
    """Another daemon holds the store now (the lease's watch says so): stop as SIGTERM
    does, without waiting for probes whose results could not be written anyway."""
    lost.set()
    os.kill(os.getpid(), signal.SIGTERM)


def _settle() -> None:
    """What a start or a reload built (the catalogue, the jobs) lives until the next reload:
    out of the collector's sight (:func:`gc.freeze`), so that the full collections a
    reload's allocations trigger do not walk it again and again; ~15% of a start's CPU
    and ~12% of a reload's went there. Reference counting still frees what a reload
    replaces: the models hold no cycles."""
    gc.freeze()


def _services(catalogue: Catalogue, store: Store, samples: HostSamples,
              outages: StoreOutages, registry: RegistryStage) -> Services:
    """The probes' collaborators, with the depth and reuse advice from the store's
    evidence (``samples`` and ``registry`` outlive a reload: the host's sampling keeps its
    pace, the watch its looks)."""
    return build_services(catalogue, store, StoreDepth(store).advice,
                          StoreReuse(store, samples=samples).advice, outages,
                          registry.for_catalogue(catalogue, partial(_image_results, store)))


def _image_results(store: Store, env_ids: list[str]) -> list[ProbeResult]:
    return store.latest_results(env_ids, [ProbeKind.IMAGE])


def _note_signal(signum: int, frame: FrameType | None) -> None:
    log.info("signal received", extra={"signal": signal.Signals(signum).name})


def _install_reload(paths: Sequence[Path], scheduler: ProbeScheduler, store: Store) -> None:
    def on_hup(signum: int, frame: FrameType | None) -> None:
        # Not from a signal frame: reloading takes locks the interrupted code may hold.
        threading.Thread(target=_reload, name="envcheck-reload", daemon=True).start()

    def _reload() -> None:
        started = time.monotonic()
        give_back()  # what the scrapes since the last one freed: the load's room
        try:
            catalogue = load_catalogue(paths, previous=scheduler.catalogue)
        except CatalogueError as exc:
            log.error("catalogue refused, the old one keeps running",
                      extra={"issues": [str(i) for i in exc.issues]})
            return
        except Exception as exc:  # whatever it is, the old catalogue keeps running
            log.error("catalogue refused, the old one keeps running",
                      extra={"issues": [f"cannot load the catalogue: "
                                        f"{type(exc).__name__}: {exc}"]}, exc_info=True)
            return
        try:
            scheduler.reload(catalogue)
        except Exception:  # a thread must not die unheard
            log.exception("catalogue reload failed")
            return
        finally:
            give_back()  # the load's transient (the file's text and values) is free now
        _settle()
        log.info("catalogue reloaded", extra={"seconds": round(time.monotonic() - started, 3)})

    signal.signal(signal.SIGHUP, on_hup)
