"""The README's two commands as a new user meets them: a fresh clone, one command after the
other in fresh shells, and every command the scripts print pasted as printed; then the
tutorial (docs/tutorial.md), every command of it as written, beside the running main job.

The outer test command (``scripts/test.sh``) has already run the set-up; these tests then run
the main job from a fresh clone, so together they are "test.sh, then run.sh".
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT
from tests.docs_pages import blocks, page
from tests.polling import wait_for
from tests.ports import free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DEFAULT_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "envcheck-setup.lock"


def lock_holders(lock: Path) -> list[str]:
    """``pid (command)`` of every process that has ``lock`` open."""
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            targets = [os.readlink(fd) for fd in fd_dir.iterdir()]
            comm = (fd_dir.parent / "comm").read_text().strip()
        except OSError:  # the process ended, or is not ours to read
            continue
        if str(lock) in targets:
            found.append(f"{fd_dir.parent.name} ({comm})")
    return found


def new_shell_env(**extra: str) -> dict[str, str]:
    """A new login's environment: none of this session's envcheck variables or venv."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "ENVCHECK_CONTAINER_TAG")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = ":".join(p for p in env.get("PATH", "/usr/bin:/bin").split(":")
                           if ".venv" not in p)
    env.update(extra)
    return env


def test_setup_leaves_nothing_holding_its_lock() -> None:
    """The set-up of this very test run (and the dockerd it may have started) let go of the
    lock: a second set-up would otherwise wait forever."""
    proc = subprocess.run([str(ROOT / "scripts" / "setup.sh")], env=new_shell_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lock_holders(DEFAULT_LOCK) == []


def test_a_held_lock_is_waited_for_with_a_word_then_given_up(tmp_path: Path) -> None:
    lock = tmp_path / "setup.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.run(
            [str(ROOT / "scripts" / "setup.sh")],
            env=new_shell_env(ENVCHECK_SETUP_LOCK=str(lock), ENVCHECK_SETUP_LOCK_WAIT_S="2"),
            capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "waiting up to 2 s for another envcheck setup" in proc.stdout
    assert f"{os.getpid()} (" in proc.stdout  # names who holds it
    [error] = proc.stderr.strip().splitlines()
    assert "still holds" in error and "ENVCHECK_SETUP_LOCK_WAIT_S" in error


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "envcheck"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
                   check=True, timeout=120)
    return clone


@pytest.fixture
def main_job(fresh_clone: Path) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``scripts/run.sh`` in the fresh clone, until it has printed where to look."""
    # the demo's tag move 5 s after the pushes, not minutes: the test sees the moved digest
    # pulled and probed without waiting for a move in the middle of the run
    env = new_shell_env(ENVCHECK_PORT=str(free_port()),
                        ENVCHECK_DASHBOARD_PORT=str(free_port()), ENVCHECK_DEMO_TAG_MOVE_S="5")
    proc = subprocess.Popen([str(fresh_clone / "scripts" / "run.sh")], cwd=fresh_clone,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # run.sh prints its message once everything answers
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C to stop."):
                break
        assert lines and lines[-1].startswith("Ctrl-C"), "\n".join(lines)
        yield proc, lines
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def paste(line: str, cwd: Path) -> str:
    """Do with one printed line what a user does with it; returns what was checked."""
    value = re.split(r"\s{2,}", line.strip(), maxsplit=1)[1]
    urls = re.findall(r"http://[^\s)]+", value)
    if urls:
        for url in urls:
            got = requests.get(url, timeout=30)
            assert got.status_code == 200, f"{url}: {got.status_code} {got.text[:200]}"
        return "urls " + " ".join(urls)
    if "envcheck " in value:
        proc = subprocess.run(["bash", "-c", value], cwd=cwd, env=new_shell_env(),
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode in (0, 1), f"{value}: {proc.returncode} {proc.stderr}"
        assert "unknown suite" not in proc.stderr and "Traceback" not in proc.stderr
        return "command " + value
    path = Path(shlex.split(value)[0])
    assert path.exists(), f"printed path {path} does not exist"
    return f"path {path}"


def tutorial_steps() -> tuple[str, list[str]]:
    """The tutorial's first block (what the main job fixture does) and the blocks after it."""
    first, *steps = blocks(page("tutorial.md"), "bash")
    return first, steps


