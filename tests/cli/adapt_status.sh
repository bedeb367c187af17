#!/bin/sh
# adapt_status.sh - dbthrottle status (table, --json, --prometheus) and top -b show who set a
# pool's limit (issue 20), against a redis-server this script starts (and stops) on a free
# loopback port. The Redis state is written with redis-cli as dbthrottle adapt (lua/adapt.lua)
# writes it, so that only the reading side is tested: the override PREFIX{POOL}:q:limit (with a
# TTL: the adaptive controller's; without: set by hand) and the controller's record, the hash
# beside it (PREFIX{POOL}:q:limit:adapt, every field text). Cases: a leading controller; a
# controller gone (its lease ran out, or it resigned, or no record) whose limit has not lapsed
# yet, then lapses; set by hand (alone, and with a controller standing by); neither (a worker's
# own limit, and an old record of a stopped controller); records with garbage or missing fields,
# or a key of another type: no crash, the fields named. Every output passes promtool check
# metrics and Python's JSON parser. Each check prints one line; the last line is "N passed, N
# failed", and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin cli-adapt-status

export DBTHROTTLE_LOG_LEVEL=warn
redis_start

ESC=$(printf '\033')
# rnow: Redis' clock (ms), the clock of lease_until and changed_at.
rnow() { rcli --raw eval "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)" 0; }
# lim POOL N [PX MS]: the override (the controller's carries a TTL).
lim() { rcli set "dbthrottle:{$1}:q:limit" "$2" ${3:+px} ${3:+"$3"} >/dev/null; }
# rec POOL FIELD VALUE...: the controller's record beside the override.
rec() {
    rp=$1
    shift
    rcli hset "dbthrottle:{$rp}:q:limit:adapt" "$@" >/dev/null
}
# leader POOL LEASE_UNTIL [FIELD VALUE...]: a whole record, as a controller on ctlhost pid 4242
# that last changed the limit to 12 three seconds ago.
leader() {
    lp=$1 lu=$2
    shift 2
    rec "$lp" owner "ctlhost:4242:0123456789abcdef" host ctlhost pid 4242 lease_until "$lu" \
        min 2 max 64 limit 12 reason "hold time rose 40%, throughput flat" \
        changed_at $((now - 3000)) since $((now - 60000)) ttl_ms 600000 interval_ms 1000 \
        window_ms 5000 "$@"
}
# text POOL: the table's lines for POOL (status POOL), exit status in $rc.
text() { "$D" status "$1" >"$work/$1.txt" 2>"$work/$1.err"; rc=$?; }
# js POOL EXPR: EXPR (Python) over status --json POOL; q = its queries, a = q["adaptive"].
js() {
    "$D" status --json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
q = d["pools"][0]["queries"]
a = q["adaptive"]
print(eval(sys.argv[1]))' "$2" 2>&1
}
# prom POOL: status --prometheus POOL into $work/POOL.prom; true when promtool accepts it.
prom() { "$D" status --prometheus "$1" >"$work/$1.prom" 2>&1 && promtool check metrics <"$work/$1.prom" >/dev/null 2>&1; }
# sample POOL NAME: the value of NAME{pool="POOL",kind="query"} in its scrape ("" when absent).
sample() { awk -v s="$2{pool=\"$1\",kind=\"query\"}" '$1 == s { print $2 }' "$work/$1.prom"; }
# topf POOL: top -b -n 1 POOL into $work/POOL.top, exit status in $rc.
topf() { "$D" top -b -n 1 "$1" >"$work/$1.top" 2>&1; rc=$?; }
has() { grep -qF -- "$2" "$work/$1"; }
# typed_gauges: lead's scrape has HELP and TYPE gauge lines for the three adaptive families.
typed_gauges() {
    for f in dbthrottle_adaptive dbthrottle_adaptive_min dbthrottle_adaptive_max; do
        has lead.prom "# TYPE $f gauge" && has lead.prom "# HELP $f " || return 1
    done
}

now=$(rnow)

# ---- adaptive, the controller leads -----------------------------------------------------------
echo "# adaptive: the override has a TTL and its controller leads"
lim lead 12 600000
leader lead $((now + 600000))
text lead
check "text: exit $rc, the limit line says adaptive and the bounds ($(head -1 "$work/lead.txt"))" \
    '[ $rc -eq 0 ] && has lead.txt "pool \"lead\" query: limit 12 (adaptive, 2..64), "'
check "text: the controller's host, pid, lease left, last change (when, to what, why) ($(sed -n 2p "$work/lead.txt"))" \
    'grep -Eq "^  adaptive controller ctlhost pid 4242 leads \(lease [0-9]+m[0-9]+s left, limits 2\.\.64\); last change [0-9.]+s ago, to 12: hold time rose 40%, throughput flat$" "$work/lead.txt"'
