#!/bin/sh
# Run the task's tests; results go to JUnit XML at $JUNIT.
# Arguments (test ids, in the order to run them, and/or pytest options such as -k NAME) replace
# the default target `tests`; with none, the whole suite runs. envcheck's tests probe calls
# `run_tests.sh {tests}` to run the declared tests in a shuffled order.
set -eu
cd "${WORKSPACE:-/workspace}"
[ "$#" -gt 0 ] || set -- tests
exec python3 -m pytest -p no:cacheprovider --junitxml="${JUNIT:-/tmp/envcheck-junit.xml}" "$@"
