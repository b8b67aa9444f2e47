"""Benchmark: a month of a 10,000-environment fleet pushed through the store, hour by
simulated hour, with the daemon's hourly prune, on SQLite and on PostgreSQL.

    .venv/bin/python bench/store_month.py [--envs 10000] [--days 30] [--report-days 1,7,30]
        [--backend sqlite|postgresql|both] [--record-sample 3000] [--requests 2000]
        [--page-rounds 2] [--wall-budget SECONDS] [--keep] [--json OUT]

The fleet (``bench/monthfleet.py``): ``--envs`` environments in four suites (terminal only,
+ dependencies, + tests, + a data source), the default schedules, most healthy, some flaky,
a few broken for days, a few without their image for hours, some degraded; every result a
copy of a real one (``bench/monthfleet.json``), so sizes mean what they would.

Each simulated hour: the hour's check runs (one a minute, the daemon's window) and results,
with their simulated ``started_at``, written in one bulk transaction (``bench/bulkrows.py``:
the store's exact row shape, checked at the start against ``Store.record``); the health
model (the real ``evaluate``) on the environments whose answer just changed (a broken image
+1 h, +3 h, +12 h; its fix +2 h, +12 h, +30 h) and once a day on the flaky and degraded ones,
so quarantines, their transitions and their evidence happen as in the daemon, and
quarantined environments are probed four times slower; then the daemon's prune
(``store.prune(Retention(), now=<the simulated hour's end>)``, as ``--prune-every 1h``). On
PostgreSQL, autovacuum has a real hour to reclaim what a prune deleted and to refresh the
planner's statistics, and a simulated hour lasts seconds: so after each prune the bench runs
``VACUUM ANALYZE`` (or ``ANALYZE``) on each table whose dead, inserted or changed rows passed
autovacuum's own thresholds for it (what autovacuum would have done within its one-minute
naptime); its seconds are reported apart.

At the end of each ``--report-days`` day: the database's size (SQLite: file + WAL after a
checkpoint; PostgreSQL: ``pg_database_size``), rows per table, the prune's seconds (the
last, and p95 and max over the day); the allowlist's p99 (bench/allowlist.py's client against
the API served by uvicorn on 127.0.0.1, default cache) and each dashboard page's cold render
(bench/dashboard.py's AppTest runs). At the first and last report day, **insert headroom**:
the first ``--record-sample`` results of the day's last hour are written through
``Store.record``, one commit each (the daemon's write path), and their rate is divided by the
schedule's average and peak-minute rates.

**The prune before and after**: at the last report day, the old way of finding what to prune
(ranking every result of 50 environments at a time with a window function, as the prune did
before it walked the index) and the new one are timed side by side on the same store,
read-only, and must find the same results (``--no-compare`` skips it).

``--wall-budget``: a month longer than the machine time at hand ends with the first simulated
day that ends past the budget, reported like a report day (its headroom measured).

Targets (issue 15): size flat after the retention window (failures 14 days), headroom well
above 1, allowlist p99 <= 20 ms, every page <= 2 s. The PostgreSQL database is
``envcheck_bench_month`` on 127.0.0.1:5432 (``ENVCHECK_BENCH_PG``), dropped at the end; the
SQLite file is in a temporary folder, removed unless ``--keep``. Exit 0 whatever the
numbers; 1 if the benchmark broke.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import allowlist
import bulkrows
import dashboard
import fleetcache
import monthfleet as mf
import psycopg
from common import git_head, host, percentile, scratch_dir
from sqlalchemy import func, select

from envcheck.api.app import create_app, serve_in_thread
from envcheck.feed.assess import evaluate
from envcheck.store import Store, open_store
from envcheck.store.core_tables import RESULTS, ROLLUPS, RUNS, STATES, TRANSITIONS
from envcheck.store.feed import OBSERVATION_WINDOW
from envcheck.store.retention import Cutoffs, Retention

PG_DATABASE = "envcheck_bench_month"
ALLOWLIST_P99_MS = allowlist.TARGET_P99_MS
PAGE_S = dashboard.TARGET_S
def _setting(name: str) -> str:
    """An autovacuum setting of table ``c``: its own (reloptions), else the server's."""
    return (f"coalesce((SELECT option_value::float FROM pg_options_to_table(c.reloptions) "
            f"WHERE option_name = '{name}'), current_setting('{name}')::float)")


