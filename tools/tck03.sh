#!/usr/bin/env bash
# Run the A2A 0.3 TCK (a2aproject/a2a-tck, tag 0.3.0.beta4) against a running A2A server:
#   git clone https://github.com/a2aproject/a2a-tck /tmp/a2a-tck-git
#   TCK_GIT=/tmp/a2a-tck-git SUT_URL=http://127.0.0.1:PORT [CATEGORY=mandatory|capabilities|quality|all] tools/tck03.sh
# TCK_GIT is a clone, its .git, or a bare clone; the kit is taken from it, never changed.
# Last line: 'N passed, M failed, K skipped'. Exit 0 iff M == 0
# (2: setup failed or no pytest summary found).
set -uo pipefail

SUT_URL=${SUT_URL:-http://127.0.0.1:8000}
TCK_TAG=${TCK_TAG:-0.3.0.beta4}
CATEGORY=${CATEGORY:-mandatory}
TRANSPORTS=${TRANSPORTS:-jsonrpc}
TCK_WORK=${TCK_WORK:-/tmp/a2a-tck}
PYTHON=${PYTHON:-python3}
SRC=$TCK_WORK/src-$TCK_TAG
VENV=$TCK_WORK/venv-$TCK_TAG
LOG=$TCK_WORK/run-$CATEGORY.log

die() { echo "tck.sh: $*" >&2; echo "0 passed, 0 failed"; exit 2; }

[ -n "${TCK_GIT:-}" ] || die "set TCK_GIT to a clone of a2aproject/a2a-tck (see docs/conformance.md)"
[ -f "$TCK_GIT/repo/HEAD" ] && TCK_GIT=$TCK_GIT/repo   # the fetch folder also works
[ -d "$TCK_GIT/.git" ] && TCK_GIT=$TCK_GIT/.git        # a clone's working tree
if [ ! -f "$SRC/.extracted" ]; then             # read-only git dir: archive, not worktree
  rm -rf "$SRC" && mkdir -p "$SRC" || die "cannot create $SRC"
  git --git-dir="$TCK_GIT" archive "$TCK_TAG" | tar -x -C "$SRC" \
    || die "cannot extract tag $TCK_TAG from $TCK_GIT"
  touch "$SRC/.extracted"
fi
if [ ! -f "$VENV/.installed" ]; then             # cached between runs
  rm -rf "$VENV"
  { "$PYTHON" -m venv "$VENV" && "$VENV/bin/pip" install -q -e "$SRC"; } \
    >"$TCK_WORK/pip.log" 2>&1 || die "venv setup failed, see $TCK_WORK/pip.log"
  touch "$VENV/.installed"
fi

cd "$SRC" || die "cannot cd $SRC"
PATH="$VENV/bin:$PATH" ./run_tck.py --sut-url "$SUT_URL" --category "$CATEGORY" \
  --transports "$TRANSPORTS" 2>&1 | tee "$LOG"

# pytest summary lines, e.g. '7 failed, 23 passed, 3 skipped in 4.2s' (summed over runs)
SUMMARY=$(grep -E '^=* ?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9.]+s' "$LOG")
[ -n "$SUMMARY" ] || die "no pytest summary in $LOG"
count() { grep -oE "[0-9]+ ($1)\b" <<<"$SUMMARY" | awk '{s += $1} END {print s + 0}'; }
P=$(count passed); F=$(count 'failed|errors?'); S=$(count skipped)
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
