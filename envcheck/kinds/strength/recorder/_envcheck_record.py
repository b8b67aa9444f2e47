"""envcheck's behaviour recorder: what chosen functions return or raise while tests run.

Runs only inside envcheck's sandboxes, in the wrong-fix controls' own runs (never in a run
that judges a verifier): envcheck plants this module and a ``.pth`` line importing it in the
interpreter's site-packages, and writes the targets file below. Without that file it does
nothing. With it, it traces calls (``sys.settrace``; frames of other functions are not traced
further) and, for each call of a target function, records one event: the value returned, or
the exception raised, the state of its mutable arguments (``self`` included) afterwards, and
what it wrote to ``sys.stdout`` and ``sys.stderr`` meanwhile (a command that prints its table
and returns None behaves through its output). Events are kept per (test, function): the test
is pytest's ``PYTEST_CURRENT_TEST`` without its phase; a count, a digest of every event, the
first events in full, and the distinct events (a digest each, the first call that gave it, the
event shortened), so that a function called more or less often can be told from one that
returns something new. At exit each process writes its record to the output folder as one
JSON line.

Output is caught by standing in for ``sys.stdout`` and ``sys.stderr`` while a recorded call
runs (each write goes on to the stream as before): per call, its length, a digest and its
first characters, addresses normalised. A call inside another recorded one counts for both
(the outer's output holds the inner's). Not seen: bytes written to a stream's ``buffer``, and
a stream a logging handler took before the call.

Values are written as *shapes* in which what is not behaviour is left out: memory addresses,
the iteration order of sets and dicts, object identities. What still differs from run to run
(a time, a random number) is for the caller to find by recording twice.

Written for any Python from 3.6 (the task's interpreter, not envcheck's): no f-strings, no
``from __future__`` import.
"""

import atexit
import dis
import hashlib
import json
import os
import re
import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable, Dict, List, Optional, Tuple

Tracer = Callable[[FrameType, str, Any], Any]

CONFIG = "/var/tmp/envcheck-record/targets.json"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_PHASE = re.compile(r" \((setup|call|teardown)\)$")
_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_MISSING = object()
# Above 0 while a wrong-fix mutant of the ``new_case_value`` operator runs the program as it
# was before the fix, to compare: those calls are the control's own, not the program's
# behaviour, and are not recorded (the mutant's helper counts up and down here).
QUIET = [0]
_RETURNS = set(dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap)


