"""``new_case_value``: the value a fixed function newly returns, made wrong at run time, and
the fix's own value everywhere else. Each mutant is imported and called here (synthetic code
of the test's own), so what it does is asserted, not only what it says."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

from envcheck.kinds.strength import Operator
from envcheck.kinds.strength.model import Mutant
from envcheck.kinds.strength.newcase import STATE, WHICH
from tests.test_strength_mutants import generate

BASE = '''"""A module with a docstring and a future import, which must stay first."""
from __future__ import annotations


class Units:
    def collect(self, expr, depth=0):
        """Factor and dimension of ``expr``."""
        if isinstance(expr, tuple):
            parts = [self.collect(e, depth + 1) for e in expr]
            return sum(p[0] for p in parts), parts[0][1]
        if expr < 0:
            raise ValueError("negative")
        return expr * 2, "length"


def rows(n, *extra, sep=",", **options):
    if n == 0:
        raise ValueError("empty")
    return [f"{i}{sep}" for i in range(n)] + list(extra)


def report(lines):
    if not lines:
        raise ValueError("nothing")
    return "\\n".join(lines)
'''
POST = BASE.replace('''        if expr < 0:
            raise ValueError("negative")
''', '''        if expr < 0:
            return -expr, "none"
''').replace('''    if n == 0:
        raise ValueError("empty")
''', '''    if n == 0:
        return ["-"]
''').replace('''    if not lines:
        raise ValueError("nothing")
''', '''    if not lines:
        return "no lines\\nat all"
''')


def loaded(tmp_path: Path, mutant: Mutant, name: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(mutant.text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_part_mutant(tmp_path: Path, base: str, post: str, name: str) -> ModuleType:
    """The "first part changed" new-case mutant of ``post`` (``base`` before it), imported."""
    gen = generate(tmp_path, {"pkg/mod.py": base}, {"pkg/mod.py": post})
    [first] = [m for m in gen.mutants if m.operator is Operator.NEW_CASE_VALUE
               and m.description.endswith(WHICH[0])]
    return loaded(tmp_path, first, name)


def by_function(tmp_path: Path) -> dict[tuple[str, str], ModuleType]:
    """Each new-case mutant, imported, by (function, what it changes)."""
    gen = generate(tmp_path, {"pkg/mod.py": BASE}, {"pkg/mod.py": POST})
    found = {}
    for i, m in enumerate(m for m in gen.mutants if m.operator is Operator.NEW_CASE_VALUE):
        function = m.description.split(" ")[1]
        what = m.description.rsplit(": ", 1)[1]
        found[function, what] = loaded(tmp_path, m, f"mutant{i}")
    return found


def test_the_new_value_is_made_wrong_and_every_old_one_kept(tmp_path: Path) -> None:
    mutants = by_function(tmp_path)
    assert set(mutants) == {(f, w) for f in ("Units.collect", "rows", "report") for w in WHICH}
    first, last, short, other = WHICH
    for (function, what), module in mutants.items():
        units = module.Units()
        # where the program before the fix returns the same, the fix's value, untouched
        assert units.collect(3) == (6, "length")
        assert module.rows(2) == ["0,", "1,"]
        assert module.report(["a", "b"]) == "a\nb"
        # where it raised, the fix's value changed as the description says
        if function == "Units.collect":
            # (-expr, "none") for -3: the recursion of a tuple compares whole programs too
            # another input's: the fix's latest value where it returned the old one
            assert (units.collect(-3), units.collect((1, -2))) == {
                first: ((4, "none"), (5, "length")), last: ((3, "non"), (4, "lengt")),
                short: ((3, "none"), (4, "length")),
                other: ((6, "length"), (6, "length"))}[what]
        elif function == "rows":
            assert module.rows(0) == {first: ["", ], last: ["-"], short: [],
                                      other: ["0,", "1,"]}[what]
        else:
            assert module.report([]) == {first: "no lines\nat al", last: "no lines\nat all",
                                         short: "no lines", other: "a\nb"}[what]
        # the wrapper keeps the name and the signature callers and frameworks see
        assert str(inspect.signature(module.Units.collect)) == "(self, expr, depth=0)"
        assert str(inspect.signature(module.rows)) == "(n, *extra, sep=',', **options)"
        # keyword-only and variable arguments go through
        assert module.rows(2, "x", sep=";", z=1) == ["0;", "1;", "x"]
        # the recorder of survivors sees the fixed function's arguments by their names
        code = module.Units.collect.__code__
        assert code.co_varnames[:code.co_argcount] == ("self", "expr", "depth")
        assert module.Units.collect.__name__ == "collect"
        assert module.Units.collect.__doc__ == "Factor and dimension of ``expr``."


def test_functions_without_a_value_to_change_are_left_out_with_a_note(tmp_path: Path) -> None:
    base = ("import functools\n\n\n@functools.cache\ndef cached(x):\n    return x\n\n\n"
            "def gen(n):\n    yield n\n\n\ndef store(d, k):\n    d[k] = 1\n")
    post = ("import functools\n\n\n@functools.cache\ndef cached(x):\n    return x + 0\n\n\n"
            "def gen(n):\n    yield n + 0\n\n\ndef store(d, k):\n    d[k] = 2\n\n\n"
            "def added(x):\n    return x\n")
    base += "\n\ndef reset():\n    STATE.clear()\n"
    post += "\n\ndef reset():\n    STATE.clear()\n    STATE.update(a=1)\n"
    gen = generate(tmp_path, {"pkg/mod.py": base}, {"pkg/mod.py": post})
    # store returns nothing: what it does to its arguments is its value (below)
    assert [m.description for m in gen.mutants if m.operator is Operator.NEW_CASE_VALUE] == [
        f"what store newly does to its arguments (where it differs from before the fix): {STATE}"]
    notes = {n.split(": ", 1)[0].rsplit(":", 1)[1]: n.split(": ", 1)[1] for n in gen.notes
             if n.startswith(f"no {Operator.NEW_CASE_VALUE}")}
    assert notes == {"cached": "decorated", "gen": "a generator",
                     "reset": "returns nothing and takes no argument",
                     "added": "new with the fix (nothing before it to differ from)"}


def test_what_a_function_newly_does_to_an_argument_is_cut_short(tmp_path: Path) -> None:
    """A function that returns nothing: where the fixed one leaves an argument otherwise than
    the old one did (or the old one raised), that argument loses its last item; where both
    leave the same, the fix's."""
    base = ("def add(rows, x):\n    if x < 0:\n        raise ValueError(x)\n"
            "    rows.append(x)\n    rows.append('end')\n")
    post = ("def add(rows, x):\n    if x < 0:\n        x = -x\n"
            "    rows.append(min(x, 100))\n    rows.append('end')\n")
    gen = generate(tmp_path, {"pkg/mod.py": base}, {"pkg/mod.py": post})
    [mutant] = [m for m in gen.mutants if m.operator is Operator.NEW_CASE_VALUE]
    module = loaded(tmp_path, mutant, "add")
    same, capped, raised = [], [], ["kept"]
    assert module.add(same, 5) is None and same == [5, "end"]  # as before the fix
    module.add(capped, 500)  # the old one appended 500: the fix's [100, "end"], cut
    module.add(raised, -3)  # the old one raised: the fix's ["kept", 3, "end"], cut
    assert (capped, raised) == ([100], ["kept", 3])


