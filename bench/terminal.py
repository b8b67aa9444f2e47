"""Benchmark: envcheck's terminal probe against the bare docker CLI doing the same checks.

    .venv/bin/python bench/terminal.py [--rounds N] [--env ID ...] [--json OUT]

Per round, over the demo fleet and serially per environment:

A. envcheck: ``run_cycle(envs, [ProbeKind.TERMINAL], runtime, run_id, concurrency=1)`` on one
   long-lived ``DockerRuntime`` (as the daemon holds it), no store;
B. the floor: the docker CLI doing the same work: ``docker run -d`` with envcheck's hardening
   flags, ``docker exec -u USER CID SHELL -l -c SCRIPT`` with the very same script, a TTY
   round trip of ``docker exec -it ... SHELL -i`` driven through a pseudo-terminal (the same two
   typed commands, waited for as envcheck waits), then ``docker rm -f -v``.

Rounds alternate A B A B ... so drift (page cache, engine state, other load) hits both alike.
The report gives per-environment and total medians, their ratio envcheck/floor against the
target, a per-phase breakdown of both sides and the peak RSS. The exit status is 0 whatever the
ratio; 1 if the benchmark itself broke (a crash, or a container it made was left behind).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import resource
import select
import shutil
import socket
import struct
import subprocess
import sys
import termios
import time
import tty
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    TimedSandbox,
    git_head,
    host,
    median,
    proc_stat_fields,
    proc_status_kib,
)

from envcheck.catalogue.loader import load_catalogue
from envcheck.catalogue.models import Environment
from envcheck.core.results import ProbeKind, ProbeResult
from envcheck.executors.cycle import new_run_id, run_cycle
from envcheck.kinds.terminal import (
    DONE,
    PTY_COMMAND,
    PTY_ECHO,
    PTY_OUTPUT,
    READY,
    SYNC_COMMAND,
    SYNC_OUTPUT,
    login_script,
)
from envcheck.sandbox.base import Sandbox, SandboxSpec
from envcheck.sandbox.docker import DockerRuntime
from envcheck.sandbox.labels import LABEL_ENV, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN

CATALOGUE = ROOT / "probes" / "demo.yaml"
# demo-slow-shell sleeps ~4 s per shell by design; demo-image-missing has no image.
DEFAULT_SKIP = ("demo-image-missing", "demo-slow-shell")
TARGET_RATIO = 1.3
PHASES_ENVCHECK = ("digest", "start", "login", "tty", "rm", "other")
PHASES_FLOOR = ("start", "login", "tty", "rm", "other")
# Labels the bench puts on its own (floor) containers, besides envcheck's.
LABEL_BENCH = "org.envcheck.bench"

log = logging.getLogger("bench.terminal")


class BenchError(Exception):
    """The benchmark itself cannot go on (not a finding about envcheck)."""


# --- timing records -------------------------------------------------------------------------


@dataclass
class EnvTiming:
    """One environment in one round: wall time, phases, and what the checks saw."""

    env_id: str
    started: float = 0.0
    wall_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    outcome: str = ""

    def add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def close(self, wall_s: float) -> None:
        self.wall_s = wall_s
        self.phases["other"] = max(wall_s - sum(v for k, v in self.phases.items()
                                                if k != "other"), 0.0)


@dataclass
class Round:
    side: str  # "envcheck" | "floor"
    run_id: str
    wall_s: float = 0.0
    envs: list[EnvTiming] = field(default_factory=list)


# --- A: envcheck, timed by a transparent wrapper around its runtime ---------------------------


class TimedRuntime:
    """envcheck's ``DockerRuntime`` with a record per environment of the current cycle.

    With ``concurrency=1`` the cycle handles environments one after the other, in order, and
    each begins with ``image_digest``: that call opens the environment's record.
    """

    def __init__(self, inner: DockerRuntime) -> None:
        self._inner = inner
        self.records: list[EnvTiming] = []

    def begin(self) -> None:
        self.records = []

    def close(self) -> None:
        self._inner.close()

    def ping(self) -> None:
        self._inner.ping()

    def reap(self) -> int:
        return self._inner.reap()

    def image_digest(self, image: str) -> str:
        record = EnvTiming(env_id="?", started=time.monotonic())
        self.records.append(record)
        try:
            return self._inner.image_digest(image)
        finally:
            record.add("digest", time.monotonic() - record.started)

    @contextmanager
    def sandbox(self, spec: SandboxSpec) -> Iterator[Sandbox]:
        record = self.records[-1]
        record.env_id = spec.env_id
        started = time.monotonic()
        removing = started
        with self._inner.sandbox(spec) as sandbox:
            record.add("start", time.monotonic() - started)
            try:
                yield TimedSandbox(sandbox, record)
            finally:
                removing = time.monotonic()
        record.add("rm", time.monotonic() - removing)


def envcheck_round(envs: Sequence[Environment], runtime: TimedRuntime) -> Round:
    result = Round("envcheck", new_run_id())
    runtime.begin()
    started = time.monotonic()
    results = run_cycle(envs, [ProbeKind.TERMINAL], runtime, result.run_id, concurrency=1)
    ended = time.monotonic()
    result.wall_s = ended - started
    records = runtime.records
    if len(records) != len(envs):
        raise BenchError(f"envcheck checked {len(records)} environments, expected {len(envs)}")
    by_env: dict[str, ProbeResult] = {r.env_id: r for r in results}
    for i, (env, record) in enumerate(zip(envs, records, strict=True)):
        if record.env_id not in ("?", env.id):
            raise BenchError(f"envcheck checked {record.env_id} where {env.id} was expected")
        record.env_id = env.id
        nxt = records[i + 1].started if i + 1 < len(records) else ended
        record.close(nxt - record.started)
        verdict = by_env.get(env.id)
        record.outcome = f"{verdict.status}/{verdict.reason}" if verdict else "no result"
    result.envs = records
    return result


# --- B: the floor, the docker CLI ---------------------------------------------------------


def process_token() -> str:
    """host:pid:start-time, as envcheck labels its containers' owner (``envcheck reap``)."""
    pid = os.getpid()
    start = proc_stat_fields(pid)[19]
    return f"{socket.gethostname()}:{pid}:{start}"


