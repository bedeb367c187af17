#!/bin/sh
# rtt_fleet.sh - fleets at one network distance: bench/rtt_bench.sh (make bench-rtt) starts Redis,
# PostgreSQL, PgBouncer and a delay in front of each, and runs this once per round trip with:
#   BENCH_LIB               libdbthrottle.so
#   BENCH_REDIS_URL         Redis through the delay (the library's)
#   BENCH_REDIS_DIRECT_PORT the same Redis without it (INFO, CLIENT LIST: Redis' own view)
#   BENCH_PGHOST/BENCH_PGPORT PostgreSQL through the delay; BENCH_PG_DIRECT_PORT without it
#   BENCH_BOUNCER_PORT      PgBouncer (transaction mode, pool 4) through a delay, reaching
#                           PostgreSQL through the delay
#   BENCH_SECONDS           seconds per figure (4); BENCH_WORK a directory of ours
# and PGUSER, PGDATABASE. It measures three things, every one from outside the library (pgbench's
# own per-transaction log, the server's advisory locks, Redis' INFO and CLIENT LIST):
#   1. 4 simulated hosts (a DBTHROTTLE_SHARE_DIR each) x 4 processes (pgbench -c1) at a limit of
#      4, 5 ms statements: uncached, kept permits (the default), and the same 16 through PgBouncer's pool of
#      4 with no library. Utilization, latency p99 over the FIFO ideal, Jain's index across hosts,
#      the most statements at once at the server.
#   2. One Redis at saturation: 8 processes on 4 hosts at 4, short statements: statements (grants)
#      per second, the Redis commands and Redis CPU each costs, grants per Redis core.
#   3. Redis connections of one host running 1, 4 and 16 processes, without and with one relay per
#      host (DBTHROTTLE_HOST_RELAY).
# Prints markdown table rows "| what | value |" on stdout and nothing else (diagnostics go to
# stderr). Exits 1, with a FAILED row, when anything it relied on failed: a run with errors, more
# than the limit at the server, processes that never ran side by side. About 50 s with
# BENCH_SECONDS=4 (more on a loaded machine); RTT_FLEET_PARTS picks parts ("1 3").
set -u
for v in BENCH_LIB BENCH_REDIS_URL BENCH_REDIS_DIRECT_PORT BENCH_PGHOST BENCH_PGPORT \
    BENCH_PG_DIRECT_PORT BENCH_BOUNCER_PORT BENCH_WORK; do
    eval "[ -n \"\${$v:-}\" ]" || { echo "rtt_fleet.sh: $v is not set" >&2; exit 2; }
