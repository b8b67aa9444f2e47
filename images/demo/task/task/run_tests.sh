#!/bin/sh
# Run the task's test suite; results go to JUnit XML at $JUNIT.
# Extra arguments are passed to pytest (e.g. -p random_order, -k NAME).
set -eu
cd "${WORKSPACE:-/workspace}"
exec python3 -m pytest -p no:cacheprovider --junitxml="${JUNIT:-/tmp/envcheck-junit.xml}" tests "$@"
