#!/bin/sh
# Starts one service of the envcheck stack (docker-compose.yml) from the Debian packages in
# envcheck/stack, as the service's own user:
#
#   start.sh postgres | prometheus | alertmanager
#
# Every setting comes from the environment compose passes in; the configuration files beside
# this script are templates whose @NAME@ placeholders are filled from it (a missing variable
# stops the start with its name).
set -eu
here=/etc/envcheck-stack

render() {  # template output: @NAME@ -> $NAME, values taken literally
  awk '{
    out = ""; rest = $0
    while (match(rest, /@[A-Z_]+@/)) {
      name = substr(rest, RSTART + 1, RLENGTH - 2)
      if (!(name in ENVIRON)) { print "start.sh: " name " is not set" > "/dev/stderr"; exit 2 }
      out = out substr(rest, 1, RSTART - 1) ENVIRON[name]; rest = substr(rest, RSTART + RLENGTH)
    }
    print out rest
  }' "$1" >"$2"
}

case "${1:-}" in
  postgres)
    : "${POSTGRES_USER:?}" "${POSTGRES_PASSWORD:?}" "${POSTGRES_DB:?}" "${POSTGRES_PORT:?}"
    PGDATA="${PGDATA:-/var/lib/postgresql/data}"
    bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
    if [ ! -s "$PGDATA/PG_VERSION" ]; then  # first start: a cluster in the data volume
      pwfile="$(mktemp)"
      printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
      "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 \
        --locale=C.UTF-8 --auth-local=peer --auth-host=scram-sha-256 >/dev/null
      rm -f "$pwfile"
      echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\"" \
        | "$bin/postgres" --single -D "$PGDATA" postgres >/dev/null
    fi
    exec "$bin/postgres" -D "$PGDATA" -p "$POSTGRES_PORT" -c listen_addresses=127.0.0.1 \
      -c unix_socket_directories=/tmp ;;
  prometheus)
    render "$here/prometheus.yml" /tmp/prometheus.yml
    exec prometheus --config.file=/tmp/prometheus.yml \
      --storage.tsdb.path=/var/lib/prometheus/metrics2 \
      --storage.tsdb.retention.time="${PROMETHEUS_RETENTION:-15d}" \
      --web.listen-address="127.0.0.1:${PROMETHEUS_PORT:?}" --log.level=warn ;;
  alertmanager)
    render "$here/alertmanager.yml" /tmp/alertmanager.yml
    exec prometheus-alertmanager --config.file=/tmp/alertmanager.yml \
      --storage.path=/var/lib/prometheus/alertmanager \
      --web.listen-address="127.0.0.1:${ALERTMANAGER_PORT:?}" --cluster.listen-address= \
      --log.level=warn ;;
  *)
    echo "usage: start.sh postgres|prometheus|alertmanager" >&2
    exit 2 ;;
esac
