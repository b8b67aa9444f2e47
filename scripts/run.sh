#!/usr/bin/env bash
# The main job: set everything up, then run the daemon on the demo catalogue (every suite in
# probes/) with the dashboard and metrics; results in SQLite under .envcheck/. Ctrl-C stops it
# all cleanly (in-flight probes finish and their containers are removed).
#
# Environment: ENVCHECK_PORT (API and /metrics, default 8787), ENVCHECK_DASHBOARD_PORT (8501),
# ENVCHECK_DATA_DIR (default .envcheck in this checkout).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"

export ENVCHECK_DATA_DIR="${ENVCHECK_DATA_DIR:-$ROOT/.envcheck}"
PORT="${ENVCHECK_PORT:-8787}"
DASHBOARD_PORT="${ENVCHECK_DASHBOARD_PORT:-8501}"
DEMO_SOURCES_PORT=8765   # probes/demo-sources.yaml points there
mkdir -p "$ENVCHECK_DATA_DIR" "$ENVCHECK_DATA_DIR/exports"  # filled after each assessed window
# A token for quarantine changes from the dashboard or the API (kept out of the environment
# of every other process, never printed).
TOKEN_FILE="$ENVCHECK_DATA_DIR/api-token"
[[ -s "$TOKEN_FILE" ]] || (umask 077 && .venv/bin/python -c \
  'import secrets; print(secrets.token_urlsafe(32))' >"$TOKEN_FILE")
export ENVCHECK_API_TOKEN_FILE="$TOKEN_FILE"

answers() {  # URL answers 2xx within 2 s
  .venv/bin/python -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)' \
    "$1" >/dev/null 2>&1
}

pids=()
logs=()
stop() {
  trap - EXIT INT TERM
  ((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null || true
  wait || true
}
trap stop EXIT INT TERM

# The demo data APIs the demo-sources suite calls (loopback only); one already serving them
# (another checkout's run) is used as it is.
if ! answers "http://127.0.0.1:$DEMO_SOURCES_PORT/weather"; then
  .venv/bin/python -m tests.http_server --port "$DEMO_SOURCES_PORT" \
    >"$ENVCHECK_DATA_DIR/demo-sources.log" 2>&1 &
  pids+=($!) logs+=("$ENVCHECK_DATA_DIR/demo-sources.log")
fi
.venv/bin/envcheck daemon probes/ --port "$PORT" --window 30 2>"$ENVCHECK_DATA_DIR/daemon.log" &
pids+=($!) logs+=("$ENVCHECK_DATA_DIR/daemon.log")
.venv/bin/envcheck dashboard --port "$DASHBOARD_PORT" --api-url "http://127.0.0.1:$PORT" \
  >"$ENVCHECK_DATA_DIR/dashboard.log" 2>&1 &
pids+=($!) logs+=("$ENVCHECK_DATA_DIR/dashboard.log")

# Print where to look only once everything answers: a gate pasted at once must find the
# suites, a dashboard opened at once must load. The daemon's port answers /healthz from its
# first moment (while it starts, only its status): the full API is there once /docs answers.
api="http://127.0.0.1:$PORT"
deadline=$((SECONDS + 120))
until answers "$api/docs" && answers "http://127.0.0.1:$DASHBOARD_PORT/_stcore/health"; do
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    echo "run: ERROR: a part of envcheck exited at start (port in use?); last lines of" \
         "its logs:" >&2
    tail -n 20 "${logs[@]}" >&2 || true
    exit 1
  done
  if ((SECONDS >= deadline)); then
    echo "run: ERROR: the daemon or the dashboard did not answer within 120 s; see" \
         "${logs[*]}" >&2
    exit 1
  fi
  sleep 1
done

# Every command below works pasted into a new shell, from any directory.
q() { printf '%q' "$1"; }
cat <<MSG
envcheck is running on the demo catalogue (probes/):
  dashboard     http://127.0.0.1:$DASHBOARD_PORT
  API           $api/docs   (allowlist: $api/v1/suites/demo/allowlist)
  metrics       $api/metrics
  gate          ENVCHECK_DATA_DIR=$(q "$ENVCHECK_DATA_DIR") $(q "$ROOT/.venv/bin/envcheck") gate --suite demo
                (exits 1 until the first probes of the demo suite have passed)
  exports       $(q "$ENVCHECK_DATA_DIR/exports")/   (written after each 30 s window)
  daemon log    $(q "$ENVCHECK_DATA_DIR/daemon.log")   (JSON lines)
Ctrl-C to stop.
MSG
# stop everything when any part stops
wait -n "${pids[@]}"
