#!/bin/sh
# forget.sh - stale pools: status, top and the exporter leave out the pools nobody used for longer
# than --idle-after (1h by default) unless a process names them, they are drained or named; and
# dbthrottle forget removes a pool's keys, refusing one in use. Also the process table's counts
# when a pool has more live ids than status.lua reads (1000). Against a redis-server this script
# starts on a free loopback port; judged from Redis' own keys (redis-cli). Each check prints one
# line; the last line is "N passed, N failed", and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin forget
export DBTHROTTLE_LOG_LEVEL=error
redis_start

# keys POOL: how many keys of POOL Redis has
keys() { rcli --scan --pattern "dbthrottle:{$1}:*" | grep -c .; }
# aged POOL MS: POOL's counters as if its last use was MS ago (their TTL is 7 days from a use)
aged() {
    for k in q c; do
        [ "$(rcli exists "dbthrottle:{$1}:$k:stats")" = 1 ] &&
            rcli pexpire "dbthrottle:{$1}:$k:stats" $((7 * 24 * 3600 * 1000 - $2)) >/dev/null
    done
    return 0
}
# pools ARGS...: the pools status --json ARGS lists, then its idle_pools_hidden
pools() {
    "$D" status --json "$@" | python3 -c 'import json,sys
d = json.load(sys.stdin)
print(" ".join(sorted(p["name"] for p in d["pools"])), d["idle_pools_hidden"])'
}

echo "# idle pools"
for p in old new drained a-old; do "$D" acquire --limit 2 "$p" -- true; done
"$D" drain drained >/dev/null
aged old 7200000
aged drained 7200000
aged a-old 7200000
out=$(pools)
check "status --json leaves out pools idle for 2 h (listed first and last), not one just used nor a drained one ($out)" '[ "$out" = "drained new 2" ]'
"$D" status >"$work/table" 2>&1
check "the table says what it left out ($(tail -n 1 "$work/table"))" \
    'grep -q "^2 pools idle for more than 1h[0m]*, used by no live process, not shown (--idle-after off lists them" "$work/table" && ! grep -q "\"old\"" "$work/table"'
out=$(pools --idle-after off)
check "--idle-after off lists them all ($out)" '[ "$out" = "a-old drained new old 0" ]'
out=$(pools --idle-after 3h)
check "--idle-after 3h lists a pool idle for 2 h ($out)" '[ "$out" = "a-old drained new old 0" ]'
out=$(pools old)
check "a pool named is listed however idle ($out)" '[ "$out" = "old 0" ]'
"$D" status --prometheus >"$work/prom"
check "--prometheus leaves it out too" 'grep -q "pool=\"new\"" "$work/prom" && ! grep -q "pool=\"old\"" "$work/prom"'
"$D" top -b -n 1 >"$work/top" 2>&1
check "top leaves it out too" 'grep -q "\"new\"" "$work/top" && ! grep -q "\"old\"" "$work/top" && grep -q "^2 pools idle" "$work/top"'
"$D" status --idle-after soon >/dev/null 2>"$work/err"; rc=$?
check "--idle-after soon: exit 2 naming it ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "idle-after" "$work/err"'
"$D" resume drained >/dev/null

echo "# forget"
before=$(keys new)
out=$("$D" forget old 2>&1); rc=$?
check "forget old: exit 0 ($out), none of its keys left ($(keys old)), the other pool's untouched ($before -> $(keys new))" \
    '[ $rc -eq 0 ] && echo "$out" | grep -q "^forgot pool \"old\": [0-9]* keys removed" && [ "$(keys old)" -eq 0 ] && [ "$(keys new)" -eq "$before" ] && [ "$before" -gt 0 ]'
"$D" forget old >/dev/null 2>"$work/err"; rc=$?
check "forget of a pool Redis has no key of: exit 1 ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -q "no pool \"old\"" "$work/err"'
"$D" forget >/dev/null 2>&1; rc=$?
check "forget without POOL: exit 2" '[ $rc -eq 2 ]'
# A name with the glob's bytes forgets that pool only, not those it would match as a pattern.
for p in 'a*' 'a?' 'ab' 'a[b]'; do "$D" acquire --limit 2 "$p" -- true; done
kab=$(rcli --scan --pattern 'dbthrottle:{ab}:*' | grep -c .)
out=$("$D" forget 'a*' 'a?' 2>&1); rc=$?
check "forget 'a*' 'a?': exit 0 ($out), pool ab's $kab keys and a[b]'s untouched" \
    '[ $rc -eq 0 ] && [ "$(rcli --scan --pattern "dbthrottle:{ab}:*" | grep -c .)" -eq "$kab" ] && [ "$kab" -gt 0 ] && "$D" status "a[b]" >/dev/null 2>&1 && ! "$D" status "a*" >/dev/null 2>&1'
"$D" forget ab 'a[b]' a-old >/dev/null
# in use: a holder (and its process' record)
"$D" acquire --limit 1 busy -- sleep 60 &
busy=$!
echo "$busy" >>"$work/pids"
wait_until 20 '[ "$(rcli zcard "dbthrottle:{busy}:q:holders")" = 1 ]'
aged busy 7200000
nk=$(keys busy)
"$D" forget busy >/dev/null 2>"$work/err"; rc=$?
check "forget of a pool in use: exit 1, says what uses it ($(cat "$work/err")), nothing removed" \
    '[ $rc -eq 1 ] && grep -q "in use (1 query unit held" "$work/err" && grep -q "pid [0-9]" "$work/err" && [ "$(keys busy)" -eq "$nk" ] && [ "$(rcli zcard "dbthrottle:{busy}:q:holders")" = 1 ]'
out=$(pools)
check "a pool in use is listed whatever its counters' age ($out)" 'echo "$out" | grep -q busy'

# The process table's counts beyond 1000 live ids: status.lua reads the first 1000 (each call
# of status, top, the exporter holds Redis no longer), and the table then takes the processes'
# own records. Waiters Redis names for the acquire's process, made by hand (the record says 0).
echo "# the process table beyond 1000 live ids"
far=$(($(rcli TIME | head -n 1) * 1000 + 600000))
fakes() { # fakes FROM TO: waiters f.FROM.1 .. f.TO.1 of the acquire's process
    rcli eval "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
        local id = 'f.' .. i .. '.1'
        redis.call('ZADD', KEYS[1], ARGV[3], id)
        redis.call('HSET', KEYS[2], id, '1 ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' c9' .. string.char(31) .. string.char(31))
    end" 2 "dbthrottle:{busy}:q:wexp" "dbthrottle:{busy}:q:info" "$1" "$2" "$far" "$(hostname)" "$busy" >/dev/null
}
waiting_of() {
    "$D" status busy --json | python3 -c 'import json,sys
d = json.load(sys.stdin)
print(" ".join(str(p[k]) for p in d["processes"] if p["pid"] == int(sys.argv[1]) for k in ("held", "waiting")))' "$busy"
}
fakes 1 999
whole=$(waiting_of)
fakes 1000 1001
sample=$(waiting_of)
check "1 holder and 999 waiters: all counted, as Redis has them (held waiting: $whole); 1002: the record's figures (its renewals' count: no waiter), not a count of the first 1000 ($sample)" \
    '[ "$whole" = "1 999" ] && [ "${sample#* }" = 0 ]'
kill -TERM "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
"$D" --help | grep -q "^  forget" && ok "dbthrottle --help lists forget" || fail "dbthrottle --help lists forget"
grep -q '^\.SS "\?dbthrottle forget' "$top/docs/dbthrottle.1" && ok "dbthrottle(1) has a section for forget" || fail "dbthrottle(1) has a section for forget"
summary
