# envcheck dependency probe: reads an image's installed state in one POSIX sh run, as the
# sandbox user (dash, bash or busybox sh). Inputs arrive in ENVCHECK_* variables, lists one item
# a line, and are never spliced into code. Output protocol, every control line starting with
# "@@<nonce> " (the nonce keeps a tool's output from forging one):
#   workdir ok | workdir missing
#   python PATH | python missing
#   tool found NAME PATH | tool missing NAME
#   deb installed NAME VERSION | deb absent NAME | deb nodpkg
#   debcmp NAME OP WANT yes|no|error          (dpkg --compare-versions, the authority)
#   begin TAG / <output head> / last TAG / <last output line> / end TAG STATUS
#                                             (a step run with the step timeout: 124 = timed out)
#   done
set -f
M="@@$ENVCHECK_NONCE"
unset ENVCHECK_NONCE  # the commands run below cannot read it (the inventory gets it as $1)
NL='
'
IFS=$NL

HAS_TIMEOUT=""
if command -v timeout >/dev/null 2>&1 && timeout 5 true >/dev/null 2>&1; then HAS_TIMEOUT=1; fi

step() {
  if [ -n "$HAS_TIMEOUT" ]; then timeout "$ENVCHECK_STEP_S" "$@"; else "$@"; fi
}

# run TAG CAP CMD...: run CMD (stdin closed, stderr merged); frame the first CAP bytes of its
# output (0: all of it, and no last line) and its last line, which holds a traceback's
# exception. Sets $rc.
run() {
  tag=$1 cap=$2
  shift 2
  out=$(step "$@" 2>&1 </dev/null)
  rc=$?
  printf '%s begin %s\n' "$M" "$tag"
  last=${out##*"$NL"}
  if [ "$cap" = 0 ]; then printf '%s\n' "$out"; last=""; else printf "%.${cap}s\n" "$out"; fi
  printf '%s last %s\n%.1000s\n%s end %s %s\n' "$M" "$tag" "$last" "$M" "$tag" "$rc"
}

if cd "$ENVCHECK_WORKDIR" 2>/dev/null; then echo "$M workdir ok"; else echo "$M workdir missing"; fi

PY=""
if [ -n "$ENVCHECK_PYTHON" ]; then
  PY=$(command -v "$ENVCHECK_PYTHON" 2>/dev/null)
  if [ -n "$PY" ]; then echo "$M python $PY"; else echo "$M python missing"; fi
fi

if [ -n "$PY" ]; then
  run inventory 0 "$PY" -c "$ENVCHECK_INVENTORY" "$M"
  for mod in $ENVCHECK_IMPORTS; do
    run "import $mod" 2000 "$PY" -c "import $mod"
  done
fi

for entry in $ENVCHECK_TOOLS; do
  want=${entry%% *} tool=${entry#* }
  p=$(command -v "$tool" 2>/dev/null)
  if [ -z "$p" ]; then echo "$M tool missing $tool"; continue; fi
  echo "$M tool found $tool $p"
  if [ "$want" = version ]; then
    run "version $tool" 4000 "$p" --version
    # tmux and others answer only -V
    if [ "$rc" != 0 ]; then run "version-V $tool" 4000 "$p" -V; fi
  fi
done

if [ -n "$ENVCHECK_DEBIAN" ]; then
  if command -v dpkg-query >/dev/null 2>&1; then
    for line in $ENVCHECK_DEBIAN; do
      IFS=' '
      set -- $line
      IFS=$NL
      pkg=$1
      shift
      have=""
      # Multi-arch packages list one line per architecture: the first installed one counts.
      for l in $(dpkg-query -W -f='${Status}|${Version}\n' "$pkg" 2>/dev/null); do
        case $l in *" installed|"*) have=${l#*|}; break ;; esac
      done
      if [ -z "$have" ]; then echo "$M deb absent $pkg"; continue; fi
      echo "$M deb installed $pkg $have"
      while [ $# -ge 2 ]; do
        dpkg --compare-versions "$have" "$1" "$2" 2>/dev/null
        case $? in 0) r=yes ;; 1) r=no ;; *) r=error ;; esac
        echo "$M debcmp $pkg $1 $2 $r"
        shift 2
      done
    done
  else
    echo "$M deb nodpkg"
  fi
fi

if [ -n "$PY" ] && [ "$ENVCHECK_PIP_CHECK" = 1 ]; then
  run pip-check 20000 "$PY" -m pip check
fi
echo "$M done"
