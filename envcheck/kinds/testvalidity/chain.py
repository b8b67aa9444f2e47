"""A run's steps in one exec: the oracle, the tests and the report read, each still with its
own output, exit code and deadline.

An exec costs a process start in the container and three engine round trips (~0.1 s on a
loaded 2-core host), more than reading a report takes; a run used to pay two or three. Here
each step after the first begins at a marker line (a :class:`~envcheck.sandbox.base.Section`)
that carries the exit code of the step before it and restarts the deadline and the output
cap. Each step runs in a subshell with its stderr into stdout: one ordered stream, so none of
a step's output can arrive after the marker that ends it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from envcheck.sandbox.base import CappedOutput, ExecResult, Section

__all__ = ["Step", "chain_script", "split"]


@dataclass(frozen=True, slots=True)
class Step:
    script: str
    label: str
    timeout_s: float
    output_limit: int
    stop_unless_ok: bool = False  # the steps after it run only if it exits 0
    bare: bool = False  # the last step only: run as is (its exit code is the exec's)
    evidence: bool = True  # its output kept as the run's evidence


def chain_script(steps: Sequence[Step]) -> tuple[str, list[Section]]:
    """The script that runs ``steps`` in order (after whatever precedes it in the exec), and
    the sections that split its output: one per step after the first."""
    nonce = secrets.token_hex(8)
    lines: list[str] = []
    sections: list[Section] = []
    for i, step in enumerate(steps):
        if i:
            if steps[i - 1].stop_unless_ok:  # it is then the last step, its code the exec's
                lines.append('[ "$rc" = 0 ] || exit "$rc"')
            marker = f"envcheck:step:{nonce}:{i}"
            lines.append(f"printf '\\n%s %s\\n' {marker} \"$rc\"")
            sections.append(Section(f"\n{marker} ".encode(), step.timeout_s, step.output_limit))
        if step.bare:
            lines.append(step.script)
        else:
            lines.append(f"(\n{step.script}\n) 2>&1\nrc=$?")
    if not steps[-1].bare:
        lines.append('exit "$rc"')
    return "\n".join(lines) + "\n", sections


def split(result: ExecResult, steps: Sequence[Step]) -> list[ExecResult]:
    """Each step's result, for the steps the exec reached: a step cut short by the exec's
    timeout (or flood) is the last, with the exec's ``timed_out``."""
    reached = result.sections
    out: list[ExecResult] = []
    for i, step in enumerate(steps[:len(reached) + 1]):
        output: CappedOutput = result.output if i == 0 else reached[i - 1].output
        last = i == len(reached)
        if last:
            code, timed_out, flooded = result.exit_code, result.timed_out, result.flooded
            started = reached[i - 1].started_s if i else 0.0
            duration = result.duration_s - started
        else:
            header = reached[i].header
            code = int(header) if header.isdigit() else None
            timed_out = flooded = False
            duration = reached[i].started_s - (reached[i - 1].started_s if i else 0.0)
        out.append(ExecResult(command=step.label, exit_code=code, output=output,
                              duration_s=duration, timed_out=timed_out, flooded=flooded,
                              first_output_s=result.first_output_s if i == 0 else None))
    return out
