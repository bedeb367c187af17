#!/bin/sh
# classes.sh - dbthrottle class against a redis-server and a PostgreSQL this script starts (and
# stops) on free loopback ports: defining, changing, listing and clearing a pool's classes (read
# back from Redis' own keys, in the definition text of docs/design.md), every bad value refused
# with one line and nothing written, status (table, --json, --prometheus) and top showing the
# class table once holders and waiters exist (acquire.lua called as a worker would), and psql
# workers under the library shown with the class their DBTHROTTLE_CLASS gives them. Each check prints one line; the last line is "N passed, N failed", and the
# exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin cli-classes
tmux_sock=dbt-classes-$$
suite_cleanup() { tmux -L "$tmux_sock" kill-server 2>/dev/null; }

export DBTHROTTLE_LOG_LEVEL=warn
redis_start

# defs POOL KIND [KEY]: a semaphore's definition text (KEY classes, the operator's, by default)
# as Python sees it: (aging, default, sorted (name, share, priority, wait, cap)), or None.
defs() {
    rcli --raw get "dbthrottle:{$1}:$2:${3:-classes}" | python3 -c '
import sys
t = sys.stdin.read().strip()
if not t:
    print(None)
    sys.exit()
aging = default = None
cl = []
for part in t.split(";"):
    if part.startswith("aging="):
        aging = int(part[6:])
    elif part.startswith("default="):
        default = part[8:]
    elif part:
        cl.append(tuple(part.split(":")))
print((aging, default, sorted(cl)))'
}
# js POOL -- EXPR: the Python expression EXPR over `status --json POOL` (q = its queries).
js() {
    "$D" status --json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["pools"][0]
q = p["queries"]
c = p["connections"]
cl = {x["name"]: x for x in q["classes"]}
print(eval(sys.argv[1]))' "$3"
}
# script NAME: the text the library embeds for lua/NAME.lua, as tools/embed-lua.sh leaves it in
# build/gen/scripts (the limits of preload/base/include/config.h as Lua locals, the protocol's
# locals of lua/protocol/, _common.lua and the script).
script() {
    cat "$top/build/gen/scripts/$1.lua"
}
# sem POOL: the keys a call sends of the pool's query semaphore (keys.def, but the sent=no ones,
# which the scripts name themselves), the wake prefix and the common arguments; nkeys: how many.
sem() {
    for k in $(sed -n '/sent=no/d; s/^key [A-Z_]* *\([a-z_]*\).*/\1/p' "$top/lua/protocol/keys.def"); do
        printf '%s ' "dbthrottle:{$1}:q:$k"
    done
    echo "dbthrottle:{$1}:wake: q 60000 180000 \"\" 0 0 \"\" \"\""
}
nkeys=$(sed -n '/sent=no/d; /^key /p' "$top/lua/protocol/keys.def" | grep -c .)
# acq POOL ID LIMIT: calls acquire.lua itself (the text the library embeds) on the pool's query
# semaphore, as a worker would; prints its status (1 granted, 2 queued).
acq() {
    a_id=$2 a_lim=$3 a_n=$4
    eval "set -- $(sem "$1")"
    rcli --raw eval "$(script acquire)" "$nkeys" "$@" "$a_id" "$a_lim" 0 "classhost 4242 c$a_n" | head -1
}

# ---- bad values: one line each, exit 2, nothing written ---------------------------------------
echo "# bad values"
out=$("$D" class --help); rc=$?
check "class --help: exit 0 and a usage line" '[ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^usage: dbthrottle class POOL"'
while IFS='|' read -r args want; do
    # shellcheck disable=SC2086
    "$D" class bad $args >/dev/null 2>"$work/err"; rc=$?
    check "class bad $args: exit 2, one line: $(cat "$work/err")" '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -qF -- "$want" "$work/err"'