def follow_the_tutorial(clone: Path, printed: list[str]) -> list[str]:
    """Every command of the tutorial after ``scripts/run.sh``, as written, in a new shell in
    the folder the clone is in (the tutorial's ``cd envcheck``), the ports the ones this main
    job printed; the output of each block."""
    first, steps = tutorial_steps()
    assert first.rstrip().endswith("scripts/run.sh"), first  # what main_job runs
    assert clone.name == "envcheck"
    [api] = re.findall(r"API\s+(http://127\.0\.0\.1:\d+)/docs", "\n".join(printed))
    [dashboard] = re.findall(r"dashboard\s+(http://127\.0\.0\.1:\d+)", "\n".join(printed))
    marker = "--- tutorial step {} ---"
    script = "\n".join(f"echo '{marker.format(i)}'; echo '{marker.format(i)}' >&2\n{step}"
                       for i, step in enumerate(steps))
    script = (script.replace("http://127.0.0.1:8787", api)
              .replace("http://127.0.0.1:8501", dashboard))
    proc = subprocess.run(["bash", "-c", script], cwd=clone.parent,
                          env=new_shell_env(COLUMNS="200"),  # a terminal's width
                          capture_output=True, text=True, timeout=600, check=False)
    outs = re.split(r"--- tutorial step \d+ ---\n", proc.stdout)[1:]
    errs = re.split(r"--- tutorial step \d+ ---\n", proc.stderr)[1:]
    assert len(outs) == len(errs) == len(steps), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return [out + err for out, err in zip(outs, errs, strict=True)]


def test_main_job_from_a_fresh_clone_prints_only_what_works(
        fresh_clone: Path, main_job: tuple[subprocess.Popen[str], list[str]],
        tmp_path: Path) -> None:
    proc, lines = main_job
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    start = next(i for i, line in enumerate(lines) if line.startswith("envcheck is running"))
    printed = [line for line in lines[start + 1:-1] if not line.strip().startswith("(")]
    checked = [paste(line, elsewhere) for line in printed]
    assert sum(c.startswith("command") for c in checked) >= 1, checked
    assert sum(c.startswith("urls") for c in checked) >= 3, checked

    # The tutorial, beside this main job: its commands as written, what it says they show.
    check, quarantine, schedulers, own = follow_the_tutorial(fresh_clone, lines)
    assert re.search(r"demo-tool-missing\s+terminal\s+fail\s+tool_missing", check), check
    assert re.search(r"demo-healthy\s+terminal\s+pass\s+ok", check), check
    assert re.search(r"demo-image-missing\s+terminal\s+error\s+image_missing", check), check
    assert re.search(r"│ demo-tool-missing\s+│ demo\s+│ broken\s+│ auto", quarantine), quarantine
    assert "-> in" in quarantine  # the history: the transition into quarantine
    assert ("excluded demo-tool-missing: quarantined (auto): broken: terminal: tool_missing"
            in schedulers), schedulers
    assert '"suite":"demo"' in schedulers.replace(" ", "") and "allowlist-demo.txt" in schedulers
    assert re.search(r"my-first-environment\s+terminal\s+pass\s+ok", own), own

    # The other README command's set-up, in a fresh shell while the main job runs: it neither
    # waits on a lock nor reinstalls the venv (same extras, or a subset of them).
    for extras in (None, "dev"):
        extra = {"ENVCHECK_EXTRAS": extras} if extras else {}
        again = subprocess.run([str(fresh_clone / "scripts" / "setup.sh")], cwd=elsewhere,
                               env=new_shell_env(**extra), capture_output=True, text=True,
                               timeout=300, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "venv: up to date" in again.stdout and "waiting" not in again.stdout
    assert proc.poll() is None, "the main job stopped"
    moved = the_demo_registry_is_followed(fresh_clone, api_url(lines))

    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=180) in (0, 130, -signal.SIGINT)
    log = (fresh_clone / ".envcheck" / "daemon.log").read_text()
    assert "daemon stopped" in log
    if moved:  # this main job's own registry: stopped with it
        assert not registry_processes(fresh_clone)


DEMO_REGISTRY = "127.0.0.1:5055"  # probes/demo-registry.yaml names it


def api_url(printed: list[str]) -> str:
    [api] = re.findall(r"API\s+(http://127\.0\.0\.1:\d+)/docs", "\n".join(printed))
    return api


