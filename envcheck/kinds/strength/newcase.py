"""Wrong fixes that handle the new case with a wrong value (``new_case_value``): the fix's
function returns something else exactly where it returns what it did not return before the
fix, and the same as the fix everywhere else.

It stands for the most common wrong fix that a weak fail-to-pass test accepts: the case the
issue is about special-cased so that nothing raises any more, with a value nobody checked (a
factor evaluated or taken as 1, a section or a row left out, a flag the wrong way round),
while every input that worked before still does, so the pass-to-pass tests see no change.
No static edit makes that shape for an arbitrary fix, so the mutant decides at run time:

- each function whose lines the gold patch changes (and that existed before it: a new
  function has no "before") is renamed, the function as it was before the patch is added
  beside it, and a wrapper with the fixed function's parameters takes the name (the
  recorder of :mod:`.survivors` sees the same arguments; ``functools.update_wrapper`` gives
  it the fixed function's doc and signature object);
- the wrapper calls the fixed function, then the function before the fix on a deep copy of
  the arguments; a method runs on its instance, or, where the fixed one changed that
  instance (a field rebound, a list, dict, set or deque of it changed: a parser that consumes
  its own lines), on an instance made of its fields as they were before (its containers
  copied one level; no constructor runs: a class with a copy protocol of its own, as
  sympy's, rebuilds through its constructor, which may register the copy globally, so its
  instance is always shared, and a deep copy of a unit system made sympy's results differ);
  when the two differ (or the old one raised), the fixed value is handed back changed
  (:data:`WHICH`): its first part, its last part, one part short, or the value the
  fix returned last for another input where it returned what the old function did (a value
  of the right type and shape that the program makes, wrong for this input: the new case
  sent down the branch of an old one; as is where there is none yet). A call the old
  function could not take (an argument the fix added) is new API, not a new case of the old
  one: its value is the fix's. A value that cannot be changed that way (``None``, an object
  with no ``+ 1``) is handed back as is: the mutant then behaves as the fix, and the
  survivor is not distinguished, never confirmed;
- a function that returns nothing changes its arguments: the wrapper compares what the fixed
  function left in each argument with what the old one left in its copy, and where they
  differ (or the old one raised) cuts the first such argument one part short (its last item
  popped: a list's, a dict's, a view's) (:data:`STATE`);
- calls made while the wrapper runs (recursion) go to the function of the run they are made
  in, the fixed one or the one before: the outermost call compares the program before the
  fix with the program after it, and only that call's value is changed. The run before the
  fix is the control's own, not the program's: the recorder does not record it.

Skipped, with a note: decorated functions (a wrapper would have to re-create the decorator),
generators and coroutines (their value is not a return), functions that return nothing and
take no argument.
"""

from __future__ import annotations

import ast
import re
import warnings
from functools import partial

from envcheck.kinds.strength.diffs import FilePatch
from envcheck.kinds.strength.infection import changed_functions
from envcheck.kinds.strength.model import Operator
from envcheck.kinds.strength.newcase_runtime import HELPER
from envcheck.kinds.strength.pysource import PythonSource
from envcheck.kinds.strength.reverts import change_blocks
from envcheck.kinds.strength.sampling import Variant

__all__ = ["FUNCTIONS", "STATE", "WHICH", "new_case_variants"]

FUNCTIONS = 3  # changed functions per file given this operator's mutants
# what the wrapper changes in a value the fix newly returns, by the number the mutant passes
WHICH = ("its first part changed", "its last part changed", "one part short",
         "the fix's value for another input")
# of a function that returns nothing: what it newly does to an argument, made wrong
STATE = "an argument it changes left one part short"
STATE_WHICH = len(WHICH)
PREFIX = "_envcheck_"



class _Def:
    """One function of a module: its node and whether it is a method (in a class body)."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> None:
        self.node, self.method = node, method


def _defs(text: str) -> dict[str, _Def]:
    """Functions by qualified name, as :mod:`.infection` names them (``#2``: given twice)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(text)
    found: dict[str, _Def] = {}

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                found[name if name not in found else f"{name}#2"] = _Def(child, in_class)
                visit(child, name + ".<locals>.", False)
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".", True)
            else:
                visit(child, prefix, in_class)

    visit(tree, "", False)
    return found


def _own_nodes(node: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body (not of functions or classes inside it)."""
    own: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                      | ast.Lambda):
            continue
        own.append(child)
        stack.extend(ast.iter_child_nodes(child))
    return own


def _returns(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function returns a value anywhere (else what it does is to its
    arguments)."""
    return any(isinstance(n, ast.Return) and n.value is not None for n in _own_nodes(node))


def _unfit(fixed: _Def, before: _Def | None) -> str | None:
    """Why a changed function gets no mutant of this operator, or None."""
    node = fixed.node
    if before is None:
        return "new with the fix (nothing before it to differ from)"
    if node.decorator_list or before.node.decorator_list:
        return "decorated"
    if isinstance(node, ast.AsyncFunctionDef) or isinstance(before.node, ast.AsyncFunctionDef):
        return "a coroutine"
    own = _own_nodes(node)
    if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in own):
        return "a generator"
    if not _returns(node) and len(node.args.posonlyargs + node.args.args
                                  + node.args.kwonlyargs) <= fixed.method:
        return "returns nothing and takes no argument"
    if fixed.method != before.method:
        return "moved in or out of a class"
    if fixed.method and not (node.args.posonlyargs or node.args.args):
        return "a method with no positional parameter for its instance"
    return None


