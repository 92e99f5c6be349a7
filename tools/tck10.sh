#!/usr/bin/env bash
# Run the A2A 1.0 TCK (a2aproject/a2a-tck, branch 1.0-dev) against a running A2A server.
#   git clone https://github.com/a2aproject/a2a-tck /tmp/a2a-tck-git
#   TCK_GIT=/tmp/a2a-tck-git SUT_URL=http://127.0.0.1:8080 [TRANSPORT=jsonrpc,http_json] tools/tck10.sh
# TCK_GIT is a clone, its .git, or a bare clone; the kit is taken from it, never changed.
# Last line: 'MUST x% SHOULD y% MAY z% overall w%: N passed, M failed, K skipped'.
# Exit 0 iff no MUST requirement fails.
set -uo pipefail
SUT_URL=${SUT_URL:-http://127.0.0.1:8080}
REF=${TCK10_REF:-1.0-dev}
WORK=${TCK10_WORK:-/tmp/a2a-tck10}
SRC=$WORK/src; VENV=$WORK/venv
die() { echo "tck10.sh: $*" >&2; echo "0 passed, 0 failed"; exit 2; }
[ -n "${TCK_GIT:-}" ] || die "set TCK_GIT"
[ -f "$TCK_GIT/repo/HEAD" ] && TCK_GIT=$TCK_GIT/repo
[ -d "$TCK_GIT/.git" ] && TCK_GIT=$TCK_GIT/.git
# A clone has the branch as origin/<branch> only.
git --git-dir="$TCK_GIT" rev-parse -q --verify "$REF^{commit}" >/dev/null || REF=origin/$REF
if [ ! -f "$SRC/.extracted" ]; then
  rm -rf "$SRC" && mkdir -p "$SRC" && git --git-dir="$TCK_GIT" archive "$REF" | tar -x -C "$SRC" || die "cannot extract $REF"
  touch "$SRC/.extracted"
fi
if [ ! -f "$VENV/.installed" ]; then
  rm -rf "$VENV"; { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q -e "$SRC"; } >"$WORK/pip.log" 2>&1 || die "pip failed ($WORK/pip.log)"
  touch "$VENV/.installed"
fi
cd "$SRC" && rm -rf reports
ARGS=(--sut-host "$SUT_URL"); [ -n "${TRANSPORT:-}" ] && ARGS+=(--transport "$TRANSPORT")
timeout 900 "$VENV/bin/python" run_tck.py "${ARGS[@]}" >"$WORK/run.log" 2>&1
SUMMARY=$(grep -E '^=* ?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9.]+s' "$WORK/run.log" | tail -1)
grep -E "^FAILED|^ERROR" "$WORK/run.log" | sed 's/ - .*//' | head -60
grep -E "^\s+(grpc|jsonrpc|http_json):" "$WORK/run.log"
"$VENV/bin/python" - "$SUMMARY" <<'PY'
import json, re, sys
d = json.load(open("reports/compatibility.json"))
s = d["summary"]
# Kit bugs confirmed against the spec: CORE-SEND-003 declares no expected error (a2a-tck#202), so the right -32005 fails it.
known = set(filter(None, __import__("os").environ.get("TCK10_KNOWN_KIT_BUGS", "CORE-SEND-003").split(",")))
musts = [k for k, v in d["per_requirement"].items() if v["level"] == "MUST" and v["status"] == "FAIL" and k not in known]
kit = [k for k, v in d["per_requirement"].items() if v["level"] == "MUST" and v["status"] == "FAIL" and k in known]
if kit: print("MUST failing on a known kit bug (not counted):", " ".join(sorted(kit)))
if musts: print("MUST failing:", " ".join(sorted(musts)))
skipped = sorted(k for k, v in d["per_requirement"].items() if v["level"] == "MUST" and v["status"] in ("SKIP", "SKIPPED"))
if skipped: print("MUST skipped:", " ".join(skipped))
summ = sys.argv[1].strip("= ")
n = lambda w: sum(int(x) for x in re.findall(r"(\d+) " + w, summ))
print(f"MUST {s['must_compatibility']} SHOULD {s['should_compatibility']} MAY {s['may_compatibility']} overall {s['overall_compatibility']}: "
      f"{n('passed')} passed, {n('failed') + n('errors?')} failed, {n('skipped')} skipped")
sys.exit(1 if musts else 0)
PY
