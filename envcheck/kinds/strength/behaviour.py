"""What a recorded run did, and where a mutant's differs from the gold patch's (pure: no
sandbox).

The recorder (``recorder/_envcheck_record.py``) writes, per test and function, the calls'
count, a digest of them all, the first ones in full and the distinct ones; each event is what
the call returned or raised, what it wrote to ``sys.stdout`` / ``sys.stderr``, and the state of
its mutable arguments after it. The gold patch is recorded twice: what differs between those
two runs is not behaviour (a time, a random number) and is left out of the comparison;
addresses and the order of sets and dicts never reach it.

**Only values confirm.** A mutant is told apart from the gold patch by a value a function hands
back (a return, a raise, an argument's state, an output), never by how often it was called:
where the counts agree, call by call; where they do not (a call more or fewer shifts every call
after it), by the events the mutant gave that no gold run gave. A function called more or less
often, or not at all, that returns nothing new is not a difference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["HASHED", "Calls", "RecordError", "difference", "parse_recording"]

SHOWN = 100  # characters of a value in a difference said
HASHED = 1000  # calls per test and function the recorder looks at (its default)


class RecordError(ValueError):
    """A recording that cannot be used, and why."""


Event = tuple[str, ...]  # kind, value, output, then name=state per argument


@dataclass(frozen=True)
class Calls:
    """One function's calls in one test: how many, a digest of them all, the first ones, and
    the distinct ones (event digest -> the first call that gave it, the event shortened);
    ``more``: there were more distinct events than were kept."""

    count: int
    digest: str
    first: tuple[Event, ...]
    seen: Mapping[str, tuple[int, Event]] | None = field(default=None)
    more: bool = False

    @property
    def complete(self) -> bool:
        """Whether ``seen`` holds every distinct event of every call."""
        return self.seen is not None and not self.more and self.count <= HASHED


def _event(raw: object) -> Event:
    if not isinstance(raw, list) or len(raw) not in (3, 4) or not isinstance(raw[2], list):
        raise RecordError("an event is not [kind, value, state, output]")
    written = str(raw[3]) if len(raw) == 4 else ""
    return (str(raw[0]), str(raw[1]), written, *(f"{n}={v}" for n, v in raw[2]))


def _calls(raw: object) -> Calls:
    if not isinstance(raw, list) or len(raw) not in (3, 5):
        raise RecordError("a function's calls are not [count, digest, first, seen, more]")
    count, digest, first, *rest = raw
    seen: dict[str, tuple[int, Event]] | None = None
    if rest:
        seen = {str(k): (int(v[0]), _event(v[1])) for k, v in dict(rest[0]).items()}
    return Calls(int(count), str(digest), tuple(_event(e) for e in first), seen,
                 bool(rest[1]) if rest else False)


def _merged(parts: list[Calls]) -> Calls:
    """The same test in several processes: one, in a stable order."""
    parts.sort(key=lambda c: c.digest)
    if len(parts) == 1:
        return parts[0]
    seen: dict[str, tuple[int, Event]] | None = {}
    for part in parts:
        if part.seen is None or seen is None:
            seen = None
            continue
        for key, value in part.seen.items():
            seen.setdefault(key, value)
    return Calls(sum(c.count for c in parts), "+".join(c.digest for c in parts),
                 tuple(e for c in parts for e in c.first), seen, any(c.more for c in parts))


def parse_recording(text: str) -> dict[str, Calls]:
    """The recorder's output (one JSON line per process) as calls per ``test\\tfunction``;
    RecordError if there is none, or a tracer displaced the recorder."""
    merged: dict[str, list[Calls]] = {}
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise RecordError("no process wrote a recording (the tests' Python did not load "
                          "the recorder)")
    for line in lines:
        try:
            data = json.loads(line)
            displaced = bool(data.get("displaced"))
            if not displaced:
                for key, raw in data["calls"].items():
                    merged.setdefault(key, []).append(_calls(raw))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise RecordError(f"an unreadable recording: {exc}"[:200]) from exc
        if displaced:
            raise RecordError("another tracer (coverage, a debugger) displaced the recorder")
    return {key: _merged(parts) for key, parts in merged.items()}


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def _where(key: str) -> tuple[str, str]:
    test, _, label = key.partition("\t")
    return label, (f" in {test}" if test else "")


def _said(event: Event, part: int) -> str:
    if part in {0, 1}:
        return f"{'raised' if event[0] == 'raise' else 'returned'} {_cut(event[1])}"
    if part == 2:
        return f"wrote {_cut(event[2])}" if event[2] else "wrote nothing"
    return f"left {_cut(event[part])}"


def _first_change(key: str, gold: Calls, again: Calls, mutant: Calls) -> str | None:
    """Where ``mutant`` departs from the gold patch, call by call, in what both gold runs
    agree on (the three called alike often: the calls line up)."""
    label, where = _where(key)
    for i, (g, a) in enumerate(zip(gold.first, again.first, strict=False)):
        m = mutant.first[i] if i < len(mutant.first) else None
        for part in range(max(len(g), len(a))):
            stable = part < len(g) and part < len(a) and g[part] == a[part]
            if not stable:
                continue
            if m is None or part >= len(m) or m[part] != g[part]:
                if m is None:
                    return f"`{label}` stopped after {i} call(s){where}"
                shown = part if part > 1 or m[0] == g[0] else 0
                return (f"`{label}` {_said(m, shown)}{where} where under the gold patch it "
                        f"{_said(g, shown)}")
    return None


def _known(golds: list[Calls]) -> dict[str, Event] | None:
    """The distinct events of ``golds`` (each a whole record, the same in both gold runs),
    or None if that cannot be relied on."""
    known: dict[str, Event] = {}
    for calls in golds:
        if not calls.complete or calls.seen is None:
            return None
        known.update({k: e for k, (_, e) in calls.seen.items()})
    return known


def _new_part(event: Event, known: list[Event]) -> int:
    """Which part of ``event`` no known event has (0: the result, 2: the output, 3+: a
    state); 0 if only their combination is new."""
    if (event[0], event[1]) not in {(e[0], e[1]) for e in known}:
        return 0
    if event[2] not in {e[2] for e in known}:
        return 2
    states = {s for e in known for s in e[3:]}
    return next((i for i in range(3, len(event)) if event[i] not in states), 0)


def _novel(key: str, known: dict[str, Event], calls: int, mutant: Calls) -> str | None:
    """The first event of ``mutant`` that is none of ``known`` (the gold runs' events), said;
    None if every one of its events is one of them, or that cannot be told."""
    label, where = _where(key)
    if mutant.seen is None:
        return None
    new = sorted((at, event) for k, (at, event) in mutant.seen.items() if k not in known)
    if new:
        at, event = new[0]
        return (f"`{label}` {_said(event, _new_part(event, list(known.values())))}{where} "
                f"(call {at + 1} of {mutant.count}), which it never did under the gold patch "
                f"({calls} call(s))")
    if mutant.more:
        return (f"`{label}` gave more than {len(mutant.seen)} different results{where} where "
                f"under the gold patch it gave {len(known)}")
    return None


def _stable(gold: Calls, again: Calls) -> bool:
    return gold.seen is not None and again.seen is not None and set(gold.seen) == set(
        again.seen)


def _label_known(label: str, gold: Mapping[str, Calls], again: Mapping[str, Calls]
                 ) -> dict[str, Event] | None:
    """Every event the function ``label`` gave in any test under the gold patch, if each of
    those records is whole and the same in both runs; None if it cannot be relied on or the
    function was never called."""
    keys = {k for k in (*gold, *again) if k.partition("\t")[2] == label}
    if not keys or any(k not in gold or k not in again or not _stable(gold[k], again[k])
                       for k in keys):
        return None
    return _known([gold[k] for k in keys])


def difference(gold: Mapping[str, Calls], again: Mapping[str, Calls],
               mutant: Mapping[str, Calls]) -> str | None:
    """The first behaviour in which ``mutant`` differs from the gold patch on what the two
    gold runs (``gold``, ``again``) agree on, said in words; None: no difference (how often a
    function was called is no difference by itself)."""
    for key in sorted(set(gold) | set(again) | set(mutant)):
        g, a, m = gold.get(key), again.get(key), mutant.get(key)
        if m is None or m == g == a:
            continue  # not called here (fewer calls: no value of its own), or the same
        if g is None or a is None:
            if g is None and a is None:  # called here only under the mutant: anything new?
                known = _label_known(_where(key)[0], gold, again)
                found = None if known is None else _novel(key, known, 0, m)
                if found is not None:
                    return found
            continue  # reached in one gold run only: not behaviour to rely on
        if g.count == a.count == m.count:  # the calls line up
            found = _first_change(key, g, a, m)
            if found is None and g == a:
                label, where = _where(key)
                known = _known([g, a])
                found = (None if known is None else _novel(key, known, g.count, m)) or (
                    f"`{label}` behaved differently{where} after its first {len(g.first)} "
                    "call(s)")
        else:  # called more or less often: only an event no gold run gave tells
            known = _known([g, a]) if _stable(g, a) else None
            found = None if known is None else _novel(key, known, g.count, m)
        if found is not None:
            return found
    return None
