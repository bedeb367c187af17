#!/bin/sh
# run.sh - the dbthrottle command against a redis-server and a PostgreSQL this script starts (and
# stops) on free loopback ports: run, status (table, --json, --prometheus), top (in tmux), check,
# limit, drain, resume, evict, --help and usage errors, make install. Each check prints one line;
# the last line is "N passed, N failed", and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin cli
tmux_sock=dbt-cli-$$
suite_cleanup() {
    tmux -L "dbt-cli-$$" kill-server 2>/dev/null
    tmux -L "dbt-cli-$$-2" kill-server 2>/dev/null
}

export DBTHROTTLE_LOG_LEVEL=warn
redis_start
pg_start
counter_install
host=$(hostname)

# bg OUT CMD...: runs CMD in the background, its pid in $bg (killed at the end in any case).
bg() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
# jq-like: js POOL... -- EXPR: evaluates the Python expression EXPR over `status --json`
# (d = the document, p = the first pool's object, q = its queries).
js() {
    pools=
    while [ "$1" != "--" ]; do pools="$pools $1"; shift; done
    shift
    # shellcheck disable=SC2086
    "$D" status --json $pools | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["pools"][0] if d["pools"] else {}
q = p.get("queries", {})
c = p.get("connections", {})
print(eval(sys.argv[1]))' "$1"
}

# ---- usage: --help everywhere, exit code 2 on bad usage ---------------------------------------
echo "# usage"
for c in run status top check limit drain resume evict forget class mode report; do
    out=$("$D" $c --help 2>&1)
    rc=$?
    check "$c --help: exit 0 and a usage line" '[ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^usage: dbthrottle $c"'
    "$D" $c --no-such-option >/dev/null 2>"$work/err"
    rc=$?
    check "$c --no-such-option: exit 2 and a one-line error naming it" '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "no-such-option" "$work/err"'
done
"$D" >/dev/null 2>&1; rc=$?
check "no command: exit 2" '[ $rc -eq 2 ]'
"$D" frobnicate >/dev/null 2>"$work/err"; rc=$?
check "unknown command: exit 2, named" '[ $rc -eq 2 ] && grep -q frobnicate "$work/err"'
"$D" --help | grep -q "^  evict" && ok "dbthrottle --help lists the commands" || fail "dbthrottle --help lists the commands"
"$D" limit somepool x >/dev/null 2>"$work/err"; rc=$?
check "limit POOL x: exit 2 with the library's limit parser's message ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "N: bad value \"x\"" "$work/err"'
"$D" limit >/dev/null 2>&1; rc=$?
check "limit without POOL: exit 2" '[ $rc -eq 2 ]'
"$D" evict onlypool >/dev/null 2>&1; rc=$?
check "evict without PERMIT: exit 2" '[ $rc -eq 2 ]'
"$D" run --max-queries 0 -- true >/dev/null 2>"$work/err"; rc=$?
check "run --max-queries 0: exit 2, the library's message ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "DBTHROTTLE_MAX_QUERIES: bad value \"0\"" "$work/err"'
"$D" run -- true >/dev/null 2>"$work/err"; rc=$?
check "run without a limit: refused, exit 2 (nothing unthrottled by accident)" '[ $rc -eq 2 ] && grep -q "nothing to throttle" "$work/err"'
"$D" status --json --prometheus >/dev/null 2>&1; rc=$?
check "status --json --prometheus: exit 2" '[ $rc -eq 2 ]'

# ---- run: psql throttled -----------------------------------------------------------------------
echo "# run"
mark
for i in 1 2 3 4; do
    bg "$work/run.$i" env PGAPPNAME=t_run "$D" run --max-queries 1 --pool runpool -- \
        psql -qAtX -c "SELECT dbt_probe(200)"
    pids="${pids:-} $bg"
