#!/usr/bin/env bash
# The test command: setup, PostgreSQL (best effort), ruff, mypy, layers, the docs site, pytest.
#
#   scripts/test.sh [PYTEST ARGS...]
#
# Exits with pytest's status (5, "no tests collected", is a failure too); if pytest passes but
# ruff, mypy, the layers or the docs site failed, exits 1. PostgreSQL is best effort: when it
# cannot be made to answer on 127.0.0.1:5432 a warning says so and the tests that need it fail
# or skip on their own terms.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { printf 'test: %s\n' "$*"; }
warn() { printf 'test: WARNING: %s\n' "$*" >&2; }
is_root() { [[ $(id -u) -eq 0 ]]; }

# promtool, Prometheus and Alertmanager for tests/test_alerts.py, Compose v1 for the stack's
# test, systemd-analyze for the unit's, ip (iproute2) for tests/test_compose_network.py and the
# distribution registry the image tests run on 127.0.0.1 (installed only when missing; its
# packaged service kept stopped by setup.sh)
export ENVCHECK_APT_EXTRA="prometheus prometheus-alertmanager chromium docker-compose systemd iproute2 docker-registry${ENVCHECK_APT_EXTRA:+ $ENVCHECK_APT_EXTRA}"
# the tests cover every extra: the dashboard (streamlit), the Ray executor, Parquet datasets and
# the documentation site (MkDocs with the Material theme)
export ENVCHECK_EXTRAS="${ENVCHECK_EXTRAS:-dev,dashboard,ray,parquet,docs}"
"$ROOT/scripts/setup.sh"
# envcheck's own image and the stack's services image (tests/test_deploy_*.py); cached
.venv/bin/python scripts/build_deploy_images.py

# --- the released SWE-bench harness, for the parity test (tests/test_testlogs_parity.py) ------
# Its own small virtualenv, so nothing of it reaches envcheck's: the package without its
# dependencies (Docker's client, Modal, datasets: its log parsers and grading need none of them),
# and unidiff, which its log_parsers package imports.
SWEBENCH_VENV="$ROOT/.venv-swebench"
SWEBENCH_PINS="swebench==5.0.2 unidiff==0.7.5"
if [[ "$(cat "$SWEBENCH_VENV/.envcheck-pins" 2>/dev/null)" != "$SWEBENCH_PINS" ]]; then
  log "creating $SWEBENCH_VENV ($SWEBENCH_PINS, without their dependencies)"
  rm -rf "$SWEBENCH_VENV"
  python3 -m venv "$SWEBENCH_VENV"
  # shellcheck disable=SC2086  # the pins are words
  "$SWEBENCH_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    $SWEBENCH_PINS
  printf '%s\n' "$SWEBENCH_PINS" >"$SWEBENCH_VENV/.envcheck-pins"
fi

# --- PostgreSQL on 127.0.0.1:5432 (trust auth, database "test") -------------------------------
pg_up() { command -v pg_isready >/dev/null 2>&1 && pg_isready -h 127.0.0.1 -p 5432 -t 3 >/dev/null 2>&1; }
pg_test_db() {
  PGCONNECT_TIMEOUT=5 psql -h 127.0.0.1 -p 5432 -U postgres -d test -Atqc 'select 1' \
    >/dev/null 2>&1
}

ensure_postgres() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if ! pg_up && is_root && command -v apt-get >/dev/null 2>&1; then
      log "installing PostgreSQL (apt-get install postgresql)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
  fi
  local version conf
  version="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1 || true)"
  conf="/etc/postgresql/$version/main"
  if [[ -n $version && -f "$conf/pg_hba.conf" ]] && is_root \
    && ! grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' \
      "$conf/pg_hba.conf"; then
    log "PostgreSQL $version: trusting local TCP connections from 127.0.0.1 (pg_hba.conf)"
    sed -i '1i host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"
    pg_up && pg_ctlcluster --skip-systemctl-redirect "$version" main reload || true
  fi
  if ! pg_up; then
    if [[ -z $version ]] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
      warn "PostgreSQL is not installed; tests marked 'postgres' cannot run"
      return 0
    fi
    log "starting PostgreSQL $version/main"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    local deadline=$((SECONDS + 30))
    until pg_up; do
      if ((SECONDS >= deadline)); then
        warn "PostgreSQL $version/main does not answer on 127.0.0.1:5432"
        return 0
      fi
      sleep 1
    done
  fi
  if command -v psql >/dev/null 2>&1 && ! pg_test_db; then
    log "creating database 'test'"
    PGCONNECT_TIMEOUT=5 psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -qc 'CREATE DATABASE test' \
      >/dev/null 2>&1 || true
    pg_test_db || warn "cannot connect as postgres to database 'test' on 127.0.0.1:5432 (trust auth?)"
  fi
}
ensure_postgres

# --- lint, types, tests ------------------------------------------------------------------------
failed=()
log "ruff check"
.venv/bin/ruff check envcheck tests scripts bench dashboards docs || failed+=(ruff)
log "mypy"
.venv/bin/mypy || failed+=(mypy)
log "layers (import contracts in pyproject.toml)"
.venv/bin/lint-imports --no-cache || failed+=(layers)
# the site's pages, links and anchors, and its reference generated from this checkout: offline,
# in a few seconds, into a folder of its own (site/ is the writer's). Not --quiet: it hides the
# warnings --strict counts, and the build passes with them.
log "docs (mkdocs build --strict)"
docs_out="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$docs_out" \
  || failed+=(docs)
rm -rf "$docs_out"
# Two processes (ENVCHECK_TEST_WORKERS; 0 runs in this one), each given whole files: most of a
# test's time is the engine's, containers starting and stopping, so two share the 2 cores of
# the CI machine well. A file's module fixtures (a built task, a Ray cluster) stay in one.
workers="${ENVCHECK_TEST_WORKERS:-2}"
log "pytest -n $workers --dist loadfile $*"
status=0
# the slowest tests, so that what the suite costs stays visible in every CI log
.venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=40 "$@" || status=$?

if ((status == 5)); then
  echo "test: FAILED: pytest collected no tests" >&2
elif ((status != 0)); then
  echo "test: FAILED: pytest exited with status $status" >&2
fi
if ((${#failed[@]})); then
  echo "test: FAILED: ${failed[*]}" >&2
  ((status != 0)) || status=1
fi
((status != 0)) || log "all passed"
exit "$status"
