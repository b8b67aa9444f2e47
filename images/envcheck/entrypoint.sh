#!/bin/sh
# envcheck's container entrypoint.
#
#   daemon [OPTIONS]   envcheck daemon "$ENVCHECK_CATALOGUE" [OPTIONS] (the default command)
#   ARGS...            any other envcheck command: envcheck ARGS...
#
# Started as root, it gives the data directory to the envcheck user and drops to that user,
# with the engine socket's group added (the only access it needs) and no capabilities, then
# runs envcheck in its place (exec): the daemon is the process Docker signals. Started as
# another user (docker run --user), it runs as that user as it is.
set -eu

user=envcheck
if [ "$(id -u)" = 0 ] && [ "${ENVCHECK_RUN_AS_ROOT:-0}" != 1 ]; then
  data="${ENVCHECK_DATA_DIR:-/var/lib/envcheck}"
  mkdir -p "$data"
  # a host folder mounted as the data volume may belong to root: give it to the daemon
  find "$data" \! -user "$user" -exec chown "$user:$user" {} +
  groups="--clear-groups"
  case "${DOCKER_HOST:-unix:///var/run/docker.sock}" in
    unix://*)
      socket="${DOCKER_HOST:-unix:///var/run/docker.sock}"
      socket="${socket#unix://}"
      if [ -S "$socket" ]; then
        groups="--groups=$(stat -c %g "$socket")"
      else
        echo "envcheck-entrypoint: no engine socket at $socket" \
          "(mount it: -v /var/run/docker.sock:$socket)" >&2
      fi ;;
  esac  # an engine over TCP needs no group
  exec setpriv --reuid="$user" --regid="$user" "$groups" --no-new-privs \
    --inh-caps=-all --bounding-set=-all -- "$0" "$@"
fi

if [ "${1:-daemon}" = daemon ]; then
  if [ "$#" -gt 0 ]; then shift; fi
  exec envcheck daemon "${ENVCHECK_CATALOGUE:-/etc/envcheck/catalogue}" "$@"
fi
exec envcheck "$@"
