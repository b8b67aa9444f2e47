"""Benchmark: watched images on a real daemon against the real local registry: the steady state
of unchanged tags (looks only: no pull, no byte) and a moved tag to its full validation.

    .venv/bin/python bench/registry_steady.py [--envs 5] [--scale 60] [--steady-s 180]
                                              [--moves 3] [--concurrency 2] [--json OUT]

Debian's ``docker-registry`` 2.8 runs on 127.0.0.1 (tests/registryd.py, anonymous). Each of
``--envs`` environments has a repository of its own holding a small image: the demo's task
image (``envcheck-demo/hack-resistant``, on the engine already) plus one layer of a few bytes of
its own, built, pushed through the engine and removed from it again, so the registry holds it
and the engine does not (the daemon pulls it by digest: a manifest, a config and the small
layer; the task's own layers are the engine's already). The catalogue declares them ``pull:
watch`` with terminal, dependencies and tests, at the default schedules divided by ``--scale``
(60: the image look and the terminal every 5 s, dependencies every 60 s, tests every 6 min,
jitter 0.5 s, ``reprove_every`` 24 min, ``--host-sample-every`` 10 s) and one real ``envcheck
daemon`` probes them.

1. **Warm-up**: until every environment has a full pass of terminal, dependencies and tests
   on its first digest (the fleet's first pulls, counted apart).
2. **Steady state** (``--steady-s``): the registry's own access log counts the HEADs, manifest
   GETs and blob GETs of the watched repositories; the daemon's ``/metrics`` its pulls, bytes
   pulled and image-cache hits (a full probe that found its image on the engine); the store
   the probes by kind and depth. Scaled to an
   environment-day at the default schedules (one second here is ``--scale`` seconds there).
   Target: 0 pulls and 0 bytes for unchanged tags; HEADs only.
3. **Moves** (``--moves``, one environment after the other): a rebuilt image (a new small
   layer) pushed to the same tag; then from the push's end to the first result on the new
   digest (detection) and to a full result of every declared kind on it (terminal,
   dependencies, tests), as the daemon's store shows them. Detection is scaled by ``--scale``
   (a look's interval); what follows it (the queue, the pull, the probes) runs at once
   whatever the schedules, so at the default schedules it stays as measured.

Exit 0 whatever the figures; 1 if the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import requests
from common import ROOT, git_head, host, median, running, scratch_dir
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(ROOT))

from envcheck.catalogue.fields import MIN_SCHEDULE_ENV
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.sandbox.labels import LABEL_TAG
from envcheck.store import open_store
from tests.registry_images import new_repository
from tests.registryd import Registry

BASE = "envcheck-demo/hack-resistant:latest"
VALIDATED = (ProbeKind.TERMINAL, ProbeKind.DEPENDENCIES, ProbeKind.TESTS)
DAY = 86400.0
TASK = """
      tests:
        command: JUNIT={junit} /opt/task/run_tests.sh {tests}
        junit_path: /tmp/envcheck-junit.xml
        fail_to_pass: [tests/test_stats.py::test_median_even_length]
        pass_to_pass: [tests/test_stats.py::test_mean]
        oracle: { path: /opt/task/oracle.sh }
        reruns: 2
        timeout_s: 60s"""


def push_rebuilt(client: docker.DockerClient, registry: Registry, repository: str,
                 tag: str) -> str:
    """``BASE`` plus one small layer of its own, pushed as ``repository:tag`` and removed from
    the engine again: the registry's digest."""
    ref = f"{registry.host}/{repository}"
    payload = uuid.uuid4().hex.encode()
    dockerfile = b"FROM " + BASE.encode() + b"\nCOPY payload /opt/bench-payload\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("payload", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=f"{ref}:{tag}", rm=True,
                        network_mode="none")
    digest = None
    try:
        for event in client.images.push(ref, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise RuntimeError(f"push of {ref}:{tag} failed: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest", digest)
    finally:
        client.images.remove(f"{ref}:{tag}", force=True)
    if digest is None:
        raise RuntimeError(f"push of {ref}:{tag} gave no digest")
    return str(digest)


def catalogue_text(images: dict[str, str], scale: float) -> str:
    def every(seconds: float) -> str:
        return f"{seconds / scale:g}s"

    body = "".join(f"      - {{ id: {env_id}, image: '{image}' }}\n"
                   for env_id, image in images.items())
    return f"""version: 1
suites:
  watched:
    description: generated by bench/registry_steady.py
    defaults:
      pull: watch
      workdir: /workspace
      user: agent
      shell: /bin/bash
      tools: [git, python3]
      timeouts: {{ start_s: 30, shell_s: 10, exec_s: 60 }}
      schedules: {{ image: {every(300)}, terminal: {every(300)}, dependencies: {every(3600)},
                   tests: {every(21600)}, datasource: null, jitter_s: {30 / scale:g} }}
      reprove_every: {{ terminal: {every(DAY)}, dependencies: {every(DAY)} }}
      dependencies: {{ executables: {{ git: '^git version' }} }}{TASK}
    environments:
{body}"""


def mode(result: ProbeResult) -> str:
    depth = result.details.get("depth") if isinstance(result.details, dict) else None
    return str((depth or {}).get("mode", "full"))


def why(result: ProbeResult) -> str:
    depth = result.details.get("depth") if isinstance(result.details, dict) else None
    return str((depth or {}).get("why", "")).split(":")[0].split(" since ")[0]


class Watch:
    """The daemon's store, read as the bench needs it."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url

    def results(self, env_id: str, limit: int = 2000) -> list[ProbeResult]:
        with open_store(self.db_url) as store:
            return list(reversed(store.history(env_id, limit=limit)))

    def validated(self, env_id: str, digest: str) -> dict[ProbeKind, ProbeResult]:
        """The first full result of each validated kind on ``digest``."""
        found: dict[ProbeKind, ProbeResult] = {}
        for r in self.results(env_id):
            if (r.image_digest == digest and r.kind in VALIDATED and r.kind not in found
                    and mode(r) != "reused" and str(r.status) == "pass"):
                found[r.kind] = r
        return found


def metrics(url: str) -> dict[str, float]:
    """The registry stage's counters, summed over their labels."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(("envcheck_registry_", "envcheck_image_cache_")):
                key = s.name + ("{" + s.labels["outcome"] + "}" if "outcome" in s.labels else "")
                out[key] += s.value
    return dict(out)


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def registry_counts(registry: Registry, mark: Any, repos: list[str]) -> Counter[str]:
    total: Counter[str] = Counter()
    for repo in repos:
        total.update(registry.counts(mark, repository=repo))
    return total


def steady(args: argparse.Namespace, daemon: Any, watch: Watch, registry: Registry,
           repos: dict[str, str]) -> dict[str, Any]:
    mark, before = registry.mark(), metrics(daemon.url)
    since, started = datetime.now(UTC), time.monotonic()
    time.sleep(args.steady_s)
    seconds = time.monotonic() - started
    until = datetime.now(UTC)
    counts = registry_counts(registry, mark, list(repos.values()))
    got = delta(metrics(daemon.url), before)
    probes: Counter[str] = Counter()
    for env_id in repos:
        for r in watch.results(env_id):
            if since <= r.started_at <= until:
                label = "look" if r.kind is ProbeKind.IMAGE else f"{mode(r)} ({why(r)})"
                probes[f"{r.kind}/{label}"] += 1
    env_days = len(repos) * seconds * args.scale / DAY  # at the default schedules

    def per_env_day(n: float) -> float:
        return n / env_days

    pulled = sum(v for k, v in got.items() if k.startswith("envcheck_registry_pulls_total"))
    nbytes = got.get("envcheck_registry_pull_bytes_total", 0.0)
    return {
        "seconds": round(seconds, 1), "env_days_at_default": round(env_days, 4),
        "registry": dict(counts), "metrics": got,
        "probes": dict(probes),
        "per_env_day": {
            "head_manifest": per_env_day(counts["head_manifest"]),
            "get_manifest": per_env_day(counts["get_manifest"]),
            "get_blob": per_env_day(counts["get_blob"]),
            "pulls": per_env_day(pulled), "bytes": per_env_day(nbytes),
        },
        "heads_per_look": counts["head_manifest"] / max(probes.get("image/look", 0), 1),
    }


def move(args: argparse.Namespace, env_id: str, repo: str, daemon: Any, watch: Watch,
         client: docker.DockerClient, registry: Registry) -> dict[str, Any]:
    old = next(r.image_digest for r in reversed(watch.results(env_id))
               if r.kind is ProbeKind.IMAGE)
    before = metrics(daemon.url)
    mark = registry.mark()
    digest = push_rebuilt(client, registry, repo, "v1")
    moved_at, t0 = datetime.now(UTC), time.monotonic()
    seen_at: float | None = None
    while time.monotonic() - t0 < args.move_timeout_s:
        if daemon.proc.poll() is not None:
            raise RuntimeError("the daemon exited during a move")
        found = watch.validated(env_id, digest)
        if seen_at is None and any(r.image_digest == digest for r in watch.results(env_id, 50)):
            seen_at = time.monotonic() - t0
        if len(found) == len(VALIDATED):
            break
        time.sleep(0.25)
    else:
        raise RuntimeError(f"{env_id}: {digest} not validated in {args.move_timeout_s} s")
    seen = time.monotonic() - t0
    first = next(r for r in watch.results(env_id) if r.image_digest == digest)
    detect = (first.started_at - moved_at).total_seconds()
    ends = {str(k): ((r.started_at - moved_at).total_seconds() + r.duration_s
                     + float((r.details.get("image") or {}).get("pull_s") or 0.0))
            for k, r in found.items()}
    validated = max(ends.values())
    got = delta(metrics(daemon.url), before)
    counts = registry_counts(registry, mark, [repo])
    row = {"env": env_id, "from": old, "to": digest, "detected_by": str(first.kind),
           "detect_s": round(detect, 2), "validated_s": round(validated, 2),
           "seen_in_store_s": round(seen, 2), "first_seen_s": seen_at,
           "kind_end_s": {k: round(v, 2) for k, v in ends.items()},
           "modes": {str(k): mode(r) for k, r in found.items()},
           "pulled": [bool((r.details.get("image") or {}).get("pulled")) for r in found.values()],
           "pull_s": max(float((r.details.get("image") or {}).get("pull_s") or 0.0)
                         for r in found.values()),
           "metrics": got, "registry": dict(counts)}
    row["at_default_s"] = round(detect * args.scale + (validated - detect), 1)
    print(f"  {env_id}: moved; detected by {row['detected_by']} after {detect:.1f} s, every "
          f"kind validated after {validated:.1f} s (store: {seen:.1f} s); at the default "
          f"schedules {row['at_default_s'] / 60:.1f} min", flush=True)
    return row


def warm_up(args: argparse.Namespace, daemon: Any, watch: Watch,
            digests: dict[str, str]) -> float:
    """Until every environment is validated on its first digest and its terminal evidence is
    reused (proven: the steady state)."""
    def proven(env_id: str, digest: str) -> bool:
        if len(watch.validated(env_id, digest)) < len(VALIDATED):
            return False
        return any(r.kind is ProbeKind.TERMINAL and mode(r) == "reused"
                   for r in watch.results(env_id, 20))

    return daemon.wait_for("every environment validated on its first digest, then reused",
                           lambda: all(proven(e, d) for e, d in digests.items()),
                           timeout=args.warmup_timeout_s)


def cleanup(client: docker.DockerClient, registry: Registry, tag: str) -> None:
    for c in client.api.containers(all=True, filters={"label": f"{LABEL_TAG}={tag}"}):
        client.api.remove_container(c["Id"], force=True, v=True)
    for img in client.images.list():
        names = (img.attrs.get("RepoDigests") or []) + (img.attrs.get("RepoTags") or [])
        if any(n.startswith(registry.host + "/") for n in names):
            client.images.remove(img.id, force=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=5)
    parser.add_argument("--scale", type=float, default=60.0,
                        help="the default schedules divided by this")
    parser.add_argument("--steady-s", type=float, default=180.0)
    parser.add_argument("--moves", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--warmup-timeout-s", type=float, default=420.0)
    parser.add_argument("--move-timeout-s", type=float, default=240.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = docker.from_env(timeout=300)
    client.images.get(BASE)  # the demo images: scripts/build_images.py
    registry = Registry("anonymous")
    tag = f"bench-registry-steady-{os.getpid()}"
    report: dict[str, Any] = {"host": host(), "commit": git_head(), "args": {
        k: str(v) for k, v in vars(args).items()}}
    try:
        with scratch_dir("envcheck-bench-registry-steady-") as work:
            repos = {f"watched-{i}": new_repository("bench-steady") for i in range(args.envs)}
            started = time.monotonic()
            digests = {e: push_rebuilt(client, registry, r, "v1") for e, r in repos.items()}
            print(f"{args.envs} images pushed in {time.monotonic() - started:.1f} s",
                  flush=True)
            path = work / "watched.yaml"
            path.write_text(catalogue_text({e: f"{registry.host}/{r}:v1"
                                            for e, r in repos.items()}, args.scale))
            floor = min(300, 3600, 21600) / args.scale
            environ = {MIN_SCHEDULE_ENV: f"{min(floor, 1.0):g}s", "ENVCHECK_CONTAINER_TAG": tag,
                       "ENVCHECK_LOG_LEVEL": "info"}
            extra = ["--host-sample-every", f"{600 / args.scale:g}"]
            with running(work, path, args.concurrency, environ, extra,
                         window=max(60 / args.scale, 1.0)) as daemon:
                watch = Watch(f"sqlite:///{work / 'data' / 'envcheck.db'}")
                mark = registry.mark()
                daemon.wait_for("readiness", lambda: requests.get(
                    f"{daemon.url}/readyz", timeout=5).status_code == 200, timeout=120)
                warm = warm_up(args, daemon, watch, digests)
                report["warmup"] = {
                    "seconds": round(warm, 1), "metrics": metrics(daemon.url),
                    "registry": dict(registry_counts(registry, mark, list(repos.values())))}
                print(f"warm-up: every environment validated and reused after {warm:.1f} s; "
                      f"registry: {report['warmup']['registry']}", flush=True)
                print(f"steady state for {args.steady_s:g} s", flush=True)
                report["steady"] = steady(args, daemon, watch, registry, repos)
                show_steady(report["steady"])
                report["moves"] = [move(args, e, repos[e], daemon, watch, client, registry)
                                   for e in list(repos)[: args.moves]]
                report["daemon_exit"] = daemon.stop()
    except Exception as exc:  # the bench broke, not a number
        print(f"bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        cleanup(client, registry, tag)
        registry.close()
        client.close()
    show_moves(report["moves"], args.scale)
    report["load_average"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


def show_steady(s: dict[str, Any]) -> None:
    per = s["per_env_day"]
    print(f"  {s['seconds']:.0f} s = {s['env_days_at_default']:.3f} environment-days at the "
          f"default schedules; registry: {s['registry']}; metrics: {s['metrics']}")
    print(f"  probes: {s['probes']}")
    print(f"  per environment-day: {per['head_manifest']:.1f} HEAD, {per['get_manifest']:.1f} "
          f"manifest GET, {per['get_blob']:.1f} blob GET, {per['pulls']:.1f} pulls, "
          f"{per['bytes']:.0f} bytes pulled (target 0 and 0); "
          f"{s['heads_per_look']:.2f} HEADs per image look", flush=True)


def show_moves(rows: list[dict[str, Any]], scale: float) -> None:
    if not rows:
        return
    detect = [r["detect_s"] for r in rows]
    valid = [r["validated_s"] for r in rows]
    default = [r["at_default_s"] / 60 for r in rows]
    print(f"\nmoves ({len(rows)}): detection median {median(detect):.1f} s (max "
          f"{max(detect):.1f}; x{scale:g}: {median(detect) * scale / 60:.1f} min), full "
          f"validation median {median(valid):.1f} s (max {max(valid):.1f}); at the default "
          f"schedules median {median(default):.1f} min, max {max(default):.1f} min "
          f"(target: median <= 15, p95 <= 25)")


if __name__ == "__main__":
    sys.exit(main())