done <<LIST
x --share 150%|--share: bad value "150%": a whole percent from 0 to 100
x --share 75.5%|--share: bad value "75.5%"
x --share lots|--share: bad value "lots"
x --share 10 --priority 2000|--priority: bad value "2000": a whole number from -1000 to 1000
x --share 10 --priority high|--priority: bad value "high"
x --share 10 --wait 5x|--wait: bad value "5x": unknown unit
x --share 10 --wait 5|--wait: bad value "5": needs a unit
x --share 10 --queue-cap -1|--queue-cap: bad value "-1"
x --share 10 --queue-cap many|--queue-cap: bad value "many"
--aging 2d|--aging: bad value "2d"
Interactive --share 10|class name "Interactive": 1 to 32 of a-z, 0-9, _ and -
abcdefghijklmnopqrstuvwxyz0123456 --share 10|class name "abcdefghijklmnopqrstuvwxyz0123456"
- --share 10|class name "-" is reserved
x --clear --share 10|--clear takes no other class option
--share 10|need a class NAME
x|nothing to do for class x
--no-such-option|unknown option '--no-such-option'
LIST
"$D" class >/dev/null 2>&1; rc=$?
check "class without POOL: exit 2" '[ $rc -eq 2 ]'
check "no bad value wrote anything to Redis" '[ "$(rcli --raw keys "dbthrottle:{bad}*" | wc -l)" -eq 0 ] || [ -z "$(rcli --raw keys "dbthrottle:{bad}*")" ]'

# ---- define, change, list, clear --------------------------------------------------------------
echo "# define"
out=$("$D" class cp --redis "$DBTHROTTLE_REDIS_URL"); rc=$?
check "class on a pool without definitions: exit 0, says one FIFO queue for both kinds" '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "no classes defined (one FIFO queue)")" -eq 2 ]'
out=$("$D" class cp interactive --share 75% --priority 1 --wait 5s --queue-cap 100); rc=$?
check "class cp interactive --share 75% ...: exit 0, one line per kind ($(echo "$out" | head -1))" '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "class interactive defined: share 75%, priority 1, wait 5.0s, queue cap 100")" -eq 2 ]'
"$D" class cp batch --share 25 --default >/dev/null; rc=$?
want="(0, 'batch', [('batch', '25', '0', '-', '-'), ('interactive', '75', '1', '5000', '100')])"
check "both kinds' definitions in Redis, in the definition text ($(defs cp q))" '[ $rc -eq 0 ] && [ "$(defs cp q)" = "$want" ] && [ "$(defs cp c)" = "$want" ]'
check "the operator's definitions have no TTL" '[ "$(rcli pttl "dbthrottle:{cp}:q:classes")" = -1 ]'
"$D" class cp --aging 30s --queries >/dev/null; rc=$?
check "class cp --aging 30s --queries: the query semaphore's aging bound only ($(defs cp q))" '[ $rc -eq 0 ] && [ "$(defs cp q | cut -c1-7)" = "(30000," ] && [ "$(defs cp c)" = "$want" ]'
"$D" class cp extra --share 10 >/dev/null 2>"$work/err"; rc=$?
check "a share past 100% in all: exit 1, one line naming the sum and the classes ($(cat "$work/err"))" '[ $rc -eq 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "shares would sum to 110% (extra 10% + interactive 75% + batch 25%)" "$work/err" && [ "$(defs cp c)" = "$want" ]'
"$D" class cp extra --priority 2 >/dev/null 2>"$work/err"; rc=$?
check "changing a class that is not defined without --share: exit 1, said ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -q "class extra is not defined: --share is needed" "$work/err"'
out=$("$D" class cp interactive --priority 3 --connections); rc=$?
check "changing one option keeps the others ($(defs cp c))" '[ $rc -eq 0 ] && echo "$out" | grep -q "class interactive changed: share 75%" && [ "$(defs cp c)" = "(0, '"'"'batch'"'"', [('"'"'batch'"'"', '"'"'25'"'"', '"'"'0'"'"', '"'"'-'"'"', '"'"'-'"'"'), ('"'"'interactive'"'"', '"'"'75'"'"', '"'"'3'"'"', '"'"'5000'"'"', '"'"'100'"'"')])" ]'
"$D" class cp interactive --wait none --queue-cap none --queries >/dev/null
check "--wait none and --queue-cap none: written as - ($(defs cp q))" 'defs cp q | grep -qF "('"'"'interactive'"'"', '"'"'75'"'"', '"'"'1'"'"', '"'"'-'"'"', '"'"'-'"'"')"'
"$D" class cp >"$work/list" 2>&1; rc=$?
check "class cp lists both kinds: the operator's, the aging bound, each class, batch the default" '[ $rc -eq 0 ] && grep -q "^pool \"cp\" query: limit unknown, 0 holding, 0 waiting" "$work/list" && grep -q "^  classes (operator'"'"'s), aging bound 30.0s:" "$work/list" && grep -Eq "^  interactive +75% +\? +0 +0 +0 +- +1 +- +-\$" "$work/list" && grep -Eq "^  batch +25% +\? +0 +0 +0 +- +0 +- +- +\(default\)\$" "$work/list" && grep -Eq "^  interactive +75% +\? +0 +0 +0 +- +3 +5.0s +100\$" "$work/list"'