check "json: adaptive, leading, the record's fields ($(js lead a))" \
    '[ "$(js lead "(q[\"limit\"], q[\"override_set_by\"], a[\"state\"], a[\"leads\"], a[\"host\"], a[\"pid\"], a[\"min\"], a[\"max\"], a[\"limit\"], a[\"reason\"], a[\"changed_at_ms\"], a[\"unreadable\"])")" = "(12, '"'adaptive', 'adaptive', True, 'ctlhost', 4242, 2, 64, 12, 'hold time rose 40%, throughput flat', $((now - 3000)), None)"'" ]'
check "json: lease_left_ms and lapses_in_ms within (0, 600000] ($(js lead "a['lease_left_ms'], a['lapses_in_ms']"))" \
    '[ "$(js lead "0 < a[\"lease_left_ms\"] <= 600000 and 0 < a[\"lapses_in_ms\"] <= 600000")" = True ]'
check "prometheus: promtool accepts it; adaptive 1, min 2, max 64, limit 12" \
    'prom lead && [ "$(sample lead dbthrottle_adaptive)" = 1 ] && [ "$(sample lead dbthrottle_adaptive_min)" = 2 ] && [ "$(sample lead dbthrottle_adaptive_max)" = 64 ] && [ "$(sample lead dbthrottle_limit)" = 12 ]'
check "prometheus: HELP and TYPE gauge for the three new families" \
    typed_gauges
topf lead
check "top -b -n 1: exit $rc, the same two lines" \
    '[ $rc -eq 0 ] && has lead.top "limit 12 (adaptive, 2..64)" && has lead.top "adaptive controller ctlhost pid 4242 leads (lease"'

# ---- gone: no controller leads, its limit has not lapsed ---------------------------------------
echo "# adaptive controller gone, its limit not lapsed"
lim gone 12 600000
leader gone $((now - 5000))
text gone
check "text: exit $rc, 'adaptive controller gone; its limit 12 lapses in T' ($(head -1 "$work/gone.txt"))" \
    '[ $rc -eq 0 ] && grep -Eq "^pool \"gone\" query: limit 12 \(adaptive controller gone; its limit 12 lapses in [0-9]+m[0-9]+s\), " "$work/gone.txt"'
check "text: whose lease ran out, and its last change ($(sed -n 2p "$work/gone.txt"))" \
    'grep -Eq "^  adaptive controller ctlhost pid 4242 leads no more \(its lease ran out [0-9.]+s ago\); last change [0-9.]+s ago, to 12: hold time rose 40%" "$work/gone.txt"'
check "json: state gone, not leading, lapses_in_ms > 0, lease_left_ms 0 ($(js gone "a['state'], a['leads'], a['lapses_in_ms'], a['lease_left_ms']"))" \
    '[ "$(js gone "(a[\"state\"], a[\"leads\"], a[\"lapses_in_ms\"] > 0, a[\"lease_left_ms\"], q[\"override_set_by\"])")" = "('"'gone', False, True, 0, 'adaptive'"')" ]'
check "prometheus: promtool accepts it; adaptive 0, no min or max of a controller that does not lead" \
    'prom gone && [ "$(sample gone dbthrottle_adaptive)" = 0 ] && [ -z "$(sample gone dbthrottle_adaptive_min)" ] && [ -z "$(sample gone dbthrottle_adaptive_max)" ] && [ "$(sample gone dbthrottle_limit)" = 12 ]'
topf gone
check "top -b -n 1: exit $rc, the same lines" \
    '[ $rc -eq 0 ] && has gone.top "(adaptive controller gone; its limit 12 lapses in " && has gone.top "leads no more (its lease ran out"'

lim resigned 6 600000
# Redis' clock again: the sections above took 20 s on a loaded machine, and "100 s ago" read 2m00s.
now=$(rnow)
rec resigned owner "" host ctl2 pid 77 lease_until 0 min 2 max 8 limit 6 reason "resigned test" changed_at $((now - 100000))
text resigned
check "a resigned controller (owner \"\", lease_until 0): gone, 'it resigned' ($(sed -n 2p "$work/resigned.txt"))" \
    '[ $rc -eq 0 ] && has resigned.txt "limit 6 (adaptive controller gone; its limit 6 lapses in " && grep -Eq "^  adaptive controller ctl2 pid 77 leads no more \(it resigned\); last change 1m[0-9]+s ago, to 6: resigned test$" "$work/resigned.txt" && [ "$(js resigned "a[\"state\"]")" = gone ]'

lim norec 4 600000
text norec
check "an override with a TTL and no record at all: gone ($(head -1 "$work/norec.txt")), json record_found False" \
    '[ $rc -eq 0 ] && has norec.txt "limit 4 (adaptive controller gone; its limit 4 lapses in " && [ "$(js norec "(a[\"state\"], a[\"record_found\"], a[\"host\"])")" = "('"'gone', False, None"')" ]'