done
for p in $pids; do wait "$p"; done
pids=
check "run: 4 psql at --max-queries 1 ran one at a time (most at once: $(max_conc t_run), probes: $(probes t_run))" '[ "$(max_conc t_run)" -eq 1 ] && [ "$(probes t_run)" -eq 4 ]'
out=$("$D" run --max-queries 3 -- sh -c 'echo "$LD_PRELOAD|$DBTHROTTLE_MAX_QUERIES"')
check "run: LD_PRELOAD is the built library, the setting exported ($out)" '[ "$out" = "$(cd "$top/build" && pwd -P)/libdbthrottle.so|3" ]'
out=$(LD_PRELOAD=/lib/x86_64-linux-gnu/libc.so.6 "$D" run --max-queries 3 -- sh -c 'echo "$LD_PRELOAD"')
check "run: an existing LD_PRELOAD is kept after ours ($out)" '[ "$out" = "$(cd "$top/build" && pwd -P)/libdbthrottle.so:/lib/x86_64-linux-gnu/libc.so.6" ]'
out=$(LD_PRELOAD="$work/gone/libdbthrottle.so:/lib/x86_64-linux-gnu/libc.so.6" "$D" run --max-queries 3 -- sh -c 'echo "$LD_PRELOAD"' 2>"$work/run.other.err")
expect_preload_failure "$work/run.other.err" # ld.so's line for dbthrottle run itself
check "run: another copy of the library in LD_PRELOAD is left out, with a note ($out; $(grep note "$work/run.other.err"))" '[ "$out" = "$(cd "$top/build" && pwd -P)/libdbthrottle.so:/lib/x86_64-linux-gnu/libc.so.6" ] && grep -q "^dbthrottle run: note: LD_PRELOAD.s $work/gone/libdbthrottle.so left out" "$work/run.other.err"'
# A log the worker cannot open: check fails on it, and run refuses to start the worker as check
# says (its lines would land in the program's stderr), unless --no-check.
DBTHROTTLE_LOG="$work/no-such-dir/worker.log" DBTHROTTLE_MAX_QUERIES=1 "$D" check >"$work/check.log.out" 2>"$work/check.log.err"; check_rc=$?
DBTHROTTLE_LOG="$work/no-such-dir/worker.log" "$D" run --max-queries 1 -- touch "$work/run.log.ran" 2>"$work/run.log.err"; rc=$?
check "a log the worker cannot open: check fails (rc $check_rc), run refuses (rc $rc) and never starts the program, both naming DBTHROTTLE_LOG ($(cat "$work/run.log.err"))" '[ $check_rc -eq 1 ] && grep -q "DBTHROTTLE_LOG: cannot open $work/no-such-dir/worker.log" "$work/check.log.err" && [ $rc -eq 2 ] && [ ! -e "$work/run.log.ran" ] && grep -q "^dbthrottle run: DBTHROTTLE_LOG: cannot open $work/no-such-dir/worker.log: .*--no-check" "$work/run.log.err"'
DBTHROTTLE_LOG="$work/no-such-dir/worker.log" "$D" run --no-check --max-queries 1 -- touch "$work/run.log.ran" 2>/dev/null; rc=$?
check "the same with --no-check: the program runs (rc $rc)" '[ $rc -eq 0 ] && [ -e "$work/run.log.ran" ]'
# A syslog socket nobody answers on is an outage the library rides out (its lines go to stderr
# until the daemon answers): run warns and starts the worker, as for a Redis that is down.
DBTHROTTLE_LOG="syslog:$work/no-such-dir/log" "$D" run --max-queries 1 -- touch "$work/run.syslog.ran" 2>"$work/run.syslog.err"; rc=$?
check "a syslog socket nobody answers on: run warns and starts the program (rc $rc: $(cat "$work/run.syslog.err"))" \
    '[ $rc -eq 0 ] && [ -e "$work/run.syslog.ran" ] && grep -q "^dbthrottle run: warning: DBTHROTTLE_LOG: cannot reach syslog" "$work/run.syslog.err"'
"$D" run --max-queries 1 --pool tracepool --trace -- env DBTHROTTLE_LOG="$work/trace.log" psql -qAtX -c "SELECT 1" >/dev/null
check "run --trace: the acquisition and release are in the log" 'grep -q "event=grant" "$work/trace.log" && grep -q "event=release" "$work/trace.log"'
"$D" run --max-queries 1 -- /no/such/program 2>"$work/err"; rc=$?
check "run: a program that does not exist: exit 127, named" '[ $rc -eq 127 ] && grep -q "/no/such/program" "$work/err"'

# ---- status while pgbench runs ----------------------------------------------------------------
echo "# status"
printf 'SELECT pg_sleep(0.3);\n' >"$work/sleep.sql"
bg "$work/pgbench.out" "$D" run --max-queries 2 --pool pb -- pgbench -n -c 4 -j 4 -T 6 -f "$work/sleep.sql"
pgb=$bg
wait_until 10 '[ "$(js pb -- "q[\"holders_count\"], q[\"waiters_count\"]" 2>/dev/null)" = "(2, 2)" ]'
"$D" status --json pb >"$work/pb.json"
"$D" status pb >"$work/pb.txt"
check "status --json while pgbench -c4 runs at a limit of 2: 2 holders, 2 waiters" '[ "$(python3 -c "import json; q = json.load(open(\"$work/pb.json\"))[\"pools\"][0][\"queries\"]; print(q[\"holders_count\"], q[\"waiters_count\"])")" = "2 2" ]'
check "status --json: each holder and waiter is pgbench (pid $pgb) on this host, with its connection, lease left and queue position" 'python3 - "$work/pb.json" "$pgb" "$host" <<PY
import json, sys, re
d = json.load(open(sys.argv[1])); pid = int(sys.argv[2]); host = sys.argv[3]
assert d["version"] == 1 and d["prefix"] == "dbthrottle:" and d["time_ms"] > 0
p = d["pools"][0]; q = p["queries"]
assert p["name"] == "pb" and q["limit"] == 2 and q["limit_seen"] == 2 and q["override"] is None
assert not q["draining"]
assert len(q["holders"]) == 2 and len(q["waiters"]) == 2, q
for e in q["holders"] + q["waiters"]:
    assert e["pid"] == pid and e["host"] == host and re.match(r"c[0-9]+$", e["conn"]), e
    assert re.match(r"(?:[0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.2$", e["permit"]), e
