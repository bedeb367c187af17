# status_names_disagreeing_limits.sh - workers configured for different limits on one pool each
# wait by their own (docs/design.md, "Limit agreement"): at limits 3 and 1, one holder at 3 keeps
# the worker at 1 waiting, and the pool reads "limit 1, 1 holding, 1 waiting" as if stuck. status
# (and top, which prints the same table) names the limits and the processes of each; not under an
# override, which every worker is admitted by.
it_status_names_disagreeing_limits() {
    hold_begin dl_holder DBTHROTTLE_POOL=dl DBTHROTTLE_MAX_QUERIES=3
    dl_h=$hold_pid
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{dl}:q:holders")" = 1 ]'
    hold_begin dl_waiter DBTHROTTLE_POOL=dl DBTHROTTLE_MAX_QUERIES=1
    dl_w=$hold_pid
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{dl}:q:queue")" = 1 ]'
    # (each was started through a shell function: the psql is its child)
    dl_h=$(pgrep -P "$dl_h" psql || echo "$dl_h")
    dl_w=$(pgrep -P "$dl_w" psql || echo "$dl_w")
    "$top/build/dbthrottle" status dl --redis "redis://127.0.0.1:$rport" >"$work/dl.table" 2>&1
    dl_json=$("$top/build/dbthrottle" status dl --json --redis "redis://127.0.0.1:$rport" |
        $py -c 'import json,sys
d = json.load(sys.stdin)
for u in d["pools"][0]["queries"]["limits_in_use"]:
    print(u["limit"], " ".join(str(p["pid"]) for p in u["processes"]))')
    dl_line=$(grep "LIMITS DISAGREE" "$work/dl.table")
    check "status names disagreeing limits and their processes (${dl_line:-no line}; --json: $(echo "$dl_json" | tr '\n' ';'))" \
        'echo "$dl_line" | grep -q " 1 ([^)]* pid $dl_w) and 3 ([^)]* pid $dl_h)" &&
         [ "$(echo "$dl_json" | tr "\n" ";")" = "1 $dl_w;3 $dl_h;" ]'
    # Under an override both hold, by it: no such line.
    "$top/build/dbthrottle" limit dl 5 --redis "redis://127.0.0.1:$rport" >/dev/null
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{dl}:q:holders")" = 2 ]'
    "$top/build/dbthrottle" status dl --redis "redis://127.0.0.1:$rport" >"$work/dl.override" 2>&1
    "$top/build/dbthrottle" limit dl --clear --redis "redis://127.0.0.1:$rport" >/dev/null
    hold_end_all
    check "status says nothing of disagreeing limits under an override ($(grep -m1 "query: limit" "$work/dl.override"))" \
        '! grep -q "LIMITS DISAGREE" "$work/dl.override" && grep -q "query: limit 5 .*, 2 holding" "$work/dl.override"'
    # One limit: no line.
    hold_begin dl_agree DBTHROTTLE_POOL=dl DBTHROTTLE_MAX_QUERIES=3
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{dl}:q:holders")" = 1 ]'
    "$top/build/dbthrottle" status dl --redis "redis://127.0.0.1:$rport" >"$work/dl.agree" 2>&1
    hold_end dl_agree
    check "status says nothing of limits when the workers agree ($(head -n 1 "$work/dl.agree"))" \
        '! grep -q "LIMITS DISAGREE" "$work/dl.agree" && grep -q "dl.* query: limit 3, 1 holding" "$work/dl.agree"'
}