# The TTL runs out: the workers' own limit applies again, and status says nothing adaptive.
rcli set "dbthrottle:{lapse}:q:limit_seen" 20 >/dev/null
lim lapse 12 4000
leader lapse $((now - 5000))
text lapse
check "before the TTL runs out: limit 12, gone ($(head -1 "$work/lapse.txt"))" 'has lapse.txt "limit 12 (adaptive controller gone; its limit 12 lapses in "'
wait_until 30 '[ "$(rcli pttl "dbthrottle:{lapse}:q:limit")" = -2 ]'
text lapse
check "once Redis expired it (after ${waited_ms} ms): the workers' limit 20, no adaptive line, json stopped ($(head -1 "$work/lapse.txt"))" \
    '[ $rc -eq 0 ] && has lapse.txt "pool \"lapse\" query: limit 20, " && ! grep -q adaptive "$work/lapse.txt" && [ "$(js lapse "(a[\"state\"], q[\"override_set_by\"])")" = "('"'stopped', None"')" ]'

# ---- set by hand --------------------------------------------------------------------------------
echo "# set by hand"
lim hand 7
text hand
check "text: exit $rc, 'set by hand', no adaptive line ($(head -1 "$work/hand.txt"))" \
    '[ $rc -eq 0 ] && has hand.txt "pool \"hand\" query: limit 7 (operator override, set by hand), " && ! grep -q adaptive "$work/hand.txt"'
check "json: override_set_by hand, adaptive null ($(js hand "q['override_set_by'], a"))" \
    '[ "$(js hand "(q[\"override_set_by\"], a)")" = "('"'hand', None"')" ]'
check "prometheus: promtool accepts it; adaptive 0, no min or max" \
    'prom hand && [ "$(sample hand dbthrottle_adaptive)" = 0 ] && [ -z "$(sample hand dbthrottle_adaptive_min)" ] && [ "$(sample hand dbthrottle_limit_override)" = 7 ]'
topf hand
check "top -b -n 1: exit $rc, 'set by hand'" '[ $rc -eq 0 ] && has hand.top "limit 7 (operator override, set by hand)"'

lim standby 7
leader standby $((now + 600000))
text standby
check "by hand while a controller leads: it stands by ($(sed -n 2p "$work/standby.txt"))" \
    '[ $rc -eq 0 ] && has standby.txt "limit 7 (operator override, set by hand)" && grep -Eq "^  adaptive controller ctlhost pid 4242 stands by while the limit is set by hand \(lease [0-9m.s]+ left; dbthrottle limit --clear hands it back\)$" "$work/standby.txt"'
check "json: state operator, leading; prometheus: adaptive 0, min 2 (a controller leads)" \
    '[ "$(js standby "(a[\"state\"], a[\"leads\"], q[\"override_set_by\"])")" = "('"'operator', True, 'hand'"')" ] && prom standby && [ "$(sample standby dbthrottle_adaptive)" = 0 ] && [ "$(sample standby dbthrottle_adaptive_min)" = 2 ]'
topf standby
check "top -b -n 1: exit $rc, stands by" '[ $rc -eq 0 ] && has standby.top "stands by while the limit is set by hand"'

# ---- neither ------------------------------------------------------------------------------------
echo "# neither: the workers' own limit"
rcli set "dbthrottle:{none}:q:limit_seen" 5 >/dev/null
text none
check "text: exit $rc, 'limit 5', nothing adaptive ($(head -1 "$work/none.txt"))" \
    '[ $rc -eq 0 ] && has none.txt "pool \"none\" query: limit 5, " && ! grep -q "adaptive\|by hand" "$work/none.txt"'
check "json: adaptive null, override_set_by null" '[ "$(js none "(a, q[\"override_set_by\"])")" = "(None, None)" ]'
check "prometheus: promtool accepts it; adaptive 0, no min or max" \
    'prom none && [ "$(sample none dbthrottle_adaptive)" = 0 ] && [ -z "$(sample none dbthrottle_adaptive_min)" ] && [ -z "$(sample none dbthrottle_adaptive_max)" ]'
topf none
check "top -b -n 1: exit $rc, nothing adaptive" '[ $rc -eq 0 ] && has none.top "limit 5, " && ! grep -q adaptive "$work/none.top"'

rcli set "dbthrottle:{stopped}:q:limit_seen" 5 >/dev/null
leader stopped $((now - 5000))
text stopped
check "an old record of a stopped controller, no override: the table says nothing new; json says stopped" \
    '[ $rc -eq 0 ] && has stopped.txt "limit 5, " && ! grep -q adaptive "$work/stopped.txt" && [ "$(js stopped "(a[\"state\"], a[\"leads\"], a[\"host\"])")" = "('"'stopped', False, 'ctlhost'"')" ] && prom stopped && [ "$(sample stopped dbthrottle_adaptive)" = 0 ]'

