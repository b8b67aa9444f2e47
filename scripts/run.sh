#!/usr/bin/env bash
# The main job: set everything up, then run the daemon on the demo catalogue (every suite in
# probes/) with the dashboard and metrics; results in SQLite under .envcheck/. Ctrl-C stops it
# all cleanly (in-flight probes finish and their containers are removed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"

export ENVCHECK_DATA_DIR="${ENVCHECK_DATA_DIR:-$ROOT/.envcheck}"
PORT="${ENVCHECK_PORT:-8787}"
DASHBOARD_PORT="${ENVCHECK_DASHBOARD_PORT:-8501}"
DEMO_SOURCES_PORT=8765   # probes/demo-sources.yaml points there
mkdir -p "$ENVCHECK_DATA_DIR"
# A token for quarantine changes from the dashboard or the API (kept out of the environment
# of every other process, never printed).
TOKEN_FILE="$ENVCHECK_DATA_DIR/api-token"
[[ -s "$TOKEN_FILE" ]] || (umask 077 && .venv/bin/python -c \
  'import secrets; print(secrets.token_urlsafe(32))' >"$TOKEN_FILE")
export ENVCHECK_API_TOKEN_FILE="$TOKEN_FILE"

pids=()
stop() {
  trap - EXIT INT TERM
  ((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null || true
  wait || true
}
trap stop EXIT INT TERM

# the demo data APIs the demo-sources suite calls (loopback only)
.venv/bin/python -m tests.http_server --port "$DEMO_SOURCES_PORT" >"$ENVCHECK_DATA_DIR/demo-sources.log" 2>&1 &
pids+=($!)
.venv/bin/envcheck daemon probes/ --port "$PORT" --window 30 2>"$ENVCHECK_DATA_DIR/daemon.log" &
pids+=($!)
.venv/bin/envcheck dashboard --port "$DASHBOARD_PORT" --api-url "http://127.0.0.1:$PORT" \
  >"$ENVCHECK_DATA_DIR/dashboard.log" 2>&1 &
pids+=($!)

cat <<MSG
envcheck is running on the demo catalogue (probes/):
  dashboard     http://127.0.0.1:$DASHBOARD_PORT
  API           http://127.0.0.1:$PORT/docs   (allowlist: /v1/suites/demo/allowlist)
  metrics       http://127.0.0.1:$PORT/metrics
  gate          .venv/bin/envcheck gate --suite demo
  exports       $ENVCHECK_DATA_DIR/exports/
  daemon log    $ENVCHECK_DATA_DIR/daemon.log (JSON lines)
Ctrl-C to stop.
MSG
# stop everything when any part stops
wait -n "${pids[@]}"
