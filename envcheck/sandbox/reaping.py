"""Leftover containers: whose a container is, and removing those nobody uses any more.

A container the engine could not remove (it stopped answering mid-cycle), or may have created
without our hearing of it, is a leftover of its runtime: every container carries the
runtime's label and a per-sandbox key, so once the engine answers again the runtime removes
its own containers no probe uses. A container whose owning process is gone (crashed or
killed) is a leftover of any runtime on its host.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress

import docker
import docker.errors
import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from envcheck.core.errors import EngineUnreachable, EnvcheckError
from envcheck.sandbox.engine import engine_call, engine_errors, transient
from envcheck.sandbox.labels import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUNTIME,
    LABEL_SANDBOX,
    LABEL_TAG,
)

__all__ = ["Reaper", "leftover", "this_process"]

# the runtime's one logger, whichever of its modules speaks
log = logging.getLogger("envcheck.sandbox.docker")

# A sandbox whose owner runs in another PID namespace of this host (envcheck in a container
# of its own) cannot be judged alive or dead from here; once older than any probe could run,
# it is a leftover all the same.
FOREIGN_LEFTOVER_AGE_S = 24 * 3600


def _where() -> str:
    """This host and PID namespace: pids mean something only within one namespace (a daemon in
    a container with a private one sees none of the host's processes)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").rstrip("]")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}@{namespace}"


def _process_token(pid: int) -> str | None:
    """host@pid-namespace:pid:start-time: names one process, immune to pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    return f"{_where()}:{pid}:{start}"


def this_process() -> str:
    """This process, as the owner its sandboxes are labelled with."""
    return _process_token(os.getpid()) or f"{_where()}:{os.getpid()}"


def leftover(owner: str, age_s: float) -> bool:
    """Is a sandbox labelled with ``owner``, created ``age_s`` ago, a leftover to remove? Its
    owner ran here (this namespace, or a label naming the host alone, as older envchecks
    wrote) and is gone; or it runs in another PID namespace of this host and the sandbox has
    outlived any probe. Another host's sandboxes are that host's to judge."""
    where, _, process = owner.partition(":")
    pid = process.split(":", 1)[0]
    if where in (_where(), socket.gethostname()):
        alive = pid.isdigit() and (_process_token(int(pid)) or "").endswith(f":{process}")
        return not alive
    if where.split("@", 1)[0] == socket.gethostname():
        return age_s > FOREIGN_LEFTOVER_AGE_S
    return False


class Reaper:
    """The containers of one runtime (``runtime``: its label) on the engine: those probes
    use now, whether one may be left behind, and their removal. ``preflight`` raises
    ``EngineUnreachable`` if the engine's socket refuses us, before the SDK tries."""

    def __init__(self, client: docker.DockerClient, runtime: str,
                 preflight: Callable[[], None]) -> None:
        self._client = client
        self._id = runtime
        self._preflight = preflight
        self._lock = threading.Lock()
        self._live: set[str] = set()  # sandbox keys of the containers probes use now
        self._pending = False  # a container of ours may be left on the engine
        self._tidying = threading.Lock()

    def claim(self, key: str) -> None:
        """A sandbox's key, before its container is created: in use until released."""
        with self._lock:
            self._live.add(key)

    def release(self, key: str, removed: bool) -> None:
        """The sandbox of ``key`` is over; ``removed``: its container is gone."""
        with self._lock:
            self._live.discard(key)
            # a failed create may still have made a container we never heard of
            self._pending |= not removed

    def tidy(self) -> int:
        """If a container of ours may be left behind (the engine stopped answering while
        removing or creating it), remove our containers no probe uses now; how many.

        Costs nothing when nothing is pending. An engine still down leaves the work pending
        for the next call: a ping, the next sandbox, or a periodic check of the daemon.
        """
        with self._lock:
            if not self._pending:
                return 0
        if not self._tidying.acquire(blocking=False):
            return 0  # another thread is at it
        try:
            with self._lock:
                self._pending = False
            try:
                return self.sweep(keep_live=True)
            except EnvcheckError as exc:
                with self._lock:
                    self._pending = True
                log.debug("leftover containers stay until the engine answers: %s", exc)
                return 0
        finally:
            self._tidying.release()

    def sweep(self, *, keep_live: bool) -> int:
        """Remove this runtime's containers (but those probes use now, if ``keep_live``)."""
        with engine_call(self._preflight):
            found = self._client.api.containers(
                all=True, filters={"label": f"{LABEL_RUNTIME}={self._id}"})
        # Read the live set after listing: a key leaves it only once its sandbox has tried
        # to remove its container, so a listed container whose key is gone is a leftover.
        with self._lock:
            live = set(self._live)
        leftovers = [info["Id"] for info in found
                     if not (keep_live and info.get("Labels", {}).get(LABEL_SANDBOX) in live)]
        removed = sum(self.remove(cid) for cid in leftovers)
        if removed:
            log.info("reaped %d leftover container(s) of this runtime", removed,
                     extra={"reaped": removed})
        if removed < len(leftovers):
            raise EngineUnreachable(f"{len(leftovers) - removed} container(s) not removed")
        self._remove_others(f"{LABEL_RUNTIME}={self._id}",
                            lambda labels: not (keep_live and labels.get(LABEL_SANDBOX) in live))
        return removed

    def remove_sandbox(self, key: str) -> bool:
        """Remove what a compose task's sandbox ``key`` left: its containers, then its
        networks and volumes (once no container uses them). False if the engine would not."""
        try:
            with engine_call(self._preflight):
                found = self._client.api.containers(
                    all=True, filters={"label": f"{LABEL_SANDBOX}={key}"})
            removed = all([self.remove(info["Id"]) for info in found])
            return self._remove_others(f"{LABEL_SANDBOX}={key}", lambda labels: True) and removed
        except EnvcheckError as exc:
            with self._lock:
                self._pending = True
            log.error("compose sandbox %s left behind; removed once the engine answers "
                      "again: %s", key[:12], exc)
            return False

    def _remove_others(self, label: str, chosen: Callable[[dict[str, str]], bool]) -> bool:
        """Remove the networks, then the volumes, labelled ``label`` that ``chosen`` picks
        (a compose task's: a single-container sandbox has neither); False if one stays."""
        api = self._client.api
        with engine_call(self._preflight):
            networks = api.networks(filters={"label": label})
            volumes = (api.volumes(filters={"label": label}) or {}).get("Volumes") or []
        done = True
        for remove, items, ident in ((api.remove_network, networks, "Id"),
                                     (api.remove_volume, volumes, "Name")):
            for item in items:
                if not chosen(item.get("Labels") or {}):
                    continue
                try:
                    with engine_call(self._preflight), suppress(docker.errors.NotFound):
                        remove(item[ident])
                except EnvcheckError as exc:
                    done = False
                    log.warning("could not remove %s: %s", item[ident][:12], exc)
        return done

    def remove(self, container_id: str) -> bool:
        """Remove a container (gone already counts); False if the engine would not."""

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning("removing container %s failed (try %d): %s", container_id[:12],
                        state.attempt_number, exc)

        try:
            for attempt in Retrying(retry=retry_if_exception(transient),
                                    stop=stop_after_attempt(3),
                                    wait=wait_exponential(multiplier=0.5, max=2.0),
                                    before_sleep=log_retry, reraise=True):
                with attempt, suppress(docker.errors.NotFound):
                    self._preflight()
                    self._client.api.remove_container(container_id, force=True, v=True)
        except (docker.errors.DockerException, requests.RequestException,
                EngineUnreachable) as exc:
            with self._lock:
                self._pending = True
            log.error("container %s left behind; removed once the engine answers again: %s",
                      container_id[:12], exc)
            return False
        return True

    def reap(self) -> int:
        """Remove envcheck containers whose owning process is gone (crashed or killed)."""
        reaped = 0
        with engine_errors():
            found = self._client.api.containers(all=True, filters={"label": LABEL_MANAGED})
        now = time.time()
        for info in found:
            owner = info.get("Labels", {}).get(LABEL_OWNER, "")
            if not leftover(owner, now - float(info.get("Created") or now)):
                continue  # in-flight work, or another host's or namespace's
            self.remove(info["Id"])
            reaped += 1
        # a compose task's networks and volumes (their age is not asked: only a dead owner's)
        self._remove_others(LABEL_MANAGED, lambda labels: leftover(
            labels.get(LABEL_OWNER, ""), 0.0))
        if reaped:
            log.info("reaped %d leftover envcheck container(s)", reaped)
        return reaped

    def containers(self, tag: str | None = None) -> list[str]:
        """Ids of envcheck-managed containers on the engine, optionally of one tag."""
        label = f"{LABEL_TAG}={tag}" if tag else LABEL_MANAGED
        with engine_errors():
            found = self._client.api.containers(all=True, filters={"label": label})
        return [str(info["Id"]) for info in found]
