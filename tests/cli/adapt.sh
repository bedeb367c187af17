#!/bin/sh
# adapt.sh - dbthrottle adapt, the adaptive limit's controller, against a redis-server and a
# PostgreSQL this script starts (and stops) on free loopback ports: the lease (two controllers at
# once, exactly one acts; kill -9 the leader and the standby takes over within one lease; SIGTERM
# resigns and the standby takes over at once), the limit's TTL (a dead controller's limit lapses
# and the workers' own applies), an operator's limit by hand (the controller changes nothing until
# --clear), the dry run (no key of Redis changes), and bad options. Everything is judged from
# Redis' own state (the limit key, its PTTL, the controller's record, Redis' clock) read with
# redis-cli. The rule itself is tested elsewhere (tests/unit/test_adapt_rule.c): here --start,
# differing between controllers, shows whose set took effect. Each check prints one line; the
# last line is "N passed, N failed", and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin adapt
export DBTHROTTLE_LOG_LEVEL=error
redis_start
pg_start

# A pool's query limit key and the controller's record (lua/_common.lua's key list).
lim() { echo "dbthrottle:{$1}:q:limit"; }
rec() { echo "dbthrottle:{$1}:q:limit:adapt"; }
field() { rcli HGET "$(rec "$1")" "$2"; } # field POOL NAME
redis_ms() { set -- $(rcli TIME); echo $(($1 * 1000 + $2 / 1000)); } # Redis' clock (ms)
# The controller's timing: fast enough for a test, a lease of several intervals.
LEASE_MS=3000
T="--interval 200ms --window 1s --lease 3s --ttl 6s"

# ctl OUT ARGS...: a controller in the background, its log (stderr) in OUT, its pid in $ctl.
ctl() {
    out=$1
    shift
    "$D" adapt "$@" 2>"$out" >"$out.stdout" &
    ctl=$!
    echo "$ctl" >>"$work/pids"
}
gone() { ! kill -0 "$1" 2>/dev/null; }
events() { grep -c "event=$2" "$1" 2>/dev/null || true; } # events LOG NAME: how many lines

# ---- usage ---------------------------------------------------------------------------------------
echo "# usage"
out=$("$D" adapt --help 2>&1); rc=$?
check "adapt --help: exit 0 and a usage line" '[ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^usage: dbthrottle adapt"'
"$D" --help | grep -q "^  adapt" && ok "dbthrottle --help lists adapt" || fail "dbthrottle --help lists adapt"
grep -q '^\.SS "\?dbthrottle adapt' "$top/docs/dbthrottle.1" && ok "dbthrottle(1) has a section for adapt" || fail "dbthrottle(1) has a section for adapt"
# bad OPTION VALUE ARGS...: exit 2, one line naming the option and the value, nothing in Redis.
bad() {
    b_opt=$1 b_val=$2
    shift 2
    "$D" adapt "$@" >/dev/null 2>"$work/err"; rc=$?
    check "adapt $*: exit 2, one line naming $b_opt and \"$b_val\" ($(cat "$work/err"))" \
        '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$b_opt" "$work/err" && grep -q -- "$b_val" "$work/err"'
}
bad --min 0 bp --min 0 --max 4
bad --max many bp --min 1 --max many
bad --min 5 bp --min 5 --max 2
bad --interval 5 bp --min 1 --max 4 --interval 5
bad --window soon bp --min 1 --max 4 --window soon
bad --lease 300ms bp --min 1 --max 4 --interval 200ms --lease 300ms
bad --ttl 2000ms bp --min 1 --max 4 --lease 3s --ttl 2s
bad --start 9 bp --min 1 --max 4 --start 9
bad --start lots bp --min 1 --max 4 --start lots
bad --class "A B" bp --min 1 --max 4 --class "A B"
bad --db-cores abc bp --min 1 --max 4 --db-cores abc
bad --db-cores db.example.com bp --min 1 --max 4 --db host=db.example.com
bad --no-such --no-such bp --min 1 --max 4 --no-such
bad --min "" bp --max 4
check "no bad option left anything in Redis" '[ "$(rcli DBSIZE)" -eq 0 ]'