done
[ -f "$BENCH_LIB" ] || { echo "rtt_fleet.sh: BENCH_LIB: no file $BENCH_LIB" >&2; exit 2; }
S=${BENCH_SECONDS:-4}
# The library's defaults but for what each run sets: no DBTHROTTLE_* of the caller's environment reaches a
# run (each run sets what it needs; DBTHROTTLE_CONFIG set empty keeps /etc/dbthrottle.conf out).
for v in $(env | sed -n 's/^\(DBTHROTTLE_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
W=$BENCH_WORK/fleet
mkdir -p "$W" && cd "$W" || exit 2
LIMIT=4
# Where the library's connections to Redis arrive (the delay's port): to count them by process.
redis_port=$(echo "$BENCH_REDIS_URL" | sed -n 's|^redis://\([^@/]*@\)\{0,1\}[^:/]*:\([0-9]*\).*|\2|p')

failures=
fail() {
    echo "rtt_fleet.sh: FAIL: $*" >&2
    failures="$failures${failures:+; }$*"
}
row() { printf '| %s | %s |\n' "$1" "$2"; }
pgd() { psql -h 127.0.0.1 -p "$BENCH_PG_DIRECT_PORT" -qAtX -v ON_ERROR_STOP=1 "$@"; }
rdc() { redis-cli -h 127.0.0.1 -p "$BENCH_REDIS_DIRECT_PORT" "$@"; }

# The statement: fleet_probe(ms, run) takes an advisory lock keyed by its run and its backend,
# counts the granted locks of its run (itself included: a consistent snapshot of the lock table),
# sleeps ms and unlocks, then raises its run's row in fleet_conc to that count. Each lock lives
# within its statement, so within the permit its client held: the largest count is a lower bound
# of the statements running at once that only a real overlap can raise (tests/support/lib.sh's
# dbt_probe, recorded in a table instead of the server log, which a bench may not read).
pgd >/dev/null <<'SQL' || { echo "rtt_fleet.sh: cannot install fleet_probe on port $BENCH_PG_DIRECT_PORT" >&2; exit 1; }
CREATE TABLE IF NOT EXISTS fleet_conc (run text PRIMARY KEY, most int NOT NULL DEFAULT 0);
CREATE OR REPLACE FUNCTION fleet_probe(ms int, run text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int; k int := hashtext(run);
BEGIN
    PERFORM pg_advisory_lock(k, pg_backend_pid());
    BEGIN
        SELECT count(*) INTO n FROM pg_locks
         WHERE locktype = 'advisory' AND classid = k::oid AND objsubid = 2 AND granted;
        IF ms > 0 THEN PERFORM pg_sleep(ms / 1000.0); END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(k, pg_backend_pid());
        RAISE;
    END;
    PERFORM pg_advisory_unlock(k, pg_backend_pid());
    -- After the unlock: a row lock taken here is held only until the commit that follows.
    UPDATE fleet_conc SET most = n WHERE fleet_conc.run = fleet_probe.run AND most < n;
    RETURN n;
END $$;
SQL

# ---- running a fleet ---------------------------------------------------------------------------
# fleet_start ARM HOSTS PROCS MS lib|bouncer [ENV=VALUE...]: HOSTS x PROCS pgbench -c1 processes,
# each running fleet_probe(MS) back to back for S seconds (F_SECONDS overrides), logging every
# transaction; lib: through the library, each host its own DBTHROTTLE_SHARE_DIR, a pool of the
# run's own at LIMIT, a Redis error failing the statement; bouncer: through PgBouncer, no library.
# Sets $run (the pool and probe key), $dir, $fleet_pids.
nrun=0
fleet_start() {
    arm=$1 hosts=$2 procs=$3 ms=$4 via=$5
    shift 5
    nrun=$((nrun + 1))
    run=rttfleet-$(date +%s)-$$-$nrun-$arm
    dir=$W/$nrun-$arm
    mkdir -p "$dir/log"
    pgd -c "INSERT INTO fleet_conc (run) VALUES ('$run')" >/dev/null || fail "$arm: cannot reset the counter"
    echo "SELECT fleet_probe($ms, '$run');" >"$dir/stmt.sql"
    fleet_pids='' fleet_pat=''
    h=1
    while [ $h -le "$hosts" ]; do
        mkdir -m 700 "$dir/host$h"
        p=1
        while [ $p -le "$procs" ]; do
            if [ "$via" = lib ]; then
                set -- env LD_PRELOAD="$BENCH_LIB" DBTHROTTLE_CONFIG= DBTHROTTLE_REDIS_URL="$BENCH_REDIS_URL" \
                    DBTHROTTLE_POOL="$run" DBTHROTTLE_MAX_QUERIES=$LIMIT DBTHROTTLE_ON_REDIS_ERROR=closed \
                    DBTHROTTLE_SHARE_DIR="$dir/host$h" "$@"
                port=$BENCH_PGPORT
            else
                set -- env "$@"
                port=$BENCH_BOUNCER_PORT
            fi
            "$@" pgbench -n -c 1 -j 1 -T "${F_SECONDS:-$S}" -f "$dir/stmt.sql" -l \
                --log-prefix="$dir/log/h$h.p$p" -h "$BENCH_PGHOST" -p "$port" >"$dir/h$h.p$p.out" 2>&1 &
            fleet_pids="$fleet_pids $!"
            fleet_pat="${fleet_pat:+$fleet_pat|}$!"
            # Back to the caller's ENV for the next process.
            if [ "$via" = lib ]; then shift 8; else shift 1; fi
            p=$((p + 1))
        done
        h=$((h + 1))
    done
}
# fleet_wait: waits for the fleet; a process that failed or any failed transaction fails the run
# (a throttled statement refused means the throttle did not do its job here). Sets $most, the
# most statements at once at the server.
fleet_wait() {
    fw_i=0
    for fw_pid in $fleet_pids; do
        fw_i=$((fw_i + 1))
        wait "$fw_pid" || fail "$arm: process $fw_i of the fleet exited $?"
    done
    for fw_out in "$dir"/h*.out; do
        if ! grep -q '^number of failed transactions: 0 ' "$fw_out" || grep -q 'aborted' "$fw_out"; then
            fail "$arm: $(basename "$fw_out" .out): $(grep -i 'error\|abort\|fatal' "$fw_out" | head -2 | tr '\n' ' ')"
        fi
        # What the library said (a warning is no failure, but worth seeing).
        grep -v '^\(pgbench\|transaction type\|scaling\|query mode\|number of\|maximum\|duration\|latency\|initial\|tps\)' \
            "$fw_out" | head -3 | sed "s|^|rtt_fleet.sh: $arm: $(basename "$fw_out" .out): |" >&2
    done
    most=$(pgd -c "SELECT most FROM fleet_conc WHERE run = '$run'")
}

# The per-transaction logs (pgbench -l: client, transaction, latency µs, script, end s, end µs),
# judged over the window where every process ran: from the latest first end to the earliest last
# end (start-up and the stragglers' tail left out). Prints shell assignments: n (transactions in
# the window), secs, rate (/s), util (rate x MS / LIMIT), p50 and p99 (ms), jain (Jain's index of
# the hosts' counts), total (every transaction logged); or bad=REASON.
cat >"$W/judge.py" <<'PY'
import glob, os, re, sys
logdir, ms, limit, expect = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = []
for path in glob.glob(os.path.join(logdir, "h*.p*.*")):
    host = re.match(r"h(\d+)\.p\d+\.", os.path.basename(path)).group(1)
    tx, bad = [], 0
    with open(path) as f:
        for line in f:
            c = line.split()
            if len(c) < 6 or not c[2].isdigit():
                bad += 1
                continue
            tx.append((int(c[4]) + int(c[5]) / 1e6, int(c[2]) / 1000.0))
    runs.append((host, tx, bad))
def out(**kv):
    print(" ".join("%s=%s" % (k, v) for k, v in kv.items()))
if len(runs) != expect or any(not tx for _, tx, _ in runs):
    out(bad="'%d of %d processes logged transactions'" % (sum(1 for _, tx, _ in runs if tx), expect))
    sys.exit()
start = max(min(e for e, _ in tx) for _, tx, _ in runs)
end = min(max(e for e, _ in tx) for _, tx, _ in runs)
if end - start < 0.5:
    out(bad="'the processes ran side by side only %.2f s'" % (end - start))
    sys.exit()
per_host, lat = {}, []
for host, tx, _ in runs:
    inw = [l for e, l in tx if start < e <= end]
    per_host[host] = per_host.get(host, 0) + len(inw)
    lat += inw
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]
counts = list(per_host.values())
n, secs = len(lat), end - start
out(n=n, secs="%.2f" % secs, rate="%.1f" % (n / secs), util="%.3f" % (n / secs * ms / 1000.0 / limit),
    p50="%.2f" % q(50), p99="%.2f" % q(99),
    jain="%.4f" % (sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts))),
    total=sum(len(tx) for _, tx, _ in runs), failed=sum(b for _, _, b in runs))
