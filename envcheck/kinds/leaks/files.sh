# envcheck leak checks: declared paths the sandbox user can read, and the answer's files by
# size then SHA-256 anywhere in the image (kinds/leaks/files.py says what and why). POSIX sh,
# run as the sandbox user. One line per fact: envcheck:leaks:KIND<TAB>FIELDS.
say() { printf 'envcheck:leaks:%s\t%s\n' "$1" "$2"; }
say user "$(id -un 2>/dev/null || id -u)"
printf '%s\n' "$ENVCHECK_PATHS" | while IFS= read -r p; do
  [ -n "$p" ] || continue
  if [ ! -e "$p" ]; then say absent "$p"; continue; fi
  find "$p" -type f 2>/dev/null | while IFS= read -r f; do
    [ -r "$f" ] && printf 'envcheck:leaks:readable\t%s\t%s\n' "$p" "$f"
  done | head -n "$ENVCHECK_FOUND_MAX"
done
say paths-done -
[ -n "$ENVCHECK_SIZES" ] || exit 0
command -v sha256sum >/dev/null 2>&1 || { say unplayed "no sha256sum on the sandbox user's PATH"; exit 0; }
T=$(mktemp -d) || { say unplayed "mktemp -d failed"; exit 0; }
printf '%s\n' "$ENVCHECK_HASHES" > "$T/hashes"
set --
for s in $ENVCHECK_SIZES; do set -- "$@" -o -size "${s}c"; done
shift
find / \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path "$ENVCHECK_DELIVERED" \) -prune \
  -o -type f \( "$@" \) -print0 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null |
  grep -F -f "$T/hashes" | head -n "$ENVCHECK_FOUND_MAX" |
  while IFS= read -r line; do printf 'envcheck:leaks:file\t%s\n' "$line"; done
say files-done -