for h in q["holders"]:
    assert 0 < h["lease_left_ms"] <= 10000 and 0 <= h["held_ms"] < 5000, h
assert [w["position"] for w in q["waiters"]] == [1, 2]
assert q["waiters"][0]["waited_ms"] >= q["waiters"][1]["waited_ms"] >= 0
assert q["counters"]["grants"] >= 2 and q["counters"]["queued"] >= 2
assert set(q["counters"]) == {"grants", "queued", "refused", "cancelled", "expired", "evicted", "wait_ms", "quarantines", "reasserted", "requeued", "clamped", "capped", "aged", "would_wait", "would_refuse"}
assert q["quarantine_ms"] == 0 and q["quarantine_why"] is None
assert p["connections"]["holders_count"] == 0
PY'
check "status (table): the holders and waiters of pb with pgbench's pid" '[ "$(sed "/^processes:/,\$d" "$work/pb.txt" | grep -v "^  sole process: " | grep -c " $pgb ")" -eq 4 ] && grep -q "^pool \"pb\" query: limit 2, 2 holding, 2 waiting" "$work/pb.txt"'
check "status (table): pgbench is listed once among the processes, throttling" '[ "$(sed -n "/^processes:/,\$p" "$work/pb.txt" | grep " $pgb " | grep -c " pgbench .* throttling ")" -eq 1 ]'
wait "$pgb"
tps_ok=$(grep -c "^number of transactions actually processed" "$work/pgbench.out")
"$D" status --json pb >"$work/pb.json"
"$D" status --prometheus pb >"$work/pb.prom"
check "pgbench ended normally" '[ "$tps_ok" -eq 1 ]'
check "status after pgbench: no holders or waiters; grants = queued + immediate ones, wait time counted" 'python3 - "$work/pb.json" <<PY
import json, sys
q = json.load(open(sys.argv[1]))["pools"][0]["queries"]
c = q["counters"]
assert q["holders_count"] == 0 and q["waiters_count"] == 0, q
assert c["grants"] >= 20 and c["queued"] >= 10 and c["wait_ms"] > 1000, c
assert c["refused"] == 0 and c["expired"] == 0 and c["evicted"] == 0, c
PY'
check "status --prometheus: every sample well formed, with HELP and TYPE" 'python3 - "$work/pb.prom" <<PY
import re, sys
names = set(); typed = set()
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    m = re.match(r"# (HELP|TYPE) (dbthrottle_[a-z_]+) (.+)$", line)
    if m:
        (typed if m.group(1) == "TYPE" else names).add(m.group(2))
        if m.group(1) == "TYPE": assert m.group(3) in ("gauge", "counter", "histogram"), line
        continue
    if re.match(r"dbthrottle_(up|scrape_duration_seconds) [0-9.e+-]+$|dbthrottle_build_info\{version=\"[^\"]+\"\} 1$", line):
        continue
    m = re.match(r"(dbthrottle_[a-z_]+?)(_bucket|_sum|_count)?\{pool=\"([^\"\\\\]|\\\\.)*\"(,kind=\"(query|connection)\"(,class=\"[a-z0-9_-]*\"(,le=\"([0-9.e+-]+|\+Inf)\")?)?|,state=\"[a-z]+\")?\} [0-9.e+-]+$", line)
    assert m, line
    assert m.group(1) in typed and m.group(1) in names, line
assert "dbthrottle_grants_total" in typed
PY'
grants_json=$(python3 -c "import json; print(json.load(open('$work/pb.json'))['pools'][0]['queries']['counters']['grants'])")
grants_prom=$(awk '/^dbthrottle_grants_total\{pool="pb",kind="query"\}/ { print $2 }' "$work/pb.prom")
wait_json=$(python3 -c "import json; print(json.load(open('$work/pb.json'))['pools'][0]['queries']['counters']['wait_ms'] / 1000)")
wait_prom=$(awk '/^dbthrottle_wait_seconds_total\{pool="pb",kind="query"\}/ { print $2 }' "$work/pb.prom")
check "status --prometheus: the same counters as --json (grants $grants_prom = $grants_json, wait $wait_prom s = $wait_json s)" '[ "$grants_prom" = "$grants_json" ] && python3 -c "assert abs($wait_prom - $wait_json) < 1e-9"'
"$D" status --redis redis://127.0.0.1:1 >/dev/null 2>"$work/err"; rc=$?
check "status with Redis unreachable: exit 1, one line ($(cat "$work/err"))" '[ $rc -eq 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ]'
out=$("$D" status --key-prefix other:)
check "status --key-prefix other: no pools there ($out)" '[ "$out" = "no pools under the key prefix \"other:\"" ]'