"$D" status cp >"$work/cp.txt" 2>&1; rc=$?
check "status of a pool with definitions only (no holder yet): both kinds and their class tables" '[ $rc -eq 0 ] && grep -q "^pool \"cp\" query: limit unknown, 0 holding, 0 waiting" "$work/cp.txt" && grep -q "^pool \"cp\" connection: limit unknown, 0 holding, 0 waiting" "$work/cp.txt" && [ "$(grep -c "^  batch .*(default)\$" "$work/cp.txt")" -eq 2 ]'

echo "# shipped"
rcli set "dbthrottle:{sp}:q:classes_seen" "aging=0;default=;reports:40:0:-:-" px 60000 >/dev/null
rcli set "dbthrottle:{sp}:q:limit_seen" 10 px 60000 >/dev/null
"$D" class sp --queries >"$work/list" 2>&1; rc=$?
check "a worker's shipped definitions are listed as shipped, with the implicit default class" '[ $rc -eq 0 ] && grep -q "^  classes (shipped: a worker'"'"'s DBTHROTTLE_CLASSES), no aging bound:" "$work/list" && grep -Eq "^  reports +40% +4 +0 " "$work/list" && grep -Eq "^  default +0% +0 +0 +0 +0 +- +0 +- +- +\(default\)\$" "$work/list"'
"$D" class sp reports --share 50 --queries >/dev/null; rc=$?
check "an operator's definition over shipped ones is written to the operator's key; the shipped one stays" '[ $rc -eq 0 ] && [ "$(defs sp q)" = "(0, '"'"''"'"', [('"'"'reports'"'"', '"'"'50'"'"', '"'"'0'"'"', '"'"'-'"'"', '"'"'-'"'"')])" ] && [ -n "$(rcli --raw get "dbthrottle:{sp}:q:classes_seen")" ]'

