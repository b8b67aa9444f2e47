"""Benchmark: ``POST /v1/rollouts`` (batches of 1,000 records) through the real HTTP server into
the real SQLite store, against a bare endpoint on the same server that reads and parses the
body the same way and drops it.

    .venv/bin/python bench/rollouts.py [--records N] [--batch B] [--clients C] [--rounds R]
                                       [--envs E] [--hours H] [--long N] [--json OUT]

The server is ``envcheck.api.app.create_app`` over a SQLite store (``open_store``, WAL, each
batch committed before its 200) holding ``--envs`` environments, served by uvicorn from a
thread of this process on 127.0.0.1; the bare endpoint is a route this bench adds to that
very app (``/bench/drop``: ``read_body`` and ``read_batch``, as the product's route, then a
constant answer). ``--clients`` client processes each post their batches one after the other
on one keep-alive connection, as a trainer's reporter would, each its own producer with
increasing sequence numbers. A batch's records fall in one of ``--hours`` hours, spread over
``--envs`` environments: 95% ``ok``, the rest the environment's failures, a reward on every
``ok``, all three durations.

Rounds alternate the product and the bare endpoint (``--records`` each per round, after an
unmeasured warm-up of both), so drift hits both alike; the figures are records per second
over the round's wall time (median of the rounds) and each batch's latency as its client saw
it (p50, p99 over every batch). ``--long N`` then posts N more records to the product alone,
sampling the server's RSS: flat means no per-record state is kept. The store's rows per
environment-hour are counted after the warm-up (every hour seen once) and at the end: equal
means its size does not grow with the volume. Exit 0 whatever the numbers; 1 if the benchmark
itself broke (a batch refused, or a count that does not add up).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import git_head, host, median, percentile, rss_mb, scratch_dir
from fastapi import Request, Response
from sqlalchemy import func, select

from envcheck.api.app import create_app, serve_in_thread
from envcheck.api.routes.rollouts import read_body
from envcheck.catalogue.models import Environment, Suite
from envcheck.rollouts.batch import read_batch
from envcheck.store import Store, open_store
from envcheck.store.core_tables import ROLLOUTS

TOKEN = "bench-rollouts-token"
SUITE = "rollouts"
TARGET_RECORDS_S = 50_000
TARGET_P99_MS = 100.0

# One client: batches of records built from per-record templates (only the sequence number
# changes), posted one after the other; prints what it saw as JSON.
CLIENT = r"""
import json, random, sys, time
import requests

url, token, producer, first_seq, records, batch, envs, hours, group, base = sys.argv[1:11]
first_seq, records, batch, envs, hours, group = map(int, (first_seq, records, batch, envs,
                                                         hours, group))
rng = random.Random(producer)
group_env = {}
FAIL = ["sandbox_start_failed", "sandbox_lost", "verifier_error", "verifier_timeout",
        "reward_missing", "agent_timeout"]
base_s = int(base)
def template(i):
    env = group_env.setdefault(i // group, rng.randrange(envs))
    ok = rng.random() < 0.95
    outcome = "ok" if ok else FAIL[env % len(FAIL)]
    hour = (i // batch) % hours
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base_s + hour * 3600 +
                                                          rng.randrange(3600)))
    reward = ', "reward": %s' % rng.choice(["0.0", "1.0", "0.25"]) if ok else ""
    return (',"env_id":"env-%05d","at":"%sZ","producer":"%s","outcome":"%s",'
            '"image_digest":"sha256:%064x"%s,"durations":{"sandbox_start_s":%.2f,'
            '"agent_s":%.1f,"verifier_s":%.2f}}' % (env, at, producer, outcome, env, reward,
            rng.uniform(0.5, 3), rng.uniform(5, 120), rng.uniform(0.5, 10))).encode()