# ---- two controllers at once: exactly one acts ----------------------------------------------------
echo "# two controllers"
ctl "$work/a.log" two --min 1 --max 10 --start 3 $T
pa=$ctl
ctl "$work/b.log" two --min 1 --max 10 --start 5 $T
pb=$ctl
wait_until 20 '[ -n "$(rcli GET "$(lim two)")" ] && [ -n "$(field two pid)" ]'
leader=$(field two pid)
if [ "$leader" = "$pa" ]; then lead_log=$work/a.log stand_log=$work/b.log standby=$pb want=3 other=5
else lead_log=$work/b.log stand_log=$work/a.log standby=$pa want=5 other=3; fi
wait_until 10 '[ "$(events "$stand_log" adapt_standby)" -ge 1 ]'
# several leases' worth of intervals: the limit stays the leader's, set once, the record's owner
# the same; the standby sets nothing
values=
i=0
while [ $i -lt 10 ]; do
    values="$values $(rcli GET "$(lim two)")/$(field two pid)"
    sleep 0.3
    i=$((i + 1))
done
pttl=$(rcli PTTL "$(lim two)")
check "one leads (Redis' record: pid $leader, one of $pa $pb); the limit is its --start $want, not the other's $other, through 3 s:$values" \
    '{ [ "$leader" = "$pa" ] || [ "$leader" = "$pb" ]; } && [ -z "$(echo "$values" | tr " " "\n" | grep -v "^$want/$leader\$" | grep .)" ]'
check "the limit carries the controller's TTL (PTTL $pttl, at most 6 s)" '[ "$pttl" -gt 0 ] && [ "$pttl" -le 6000 ]'
check "the record names the leader: host, min 1, max 10, ttl_ms 6000, limit $want, a reason" \
    '[ "$(field two min)" = 1 ] && [ "$(field two max)" = 10 ] && [ "$(field two ttl_ms)" = 6000 ] && [ "$(field two limit)" = "$want" ] && [ -n "$(field two reason)" ] && [ -n "$(field two host)" ]'
check "the leader logged one change, the standby none (and adapt_standby): $(events "$lead_log" adapt_change)/$(events "$stand_log" adapt_change)" \
    '[ "$(events "$lead_log" adapt_change)" -eq 1 ] && [ "$(events "$stand_log" adapt_change)" -eq 0 ] && [ "$(events "$stand_log" adapt_lead)" -eq 0 ] && grep -q "event=adapt_change.*to=$want" "$lead_log"'

# ---- kill -9 the leader: the standby takes over within one lease ---------------------------------
echo "# the leader killed"
killed_at=$(redis_ms)
kill -9 "$leader"
wait "$leader" 2>/dev/null
last_until=$(field two lease_until)
wait_until 20 '[ "$(field two pid)" = "$standby" ]'
since=$(field two since)
took=$((since - killed_at))
check "the standby (pid $standby) took the lease ${took} ms after the kill by Redis' clock (one lease: $LEASE_MS ms), not before the dead one's ran out ($since >= $last_until)" \
    '[ "$since" -ge "$last_until" ] && [ "$took" -le $((LEASE_MS + 1500)) ]'
wait_until 10 '[ "$(events "$stand_log" adapt_lead)" -ge 1 ]'
pttl=$(rcli PTTL "$(lim two)")
check "it goes on from the limit in force ($(rcli GET "$(lim two)"), the dead one's $want) and refreshes its TTL (PTTL $pttl)" \
    '[ "$(rcli GET "$(lim two)")" = "$want" ] && [ "$pttl" -gt 3000 ]'

# ---- SIGTERM: the leader resigns, a standby takes over at once ------------------------------------
echo "# the leader stopped"
ctl "$work/c.log" two --min 1 --max 10 --start 7 $T
pc=$ctl
wait_until 10 '[ "$(events "$work/c.log" adapt_standby)" -ge 1 ]'
stopped_at=$(redis_ms)
kill -TERM "$standby"
wait "$standby"; rc=$?
wait_until 20 '[ "$(field two pid)" = "$pc" ]'
since=$(field two since)
took=$((since - stopped_at))
check "SIGTERM: the leader exits 0 ($rc) having resigned ($(grep -o 'event=adapt_stop resigned=[^ ]*' "$stand_log"))" \
    '[ $rc -eq 0 ] && grep -q "event=adapt_stop resigned=yes" "$stand_log"'
check "the standby took over ${took} ms after the SIGTERM by Redis' clock: at once (well under the lease of $LEASE_MS ms)" \
    '[ "$took" -ge 0 ] && [ "$took" -lt $((LEASE_MS / 2)) ]'

