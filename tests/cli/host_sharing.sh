#!/bin/sh
# host_sharing.sh - dbthrottle status shows host-level sharing (text, --json, and so top, which
# prints the text): which host group a process shares permits with, how many processes of the
# pool share on each group, and who is sole (its waiters are the whole queue, so permits pass
# without Redis). Two `dbthrottle acquire` processes share (DBTHROTTLE_HOST_SHARE=on, one
# DBTHROTTLE_SHARE_DIR in the test's temp dir), one does not; what status says is checked against
# Redis' own keys (the owners hash's '*', the ids in the holders and queue sets). A redis-server
# of its own on a free port.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin host-sharing
export DBTHROTTLE_LOG_LEVEL=error DBTHROTTLE_LEASE=6s
redis_start
mkdir -m 700 "$work/host"
share_on="DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR=$work/host"

# bg OUT ENV... -- CMD...: runs CMD with the environment ENV in the background, its pid in $bg.
bg() {
    out=$1
    shift
    env "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
# js EXPR: the Python expression EXPR over `status --json hs` (d the document, p the pool, q its
# queries, procs: pid -> process).
js() {
    "$D" status --json hs 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["pools"][0]
q = p["queries"]
procs = {x["pid"]: x for x in d["processes"]}
print(eval(sys.argv[1]))' "$1" 2>/dev/null
}
K='dbthrottle:{hs}:q'

echo "# two processes share on one host group, one does not"
# limit 2: the one that does not share holds, a sharing one holds, the other sharing one waits:
# the queue is that host's alone, so the host is sole.
bg "$work/c" DBTHROTTLE_HOST_SHARE=off "$D" acquire hs --limit 2 -- sleep 120
c=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{hs}")" -eq 1 ]'
# shellcheck disable=SC2086
bg "$work/a" $share_on "$D" acquire hs --limit 2 -- sleep 120
a=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{hs}")" -eq 2 ]'
# shellcheck disable=SC2086
bg "$work/b" $share_on "$D" acquire hs --limit 2 -- sleep 120
b=$bg
# Records come with the renewals (every lease/3): wait until all three are listed, and the
# sharing ones with a group (a record written before the process attached has none).
wait_until 30 '[ "$(live_waiters q "dbthrottle:{hs}")" -eq 1 ] && [ "$(js "sorted(procs) == sorted([$a, $b, $c]) and all(procs[x][\"host_groups\"][0] for x in ($a, $b))")" = True ]'
check "three processes listed, two holding, one waiting (Redis: $(live_holders q "dbthrottle:{hs}") holders, $(live_waiters q "dbthrottle:{hs}") waiters), the sharing ones with a group within 30 s ($waited_ms ms)" '[ $waited_ms -ge 0 ]'

G=$(rcli --raw hget "$K:owners" '*')
held_ids=$(rcli --raw zrange "$K:holders" 0 -1 | tr '\n' ' ')
queued_ids=$(rcli --raw zrange "$K:queue" 0 -1 | tr '\n' ' ')
check "Redis: the host group is sole (owners['*'] = '$G', 16 hex digits), the waiter's id and one holder's are made under it (holders: $held_ids; queue: $queued_ids)" \
    'echo "$G" | grep -Eqx "[0-9a-f]{16}" && [ "$(echo "$held_ids" | tr " " "\n" | grep -c "^$G~")" -eq 1 ] && echo "$queued_ids" | grep -q "^$G~"'

out=$(js '[procs[x]["host_groups"] for x in ('"$a, $b, $c"')]')
check "status --json: the sharing processes' host_groups name G, the other's null ($out)" \
    '[ "$out" = "[['"'"'$G'"'"'], ['"'"'$G'"'"'], [None]]" ]'
out=$(js '[(g["group"], g["processes"], g["host"]) for g in p["host_groups"]]')
check "status --json: the pool's host_groups: G with 2 processes on this host ($out)" \
    '[ "$out" = "[('"'"'$G'"'"', 2, '"'"'$(hostname)'"'"')]" ]'
out=$(js '(q["sole_owner"], q["sole_host_group"], p["connections"]["sole_owner"])')
check "status --json: queries are sole for host group G, connections for nobody ($out)" \
    '[ "$out" = "('"'"'$G'"'"', '"'"'$G'"'"', None)" ]'

