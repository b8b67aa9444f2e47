"""Terminal availability: can an agent get a working shell in this sandbox, fast?

Two commands cover every check (batched, as one exec costs ~50-100 ms), side by side:
1. a login shell runs one script that reports the user, each required tool and the workdir;
   the time to its first byte is the login shell's ready latency;
2. an interactive shell on a TTY gets a command typed into it, as tmux-driven agents do; its
   echo and its output must come back, within the shell limit.
"""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envcheck.catalogue.models import Environment
from envcheck.core.depth import DepthAdvice
from envcheck.core.results import CommandEvidence, ProbeKind, Reason, Status
from envcheck.kinds.base import Probe, ProbeContext, Verdict
from envcheck.kinds.startup import READY, command_start_failure
from envcheck.sandbox.base import Sandbox, iter_lines

__all__ = ["TerminalProbe"]

DONE = "envcheck:done"
# Typed into the TTY: the echo shows the expression, only a real shell prints the value.
SYNC_COMMAND = b"echo envcheck-sync-$((1+1))\n"
SYNC_OUTPUT = b"envcheck-sync-2"
PTY_COMMAND = b"echo envcheck-pty-$((40+2))\n"
PTY_ECHO = b"envcheck-pty-$((40+2))"
PTY_OUTPUT = b"envcheck-pty-42"

# First problem in this order names the result; all are listed in details.
PRIORITY = [
    Reason.CONTAINER_START_FAILED,
    Reason.USER_MISSING,
    Reason.SHELL_MISSING,
    Reason.TIMEOUT,
    Reason.OUTPUT_FLOOD,
    Reason.LOGIN_SHELL_BROKEN,
    Reason.INTERACTIVE_SHELL_BROKEN,
    Reason.WORKDIR_MISSING,
    Reason.WORKDIR_NOT_WRITABLE,
    Reason.TOOL_MISSING,
    Reason.PTY_BROKEN,
    Reason.SHELL_SLOW,
    Reason.CONTAINER_START_SLOW,
]


def login_script(env: Environment) -> str:
    workdir = shlex.quote(env.workdir)
    tools = " ".join(shlex.quote(t) for t in env.tools)
    return f"""echo {READY}
echo "user $(id -un 2>/dev/null || echo '?') $(id -u 2>/dev/null || echo '?')"
for t in {tools}; do
  if p=$(command -v "$t" 2>/dev/null); then echo "tool ok $t $p"; else echo "tool missing $t"; fi
done
if [ -d {workdir} ]; then
  f={workdir}/.envcheck-probe-$$
  if ( : > "$f" ) 2>/dev/null; then rm -f "$f"; echo "workdir writable"
  else echo "workdir readonly"; fi
else
  echo "workdir missing"
fi
echo {DONE}
"""