# ---- garbage ------------------------------------------------------------------------------------
echo "# records that cannot be read"
lim junk 9 600000
rec junk owner x pid abc lease_until soon max -3 limit 12x reason "$(printf 'bad\033[31m\377 end')" unknown 1
text junk
check "garbage fields: exit $rc, no crash, each named ($(grep unreadable "$work/junk.txt"))" \
    '[ $rc -eq 0 ] && has junk.txt "adaptive controller'"'"'s record dbthrottle:{junk}:q:limit:adapt is unreadable: host missing, pid not a positive integer (\"abc\"), lease_until not a number (\"soon\"), min missing, max not a positive integer (\"-3\"), limit not a positive integer (\"12x\")"'
check "garbage fields: the limit line says it lapses unless renewed, not that it leads ($(head -1 "$work/junk.txt"))" \
    'has junk.txt "limit 9 (adaptive; lapses in " && has junk.txt " unless its controller renews it)" && ! has junk.txt " leads ("'
check "garbage fields: no raw escape byte reaches the terminal" '! grep -q "$ESC" "$work/junk.txt"'
check "garbage fields: json parses; state unknown, the fields null, unreadable named ($(js junk "a['state'], a['pid'], a['min']"))" \
    '[ "$(js junk "(a[\"state\"], a[\"leads\"], a[\"pid\"], a[\"min\"], a[\"max\"], a[\"lease_left_ms\"], \"pid not a positive integer\" in a[\"unreadable\"])")" = "('"'unknown', False, None, None, None, None, True"')" ]'
check "garbage fields: prometheus accepted by promtool, adaptive 0, no min or max" \
    'prom junk && [ "$(sample junk dbthrottle_adaptive)" = 0 ] && [ -z "$(sample junk dbthrottle_adaptive_min)" ] && [ -z "$(sample junk dbthrottle_adaptive_max)" ]'
topf junk
check "garbage fields: top -b -n 1 exit $rc, names them" '[ $rc -eq 0 ] && has junk.top "is unreadable: host missing"'

lim emptyrec 9 600000
rec emptyrec unrelated 1
text emptyrec
check "a record without any known field: every required one named missing ($(grep unreadable "$work/emptyrec.txt"))" \
    '[ $rc -eq 0 ] && has emptyrec.txt "is unreadable: owner missing, host missing, pid missing, lease_until missing, min missing, max missing" && [ "$(js emptyrec "a[\"state\"]")" = unknown ] && prom emptyrec'

lim wrongtype 9 600000
rcli set "dbthrottle:{wrongtype}:q:limit:adapt" "not a hash" >/dev/null
text wrongtype
check "the record's key of another type: status still answers (exit $rc), says why ($(grep unreadable "$work/wrongtype.txt"))" \
    '[ $rc -eq 0 ] && has wrongtype.txt "adaptive controller'"'"'s record dbthrottle:{wrongtype}:q:limit:adapt is unreadable: not readable: WRONGTYPE" && [ "$(js wrongtype "a[\"state\"]")" = unknown ] && prom wrongtype'
topf wrongtype
check "the record's key of another type: top -b -n 1 exit $rc" '[ $rc -eq 0 ] && has wrongtype.top "not readable: WRONGTYPE"'

# ---- every pool at once, and the exporter -------------------------------------------------------
echo "# all pools"
"$D" status --prometheus >"$work/all.prom" 2>"$work/all.err"
rc=$?
check "status --prometheus of every pool: exit $rc, promtool accepts it" \
    '[ $rc -eq 0 ] && promtool check metrics <"$work/all.prom" >/dev/null 2>&1 && [ "$(grep -c "^dbthrottle_adaptive{" "$work/all.prom")" -ge 10 ]'
check "status --json of every pool parses" '"$D" status --json | python3 -c "import json, sys; json.load(sys.stdin)"'
"$D" exporter --listen 127.0.0.1:0 >"$work/exp.err" 2>&1 &
echo $! >>"$work/pids"
wait_until 20 'grep -q "listening on" "$work/exp.err"'
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/exp.err")
curl -s --max-time 30 -o "$work/exp.prom" "http://127.0.0.1:$port/metrics"
check "the exporter serves the same series (port '$port'): adaptive 1 and min 2 for lead" \
    'grep -qx "dbthrottle_adaptive{pool=\"lead\",kind=\"query\"} 1" "$work/exp.prom" && grep -qx "dbthrottle_adaptive_min{pool=\"lead\",kind=\"query\"} 2" "$work/exp.prom" && promtool check metrics <"$work/exp.prom" >/dev/null 2>&1'

summary