# ---- limit raised and lowered mid-run ---------------------------------------------------------
echo "# limit"
for i in 1 2 3 4 5 6; do
    bg "$work/lim.$i" env PGAPPNAME=t_lim "$D" run --max-queries 2 --pool lim -- "$worker" -n 0 -s 100
    lim_pids="${lim_pids:-} $bg"
done
wait_until 15 '[ "$(live_holders q "dbthrottle:{lim}")" -eq 2 ] && [ "$(live_waiters q "dbthrottle:{lim}")" -eq 4 ]'
mark
out=$("$D" limit lim 4)
check "limit lim 4: says so ($out)" 'echo "$out" | grep -q "^pool \"lim\" query: limit 4 for every worker"'
wait_until 10 '[ "$(probes t_lim)" -ge 20 ]'
check "limit raised 2 -> 4 mid-run: 4 at once at the server (most seen: $(max_conc t_lim))" '[ "$(max_conc t_lim)" -eq 4 ]'
check "status shows the override (limit 4, workers ask 2)" '[ "$(js lim -- "q[\"limit\"], q[\"override\"], q[\"limit_seen\"]")" = "(4, 4, 2)" ]'
"$D" limit lim 1 >/dev/null
wait_until 10 '[ "$(live_holders q "dbthrottle:{lim}")" -le 1 ]'
mark
wait_until 10 '[ "$(probes t_lim)" -ge 10 ]'
check "limit lowered 4 -> 1 mid-run: once the holders drained, 1 at a time (most seen: $(max_conc t_lim) over $(probes t_lim) probes)" '[ "$(max_conc t_lim)" -eq 1 ]'
out=$("$D" limit lim --clear)
check "limit --clear: says so" 'echo "$out" | grep -q "override cleared"'
mark
wait_until 10 '[ "$(probes t_lim)" -ge 20 ]'
check "after --clear the workers' own limit (2) applies again (most seen: $(max_conc t_lim))" '[ "$(max_conc t_lim)" -eq 2 ]'

# ---- drain and resume (same workers) ------------------------------------------------------------
echo "# drain"
out=$("$D" drain lim)
check "drain: both kinds said draining" '[ "$(echo "$out" | grep -c draining)" -eq 2 ]'
wait_until 10 '[ "$(live_holders q "dbthrottle:{lim}")" -eq 0 ] && [ "$(live_waiters q "dbthrottle:{lim}")" -eq 6 ]'
check "drain: the holders finished and all 6 workers wait, none granted" '[ "$(live_holders q "dbthrottle:{lim}")" -eq 0 ] && [ "$(live_waiters q "dbthrottle:{lim}")" -eq 6 ]'
# Grants passed between the threads or processes of a host (local handover, host sharing) reach
# the counter with the holder's next renewal, up to lease/3 later: the counter may still rise for
# one renewal period after the holders finished. A drain that let grants through would keep it
# rising period after period (and the server would see probes): up to 3 periods of 4 s (more
# than lease/3) must bring one with no grant at all.
mark
tries=0
while :; do
    g0=$(js lim -- 'q["counters"]["grants"]')
    sleep 4
    g1=$(js lim -- 'q["counters"]["grants"]')
    tries=$((tries + 1))
    [ "$g0" = "$g1" ] || [ "$tries" -ge 3 ] && break
done
check "drain: no grant for 4 s within 3 periods (grants $g0 -> $g1 in period $tries) and no probe in all $tries (probes $(probes t_lim)), status says draining" '[ "$g0" = "$g1" ] && [ "$(probes t_lim)" -eq 0 ] && [ "$(js lim -- "q[\"draining\"]")" = True ]'
out=$("$D" resume lim)
check "resume: 2 waiters granted at once ($(echo "$out" | head -1))" 'echo "$out" | head -1 | grep -q "resumed: 2 waiters granted at once"'
wait_until 10 '[ "$(probes t_lim)" -ge 10 ]'
check "resume: the workers run again, 2 at a time (most seen: $(max_conc t_lim))" '[ "$(max_conc t_lim)" -eq 2 ]'
kill -TERM $lim_pids 2>/dev/null
for p in $lim_pids; do wait "$p"; done

