"""What the benches of checks reused per image digest and spec share (``adversarial.py``,
``leaks.py``): the tests probe timed three ways (without the checks, with them, reusing them)
over a demo catalogue, one environment at a time, and the report."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import git_head, median

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.errors import EnvcheckError
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.base import Services
from envcheck.kinds.collaborators import build_services
from envcheck.sandbox.docker import DockerRuntime
from envcheck.store import Store, open_store

__all__ = ["Plan", "run", "timed", "write"]


def timed(env: Environment, runtime: DockerRuntime, services: Services | None = None,
          store: Store | None = None) -> tuple[float, ProbeResult]:
    run_id = store.start_run("bench", []) if store is not None else new_run_id()
    started = time.monotonic()
    [result] = run_cycle([env], [ProbeKind.TESTS], runtime, run_id, services=services)
    elapsed = time.monotonic() - started
    if store is not None:
        store.record(run_id, result)
    return elapsed, result


class Plan:
    """One bench: its catalogue, the details key its checks write, how to take them off an
    environment, what a row adds from each round's first result with them, how it prints."""

    def __init__(self, catalogue: Path, key: str, without: Callable[[Environment], Environment],
                 extra: Callable[[list[ProbeResult]], dict[str, Any]],
                 show: Callable[[dict[str, Any]], str]) -> None:
        self.catalogue, self.key, self.without = catalogue, key, without
        self.extra, self.show = extra, show

    def measure(self, env: Environment, runtime: DockerRuntime, rounds: int, folder: Path
                ) -> dict[str, Any]:
        off: list[float] = []
        on: list[float] = []
        reused: list[float] = []
        firsts: list[ProbeResult] = []
        catalogue = load_catalogue([self.catalogue])
        for i in range(rounds):
            off.append(timed(self.without(env), runtime)[0])
            with open_store(f"sqlite:///{folder / f'{env.id}-{i}.db'}") as store:
                services = build_services(catalogue, store)
                seconds, first = timed(env, runtime, services, store)
                on.append(seconds)
                seconds, again = timed(env, runtime, services, store)
                reused.append(seconds)
            assert "reused" in again.details[self.key], "the second probe did not reuse"
            firsts.append(first)
        row = {"env": env.id, "without_s": median(off), "with_s": median(on),
               "reused_s": median(reused), "verdict": f"{first.status} {first.reason}",
               **self.extra(firsts)}
        row["ratio_with"] = row["with_s"] / row["without_s"]
        row["ratio_reused"] = row["reused_s"] / row["without_s"]
        return row


def run(plan: Plan, rounds: int, only: list[str] | None) -> dict[str, Any] | None:
    """Every environment of the plan's catalogue (or those in ``only``), each row printed as
    it comes; the report, or None (said on stderr) if the bench itself broke."""
    envs = [e for e in load_catalogue([plan.catalogue]).environments
            if only is None or e.id in only]
    rows = []
    runtime = DockerRuntime.from_env()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for env in envs:
                rows.append(plan.measure(env, runtime, rounds, Path(folder)))
                print(plan.show(rows[-1]), flush=True)
    except EnvcheckError as exc:
        print(f"bench broke: {exc}", file=sys.stderr)
        return None
    finally:
        runtime.close()
    return {"commit": git_head(), "rounds": rounds, "environments": rows,
            "median_ratio_with": median(r["ratio_with"] for r in rows),
            "median_ratio_reused": median(r["ratio_reused"] for r in rows)}


def write(report: dict[str, Any], path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps(report, indent=2), encoding="utf-8")