# ---- the standby's try comes when the dead leader's lease runs out, not at its next tick ----------
# An interval of 1 s against a lease of 2 s: a standby that tried only at its ticks would take
# over up to 1 s after the lapse; this one's ticks fall half an interval after it (below), so
# about 500 ms. One that tries at the lapse takes it within scheduling delays: 153 ms once in
# CI's load (make test's three lanes beside a busy loop), hence a bound of 350 ms, which still
# tells the two apart.
echo "# the standby tries at the lapse"
SLOW="--interval 1s --window 2s --lease 2s --ttl 4s"
ctl "$work/la.log" lapse --min 1 --max 10 --start 3 $SLOW
la=$ctl
wait_until 20 '[ "$(field lapse pid)" = "$la" ]'
# The standby starts half an interval after a renewal of the leader's (its ticks then fall half
# an interval after the lapse), not in step with it.
u0=$(field lapse lease_until)
wait_until 5 '[ "$(field lapse lease_until)" != "$u0" ]'
sleep 0.5
ctl "$work/lb.log" lapse --min 1 --max 10 --start 3 $SLOW
lb=$ctl
wait_until 10 '[ "$(events "$work/lb.log" adapt_standby)" -ge 1 ]'
kill -9 "$la"
wait "$la" 2>/dev/null
dead_until=$(field lapse lease_until)
wait_until 10 '[ "$(field lapse pid)" = "$lb" ]'
lag=$(($(field lapse since) - dead_until))
check "the standby took the lease ${lag} ms after the dead leader's ran out by Redis' clock (not before it; within 350 ms, not at its next tick, about 500 ms after)" \
    '[ "$lag" -ge 0 ] && [ "$lag" -le 350 ]'
kill -TERM "$lb"
wait "$lb" 2>/dev/null

# ---- a dead controller's limit lapses after its TTL: the workers' own limit applies --------------
echo "# the controller dies"
"$D" acquire two --limit 1 -- sleep 60 >/dev/null 2>&1 &
holder=$!
echo "$holder" >>"$work/pids"
wait_until 15 '[ "$(live_holders q "dbthrottle:{two}")" -eq 1 ]'
"$D" acquire two --limit 1 --wait 0 -- true 2>/dev/null; rc_under=$?
kill -9 "$pc"
wait "$pc" 2>/dev/null
p0=$(rcli PTTL "$(lim two)")
t0=$(now_ms)
wait_until 20 '[ "$(rcli EXISTS "$(lim two)")" -eq 0 ]'
lapsed_ms=$(($(now_ms) - t0))
check "the dead controller's limit ($want) had PTTL $p0 ms at its death, and lapsed ${lapsed_ms} ms later (within its PTTL, give or take 1.5 s)" \
    '[ "$p0" -gt 0 ] && [ "$p0" -le 6000 ] && [ "$lapsed_ms" -le $((p0 + 1500)) ] && [ "$lapsed_ms" -ge $((p0 - 1500)) ]'
"$D" acquire two --limit 1 --wait 0 -- true 2>/dev/null; rc_after=$?
check "the workers' own limit applies again: a second permit at --limit 1 with one held was granted under the controller's limit $want (exit $rc_under), refused after it lapsed (exit $rc_after)" \
    '[ $rc_under -eq 0 ] && [ $rc_after -eq 75 ]'
kill -TERM "$holder"
wait "$holder" 2>/dev/null

# ---- an operator's limit by hand: the controller changes nothing until --clear -------------------
echo "# the operator's limit"
ctl "$work/d.log" op --min 1 --max 10 --start 4 $T
pd=$ctl
wait_until 20 '[ "$(rcli GET "$(lim op)")" = 4 ]'
"$D" limit op 9 >/dev/null
wait_until 10 '[ "$(events "$work/d.log" adapt_operator)" -ge 1 ]'
op_seen=$?
values=
i=0
while [ $i -lt 8 ]; do
    values="$values $(rcli GET "$(lim op)")/$(rcli PTTL "$(lim op)")"
    sleep 0.3
    i=$((i + 1))
done
check "dbthrottle limit op 9 by hand: the controller reports operator ($(grep -m1 -o 'event=adapt_operator limit=[0-9]*' "$work/d.log")) and the limit stays 9 without a TTL through 2.4 s:$values" \
    '[ $op_seen -eq 0 ] && [ -z "$(echo "$values" | tr " " "\n" | grep -v "^9/-1\$" | grep .)" ] && [ "$(field op limit)" = 4 ]'
