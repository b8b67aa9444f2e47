#!/bin/sh
# envcheck's container entrypoint.
#
#   daemon [OPTIONS]   envcheck daemon "$ENVCHECK_CATALOGUE" [OPTIONS] (the default command)
#   ARGS...            any other envcheck command: envcheck ARGS...
#
# Started as root, it gives the data directory to the envcheck user and runs envcheck as that
# user, with the engine socket's group added (the only access it needs) and no capabilities,
# in its own place (exec): the daemon is the process Docker signals. Started as another user
# (docker run --user), it runs envcheck as that user as it is.
set -eu

if [ "${1:-daemon}" = daemon ]; then
  if [ "$#" -gt 0 ]; then shift; fi
  set -- envcheck daemon "${ENVCHECK_CATALOGUE:-/etc/envcheck/catalogue}" "$@"
else
  set -- envcheck "$@"
fi

# The clean-up of leftover sandboxes tells a live envcheck process from a dead one by its pid,
# within one PID namespace: in a namespace of its own, this daemon leaves the sandboxes of
# envcheck processes elsewhere on the host (and they its own) until a day old.
case "$$:$(cat /proc/1/comm 2>/dev/null)" in
  1:* | *:docker-init | *:tini | *:catatonit | *:dumb-init)
    echo "envcheck-entrypoint: note: this container has a PID namespace of its own: sandboxes" \
      "left by a killed envcheck elsewhere on this host are removed only once a day old;" \
      "run it with --pid host (compose: pid: host) to remove them at once" >&2 ;;
esac

if [ "$(id -u)" = 0 ] && [ "${ENVCHECK_RUN_AS_ROOT:-0}" != 1 ]; then
  user=envcheck
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
    --inh-caps=-all --bounding-set=-all -- "$@"
fi
exec "$@"