def test_a_value_that_cannot_be_changed_is_the_fix_s(tmp_path: Path) -> None:
    """``None`` newly returned: the mutant behaves as the fix (a survivor of it is then not
    distinguished by the recorder, never confirmed)."""
    base = "def find(d, k):\n    return d[k]\n"
    post = "def find(d, k):\n    return d.get(k)\n"
    gen = generate(tmp_path, {"pkg/mod.py": base}, {"pkg/mod.py": post})
    mutants = [m for m in gen.mutants if m.operator is Operator.NEW_CASE_VALUE]
    assert len(mutants) == len(WHICH)
    for i, m in enumerate(mutants):
        module = loaded(tmp_path, m, f"find{i}")
        assert module.find({}, "k") is None
        assert module.find({"k": [1, 2]}, "k") == [1, 2]


def test_a_call_the_old_function_could_not_take_is_new_api_not_a_new_case(
        tmp_path: Path) -> None:
    """A parameter the fix adds: the old function refuses the call, and the fix's value is
    kept (what it returns there is new API, not a case of the old function answered wrong);
    a call both take, where the old one raised, is the new case."""
    base = ("def load(path):\n    if path.endswith('.toml'):\n        raise ValueError(path)\n"
            "    return 'text'\n")
    post = ("def load(path, binary=False):\n    if path.endswith('.toml'):\n"
            "        return 'toml'\n    return 'bytes' if binary else 'text'\n")
    module = first_part_mutant(tmp_path, base, post, "load")
    assert (module.load("a.txt"), module.load("a.txt", binary=True)) == ("text", "bytes")
    assert module.load("a.toml") == "tom"  # the case the old function raised on


