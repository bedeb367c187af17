# stopped_keeper_admits_no_one_extra.sh - a permit kept between commands (kept permits, the
# default) whose process is stopped while Redis restarts empty, for longer than the quarantine Q
# and less than half a lease. Once Q is over Redis grants the limit to others; the kept permit may
# be neither taken from the host's shelf by another process of its host, nor used again by its
# keeper when it resumes (whether its renewer re-asserts it first or its next command comes
# first). Limit 1, lease 30 s, DBTHROTTLE_REDIS_TIMEOUT=200ms: Q = 10 + 0.2 + 1 = 11.2 s, half a
# lease 15 s. Judged at PostgreSQL: never 2 probes at once.
echo "# stopped_keeper_admits_no_one_extra: a kept permit stopped across an empty restart is not used again"
sk_env="DBTHROTTLE_POOL=sk DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=30s DBTHROTTLE_REDIS_TIMEOUT=200ms DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_CACHE_IDLE=1m DBTHROTTLE_HOST_SHARE=on"
mkdir -p "$work/sk.hostA" "$work/sk.hostC"
mark
# Another host's caller, which keeps nothing: one probe before the restart (so that it knows the
# server's era: a process new to the pool is granted at once by a server restarted empty, which
# docs/design.md lists), its next after the restart, granted once the quarantine is over (nobody
# re-asserts the kept permit meanwhile), and held for 6 s. Its next waits for Redis' restart (a
# file), not for a time: a CI run once started the keeper so slowly that a 1.5 s pause ended
# before the restart, and the caller, queued behind the kept permit, was refused in the outage.
# And if the caller's own background call met the outage (redis_error: on a loaded host Redis
# stays down for seconds), it waits for its redis_back too: closed mode refuses at once for a
# second after each failure (docs/operations.md), which a CI run met on a 0 ms wait.
sk_other_err="$work/sk.other.err"
# (One line: a backslash command ends with its line.)
sk_resume="until [ -e '$work/sk.back' ]; do sleep 0.05; done;"
sk_resume="$sk_resume if grep -q event=redis_error '$sk_other_err'; then"
sk_resume="$sk_resume until grep -q event=redis_back '$sk_other_err'; do sleep 0.05; done; fi"
env LD_PRELOAD="$preload" $sk_env DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_SHARE_DIR="$work/sk.hostC" PGAPPNAME=sk \
    psql -qAtX -c "select dbt_probe(1)" -c "\\! $sk_resume" \
    -c "select dbt_probe(6000)" >/dev/null 2>"$sk_other_err" &
sk_other=$!
wait_until 10 '[ "$(probes sk)" -ge 1 ]'
# The keeper (host A): one quick probe, whose permit it keeps, then a pause it is stopped in, then
# a probe as soon as it resumes.
env LD_PRELOAD="$preload" $sk_env DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_SHARE_DIR="$work/sk.hostA" PGAPPNAME=sk \
    psql -qAtX -c "select dbt_probe(1)" -c '\! sleep 1' -c "select dbt_probe(2000)" >/dev/null 2>"$work/sk.keeper.err" &
sk_keeper=$!
wait_until 10 '[ "$(probes sk)" -ge 2 ] && [ "$(live_holders q "dbthrottle:{sk}")" -eq 1 ]'
kill -STOP "$sk_keeper"
sk_kept=$(live_holders q "dbthrottle:{sk}")
redis_kill
rm -f "$work/redis/dump.rdb"
redis_start
sk_back=$(now_ms)
touch "$work/sk.back"
wait_until 30 '[ "$(probes sk)" -ge 3 ]'
sk_granted=$(($(now_ms) - sk_back))
# A second process of the keeper's host: the kept permit is on their shelf.
env LD_PRELOAD="$preload" $sk_env DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_SHARE_DIR="$work/sk.hostA" PGAPPNAME=sk \
    psql -qAtX -c "select dbt_probe(500)" >/dev/null 2>"$work/sk.neighbour.err" &
sk_neighbour=$!
sleep 0.5
kill -CONT "$sk_keeper"
wait "$sk_keeper"
sk_rc1=$?
wait "$sk_other"
sk_rc2=$?
wait "$sk_neighbour"
sk_rc3=$?
info "stopped_keeper_admits_no_one_extra: kept $sk_kept permit(s) when stopped; the other host's second probe began $sk_granted ms after Redis was back (Q 11.2 s)"
check "stopped_keeper_admits_no_one_extra: the keeper, the other host's caller and the keeper's neighbour all ran (rc $sk_rc1 $sk_rc2 $sk_rc3; $(probes sk) probes; the caller said: $(grep -v '^ts=' "$sk_other_err" | head -2 | tr '\n' ' ' | cut -c1-200))" \
    '[ "$sk_kept" -eq 1 ] && [ "$sk_rc1$sk_rc2$sk_rc3" = 000 ] && [ "$(probes sk)" -eq 5 ]'
check "stopped_keeper_admits_no_one_extra: never 2 probes at once at the server (most: $(max_conc sk))" '[ "$(max_conc sk)" -le 1 ]'
check "stopped_keeper_admits_no_one_extra: nothing held or queued in the end" 'nothing_left q "dbthrottle:{sk}" 15'
