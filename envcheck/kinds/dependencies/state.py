"""Read an image's installed software in one exec: the script, its inputs, its output parsed.

``dependencies.sh`` runs under ``/bin/sh`` as the sandbox user and reports the Python
packages (an inline program run by the env's ``python_bin``), Debian packages with their
version relations decided by ``dpkg --compare-versions`` in the container, executables and their
version output, one fresh interpreter per import, and ``pip check``. Nothing is compared
here: see :mod:`envcheck.kinds.dependencies.diff`.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass, field
from importlib.resources import files

from packaging.utils import canonicalize_name

from envcheck.catalogue.fields import DEB_OPERATORS, debian_relations
from envcheck.catalogue.models import Environment
from envcheck.catalogue.probe_specs import DependencySpec
from envcheck.sandbox.base import ExecResult, Sandbox

__all__ = ["SCRIPT", "Installed", "InstalledState", "Step", "parse_output", "read_state"]

SCRIPT = files(__package__).joinpath("dependencies.sh").read_text(encoding="utf-8")
# The JSON can be large (thousands of packages); every other payload is capped by the script.
OUTPUT_LIMIT = 16 * 1024 * 1024
STEP_TIMEOUT_STATUS = 124  # coreutils and busybox timeout

# Runs under any Python 3 the image has (no f-strings, no walrus). Iterating distributions in
# sys.path order and keeping the first of each name gives the one an import would load.
INVENTORY = r"""
import json, re, sys
out = {"version": "%d.%d.%d" % tuple(sys.version_info[:3]), "packages": [], "error": None}
try:
    from importlib import metadata
    dists = [(d.metadata["Name"], d.version) for d in metadata.distributions()]
except ImportError:
    try:
        import pkg_resources
        dists = [(d.project_name, d.version) for d in pkg_resources.working_set]
    except ImportError:
        dists = []
        out["error"] = "neither importlib.metadata nor pkg_resources is available"
seen = set()
for name, version in dists:
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key not in seen:
        seen.add(key)
        out["packages"].append([name, version])
