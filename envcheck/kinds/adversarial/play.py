"""One trick played in a sandbox as the agent's only action, and whether it acted at all.

What a trick needs comes in two ways. Fixed-size values (the workdir, the report's path) are
environment variables. What grows with the task (the fail-to-pass ids, their files, the
forged report, which names every declared test) is copied in as files beside the script,
each named by a ``*_FILE`` variable: Linux refuses any one environment string over 128 KiB
(MAX_ARG_STRLEN), and the forged report of 3,000 ids is 240 KB, which kept the trick's shell
from starting at all.

A trick that did not act proves nothing about the verifier: :func:`could_not_act` says why,
and the controls count it apart from the tricks the verifier refused.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from envcheck.catalogue.models import Environment
from envcheck.core.results import CommandEvidence
from envcheck.kinds.adversarial.library import Trick
from envcheck.kinds.startup import READY
from envcheck.sandbox.base import Sandbox

__all__ = ["LABEL", "TRICK_DIR", "Target", "could_not_act", "own_command", "play"]

# Like the oracle: not under /tmp, a tmpfs the engine cannot copy into.
TRICK_DIR = "/var/tmp/envcheck/trick"
LABEL = "trick "  # how the trick's own command is labelled in the evidence
SAID_MAX = 200  # characters of a trick's last line quoted in why it could not act


@dataclass(frozen=True)
class Target:
    """What the tricks aim at, as the protocol knows it; handed to them as variables."""

    workdir: str
    fail_to_pass: tuple[str, ...]
    report_path: str  # the report or reward file the verifier reads
    forged_report: str  # what a forger writes there: a passing report, or the reward
    verifier_dirs: tuple[str, ...]  # where the verifier's own files land before verifying

    @property
    def test_files(self) -> tuple[str, ...]:
        """Files holding the fail-to-pass tests (pytest ids ``path::name``), workdir-relative."""
        paths = (t.partition("::")[0] for t in self.fail_to_pass if "::" in t)
        return tuple(dict.fromkeys(p for p in paths if "/" in p or p.endswith(".py")))

    def payloads(self) -> dict[str, str]:
        """What grows with the task, by the variable that names its file: lists one item a
        line, the forged report as written."""
        def lines(items: Sequence[str]) -> str:
            return "".join(f"{item}\n" for item in items)

        return {"ENVCHECK_F2P_FILE": lines(self.fail_to_pass),
                "ENVCHECK_TEST_FILES_FILE": lines(self.test_files),
                "ENVCHECK_FORGED_REPORT_FILE": self.forged_report + "\n",
                "ENVCHECK_VERIFIER_DIRS_FILE": lines(self.verifier_dirs)}

    def variables(self) -> dict[str, str]:
        """The trick's environment: fixed-size values, and where each payload's file is."""
        files = {name: f"{TRICK_DIR}/{payload_file(name)}" for name in self.payloads()}
        return {"ENVCHECK_WORKDIR": self.workdir, "ENVCHECK_REPORT": self.report_path, **files}


def payload_file(variable: str) -> str:
    """``ENVCHECK_F2P_FILE`` -> ``f2p``: the payload's file name in :data:`TRICK_DIR`."""
    return variable.removeprefix("ENVCHECK_").removesuffix("_FILE").lower()


def _archive(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar of ``files`` (name -> content, mode), owned by root: one copy into the sandbox."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (content, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, int(time.time())
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def play(sandbox: Sandbox, env: Environment, trick: Trick, target: Target) -> CommandEvidence:
    """Run ``trick`` in ``sandbox`` as the sandbox user, in the workdir: the agent's only
    action. Whether it earns the reward is the verifier's answer; whether it acted at all,
    :func:`could_not_act`'s (the shell prints :data:`READY` before the trick starts)."""
    sandbox.exec(["mkdir", "-p", "-m", "0755", TRICK_DIR], user="0",
                 timeout_s=env.timeouts.exec_s)
    files = {trick.script: (trick.text.encode(), 0o755)}
    files |= {payload_file(k): (v.encode(), 0o644) for k, v in target.payloads().items()}
    sandbox.put_archive(TRICK_DIR, _archive(files))
    command = trick.command(f"{TRICK_DIR}/{trick.script}")
    script = f"cd -- {shlex.quote(target.workdir)} || exit 1\necho {READY}\n{command}"
    result = sandbox.exec([env.shell, "-c", script], user=env.user, env=target.variables(),
                          timeout_s=env.timeouts.exec_s,
                          output_limit=env.limits.output_kb * 1024)
    return result.evidence(f"{LABEL}{trick.name}: {command}")


def own_command(evidence: Sequence[CommandEvidence]) -> CommandEvidence | None:
    """The trick's own command among a run's evidence; None: it never ran."""
    return next((e for e in evidence if e.command.startswith(LABEL)), None)


def could_not_act(played: CommandEvidence | None, changed: Sequence[str] | None = None,
                  problem: str | None = None) -> str | None:
    """Why the trick proves nothing, or None when it acted. ``played``: its own command (None:
    the run stopped before it, for ``problem``); ``changed``: what the protocol saw it change
    in the repository (None where the protocol cannot tell). A trick exits 0 when it did
    what the sandbox let it do; a command that did not start, or that failed or was killed
    with nothing changed to show for it, never acted."""
    if played is None:
        return f"it never ran: {problem}" if problem else "it never ran"
    output = played.output_tail or played.output_head
    said = [line.strip() for line in output.splitlines() if line.strip() and line != READY]
    last = said[-1][:SAID_MAX] if said else f"exit {played.exit_code}, no output"
    if READY not in played.output_head:
        return f"its command did not start: {last}"
    if changed or (played.exit_code == 0 and not played.timed_out):
        return None
    if played.timed_out:
        return f"it ran past {played.duration_s:.3g}s and was killed"
    return f"it exited {played.exit_code}: {last}"
