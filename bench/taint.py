"""Benchmark: taint of a 10,000-environment fleet holding 1,000,000 results (the fleet of
bench/allowlist.py, shared through its cache: 4% broken on a new image, 3% flaky, 4% degraded,
1% quarantined by hand), on SQLite and on PostgreSQL.

    .venv/bin/python bench/taint.py [--envs N] [--results-per-env K] [--requests R]
                                    [--backend sqlite|postgres ...] [--rebuild] [--json OUT]

Per backend: the store's reads (``Store.taint_facts``, with the SQL statements they take
counted), every interval (``feed.taint.taint``), the whole ``taint.jsonl`` when nothing
changed (``write_taint``: the reads, the intervals, one compare: the first window, a manual
change), what a window pays for it (``refresh_taint`` of the window's environments:
``--window`` of them, a tenth of them tainted, as a daemon probing every environment hourly
in one-minute windows sees them), and ``GET /v1/taint`` served by the real API from a
thread of this process (sequential requests, one keep-alive session, the response cache
off: every request reads the store). Exit 0 whatever the numbers; 1 if the benchmark itself
broke.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import allowlist
import fleetcache
import psycopg
import requests
from common import host, median, percentile
from sqlalchemy import event

from envcheck.api.app import create_app, serve_in_thread
from envcheck.feed.taint import refresh_taint, taint, write_taint
from envcheck.health.trust import UNTRUSTED_REASONS, UNTRUSTED_STATES
from envcheck.store import Store


def timed(fn: Callable[[], Any], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def statements(store: Store, fn: Callable[[], Any]) -> int:
    """How many SQL statements ``fn`` runs on the store's engine."""
    seen = [0]

    def count(*_: Any) -> None:
        seen[0] += 1

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        fn()
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    return seen[0]


def bench_backend(backend: str, url: str, args: Any) -> dict[str, Any]:
    store, build = allowlist.open_fleet(backend, url, args.envs, args.results_per_env)
    info: dict[str, Any] = {"backend": backend, "build": build}
    if backend == "postgres":
        # the planner's statistics, as autovacuum keeps them on a store that has run a while
        # (a fleet just copied in has none: every read would be planned as a full scan)
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    try:
        def facts() -> Any:
            return store.taint_facts(states=UNTRUSTED_STATES, reasons=UNTRUSTED_REASONS)

        found = taint(store)
        info["environments_read"] = len(facts())
        info["intervals"] = len(found)
        info["by_basis"] = dict(Counter(str(i.basis) for i in found))
        info["open"] = sum(i.end is None for i in found)
        info["statements"] = statements(store, facts)
        info["facts_ms"] = timed(facts, args.rounds)
        info["taint_ms"] = timed(lambda: taint(store), args.rounds)
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            write_taint(store, directory)
            info["export_bytes"] = (directory / "taint.jsonl").stat().st_size
            info["whole_ms"] = timed(lambda: write_taint(store, directory), args.rounds)
            tainted = sorted({i.env_id for i in found})
            fleet = [e.id for e in store.environments()]
            window = tainted[:args.window // 10] + \
                [e for e in fleet if e not in set(tainted)][:args.window - args.window // 10]
            info["window_envs"] = len(window)
            info["window_ms"] = timed(lambda: refresh_taint(store, directory, window),
                                      args.rounds)
        latencies, size = [], 0
        with serve_in_thread(create_app(store, cache_ttl_s=0.0)) as base, \
                requests.Session() as http:
            http.trust_env = False
            for i in range(args.requests + 2):
                started = time.perf_counter()
                answer = http.get(f"{base}/v1/taint", params={"since": "365d"},
                                  timeout=(2, 60))
                answer.raise_for_status()
                if i >= 2:  # two warm-up requests
                    latencies.append((time.perf_counter() - started) * 1000)
                    size = len(answer.content)
        info["api_ms"] = latencies
        info["api_bytes"] = size
        return info
    finally:
        store.close()


def report(infos: list[dict[str, Any]]) -> str:
    lines = [f"{'backend':<9} {'read':<34} {'p50 ms':>9} {'p99 ms':>9}"]
    for info in infos:
        for label, key in (("taint_facts (the store's reads)", "facts_ms"),
                           ("taint (reads + intervals)", "taint_ms"),
                           ("the whole taint.jsonl (unchanged)", "whole_ms"),
                           ("a window's taint.jsonl", "window_ms"),
                           ("GET /v1/taint?since=365d", "api_ms")):
            values = info[key]
            lines.append(f"{info['backend']:<9} {label:<34} {median(values):>9.1f} "
                         f"{percentile(values, 0.99):>9.1f}")
    lines.append("")
    for info in infos:
        built = fleetcache.built_text(info["build"])
        lines.append(f"{info['backend']}: {info['environments_read']} environments read in "
                     f"{info['statements']} statements; {info['intervals']} intervals "
                     f"({info['open']} open) {info['by_basis']}; a window of "
                     f"{info['window_envs']} environments; taint.jsonl "
                     f"{info['export_bytes'] / 1024:.0f} KB, the API's answer "
                     f"{info['api_bytes'] / 1024:.0f} KB; build: {built}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = fleetcache.fleet_parser(__doc__)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--window", type=int, default=200,
                        help="environments a window probed")
    args = parser.parse_args(argv)
    key = allowlist.cache_key(args.envs, args.results_per_env)
    infos = []
    for backend in args.backend or ["sqlite", "postgres"]:
        opener = allowlist.sqlite_url if backend == "sqlite" else allowlist.postgres_url
        try:
            with opener(key, args.rebuild) as url:
                infos.append(bench_backend(backend, url, args))
        except psycopg.OperationalError as exc:
            print(f"[{backend}] skipped: {exc}", file=sys.stderr)
    print(report(infos))
    if args.json:
        args.json.write_text(json.dumps({
            "backends": infos, "host": host(),
            "params": {"envs": args.envs, "results_per_env": args.results_per_env,
                       "requests": args.requests, "rounds": args.rounds}}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
