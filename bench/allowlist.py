"""Benchmark: ``GET /v1/suites/{suite}/allowlist`` of a 10,000-environment fleet holding
1,000,000 stored results, on SQLite and on PostgreSQL, against the framework floor.

    .venv/bin/python bench/allowlist.py [--envs N] [--results-per-env K] [--requests R]
                                        [--backend sqlite|postgres ...] [--rebuild] [--json OUT]

Per backend: build (or reuse) the fleet, serve ``envcheck.api.app.create_app`` with uvicorn on
127.0.0.1 from a thread of this process, and time requests from a separate client process
(one keep-alive ``requests.Session``, sequential): the full answer, the conditional answer
(``If-None-Match`` with the current ETag: 304), and the uncached answer (``cache_ttl_s=0``:
every request rebuilds the list from the store). The floor is a trivial FastAPI app on the
same server stack returning a constant list of 10,000 ids (idiomatic ``return ids``, and
pre-encoded bytes). Exit 0 whatever the numbers; 1 if the benchmark itself broke.

The fleet is built through bulk inserts (SQLAlchemy core, executemany batches), then the real
``evaluate`` assesses every environment and ``set_quarantine_by_id`` quarantines 1% by hand.
It is cached between runs: the SQLite file in ``$TMPDIR/envcheck-bench`` and the PostgreSQL
database ``envcheck_bench_<key>``, both keyed by the parameters and the schema revision;
``--rebuild`` starts over.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import fleetcache
import psycopg
from common import host, median, percentile
from fastapi import FastAPI, Response

from envcheck.api.app import create_app, serve_in_thread
from envcheck.api.models import AllowlistOut
from envcheck.catalogue.models import Environment, Suite
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.feed.allowlist import allowlist
from envcheck.feed.assess import evaluate, set_quarantine_by_id
from envcheck.store import Store

SUITE = "fleet"
TARGET_P99_MS = 20.0
BENCH_VERSION = 1  # bump when the fleet's recipe changes: invalidates the caches
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 10_000

# Share of the fleet per profile; the rest is healthy. 1% of the healthy ones are also
# quarantined by hand.
PROFILES = {"degraded": 0.04, "broken": 0.04, "flaky": 0.03, "unchecked": 0.02}
MANUAL_SHARE = 0.01

CLIENT = r"""
import json, sys, time
import requests

url, count, warmup, conditional = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
latencies, statuses, size = [], {}, 0
with requests.Session() as session:
    session.trust_env = False
    etag = session.get(url, timeout=(2, 30)).headers.get("ETag")
    headers = {"If-None-Match": etag} if conditional == "1" and etag else {}
    for i in range(warmup + count):
        started = time.perf_counter()
        response = session.get(url, headers=headers, timeout=(2, 30))
        body = response.content
        elapsed = time.perf_counter() - started
        if i >= warmup:
            latencies.append(elapsed * 1000)
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
            size = max(size, len(body))