def _renamed(lines: list[str], name: str, new: str) -> list[str]:
    pattern = re.compile(rf"\bdef(\s+){re.escape(name)}\b")
    return [pattern.sub(rf"def\g<1>{new}", lines[0], count=1), *lines[1:]]


def _reindented(lines: list[str], old: str, new: str) -> list[str]:
    return [new + line[len(old):] if line.startswith(old) else line for line in lines]


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _render(post: str, base: str, fixed: _Def, before: _Def, helper_after: int,
            which: int) -> str:
    """``post`` with ``fixed`` wrapped as the module's doc says, for change ``which``."""
    lines = post.split("\n")
    node, old = fixed.node, before.node
    name = node.name
    start, end = node.lineno, node.end_lineno or node.lineno
    indent = _indent(lines[start - 1])
    base_lines = base.split("\n")[old.lineno - 1:old.end_lineno or old.lineno]
    fixed_name, before_name = f"{PREFIX}fixed_{name}", f"{PREFIX}before_{name}"
    args, kwargs, receiver = _forwarded(node.args, fixed.method)
    where = f"{receiver}." if receiver else ""
    # the fixed function's own parameters: the recorder sees the same arguments by name
    wrapper = [f"{indent}def {name}({ast.unparse(node.args)}):",
               f"{indent}    return _envcheck_new_case({where}{fixed_name}, {where}{before_name}, "
               f"{args}, {kwargs}, {which})",
               f"{indent}_envcheck_wrapped({name}, {fixed_name})"]
    block = [*_renamed(lines[start - 1:end], name, fixed_name), "",
             *_reindented(_renamed(base_lines, name, before_name), _indent(base_lines[0]),
                          indent), "", *wrapper]
    lines[start - 1:end] = block
    lines[helper_after:helper_after] = ["", *HELPER.rstrip("\n").split("\n"), ""]
    return "\n".join(lines)


def _forwarded(args: ast.arguments, method: bool) -> tuple[str, str, str | None]:
    """The wrapper's call of the function it wraps: its positional arguments as a tuple, its
    keyword ones as a dict, and the receiver (a method's first parameter) or None."""
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    receiver = positional.pop(0) if method else None
    if args.vararg is not None:
        positional.append(f"*{args.vararg.arg}")
    keywords = [f"{a.arg!r}: {a.arg}" for a in args.kwonlyargs]
    if args.kwarg is not None:
        keywords.append(f"**{args.kwarg.arg}")
    return (f"({', '.join(positional)}{',' if positional else ''})",
            "{" + ", ".join(keywords) + "}", receiver)


def _helper_line(text: str) -> int:
    """The line after which the helper goes: past the docstring and ``__future__`` imports."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        body = ast.parse(text).body
    after = 0
    for i, statement in enumerate(body):
        docstring = (i == 0 and isinstance(statement, ast.Expr)
                     and isinstance(statement.value, ast.Constant)
                     and isinstance(statement.value.value, str))
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if not (docstring or future):
            break
        after = statement.end_lineno or statement.lineno
    return after


def new_case_variants(fp: FilePatch, source: PythonSource, base: str
                      ) -> tuple[list[Variant], list[str]]:
    """The variants of this operator for one file (``fp`` placed in ``source``, the file
    after the fix; ``base``, before it), and a note for each changed function left out."""
    lines = set(fp.added_lines())
    lines.update(b.new_start for h in fp.hunks for b in change_blocks(h) if not b.added)
    try:
        changed = sorted(n for n in changed_functions(source.text, lines) if "#" not in n)
        post_defs, base_defs = _defs(source.text), _defs(base)
        helper_after = _helper_line(source.text)
    except (SyntaxError, ValueError, RecursionError):
        return [], []  # the host cannot parse it: the other operators still can
    variants: list[Variant] = []
    notes: list[str] = []
    wrapped = 0
    for qualname in changed:
        fixed, before = post_defs.get(qualname), base_defs.get(qualname)
        if fixed is None:
            continue
        why = _unfit(fixed, before)
        if why is not None:
            notes.append(f"no {Operator.NEW_CASE_VALUE} mutant of {source.path}:{qualname}: "
                         f"{why}")
            continue
        if wrapped >= FUNCTIONS:
            notes.append(f"no {Operator.NEW_CASE_VALUE} mutant of {source.path}:{qualname}: "
                         f"past {FUNCTIONS} functions")
            continue
        assert before is not None
        wrapped += 1
        end = fixed.node.end_lineno or fixed.node.lineno
        inside = tuple(sorted(n for n in lines if fixed.node.lineno <= n <= end))
        kinds = enumerate(WHICH) if _returns(fixed.node) else ((STATE_WHICH, STATE),)
        for which, what in kinds:
            does = "returns" if which < STATE_WHICH else "does to its arguments"
            variants.append(Variant(
                Operator.NEW_CASE_VALUE, source.path, inside[0] if inside else fixed.node.lineno,
                f"what {qualname} newly {does} (where it differs from before the fix): "
                f"{what}",
                partial(_render, source.text, base, fixed, before, helper_after, which),
                inside))
    return variants, notes