sys.stdout.write(sys.argv[1] + " inventory " + json.dumps(out) + "\n")
"""


@dataclass(frozen=True, slots=True)
class Step:
    """One command the script ran with the step timeout."""

    status: int | None
    head: str = ""
    last: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 0

    def error(self, step_s: float) -> str:
        """Why the step failed, in one line."""
        if self.status == STEP_TIMEOUT_STATUS:
            return f"timed out after {step_s:g}s"
        if self.status is not None and self.status > 128 and not self.last:
            return f"killed by signal {self.status - 128}"
        lines = [ln for ln in (self.last or self.head).splitlines() if ln.strip()]
        return lines[-1].strip() if lines else f"exit status {self.status}"


@dataclass(frozen=True, slots=True)
class Installed:
    name: str
    version: str


@dataclass
class InstalledState:
    """What the script saw. Items it never reported (it was cut short) are absent."""

    complete: bool = False
    workdir_ok: bool | None = None
    python_path: str | None = None
    python_missing: bool = False
    python_version: str | None = None
    packages: dict[str, Installed] | None = None  # canonical name -> installed
    inventory: Step | None = None
    inventory_error: str | None = None
    dpkg_missing: bool = False
    debian: dict[str, str | None] = field(default_factory=dict)  # package -> version | absent
    relations: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    tools: dict[str, str | None] = field(default_factory=dict)  # tool -> path | missing
    versions: dict[str, Step] = field(default_factory=dict)  # tool -> its version output
    imports: dict[str, Step] = field(default_factory=dict)
    pip_check: Step | None = None


def step_timeout(env: Environment) -> float:
    """Each step gets half the exec timeout: one hung import cannot eat the whole budget."""
    return max(1.0, math.floor(env.timeouts.exec_s / 2))


def script_env(env: Environment, spec: DependencySpec, nonce: str,
               python: bool = True) -> dict[str, str]:
    debian = [" ".join([pkg, *(f"{DEB_OPERATORS[op]} {ver}"
                                for op, ver in debian_relations(want, pkg))])
              for pkg, want in spec.debian.items()]
    tools = [f"{'presence' if regex is None else 'version'} {tool}"
             for tool, regex in spec.executables.items()]
    return {
        "ENVCHECK_NONCE": nonce,
        "ENVCHECK_STEP_S": f"{step_timeout(env):g}",
        "ENVCHECK_WORKDIR": env.workdir,
        "ENVCHECK_PYTHON": spec.python_bin if python else "",
        "ENVCHECK_INVENTORY": INVENTORY,
        "ENVCHECK_IMPORTS": "\n".join(spec.imports),
        "ENVCHECK_TOOLS": "\n".join(tools),
        "ENVCHECK_DEBIAN": "\n".join(debian),
        "ENVCHECK_PIP_CHECK": "1" if spec.pip_check else "0",
        # read-only: no .pyc written into the image, no pip self-check or prompt
        "PYTHONDONTWRITEBYTECODE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }


def needs_python(spec: DependencySpec) -> bool:
    return bool(spec.python or spec.imports or spec.lock or spec.pip_check)


def read_state(sandbox: Sandbox, env: Environment, spec: DependencySpec,
               python: bool | None = None) -> tuple[InstalledState, ExecResult]:
    """Run the script once; ``python`` forces the interpreter on or off (default: if needed)."""
    nonce = secrets.token_hex(8)
    wanted = needs_python(spec) if python is None else python
    result = sandbox.exec(["/bin/sh", "-c", SCRIPT], user=env.user,
                          env=script_env(env, spec, nonce, python=wanted),
                          timeout_s=env.timeouts.exec_s, output_limit=OUTPUT_LIMIT)
    return parse_output(result.text, nonce), result


def parse_output(text: str, nonce: str) -> InstalledState:
    state = InstalledState()
    mark = f"@@{nonce} "
    frame: tuple[str, list[str], list[str]] | None = None  # tag, head lines, last lines
    target: list[str] = []
    for line in text.splitlines():
        if not line.startswith(mark):
            if frame is not None:
                target.append(line)
            continue
        words = line[len(mark):].split(" ")
        if frame is not None:
            tag, head, last = frame
            if words[0] == "last" and " ".join(words[1:]) == tag:
                target = last
                continue
            if words[0] == "end" and " ".join(words[1:-1]) == tag:
                status = int(words[-1]) if words[-1].isdigit() else None
                _step(state, tag, Step(status, "\n".join(head), "\n".join(last)))
                frame = None
                continue
            if not (words[0] == "inventory" and target is head):
                target.append(line)  # the inventory line alone sits inside its own frame
                continue
        _control(state, words, line[len(mark):])
        if words[0] == "begin":
            frame = (" ".join(words[1:]), [], [])
            target = frame[1]
    return state


def _control(state: InstalledState, words: list[str], rest: str) -> None:
    match words:
        case ["workdir", status]:
            state.workdir_ok = status == "ok"
        case ["python", "missing"]:
            state.python_missing = True
        case ["python", *_]:
            state.python_path = rest.removeprefix("python ")
        case ["inventory", *_]:
            _inventory(state, rest.removeprefix("inventory "))
        case ["tool", "missing", name]:
            state.tools[name] = None
        case ["tool", "found", name, *_]:
            state.tools[name] = rest.split(" ", 3)[3]
        case ["deb", "nodpkg"]:
            state.dpkg_missing = True
        case ["deb", "absent", name]:
            state.debian[name] = None
        case ["deb", "installed", name, version]:
            state.debian[name] = version
        case ["debcmp", name, op, want, verdict]:
            state.relations.setdefault(name, []).append((op, want, verdict))
        case ["done"]:
            state.complete = True


def _inventory(state: InstalledState, payload: str) -> None:
    try:
        data = json.loads(payload)
        state.python_version = str(data["version"])
        packages: dict[str, Installed] = {canonicalize_name(str(n)): Installed(str(n), str(v))
                                          for n, v in data["packages"]}
    except (ValueError, KeyError, TypeError):
        return  # no usable inventory: the inventory step's output says why
    if data.get("error") is None:
        state.packages = packages
    else:
        state.inventory_error = str(data["error"])


def _step(state: InstalledState, tag: str, step: Step) -> None:
    kind, _, name = tag.partition(" ")
    if kind == "inventory":
        # ran, yet listed nothing: say why instead of quoting the JSON line
        state.inventory = Step(1, last=state.inventory_error) if state.inventory_error else step
    elif kind == "import":
        state.imports[name] = step
    elif kind == "version" or (kind == "version-V"
                               and not state.versions.get(name, Step(None)).ok):
        state.versions[name] = step
    elif kind == "pip-check":
        state.pip_check = step