print(json.dumps({"latencies_ms": latencies, "statuses": statuses, "bytes": size}))
"""


@dataclass
class Row:
    backend: str
    request: str
    n: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    body_kb: float
    statuses: dict[str, int]


def measure(backend: str, label: str, url: str, count: int, *, conditional: bool = False,
            warmup: int = 50) -> Row:
    out = subprocess.run([sys.executable, "-c", CLIENT, url, str(count), str(warmup),
                          "1" if conditional else "0"], capture_output=True, text=True,
                         timeout=600, check=True)
    doc = json.loads(out.stdout)
    lat = doc["latencies_ms"]
    return Row(backend, label, len(lat), median(lat), percentile(lat, 0.99), statistics.fmean(lat),
               doc["bytes"] / 1024, doc["statuses"])


# --- the fleet ----------------------------------------------------------------------------------


def profiles(envs: int) -> dict[str, str]:
    rng = random.Random(20260101)
    out: dict[str, str] = {}
    for i in range(envs):
        roll, profile = rng.random(), "healthy"
        for name, share in PROFILES.items():
            if roll < share:
                profile = name
                break
            roll -= share
        out[f"env-{i:05d}"] = profile
    return out


def environments(envs: int) -> list[Environment]:
    deps = DependencySpec(python={"requests": ">=2"})
    return [Environment(id=env_id, image=f"fleet/{env_id}:1", suite=SUITE, tools=["git"],
                        dependencies=deps if i % 2 else None)
            for i, env_id in enumerate(profiles(envs))]


def outcome(profile: str, cycle: int, cycles: int) -> tuple[str, str, str]:
    """(status, reason, image tag) of the terminal result of ``profile`` in ``cycle``."""
    left = cycles - cycle  # 1 for the newest
    if profile == "unchecked":
        return ("error", "checker_crashed", "v1")
    if profile == "broken" and left <= 4:  # a new image that fails every time
        return ("fail", "tool_missing", "v2")
    if profile == "flaky" and left in (1, 3, 5):  # failures between passes
        return ("fail", "shell_slow", "v1")
    if profile == "degraded" and left == 1:  # one failure: not yet decided
        return ("fail", "shell_slow", "v1")
    return ("pass", "ok", "v1")


def build(store: Store, envs: int, per_env: int) -> dict[str, float]:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    fleet = environments(envs)
    kinds = profiles(envs)
    store.sync_suites([Suite(id=SUITE, description="benchmark fleet", allow_degraded=False,
                             environment_ids=tuple(e.id for e in fleet), file="bench")])
    store.sync_environments(fleet)
    timings["sync_s"] = time.perf_counter() - started

    started = time.perf_counter()
    with_deps = {e.id for e in fleet if e.dependencies is not None}
    evidence = [{"command": "command -v git", "exit_code": 1, "duration_s": 0.01,
                 "output_head": "", "output_tail": "", "output_bytes": 0, "truncated": False,
                 "timed_out": False}]
    # One check run per cycle; an environment with a dependency spec alternates kinds.
    cycles = per_env
    fleetcache.insert_runs(store, ((T0 + timedelta(minutes=5 * c),
                                    T0 + timedelta(minutes=5 * c + 4)) for c in range(cycles)))
    batches = fleetcache.ResultBatches(store, BATCH)
    for env_id, profile in kinds.items():
        deps = env_id in with_deps
        for c in range(cycles):
            kind = "dependencies" if deps and c % 2 == 0 else "terminal"
            # the terminal kind carries the profile's failures
            status, reason, tag = outcome(profile, c, cycles) if kind == "terminal" or \
                profile == "unchecked" else ("pass", "ok", "v1")
            batches.add({
                "run_id": f"bench-{c:04d}", "env_id": env_id, "kind": kind, "status": status,
                "reason": reason, "summary": f"{kind} {status}", "duration_s": 0.4,
                "image_digest": f"sha256:{env_id}-{tag}", "spec_hash": f"spec-{kind}",
                "started_at": T0 + timedelta(minutes=5 * c, seconds=1),
                "evidence": evidence if status == "fail" else [], "details": {}})
    batches.flush()
    timings["insert_s"] = time.perf_counter() - started

    started = time.perf_counter()
    evaluate(store, fleet, now=T0 + timedelta(minutes=5 * cycles))
    timings["evaluate_s"] = time.perf_counter() - started
    healthy = [e for e, p in kinds.items() if p == "healthy"]
    for env_id in random.Random(7).sample(healthy, int(envs * MANUAL_SHARE)):
        set_quarantine_by_id(store, env_id, add=True, actor="bench",
                             reason="held back by hand for review")
    return timings


def cache_key(envs: int, per_env: int) -> str:
    return fleetcache.cache_key(BENCH_VERSION, envs, per_env)


sqlite_url = functools.partial(fleetcache.sqlite_url, "allowlist")
postgres_url = functools.partial(fleetcache.postgres_url, "")


# --- measuring ----------------------------------------------------------------------------------


def open_fleet(backend: str, url: str, envs: int, per_env: int
               ) -> tuple[Store, str | dict[str, float]]:
    """The fleet's store at ``url``, built first unless the cache there is complete; and
    "cached" or the build's timings. Shared with ``bench/cli_startup.py``."""
    return fleetcache.open_built(
        url, envs, per_env, int(envs * MANUAL_SHARE),
        lambda store: build(store, envs, per_env),
        f"[{backend}] building {envs} environments x {per_env} results ...")


