#!/usr/bin/env bash
# One idempotent setup for envcheck: system packages, .venv, a Docker engine, the base image and
# the demo fleet. Safe to run again and again: a second run skips everything that already exists
# and takes a few seconds.
#
#   scripts/setup.sh
#
# Environment:
#   ENVCHECK_EXTRAS      pip extras to install (default: dev,dashboard), e.g. "dev,dashboard,ray"
#   ENVCHECK_APT_EXTRA   extra Debian packages (space-separated), installed only when missing
#   ENVCHECK_DOCKERD_LOG where a dockerd started by this script logs
#                        (default: /var/log/envcheck/dockerd.log)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

EXTRAS="${ENVCHECK_EXTRAS:-dev,dashboard}"
DOCKERD_LOG="${ENVCHECK_DOCKERD_LOG:-/var/log/envcheck/dockerd.log}"
BASE_IMAGE="${ENVCHECK_BASE_IMAGE:-envcheck/base:bookworm}"
VENV="$ROOT/.venv"
STAMP="$VENV/.envcheck-install-stamp"
START="$EPOCHREALTIME"

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }
is_root() { [[ $(id -u) -eq 0 ]]; }
is_debian() { [[ -f /etc/debian_version ]] && command -v apt-get >/dev/null 2>&1; }
pkg_installed() { dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# Serialise concurrent runs (two shells running the test command at once). The lock lives on
# fd 9 of this script only: every long-lived child (dockerd) is started with 9>&- so it cannot
# inherit the lock and hold it for its whole life.
LOCK_FILE="${ENVCHECK_SETUP_LOCK:-${TMPDIR:-/tmp}/envcheck-setup.lock}"
LOCK_WAIT_S="${ENVCHECK_SETUP_LOCK_WAIT_S:-900}"
lock_holders() {  # "pid (name)" of every process with the lock file open, ours excepted
  local fd pid target
  for fd in /proc/[0-9]*/fd/*; do
    target="$(readlink "$fd" 2>/dev/null)" || continue
    [[ $target == "$LOCK_FILE" ]] || continue
    pid="${fd#/proc/}"; pid="${pid%%/*}"
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    printf '%s (%s) ' "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null || echo '?')"
  done
}
if command -v flock >/dev/null 2>&1; then
  exec 9>"$LOCK_FILE"
  if ! flock -n 9; then
    log "waiting up to ${LOCK_WAIT_S} s for another envcheck setup to finish" \
        "(lock $LOCK_FILE, held by: $(lock_holders))"
    flock -w "$LOCK_WAIT_S" 9 || die "another envcheck setup still holds $LOCK_FILE after" \
      "${LOCK_WAIT_S} s (held by: $(lock_holders)); if that process is not a setup, stop it" \
      "or remove the lock file (ENVCHECK_SETUP_LOCK_WAIT_S sets the wait)"
  fi
fi

# --- 1. system packages ------------------------------------------------------------------------
summary_apt="apt: nothing to install"
wanted=()
command -v dockerd >/dev/null 2>&1 || wanted+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || wanted+=(debootstrap)
if [[ ! -x "$VENV/bin/python" ]] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  wanted+=(python3-venv)
fi
for pkg in ${ENVCHECK_APT_EXTRA:-}; do
  pkg_installed "$pkg" || wanted+=("$pkg")
done
if ((${#wanted[@]})); then
  if is_root && is_debian; then
    log "apt-get install ${wanted[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # A package's postinst may start its service (docker-registry's listens on :5000 on every
    # interface): a policy-rc.d that answers 101 ("action forbidden") keeps every service of
    # this install stopped. One already there (a container image's) is left as it is.
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [[ ! -e $policy ]]; then
      printf '#!/bin/sh\n# envcheck setup: no service starts during its install\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      own_policy=1
    fi
    install_status=0
    apt-get install -y -qq "${wanted[@]}" >/dev/null || install_status=$?
    [[ -z $own_policy ]] || rm -f "$policy"
    ((install_status == 0)) || die "apt-get install ${wanted[*]} failed ($install_status)"
    summary_apt="apt: installed ${wanted[*]}"
  else
    die "missing system packages: ${wanted[*]} (install them as root: apt-get install ${wanted[*]})"
  fi
fi
# The tests run the registry binary themselves on 127.0.0.1 with their own config: the
# packaged service (every interface, :5000) stays stopped and disabled, on every run.
if [[ " ${ENVCHECK_APT_EXTRA:-} " == *" docker-registry "* ]] && pkg_installed docker-registry \
  && is_root; then
  if [[ -d /run/systemd/system ]] && systemctl is-active --quiet docker-registry.service; then
    log "stopping the packaged docker-registry service"
    systemctl stop docker-registry.service
  fi
  if [[ -f /var/run/docker-registry.pid ]]; then
    start-stop-daemon --stop --quiet --oknodo --pidfile /var/run/docker-registry.pid \
      --exec /usr/bin/docker-registry
    rm -f /var/run/docker-registry.pid
  fi
  if command -v systemctl >/dev/null 2>&1 \
    && [[ $(systemctl is-enabled docker-registry.service 2>/dev/null) == enabled ]]; then
    systemctl disable --quiet docker-registry.service 2>/dev/null || true
  fi
  if command -v update-rc.d >/dev/null 2>&1 && compgen -G '/etc/rc[2-5].d/S*docker-registry' >/dev/null
  then
    update-rc.d docker-registry disable >/dev/null 2>&1 || true
  fi
fi

# --- 2. Python virtualenv ----------------------------------------------------------------------
command -v python3 >/dev/null 2>&1 || die "python3 not found"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "envcheck needs Python >= 3.11 (found $(python3 -V 2>&1))"
summary_venv="venv: up to date"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
  rm -f "$STAMP"
fi
# The stamp holds the pyproject hash and the extras installed; a run that asks for a subset of
# them (run.sh after test.sh) installs nothing, one that asks for more installs the union.
project_hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
{ read -r have_hash have_extras <"$STAMP"; } 2>/dev/null || { have_hash=""; have_extras=""; }
have_extras="${have_extras#extras=}"  # the stamp's older form
[[ $have_hash == "$project_hash" ]] || have_extras=""
missing_extras="$(comm -13 <(tr ',' '\n' <<<"$have_extras" | sort -u) \
                          <(tr ',' '\n' <<<"$EXTRAS" | sort -u) | paste -sd, -)"
if [[ $have_hash != "$project_hash" || -n $missing_extras ]]; then
  union="$(tr ',' '\n' <<<"$have_extras,$EXTRAS" | grep -v '^$' | sort -u | paste -sd, -)"
  log "pip install -e .[$union]"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$union]"
  printf '%s %s\n' "$project_hash" "$union" >"$STAMP"
  summary_venv="venv: installed .[$union]"
fi

# --- 3. Docker engine --------------------------------------------------------------------------
command -v docker >/dev/null 2>&1 || die "docker CLI not found (apt-get install docker.io)"
engine_up() { timeout 10 docker info >/dev/null 2>&1; }
summary_docker="docker: running"
if ! engine_up; then
  is_root || die "the Docker engine does not answer and starting dockerd needs root"
  command -v dockerd >/dev/null 2>&1 || die "dockerd not found (apt-get install docker.io)"
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  log "starting dockerd (log: $DOCKERD_LOG)"
  # setsid + nohup: the engine outlives this script and the job that ran it.
  setsid nohup dockerd --bridge=none --iptables=false --ip-forward=false \
    >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &
  dockerd_pid=$!
  deadline=$((SECONDS + 60))
  until engine_up; do
    problem=""
    kill -0 "$dockerd_pid" 2>/dev/null || problem="dockerd exited"
    ((SECONDS < deadline)) || problem="dockerd did not answer 'docker info' within 60 s"
    if [[ -n $problem ]]; then
      echo "setup: ERROR: $problem; last lines of $DOCKERD_LOG:" >&2
      tail -n 30 "$DOCKERD_LOG" >&2 || true
      exit 1
    fi
    sleep 1
  done
  summary_docker="docker: started"
fi

# --- 4. images ---------------------------------------------------------------------------------
summary_base="base: present"
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  ENVCHECK_BASE_IMAGE="$BASE_IMAGE" "$ROOT/images/base/build.sh"
  summary_base="base: built"
fi
images_out="$("$VENV/bin/python" scripts/build_images.py --base "$BASE_IMAGE")" || {
  printf '%s\n' "$images_out"
  die "building the demo images failed (see above)"
}
printf '%s\n' "$images_out" | grep -v 'up to date' | grep -v '^demo images:' || true
summary_images="$(printf '%s\n' "$images_out" | tail -n 1)"

log "ok in $(elapsed "$START") s: $summary_apt; $summary_venv; $summary_docker; $summary_base;" \
    "$summary_images"