# ---- a pool nobody used: a typo ----------------------------------------------------------------
echo "# unknown pools"
# keys_of POOL: how many keys Redis holds for the pool (its hash tag).
keys_of() { rcli --raw --scan --pattern "dbthrottle:{$1}*" | wc -l; }
for op in "drain" "resume" "limit 4" "limit --clear"; do
    cmd=${op%% *} rest=
    [ "$cmd" = "$op" ] || rest=${op#* }
    # shellcheck disable=SC2086
    "$D" "$cmd" reprots-db $rest >/dev/null 2>"$work/typo.err"; rc=$?
    check "$op on a pool Redis has never seen (reprots-db): exit $rc, nothing written ($(keys_of reprots-db) keys), the pools that exist named ($(cat "$work/typo.err"))" \
        '[ $rc -eq 2 ] && [ "$(keys_of reprots-db)" -eq 0 ] && grep -q "^dbthrottle $cmd: pool \"reprots-db\": no worker has used it.*the pools there: .*\"lim\".*--create" "$work/typo.err"'
done
out=$("$D" drain newpool --create 2>&1); rc=$?
check "drain --create on a new pool: exit 0, drained in Redis ($out)" '[ $rc -eq 0 ] && [ "$(rcli EXISTS "dbthrottle:{newpool}:q:drain")" = 1 ]'
out=$("$D" resume newpool 2>&1); rc=$?
check "resume of that pool, known now: exit 0 ($out)" '[ $rc -eq 0 ] && [ "$(rcli EXISTS "dbthrottle:{newpool}:q:drain")" = 0 ]'
"$D" limit newpool2 3 --create >/dev/null 2>&1; rc=$?
check "limit --create on a new pool: exit 0, the override in Redis" '[ $rc -eq 0 ] && [ "$(rcli GET "dbthrottle:{newpool2}:q:limit")" = 3 ]'

# ---- evict ----------------------------------------------------------------------------------------
echo "# evict"
bg "$work/ev.long" env PGAPPNAME=t_ev "$D" run --max-queries 1 --pool ev -- psql -qAtX -c "SELECT pg_sleep(60)"
long=$bg
wait_until 10 '[ "$(live_holders q "dbthrottle:{ev}")" -eq 1 ]'
bg "$work/ev.short" env PGAPPNAME=t_ev "$D" run --max-queries 1 --pool ev -- psql -qAtX -c "SELECT 42"
short=$bg
wait_until 10 '[ "$(live_waiters q "dbthrottle:{ev}")" -eq 1 ]'
permit=$(js ev -- 'q["holders"][0]["permit"]')
out=$("$D" evict ev "$permit"); rc=$?
check "evict: exit 0 and says whose it was (host $host, pid $long): $out" '[ $rc -eq 0 ] && echo "$out" | grep -q "evicted permit \"$permit\", held by host $host pid $long connection c[0-9]* for" && echo "$out" | grep -q "1 waiter granted"'
wait_until 10 '! kill -0 "$short" 2>/dev/null'
check "evict: the waiter got the permit and ran its query" '[ "$(cat "$work/ev.short")" = 42 ]'
check "evict: counted (evicted 1)" '[ "$(js ev -- "q[\"counters\"][\"evicted\"]")" = 1 ]'
"$D" evict ev "$permit" >/dev/null 2>"$work/err"; rc=$?
check "evict of a permit no longer held: exit 1, said ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -q "has no holder" "$work/err"'
kill -INT "$long" 2>/dev/null

# ---- top, in a terminal (tmux) ------------------------------------------------------------------
echo "# top"
bg "$work/top.hold" env PGAPPNAME=t_top "$D" run --max-queries 1 --pool toppool -- psql -qAtX -c "SELECT pg_sleep(60)"
tophold=$bg
wait_until 10 '[ "$(live_holders q "dbthrottle:{toppool}")" -eq 1 ]'
tmux -L "$tmux_sock" -f /dev/null new-session -d -s top -x 160 -y 40 \
    "env DBTHROTTLE_REDIS_URL=$DBTHROTTLE_REDIS_URL $D top --interval 200ms; echo top-exited-\$?; sleep 30"
screen() { tmux -L "$tmux_sock" capture-pane -p -t top; }
wait_until 10 'screen | grep -q " $tophold "'
screen >"$work/top.screen"
check "top: the screen shows the pool and its holder (pid $tophold)" 'grep -q "^dbthrottle top" "$work/top.screen" && grep -q "pool \"toppool\" query: limit 1, 1 holding" "$work/top.screen" && grep -q " $tophold " "$work/top.screen"'
kill -INT "$tophold" 2>/dev/null
wait_until 10 '! screen | grep -q " $tophold "'
check "top: refreshes (the holder left the screen when it ended)" '! screen | grep -q " $tophold "'
tmux -L "$tmux_sock" send-keys -t top q
wait_until 5 'screen | grep -q "top-exited-0"'
check "top: q quits with exit 0 and restores the screen" 'screen | grep -q "top-exited-0" && ! screen | grep -q "^dbthrottle top"'
tmux -L "$tmux_sock" kill-server 2>/dev/null
tmux_sock=$tmux_sock-2
tmux -L "$tmux_sock" -f /dev/null new-session -d -s top -x 160 -y 40 \
    "env DBTHROTTLE_REDIS_URL=$DBTHROTTLE_REDIS_URL $D top; echo top-exited-\$?; sleep 30"
wait_until 10 'screen | grep -q "^dbthrottle top"'
tmux -L "$tmux_sock" send-keys -t top C-c
wait_until 5 'screen | grep -q "top-exited-0"'
check "top: Ctrl-C quits with exit 0" 'screen | grep -q "top-exited-0"'
tmux -L "$tmux_sock" kill-server 2>/dev/null

# ---- check ------------------------------------------------------------------------------------
echo "# check"
# A Redis password in the URL of a settings file others may read: check and the library warn,
# naming the file and its mode, never the password.
printf 'redis_url = redis://:s3cret-in-url@127.0.0.1:%s\nmax_queries = 2\n' "$rport" >"$work/pw.conf"
chmod 644 "$work/pw.conf"
env -u DBTHROTTLE_REDIS_URL DBTHROTTLE_CONFIG="$work/pw.conf" "$D" check >/dev/null 2>"$work/pw.check"
env -u DBTHROTTLE_REDIS_URL DBTHROTTLE_CONFIG="$work/pw.conf" DBTHROTTLE_LOG_LEVEL=warn LD_PRELOAD="$lib" psql -qAtX -c "SELECT 1" >/dev/null 2>"$work/pw.lib"
check "a password in a 0644 settings file's redis_url: check and the library warn, naming the file and mode, not the password ($(grep -m1 "password" "$work/pw.check"))" \
    'grep -q "^dbthrottle check: warning: DBTHROTTLE_CONFIG: $work/pw.conf holds the Redis password (in redis_url) and is readable by group or others (mode 0644)" "$work/pw.check" &&
     grep -q "event=password_in_config_file" "$work/pw.lib" && ! grep -q "s3cret-in-url" "$work/pw.check" "$work/pw.lib"'
# Each bad setting: check exits 1 with the very message the library logs when it refuses to work.
cat >"$work/bad.conf" <<CONF
max_queries = many
CONF
cat >"$work/unknown.conf" <<CONF
max_querys = 2
CONF
while IFS= read -r kv; do
    out=$(env "$kv" "$D" check 2>"$work/err" >/dev/null); rc=$?
    mine=$(sed -n 's/^dbthrottle check: //p' "$work/err" | head -1)
    env "$kv" LD_PRELOAD="$lib" psql -qAtX -c "SELECT 1" >/dev/null 2>"$work/liberr"
    theirs=$(python3 - "$work/liberr" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.search(r'event=config_error error="((?:[^"\\]|\\.)*)"', line)
    if m:
        print(re.sub(r'\\(.)', r'\1', m.group(1)))
        break
PY
)
    check "check $kv: exit 1 with the library's message ($mine)" '[ $rc -eq 1 ] && [ -n "$mine" ] && [ "$mine" = "$theirs" ]'
done <<LIST
DBTHROTTLE_MAX_QUERIES=0
DBTHROTTLE_MAX_CONNECTIONS=abc
DBTHROTTLE_WAIT_TIMEOUT=5x
DBTHROTTLE_LEASE=10ms
DBTHROTTLE_REDIS_TIMEOUT=0
DBTHROTTLE_ON_REDIS_ERROR=maybe
DBTHROTTLE_LOG_LEVEL=loud
DBTHROTTLE_LOG_FORMAT=xml
DBTHROTTLE_LOG_QUERY=perhaps
DBTHROTTLE_REDIS_URL=http://127.0.0.1:$rport
DBTHROTTLE_EXEMPT=foo
DBTHROTTLE_IDLE_IN_TX_WARN=-1
DBTHROTTLE_MAX_QUERIE=3
DBTHROTTLE_POOL=
DBTHROTTLE_DISABLE=2
DBTHROTTLE_KEY_PREFIX=
DBTHROTTLE_CONFIG=$work/no-such-file
DBTHROTTLE_CONFIG=$work/bad.conf
DBTHROTTLE_CONFIG=$work/unknown.conf
LIST
printf 'lease = 5s\n' >"$work/good.conf"
DBTHROTTLE_CONFIG="$work/good.conf" DBTHROTTLE_MAX_QUERIES=4 "$D" check >"$work/check.out" 2>&1; rc=$?
check "check, all well: exit 0, ok, Redis reached and the scripts loaded" '[ $rc -eq 0 ] && tail -1 "$work/check.out" | grep -qx ok && grep -q "^redis: .* [0-9]* scripts loaded" "$work/check.out"'
check "check: each setting with where it came from (file, environment, default)" 'grep -Eq "^  DBTHROTTLE_LEASE +5s +file $work/good.conf\$" "$work/check.out" && grep -Eq "^  DBTHROTTLE_MAX_QUERIES +4 +environment\$" "$work/check.out" && grep -Eq "^  DBTHROTTLE_WAIT_TIMEOUT +2m +default\$" "$work/check.out"'
DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_REDIS_URL=redis://:sekrit@127.0.0.1:$rport "$D" check >"$work/check.out" 2>&1; rc=$?
check "check: a Redis that refuses the password: exit 1, and the password is never printed" '[ $rc -eq 1 ] && ! grep -q sekrit "$work/check.out" && grep -q "redis://:\*\*\*@" "$work/check.out"'
DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_REDIS_URL=redis://127.0.0.1:1 "$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: Redis unreachable: exit 1 ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -q "127.0.0.1:1" "$work/err"'
"$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: no limit set: exit 1, said" '[ $rc -eq 1 ] && grep -q "not throttled" "$work/err"'

# ---- one rule: check, run and the library judge a configuration alike --------------------------
echo "# one rule for check, run and the library"
# The configuration in effect counts: a bad file value that the environment replaces is no error;
# an unknown name, an unreadable file, a value set twice, or a bad value still in effect is.
printf 'max_queries = abc\n' >"$work/rule-badval.conf"
printf 'max_querys = 2\n' >"$work/rule-unknown.conf"
printf 'lease = 5s\nlease = 6s\n' >"$work/rule-twice.conf"
printf 'max_queries = 5\n' >"$work/rule-good.conf"
while read -r want conf envs; do
    [ "$conf" = - ] && conf= || conf="DBTHROTTLE_CONFIG=$work/$conf"
    # shellcheck disable=SC2086
    env $conf $envs "$D" check >/dev/null 2>&1; check_rc=$?
    # shellcheck disable=SC2086
    got_run=$(env $conf $envs PGAPPNAME=t_rule "$D" run -- psql -qAtX -c "SELECT 41 + 1" 2>"$work/rule.run"); run_rc=$?
    # shellcheck disable=SC2086
    got_lib=$(env $conf $envs LD_PRELOAD="$lib" psql -qAtX -c "SELECT 41 + 1" 2>"$work/rule.lib"); lib_rc=$?
    v_check=refuses; [ $check_rc -eq 0 ] && v_check=works
    v_run=refuses; [ $run_rc -eq 0 ] && [ "$got_run" = 42 ] && v_run=works
    [ $run_rc -ne 0 ] && [ $run_rc -ne 2 ] && v_run="rc $run_rc"
    v_lib=refuses; [ $lib_rc -eq 0 ] && [ "$got_lib" = 42 ] && ! grep -q config_error "$work/rule.lib" && v_lib=works
    [ "$v_lib" = refuses ] && ! grep -q "event=config_error" "$work/rule.lib" && v_lib="fails otherwise ($(head -1 "$work/rule.lib"))"
    check "${conf:+${conf##*/} }$envs: check $v_check, run $v_run, library $v_lib (all must: $want)" '[ "$v_check" = "$want" ] && [ "$v_run" = "$want" ] && [ "$v_lib" = "$want" ]'
done <<LIST
works rule-badval.conf DBTHROTTLE_MAX_QUERIES=5
refuses rule-badval.conf DBTHROTTLE_MAX_CONNECTIONS=5
refuses rule-unknown.conf DBTHROTTLE_MAX_QUERIES=5
refuses no-such-file.conf DBTHROTTLE_MAX_QUERIES=5
refuses rule-twice.conf DBTHROTTLE_MAX_QUERIES=5
refuses rule-good.conf DBTHROTTLE_MAX_QUERIES=abc
refuses - DBTHROTTLE_MAX_QUERIES=5 DBTHROTTLE_MAX_QUERIE=3
works rule-good.conf DBTHROTTLE_LEASE=9s
LIST

# ---- run through an outage: transient Redis errors do not stop a start ------------------------
echo "# run during a Redis outage"
# A Redis that is down now is an outage the worker rides out per DBTHROTTLE_ON_REDIS_ERROR (and
# throttles once Redis is back), not a mistake in its configuration: run warns and starts it.
out=$(DBTHROTTLE_REDIS_URL=redis://127.0.0.1:1 "$D" run --max-queries 1 -- sh -c 'echo started' 2>"$work/err"); rc=$?
check "run, Redis refusing connections: starts the program with rc 0 and one warning line ($(cat "$work/err"))" '[ $rc -eq 0 ] && [ "$out" = started ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "Redis unreachable now.*DBTHROTTLE_ON_REDIS_ERROR=open" "$work/err"'
out=$(DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_REDIS_URL=redis://127.0.0.1:1 "$D" run --max-queries 1 -- sh -c 'echo started' 2>"$work/err"); rc=$?
check "run, Redis refusing connections, closed mode: starts it too, the warning says it refuses meanwhile" '[ $rc -eq 0 ] && [ "$out" = started ] && grep -q "Redis unreachable now.*DBTHROTTLE_ON_REDIS_ERROR=closed" "$work/err"'
# A server that accepts the connection and never answers: the check times out (transient).
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1])
time.sleep(120)' "$work/hang.port" &
echo $! >>"$work/pids"
wait_until 10 '[ -s "$work/hang.port" ]'
hport=$(cat "$work/hang.port")
out=$(DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$hport "$D" run --max-queries 1 -- sh -c 'echo started' 2>"$work/err"); rc=$?
check "run, Redis accepting but not answering (timeout): starts it, warned ($(cat "$work/err"))" '[ $rc -eq 0 ] && [ "$out" = started ] && grep -q "Redis unreachable now" "$work/err"'
DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$hport "$D" check >/dev/null 2>&1; rc=$?
check "check, the same unanswering Redis: still fails (rc $rc)" '[ $rc -ne 0 ]'
# Permanent errors still refuse the start.
out=$(DBTHROTTLE_REDIS_URL=redis://:wrong@127.0.0.1:$rport "$D" run --max-queries 1 -- sh -c 'echo started' 2>"$work/err"); rc=$?
check "run, a password Redis does not expect (permanent): exit 2, not started ($(cat "$work/err"))" '[ $rc -eq 2 ] && [ -z "$out" ]'

# ---- make install -------------------------------------------------------------------------------
echo "# install"
if make -s -C "$top" install DESTDIR="$work/inst" PREFIX=/usr >"$work/install.out" 2>&1; then
    out=$("$work/inst/usr/bin/dbthrottle" run --max-queries 1 -- sh -c 'echo "$LD_PRELOAD"')
    check "make install: the installed command preloads the installed library ($out)" '[ "$out" = "$work/inst/usr/lib/$(gcc -print-multiarch)/libdbthrottle.so" ]'
    check "make install: the man pages dbthrottle(1) and libdbthrottle(7)" '[ -f "$work/inst/usr/share/man/man1/dbthrottle.1" ] && [ -f "$work/inst/usr/share/man/man7/libdbthrottle.7" ]'
else
    fail "make install: $(tail -3 "$work/install.out")"
fi
for m in "$top/docs/dbthrottle.1" "$top/docs/libdbthrottle.7"; do
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null)
    check "man page $(basename "$m") renders without warnings${warn:+: $warn}" '[ -z "$warn" ]'
done
missing=
for v in $(grep -o '"DBTHROTTLE_[A-Z_]*[A-Z]"' "$top/preload/base/settings.c" | tr -d '"' | sort -u); do
    grep -q "^\.B $v\$" "$top/docs/libdbthrottle.7" || missing="$missing $v"
done
check "libdbthrottle(7) documents every variable the parser knows${missing:+ (missing:$missing)}" '[ -z "$missing" ]'
missing=
for c in run status top check limit drain resume evict forget class mode report; do
    grep -q "^\.SS \"\?dbthrottle $c" "$top/docs/dbthrottle.1" || missing="$missing $c"
done
check "dbthrottle(1) has a section for every command${missing:+ (missing:$missing)}" '[ -z "$missing" ]'

# ---- a pool in quarantine (docs/design.md, "Failover and data loss") ---------------------------
echo "# quarantine"
qnow=$(rcli --raw time | head -1)
rcli set "dbthrottle:{qp}:q:era" "0123456789abcdef0123456789abcdef01234567 $((qnow * 1000 + 60000)) lost" px 60000 >/dev/null
rcli hset "dbthrottle:{qp}:q:stats" quarantines 1 reasserted 2 requeued 1 >/dev/null
rcli pexpire "dbthrottle:{qp}:q:stats" 60000 >/dev/null
"$D" status qp >"$work/qp.txt" 2>&1
check "status (table): a pool in quarantine says so, how long and why, and counts quarantines and re-assertions" 'grep -Eq "^  QUARANTINE: [0-9]+ ms left \(data lost\): no new grants" "$work/qp.txt" && grep -q "^  quarantines 1  reasserted 2  requeued 1" "$work/qp.txt"'
check "status --json: quarantine_ms, quarantine_why and the counters" '[ "$(js qp -- "(q[\"quarantine_ms\"] > 50000, q[\"quarantine_why\"], q[\"counters\"][\"quarantines\"], q[\"counters\"][\"reasserted\"], c[\"quarantine_why\"])")" = "(True, '"'"'lost'"'"', 1, 2, None)" ]'
"$D" status --prometheus qp >"$work/qp.prom"
check "status --prometheus: the quarantine's seconds left and the counters" 'grep -Eq "^dbthrottle_quarantine_seconds\{pool=\"qp\",kind=\"query\"\} [1-9]" "$work/qp.prom" && grep -q "^dbthrottle_reasserted_total{pool=\"qp\",kind=\"query\"} 2" "$work/qp.prom"'

summary
