# envcheck leak check: the git object store and the commits after the base commit
# (kinds/leaks/gitstore.py says what and why). POSIX sh, run as the sandbox user; before it,
# the delivery steps set $gold and $tests to the gold and test patches' files (or leave them
# empty). Reads only: no object is ever written (git hash-object without -w, git apply in a
# folder outside any repository). One line per fact: envcheck:leaks:KIND<TAB>FIELDS.
say() { printf 'envcheck:leaks:%s\t%s\n' "$1" "$2"; }
cd -- "$ENVCHECK_WORKDIR" 2>/dev/null || { say unplayed "the workdir $ENVCHECK_WORKDIR does not exist"; exit 0; }
command -v git >/dev/null 2>&1 || { say unplayed "no git on the sandbox user's PATH"; exit 0; }
export GIT_OPTIONAL_LOCKS=0 GIT_PAGER=cat LC_ALL=C
g() { git -c safe.directory='*' "$@"; }
gitdir=$(g rev-parse --absolute-git-dir 2>/dev/null) || { say unplayed "$ENVCHECK_WORKDIR is in no git repository the sandbox user can read"; exit 0; }
base=$(g rev-parse --verify -q "${ENVCHECK_BASE:-HEAD}^{commit}") || { say unplayed "the base commit ${ENVCHECK_BASE:-HEAD} is not in $gitdir"; exit 0; }
printf 'envcheck:leaks:base\t%s\t%s\n' "$base" "$gitdir"
after=$(g rev-list --count --all --reflog --ancestry-path "^$base" 2>/dev/null) || after=-
apart=$(g rev-list --count --all --reflog "^$base" 2>/dev/null) || apart=-
printf 'envcheck:leaks:after\t%s\t%s\n' "$after" "$apart"
g rev-list --all --reflog --ancestry-path "^$base" 2>/dev/null | head -n "$ENVCHECK_LIST" |
while read -r c; do
  refs=$(g for-each-ref --contains "$c" --format='%(refname)' 2>/dev/null | head -n 3 | tr '\n' ' ')
  printf 'envcheck:leaks:commit\t%s\t%s\t%s\n' "$c" "$refs" "$(g log -1 --format='%cI %s' "$c" | head -c 200)"
done
T=$(mktemp -d) || { say cut "mktemp -d failed"; exit 0; }
g ls-tree -r "$base" | awk '{ print $3 }' | sort -u > "$T/tree"
: > "$T/present"
post() {  # group, patch file, paths it reads, paths it leaves
  [ -n "$2" ] || return 0
  d="$T/$1"
  mkdir -p "$d" || return 0
  printf '%s\n' "$3" | while IFS= read -r p; do
    [ -n "$p" ] || continue
    mkdir -p "$d/$(dirname -- "$p")" 2>/dev/null
    g cat-file blob "$base:$p" > "$d/$p" 2>/dev/null || { rm -f -- "$d/$p"; printf 'envcheck:leaks:absent\t%s\t%s\n' "$1" "$p"; }
  done
  if ! (cd "$d" && { GIT_CEILING_DIRECTORIES="$T" git apply "$2" ||
        { command -v patch && patch --batch --fuzz=5 -p1 -i "$2"; }; }) >/dev/null 2>&1; then
    say noapply "$1"
    return 0
  fi
  printf '%s\n' "$4" | while IFS= read -r p; do
    [ -n "$p" ] && [ -f "$d/$p" ] || continue
    id=$(cd "$d" && GIT_CEILING_DIRECTORIES="$T" git hash-object --no-filters -- "$p") || continue
    sha=$(sha256sum < "$d/$p" 2>/dev/null) || sha=-
    size=$(wc -c < "$d/$p" | tr -d ' ')
    if grep -qxF "$id" "$T/tree"; then where=base
    elif g cat-file -e "$id" 2>/dev/null; then
      where=packed
      [ -f "$gitdir/objects/$(echo "$id" | cut -c1-2)/$(echo "$id" | cut -c3-)" ] && where=loose
      echo "$id" >> "$T/present"
    else where=absent
    fi
    printf 'envcheck:leaks:post\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$id" "$where" "${sha%% *}" "$size" "$p"
  done
}
post gold "$gold" "$ENVCHECK_GOLD_READS" "$ENVCHECK_GOLD_LEAVES"
post tests "$tests" "$ENVCHECK_TESTS_READS" "$ENVCHECK_TESTS_LEAVES"
if [ -s "$T/present" ]; then
  if command -v timeout >/dev/null 2>&1; then bound="timeout $ENVCHECK_HISTORY_S"; else bound=; fi
  { $bound git -c safe.directory='*' rev-list --objects "$base" 2>/dev/null; echo "envcheck:rc $?"; } |
  awk -v f="$T/present" 'BEGIN { while ((getline l < f) > 0) want[l] = 1 }
    /^envcheck:rc / { print "envcheck:leaks:history-rc\t" $2; next }
    ($1 in want) && !seen[$1]++ { print "envcheck:leaks:history\t" $1 }'
fi
say done -
