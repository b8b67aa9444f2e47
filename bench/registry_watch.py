"""Benchmark: the tag watch against the real local registry at 10,000 tags.

    .venv/bin/python bench/registry_watch.py [--tags 10000] [--baseline 200] [--rounds 3]
                                             [--token-tags 1000] [--threads 4] [--json OUT]

Debian's ``docker-registry`` 2.8 runs on 127.0.0.1 with basic auth (htpasswd, bcrypt cost 4:
the registry checks the hash on every request), as tests/registryd.py runs it for the suite.
One tiny image is pushed through the engine, then its manifest is PUT under ``--tags`` tags
through the registry's API (cheap: no blob moves). Then, side by side in one run:

A. envcheck: ``TagWatcher.look`` of every tag, after one first-contact look (the registry's
   challenge learned), one after the other from one host (and once more with ``--threads``
   workers).
   Checks per second, and registry requests per check read from the registry's own access log
   (target: 1 HEAD per unchanged tag, no manifest or blob GET; >= 200 checks/s).
B. the engine's digest call, ``APIClient.inspect_distribution`` (docker-py), the way a tool
   asks the engine for a tag's digest, on ``--baseline`` tags (the same tags for every round):
   checks per second and registry requests per check from the same log. Reported as A / B.
C. the floor (reported, not compared): a bare ``requests.Session`` HEAD with basic auth.

A, B and C run in turn for ``--rounds`` rounds (the machine's load hits them alike); the
report gives each side's median round.

With ``--token-tags`` (0 to skip) the same image goes to a second registry with token auth
(``auth: token`` and the tests' issuer), and envcheck's pass there counts the token requests
(target: one per token lifetime, per repository).

Exit 0 whatever the figures; 1 if the benchmark itself broke (a look failed or saw another
digest).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import requests
from common import ROOT, git_head, host

sys.path.insert(0, str(ROOT))

from envcheck.registry import Credentials, ImageReference, TagLook, TagWatcher
from tests.registry_images import ACCEPT, RegistryApi, new_repository, push_tiny
from tests.registryd import Registry

TARGET_CHECKS_PER_S = 200.0


def create_tags(registry: Registry, repo: str, count: int) -> list[str]:
    """``count`` tags on the one pushed manifest, PUT through the API by a few threads."""
    api = RegistryApi(registry)
    body, media_type, _ = api.manifest(repo, "seed")
    tags = [f"t{i:05d}" for i in range(count)]

    def put(chunk: list[str]) -> None:
        mine = RegistryApi(registry)
        for tag in chunk:
            mine.put_manifest(repo, tag, body, media_type)
        mine.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, [tags[i::4] for i in range(4)]))
    api.close()
    return tags


def timed(label: str, tags: list[str], check: Callable[[str], object], threads: int
          ) -> tuple[float, list[object]]:
    started = time.perf_counter()
    if threads == 1:
        out = [check(tag) for tag in tags]
    else:
        with ThreadPoolExecutor(threads) as pool:
            out = list(pool.map(check, tags))
    seconds = time.perf_counter() - started
    print(f"  {label}: {len(tags)} checks in {seconds:.2f} s = {len(tags) / seconds:.0f}/s",
          flush=True)
    return seconds, out


def envcheck_pass(registry: Registry, repo: str, tags: list[str], digest: str, threads: int
                  ) -> dict[str, Any]:
    watcher = TagWatcher()
    creds = Credentials(registry.user, registry.password, source="bench")
    refs = {tag: ImageReference.parse(f"{registry.host}/{repo}:{tag}") for tag in tags}
    first = watcher.look(refs[tags[0]], creds)  # the first contact learns the challenge
    if not isinstance(first, TagLook):
        raise SystemExit(f"first look failed: {first}")
    mark = registry.mark()
    seconds, outcomes = timed(f"envcheck, {threads} thread(s)", tags,
                              lambda tag: watcher.look(refs[tag], creds), threads)
    watcher.close()
    bad = [o for o in outcomes if not isinstance(o, TagLook) or o.digest != digest]
    if bad:
        raise SystemExit(f"{len(bad)} looks failed or saw another digest: {bad[:3]}")
    counts = registry.counts(mark)
    return {"threads": threads, "checks": len(tags), "seconds": round(seconds, 3),
            "checks_per_s": round(len(tags) / seconds, 1),
            "requests": dict(counts),
            "requests_per_check": round(sum(counts.values()) / len(tags), 4)}


def engine_pass(registry: Registry, repo: str, tags: list[str], digest: str) -> dict[str, Any]:
    client = docker.APIClient(timeout=60)
    auth = registry.auth_config

    def check(tag: str) -> str:
        return str(client.inspect_distribution(f"{registry.host}/{repo}:{tag}",
                                               auth_config=auth)["Descriptor"]["digest"])

    check(tags[0])
    mark = registry.mark()
    seconds, digests = timed("engine inspect_distribution", tags, check, 1)
    client.close()
    if set(digests) != {digest}:
        raise SystemExit(f"the engine saw other digests: {set(digests)}")
    counts = registry.counts(mark)
    return {"checks": len(tags), "seconds": round(seconds, 3),
            "checks_per_s": round(len(tags) / seconds, 1), "requests": dict(counts),
            "requests_per_check": round(sum(counts.values()) / len(tags), 4)}


def floor_pass(registry: Registry, repo: str, tags: list[str]) -> dict[str, Any]:
    session = requests.Session()
    assert registry.user and registry.password
    auth = (registry.user, registry.password)

    def check(tag: str) -> str:
        resp = session.head(f"{registry.url}/v2/{repo}/manifests/{tag}", auth=auth,
                            headers={"Accept": ACCEPT}, timeout=10)
        return resp.headers["Docker-Content-Digest"]

    check(tags[0])
    seconds, _ = timed("floor: bare requests HEAD", tags, check, 1)
    session.close()
    return {"checks": len(tags), "seconds": round(seconds, 3),
            "checks_per_s": round(len(tags) / seconds, 1)}


def token_pass(client: docker.DockerClient, count: int) -> dict[str, Any]:
    registry = Registry("token")
    try:
        repo = new_repository("bench")
        digest = push_tiny(client, registry, repo, "seed")
        tags = create_tags(registry, repo, count)
        mark = registry.mark()
        result = envcheck_pass(registry, repo, tags, digest, threads=1)
        result["requests"] = dict(registry.counts(mark))  # the first contact's token too
        return result
    finally:
        registry.close()


def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by checks per second."""
    ordered = sorted(rows, key=lambda r: r["checks_per_s"])
    return ordered[len(ordered) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=200, help="tags the engine checks")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of envcheck (1 thread), engine, floor, in turn")
    parser.add_argument("--token-tags", type=int, default=1_000)
    parser.add_argument("--threads", default="4", help="further envcheck passes, once each")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = docker.from_env(timeout=120)
    registry = Registry("htpasswd")
    report: dict[str, Any] = {"host": host(), "commit": git_head(), "tags": args.tags,
                              "rounds": args.rounds}
    try:
        repo = new_repository("bench")
        digest = push_tiny(client, registry, repo, "seed")
        started = time.perf_counter()
        tags = create_tags(registry, repo, args.tags)
        print(f"{args.tags} tags created in {time.perf_counter() - started:.1f} s", flush=True)
        sample = tags[:: max(1, len(tags) // args.baseline)][: args.baseline]
        rounds: dict[str, list[dict[str, Any]]] = {"envcheck": [], "engine": [], "floor": []}
        for n in range(args.rounds):  # in turn, so that the machine's load hits all alike
            print(f"round {n + 1}", flush=True)
            rounds["envcheck"].append(envcheck_pass(registry, repo, tags, digest, 1))
            rounds["engine"].append(engine_pass(registry, repo, sample, digest))
            rounds["floor"].append(floor_pass(registry, repo, sample))
        report["rounds_measured"] = rounds
        report["envcheck"] = [best(rounds["envcheck"])] + [
            envcheck_pass(registry, repo, tags, digest, int(t))
            for t in args.threads.split(",") if t]
        report["engine"] = best(rounds["engine"])
        report["floor"] = best(rounds["floor"])
    finally:
        registry.close()
    if args.token_tags:
        report["token"] = token_pass(client, args.token_tags)
    client.close()

    one = report["envcheck"][0]
    engine = report["engine"]
    print(f"\nmedian of {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"{'':34} {'checks/s':>9} {'requests/check':>15}  requests")
    for row in report["envcheck"]:
        print(f"{'envcheck, ' + str(row['threads']) + ' thread(s)':34} "
              f"{row['checks_per_s']:>9.0f} {row['requests_per_check']:>15.4f}  "
              f"{row['requests']}")
    print(f"{'engine inspect_distribution':34} {engine['checks_per_s']:>9.0f} "
          f"{engine['requests_per_check']:>15.4f}  {engine['requests']}")
    print(f"{'floor (bare HEAD)':34} {report['floor']['checks_per_s']:>9.0f}")
    if "token" in report:
        tok = report["token"]
        print(f"{'envcheck, token auth':34} {tok['checks_per_s']:>9.0f} "
              f"{tok['requests_per_check']:>15.4f}  {tok['requests']}")
    ratio = one["checks_per_s"] / engine["checks_per_s"]
    report["ratio_checks_per_s"] = round(ratio, 2)
    report["ratio_requests_per_check"] = round(
        engine["requests_per_check"] / one["requests_per_check"], 2)
    report["floor_share"] = round(one["checks_per_s"] / report["floor"]["checks_per_s"], 2)
    verdict = "PASS" if one["checks_per_s"] >= TARGET_CHECKS_PER_S else "not met"
    print(f"\nenvcheck / engine: {ratio:.1f}x the checks per second, "
          f"{report['ratio_requests_per_check']:.1f}x fewer registry requests per check; "
          f"{report['floor_share']:.2f}x the floor's checks per second; one thread "
          f"{one['checks_per_s']:.0f} checks/s (target {TARGET_CHECKS_PER_S:.0f}: {verdict})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