# What autovacuum would do to each table that pruning or writing touches, by its own rules:
# VACUUM past the dead-row or the inserted-row threshold, ANALYZE past the changed-row one.
AUTOVACUUM_DUE = f"""
SELECT s.relname,
    s.n_dead_tup > {_setting('autovacuum_vacuum_threshold')}
        + {_setting('autovacuum_vacuum_scale_factor')} * greatest(c.reltuples, 0)
    OR s.n_ins_since_vacuum > {_setting('autovacuum_vacuum_insert_threshold')}
        + {_setting('autovacuum_vacuum_insert_scale_factor')} * greatest(c.reltuples, 0),
    s.n_mod_since_analyze > {_setting('autovacuum_analyze_threshold')}
        + {_setting('autovacuum_analyze_scale_factor')} * greatest(c.reltuples, 0)
FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relname IN ('probe_result', 'result_rollup', 'check_run', 'transition', 'env_state')
"""
log = logging.getLogger("store_month")


def at(t: float) -> datetime:
    return mf.T0 + timedelta(seconds=t)


# --- the databases ------------------------------------------------------------------------


@contextlib.contextmanager
def database(backend: str, keep: bool) -> Iterator[str]:
    """A new, empty store's URL; removed after (the SQLite file unless ``keep``)."""
    if backend == "sqlite":
        with scratch_dir("envcheck-bench-month-", keep) as root:
            yield f"sqlite:///{root / 'envcheck.db'}"
        return
    with psycopg.connect(fleetcache.PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        params = conn.info.get_parameters()
    try:
        yield (f"postgresql://{params.get('user', 'postgres')}@"
               f"{params.get('host', '127.0.0.1')}:{params.get('port', '5432')}/{PG_DATABASE}")
    finally:
        if not keep:
            with psycopg.connect(fleetcache.PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')


def size_bytes(store: Store) -> int:
    """The database's size on disk: SQLite's file and WAL after a checkpoint, PostgreSQL's
    ``pg_database_size``."""
    with store.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").all()
            path = Path(str(store.engine.url.database))
            return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"))
                       if p.exists())
        return int(conn.exec_driver_sql("SELECT pg_database_size(current_database())")
                   .scalar_one())


def table_sizes(store: Store) -> dict[str, int]:
    """PostgreSQL: bytes per table with its indexes and TOAST (SQLite: none: one file)."""
    if store.engine.dialect.name == "sqlite":
        return {}
    with store.engine.connect() as conn:
        return {name: int(n) for name, n in conn.exec_driver_sql(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
            "WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace "
            "ORDER BY 2 DESC LIMIT 6")}


def row_counts(store: Store) -> dict[str, Any]:
    with store.engine.connect() as conn:
        kinds = dict(conn.execute(select(RESULTS.c.kind, func.count())
                                  .group_by(RESULTS.c.kind)).all())
        periods = dict(conn.execute(select(ROLLUPS.c.period, func.count())
                                    .group_by(ROLLUPS.c.period)).all())
        runs = conn.execute(select(func.count()).select_from(RUNS)).scalar_one()
        transitions = conn.execute(select(func.count()).select_from(TRANSITIONS)).scalar_one()
        states = dict(conn.execute(select(STATES.c.state, func.count())
                                   .group_by(STATES.c.state)).all())
        quarantined = conn.execute(select(func.count()).select_from(STATES)
                                   .where(STATES.c.quarantined)).scalar_one()
    return {"results": sum(kinds.values()), "results_by_kind": kinds,
            "rollups": sum(periods.values()), "rollups_by_period": periods, "runs": runs,
            "transitions": transitions, "states": states, "quarantined": quarantined}


def ranked_past_window(store: Store, cut: Cutoffs) -> set[int]:
    """What the prune found before it walked the index, found the way it did: every result
    of 50 environments at a time ranked per kind by a window function, those past the
    window and started before the passes' cutoff read, then filtered by retention."""
    names = ("id", "run_id", "env_id", "kind", "image_digest", "status", "reason",
             "started_at", "duration_s")
    ranked = select(*(RESULTS.c[n] for n in names), func.row_number().over(
        partition_by=(RESULTS.c.env_id, RESULTS.c.kind),
        order_by=(RESULTS.c.started_at.desc(), RESULTS.c.id.desc())).label("rank"))
    found: set[int] = set()
    after = ""
    with store.engine.connect() as conn:
        while True:  # chunks of environments until none is left
            env_ids = list(conn.execute(
                select(RESULTS.c.env_id).where(RESULTS.c.env_id > after).distinct()
                .order_by(RESULTS.c.env_id).limit(50)).scalars())
            if not env_ids:
                return found
            inner = ranked.where(RESULTS.c.env_id.in_(env_ids)).subquery()
            for row in conn.execute(select(*(inner.c[n] for n in names))
                                    .where(inner.c.rank > OBSERVATION_WINDOW,
                                           inner.c.started_at < cut.passes)
                                    .order_by(inner.c.id)):
                short = row.status in ("pass", "skip") and \
                    row.reason not in ("recovered_after_retry", "reward_hackable")
                if row.started_at < (cut.passes if short else cut.others):
                    found.add(row.id)
            after = env_ids[-1]


def compare_prune_reads(store: Store, now: datetime) -> dict[str, Any]:
    """The old and the new way of finding what a prune at ``now`` folds, timed on the same
    store (read-only); the same results, or the bench is broken."""
    cut = Retention().cutoffs(now)
    t0 = time.perf_counter()
    walked = {r.id for rows in store._past_window(cut) for r in rows}
    t1 = time.perf_counter()
    ranked = ranked_past_window(store, cut)
    t2 = time.perf_counter()
    if walked != ranked:
        raise RuntimeError(f"the index walk found {len(walked)} results to prune, the "
                           f"ranking {len(ranked)}: {len(walked ^ ranked)} differ")
    return {"found": len(walked), "index_walk_s": round(t1 - t0, 2),
            "ranking_s": round(t2 - t1, 2)}


# --- the month ----------------------------------------------------------------------------


@dataclass
class Month:
    """One backend's simulated month."""

    url: str
    backend: str
    args: argparse.Namespace
    envs: list[mf.SimEnv]
    store: Store = field(init=False)
    writer: bulkrows.BulkWriter = field(init=False)
    results: mf.Results = field(init=False)
    models: list[Any] = field(init=False)
    quarantined: set[str] = field(default_factory=set)
    checks: dict[int, set[int]] = field(default_factory=dict)  # hour -> env indexes to assess
    hours: list[dict[str, Any]] = field(default_factory=list)
    per_minute: Counter[int] = field(default_factory=Counter)
    days: dict[int, dict[str, Any]] = field(default_factory=dict)

    def setup(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.store = open_store(self.url)
        self.writer = bulkrows.BulkWriter(self.url, mf.COLUMNS)
        self.results = mf.Results(self.envs)
        self.models = [mf.environment(e) for e in self.envs]
        self.store.sync_suites(mf.suites(self.envs))
        self.store.sync_environments(self.models)
        for s in range(mf.SOURCES):
            self.store.observe_shape(f"source-{s:02d}", f"source-{s:02d}-v1",
                                     {"object": {"items": "array"}}, mf.T0, count=3,
                                     auto_accept=True)
        # the fast path writes what Store.record writes: checked on a result of each kind
        self.writer.runs(mf.runs(0, mf.HOUR))
        first = self.results.hour(0, set())
        samples = {item[1].kinds[item[2]]: item for item in first}
        differ = {kind: bulkrows.same_shape(self.store, self.writer,
                                            *self.results.result(item),
                                            self.results.row(item))
                  for kind, item in samples.items()}
        if any(differ.values()):
            raise RuntimeError(f"the bulk rows differ from Store.record's: {differ}")
        self._plan_checks()
        return {"setup_s": round(time.perf_counter() - started, 2),
                "shape_checked": sorted(samples)}

    def _plan_checks(self) -> None:
        """When the health model looks at whom: after a broken image or an outage starts
        and ends, and the flaky and degraded ones daily (at their own hour)."""
        hours = round(self.args.days * 24)
        for env in self.envs:
            marks: list[float] = []
            start, end = env.event
            if env.profile in ("broken", "outage"):
                marks = [start + h * mf.HOUR for h in (1, 3, 12)] + \
                    [end + h * mf.HOUR for h in (2, 12, 30)]
            elif env.profile in ("flaky", "degraded"):
                marks = [(d * 24 + env.index % 24 + 1) * mf.HOUR for d in range(hours // 24 + 1)]
            for t in marks:
                if t < hours * mf.HOUR:
                    self.checks.setdefault(int(t // mf.HOUR), set()).add(env.index)

    # --- one hour -----------------------------------------------------------------------

    def hour(self, h: int, sample: int) -> dict[str, Any]:
        """Write hour ``h`` (its first ``sample`` results through ``Store.record``), assess,
        prune; what each step took."""
        start = h * mf.HOUR
        out: dict[str, Any] = {"hour": h}
        t0 = time.perf_counter()
        items = self.results.hour(start, self.quarantined)
        out["results"] = len(items)
        for item in items:
            self.per_minute[int(item[0] // 60)] += 1
        if h:
            self.writer.runs(mf.runs(start, start + mf.HOUR))
        if sample:
            out["record"] = self._record(items[:sample])
            items = items[sample:]
        t1 = time.perf_counter()
        for i in range(0, len(items), self.args.chunk):
            self.writer.results([self.results.row(x) for x in items[i:i + self.args.chunk]])
        out["write_s"] = round(time.perf_counter() - t1, 3)
        t2 = time.perf_counter()
        due = [self.models[i] for i in sorted(self.checks.get(h, ()))] if h else self.models
        for row in evaluate(self.store, due, now=at(start + mf.HOUR)):
            (self.quarantined.add if row.quarantined else self.quarantined.discard)(row.env_id)
        out["assessed"], out["assess_s"] = len(due), round(time.perf_counter() - t2, 3)
        t3 = time.perf_counter()
        report = self.store.prune(Retention(), now=at(start + mf.HOUR))
        out["prune_s"] = round(time.perf_counter() - t3, 3)
        out["pruned"] = report.results_deleted
        out["kept_as_evidence"] = report.kept_as_evidence
        if self.backend == "postgresql":
            t4 = time.perf_counter()
            with self.store.engine.connect() as conn:
                auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                out["vacuumed"] = []
                for name, vacuum, analyze in auto.exec_driver_sql(AUTOVACUUM_DUE).all():
                    if vacuum or analyze:
                        done = "VACUUM ANALYZE" if vacuum else "ANALYZE"
                        auto.exec_driver_sql(f"{done} {name}")
                        out["vacuumed"].append(f"{done} {name}")
            out["vacuum_s"] = round(time.perf_counter() - t4, 3)
        out["total_s"] = round(time.perf_counter() - t0, 3)
        return out

    def _record(self, items: list[tuple[Any, ...]]) -> dict[str, Any]:
        """The daemon's write path on ``items``: one ``Store.record`` (one commit) each."""
        latencies = []
        started = time.perf_counter()
        for item in items:
            run_id, result = self.results.result(item)
            t = time.perf_counter()
            self.store.record(run_id, result)
            latencies.append((time.perf_counter() - t) * 1000)
        seconds = time.perf_counter() - started
        return {"n": len(items), "seconds": round(seconds, 3),
                "per_s": round(len(items) / seconds, 1),
                "p50_ms": round(percentile(latencies, 0.5), 3),
                "p99_ms": round(percentile(latencies, 0.99), 3), "latencies_ms": latencies}

    # --- a report day -------------------------------------------------------------------

    def report_day(self, day: int) -> dict[str, Any]:
        today = [h for h in self.hours if h["hour"] >= (day - 1) * 24]
        prunes = [h["prune_s"] for h in today]
        out: dict[str, Any] = {
            "day": day, "size_bytes": size_bytes(self.store),
            "prune_reads": compare_prune_reads(self.store, at(day * mf.DAY))
            if self.args.compare and day == self.args.report_days[-1] else None,
            "table_bytes": table_sizes(self.store), **row_counts(self.store),
            "prune_last_s": prunes[-1], "prune_p95_s": percentile(prunes, 0.95),
            "prune_max_s": max(prunes), "pruned_today": sum(h["pruned"] for h in today),
            "results_today": sum(h["results"] for h in today),
            "write_s_today": round(sum(h["write_s"] for h in today), 1),
            "hour_s_today": round(sum(h["total_s"] for h in today), 1)}
        if self.backend == "postgresql":
            out["vacuum_max_s"] = max(h["vacuum_s"] for h in today)
        record = next((h["record"] for h in reversed(today) if "record" in h), None)
        if record is not None:
            out["record"] = record
        suite = "month-sources"
        path = f"/v1/suites/{suite}/allowlist"
        with serve_in_thread(create_app(self.store)) as base:
            row = allowlist.measure(self.backend, "allowlist", base + path, self.args.requests)
        out["allowlist"] = {"suite": suite, "n": row.n, "p50_ms": row.p50_ms,
                            "p99_ms": row.p99_ms, "body_kb": row.body_kb,
                            "statuses": row.statuses}
        out["pages"] = dashboard.measure(self.url, self.args.page_rounds)
        out["load_average"] = os.getloadavg()[0]
        return out

    def close(self) -> None:
        self.writer.close()
        self.store.close()


def schedule_rates(month: Month) -> dict[str, float]:
    """The schedule's results per day and per second (average, and the busiest minute's)."""
    simulated = len(month.hours) * mf.HOUR
    total = sum(h["results"] for h in month.hours)
    busiest = max(month.per_minute.values()) if month.per_minute else 0
    return {"per_day": total / simulated * mf.DAY, "avg_per_s": total / simulated,
            "peak_minute_per_s": busiest / 60}


def run_backend(backend: str, args: argparse.Namespace, envs: list[mf.SimEnv]
                ) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": backend}
    hours = round(args.days * 24)
    report_hours = {int(d * 24) - 1: d for d in args.report_days if d * 24 <= hours}
    sample_hours = {min(report_hours), max(report_hours)} if report_hours else set()
    with database(backend, args.keep) as url:
        month = Month(url, backend, args, envs)
        try:
            out["setup"] = month.setup()
            started = time.perf_counter()
            for h in range(hours):
                budget_spent = args.wall_budget and h % 24 == 23 and \
                    time.perf_counter() - started > args.wall_budget
                if budget_spent:  # this day is the last: reported, with its headroom
                    report_hours[h] = out["stopped_at_day"] = (h + 1) / 24
                sample = h in sample_hours or budget_spent
                month.hours.append(month.hour(h, args.record_sample if sample else 0))
                if args.progress:
                    print({k: v for k, v in month.hours[-1].items() if k != "record"},
                          file=sys.stderr, flush=True)
                if h % 24 == 23 or h == hours - 1:
                    last = month.hours[-24:]
                    print(f"[{backend}] day {(h + 1) / 24:g}: "
                          f"{sum(x['results'] for x in last):,} results, write "
                          f"{sum(x['write_s'] for x in last):.0f} s, prune "
                          f"{sum(x['prune_s'] for x in last):.0f} s (max "
                          f"{max(x['prune_s'] for x in last):.2f}), "
                          f"{sum(x['pruned'] for x in last):,} pruned, "
                          f"{len(month.quarantined)} quarantined; "
                          f"{time.perf_counter() - started:.0f} s so far", flush=True)
                if h in report_hours:
                    day = report_hours[h]
                    month.days[day] = month.report_day(day)
                    print(day_line(backend, month.days[day]), flush=True)
                if budget_spent:
                    break
            out["wall_s"] = round(time.perf_counter() - started, 1)
            out["rates"] = schedule_rates(month)
            out["hours"] = month.hours
            out["days"] = month.days
        finally:
            month.close()
    return out


# --- the report ---------------------------------------------------------------------------


def gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def day_line(backend: str, d: dict[str, Any]) -> str:
    worst = max(d["pages"], key=lambda p: p["cold_s"])
    return (f"[{backend}] report day {d['day']:g}: {gb(d['size_bytes'])} GB, "
            f"{d['results']:,} results, {d['rollups']:,} rollups; prune last "
            f"{d['prune_last_s']:.2f} s, max {d['prune_max_s']:.2f} s; allowlist p99 "
            f"{d['allowlist']['p99_ms']:.2f} ms; slowest page {worst['page']} "
            f"{worst['cold_s']:.2f} s")


def table(result: dict[str, Any]) -> str:
    days = result["days"]
    rates = result["rates"]
    cols = sorted(days)
    head = f"{'':30}" + "".join(f"{'day ' + format(d, 'g'):>12}" for d in cols) + \
        "  target"
    lines = [f"[{result['backend']}] {rates['per_day']:,.0f} results per simulated day "
             f"({rates['avg_per_s']:.1f}/s on average, {rates['peak_minute_per_s']:.1f}/s "
             f"in the busiest minute); {result['wall_s'] / 60:.1f} min of wall time"
             + (f"; stopped by --wall-budget after day {result['stopped_at_day']:g}"
                if "stopped_at_day" in result else ""), head]

    def line(label: str, values: list[str], target: str = "") -> None:
        lines.append(f"{label:30}" + "".join(f"{v:>12}" for v in values) + f"  {target}")

    line("database size (GB)", [gb(days[d]["size_bytes"]) for d in cols],
         "flat after day 14")
    line("raw results", [f"{days[d]['results']:,}" for d in cols])
    for kind in ("terminal", "dependencies", "tests", "datasource"):
        line(f"  {kind}", [f"{days[d]['results_by_kind'].get(kind, 0):,}" for d in cols])
    line("rollup rows", [f"{days[d]['rollups']:,}" for d in cols])
    line("check runs", [f"{days[d]['runs']:,}" for d in cols])
    line("transitions", [f"{days[d]['transitions']:,}" for d in cols])
    line("quarantined", [f"{days[d]['quarantined']:,}" for d in cols])
    line("results pruned that day", [f"{days[d]['pruned_today']:,}" for d in cols])
    line("prune: last (s)", [f"{days[d]['prune_last_s']:.2f}" for d in cols])
    line("prune: p95 of the day (s)", [f"{days[d]['prune_p95_s']:.2f}" for d in cols])
    line("prune: max of the day (s)", [f"{days[d]['prune_max_s']:.2f}" for d in cols],
         "< 3% of an hour")
    reads = [days[d]["prune_reads"] for d in cols]
    if any(reads):
        line("  finding them, before (s)",
             [f"{r['ranking_s']:.2f}" if r else "-" for r in reads], "ranking every result")
        line("  finding them, now (s)",
             [f"{r['index_walk_s']:.2f}" if r else "-" for r in reads], "walking the index")
    if result["backend"] == "postgresql":
        line("VACUUM after it: max (s)", [f"{days[d]['vacuum_max_s']:.2f}" for d in cols])
    line("load average (1 min)", [f"{days[d]['load_average']:.1f}" for d in cols],
         "of 2 cores, when measured")
    p99 = [days[d]["allowlist"]["p99_ms"] for d in cols]
    line("allowlist p99 (ms)", [f"{v:.2f}" for v in p99],
         f"<= {ALLOWLIST_P99_MS:g} {verdict(max(p99) <= ALLOWLIST_P99_MS)}")
    for i, page in enumerate(days[cols[0]]["pages"]):
        cold = [days[d]["pages"][i]["cold_s"] for d in cols]
        line(f"page {page['page'][:23]} (s)", [f"{v:.2f}" for v in cold],
             f"<= {PAGE_S:g} {verdict(max(cold) <= PAGE_S)}")
    for d in cols:
        record = days[d].get("record")
        if record is None:
            continue
        avg = record["per_s"] / rates["avg_per_s"]
        peak = record["per_s"] / rates["peak_minute_per_s"]
        lines.append(f"insert headroom day {d:g}: Store.record {record['per_s']:,.0f}/s "
                     f"(p50 {record['p50_ms']:.2f} ms, p99 {record['p99_ms']:.2f} ms, "
                     f"{record['n']} results) = x{avg:.1f} the average rate, x{peak:.1f} the "
                     f"busiest minute: {verdict(peak >= 2)} (room to spare: >= x2)")
    return "\n".join(lines)


def parse_days(text: str) -> list[float]:
    try:
        days = sorted({float(d) for d in text.split(",") if d.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of days: {text!r}") from None
    if not days or days[0] <= 0:
        raise argparse.ArgumentTypeError("report days must be positive")
    return days


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--envs", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--report-days", type=parse_days, default=[1.0, 7.0, 30.0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--record-sample", type=int, default=3000,
                        help="results written through Store.record at the first and last "
                             "report day")
    parser.add_argument("--requests", type=int, default=2000, help="allowlist requests")
    parser.add_argument("--page-rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=200_000,
                        help="bulk rows per transaction")
    parser.add_argument("--no-compare", dest="compare", action="store_false",
                        help="skip timing the prune's old way of finding old results (at the last "
                             "report day)")
    parser.add_argument("--wall-budget", type=float, default=0.0, metavar="SECONDS",
                        help="stop at the end of the first simulated day that ends after "
                             "this much wall time, and report it (0: run every day)")
    parser.add_argument("--progress", action="store_true", help="a line per simulated hour")
    parser.add_argument("--keep", action="store_true",
                        help="keep the SQLite file and the PostgreSQL database")
    parser.add_argument("--json", type=Path, metavar="OUT")
    args = parser.parse_args(argv)
    args.report_days = [d for d in args.report_days if d <= args.days] or [args.days]
    # stopped by a signal: still drop the database and remove the file
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    envs = mf.fleet(args.envs)
    profiles = Counter(e.profile for e in envs)
    print(f"{args.envs:,} environments ({dict(profiles)}), {args.days:g} simulated days, "
          f"report at days {', '.join(format(d, 'g') for d in args.report_days)}",
          flush=True)
    out: dict[str, Any] = {"params": {**vars(args), "json": str(args.json)},
                           "profiles": dict(profiles), "backends": {}}
    try:
        for backend in backends:
            try:
                result = run_backend(backend, args, envs)
            except psycopg.OperationalError as exc:
                print(f"[{backend}] skipped: {exc}", file=sys.stderr)
                continue
            out["backends"][backend] = result
            print(table(result), flush=True)
    except (RuntimeError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    out["host"] = host(commit=git_head(), load_average=os.getloadavg())
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