PY
# judge HOSTS PROCS MS: the figures of the last fleet, as shell variables (see judge.py).
judge() {
    bad='' n=0 secs=0 rate=0 util=0 p50=0 p99=0 jain=0 total=0 failed=0
    eval "$(python3 "$W/judge.py" "$dir/log" "$3" "$LIMIT" $(($1 * $2)))"
    [ -z "$bad" ] || fail "$arm: $bad"
    [ "$failed" -eq 0 ] || fail "$arm: $failed transactions failed"
}

# RTT_FLEET_PARTS picks parts (by number; all three by default).
want() { case " ${RTT_FLEET_PARTS:-1 2 3} " in *" $1 "*) return 0 ;; esac; return 1; }

# ---- 1. four hosts x four processes at 4, 5 ms statements -----------------------------------
if want 1; then
# The statement alone (one client, no limit, through the delay) and PostgreSQL's round trip: a
# permit is busy for at least the statement alone (5 ms, the probe, one round trip), so 4 permits
# serve at most 4 / alone per second, and 16 clients that take turns in FIFO order each see 16 / 4
# of it per statement (Little's law: latency = clients / throughput).
lat_avg() { sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' | head -1; }
echo "SELECT 1;" >"$W/select1.sql"
echo "SELECT fleet_probe(5, 'rttfleet-alone');" >"$W/alone.sql"
pg_rtt=$(pgbench -n -c 1 -j 1 -T 1 -f "$W/select1.sql" -h "$BENCH_PGHOST" -p "$BENCH_PGPORT" 2>&1 | lat_avg)
alone=$(pgbench -n -c 1 -j 1 -T 1 -f "$W/alone.sql" -h "$BENCH_PGHOST" -p "$BENCH_PGPORT" 2>&1 | lat_avg)
if [ -z "$pg_rtt" ] || [ -z "$alone" ]; then
    fail "pgbench could not reach PostgreSQL at $BENCH_PGHOST:$BENCH_PGPORT"
    pg_rtt=0 alone=0
fi
ideal=$(awk -v a="$alone" -v l=$LIMIT 'BEGIN { printf "%.2f", 16 / l * a }')
row "fleet: PostgreSQL round trip (SELECT 1, pgbench -c1 through the delay)" "$pg_rtt ms"
row "fleet: a 5 ms statement alone (the probe, -c1, no limit)" "$alone ms"
row "fleet: best utilization possible (5 ms / the statement alone)" "$(awk -v a="$alone" 'BEGIN { printf "%.3f", (a > 0 ? 5 / a : 0) }')"
row "fleet: FIFO ideal latency, 16 clients on 4 permits (16 / 4 x the statement alone)" "$ideal ms"

fleet_rows() { # fleet_rows LABEL THROTTLED(yes|no)
    judge 4 4 5
    lbl="4 hosts x 4 processes at 4, 5 ms, $1"
    row "$lbl: statements/s" "$rate"
    row "$lbl: utilization (statements/s x 5 ms / 4)" "$util"
    row "$lbl: latency p99 / FIFO ideal" "$(awk -v p="$p99" -v i="$ideal" 'BEGIN { printf "%.2f", (i > 0 ? p / i : 0) }') (p99 $p99 ms, p50 $p50 ms)"
    row "$lbl: Jain's index across the 4 hosts" "$jain"
    row "$lbl: most statements at once at the server" "$most"
    echo "rtt_fleet.sh: $lbl: $n statements in the window of $secs s ($total logged)" >&2
    if [ "$2" = yes ] && [ "${most:-99}" -gt $LIMIT ]; then
        fail "$lbl: $most statements at once at the server, above the limit of $LIMIT"
    fi
}
fleet_start defaults 4 4 5 lib DBTHROTTLE_CACHE_PERMITS=off
fleet_wait
fleet_rows "uncached (DBTHROTTLE_CACHE_PERMITS=off)" yes
fleet_start kept 4 4 5 lib DBTHROTTLE_CACHE_PERMITS=on
fleet_wait
fleet_rows "kept permits (the default)" yes
fleet_start bouncer 4 4 5 bouncer
fleet_wait
fleet_rows "PgBouncer pool 4, no library" no
[ "${most:-99}" -le $LIMIT ] || echo "rtt_fleet.sh: PgBouncer's pool of $LIMIT let $most statements run at once: is it set up as said?" >&2
fi

# ---- 2. one Redis at saturation ----------------------------------------------------------------
# 8 processes on 4 hosts at 4, short statements (the probe without its sleep), for S seconds.
# Redis' own accounting before and after: the commands its clients sent (scripts, BLPOPs, the
# connections' set-up; the commands scripts run inside are counted apart by Redis and left out,
# and so are this script's INFO and CLIENT), its CPU (user + system, the whole process), and the
# commands' own time.
redis_stats() {
    rdc info all | tr -d '\r' | awk -F'[:=,]' '
        $1 ~ /^cmdstat_(evalsha|evalsha_ro|eval|eval_ro|fcall|fcall_ro|blpop|ping|subscribe|script|auth|select|role|readonly|hello)$/ { calls += $3; usec += $5 }
        $1 ~ /^cmdstat_(evalsha|evalsha_ro|eval|eval_ro|fcall|fcall_ro)$/ { scripts += $3 }
        $1 ~ /^cmdstat_/ && $1 !~ /^cmdstat_(info|client|command)/ { all += $3 }
        $1 == "used_cpu_sys" || $1 == "used_cpu_user" { cpu += $2 }
        END { printf "%d %d %d %.6f %d\n", calls, usec, all, cpu, scripts }'
}
scale_rows() { # scale_rows LABEL: the figures of the last fleet, between $before and $after
    judge 4 2 0
    lbl="one Redis, 8 processes on 4 hosts at 4, short statements, $1"
    read -r b_calls b_usec b_all b_cpu b_scripts <<EOF
$before
EOF
    read -r a_calls a_usec a_all a_cpu a_scripts <<EOF
$after
EOF
    row "$lbl: statements (grants)/s" "$rate"
    # Every grant Redis makes is a script call (an acquire granted at once, or a release or
    # cancel that grants the head), and so is every release that reaches it: 2 per statement when
    # every permit goes through Redis; the rest passed on the host or in the process without
    # Redis. (Not the pool's "grants" counter: renewals add the grants made without Redis to it.)
    row "$lbl: Redis script calls per statement (EVALSHA: 2 when every permit goes through Redis)" "$(awk -v c=$((a_scripts - b_scripts)) -v t="$total" 'BEGIN { printf "%.3f", (t ? c / t : 0) }')"
    row "$lbl: Redis commands per statement" "$(awk -v c=$((a_calls - b_calls)) -v t="$total" 'BEGIN { printf "%.3f", (t ? c / t : 0) }')"
    cpu_us=$(awk -v c="$(awk -v a="$a_cpu" -v b="$b_cpu" 'BEGIN { print (a - b) * 1e6 }')" -v t="$total" 'BEGIN { printf "%.1f", (t ? c / t : 0) }')
    row "$lbl: Redis CPU µs per statement (INFO cpu)" "$cpu_us"
    row "$lbl: Redis command time µs per statement (INFO commandstats: wall clock, more under load)" "$(awk -v u=$((a_usec - b_usec)) -v t="$total" 'BEGIN { printf "%.1f", (t ? u / t : 0) }')"
    row "$lbl: grants/s per Redis core (1e6 / CPU µs per statement)" "$(awk -v c="$cpu_us" 'BEGIN { if (c > 0) printf "%.0f", 1e6 / c; else print "no Redis CPU measured" }')"
    row "$lbl: most statements at once at the server" "$most"
    echo "rtt_fleet.sh: $lbl: $total statements, $((a_calls - b_calls)) client commands, $((a_all - b_all)) commands in all (scripts' inner ones too)" >&2
    [ "${most:-99}" -le $LIMIT ] || fail "$lbl: $most statements at once at the server, above the limit of $LIMIT"
}
want 2 && for mode in defaults kept; do
    if [ $mode = kept ]; then set -- DBTHROTTLE_CACHE_PERMITS=on; else set -- DBTHROTTLE_CACHE_PERMITS=off; fi
    before=$(redis_stats)
    fleet_start "scale-$mode" 4 2 0 lib "$@"
    fleet_wait
    after=$(redis_stats)
    if [ $mode = kept ]; then scale_rows "kept permits (the default)"; else scale_rows "uncached"; fi
done

# ---- 3. Redis connections per host ---------------------------------------------------------
# One host (one share directory), N processes running 5 ms statements at 4 for 3 s: Redis' CLIENT
# LIST counts its clients every 200 ms while they run (this script's own connection left out); the
# most, less those before, is the host's connections (a process' connections close when it ends,
# so none of an earlier run is counted). The kernel's socket table, by process, says the same
# from the clients' side (stderr). Then the same with one relay per host (DBTHROTTLE_HOST_RELAY=on:
# one process speaks to Redis for the others).
redis_clients() { rdc client list | grep -vc 'cmd=client'; }
alive() { for al_p in $fleet_pids; do kill -0 "$al_p" 2>/dev/null && return 0; done; return 1; }
want 3 && for relay in off on; do for nproc in 1 4 16; do
    base=$(redis_clients)
    F_SECONDS=3 fleet_start "conns$nproc$relay" 1 "$nproc" 5 lib DBTHROTTLE_HOST_RELAY=$relay
    peak=0 by_ss=0
    while alive; do
        c=$(redis_clients)
        [ "$c" -gt "$peak" ] && peak=$c
        if [ -n "$redis_port" ]; then
            c=$(ss -Htnp state established "( dport = :$redis_port )" 2>/dev/null |
                grep -Ec "pid=($fleet_pat),")
            [ "$c" -gt "$by_ss" ] && by_ss=$c
        fi
        sleep 0.2
    done
    fleet_wait
    with=$([ "$relay" = on ] && echo ", one relay" || echo "")
    row "Redis connections of one host running $nproc process(es) at 4$with (CLIENT LIST)" "$((peak - base))"
    echo "rtt_fleet.sh: $nproc processes$with: $((peak - base)) Redis connections by CLIENT LIST ($base before), $by_ss by the processes' sockets" >&2
    [ "${most:-99}" -le $LIMIT ] || fail "conns$nproc$relay: $most statements at once at the server, above the limit of $LIMIT"
done; done

if [ -n "$failures" ]; then
    row "**rtt_fleet FAILED**" "$failures"
    exit 1
fi
exit 0