echo "# clear"
out=$("$D" class cp extra --clear 2>&1); rc=$?
check "class cp extra --clear, not defined: exit 1, said ($out)" '[ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "no class extra is defined"'
"$D" class cp only --share 0 --queries >/dev/null
out=$("$D" class cp only --clear); rc=$?
check "class cp only --clear, defined on the query kind only: removed there, the other said ($out)" '[ $rc -eq 0 ] && echo "$out" | grep -q "^pool \"cp\" query: class only removed" && echo "$out" | grep -q "^pool \"cp\" connection: no class only defined: nothing to remove" && ! defs cp q | grep -q only'
out=$("$D" class cp interactive --clear); rc=$?
check "class cp interactive --clear: gone from both kinds, batch kept ($(defs cp c))" '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "class interactive removed")" -eq 2 ] && [ "$(defs cp c)" = "(0, '"'"'batch'"'"', [('"'"'batch'"'"', '"'"'25'"'"', '"'"'0'"'"', '"'"'-'"'"', '"'"'-'"'"')])" ]'
out=$("$D" class cp --clear); rc=$?
check "class cp --clear: every definition gone, both kinds (the aging bound too)" '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "every class definition removed")" -eq 2 ] && [ "$(rcli exists "dbthrottle:{cp}:q:classes" "dbthrottle:{cp}:c:classes")" = 0 ]'
out=$("$D" class cp)
check "class cp after --clear: one FIFO queue again" '[ "$(echo "$out" | grep -c "no classes defined (one FIFO queue)")" -eq 2 ]'

# ---- the cap: at most DBT_MAX_CLASSES classes, and bounded scripts whatever Redis holds -------
echo "# the cap"
cap=$(sed -n 's/^#define DBT_MAX_CLASSES  *\([0-9]*\)$/\1/p' "$top/preload/base/include/config.h")
ndefs() { defs "$1" q | python3 -c 'import ast, sys; t = ast.literal_eval(sys.stdin.read()); print(len(t[2]) if t else 0)'; }
i=1
while [ $i -le "$cap" ]; do
    "$D" class cap c$i --share 1 --queries >/dev/null || echo "class cap c$i: exit $?"
    i=$((i + 1))
done
check "$cap classes defined, the cap (DBT_MAX_CLASSES of preload/base/include/config.h): $(ndefs cap) in Redis" '[ "$cap" -eq 16 ] && [ "$(ndefs cap)" -eq "$cap" ]'
"$D" class cap extra --share 1 --queries >"$work/out" 2>"$work/err"; rc=$?
check "class $((cap + 1)): exit 2, one line naming the pool, the cap and the classes defined ($(cat "$work/err"))" '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && [ ! -s "$work/out" ] && grep -q "pool \"cap\" query: class extra not added: a pool has at most $cap classes, and these $cap are defined: c1, c2, .*, c$cap " "$work/err"'
check "the refused class was not written: Redis holds $(ndefs cap) classes, extra not among them" '[ "$(ndefs cap)" -eq "$cap" ] && ! defs cap q | grep -q extra'
"$D" class cap c3 --priority 5 --queries >/dev/null; rc=$?
check "at the cap, a defined class can still be changed" '[ $rc -eq 0 ] && defs cap q | grep -qF "('"'"'c3'"'"', '"'"'1'"'"', '"'"'5'"'"'"'
# Another client (or two operators at once) past the CLI's check: admin.lua refuses it itself.
eval "set -- $(sem cap)"
rcli --raw eval "$(script admin)" "$nkeys" "$@" class_set "extra:1:0:-:-" >"$work/out" 2>&1
check "admin.lua itself refuses a class past the cap ($(cat "$work/out"))" 'grep -q "ERR dbthrottle: at most $cap classes per pool, and $cap are defined (c1, c2, .*): class extra is not added" "$work/out" && [ "$(ndefs cap)" -eq "$cap" ]'

# Definitions far over the cap, written by hand (or by a version without the cap): 10 000
# classes. The scripts read only the first ones: an acquire and a release cost about what they
# cost with 2 classes, as Redis measures its own script time (INFO commandstats, EVALSHA usec per
# call; dbthrottle acquire runs acquire.lua, renew.lua and release.lua). The least of three
# rounds of each pool, alternated, so that load on a shared machine weighs on both alike.
python3 -c '
print(";".join(["aging=0", "default="] + ["class%05d:0:0:-:-" % i for i in range(10000)]))' >"$work/many.txt"
rcli -x set "dbthrottle:{many}:q:classes" <"$work/many.txt" >/dev/null
rcli set "dbthrottle:{two}:q:classes" "aging=0;default=;a:50:0:-:-;b:50:0:-:-" >/dev/null
usec_per_call() { # usec_per_call POOL: EVALSHA's usec per call over 10 dbthrottle acquire
    rcli config resetstat >/dev/null
    j=0
    while [ $j -lt 10 ]; do
        "$D" acquire "$1" --limit 2 --class a -- true || echo "acquire $1: exit $?" >&2
        j=$((j + 1))
    done
    rcli info commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}
