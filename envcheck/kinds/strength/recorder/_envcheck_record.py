"""envcheck's behaviour recorder: what chosen functions return or raise while tests run.

Runs only inside envcheck's sandboxes, in the wrong-fix controls' own runs (never in a run
that judges a verifier): envcheck plants this module and a ``.pth`` line importing it in the
interpreter's site-packages, and writes the targets file below. Without that file it does
nothing. With it, it traces calls (``sys.settrace``; frames of other functions are not traced
further) and, for each call of a target function, records one event: the value returned, or
the exception raised, and the state of its mutable arguments (``self`` included) afterwards.
Events are kept per (test, function): the test is pytest's ``PYTEST_CURRENT_TEST`` without
its phase; a count, a digest of every event and the first events in full. At exit each
process writes its record to the output folder as one JSON line.

Values are written as *shapes* in which what is not behaviour is left out: memory addresses,
the iteration order of sets and dicts, object identities. What still differs from run to run
(a time, a random number) is for the caller to find by recording twice.

Written for any Python from 3.6 (the task's interpreter, not envcheck's): no f-strings, no
``from __future__`` import.
"""

import atexit
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


class _Recorder:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.out = config["out"]
        self.first = int(config.get("first", 20))
        self.hashed = int(config.get("hashed", 1000))
        self.keys_max = int(config.get("keys", 5000))
        self.chars = int(config.get("chars", 300))
        self.targets: Dict[Tuple[str, int], Tuple[str, str]] = {}
        for path, name, lines, label in config["targets"]:
            for line in lines:
                self.targets[(name, int(line))] = (path.replace("\\", "/"), label)
        self.labels: Dict[CodeType, Optional[str]] = {}
        # test and label -> [count, digest, first events]
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
            entry = self.records[key] = [0, hashlib.sha256(), []]
        entry[0] += 1
        if entry[0] > self.hashed:
            return
        text = json.dumps(event)
        entry[1].update(text.encode("utf-8", "replace") + b"\n")
        if len(entry[2]) < self.first:
            entry[2].append(event)

    def tracer(self, frame: FrameType, event: str, arg: Any) -> Optional[Tracer]:
        if event != "call":
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
        recorder = self

        def local(frame: FrameType, event: str, arg: Any) -> Tracer:
            if event == "line":
                pending[0] = None
            elif event == "exception":
                pending[0] = arg[1]
            elif event == "return":
                state = [[n, recorder.shape(v)] for n, v in held]
                if pending[0] is not None and arg is None:
                    recorder.record(label, ["raise", recorder.shape(pending[0]), state])
                else:
                    recorder.record(label, ["return", recorder.shape(arg), state])
            return local

        return local

    def write(self) -> None:
        try:
            calls = {}
            for key, (count, digest, first) in self.records.items():
                calls[key] = [count, digest.hexdigest(), first]
            # another tracer (coverage, a debugger) put in place of this one records nothing
            data = {"v": 1, "pid": os.getpid(), "calls": calls, "dropped": self.dropped,
                    "displaced": sys.gettrace() != self.tracer}
            name = os.path.join(self.out, "%d.json" % os.getpid())
            with open(name + ".part", "w") as handle:
                handle.write(json.dumps(data) + "\n")
            os.rename(name + ".part", name)
        except Exception:  # never the tests' problem
            pass


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
