#!/usr/bin/env bash
# Build the local base image envcheck/base:bookworm with debootstrap + docker import.
# No container registry is needed (DESIGN.md §8). Idempotent: does nothing when the image
# already exists, unless --force is given.
#
#   images/base/build.sh [--force]
#
# Env overrides: ENVCHECK_BASE_IMAGE (default envcheck/base:bookworm),
#                ENVCHECK_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

IMAGE="${ENVCHECK_BASE_IMAGE:-envcheck/base:bookworm}"
SUITE="bookworm"
MIRROR="${ENVCHECK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="bash,python3,python3-pip,python3-pytest,git,procps,tmux,ca-certificates"

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

if [[ $force -eq 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image $IMAGE: up to date (exists; use --force to rebuild)"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "base image: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  else
    echo "build.sh: debootstrap is not installed (and cannot install it: need root + apt-get)" >&2
    exit 1
  fi
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "build.sh: debootstrap needs root" >&2
  exit 1
fi

start=$SECONDS
workdir="$(mktemp -d "${TMPDIR:-/tmp}/envcheck-base.XXXXXX")"
rootfs="$workdir/rootfs"
log="$workdir/debootstrap.log"
cleanup() {
  # debootstrap may leave /proc or /sys mounted in the target when it fails
  local m
  for m in proc sys dev/pts dev; do
    mountpoint -q "$rootfs/$m" 2>/dev/null && umount -l "$rootfs/$m" || true
  done
  rm -rf --one-file-system "$workdir"
}
trap cleanup EXIT

echo "base image $IMAGE: debootstrap $SUITE into $rootfs (about a minute)"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
    >"$log" 2>&1; then
  echo "build.sh: debootstrap failed; last lines of its log:" >&2
  tail -n 30 "$log" >&2
  if [[ -f "$rootfs/debootstrap/debootstrap.log" ]]; then
    tail -n 30 "$rootfs/debootstrap/debootstrap.log" >&2
  fi
  exit 1
fi

tar -C "$rootfs" -c . | docker import - "$IMAGE" >/dev/null
echo "base image $IMAGE: built in $((SECONDS - start)) s"