"$D" limit op --clear >/dev/null
wait_until 10 '[ "$(rcli GET "$(lim op)")" = 4 ]'
pttl=$(rcli PTTL "$(lim op)")
check "limit --clear: the controller sets its limit again (4, PTTL $pttl)" '[ "$(rcli GET "$(lim op)")" = 4 ] && [ "$pttl" -gt 0 ]'
kill -INT "$pd"
wait "$pd"; rc=$?
check "SIGINT: exit 0 ($rc), resigned" '[ $rc -eq 0 ] && grep -q "event=adapt_stop resigned=yes" "$work/d.log" && [ -z "$(field op owner)" ]'

# ---- a stale limit in force: the live workers' is the start ---------------------------------------
echo "# a stale limit in force"
# A worker at 2 holds; the limit the last acquirer asked for says 8 (a week-old worker's, say).
"$D" acquire --limit 2 stale -- sleep 60 &
sw=$!
echo "$sw" >>"$work/pids"
wait_until 20 '[ "$(rcli ZCARD "dbthrottle:{stale}:q:holders")" = 1 ]'
rcli SET "dbthrottle:{stale}:q:limit_seen" 8 KEEPTTL >/dev/null
ctl "$work/s.log" stale --min 1 --max 10 $T
ps_=$ctl
wait_until 20 '[ -n "$(rcli GET "$(lim stale)")" ]'
first=$(grep -m1 -o 'event=adapt_change from=[0-9]* to=[0-9]*' "$work/s.log")
check "adapt without --start beside a stale limit in force (8) and workers at 2: says so ($(grep -m1 -o 'event=adapt_start_stale.*start=[0-9]*' "$work/s.log")) and starts from 2 ($first)" \
    'grep -q "event=adapt_start_stale limit_in_force=8 workers_limits=2 start=2" "$work/s.log" && echo "$first" | grep -q "to=2\$"'
kill -TERM "$ps_" "$sw" 2>/dev/null
wait "$ps_" 2>/dev/null
wait "$sw" 2>/dev/null

# ---- the dry run changes nothing in Redis --------------------------------------------------------
echo "# dry run"
# Nothing of the sections above: their keys with a TTL (the resigned controller's limit of op,
# 6 s) lapsed between the two snapshots when the machine was loaded.
rcli FLUSHALL >/dev/null
"$D" acquire dry --limit 2 -- sleep 60 >/dev/null 2>&1 &
worker=$!
echo "$worker" >>"$work/pids"
wait_until 15 '[ "$(live_holders q "dbthrottle:{dry}")" -eq 1 ]'
# the worker's renewals would change its keys: it is stopped for the dry run (its lease outlasts it)
kill -STOP "$worker"
# snapshot: every key (SCAN, not KEYS), its value by DUMP
snapshot() {
    for k in $(rcli --scan | sort); do
        printf '%s %s\n' "$k" "$(rcli --no-raw DUMP "$k" | sha1sum | cut -c1-40)"
    done
}
snapshot >"$work/before"
"$D" adapt dry --min 1 --max 10 --start 6 --dry-run $T 2>"$work/dry.log" &
dr=$!
echo "$dr" >>"$work/pids"
wait_until 20 '[ "$(grep -c "event=adapt_hold" "$work/dry.log")" -ge 2 ]'
kill -TERM "$dr"
wait "$dr"; rc=$?
snapshot >"$work/after"
kill -CONT "$worker"
nkeys=$(wc -l <"$work/before")
check "--dry-run over several intervals (exit $rc): every key's DUMP the same before and after ($nkeys keys, the pool in use by a worker)" \
    '[ $rc -eq 0 ] && [ "$nkeys" -ge 3 ] && cmp -s "$work/before" "$work/after"'
check "and it logged what it would do: set 6 in place of the workers' 2 ($(grep -m1 -o 'event=adapt_change.*dry_run=true' "$work/dry.log"))" \
    'grep -q "event=adapt_change from=2 to=6 .*dry_run=true" "$work/dry.log" && [ "$(rcli EXISTS "$(lim dry)" "$(rec dry)")" -eq 0 ]'
if ! cmp -s "$work/before" "$work/after"; then diff "$work/before" "$work/after" | head -5; fi
kill -TERM "$worker"
wait "$worker" 2>/dev/null

summary
