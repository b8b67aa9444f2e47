"""How a verification that passed says so, in one wording for both protocols (a dataset's
tests, :mod:`.probe`; a Harbor task's reward, :mod:`.harbor`): the negative control (no fix,
or Harbor's nop agent) named apart from the oracle runs, each with its own count, so that
``reruns: 3`` reads as three oracle runs whichever protocol ran them.

    negative control: fail-to-pass tests fail, pass-to-pass tests pass; oracle in all 3
    runs: every declared test passes
    negative control (nop): reward 0; oracle in all 3 runs: reward 1
"""

from __future__ import annotations

__all__ = ["controls_agree"]


def _in_runs(count: int) -> str:
    return " in 1 run" if count == 1 else f" in all {count} runs"


def controls_agree(negative_label: str, negative_runs: int, negative: str,
                   oracle_runs: int, oracle: str | None, no_oracle: str) -> str:
    """The summary of a pass: what the negative control showed (in each of its
    ``negative_runs``), then what the oracle showed in each of its ``oracle_runs``; ``oracle``
    None: none was played (why: ``no_oracle``), and the negative control was what repeated."""
    control = negative_label + ("" if negative_runs == 1 else _in_runs(negative_runs))
    if oracle is None:
        return f"{control}: {negative}; no oracle ({no_oracle}): positive control skipped"
    return f"{control}: {negative}; oracle{_in_runs(oracle_runs)}: {oracle}"