two= many=
for round in 1 2 3; do
    two="$two $(usec_per_call two)"
    many="$many $(usec_per_call many)"
done
least() { echo "$1" | tr ' ' '\n' | grep . | sort -n | head -1; }
echo "  EVALSHA usec per call, 3 rounds: 2 classes:$two; 10 000 classes:$many"
check "10 000 classes in Redis: a script call costs less than 4 times one with 2 classes (least of 3 rounds: $(least "$many") against $(least "$two") us)" 'python3 -c "import sys; t, m = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if 0 < m < 4 * t else 1)" "$(least "$two")" "$(least "$many")"'
check "... and the pool's own keys say the acquires were granted (30 grants)" '[ "$(rcli hget "dbthrottle:{many}:q:stats" grants)" = 30 ]'
"$D" status many >"$work/many.status" 2>&1; rc=$?
check "status of the pool over the cap: CLASSES MISCONFIGURED, the first $cap classes in force ($(grep MISCONFIGURED "$work/many.status"))" '[ $rc -eq 0 ] && grep -q "^  CLASSES MISCONFIGURED: the operator'"'"'s class definitions (dbthrottle:{many}:q:classes) hold more than $cap classes, the most a pool may have: only the first $cap are in force" "$work/many.status" && grep -q "^  class00015 " "$work/many.status" && ! grep -q "^  class00016 " "$work/many.status"'
"$D" status --json many >"$work/many.json"; rc=$?
check "status --json: classes_problem says so, $cap classes and the implicit default listed" '[ $rc -eq 0 ] && python3 - "$work/many.json" "$cap" <<PY
import json, sys
q = json.load(open(sys.argv[1]))["pools"][0]["queries"]
assert "hold more than %s classes" % sys.argv[2] in q["classes_problem"], q["classes_problem"]
assert len(q["classes"]) == int(sys.argv[2]) + 1 and q["classes"][-1]["name"] == "default", [c["name"] for c in q["classes"]]
assert json.load(open(sys.argv[1]))["pools"][0]["connections"]["classes_problem"] is None
PY'
"$D" class many class00001 --priority 3 --queries >/dev/null 2>"$work/err"; rc=$?
"$D" class many fresh --share 1 --queries >/dev/null 2>"$work/err2"; rc2=$?
check "over the cap, a change is refused (exit 1, $(cat "$work/err")) and a new class too (exit 2, one line), nothing written" '[ $rc -eq 1 ] && grep -q "hold more than $cap classes.*clear them all first" "$work/err" && [ $rc2 -eq 2 ] && [ "$(wc -l <"$work/err2")" -eq 1 ] && grep -q "class fresh not added: a pool has at most $cap classes, and its definitions in Redis hold more" "$work/err2" && [ "$(rcli strlen "dbthrottle:{many}:q:classes")" -eq "$(wc -c <"$work/many.txt")" ]'
"$D" status --prometheus many >"$work/many.prom"
check "status --prometheus: dbthrottle_classes_misconfigured 1 for the query kind, 0 for the other" 'grep -qx "dbthrottle_classes_misconfigured{pool=\"many\",kind=\"query\"} 1" "$work/many.prom" && grep -qx "dbthrottle_classes_misconfigured{pool=\"many\",kind=\"connection\"} 0" "$work/many.prom"'
"$D" class many --clear --queries >/dev/null; rc=$?
check "class many --clear removes them all" '[ $rc -eq 0 ] && [ "$(rcli exists "dbthrottle:{many}:q:classes")" = 0 ]'
rcli set "dbthrottle:{bad}:q:classes" "aging=0;default=;a:150:0:-:-" >/dev/null
"$D" status bad >"$work/bad.status" 2>&1
check "definitions that are not valid (by hand) are not in force, said in status ($(grep MISCONFIGURED "$work/bad.status"))" 'grep -q "^  CLASSES MISCONFIGURED: the operator'"'"'s class definitions (dbthrottle:{bad}:q:classes) are not valid (share \"150\" of class a is not an integer percent 0..100): not in force" "$work/bad.status"'
rcli del "dbthrottle:{bad}:q:classes" >/dev/null

