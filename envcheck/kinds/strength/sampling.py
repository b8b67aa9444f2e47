"""Which mutants a task plays: candidates tried in a seeded order, families in turn, each kept
only if it passes the static filters, until the cap.

The seed is a string the caller builds from what identifies the task (the image digest and
the spec's hash), turned into a number by SHA-256, never by ``hash()``: one identity plays the
same mutants in every process, whatever ``PYTHONHASHSEED`` says.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from envcheck.kinds.strength.model import Family, Operator, Skipped

__all__ = ["Generation", "Rejection", "Variant", "seeded", "seeded_order", "take"]

T = TypeVar("T")
M = TypeVar("M")


class Rejection(StrEnum):
    """Why a candidate was dropped before any run (the static filters)."""

    NOT_COMPILING = "does not compile"
    SAME_AS_ORIGINAL = "same as the original"
    DUPLICATE = "same as another mutant"
    SAME_AS_BASE = "same as the base (the no-op)"
    NOT_JSON = "no longer parses as JSON"


@dataclass(frozen=True)
class Variant:
    """A candidate before it is rendered: rendering (a whole file's text) is paid only for
    the candidates the sample reaches."""

    operator: Operator
    file: str
    line: int
    description: str
    render: Callable[[], str] = field(compare=False, repr=False)
    # the fix's lines it stands for, where its diff touches others (a whole function wrapped)
    fix_lines: tuple[int, ...] = ()

    @property
    def family(self) -> Family:
        return self.operator.family


@dataclass(frozen=True)
class Generation(Generic[M]):
    """What a generation made, and what it found and dropped on the way (for the report
    and the bench: ``tried`` and ``rejected`` count only the candidates the sample reached;
    with no cap, every one)."""

    mutants: tuple[M, ...]
    skipped: tuple[Skipped, ...] = ()
    sites: dict[Operator, int] = field(default_factory=dict)
    tried: dict[Operator, int] = field(default_factory=dict)
    rejected: dict[tuple[Operator, Rejection], int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the generation could not do, and why


def seeded(seed: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))


def seeded_order(items: Sequence[T], family: Callable[[T], Family], seed: str) -> list[T]:
    """``items`` (given in a stable order) reordered: families in turn, in a seeded order,
    each family's own items shuffled by the seed, so a cap keeps every family it can."""
    rng = seeded(seed)
    groups: dict[Family, list[T]] = {}
    for item in items:
        groups.setdefault(family(item), []).append(item)
    families = sorted(groups)
    rng.shuffle(families)
    for name in families:
        rng.shuffle(groups[name])
    order: list[T] = []
    depth = 0
    while len(order) < len(items):
        order.extend(groups[f][depth] for f in families if depth < len(groups[f]))
        depth += 1
    return order


def take(variants: Sequence[Variant], seed: str, cap: int | None,
         accept: Callable[[Variant, str], Rejection | M],
         skipped: Iterable[Skipped] = (), notes: Iterable[str] = ()) -> Generation[M]:
    """Up to ``cap`` variants (None: all) in :func:`seeded_order`, rendered and made into
    mutants by ``accept`` (or dropped, and why); with the counts of what was tried."""
    kept: list[M] = []
    tried: Counter[Operator] = Counter()
    rejected: Counter[tuple[Operator, Rejection]] = Counter()
    for variant in seeded_order(variants, lambda v: v.family, seed):
        if cap is not None and len(kept) >= cap:
            break
        tried[variant.operator] += 1
        made = accept(variant, variant.render())
        if isinstance(made, Rejection):
            rejected[variant.operator, made] += 1
        else:
            kept.append(made)
    return Generation(tuple(kept), tuple(skipped), dict(Counter(v.operator for v in variants)),
                      dict(tried), dict(rejected), tuple(notes))