def registry_processes(clone: Path) -> list[str]:
    """The command lines of the registries serving a config under ``clone``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"docker-registry") and str(clone).encode() in b" ".join(args):
            found.append(b" ".join(args).decode(errors="replace"))
    return found


def the_demo_registry_is_followed(clone: Path, api: str) -> bool:
    """The demo's registry listens on loopback alone and holds the pushed demo images; each
    registry-backed environment shows in the API with the digest its tag names, the moved
    tag's new digest included. True when this main job started the registry itself (another
    checkout's run may serve that port already)."""
    own = bool(registry_processes(clone))
    listening = subprocess.run(["ss", "-ltnH", "sport = :5055"], capture_output=True,
                               text=True, timeout=30, check=True).stdout.split()
    assert [a for a in listening if a.endswith(":5055")] == [DEMO_REGISTRY], listening
    demo_log = clone / ".envcheck" / "registry" / "demo.log"
    wanted = {"demo-registry-tool-missing": "envcheck-demo/tool-missing",
              "demo-registry-healthy": "envcheck-demo/healthy"}
    if own:  # the move 5 s in (ENVCHECK_DEMO_TAG_MOVE_S): a line naming both digests
        wait_for(lambda: "moved " in demo_log.read_text(), timeout_s=60, interval_s=1,
                 what="the demo's tag move", details=demo_log.read_text)
        assert re.search(r"moved \S+/envcheck-demo/healthy:latest at \S+: sha256:\w+ -> "
                         r"sha256:\w+", demo_log.read_text()), demo_log.read_text()
    accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                        "application/vnd.oci.image.manifest.v1+json"])

    def tag(name: str) -> str:
        return requests.head(f"http://{DEMO_REGISTRY}/v2/{name}/manifests/latest",
                             headers={"Accept": accept}, timeout=10
                             ).headers["Docker-Content-Digest"]

    def current(env_id: str) -> str | None:
        doc = requests.get(f"{api}/v1/environments/{env_id}/digests", timeout=30).json()
        assert doc["watched"] is True and doc["image"].startswith(DEMO_REGISTRY), doc
        return next((d["image_digest"] for d in doc["digests"] if d["current"]), None)

    def seen() -> dict[str, tuple[str | None, str]]:
        return {env: (current(env), tag(name)) for env, name in wanted.items()}

    # A look at the tags now, as the demo's page says, beside the main job and into its store
    # (the daemon gets to them too, but only once through a fresh store's backlog).
    looked = subprocess.run(
        ["bash", "-c", "export ENVCHECK_DATA_DIR=$PWD/.envcheck\n"
                       ".venv/bin/envcheck check probes/demo-registry.yaml -p image"],
        cwd=clone, env=new_shell_env(), capture_output=True, text=True, timeout=120,
        check=False)
    # the never-pushed tag: a first look is an error (exit 3); once the daemon's own look
    # an interval before is stored, the second confirms it missing, a fail (exit 1)
    assert looked.returncode in (1, 3), looked.stdout + looked.stderr
    for env_id, name in wanted.items():
        # a first look "names" the digest, a later one "still names" it or says it "moved"
        assert re.search(rf"{env_id}\s+image\s+pass\s+ok\s+\S+\s+\S+/{name}:latest "
                         rf"(?:(?:still )?names|moved: \S+ ->) {tag(name)}",
                         looked.stdout), looked.stdout
    never = {1: "fail", 3: "error"}[looked.returncode]
    assert re.search(rf"demo-registry-never-pushed\s+image\s+{never}\s+image_not_found",
                     looked.stdout), looked.stdout
    wait_for(lambda: all(now == at_tag for now, at_tag in seen().values()), timeout_s=60,
             interval_s=1, what="the registry-backed environments at their tags' digests",
             details=lambda: repr(seen()))
    return own


LONG_TOOLS = [f"a-tool-whose-name-is-long-{i}" for i in range(4)]


def test_check_output_is_readable_in_a_log(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Piped (a launch script's log): one aligned line per result, the reason and summary
    whole, however narrow the terminal the script ran from."""
    catalogue = tmp_path / "wide.yaml"
    catalogue.write_text(f"""version: 1
suites:
  wide:
    defaults: {{ workdir: /workspace, user: agent, tools: {LONG_TOOLS} }}
    environments:
      - {{ id: demo-wide, image: "envcheck-demo/healthy:latest" }}
""", encoding="utf-8")
    env = {k: v for k, v in cli_env.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "envcheck.cli.app", "check", str(catalogue), "--probe", "terminal"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["environment", "probe", "status", "reason", "seconds", "summary"]
    [row] = rows
    assert row.split()[:4] == ["demo-wide", "terminal", "fail", "tool_missing"]
    summary = row.split(None, 5)[5]
    assert all(tool in summary for tool in LONG_TOOLS)  # nothing cut at 80 columns
    from envcheck.store import open_store

    with open_store() as store:
        [stored] = store.latest_results(["demo-wide"])
    assert summary == " ".join(stored.summary.split())


def test_version() -> None:
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-m", "envcheck.cli.app", "--version"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout == f"envcheck {version('envcheck')}\n"