pool = [template(i) for i in range(min(records, 20 * batch))]
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
latencies, statuses, counted, sent = [], {}, 0, 0
with requests.Session() as session:
    session.trust_env = False
    started = time.time()
    seq = first_seq
    while sent < records:
        n = min(batch, records - sent)
        body = b"[" + b",".join(b'{"seq":%d' % (seq + j) + pool[(sent + j) % len(pool)]
                                for j in range(n)) + b"]"
        t0 = time.perf_counter()
        answer = session.post(url, data=body, headers=headers, timeout=(5, 120))
        latencies.append((time.perf_counter() - t0) * 1000)
        statuses[str(answer.status_code)] = statuses.get(str(answer.status_code), 0) + 1
        if answer.status_code == 200:
            counted += answer.json().get("counted", n)
        seq += n
        sent += n
    ended = time.time()
print(json.dumps({"latencies_ms": latencies, "statuses": statuses, "counted": counted,
                  "sent": sent, "started": started, "ended": ended, "next_seq": seq}))
"""


@dataclass
class Side:
    """One endpoint's measurements over the rounds."""

    name: str
    records_s: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # the server's, per batch
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"records_s": median(self.records_s), "rounds": self.records_s,
                "server_cpu_ms_per_batch": median(self.cpu_ms),
                "p50_ms": median(self.latencies_ms),
                "p99_ms": percentile(self.latencies_ms, 0.99),
                "batches": len(self.latencies_ms), "statuses": self.statuses}


class Clients:
    """The client processes' producers and where each one's sequence numbers are."""

    def __init__(self, url: str, count: int, args: argparse.Namespace, base: datetime) -> None:
        self.url, self.args, self.base = url, args, int(base.timestamp())
        self.next_seq = {f"bench-run-{i}": 0 for i in range(count)}

    def post(self, path: str, records: int) -> dict[str, Any]:
        """``records`` posted to ``path``, split over the clients; what they saw, merged."""
        share = records // len(self.next_seq)
        cpu = time.process_time()  # this process is the server (the clients are others)
        procs = {producer: subprocess.Popen(
            [sys.executable, "-c", CLIENT, self.url + path, TOKEN, producer, str(seq),
             str(share), str(self.args.batch), str(self.args.envs), str(self.args.hours),
             str(self.args.group), str(self.base)], stdout=subprocess.PIPE, text=True)
            for producer, seq in self.next_seq.items()}
        docs = {}
        for producer, proc in procs.items():
            out, _ = proc.communicate(timeout=3600)
            if proc.returncode != 0:
                raise RuntimeError(f"client {producer} failed ({proc.returncode})")
            docs[producer] = json.loads(out)
        if path == "/v1/rollouts":  # the bare endpoint counts nothing: its numbers may repeat
            for producer, doc in docs.items():
                self.next_seq[producer] = doc["next_seq"]
        statuses: dict[str, int] = {}
        for doc in docs.values():
            for code, n in doc["statuses"].items():
                statuses[code] = statuses.get(code, 0) + n
        cpu = time.process_time() - cpu
        wall = max(d["ended"] for d in docs.values()) - min(d["started"] for d in docs.values())
        sent = sum(d["sent"] for d in docs.values())
        return {"records_s": sent / wall, "wall_s": wall, "sent": sent, "statuses": statuses,
                "server_cpu_ms_per_batch": cpu * 1000 / max(1, sent / self.args.batch),
                "counted": sum(d["counted"] for d in docs.values()),
                "latencies_ms": [x for d in docs.values() for x in d["latencies_ms"]]}


def bench_app(store: Store) -> Any:
    """The product's API, plus the bare endpoint (this bench's own, not the product's)."""
    app = create_app(store, token=TOKEN)

    async def drop(request: Request) -> Response:
        body = await read_body(request)
        read_batch(body, content_type=request.headers.get("content-type", ""),
                   content_encoding=request.headers.get("content-encoding", ""))
        return Response(b'{"dropped":true}', media_type="application/json")

    app.add_api_route("/bench/drop", drop, methods=["POST"], include_in_schema=False)
    return app