def test_a_method_s_old_run_starts_from_its_instance_as_it_was(tmp_path: Path) -> None:
    """A method that consumes its instance's state (a docstring parser taking its next
    lines): the function before the fix runs on a copy of the instance taken before the fixed
    one ran, so an old case stays the fix's and the instance is left as the fix left it."""
    base = ("class Reader:\n    def __init__(self, lines):\n        self.lines = list(lines)\n\n"
            "    def section(self, param):\n        taken = self.lines.pop(0)\n"
            "        return 'old:' + taken\n")
    post = base.replace("        return 'old:' + taken\n", "        if param:\n"
                        "            return 'new:' + taken\n        return 'old:' + taken\n")
    module = first_part_mutant(tmp_path, base, post, "reader")
    reader = module.Reader(["a", "b"])
    assert reader.section(False) == "old:a" and reader.lines == ["b"]  # as before the fix
    assert reader.section(True) == "new:" and reader.lines == []  # the new case, made wrong


def test_an_instance_rebuilt_through_its_constructor_is_not_copied(tmp_path: Path) -> None:
    """A class with a copy protocol of its own (sympy's rebuild through the constructor) may
    register the copy in the original's place: its instance is shared, never copied."""
    base = ("REGISTRY = {}\n\n\nclass Unit:\n    def __init__(self, name):\n"
            "        self.name = name\n        REGISTRY[name] = self\n\n"
            "    def __reduce__(self):\n        return (Unit, (self.name,))\n\n"
            "    def scale(self, x):\n        if x < 0:\n            raise ValueError(x)\n"
            "        return x\n")
    post = base.replace("            raise ValueError(x)\n", "            return -x\n")
    module = first_part_mutant(tmp_path, base, post, "unit")
    unit = module.Unit("si")
    assert (unit.scale(2), unit.scale(-2)) == (2, 3)  # as before; the new case made wrong
    assert module.REGISTRY["si"] is unit and len(module.REGISTRY) == 1


def test_an_instance_the_fixed_method_leaves_as_it_was_is_shared(tmp_path: Path) -> None:
    """A method that changes nothing of its instance: the old one runs on the instance itself
    (a copy of a unit system made sympy's answers differ), never on a copy."""
    base = ("SEEN = []\n\n\nclass Scale:\n    def __init__(self):\n        self.table = {}\n\n"
            "    def of(self, x):\n        SEEN.append(self)\n        if x < 0:\n"
            "            raise ValueError(x)\n        return x\n")
    post = base.replace("            raise ValueError(x)\n", "            return -x\n")
    module = first_part_mutant(tmp_path, base, post, "scale")
    scale = module.Scale()
    assert (scale.of(2), scale.of(-2)) == (2, 3)
    assert len(module.SEEN) == 4 and all(s is scale for s in module.SEEN)
