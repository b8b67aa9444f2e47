#!/usr/bin/env bash
# The main job: set everything up, then check the demo fleet and keep the results
# (SQLite in ${ENVCHECK_DATA_DIR:-~/.local/state/envcheck}).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
set +e
.venv/bin/envcheck check probes/demo.yaml "$@"
code=$?
set -e
echo "envcheck check exited $code (0 all pass, 1 an environment failed, 3 envcheck could not check)"
# The demo fleet has known defects by design: failures are the expected outcome here.
[[ $code -le 1 ]]
