# shadow_mode.sh - DBTHROTTLE_MODE=shadow (docs/design.md, "Shadow mode"). At a limit of 1, four
# shadow workers never wait: the server ran more than one of their probes at once, Redis counted
# what enforcing would have queued (its stats: would_wait, and nothing queued), and dbthrottle
# status lists the processes as shadow, as dbthrottle mode POOL does. Switched live to enforce
# (dbthrottle mode POOL enforce: the live setting mode), they say so in status and in dbthrottle
# mode, and workers whose own mode is shadow are held to one at a time, judged at the server.
# Then one kind only: switched live to shadow for queries (dbthrottle mode POOL shadow --queries).
echo "# shadow_mode: counted, never held back; set live to enforce, held to the limit again"
sm_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
# The states status gives the pool's processes, each once, sorted ("" when none is listed).
sm_states() {
    sm_cli status sm --json 2>/dev/null | python3 -c 'import json, sys
print(" ".join(sorted({p["state"] for p in json.load(sys.stdin).get("processes", [])})))'
}
sm_stat() { rcli hget "dbthrottle:{sm}:q:stats" "$1" | tr -d '\r'; }
mark
i=0
while [ $i -lt 4 ]; do
    wargs="-s 150" spawn "$work/sm.out.$i" PGAPPNAME=sm DBTHROTTLE_POOL=sm DBTHROTTLE_MAX_QUERIES=1 \
        DBTHROTTLE_MODE=shadow DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=300ms
    i=$((i + 1))
done
wait_until 20 '[ "$(probes sm)" -ge 24 ] && [ "$(sm_states)" = shadow ]'
sm_shadow_conc=$(max_conc sm)
check "shadow_mode: nothing waited: at most $sm_shadow_conc at once at the server at a limit of 1 ($(probes sm) probes)" \
    '[ "$sm_shadow_conc" -gt 1 ]'
check "shadow_mode: status lists the workers as shadow ($(sm_states))" '[ "$(sm_states)" = shadow ]'
sm_ww=$(sm_stat would_wait) sm_q=$(sm_stat queued)
check "shadow_mode: Redis counted what enforcing would have queued (would_wait ${sm_ww:-none}) and queued none (${sm_q:-none})" \
    '[ "${sm_ww:-0}" -gt 0 ] && [ "${sm_q:-0}" -eq 0 ]'
wait_until 10 '[ "$(grep -c "event=mode pool=sm mode=shadow" "$work/workers.err")" -ge 4 ]'
check "shadow_mode: each worker said it runs in shadow mode once, at warn (event=mode: $(grep -c "event=mode pool=sm mode=shadow" "$work/workers.err") lines)" \
    '[ "$(grep -c "event=mode pool=sm mode=shadow" "$work/workers.err")" -eq 4 ]'

sm_cli mode sm >"$work/sm.mode" 2>&1
check "shadow_mode: dbthrottle mode lists shadow in the 4 processes, from their environment ($(tr '\n' ' ' <"$work/sm.mode"))" \
    'grep -q "live mode unset" "$work/sm.mode" && grep -q "shadow  *in 4 of its 4 processes (environment)" "$work/sm.mode"'
sm_cli mode sm sideways >/dev/null 2>"$work/sm.bad"
sm_rc=$?
check "shadow_mode: an unknown mode is refused: exit $sm_rc, $(cat "$work/sm.bad")" \
    '[ "$sm_rc" -eq 2 ] && [ "$(wc -l <"$work/sm.bad")" -eq 1 ] && grep -q "sideways" "$work/sm.bad"'

# Live: enforce. The running workers apply it within a renewal: their records say throttling.
sm_cli mode sm enforce >"$work/sm.set" 2>&1
wait_until 20 '[ "$(sm_states)" = throttling ]'
check "shadow_mode: switched live to enforce, status lists them as throttling ($(sm_states); $(cat "$work/sm.set"))" \
    '[ "$(sm_states)" = throttling ]'
sm_cli mode sm >"$work/sm.mode" 2>&1
check "shadow_mode: dbthrottle mode says so ($(tr '\n' ' ' <"$work/sm.mode"))" \
    'grep -q "live mode enforce" "$work/sm.mode" && grep -q "enforce  *in 4 of its 4 processes (live)" "$work/sm.mode"'
for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
wait_workers
# Four more whose own mode is shadow: a process' first command waits for the pool's live
# settings, so the live enforce holds them to the limit from their first command on.
mark
i=0
while [ $i -lt 4 ]; do
    wargs="-n 6 -s 150" spawn "$work/sm2.out.$i" PGAPPNAME=sm DBTHROTTLE_POOL=sm DBTHROTTLE_MAX_QUERIES=1 \
        DBTHROTTLE_MODE=shadow DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=300ms
    i=$((i + 1))
