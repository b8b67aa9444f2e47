"""The run-time half of the ``new_case_value`` mutants (:mod:`.newcase`): source text put into
the mutated module, after its docstring and ``__future__`` imports. It runs in the task's
interpreter (any Python 3 the sandbox has), so it imports only the standard library, inside
its functions, and its names start with ``_envcheck_`` so that they shadow nothing of the
module's."""

from __future__ import annotations

__all__ = ["HELPER"]

HELPER = '''\
def _envcheck_off(value):  # envcheck wrong-fix control: one value made wrong
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float, complex)):
        return value + 1
    if isinstance(value, (str, bytes)):
        return value[:-1]
    if value is None:
        return value
    try:
        off = value + 1
    except Exception:
        return value
    return value if off is NotImplemented else off


def _envcheck_kept(key):  # envcheck wrong-fix control: the fix's values of old cases
    return _envcheck_new_case.__dict__.setdefault("kept", {}).setdefault(key, [])


def _envcheck_keep(key, value):  # the fix's value where it is the old one, for which == 3
    import copy
    kept = _envcheck_kept(key)
    try:
        kept.append(copy.deepcopy(value))
    except Exception:
        return
    del kept[:-8]


def _envcheck_other(key, value):  # the latest old case's value of the same type, else value
    import copy
    for other in reversed(_envcheck_kept(key)):
        try:
            if type(other) is type(value) and bool(other != value):
                return copy.deepcopy(other)
        except Exception:
            continue
    return value


def _envcheck_pairs(bound, copies):  # each argument given beside its copy
    return list(zip(bound.args, copies[0])) + [
        (v, copies[1][k]) for k, v in bound.kwargs.items() if k in copies[1]]


def _envcheck_short_state(pairs):  # envcheck wrong-fix control: a changed argument cut short
    for now, then in pairs:
        if type(now).__eq__ is object.__eq__:  # no equality of its own: cannot tell
            continue
        try:
            differs = bool(now != then)
        except Exception:
            continue
        if differs:
            for cut in ("pop", "popitem"):
                try:
                    getattr(now, cut)()
                    return
                except Exception:
                    continue
            return


def _envcheck_changed(value, which, key=None):  # envcheck wrong-fix control: made wrong
    if which == 3:
        return _envcheck_other(key, value)
    if which == 2:
        if isinstance(value, str) and "\\n" in value.strip("\\n"):
            return "\\n".join(value.rstrip("\\n").split("\\n")[:-1])
        if isinstance(value, (list, str, bytes)):
            return value[:-1]
        if isinstance(value, dict) and value:
            short = dict(value)
            short.popitem()
            return short
        return value
    if isinstance(value, (tuple, list)):
        parts = list(value)
        if len(parts) < (2 if which == 1 else 1):
            return value
        at = 0 if which == 0 else len(parts) - 1
        parts[at] = _envcheck_off(parts[at])
        if type(value) in (tuple, list):
            return type(value)(parts)
        try:
            return type(value)(*parts)
        except Exception:
            return value
    return _envcheck_off(value) if which == 0 else value


_ENVCHECK_HELD = (list, dict, set, bytearray)


def _envcheck_snapshot(receiver):  # a method's instance's fields, its containers copied
    # one level (no constructor runs: a class with a copy protocol of its own, as sympy's,
    # rebuilds through its constructor, which may register the copy in the original's place)
    kind = type(receiver)
    if receiver is None or kind.__reduce_ex__ is not object.__reduce_ex__ or \
            kind.__reduce__ is not object.__reduce__ or hasattr(kind, "__deepcopy__"):
        return None
    import collections
    import copy
    try:
        fields = dict(vars(receiver))
        held = {k: copy.copy(v) for k, v in fields.items()
                if isinstance(v, _ENVCHECK_HELD + (collections.deque,))}
    except Exception:
        return None
    return fields, held


def _envcheck_as_it_was(before, receiver, snapshot):  # the old method on the instance as
    import types  # it was, where the fixed one changed it; else on the instance itself
    fields, held = snapshot
    try:
        now = vars(receiver)
        same = now.keys() == fields.keys() and all(
            now[k] is v and (k not in held or held[k] == v) for k, v in fields.items())
        if same:
            return before
        clone = object.__new__(type(receiver))
        vars(clone).update({**fields, **held})
    except Exception:
        return before
    return types.MethodType(before.__func__, clone)


def _envcheck_new_case(fixed, before, args, kwargs, which):  # envcheck wrong-fix control
    import copy
    import threading
    state = _envcheck_new_case.__dict__.setdefault("state", threading.local())
    inside = getattr(state, "inside", None)
    if inside is not None:
        return (before if inside == "before" else fixed)(*args, **kwargs)
    import inspect
    try:  # the arguments the caller gave (a parameter left at its default is not passed on)
        signature = inspect.signature(fixed)
        bound = signature.bind(*args, **kwargs)
        for name, parameter in signature.parameters.items():
            if name in bound.arguments and bound.arguments[name] is parameter.default:
                del bound.arguments[name]
        saved = copy.deepcopy((bound.args, bound.kwargs))
        pristine = copy.deepcopy(saved) if which == 4 else None
        receiver = getattr(before, "__self__", None)
        snapshot = _envcheck_snapshot(receiver)
    except Exception:  # no copy of the call: nothing to compare the fix's value with
        saved = None
    key = getattr(fixed, "__qualname__", "")
    try:
        state.inside = "fixed"
        value = fixed(*args, **kwargs)
        if saved is None:
            return value
        if snapshot is not None:  # a method that changed its instance: the old one runs on
            before = _envcheck_as_it_was(before, receiver, snapshot)  # the instance as it was
        try:
            inspect.signature(before).bind(*saved[0], **saved[1])
        except TypeError:  # a call the function before the fix could not take: new API
            return value
        except ValueError:
            pass
        state.inside = "before"
        import sys
        quiet = getattr(sys.modules.get("_envcheck_record"), "QUIET", [0])
        quiet[0] += 1
        try:
            old = before(*saved[0], **saved[1])
        except Exception:
            if which == 4:  # the old function raised: what the fix did to them is new
                _envcheck_short_state(_envcheck_pairs(bound, pristine))
                return value
            return _envcheck_changed(value, which, key)
        finally:
            quiet[0] -= 1
        if which == 4:  # the arguments the fix changed, against what the old function did
            _envcheck_short_state(_envcheck_pairs(bound, saved))
            return value
        try:
            differs = bool(old != value)
        except Exception:
            differs = False
        if not differs and which == 3:
            _envcheck_keep(key, value)
        return _envcheck_changed(value, which, key) if differs else value
    finally:
        state.inside = None


def _envcheck_wrapped(wrapper, fixed):  # the fixed function's signature and doc, its name
    import functools
    name, qualname = wrapper.__name__, wrapper.__qualname__
    functools.update_wrapper(wrapper, fixed)
    wrapper.__name__, wrapper.__qualname__ = name, qualname
'''