"$D" status hs >"$work/status.txt" 2>&1
sed 's/^/# /' "$work/status.txt"
# A permit made under the host group is 38 characters ("G~" and another 16 hex digits, ".N.N"):
# the columns after it stay under their headers.
check "status: the holder and waiter rows' HOST under their header, a 38-character permit included ($(grep -m1 "^ *[0-9]* *$G~" "$work/status.txt"))" \
    'python3 - "$work/status.txt" "$(hostname)" <<PY
import re, sys
host, col, rows = sys.argv[2], None, 0
for line in open(sys.argv[1]):
    if re.match(r"  (HOLDER|WAITER) ", line):
        col = line.index(" HOST ") + 1
    elif col is not None and re.match(r"^ +([0-9]+ +)?[0-9a-f]{16}[~.]", line):
        assert line.find(" " + host + " ") + 1 == col, (col, line)
        rows += 1
assert rows == 3, rows
PY'
check "status: 'shared on host group G (host ...): 2 processes'" \
    'grep -q "^  shared on host group $G (host .*): 2 processes$" "$work/status.txt"'
check "status: 'sole host: G'" 'grep -q "^  sole host: $G (host .*): its waiters are the whole queue" "$work/status.txt"'
# row_group PID: the line after the process row of PID says "host group G".
row_group() { grep -A1 -E "^  [^ ]+ +$1 " "$work/status.txt" | grep -q "^ *host group $G\$"; }
check "status: the two sharing processes' rows are followed by 'host group G', the other's not" \
    'row_group $a && row_group $b && ! row_group $c'

echo "# a waiter of another owner ends the host's sole state"
bg "$work/d" DBTHROTTLE_HOST_SHARE=off "$D" acquire hs --limit 2 -- sleep 120
d=$bg
wait_until 15 '[ "$(live_waiters q "dbthrottle:{hs}")" -eq 2 ]'
sole_now=$(rcli --raw hget "$K:owners" '*')
out=$(js '(q["sole_owner"], q["sole_host_group"])')
check "Redis: nobody sole (owners['*'] '$sole_now'); status --json: sole_owner and sole_host_group null ($out)" \
    '[ -z "$sole_now" ] && [ "$out" = "(None, None)" ]'
"$D" status hs >"$work/status.txt" 2>&1
check "status: no 'sole' line, the host group still listed" \
    '! grep -q "sole" "$work/status.txt" && grep -q "^  shared on host group $G (host .*): 2 processes$" "$work/status.txt"'

echo "# a process alone in the queue, without sharing: sole process"
bg "$work/e" DBTHROTTLE_HOST_SHARE=off "$D" acquire hs1 --limit 1 -- sleep 120
e=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{hs1}")" -eq 1 ]'
bg "$work/f" DBTHROTTLE_HOST_SHARE=off "$D" acquire hs1 --limit 1 -- sleep 120
f=$bg
wait_until 15 '[ "$(live_waiters q "dbthrottle:{hs1}")" -eq 1 ]'
owner=$(rcli --raw hget 'dbthrottle:{hs1}:q:owners' '*')
wait_until 30 '"$D" status hs1 2>/dev/null | grep -q "^  sole process: pid $f "'
check "Redis: owners['*'] is the waiting process' cid ($owner); status: 'sole process: pid $f' ($(grep -h sole "$work/f" 2>/dev/null; "$D" status hs1 2>&1 | grep sole))" \
    '[ $waited_ms -ge 0 ] && rcli --raw zrange "dbthrottle:{hs1}:q:queue" 0 -1 | grep -q "^$owner\."'
out=$("$D" status --json hs1 | python3 -c 'import json, sys; q = json.load(sys.stdin)["pools"][0]["queries"]; print(q["sole_owner"], q["sole_host_group"])')
check "status --json: sole_owner the cid, sole_host_group null ($out)" '[ "$out" = "$owner None" ]'

for x in $a $b $c $d $e $f; do kill -TERM "$x" 2>/dev/null; done
for x in $a $b $c $d $e $f; do wait "$x" 2>/dev/null; done
check "after them, nothing held or queued in Redis" nothing_left q dbthrottle: 10
summary
