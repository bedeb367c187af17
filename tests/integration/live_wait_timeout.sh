# live_wait_timeout.sh - a pool's live settings (dbthrottle set, docs/design.md, "Live settings per
# pool"): the operator sets wait_timeout in Redis and a running worker whose own is 60 s takes it
# within a renewal: its next wait behind a holder is refused after about 1 s, judged at the server
# (the holder's statement still runs) and by the worker's own error; cleared, the worker waits by
# its own again. Bad values are refused by the command (exit 2) and, written by hand into Redis,
# by the worker (logged, its own kept); a pool Redis never saw needs --create.
it_live_wait_timeout() {
    lv_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
    # Where the pool's processes stand with its live settings, by their records in Redis (status
    # --json): "applied N behind PID... refusing PID:KEYS..."
    lv_stand() {
        lv_cli status lv --json | $py -c 'import json, sys
l = json.load(sys.stdin)["pools"][0]["live_settings"] or {}
p = l.get("processes", {})
print("applied", p.get("applied", 0), "behind", *[q["pid"] for q in p.get("behind", [])],
      "refusing", *["%d:%s" % (q["pid"], q["refused"]) for q in p.get("refusing", [])])'
    }
    rm -f "$work"/lv.*
    check "set refuses a setting that is not live (exit 2)" \
        'lv_cli set lv max_queries 3 --create 2>"$work/lv.e1"; [ $? = 2 ] && grep -q "not a live setting (live: wait_timeout" "$work/lv.e1"'
    check "set refuses a bad value with the library's message (exit 2)" \
        'lv_cli set lv wait_timeout 3 --create 2>"$work/lv.e2"; [ $? = 2 ] && grep -q "DBTHROTTLE_WAIT_TIMEOUT" "$work/lv.e2"'
    check "set refuses a pool Redis never saw without --create" \
        '! lv_cli set lv wait_timeout 1s >/dev/null 2>&1'
    check "settings of a pool Redis never saw fails (exit 1)" \
        'lv_cli settings lv >/dev/null 2>&1; [ $? = 1 ]'
    # --json always prints a document that says what went wrong (a stranger's find: nothing on
    # stdout with Redis unreachable, and the pool left out)
    lv_jerr=$(lv_cli settings lv --json 2>/dev/null | $py -c 'import json, sys; print(json.load(sys.stdin)["pools"][0]["error"])')
    lv_jdown=$("$top/build/dbthrottle" settings lv --json --redis redis://127.0.0.1:1 2>/dev/null | $py -c 'import json, sys; print(json.load(sys.stdin)["error"])')
    check "settings --json says what went wrong: an unknown pool ($lv_jerr), Redis unreachable ($lv_jdown)" \
        'echo "$lv_jerr" | grep -q "nothing is set for it under this key prefix (dbthrottle:; a typo?); " && echo "$lv_jdown" | grep -q "127.0.0.1:1"'
    check "--clear with a VALUE, or with no KEY, says what is wrong (exit 2)" \
        'lv_cli set lv wait_timeout 5s --clear 2>"$work/lv.e3"; [ $? = 2 ] && grep -q "clear takes no VALUE" "$work/lv.e3" &&
         lv_cli set lv --clear 2>"$work/lv.e4"; [ $? = 2 ] && grep -q "which KEY to clear" "$work/lv.e4"'
    check "set says the value as stored ($(lv_cli set lv wait_timeout 0 --create))" \
        'lv_cli set lv wait_timeout 0 --create | grep -q "wait_timeout = 0ms, live"'
    check "set writes a live value (--create)" 'lv_cli set lv wait_timeout 2s --create >/dev/null'
    # A typo names the pools there (the first 12), as set, limit and drain do (a stranger had to
    # run status).
    check "settings of a pool Redis never saw names the pools there ($(lv_cli settings lvv 2>&1 >/dev/null | cut -c1-200))" \
        'lv_cli settings lvv 2>&1 >/dev/null | grep -q "a typo?); the pools there: [^ ]"'
    check "a pool whose only key is its live settings is known: no --create the second time" \
        'lv_cli set lv wait_timeout 1s >/dev/null'
    # The usual mistakes, each said for what it is (a stranger saw "unknown option 'wait_timeout'"
    # for a value of -5s, "cleared" for a key never set, and a leading blank stored).
    check "a value that begins with '-' is said to go after -- (exit 2), and after -- the parser judges it" \
        'lv_cli set lv wait_timeout -5s 2>"$work/lv.e5"; [ $? = 2 ] && grep -q "a value that begins with .-. goes after --" "$work/lv.e5" &&
         "$top/build/dbthrottle" set --redis "redis://127.0.0.1:$rport" lv wait_timeout -- -5s 2>"$work/lv.e6"; [ $? = 2 ] && grep -q "DBTHROTTLE_WAIT_TIMEOUT: bad value \"-5s\"" "$work/lv.e6"'
    check "an option without its value says so (exit 2)" \
        '"$top/build/dbthrottle" set lv wait_timeout 1s --redis 2>"$work/lv.e7"; [ $? = 2 ] && grep -q "option .--redis. needs a value" "$work/lv.e7"'
    lv_v0=$(rcli --raw get "dbthrottle:{lv}:settings" | head -1)
    check "--clear of a key not set live writes nothing and says so ($(lv_cli set lv on_redis_error --clear))" \
        'lv_cli set lv on_redis_error --clear | grep -q "on_redis_error is not set live: nothing cleared" &&
         [ "$(rcli --raw get "dbthrottle:{lv}:settings" | head -1)" = "$lv_v0" ]'
    lv_cli set lv wait_timeout " 1s " >/dev/null
    check "a value is stored without the blanks around it ($(rcli --raw get "dbthrottle:{lv}:settings" | tail -n +2 | tr '\n' ' '))" \
        'rcli --raw get "dbthrottle:{lv}:settings" | grep -qx "wait_timeout=1s"'
    check "settings lists it ($(lv_cli settings lv | tr '\n' ';'))" \
        'lv_cli settings lv | grep -q "^  wait_timeout  *1s$"'
    lv_json=$(lv_cli status lv --json | $py -c 'import json,sys
l = json.load(sys.stdin)["pools"][0]["live_settings"]
print(l["values"].get("wait_timeout"), l["refused"])')
    check "status shows it, in its table and --json ($(lv_cli status lv | grep "live settings"); $lv_json)" \
        'lv_cli status lv | grep -q "^  live settings (dbthrottle set, in place of the workers. own): wait_timeout=1s$" && [ "$lv_json" = "1s None" ]'
    # The worker: its own wait is 60 s; a statement on a free pool first (its first report
    # brings the live settings), then one behind a holder, then (cleared) another.
    ( echo "select 1;"
      wait_until 60 '[ -e "$work/lv.go1" ]'; echo "select 2;"
      wait_until 60 '[ -e "$work/lv.go2" ]'; echo "select 3;"
      wait_until 60 '[ -e "$work/lv.end" ]' ) |
        throttled DBTHROTTLE_POOL=lv DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s \
            DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_LOG_LEVEL=info PGAPPNAME=lv_worker \
            psql -qAtX >"$work/lv.out" 2>"$work/lv.err" &
    lv_w=$!
    echo $lv_w >>"$work/pids"
    wait_until 20 '[ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lv_worker'"' and query = '"'select 1;'"'")" ]'
    lv_v1=$(lv_cli settings lv | sed -n 's/.*live settings, version \([0-9]*\)$/\1/p')
    wait_until 20 'grep -q "event=live_settings .*version=$lv_v1" "$work/lv.err"'
    check "the worker applied the live settings, version $lv_v1 ($(grep -o "event=live_settings[^ ]* pool=lv version=[0-9]*" "$work/lv.err" | tail -1))" \
        '[ -n "$lv_v1" ] && grep -q "event=live_settings .*version=$lv_v1" "$work/lv.err"'
    # Its record says so at once (it reports as it applies a version), not a heartbeat later.
    wait_until 5 '[ "$(lv_stand)" = "applied 1 behind refusing" ]'
    check "the worker's record in Redis says it applied them, within $waited_ms ms ($(lv_stand))" \
        '[ "$(lv_stand)" = "applied 1 behind refusing" ]'
    hold_begin lv_holder DBTHROTTLE_POOL=lv DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lv}:q:holders")" = 1 ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lv_holder'"' and state = '"'active'"'")" ]'
    lv_t0=$(date +%s%N)
    touch "$work/lv.go1"
    wait_until 30 'grep -q "no query permit" "$work/lv.err"'
    lv_ms=$((($(date +%s%N) - lv_t0) / 1000000))
    lv_holder_runs=$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = 'lv_holder' and state = 'active'")
    check "behind a holder, the worker was refused by the live 1 s, not its own 60 s ($lv_ms ms; holder still running: $lv_holder_runs; $(grep -o "no query permit.*" "$work/lv.err" | head -1 | cut -c1-120))" \
        '[ "$lv_holder_runs" = 1 ] && [ $lv_ms -ge 800 ] && [ $lv_ms -lt 20000 ] && grep -qE "after waiting (9[5-9][0-9]|1[0-9]{3}) ms: the pool.s live wait_timeout reached" "$work/lv.err"'
    # (The library's own count of the wait may read a millisecond short of it: 1999 ms for 2 s.)
    # A one-shot process (psql -c: one command) whose own wait is 20 s: its first command hears
    # the pool's live settings before it decides (a stranger's find: it waited by its own while
    # status said the live value was in force), so it is refused after the live 1 s, and says so.
    lv_t0=$(date +%s%N)
    throttled DBTHROTTLE_POOL=lv DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s DBTHROTTLE_WAIT_TIMEOUT=20s \
        PGAPPNAME=lv_new psql -qAtX -c "select 4" >/dev/null 2>"$work/lv.new.err"
    lv_new_ms=$((($(date +%s%N) - lv_t0) / 1000000))
    check "a one-shot process' only command waits by the live 1 s, not its own 20 s ($lv_new_ms ms; $(grep -o "after waiting.*" "$work/lv.new.err" | head -1 | cut -c1-100))" \
        '[ $lv_new_ms -ge 800 ] && [ $lv_new_ms -lt 15000 ] && grep -qE "after waiting (9[5-9][0-9]|1[0-9]{3}) ms: the pool.s live wait_timeout reached" "$work/lv.new.err"'
    # Cleared: within a renewal (a lease of 3 s at most for an idle worker) its own 60 s again.
    lv_cli set lv wait_timeout --clear >/dev/null
    lv_v2=$(lv_cli settings lv | sed -n 's/.*live settings, version \([0-9]*\)$/\1/p')
    check "a new version ($lv_v2 after $lv_v1)" '[ -n "$lv_v2" ] && [ "$lv_v2" -gt "$lv_v1" ]'
    wait_until 20 'grep -q "event=live_settings .*version=$lv_v2" "$work/lv.err"'
    touch "$work/lv.go2"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lv}:q:queue")" = 1 ]'
    sleep 3 # longer than the live 1 s: a wait still there waits by its own 60 s
    check "cleared, the worker waits by its own again (queued after 3 s: $(rcli zcard "dbthrottle:{lv}:q:queue"))" \
        '[ "$(rcli zcard "dbthrottle:{lv}:q:queue")" = 1 ] && [ "$(grep -c "no query permit" "$work/lv.err")" = 1 ]'
    hold_end_all
    wait_until 20 'grep -qx 3 "$work/lv.out"'
    # A value written by hand that the worker's parser refuses: its own is kept, and it says so.
    rcli set "dbthrottle:{lv}:settings" "$(printf 'v7\nwait_timeout=soon\n')" >/dev/null
    wait_until 20 'grep -q "event=live_setting_refused .*version=7" "$work/lv.err"'
    check "a live value the worker's parser refuses is logged and not applied ($(grep -o "event=live_setting_refused.*" "$work/lv.err" | head -1 | cut -c1-160))" \
        'grep -q "event=live_setting_refused .*version=7 .*wait_timeout" "$work/lv.err"'
    check "settings says the workers refuse it ($(lv_cli settings lv | tail -1))" \
        'lv_cli settings lv | grep -q "refused by the workers.*wait_timeout"'
    check "and status ($(lv_cli status lv | grep "live settings"))" \
        'lv_cli status lv | grep -q "^  live settings the workers refuse (they keep their own): wait_timeout: DBTHROTTLE_WAIT_TIMEOUT"'
    # The worker's record names the key it refused; stopped, it cannot take the next version,
    # and status names it as behind until it runs again.
    wait_until 5 '[ -n "$(lv_stand | sed -n "s/^applied 0 behind refusing \([0-9]*\):wait_timeout$/\1/p")" ]'
    lv_pid=$(lv_stand | sed -n 's/^applied 0 behind refusing \([0-9]*\):wait_timeout$/\1/p')
    check "the worker's record says which key it refused ($(lv_stand); pid $lv_pid)" \
        '[ -n "$lv_pid" ] && [ "$(ps -o comm= -p "$lv_pid")" = psql ]'
    kill -STOP "$lv_pid"
    lv_cli set lv wait_timeout 5s >/dev/null
    lv_behind=$(lv_cli status lv | grep "not applied yet")
    check "a stopped worker is named as not having applied the new version ($lv_behind)" \
        'echo "$lv_behind" | grep -q "live settings v[0-9]* not applied yet (a renewal late, or cut off) by 1 process: [^ ]*:$lv_pid (psql, applied v7)$"'
    kill -CONT "$lv_pid"
    wait_until 10 '[ "$(lv_stand)" = "applied 1 behind refusing" ]'
    check "running again, it applied it within $waited_ms ms ($(lv_stand))" '[ "$(lv_stand)" = "applied 1 behind refusing" ]'
    # Written by hand: a key that is not live can be cleared by name (the workers refuse it), and
    # a text that is not live settings is said to be so, and cleared whole (a stranger's finds:
    # "not a live setting" for the first, "no live setting" for the second).
    rcli set "dbthrottle:{lv}:settings" "$(printf 'v8\nbogus=1\nwait_timeout=5s\n')" >/dev/null
    check "a key written by hand that is not live is cleared by name ($(lv_cli set lv bogus --clear 2>&1))" \
        '! rcli --raw get "dbthrottle:{lv}:settings" | grep -q "^bogus=" && rcli --raw get "dbthrottle:{lv}:settings" | grep -qx "wait_timeout=5s"'
    rcli set "dbthrottle:{lv}:settings" "garbage" >/dev/null
    check "a text that is not live settings is said to be so ($(lv_cli settings lv | head -1 | cut -c1-120))" \
        'lv_cli settings lv | grep -q "holds what is not live settings, which its workers apply none of: \"garbage\""'
    check "and --clear-all clears it ($(lv_cli set lv --clear-all))" \
        'rcli --raw get "dbthrottle:{lv}:settings" | grep -qx "v[0-9]*"'
    touch "$work/lv.end"
    wait "$lv_w"
}