class DockerCli:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        # no "What's next" hints; nothing else changes the CLI's work
        self.env = {**os.environ, "DOCKER_CLI_HINTS": "false"}
        self.owner = process_token()

    def run(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([self.binary, *args], capture_output=True, timeout=timeout_s,
                              env=self.env, check=False)

    def text(self, *args: str) -> str:
        proc = self.run(*args)
        if proc.returncode != 0:
            raise BenchError(f"docker {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
        return proc.stdout.decode().strip()

    def run_args(self, env: Environment, run_id: str) -> list[str]:
        """``docker run`` with the flags of envcheck's ``sandbox.hardening.create_args``."""
        lim = env.limits
        labels = {LABEL_MANAGED: "true", LABEL_RUN: run_id, LABEL_ENV: env.id,
                  LABEL_OWNER: self.owner, LABEL_BENCH: "floor"}
        args = ["run", "-d", "--pull", "never", "--init",
                "--network", "none", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges:true",
                "--pids-limit", str(lim.pids),
                "--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m",
                "--cpus", str(lim.cpus),
                "--tmpfs", f"/tmp:rw,nosuid,nodev,size={lim.tmpfs_mb}m,mode=1777",
                "--hostname", "sandbox"]
        for key, value in labels.items():
            args += ["--label", f"{key}={value}"]
        return [*args, "--entrypoint", "sleep", env.image, "infinity"]

    def containers(self) -> list[tuple[str, str]]:
        """(id, run label) of every envcheck-managed container on the engine."""
        out = self.text("ps", "-a", "--no-trunc", "--filter", f"label={LABEL_MANAGED}",
                        "--format", '{{.ID}} {{.Label "' + LABEL_RUN + '"}}')
        rows = [line.split(" ", 1) for line in out.splitlines() if line.strip()]
        return [(row[0], row[1] if len(row) > 1 else "") for row in rows]

    def remove(self, ids: Sequence[str]) -> None:
        if ids:
            self.run("rm", "-f", "-v", *ids)


def login_failure(text: str, code: int) -> str | None:
    """What envcheck's ``_exec_failure`` would call it: the shell did not run at all."""
    low = text.lower()
    if "unable to find user" in low or "no matching entries in passwd" in low:
        return "user-missing"
    if code in (126, 127) and READY not in text and (
        "no such file" in low or "not found" in low or "permission denied" in low
    ):
        return "shell-missing"
    return None


def read_until(fd: int, seen: bytearray, marker: bytes, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while marker not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 64 * 1024)
        except OSError:  # EIO: the other side of the pty is closed, the CLI is gone
            chunk = b""
        if not chunk:
            return marker in seen
        seen += chunk
    return True


def floor_tty(cli: DockerCli, cid: str, env: Environment) -> str:
    """``docker exec -it`` on a pty: type the probe's two commands, wait as envcheck does."""
    master, slave = os.openpty()
    # Raw from the start: bytes typed before the CLI attaches must not be echoed or edited by
    # the local line discipline (the CLI would set raw mode itself a moment later).
    tty.setraw(slave)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    argv = [cli.binary, "exec", "-it", "-e", "TERM=xterm", "-u", env.user, cid, env.shell, "-i"]
    try:
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=cli.env,
                                start_new_session=True)
    finally:
        os.close(slave)
    try:
        seen = bytearray()
        os.write(master, SYNC_COMMAND)
        if not read_until(master, seen, SYNC_OUTPUT, env.timeouts.exec_s):
            return "no-answer"
        mark = len(seen)
        os.write(master, PTY_COMMAND)
        answered = read_until(master, seen, PTY_OUTPUT, env.timeouts.shell_s + 1.0)
        os.write(master, b"exit\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        if not answered:
            return "no-output"
        return "ok" if PTY_ECHO in seen[mark:] else "no-echo"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def floor_env(cli: DockerCli, env: Environment, run_id: str) -> EnvTiming:
    record = EnvTiming(env.id, started=time.monotonic())
    cid: str | None = None
    clean = False
    try:
        mark = time.monotonic()
        proc = cli.run(*cli.run_args(env, run_id), timeout_s=env.timeouts.start_s + 30)
        record.add("start", time.monotonic() - mark)
        if proc.returncode != 0:
            record.outcome = "start-failed"
            clean = True
            return record
        cid = proc.stdout.decode().strip()

        mark = time.monotonic()
        try:
            login = cli.run("exec", "-u", env.user, cid, env.shell, "-l", "-c",
                            login_script(env), timeout_s=env.timeouts.exec_s)
            text = (login.stdout + login.stderr).decode("utf-8", "replace")
            failure = login_failure(text, login.returncode)
        except subprocess.TimeoutExpired:
            failure = "timeout"
        record.add("login", time.monotonic() - mark)
        if failure is not None:
            record.outcome = f"login={failure}"
        else:
            login_state = "ok" if DONE in text else "broken"
            mark = time.monotonic()
            tty_state = floor_tty(cli, cid, env)
            record.add("tty", time.monotonic() - mark)
            record.outcome = f"login={login_state} tty={tty_state}"

        mark = time.monotonic()
        removed = cli.run("rm", "-f", "-v", cid)
        record.add("rm", time.monotonic() - mark)
        clean = removed.returncode == 0
    finally:
        if not clean:  # crashed or rm failed: sweep (untimed) by this round's label
            leftover = [c for c, run in cli.containers() if run == run_id]
            cli.remove(leftover)
    record.close(time.monotonic() - record.started)
    return record


def floor_round(envs: Sequence[Environment], cli: DockerCli) -> Round:
    result = Round("floor", new_run_id())
    started = time.monotonic()
    for env in envs:
        result.envs.append(floor_env(cli, env, result.run_id))
    result.wall_s = time.monotonic() - started
    return result


# --- reporting ----------------------------------------------------------------------------


def summarize(envs: Sequence[Environment], rounds: Sequence[Round]) -> dict[str, Any]:
    sides: dict[str, Any] = {}
    for side, phases in (("envcheck", PHASES_ENVCHECK), ("floor", PHASES_FLOOR)):
        mine = [r for r in rounds if r.side == side]
        per_env: dict[str, Any] = {}
        for i, env in enumerate(envs):
            samples = [r.envs[i] for r in mine]
            per_env[env.id] = {
                "median_s": median([s.wall_s for s in samples]),
                "min_s": min(s.wall_s for s in samples),
                "samples_s": [round(s.wall_s, 5) for s in samples],
                "phases_median_s": {p: median([s.phases.get(p, 0.0) for s in samples])
                                    for p in phases},
                "outcomes": sorted({s.outcome for s in samples}),
            }
        sides[side] = {
            "total_median_s": median([r.wall_s for r in mine]),
            "total_min_s": min(r.wall_s for r in mine),
            "total_samples_s": [round(r.wall_s, 5) for r in mine],
            # fleet sum of each phase per round, then the median over rounds
            "phases_median_s": {p: median([sum(e.phases.get(p, 0.0) for e in r.envs)
                                           for r in mine]) for p in phases},
            "envs": per_env,
        }
    ratio = sides["envcheck"]["total_median_s"] / sides["floor"]["total_median_s"]
    return {"sides": sides, "ratio": ratio, "target_ratio": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO}


def print_report(envs: Sequence[Environment], summary: dict[str, Any],
                 extra: dict[str, Any]) -> None:
    ec, fl = summary["sides"]["envcheck"], summary["sides"]["floor"]
    width = max([len(e.id) for e in envs] + [5])
    print(f"\n{'environment':<{width}}  {'envcheck':>9}  {'floor':>9}  {'ratio':>5}  "
          f"envcheck verdict / floor saw")
    for env in envs:
        a, b = ec["envs"][env.id], fl["envs"][env.id]
        print(f"{env.id:<{width}}  {a['median_s']:>8.3f}s  {b['median_s']:>8.3f}s  "
              f"{a['median_s'] / b['median_s']:>5.2f}  "
              f"{','.join(a['outcomes'])} / {','.join(b['outcomes'])}")
    verdict = "PASS" if summary["pass"] else "FAIL"
    print(f"{'TOTAL':<{width}}  {ec['total_median_s']:>8.3f}s  {fl['total_median_s']:>8.3f}s  "
          f"{summary['ratio']:>5.2f}  {verdict} (target envcheck/floor <= {TARGET_RATIO})")
    print(f"\nphases, fleet sum per round, median over {extra['rounds']} rounds (s):")
    print(f"  {'phase':<8} {'envcheck':>9} {'floor':>9}")
    for phase in PHASES_ENVCHECK:
        a = ec["phases_median_s"].get(phase)
        b = fl["phases_median_s"].get(phase)
        fa = f"{a:>9.3f}" if a is not None else f"{'-':>9}"
        fb = f"{b:>9.3f}" if b is not None else f"{'-':>9}"
        print(f"  {phase:<8} {fa} {fb}")
    rss = extra["rss"]
    print(f"\npeak RSS: this process {rss['peak_mib']:.1f} MiB "
          f"(after imports and setup {rss['after_setup_mib']:.1f} MiB); "
          f"largest docker CLI child {rss['children_peak_mib']:.1f} MiB")
    print(f"docker CLI no-op round trip (docker version): {extra['cli_noop_median_s']:.3f}s "
          f"median, paid once per floor command (4 per environment)")


# --- main ---------------------------------------------------------------------------------


def select_envs(catalogue: Path, wanted: Sequence[str], cli: DockerCli) -> list[Environment]:
    everything = load_catalogue([catalogue]).environments
    known = {e.id: e for e in everything}
    if wanted:
        ids = [i for item in wanted for i in item.split(",") if i]
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise BenchError(f"not in {catalogue}: {', '.join(unknown)}")
        chosen = [known[i] for i in ids]
    else:
        chosen = [e for e in everything if e.id not in DEFAULT_SKIP]
    present: list[Environment] = []
    for env in chosen:
        if cli.run("image", "inspect", "--format", "{{.Id}}", env.image).returncode == 0:
            present.append(env)
        elif wanted:
            log.warning("%s: image %s is missing; benchmarking it anyway", env.id, env.image)
            present.append(env)
        else:
            log.warning("%s: image %s is missing; skipped", env.id, env.image)
    if not present:
        raise BenchError("no environment to benchmark (build the demo images first)")
    return present


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="unmeasured rounds first (default 1)")
    parser.add_argument("--env", action="append", default=[], metavar="ID",
                        help="environment id (repeat or comma-separate); default: the demo "
                             f"fleet with images, minus {', '.join(DEFAULT_SKIP)}")
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    return args


def check_leaks(cli: DockerCli, run_ids: set[str], *, warn: bool = False) -> list[str]:
    """Remove and return this benchmark's leftover containers; maybe warn about others'."""
    found = cli.containers()
    ours = [cid for cid, run in found if run in run_ids]
    foreign = len(found) - len(ours)
    if foreign and warn:
        log.warning("%d envcheck-managed container(s) of another process are on the engine "
                    "(not this benchmark's; left alone)", foreign)
    if ours:
        print(f"bench: removing {len(ours)} container(s) of this benchmark left behind",
              file=sys.stderr)
        cli.remove(ours)
    return ours


def bench(args: argparse.Namespace) -> int:
    binary = shutil.which("docker")
    if binary is None:
        raise BenchError("the docker CLI is not on PATH")
    cli = DockerCli(binary)
    envs = select_envs(args.catalogue, args.env, cli)
    runtime = TimedRuntime(DockerRuntime.from_env())
    if cli.containers():
        log.warning("envcheck-managed containers already exist: something else is using the "
                    "engine and may disturb the timings")
    run_ids: set[str] = set()
    rounds: list[Round] = []
    noop: list[float] = []
    after_setup = proc_status_kib("VmRSS")
    total = args.warmup + args.rounds
    try:
        for n in range(total):
            label = "warm-up" if n < args.warmup else f"round {n - args.warmup + 1}/{args.rounds}"
            pair = []
            for side in ("envcheck", "floor"):
                done = (envcheck_round(envs, runtime) if side == "envcheck"
                        else floor_round(envs, cli))
                run_ids.add(done.run_id)
                pair.append(done)
            mark = time.monotonic()
            cli.text("version", "--format", "{{.Server.APIVersion}}")
            noop.append(time.monotonic() - mark)
            leaked = check_leaks(cli, run_ids)
            if leaked:
                raise BenchError(f"{label}: {len(leaked)} container(s) left behind: {leaked}")
            print(f"{label}: envcheck {pair[0].wall_s:.3f}s  floor {pair[1].wall_s:.3f}s",
                  file=sys.stderr, flush=True)
            if n >= args.warmup:
                rounds.extend(pair)
    finally:
        leaked = check_leaks(cli, run_ids, warn=True)
        runtime.close()
    if leaked:
        raise BenchError(f"{len(leaked)} container(s) left behind: {leaked}")

    summary = summarize(envs, rounds)
    extra: dict[str, Any] = {
        "rounds": args.rounds,
        "warmup": args.warmup,
        "environments": [e.id for e in envs],
        "cli_noop_median_s": median(noop),
        "rss": {
            "after_setup_mib": after_setup / 1024,
            "peak_mib": proc_status_kib("VmHWM") / 1024,
            "children_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        },
        "host": host(
            docker_server=cli.text("version", "--format", "{{.Server.Version}}"),
            docker_client=cli.text("version", "--format", "{{.Client.Version}}"),
            git=git_head(), at=datetime.now(UTC).isoformat(timespec="seconds")),
    }
    print_report(envs, summary, extra)
    if args.json:
        args.json.write_text(json.dumps({**extra, **summary}, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        return bench(args)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
