"""The local executor: this host's engine, a thread pool of checks."""

from __future__ import annotations

from collections.abc import Sequence

from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import ResultSink, Services, check_environment, run_cycle
from envcheck.sandbox.base import SandboxRuntime

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """This host's engine, ``concurrency`` environments at a time (threads)."""

    name = "local"

    def __init__(self, runtime: SandboxRuntime, concurrency: int = 2) -> None:
        self.runtime = runtime
        self._concurrency = max(concurrency, 1)
        self.reaped = 0  # leftover containers removed when connecting

    @classmethod
    def from_env(cls, concurrency: int = 2, timeout_s: float = 30.0) -> LocalExecutor:
        """Connect to the engine (``EngineUnreachable`` if down) and reap the leftovers of
        envcheck processes that died."""
        from envcheck.sandbox.docker import DockerRuntime

        runtime = DockerRuntime.from_env(timeout_s=timeout_s)
        try:
            reaped = runtime.reap()
        except BaseException:
            runtime.close()
            raise
        executor = cls(runtime, concurrency)
        executor.reaped = reaped
        return executor

    def check(self, env: Environment, kinds: Sequence[ProbeKind], run_id: str,
              sink: ResultSink | None = None,
              services: Services | None = None) -> list[ProbeResult]:
        return check_environment(env, kinds, self.runtime, run_id, sink, services)

    def run_cycle(self, envs: Sequence[Environment], kinds: Sequence[ProbeKind], run_id: str,
                  sink: ResultSink | None = None,
                  services: Services | None = None) -> list[ProbeResult]:
        return run_cycle(envs, kinds, self.runtime, run_id, sink, self._concurrency, services)

    def capacity(self) -> int:
        return self._concurrency

    def ping(self) -> None:
        self.runtime.ping()

    def tidy(self) -> int:
        """Remove the containers an engine outage left behind, if the engine answers again
        (cheap: no engine call unless a removal failed); how many."""
        tidy = getattr(self.runtime, "tidy", None)
        return int(tidy()) if tidy is not None else 0

    def close(self) -> None:
        """Close the runtime, which removes every container it started."""
        close = getattr(self.runtime, "close", None)
        if close is not None:
            close()
