#!/bin/sh
# Oracle solution of the demo task: apply the reference fix to the repo.
# Idempotent: exits 0 if the fix is already applied.
set -eu
cd "${WORKSPACE:-/workspace}"
patch=/opt/task/fix.patch
if git apply --check "$patch" 2>/dev/null; then
  git apply "$patch"
  echo "oracle: fix applied"
elif git apply --reverse --check "$patch" 2>/dev/null; then
  echo "oracle: fix already applied"
else
  echo "oracle: fix.patch does not apply to $(pwd)" >&2
  exit 1
fi
