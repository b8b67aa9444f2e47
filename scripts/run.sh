#!/usr/bin/env bash
# The main job: set everything up, then run the daemon on the demo catalogue (every suite in
# probes/) with the dashboard and metrics; results in SQLite under .envcheck/. Ctrl-C stops it
# all cleanly (in-flight probes finish and their containers are removed).
#
# A local registry (Debian's docker-registry, 127.0.0.1:5055 only, its config and storage under
# the data directory) holds some demo images, which probes/demo-registry.yaml follows by tag;
# a few minutes in, one of them is rebuilt and pushed to the same tag (the tag moves).
#
# Environment: ENVCHECK_PORT (API and /metrics, default 8787), ENVCHECK_DASHBOARD_PORT (8501),
# ENVCHECK_DATA_DIR (default .envcheck in this checkout), ENVCHECK_IMAGE_CACHE (the budget of
# the images envcheck pulls, default 2GiB), ENVCHECK_DEMO_TAG_MOVE_S (seconds from the start to
# the demo's tag move, default 210; "off" for none).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the registry binary too (its packaged service kept stopped: it would listen on every interface)
ENVCHECK_APT_EXTRA="docker-registry${ENVCHECK_APT_EXTRA:+ $ENVCHECK_APT_EXTRA}" \
  "$ROOT/scripts/setup.sh"
cd "$ROOT"

export ENVCHECK_DATA_DIR="${ENVCHECK_DATA_DIR:-$ROOT/.envcheck}"
PORT="${ENVCHECK_PORT:-8787}"
DASHBOARD_PORT="${ENVCHECK_DASHBOARD_PORT:-8501}"
DEMO_SOURCES_PORT=8765   # probes/demo-sources.yaml points there
DEMO_REGISTRY_PORT=5055  # probes/demo-registry.yaml points there
DEMO_REGISTRY_IMAGES=(envcheck-demo/healthy envcheck-demo/tool-missing)
TAG_MOVE_S="${ENVCHECK_DEMO_TAG_MOVE_S:-210}"
export ENVCHECK_IMAGE_CACHE="${ENVCHECK_IMAGE_CACHE:-2GiB}"
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

pids=()     # the parts: when one stops, everything stops
logs=()
helpers=()  # what finishes on its own (the tag move): stopped with the rest
stop() {
  trap - EXIT INT TERM
  ((${#helpers[@]})) && kill -TERM "${helpers[@]}" 2>/dev/null || true
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
# The demo's registry, likewise (another checkout's serving that port is used as it is), and
# the demo images it lacks pushed into it before the daemon's first look at their tags.
registry_log="$ENVCHECK_DATA_DIR/registry/registry.log"
mkdir -p "$ENVCHECK_DATA_DIR/registry"
if ! answers "http://127.0.0.1:$DEMO_REGISTRY_PORT/v2/"; then
  .venv/bin/python scripts/demo_registry.py serve --dir "$ENVCHECK_DATA_DIR/registry" \
    --port "$DEMO_REGISTRY_PORT" >>"$registry_log" 2>&1 &
  pids+=($!) logs+=("$registry_log")
fi
.venv/bin/python scripts/demo_registry.py push --port "$DEMO_REGISTRY_PORT" \
  "${DEMO_REGISTRY_IMAGES[@]}" >>"$ENVCHECK_DATA_DIR/registry/demo.log" 2>&1 || {
  echo "run: ERROR: pushing the demo images into the demo registry failed; last lines of" \
       "$ENVCHECK_DATA_DIR/registry/demo.log and $registry_log:" >&2
  tail -n 20 "$ENVCHECK_DATA_DIR/registry/demo.log" "$registry_log" >&2 || true
  exit 1
}
if [[ $TAG_MOVE_S != off ]]; then
  .venv/bin/python scripts/demo_registry.py move --port "$DEMO_REGISTRY_PORT" \
    --after "$TAG_MOVE_S" "${DEMO_REGISTRY_IMAGES[0]}" >>"$ENVCHECK_DATA_DIR/registry/demo.log" 2>&1 &
  helpers+=($!)
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
  registry      http://127.0.0.1:$DEMO_REGISTRY_PORT/v2/_catalog   (probes/demo-registry.yaml follows its tags)
                (its log: $(q "$ENVCHECK_DATA_DIR/registry/demo.log"); tag move: $([[ $TAG_MOVE_S == off ]] && echo off || echo "${TAG_MOVE_S} s in"))
  daemon log    $(q "$ENVCHECK_DATA_DIR/daemon.log")   (JSON lines)
Ctrl-C to stop.
MSG
# stop everything when any part stops
wait -n "${pids[@]}"