class RssSampler:
    """This process' (the server's) RSS every ``every_s`` seconds, from a thread."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self._every):  # sampling until stopped, not a retry
            self.samples.append((time.monotonic() - started, rss_mb("self")[0]))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def rows_per_env_hour(store: Store) -> dict[str, float]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(ROLLOUTS)).scalar_one()
        env_hours = conn.execute(select(func.count()).select_from(
            select(ROLLOUTS.c.env_id, ROLLOUTS.c.hour).distinct().subquery())).scalar_one()
        counted = conn.execute(select(func.coalesce(func.sum(ROLLOUTS.c.count), 0))).scalar_one()
    return {"rows": rows, "env_hours": env_hours, "rows_per_env_hour": rows / max(env_hours, 1),
            "records_counted": int(counted)}


def file_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    db = root / "envcheck.db"
    store = open_store(f"sqlite:///{db}")
    envs = [Environment(id=f"env-{i:05d}", image=f"fleet/env-{i:05d}:1", suite=SUITE)
            for i in range(args.envs)]
    store.sync_suites([Suite(id=SUITE, description="rollouts bench", allow_degraded=False,
                             environment_ids=tuple(e.id for e in envs), file="bench")])
    store.sync_environments(envs)
    base = (datetime.now(UTC) - timedelta(hours=args.hours + 1)).replace(minute=0, second=0,
                                                                          microsecond=0)
    product, bare = Side("envcheck POST /v1/rollouts"), Side("bare: parse and drop")
    out: dict[str, Any] = {}
    with serve_in_thread(bench_app(store)) as url:
        clients = Clients(url, args.clients, args, base)
        # warm-up: every hour seen once by each client, and the bare side's first requests
        warm = args.batch * args.hours * args.clients
        got = clients.post("/v1/rollouts", warm)
        expected = got["sent"]
        clients.post("/bench/drop", args.batch * 4 * args.clients)
        out["store_after_warmup"] = {**rows_per_env_hour(store), "file_mb": file_mb(db)}
        rss_start = rss_mb("self")[0]
        for _ in range(args.rounds):
            for side, path in ((product, "/v1/rollouts"), (bare, "/bench/drop")):
                got = clients.post(path, args.records)
                side.records_s.append(got["records_s"])
                side.cpu_ms.append(got["server_cpu_ms_per_batch"])
                side.latencies_ms += got["latencies_ms"]
                for code, n in got["statuses"].items():
                    side.statuses[code] = side.statuses.get(code, 0) + n
                if side is product:
                    expected += got["sent"]
                    if got["counted"] != got["sent"]:
                        raise RuntimeError(f"{got['sent']} sent, {got['counted']} counted")
        out["rss_mb_after_rounds"] = rss_mb("self")[0]
        if args.long:
            with RssSampler(args.sample_s) as sampler:
                got = clients.post("/v1/rollouts", args.long)
            expected += got["sent"]
            lat = got["latencies_ms"]
            rss = [mb for _, mb in sampler.samples]
            out["long"] = {"records": got["sent"], "records_s": got["records_s"],
                           "p50_ms": median(lat), "p99_ms": percentile(lat, 0.99),
                           "statuses": got["statuses"],
                           "rss_mb": {"before": rss_start, "first": rss[0] if rss else None,
                                      "max": max(rss, default=None),
                                      "last": rss[-1] if rss else None,
                                      "quartiles": [rss[int(q * (len(rss) - 1))]
                                                    for q in (0, 0.25, 0.5, 0.75, 1)]
                                      if rss else []},
                           "rss_samples": sampler.samples}
    out["store_at_end"] = {**rows_per_env_hour(store), "file_mb": file_mb(db)}
    store.close()
    if out["store_at_end"]["records_counted"] != expected:
        raise RuntimeError(f"{expected} records posted and answered, "
                           f"{out['store_at_end']['records_counted']} in the store")
    out["product"], out["bare"] = product.summary(), bare.summary()
    if set(product.statuses) != {"200"} or set(bare.statuses) != {"200"}:
        raise RuntimeError(f"statuses: {product.statuses} {bare.statuses}")
    return out


def report(out: dict[str, Any], args: argparse.Namespace) -> str:
    p, b = out["product"], out["bare"]
    ratio = p["records_s"] / b["records_s"]
    lines = [f"rollouts: batches of {args.batch} (groups of {args.group}), {args.clients} "
             f"client(s), {args.envs} environments over {args.hours} hours, {args.rounds} "
             "round(s) of "
             f"{args.records:,} records per side",
             f"{'side':<30} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'cpu ms':>7}  "
             "rounds (records/s)"]
    for side, doc in (("envcheck POST /v1/rollouts", p), ("bare: parse and drop", b)):
        rounds = ", ".join(f"{r:,.0f}" for r in doc["rounds"])
        lines.append(f"{side:<30} {doc['records_s']:>10,.0f} {doc['p50_ms']:>8.1f} "
                     f"{doc['p99_ms']:>8.1f} {doc['server_cpu_ms_per_batch']:>7.2f}  {rounds}")
    verdict = "PASS" if p["records_s"] >= TARGET_RECORDS_S and \
        p["p99_ms"] < TARGET_P99_MS else "MISS"
    lines.append(f"ratio envcheck/bare {ratio:.2f} (records/s), server CPU per batch "
                 f"{p['server_cpu_ms_per_batch'] / b['server_cpu_ms_per_batch']:.2f}x the bare "
                 f"side's; target >= {TARGET_RECORDS_S:,} records/s and p99 < "
                 f"{TARGET_P99_MS:.0f} ms: {verdict}")
    lines.append(f"load average at the end: {' '.join(f'{x:.1f}' for x in _loadavg())} "
                 f"({host()['cpus']} CPUs)")
    w, e = out["store_after_warmup"], out["store_at_end"]
    lines.append(f"store rows per environment-hour: {w['rows_per_env_hour']:.2f} after the "
                 f"warm-up ({w['records_counted']:,} records, {w['rows']:,} rows, "
                 f"{w['file_mb']:.1f} MB), {e['rows_per_env_hour']:.2f} at the end "
                 f"({e['records_counted']:,} records, {e['rows']:,} rows, "
                 f"{e['file_mb']:.1f} MB)")
    if "long" in out:
        lo, rss = out["long"], out["long"]["rss_mb"]
        quart = " / ".join(f"{x:.0f}" for x in rss["quartiles"])
        lines.append(f"long run: {lo['records']:,} records at {lo['records_s']:,.0f}/s, p50 "
                     f"{lo['p50_ms']:.1f} ms, p99 {lo['p99_ms']:.1f} ms; server RSS MB "
                     f"{rss['before']:.0f} before, over the run (0/25/50/75/100%) {quart}, "
                     f"max {rss['max']:.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="per side per round")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envs", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--group", type=int, default=8,
                        help="rollouts of one environment side by side in a batch (a GRPO "
                        "group); 1: each record its own draw")
    parser.add_argument("--long", type=int, default=0,
                        help="then this many records more to the product, sampling its RSS")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the store's directory")
    args = parser.parse_args(argv)
    try:
        with scratch_dir("envcheck-bench-rollouts-", keep=args.keep) as root:
            out = run(args, root)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"the benchmark broke: {exc}", file=sys.stderr)
        return 1
    print(report(out, args))
    if args.json:
        args.json.write_text(json.dumps({
            **out, "params": {k: str(v) for k, v in vars(args).items()},
            "host": host(commit=git_head(), load=list(_loadavg()))}, indent=2) + "\n")
    return 0


def _loadavg() -> tuple[float, ...]:
    return tuple(float(x) for x in Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    sys.exit(main())
