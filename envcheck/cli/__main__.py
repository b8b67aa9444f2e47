"""``python -m envcheck.cli``."""

from envcheck.cli.app import main

main()