class _Recorder:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.out = config["out"]
        self.first = int(config.get("first", 20))
        self.hashed = int(config.get("hashed", 1000))
        self.keys_max = int(config.get("keys", 5000))
        self.chars = int(config.get("chars", 300))
        self.distinct = int(config.get("distinct", 32))  # distinct events kept per key
        self.short = int(config.get("short", 80))  # characters of a part of one kept
        self.head = int(config.get("head", 200))  # characters of a call's output shown
        self.targets: Dict[Tuple[str, int], Tuple[str, str]] = {}
        for path, name, lines, label in config["targets"]:
            for line in lines:
                self.targets[(name, int(line))] = (path.replace("\\", "/"), label)
        self.labels: Dict[CodeType, Optional[str]] = {}
        # test and label -> [count, digest, first events, {event digest: [call, event]}, more]
        self.records: Dict[str, List[Any]] = {}
        self.dropped = 0

    # -- shapes -------------------------------------------------------------------------
    def shape(self, value: Any, depth: int = 0) -> str:
        try:
            return self._shape(value, depth)
        except Exception as exc:  # a property that raises, a repr that fails
            return "<%s: %s>" % (type(value).__name__, type(exc).__name__)

    def _text(self, text: str) -> str:
        text = _ADDRESS.sub("0x?", text)
        if len(text) > self.chars:
            digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
            return text[:self.chars] + "...(%d chars, %s)" % (len(text), digest)
        return text

    def _shape(self, value: Any, depth: int) -> str:
        kind = type(value)
        if kind is float:
            return repr(round(value, 9))
        if isinstance(value, (str, bytes)) and len(value) > self.chars:
            digest = hashlib.sha256(value if isinstance(value, bytes) else value.encode(
                "utf-8", "replace")).hexdigest()[:12]
            return "%s...(%d, %s)" % (repr(value[:self.chars]), len(value), digest)
        if isinstance(value, _ATOMS):
            return self._text(repr(value))
        name = "%s.%s" % (getattr(kind, "__module__", "?"), getattr(kind, "__qualname__",
                                                                    kind.__name__))
        if isinstance(value, BaseException):
            return "%s%s" % (name, self._shape(value.args, depth + 1))
        if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
            return "<%s %s.%s>" % (kind.__name__, getattr(value, "__module__", "?"),
                                   getattr(value, "__qualname__", "?"))
        if depth >= 3:
            return "<%s>" % name
        if isinstance(value, (list, tuple)):
            items = [self._shape(v, depth + 1) for v in value[:20]]
            more = ", ...%d" % len(value) if len(value) > 20 else ""
            opened, closed = ("[", "]") if isinstance(value, list) else ("(", ")")
            return "%s%s%s%s%s" % ("" if kind in (list, tuple) else name, opened,
                                   ", ".join(items), more, closed)
        if isinstance(value, (set, frozenset)):
            if len(value) > 50:
                return "<%s of %d>" % (name, len(value))
            return "%s{%s}" % (name, ", ".join(sorted(self._shape(v, depth + 1)
                                                     for v in value)))
        if isinstance(value, dict):
            if len(value) > 50:
                return "<%s of %d>" % (name, len(value))
            pairs = sorted("%s: %s" % (self._shape(k, depth + 1), self._shape(v, depth + 1))
                           for k, v in value.items())
            return "%s{%s}" % (name, ", ".join(pairs))
        if getattr(kind, "__repr__", None) is object.__repr__ and hasattr(value, "__dict__"):
            state = vars(value)
            pairs = sorted("%s=%s" % (k, self._shape(v, depth + 1))
                           for k, v in list(state.items())[:50] if not k.startswith("__"))
            return "%s(%s)" % (name, ", ".join(pairs))
        return "%s:%s" % (name, self._text(repr(value)))

    # -- events -------------------------------------------------------------------------
    def label_of(self, code: CodeType) -> Optional[str]:
        if code in self.labels:
            return self.labels[code]
        target = self.targets.get((code.co_name, code.co_firstlineno))
        label: Optional[str] = None
        if target is not None:
            filename = code.co_filename.replace("\\", "/")
            path = target[0]
            if filename == path or filename.endswith("/" + path):
                label = target[1]
        self.labels[code] = label
        return label

    def record(self, label: str, event: List[Any]) -> None:
        test = _PHASE.sub("", os.environ.get("PYTEST_CURRENT_TEST", ""))
        key = test + "\t" + label
        entry = self.records.get(key)
        if entry is None:
            if len(self.records) >= self.keys_max:
                self.dropped += 1
                return
            entry = self.records[key] = [0, hashlib.sha256(), [], {}, False]
        entry[0] += 1
        if entry[0] > self.hashed:
            return
        data = json.dumps(event).encode("utf-8", "replace")
        entry[1].update(data + b"\n")
        if len(entry[2]) < self.first:
            entry[2].append(event)
        digest = hashlib.sha256(data).hexdigest()[:16]
        if digest not in entry[3]:
            if len(entry[3]) < self.distinct:
                entry[3][digest] = [entry[0] - 1, self.shortened(event)]
            else:
                entry[4] = True

    def shortened(self, event: List[Any]) -> List[Any]:
        cut = self.short
        return [event[0], event[1][:cut], [[n, v[:cut]] for n, v in event[2]], event[3][:cut]]

    def tracer(self, frame: FrameType, event: str, arg: Any) -> Optional[Tracer]:
        if event != "call" or QUIET[0]:
            return None
        code = frame.f_code
        label = self.label_of(code)
        if label is None:
            return None
        count = code.co_argcount + getattr(code, "co_kwonlyargcount", 0)
        f_locals = frame.f_locals
        held: List[Tuple[str, Any]] = []
        for name in code.co_varnames[:count]:
            value = f_locals.get(name, _MISSING)
            if value is not _MISSING and not isinstance(value, _ATOMS) \
                    and type(value) is not tuple and type(value) is not frozenset:
                held.append((name, value))
        pending: List[Any] = [None]
        last: List[Any] = [None]  # the last exception seen in the frame, kept past its lines
        recorder = self
        tees = _catch(self.head)

        def local(frame: FrameType, event: str, arg: Any) -> Tracer:
            if event == "line":
                pending[0] = None
            elif event == "exception":
                pending[0] = last[0] = arg[1]
            elif event == "return":
                written = _release(tees)
                state = [[n, recorder.shape(v)] for n, v in held]
                raised = pending[0] if arg is None else None
                if arg is None and raised is None and last[0] is not None \
                        and _unwinding(frame):
                    raised = last[0]  # ``except ...: raise`` gives no event of its own
                if raised is not None:
                    recorder.record(label, ["raise", recorder.shape(raised), state, written])
                else:
                    recorder.record(label, ["return", recorder.shape(arg), state, written])
            return local

        return local

    def write(self) -> None:
        try:
            calls = {}
            for key, (count, digest, first, distinct, more) in self.records.items():
                calls[key] = [count, digest.hexdigest(), first, distinct, more]
            # another tracer (coverage, a debugger) put in place of this one records nothing
            data = {"v": 2, "pid": os.getpid(), "calls": calls, "dropped": self.dropped,
                    "displaced": sys.gettrace() != self.tracer}
            name = os.path.join(self.out, "%d.json" % os.getpid())
            with open(name + ".part", "w") as handle:
                handle.write(json.dumps(data) + "\n")
            os.rename(name + ".part", name)
        except Exception:  # never the tests' problem
            pass


