"""Installs envcheck's behaviour recorder in the site-packages of the interpreter running it.

Run by envcheck inside its sandbox, by each Python it finds, for the wrong-fix controls' own
runs: ``python install.py MODULE`` copies MODULE (``_envcheck_record.py``) into the first of
the interpreter's site-packages folders it can write, with a ``.pth`` line that imports it at
start-up (which ``python -I`` still reads, unlike ``PYTHONPATH``), and prints
``envcheck:recorder-in:FOLDER``. Any Python from 3.6.
"""

import os
import site
import sys
import sysconfig
from typing import List


def _folders() -> List[str]:
    found: List[str] = []
    try:
        found.extend(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site.py
        pass
    found.append(sysconfig.get_paths()["purelib"])
    return [f for i, f in enumerate(found) if f not in found[:i] and os.path.isdir(f)]


def main() -> int:
    with open(sys.argv[1]) as handle:
        module = handle.read()
    for folder in _folders():
        try:
            with open(os.path.join(folder, "_envcheck_record.py"), "w") as handle:
                handle.write(module)
            with open(os.path.join(folder, "_envcheck_record.pth"), "w") as handle:
                handle.write("import _envcheck_record\n")
        except OSError:
            continue
        print("envcheck:recorder-in:" + folder)
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
