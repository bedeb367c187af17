# live_outage_mode.sh - the outage mode set live by the operator (dbthrottle set POOL
# on_redis_error closed; docs/operations.md, "Live settings"). A worker whose own mode is open takes
# the pool's live closed: its process record in Redis says so, and while Redis is down its command
# is refused (53300), judged at the server (no probe of it ran). Redis restarted empty loses the
# setting, as it loses a limit override: the worker's record says open again, and in the next
# outage its command runs on unthrottled (the probe ran), as its own mode says.
echo "# live_outage_mode: on_redis_error set live, and lost with a Redis restarted empty"
lom_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
# The mode W's record in Redis says (status.lua reads the process records), "" none yet.
lom_mode() {
    lom_cli status lom --json 2>/dev/null | python3 -c 'import json, sys
for p in json.load(sys.stdin).get("processes", []):
    if p["pid"] == int(sys.argv[1]): print(p["on_redis_error"])' "$lom_psql"
}
lom_cli set lom on_redis_error closed --create >"$work/lom.set" 2>&1
check "live_outage_mode: dbthrottle set wrote the live mode ($(cat "$work/lom.set"))" \
    'grep -q "on_redis_error = closed, live" "$work/lom.set"'
lom_fifo=$work/lom.fifo
mkfifo "$lom_fifo"
env LD_PRELOAD="$preload" DBTHROTTLE_POOL=lom DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=3s \
    DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_ON_REDIS_ERROR=open DBTHROTTLE_CACHE_PERMITS=off \
    DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_SHARE_DIR="$work" PGAPPNAME=lom \
    psql -qAtX -f "$lom_fifo" >"$work/lom.out" 2>"$work/lom.err" &
lom_psql=$!
# E: a process whose only connection is exempt, closed by its own setting. It reports (to hear
# the live settings), so it meets the outage; nothing of it is refused, so it must not say
# "refusing commands until Redis is back" (at debug it logs what it met).
mkfifo "$work/lom.efifo"
env LD_PRELOAD="$preload" DBTHROTTLE_POOL=lom DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=3s \
    DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_EXEMPT=application_name=lom_e \
    DBTHROTTLE_LOG_LEVEL=debug DBTHROTTLE_SHARE_DIR="$work" PGAPPNAME=lom_e \
    psql -qAtX -f "$work/lom.efifo" >"$work/lom.eout" 2>"$work/lom.eerr" &
lom_e=$!
exec 8>"$work/lom.efifo"
echo "select dbt_probe(1);" >&8
exec 7>"$lom_fifo"
mark
echo "select dbt_probe(1);" >&7
wait_until 15 '[ "$(lom_mode)" = closed ]'
check "live_outage_mode: W's own mode is open; its record in Redis says the live closed ($(lom_mode); probes: $(probes lom))" \
    '[ "$(lom_mode)" = closed ] && [ "$(probes lom)" -eq 1 ]'
# Redis down: refused, as the operator asked.
redis_kill
mark
echo "select dbt_probe(1);" >&7
wait_until 10 'grep -q "53300\|refus" "$work/lom.err"'
check "live_outage_mode: with Redis down, W's command was refused by the live closed ($(probes lom) probes at the server; $(grep -v "^ts=" "$work/lom.err" | head -1 | cut -c1-120))" \
    '[ "$(probes lom)" -eq 0 ] && grep -v "^ts=" "$work/lom.err" | grep -q "the pool.s live on_redis_error is closed"'
# E met the outage (its heartbeat, within a lease), ran its exempt probe, and did not say it
# refuses commands.
echo "select dbt_probe(1);" >&8
wait_until 10 '[ "$(probes lom_e)" -ge 1 ] && grep -q "level=debug event=redis_error" "$work/lom.eerr"'
check "live_outage_mode: an exempt-only process met the outage ($(grep -c "event=redis_error" "$work/lom.eerr") lines, at debug) and its probe ran ($(probes lom_e)); it said no redis_error at warn or error" \
    '[ "$(probes lom_e)" -eq 1 ] && grep -q "level=debug event=redis_error" "$work/lom.eerr" &&
     ! grep -qE "level=(warn|error) event=(redis_error|redis_back)" "$work/lom.eerr"'
# Restarted empty: the setting is gone; W's next renewal brings none, and it goes back to its own.
rm -f "$work/redis/dump.rdb"
redis_start 7>&- 8>&- # (the server must not keep psql's scripts open)
wait_until 20 '[ "$(lom_mode)" = open ]'
check "live_outage_mode: Redis restarted empty, W's record says its own open again ($(lom_mode); $(grep -o "event=live_settings [^ ]* version=[0-9]*" "$work/lom.err" | tail -1))" \
    '[ "$(lom_mode)" = open ]'
redis_kill
mark
echo "select dbt_probe(1);" >&7
wait_until 10 '[ "$(probes lom)" -ge 1 ]'
check "live_outage_mode: in the next outage W's command ran on unthrottled, by its own mode ($(probes lom) probes)" \
    '[ "$(probes lom)" -eq 1 ]'
redis_start 7>&- 8>&-
exec 7>&- 8>&-
wait "$lom_psql" "$lom_e"
check "live_outage_mode: nothing held or queued in the end" 'nothing_left q "dbthrottle:{lom}" 5'