done
wait_workers
check "shadow_mode: their own mode is shadow, the live enforce held them to 1 at once at the server (most seen: $(max_conc sm); $(probes sm) of 24 probes)" \
    '[ "$(max_conc sm)" -eq 1 ] && [ "$(probes sm)" -eq 24 ]'
# And the other way: workers whose own mode is enforce, switched live to shadow. Status says
# where the mode came from (its reason), so that nobody hunts for a DBTHROTTLE_MODE to unset.
sm_cli mode sm shadow >/dev/null 2>&1
i=0
while [ $i -lt 2 ]; do
    wargs="-s 150" spawn "$work/sm3.out.$i" PGAPPNAME=sm DBTHROTTLE_POOL=sm DBTHROTTLE_MAX_QUERIES=1 \
        DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=300ms
    i=$((i + 1))
done
sm_reasons() {
    sm_cli status sm --json 2>/dev/null | python3 -c 'import json, sys
print(";".join(sorted({p["state"] + ": " + p.get("reason", "") for p in json.load(sys.stdin).get("processes", [])})))'
}
wait_until 20 '[ "$(sm_reasons)" = "shadow: mode shadow, live (dbthrottle mode): nothing waits or is refused" ]'
check "shadow_mode: switched live to shadow, status says the mode is live, not their own ($(sm_reasons))" \
    '[ "$(sm_reasons)" = "shadow: mode shadow, live (dbthrottle mode): nothing waits or is refused" ]'
for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
wait_workers
sm_cli mode sm --clear >"$work/sm.clear" 2>&1
sm_rc=$?
check "shadow_mode: dbthrottle mode --clear removed the live mode (exit $sm_rc: $(cat "$work/sm.clear"))" \
    '[ "$sm_rc" -eq 0 ] && [ "$(rcli exists "dbthrottle:{sm}:settings")" = 1 ] && [ -z "$(rcli get "dbthrottle:{sm}:settings" | grep mode=)" ]'
# One kind live (dbthrottle mode POOL shadow --queries): the queries of workers whose own mode is
# enforce run beside each other, judged at the server; their connections keep their own mode,
# and status and dbthrottle mode say both. --clear --queries takes it away again.
sm_cli mode sm shadow --queries >"$work/sm.q" 2>&1
sm_rc=$?
check "shadow_mode: mode sm shadow --queries set the live mode queries=shadow (exit $sm_rc: $(cat "$work/sm.q"))" \
    '[ "$sm_rc" -eq 0 ] && rcli get "dbthrottle:{sm}:settings" | grep -qx "mode=queries=shadow"'
mark
i=0
while [ $i -lt 3 ]; do
    wargs="-s 150" spawn "$work/sm4.out.$i" PGAPPNAME=sm DBTHROTTLE_POOL=sm DBTHROTTLE_MAX_QUERIES=1 \
        DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=300ms
    i=$((i + 1))
done
sm_kind_reason="shadow: mode queries=shadow,connections=enforce, live (dbthrottle mode): no query waits or is refused"
wait_until 20 '[ "$(sm_reasons)" = "$sm_kind_reason" ] && [ "$(probes sm)" -ge 18 ]'
check "shadow_mode: status says which kind is in shadow mode, and from where ($(sm_reasons))" \
    '[ "$(sm_reasons)" = "$sm_kind_reason" ]'
check "shadow_mode: their queries were not held to the limit of 1 (most at once at the server: $(max_conc sm))" \
    '[ "$(max_conc sm)" -gt 1 ]'
sm_cli mode sm >"$work/sm.mode" 2>&1
check "shadow_mode: dbthrottle mode shows the live kind and what is in force with each one's own ($(tr '\n' ' ' <"$work/sm.mode"))" \
    'grep -q "live mode queries=shadow (each worker has its own for the other kind)" "$work/sm.mode" &&
     grep -q "queries=shadow,connections=enforce  *in 3 of its 3 processes (live and own)" "$work/sm.mode"'
sm_cli mode sm --clear --queries >"$work/sm.clear" 2>&1
sm_rc=$?
wait_until 20 '[ "$(sm_states)" = throttling ]'
check "shadow_mode: --clear --queries removed it (exit $sm_rc; states: $(sm_states))" \
    '[ "$sm_rc" -eq 0 ] && [ -z "$(rcli get "dbthrottle:{sm}:settings" | grep mode=)" ] && [ "$(sm_states)" = throttling ]'
sm_cli mode sm --queries >/dev/null 2>"$work/sm.bad"
sm_rc=$?
check "shadow_mode: --queries without a mode is refused: exit $sm_rc, $(cat "$work/sm.bad")" \
    '[ "$sm_rc" -eq 2 ] && [ "$(wc -l <"$work/sm.bad")" -eq 1 ] && grep -q -- "--queries goes with a mode" "$work/sm.bad"'
for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
wait_workers
nothing_left