class _Output:
    """What one call wrote to one stream: its length, a digest, its first characters."""

    def __init__(self, name: str, head: int) -> None:
        self.name, self.head = name, head
        self.size = 0
        self.digest = hashlib.sha256()
        self.start: List[str] = []
        self.open = True

    def add(self, text: str) -> None:
        if not self.open or not text:
            return
        text = _ADDRESS.sub("0x?", text)
        self.digest.update(text.encode("utf-8", "replace"))
        if self.size < self.head:
            self.start.append(text[:self.head - self.size])
        self.size += len(text)

    def said(self) -> str:
        start = "".join(self.start)
        if self.size <= self.head:
            return "%s %r" % (self.name, start)
        return "%s %r...(%d chars, %s)" % (self.name, start, self.size,
                                          self.digest.hexdigest()[:12])


class _Tee:
    """``sys.stdout`` or ``sys.stderr`` while a recorded call runs: each write goes on to the
    stream it stands for (so the tests see it as ever) and is counted for the call; every
    other attribute is the stream's."""

    def __init__(self, stream: Any, output: _Output) -> None:
        self._envcheck_stream = stream
        self._envcheck_output = output

    def write(self, text: Any) -> Any:
        done = self._envcheck_stream.write(text)
        if isinstance(text, str):
            self._envcheck_output.add(text)
        return done

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._envcheck_stream, name)


def _catch(head: int) -> List[_Tee]:
    """Tees put in place of ``sys.stdout`` and ``sys.stderr`` (those that are set)."""
    tees: List[_Tee] = []
    try:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name, None)
            if stream is not None:
                tee = _Tee(stream, _Output(name, head))
                setattr(sys, name, tee)
                tees.append(tee)
    except Exception:  # never the tests' problem
        pass
    return tees


def _release(tees: List[_Tee]) -> str:
    """The streams put back (where the call did not replace them itself), and what the call
    wrote, said: "" if nothing."""
    said = []
    for tee in tees:
        output = tee._envcheck_output
        output.open = False
        name = output.name
        try:
            if getattr(sys, name, None) is tee:
                setattr(sys, name, tee._envcheck_stream)
        except Exception:
            pass
        if output.size:
            said.append(output.said())
    return "; ".join(said)


def _unwinding(frame: FrameType) -> bool:
    """Whether ``frame`` ends by an exception rather than a ``return``: its instruction is
    not a return (an ``except`` clause's bare ``raise`` leaves no "exception" event after
    its lines); False when that cannot be read."""
    try:
        return frame.f_code.co_code[frame.f_lasti] not in _RETURNS
    except Exception:
        return False


def _start() -> None:
    try:
        with open(CONFIG) as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return
    recorder = _Recorder(config)
    atexit.register(recorder.write)
    threading.settrace(recorder.tracer)
    sys.settrace(recorder.tracer)


_start()