@dataclass
class Findings:
    problems: list[tuple[Reason, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    evidence: list[CommandEvidence] = field(default_factory=list)

    def add(self, reason: Reason, detail: str) -> None:
        self.problems.append((reason, detail))

    def verdict(self) -> Verdict:
        self.details["problems"] = [{"reason": str(r), "detail": d} for r, d in self.problems]
        if not self.problems:
            latency = self.details.get("login_ready_s")
            return Verdict(Status.PASS, Reason.OK, f"terminal ready (login shell {latency}s)",
                           self.details, tuple(self.evidence))
        ranked = sorted(self.problems, key=lambda p: PRIORITY.index(p[0]))
        reason, detail = ranked[0]
        more = f" (+{len(ranked) - 1} more)" if len(ranked) > 1 else ""
        return Verdict(Status.FAIL, reason, detail + more, self.details, tuple(self.evidence))


# Problems of speed alone: on an image already proven fast, the host's (Reason.HOST_SLOW).
_SLOWNESS = frozenset({Reason.CONTAINER_START_SLOW, Reason.SHELL_SLOW})


def host_slow(verdict: Verdict, found: Findings, advice: DepthAdvice | None) -> Verdict:
    """A slow start or shell on the very image and spec a full probe proved fast (its digest
    cannot have changed) is the host's slowness: envcheck's ``error``, never the
    environment's failure."""
    reasons = {reason for reason, _ in found.problems}
    if advice is None or not advice.proven or not reasons or not reasons <= _SLOWNESS:
        return verdict
    proven = advice.full_at.isoformat(timespec="seconds") if advice.full_at else "before"
    return Verdict(Status.ERROR, Reason.HOST_SLOW,
                   f"{verdict.summary}; this image and spec passed in full at {proven}: the "
                   f"host is slow", verdict.details, verdict.evidence)


class TerminalProbe(Probe):
    kind = ProbeKind.TERMINAL
    reusable = True

    def check(self, ctx: ProbeContext) -> Verdict:
        env, found = ctx.env, Findings()
        sandbox = ctx.sandbox()
        found.details["container_start_s"] = round(sandbox.start_duration_s, 4)
        if sandbox.start_duration_s > env.timeouts.start_s:
            found.add(Reason.CONTAINER_START_SLOW,
                      f"container took {sandbox.start_duration_s:.2f}s to start "
                      f"(limit {env.timeouts.start_s}s)")
        # The interactive shell runs beside the login shell, not after it: each exec costs a
        # process start in the container, and neither shell waits for the other. Its findings
        # count only if a shell could run at all.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="envcheck-tty") as pool:
            typed = pool.submit(self._pty, sandbox, env)
            shell_ran = self._login(sandbox, env, found)
            session = typed.result()
        if shell_ran:
            session.judge(env, found)
        return host_slow(found.verdict(), found, ctx.advice)

    def _login(self, sandbox: Sandbox, env: Environment, found: Findings) -> bool:
        """Run the batched script in a login shell; False if no shell could run at all."""
        result = sandbox.exec([env.shell, "-l", "-c", login_script(env)], user=env.user,
                              timeout_s=env.timeouts.exec_s,
                              output_limit=env.limits.output_kb * 1024)
        found.evidence.append(result.evidence(f"{env.shell} -l -c <terminal checks>"))
        failure = command_start_failure(result, env.user, env.shell)
        if failure is not None:
            found.add(*failure)
            return False
        if result.timed_out:
            found.add(Reason.TIMEOUT, f"login shell did not finish in {env.timeouts.exec_s}s")
            return False
        if result.flooded:
            found.add(Reason.OUTPUT_FLOOD, "login shell flooded its output")
            return False
        lines = list(iter_lines(result.text))
        if [READY] not in lines or [DONE] not in lines:
            found.add(Reason.LOGIN_SHELL_BROKEN,
                      f"login shell exited {result.exit_code} before finishing the checks")
            return True
        latency = round(result.first_output_s or result.duration_s, 4)
        found.details["login_ready_s"] = latency
        if latency > env.timeouts.shell_s:
            found.add(Reason.SHELL_SLOW, f"login shell took {latency:.2f}s to answer "
                                         f"(limit {env.timeouts.shell_s}s)")
        self._parse(lines, found)
        return True

    @staticmethod
    def _parse(lines: list[list[str]], found: Findings) -> None:
        missing: list[str] = []
        tools: dict[str, str | None] = {}
        for parts in lines:
            match parts:
                case ["user", name, uid]:
                    found.details["user"] = {"name": name, "uid": uid}
                case ["tool", "ok", name, path]:
                    tools[name] = path
                case ["tool", "missing", name]:
                    tools[name] = None
                    missing.append(name)
                case ["workdir", "missing"]:
                    found.add(Reason.WORKDIR_MISSING, "workdir does not exist")
                case ["workdir", "readonly"]:
                    found.add(Reason.WORKDIR_NOT_WRITABLE, "workdir is not writable by the user")
        found.details["tools"] = tools
        if missing:
            found.add(Reason.TOOL_MISSING, f"not on PATH: {', '.join(missing)}")

    @staticmethod
    def _pty(sandbox: Sandbox, env: Environment) -> _Session:
        """Wait for the shell to answer a first command (its ready latency), then type the
        probe command as an agent would once the prompt is up, and look for its echo."""
        limit = env.timeouts.shell_s
        with sandbox.tty([env.shell, "-i"], user=env.user, env={"TERM": "xterm"}) as tty:
            started = time.monotonic()
            tty.send(SYNC_COMMAND)
            # Wait past the limit (up to the exec timeout) to tell slow from dead.
            ready = tty.read_until(SYNC_OUTPUT, env.timeouts.exec_s)
            latency = round(time.monotonic() - started, 4)
            mark = tty.transcript.total
            answered = False
            if ready:
                tty.send(PTY_COMMAND)
                answered = tty.read_until(PTY_OUTPUT, limit + 1.0)
                tty.send(b"exit\n")
            after = tty.seen()
            typed = after[max(len(after) - (tty.transcript.total - mark), 0):] if ready else b""
            seen = tty.transcript.text()
        evidence = CommandEvidence(
            command=f"{env.shell} -i  (tty: {PTY_COMMAND.decode().strip()})",
            exit_code=None, duration_s=latency, output_head=seen[-2000:],
            output_bytes=tty.transcript.total, truncated=tty.transcript.truncated,
            timed_out=not ready)
        return _Session(ready, answered, latency, PTY_ECHO in typed, evidence)


@dataclass(frozen=True, slots=True)
class _Session:
    """What the interactive shell on a TTY showed."""

    ready: bool  # answered the first command
    answered: bool  # printed the probe command's output
    latency: float
    echoed: bool  # echoed the typed probe command
    evidence: CommandEvidence

    def judge(self, env: Environment, found: Findings) -> None:
        found.evidence.append(self.evidence)
        if not self.ready:
            found.add(Reason.INTERACTIVE_SHELL_BROKEN,
                      f"interactive shell gave no answer on a TTY in {env.timeouts.exec_s}s")
            return
        limit = env.timeouts.shell_s
        found.details["interactive_ready_s"] = self.latency
        if self.latency > limit:
            found.add(Reason.SHELL_SLOW, f"interactive shell took {self.latency:.2f}s to "
                                         f"answer (limit {limit}s)")
        if not self.answered:
            found.add(Reason.PTY_BROKEN, "a command typed into the TTY gave no output")
        elif not self.echoed:
            found.add(Reason.PTY_BROKEN, "the TTY did not echo the typed command")