# ---- status with holders and waiters ---------------------------------------------------------
# Limit 4, interactive 75% (guarantee 3, priority 1), batch 25% (guarantee 1, the default),
# through acquire.lua itself: two untagged permits (the default class: batch) and an interactive
# one of weight 2 held (4 units: the limit), then an untagged waiter and an interactive one.
echo "# status"
"$D" class hp interactive --share 75% --priority 1 --queries >/dev/null
"$D" class hp batch --share 25% --default --queries >/dev/null
cid=00000000000000aa
s1=$(acq hp $cid.1.4 4 1)
s2=$(acq hp $cid.2.4 4 2)
tid=00000000000000bb.3.interactive.2.4
s3=$(acq hp $tid 4 9)
s4=$(acq hp $cid.4.4 4 4)
wid=00000000000000bb.5.interactive.1.4
s5=$(acq hp $wid 4 10)
check "acquire.lua granted the two untagged permits and the interactive one of weight 2, then queued an untagged and an interactive waiter (4 units held): $s1 $s2 $s3 $s4 $s5" '[ "$s1 $s2 $s3 $s4 $s5" = "1 1 1 2 2" ]'

# the interactive waiter's wait, by Redis' clock, shown as it grows
wait_until 10 '[ "$(js hp -- "cl[\"interactive\"][\"oldest_wait_ms\"] >= 1000")" = True ]'
"$D" status hp >"$work/hp.txt"; rc=$?
check "status (table): the class table with each class' share, guarantee, held, borrowed, waiting, oldest wait, priority" '[ $rc -eq 0 ] && grep -q "^pool \"hp\" query: limit 4, 4 holding, 2 waiting" "$work/hp.txt" && grep -q "^  classes (operator'"'"'s), no aging bound:" "$work/hp.txt" && grep -Eq "^  interactive +75% +3 +2 +0 +1 +[0-9.]+s +1 +- +-\$" "$work/hp.txt" && grep -Eq "^  batch +25% +1 +2 +1 +1 +[0-9.]+m?s +0 +- +- +\(default\)\$" "$work/hp.txt"'
check "status (table): holders and waiters with their class and weight" 'grep -q "CLASS *WEIGHT\$" "$work/hp.txt" && grep -Eq " $tid +classhost +4242 .* interactive +2\$" "$work/hp.txt" && grep -Eq " $cid\.1\.4 +classhost +4242 .* - +1\$" "$work/hp.txt" && grep -Eq " $wid +classhost +4242 .* interactive +1\$" "$work/hp.txt" && ! grep -q "#2" "$work/hp.txt"'
"$D" status --json hp >"$work/hp.json"; rc=$?
check "status --json: classes, aging_ms, classes_shipped; the permits' class and weight; units counted, never listed" '[ $rc -eq 0 ] && python3 - "$work/hp.json" "$tid" "$wid" "$cid" <<PY
import json, sys
d = json.load(open(sys.argv[1])); tid, wid, cid = sys.argv[2:5]
assert d["version"] == 1
q = d["pools"][0]["queries"]
assert q["aging_ms"] == 0 and q["classes_shipped"] is False, q
cl = {c["name"]: c for c in q["classes"]}
assert [c["name"] for c in q["classes"]] == ["interactive", "batch"], q["classes"]
i, b = cl["interactive"], cl["batch"]
assert (i["share"], i["priority"], i["wait_ms"], i["queue_cap"], i["guarantee"], i["held"], i["borrowed"], i["waiters"], i["default"]) == (75, 1, None, None, 3, 2, 0, 1, False), i
assert (b["share"], b["priority"], b["guarantee"], b["held"], b["borrowed"], b["waiters"], b["default"]) == (25, 0, 1, 2, 1, 1, True), b
assert i["oldest_wait_ms"] >= 1000 and b["oldest_wait_ms"] >= 1000, (i, b)
assert q["holders_count"] == 4 and q["waiters_count"] == 2, q
h = {e["permit"]: e for e in q["holders"]}
assert sorted(h) == sorted([tid, cid + ".1.4", cid + ".2.4"]), sorted(h)
assert (h[tid]["class"], h[tid]["weight"]) == ("interactive", 2)
assert (h[cid + ".1.4"]["class"], h[cid + ".1.4"]["weight"]) == (None, 1)
w = {e["permit"]: e for e in q["waiters"]}
assert (w[wid]["class"], w[wid]["weight"]) == ("interactive", 1) and w[cid + ".4.4"]["class"] is None
assert {"clamped", "capped", "aged"} <= set(q["counters"])
assert d["pools"][0]["connections"]["classes"] == []
PY'
"$D" status --prometheus hp >"$work/hp.prom"; rc=$?
check "status --prometheus: the class gauges {pool,kind,class}, well formed, with HELP and TYPE" '[ $rc -eq 0 ] && python3 - "$work/hp.prom" <<PY
import re, sys
typed, helped, v = set(), set(), {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    m = re.match(r"# (HELP|TYPE) (dbthrottle_[a-z_]+) (.+)$", line)
    if m:
        (typed if m.group(1) == "TYPE" else helped).add(m.group(2))
        continue
    # The series without a pool (exporter.sh checks them) and the samples of the histograms.
    if re.match(r"dbthrottle_(up|scrape_duration_seconds) |dbthrottle_build_info\{|dbthrottle_(wait|hold)_seconds_(bucket|sum|count)\{", line):
        continue
    m = re.match(r"(dbthrottle_[a-z_]+)\{pool=\"hp\"(,kind=\"(query|connection)\"(,class=\"([a-z0-9_-]+)\")?|,state=\"[a-z]+\")?\} ([0-9.e+-]+)$", line)
    assert m, line
    assert m.group(1) in typed and m.group(1) in helped, line
    if m.group(5):
        v[(m.group(1)[len("dbthrottle_class_"):], m.group(5))] = float(m.group(6))
want = {("share", "interactive"): 0.75, ("share", "batch"): 0.25, ("guarantee", "interactive"): 3,
        ("guarantee", "batch"): 1, ("held", "interactive"): 2, ("held", "batch"): 2,
        ("borrowed", "interactive"): 0, ("borrowed", "batch"): 1, ("waiters", "interactive"): 1,
        ("waiters", "batch"): 1}
for k, x in want.items():
    assert v.get(k) == x, (k, v.get(k), x)
assert v[("oldest_wait_seconds", "interactive")] >= 1 and v[("oldest_wait_seconds", "batch")] >= 1, v
for t in ("dbthrottle_clamped_total", "dbthrottle_capped_total", "dbthrottle_aged_total"):
    assert t in typed, t
PY'
"$D" class hp --queries >"$work/list"
check "class hp lists the same table as status" 'grep -Eq "^  batch +25% +1 +2 +1 +1 " "$work/list" && [ "$(grep -c "^  [a-z]" "$work/list")" -eq 3 ]'
tmux -L "$tmux_sock" -f /dev/null new-session -d -s top -x 160 -y 40 \
    "env DBTHROTTLE_REDIS_URL=$DBTHROTTLE_REDIS_URL $D top hp --interval 200ms; sleep 30"
screen() { tmux -L "$tmux_sock" capture-pane -p -t top; }
wait_until 10 'screen | grep -Eq "^  batch +25% +1 +2 +1 +1 "'
check "top shows the same class table" 'screen | grep -q "^dbthrottle top" && screen | grep -Eq "^  interactive +75% +3 +2 +0 +1 " && screen | grep -Eq "^  batch +25% +1 +2 +1 +1 "'
tmux -L "$tmux_sock" kill-server 2>/dev/null

# ---- workers under the library: their connections' class -----------------------------------------
# Limit 2, interactive 50% (priority 1) and batch 50% (the default): a psql of class interactive
# (DBTHROTTLE_CLASS) and one without a class setting hold; one of class batch waits.
echo "# workers"
pg_start
"$D" class rcl interactive --share 50% --priority 1 --queries >/dev/null
"$D" class rcl batch --share 50% --default --queries >/dev/null
bgrun() { # bgrun OUT ENV... -- the command, in the background; its pid in $bg
    out=$1
    shift
    env "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
bgrun "$work/w.i" DBTHROTTLE_CLASS=interactive "$D" run --max-queries 2 --pool rcl -- psql -qAtX -c "SELECT pg_sleep(60)"
pi=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{rcl}")" -eq 1 ]'
bgrun "$work/w.u" "$D" run --max-queries 2 --pool rcl -- psql -qAtX -c "SELECT pg_sleep(60)"
pu=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{rcl}")" -eq 2 ]'
bgrun "$work/w.b" DBTHROTTLE_CLASS=batch "$D" run --max-queries 2 --pool rcl -- psql -qAtX -c "SELECT 1"
pb=$bg
wait_until 15 '[ "$(live_waiters q "dbthrottle:{rcl}")" -eq 1 ]'
"$D" status --json rcl >"$work/rcl.json"
"$D" status rcl >"$work/rcl.txt"
check "workers: status --json shows each psql's class from its setting (interactive pid $pi, untagged pid $pu, batch waiter pid $pb) and the class table" 'python3 - "$work/rcl.json" "$pi" "$pu" "$pb" <<PY
import json, sys
q = json.load(open(sys.argv[1]))["pools"][0]["queries"]
pi, pu, pb = map(int, sys.argv[2:5])
h = {e["pid"]: e for e in q["holders"]}
w = {e["pid"]: e for e in q["waiters"]}
assert sorted(h) == sorted([pi, pu]) and list(w) == [pb], (h, w)
assert h[pi]["class"] == "interactive" and h[pi]["weight"] == 1, h[pi]
assert h[pu]["class"] in (None, "-"), h[pu]
assert w[pb]["class"] == "batch", w[pb]
cl = {c["name"]: c for c in q["classes"]}
assert (cl["interactive"]["held"], cl["interactive"]["waiters"], cl["interactive"]["guarantee"]) == (1, 0, 1), cl
assert (cl["batch"]["held"], cl["batch"]["waiters"], cl["batch"]["guarantee"]) == (1, 1, 1), cl
PY'
check "workers: the table shows the class table and each psql's class" 'grep -Eq "^  interactive +50% +1 +1 +0 +0 " "$work/rcl.txt" && grep -Eq "^  batch +50% +1 +1 +0 +1 " "$work/rcl.txt" && grep -Eq " $pi c[0-9]+ .* interactive +1( +[^ ]+ [^ ]+@[^ ]+)?\$" "$work/rcl.txt" && grep -Eq " $pb c[0-9]+ .* batch +1\$" "$work/rcl.txt"'
kill -INT "$pi" "$pu" 2>/dev/null
wait_until 15 '! kill -0 "$pb" 2>/dev/null'
check "workers: once the holders ended, the batch waiter ran" '[ "$(cat "$work/w.b")" = 1 ]'

summary
