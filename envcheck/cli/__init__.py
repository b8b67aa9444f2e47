"""The ``envcheck`` command line (:mod:`envcheck.cli.app`).

``main`` is imported on call so that importing a submodule (``envcheck.cli.common``) does not
build the whole command tree.
"""


def main() -> None:
    from envcheck.cli.app import main as run

    run()