def bench_backend(backend: str, url: str, args: argparse.Namespace) -> tuple[list[Row],
                                                                              dict[str, Any]]:
    info: dict[str, Any] = {"backend": backend}
    store, info["build"] = open_fleet(backend, url, args.envs, args.results_per_env)
    try:
        listing = allowlist(store, SUITE)
        info["allowed"] = len(listing.allowed)
        info["excluded"] = dict(Counter(why.split(":")[0] for why in listing.excluded.values()))
        info["generation"] = listing.generation
        builds = []
        for _ in range(10):
            started = time.perf_counter()
            AllowlistOut.of(allowlist(store, SUITE)).model_dump_json()
            builds.append((time.perf_counter() - started) * 1000)
        info["rebuild_ms_p50"] = median(builds)

        path = f"/v1/suites/{SUITE}/allowlist"
        rows = []
        with serve_in_thread(create_app(store)) as base:
            rows.append(measure(backend, "allowlist", base + path, args.requests))
            rows.append(measure(backend, "allowlist If-None-Match (304)", base + path,
                                args.requests, conditional=True))
        with serve_in_thread(create_app(store, cache_ttl_s=0.0)) as base:
            rows.append(measure(backend, "allowlist uncached (ttl 0)", base + path,
                                max(10, args.requests // 100), warmup=2))
        return rows, info
    finally:
        store.close()


def floor_app(envs: int) -> FastAPI:
    app = FastAPI()
    ids = [f"env-{i:05d}" for i in range(envs)]
    encoded = json.dumps(ids).encode()

    @app.get("/ids")
    def listed() -> list[str]:
        return ids

    @app.get("/ids-bytes")
    def pre_encoded() -> Response:
        return Response(encoded, media_type="application/json")

    return app


def report(rows: list[Row], infos: list[dict[str, Any]]) -> str:
    lines = [f"{'backend':<9} {'request':<32} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} "
             f"{'mean ms':>8} {'body KB':>8}  statuses"]
    for r in rows:
        lines.append(f"{r.backend:<9} {r.request:<32} {r.n:>5} {r.p50_ms:>8.2f} "
                     f"{r.p99_ms:>8.2f} {r.mean_ms:>8.2f} {r.body_kb:>8.1f}  "
                     f"{' '.join(f'{k}:{v}' for k, v in sorted(r.statuses.items()))}")
    floors = {r.request: r for r in rows if r.backend == "floor"}
    lines.append("")
    for info in infos:
        lines.append(f"{info['backend']}: {info['allowed']} allowed, excluded {info['excluded']}"
                     f", generation {info['generation']}; rebuild of the list p50 "
                     f"{info['rebuild_ms_p50']:.1f} ms; build: "
                     f"{fleetcache.built_text(info['build'])}")
    for r in rows:
        if r.request != "allowlist":
            continue
        verdict = "PASS" if r.p99_ms < TARGET_P99_MS else "FAIL"
        ratios = ", ".join(f"x{r.p50_ms / f.p50_ms:.2f} p50 / x{r.p99_ms / f.p99_ms:.2f} p99 "
                           f"vs {name}" for name, f in floors.items())
        lines.append(f"{r.backend}: p99 {r.p99_ms:.2f} ms, target < {TARGET_P99_MS:.0f} ms: "
                     f"{verdict}; {ratios}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = fleetcache.fleet_parser(__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    backends = args.backend or ["sqlite", "postgres"]
    key = cache_key(args.envs, args.results_per_env)
    rows: list[Row] = []
    infos: list[dict[str, Any]] = []
    for backend in backends:
        opener = sqlite_url if backend == "sqlite" else postgres_url
        try:
            with opener(key, args.rebuild) as url:
                got, info = bench_backend(backend, url, args)
        except psycopg.OperationalError as exc:
            print(f"[{backend}] skipped: {exc}", file=sys.stderr)
            continue
        rows += got
        infos.append(info)
    with serve_in_thread(floor_app(args.envs)) as base:
        rows.append(measure("floor", "return list[str] (10k ids)", base + "/ids",
                            args.requests))
        rows.append(measure("floor", "pre-encoded bytes (10k ids)", base + "/ids-bytes",
                            args.requests))
    print(report(rows, infos))
    if args.json:
        args.json.write_text(json.dumps({
            "rows": [asdict(r) for r in rows], "backends": infos,
            "params": {"envs": args.envs, "results_per_env": args.results_per_env,
                       "requests": args.requests},
            "host": host()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
