#!/bin/sh
# rtt_bench.sh - make bench-rtt: the library at real network distances, in one run. It starts a
# throwaway Redis, PostgreSQL (tools/pgtmp.sh) and PgBouncer (transaction mode, pool of 4), then,
# for loopback without any proxy and for each round trip of RTT_LIST (ms; default 0 0.2 0.5 1),
# puts a delay-proxy (bench/delay_proxy.c, half the round trip each way) in front of Redis, one in
# front of PostgreSQL, and one between the clients and PgBouncer, which reaches PostgreSQL through
# PostgreSQL's proxy (a central pooler adds a hop). Per distance, ratios measured in the same run:
#   - the round trips actually measured: Redis PING p50 over 200 pings (the proxy adds its own
#     µs: this is the figure the rest is read against, not the configured delay), and PostgreSQL's
#     as pgbench -S -c1's latency direct;
#   - pgbench -S -c1: direct tps (the better of a run before the others and one after them); the
#     the library without kept permits (DBTHROTTLE_CACHE_PERMITS=off), with them (the default)
#     and PgBouncer over direct; without and with kept permits over PgBouncer;
#   - 16 processes x pgbench -S -c1 of one host (one DBTHROTTLE_SHARE_DIR) at a limit of 4, and
#     the same 16 through PgBouncer's pool of 4, over direct -c4; ours over PgBouncer's; and 5
#     processes of one host at 4 (demand one above the limit) over direct -c4;
#   - the first waiter behind a kept permit: limit 1, a keeper with kept permits running 300
#     commands/s (pgbench -S -c1 -R 300) on one simulated host and a prober running 20/s on
#     another; (prober's latency beside the keeper - the prober's alone without kept permits, where
#     every command pays one uncontended acquire) in Redis round trips: the issue's "round trips
#     more than an uncontended acquire"; and that acquire's cost (prober alone without kept
#     permits - direct at the same 20/s) in round trips. (Alone with kept permits would keep its
#     permit between most of its commands, 50 ms apart on average, under DBTHROTTLE_CACHE_IDLE:
#     a baseline of mostly no acquire, which read as a round trip more for the first waiter.)
#     And the same keeper and prober with neither keeping: the prober waits for the keeper's
#     statements in flight there too, so (beside keeping - beside uncached) is what keeping costs;
#   - bench/rtt_fleet.sh's rows, if that file exists (4 hosts x 4 processes, the scale of one
#     Redis, connections per host), once per proxied distance, under the distance's heading.
# Every throttled run has DBTHROTTLE_ON_REDIS_ERROR=closed and a pool of its own; a pgbench that
# fails, or a proxy found dead at the end of a distance, fails the whole run loudly at once (a dead
# proxy would turn the figures into an unthrottled or unproxied run's); bench/rtt_fleet.sh failing
# fails the run at its end, its rows (which say why) printed. The proxies run at nice -10 when
# root: the network they stand for does not wait for the clients' CPU. BENCH_SECONDS (default 4) sets
# each figure's length: about 6 minutes with the defaults on a quiet machine.
# The environments built by throttled are split into words on purpose (no path here has a space).
# shellcheck disable=SC2046
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$top/build/libdbthrottle.so
proxy=$top/build/bench/delay-proxy
rttcmd=$top/build/bench/cache-burst
fleet=$top/bench/rtt_fleet.sh
T=${BENCH_SECONDS:-4}
RTT_LIST=${RTT_LIST:-0 0.2 0.5 1}
for f in "$lib" "$proxy" "$rttcmd"; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "rtt_bench.sh: $f is missing (make bench-rtt builds it)" >&2; exit 2; }
done
for r in $RTT_LIST; do
    echo "$r" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || { echo "rtt_bench.sh: RTT_LIST: not a round trip in ms: '$r'" >&2; exit 2; }
done
echo "$T" | grep -Eq '^[1-9][0-9]*$' || { echo "rtt_bench.sh: BENCH_SECONDS: not a whole number of seconds: '$T'" >&2; exit 2; }

work=$(mktemp -d /tmp/dbt-rtt-bench-XXXXXX)
chmod 755 "$work"
proxies=
cleanup() {
    for p in $proxies ${redis_pid:-} ${bouncer_pid:-}; do kill "$p" 2>/dev/null || true; done
    sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
die() {
    echo "rtt_bench.sh: FAILED: $*" >&2
    exit 1
}
port() { echo $(($(od -An -N2 -tu2 /dev/urandom) % 30000 + 20000)); }

# ---- the servers ------------------------------------------------------------------------------
for _ in 1 2 3 4 5; do
    rport=$(port)
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/redis.log" \
        --maxclients 4000 &
    redis_pid=$!
    i=0
    until redis-cli -p "$rport" ping >/dev/null 2>&1 || [ $i -ge 100 ] || ! kill -0 "$redis_pid" 2>/dev/null; do
        i=$((i + 1))
        sleep 0.05
    done
    redis-cli -p "$rport" ping >/dev/null 2>&1 && break
    kill "$redis_pid" 2>/dev/null || true
    redis_pid=
done
[ -n "${redis_pid:-}" ] || die "redis-server did not start"
pgport=$(sh "$top/tools/pgtmp.sh" start "$work/pg")
export PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres
PGPORT=$pgport pgbench -i -q -s 1 >/dev/null 2>&1 || die "pgbench -i"

echo '"postgres" ""' >"$work/users.txt"
chmod 644 "$work/users.txt"
bport=$(port)
# bouncer_start PG_PORT: PgBouncer on $bport (transaction mode, pool 4) in front of PG_PORT.
bouncer_start() {
    cat >"$work/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$1 dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
INI
    chmod 644 "$work/pgbouncer.ini"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres "$work"
        # runuser says "Session terminated" on stderr when it is stopped.
        runuser -u postgres -- pgbouncer -q "$work/pgbouncer.ini" 2>>"$work/runuser.err" &
    else
        pgbouncer -q "$work/pgbouncer.ini" &
    fi
    bouncer_pid=$!
    i=0
    until PGPORT=$bport psql -qAtX -c "select 1" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 200 ] && alive "$bouncer_pid" || die "PgBouncer did not start (port $bport): $(tail -3 "$work/pgbouncer.log" 2>/dev/null)"
        sleep 0.05
    done
}
bouncer_stop() {
    kill "$bouncer_pid" 2>/dev/null || true
    wait "$bouncer_pid" 2>/dev/null || true
    bouncer_pid=
}
# alive PID: running (a child that died is a zombie until waited for: kill -0 would say yes).
alive() {
    al_s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [ -n "$al_s" ] && [ "${al_s#Z}" = "$al_s" ]
}
proxy_nice=
[ "$(id -u)" -ne 0 ] || proxy_nice="nice -n -10"
# proxy_start TARGET_PORT ONE_WAY_US: a delay-proxy in front of TARGET_PORT; its port in $pp,
# its pid added to $dist_proxies.
proxy_start() {
    ps_out=$work/proxy.$1.$2.out
    # The network it stands for is not starved by the clients' CPU: ahead of them when allowed.
    $proxy_nice "$proxy" 0 127.0.0.1 "$1" "$2" >"$ps_out" 2>"$work/proxy.$1.$2.err" &
    ps_pid=$!
    proxies="$proxies $ps_pid"
    dist_proxies="$dist_proxies $ps_pid"
    i=0
    until [ -s "$ps_out" ]; do
        i=$((i + 1))
        [ $i -lt 200 ] && alive "$ps_pid" || die "delay-proxy did not start: $(cat "$work/proxy.$1.$2.err")"
        sleep 0.02
    done
    pp=$(cat "$ps_out")
}

# ---- the measurements ----------------------------------------------------------------------------
# bench NAME [ENV=VALUE...] -- PGBENCH ARGS: pgbench -n -S ARGS with ENV, its output in $work/NAME.out;
# a run that fails (a client aborted: Redis unreachable in closed mode, a proxy gone) fails all.
bench() {
    b_name=$1
    shift
    b_env=
    while [ "$1" != -- ]; do
        b_env="$b_env $1"
        shift
    done
    shift
    # shellcheck disable=SC2086
    if ! env $b_env pgbench -n -S "$@" >"$work/$b_name.out" 2>&1; then
        sed "s/^/$b_name: /" "$work/$b_name.out" | tail -20 >&2
        die "$b_name: pgbench $* failed"
    fi
}
tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/$1.out" | head -1; }
# latency of a -R run: pgbench counts it from the scheduled start; the schedule's lag is taken off.
lat() {
    awk '/^latency average = / { l = $4 } /^rate limit schedule lag: avg / { g = $6 }
         END { printf "%.3f", l - g }' "$work/$1.out"
}
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# throttled POOL HOST: the environment of a throttled run: a pool of its own, closed on Redis
# errors, on the simulated host HOST (a DBTHROTTLE_SHARE_DIR of its own).
throttled() {
    mkdir -p "$work/share/$2"
    echo "LD_PRELOAD=$lib DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$redis_at DBTHROTTLE_POOL=$1" \
        "DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_SHARE_DIR=$work/share/$2"
}
# sixteen NAME ENV... -- ARGS: 16 pgbench -c1 processes at once (S_PROCS of them when set); the
# sum of their tps.
sixteen() {
    s_name=$1
    shift
    s_pids=
    for s_i in $(seq 1 "${S_PROCS:-16}"); do
        bench "$s_name.$s_i" "$@" &
        s_pids="$s_pids $!"
    done
    s_rc=0
    for s_p in $s_pids; do wait "$s_p" || s_rc=1; done
    [ $s_rc -eq 0 ] || die "$s_name: a process failed"
    for s_i in $(seq 1 "${S_PROCS:-16}"); do tps "$s_name.$s_i"; done | awk '{ s += $1 } END { printf "%.0f", s }'
}


n=0
# distance LABEL ONE_WAY_US|none: every figure of one distance; a row of the table in $work/rows,
# the fleet's rows in $work/fleet.N.
distance() {
    d_label=$1
    n=$((n + 1))
    dist_proxies=
    mkdir -p "$work/share" "$work/fleetwork.$n"
    if [ "$2" = none ]; then
        redis_at=$rport
        pg_at=$pgport
        bouncer_start "$pgport"
        bouncer_at=$bport
    else
        proxy_start "$rport" "$2"
        redis_at=$pp
        proxy_start "$pgport" "$2"
        pg_at=$pp
        bouncer_start "$pg_at"
        proxy_start "$bport" "$2"
        bouncer_at=$pp
    fi
    echo "# $d_label: Redis at $redis_at, PostgreSQL at $pg_at, PgBouncer at $bouncer_at" \
        "($(($(date +%s) - t_start)) s into the run)" >&2
    export PGPORT=$pg_at
    rtt_us=$("$rttcmd" rtt "$redis_at" 200 | sed -n 's/^rtt_us=//p')
    [ -n "$rtt_us" ] || die "$d_label: the Redis round trip could not be measured"
    t="-c 1 -j 1 -T $T"
    bench "d1.$n" -- $t
    bench "t1.$n" $(throttled "t1.$n" t1.$n) DBTHROTTLE_MAX_QUERIES=64 DBTHROTTLE_CACHE_PERMITS=off -- $t
    bench "k1.$n" $(throttled "k1.$n" k1.$n) DBTHROTTLE_MAX_QUERIES=64 DBTHROTTLE_CACHE_PERMITS=on -- $t
    bench "p1.$n" PGPORT=$bouncer_at -- $t
    # Direct again after the others: a stall of the machine during one direct run (a load of 16
    # on 2 cores made one 76 tps against 700-1600 around it) would inflate every ratio; the
    # better of the two is what the machine could do then.
    bench "d1b.$n" -- $t
    if awk -v a="$(tps "d1b.$n")" -v b="$(tps "d1.$n")" 'BEGIN { exit !(a > b) }'; then
        mv "$work/d1b.$n.out" "$work/d1.$n.out"
    fi
    bench "d4.$n" -- -c 4 -j 4 -T $T
    s16=$(sixteen "s16.$n" $(throttled "s16.$n" s16.$n) DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_WAIT_TIMEOUT=60s -- $t)
    b16=$(sixteen "b16.$n" PGPORT=$bouncer_at -- $t)
    s5=$(S_PROCS=5 sixteen "s5.$n" $(throttled "s5.$n" s5.$n) DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_WAIT_TIMEOUT=60s -- $t)
    # The first waiter: the prober alone (without kept permits: each of its commands pays one
    # uncontended acquire) and direct at its schedule, then beside the keeper (which takes the one
    # permit first and keeps it: its 300/s leave it idle most of the time, never free long).
    kp="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_WAIT_TIMEOUT=60s"
    bench "dR.$n" -- -c 1 -j 1 -R 20 -T $T
    bench "alone.$n" $(throttled "fa.$n" prober.$n) $kp DBTHROTTLE_CACHE_PERMITS=off -- -c 1 -j 1 -R 20 -T $T
    bench "keeper.$n" $(throttled "fb.$n" keeper.$n) $kp -- -c 1 -j 1 -R 300 -T $((T + 1)) &
    k_pid=$!
    sleep 0.5
    bench "beside.$n" $(throttled "fb.$n" prober2.$n) $kp -- -c 1 -j 1 -R 20 -T $T
    wait "$k_pid" || die "$d_label: the keeper failed"
    # The same two without kept permits: the prober waits for the keeper's statements in flight
    # there too (an unavoidable wait, the longer the farther: at 1 ms the keeper is busy about
    # half the time), so the difference is what keeping itself costs the first waiter.
    bench "keeper0.$n" $(throttled "fc.$n" keeper0.$n) $kp DBTHROTTLE_CACHE_PERMITS=off -- -c 1 -j 1 -R 300 -T $((T + 1)) &
    k_pid=$!
    sleep 0.5
    bench "beside0.$n" $(throttled "fc.$n" prober3.$n) $kp DBTHROTTLE_CACHE_PERMITS=off -- -c 1 -j 1 -R 20 -T $T
    wait "$k_pid" || die "$d_label: the uncached keeper failed"
    d1=$(tps "d1.$n")
    dlat=$(awk '/^latency average = / { print $4 }' "$work/d1.$n.out")
    t1=$(tps "t1.$n")
    k1=$(tps "k1.$n")
    p1=$(tps "p1.$n")
    d4=$(tps "d4.$n")
    rtt_ms=$(awk -v u="$rtt_us" 'BEGIN { printf "%.3f", u / 1000 }')
    fw=$(awk -v b="$(lat "beside.$n")" -v a="$(lat "alone.$n")" -v r="$rtt_ms" 'BEGIN { printf "%.1f", (b - a) / r }')
    kc=$(awk -v b="$(lat "beside.$n")" -v a="$(lat "beside0.$n")" -v r="$rtt_ms" 'BEGIN { printf "%.1f", (b - a) / r }')
    ua=$(awk -v a="$(lat "alone.$n")" -v d="$(lat "dR.$n")" -v r="$rtt_ms" 'BEGIN { printf "%.1f", (a - d) / r }')
    printf '| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s → %s ms) | %s (%s → %s ms) | %s |\n' \
        "$d_label" "$rtt_ms" "$dlat" "$d1" "$(div "$t1" "$d1")" "$(div "$k1" "$d1")" \
        "$(div "$p1" "$d1")" "$(div "$t1" "$p1")" "$(div "$k1" "$p1")" \
        "$(div "$s16" "$d4")" "$(div "$b16" "$d4")" "$(div "$s16" "$b16")" "$(div "$s5" "$d4")" \
        "$fw" "$(lat "alone.$n")" "$(lat "beside.$n")" \
        "$kc" "$(lat "beside0.$n")" "$(lat "beside.$n")" "$ua" >>"$work/rows"
    # The fleet's workloads (another script's), at this distance, through the same proxies.
    if [ -f "$fleet" ] && [ "$2" != none ]; then
        if ! BENCH_LIB=$lib BENCH_REDIS_URL=redis://127.0.0.1:$redis_at BENCH_REDIS_DIRECT_PORT=$rport \
            BENCH_PGHOST=127.0.0.1 BENCH_PGPORT=$pg_at BENCH_PG_DIRECT_PORT=$pgport \
            BENCH_BOUNCER_PORT=$bouncer_at BENCH_RTT_MS=$rtt_ms BENCH_SECONDS=$T \
            BENCH_WORK=$work/fleetwork.$n sh "$fleet" >"$work/fleet.$n"; then
            # Its rows say what failed; the other distances are still measured, the run fails.
            echo "rtt_bench.sh: FAILED: $d_label: bench/rtt_fleet.sh failed (its rows below say why)" >&2
            fleet_failed="$fleet_failed${fleet_failed:+, }$d_label"
        fi
        echo "$d_label (Redis PING $rtt_ms ms)" >"$work/fleet.$n.label"
    fi
    for p in $dist_proxies; do
        alive "$p" || die "$d_label: a delay-proxy (pid $p) died during the run: $(cat "$work"/proxy.*.err)"
    done
    for p in $dist_proxies; do
        kill "$p"
        wait "$p" || die "$d_label: a delay-proxy (pid $p) did not end cleanly"
    done
    bouncer_stop
    rm -rf "$work/share"
}

fleet_failed=
load0=$(uptime)
t_start=$(date +%s)
distance "loopback, no proxy" none
for r in $RTT_LIST; do
    distance "$r ms" "$(awk -v r="$r" 'BEGIN { printf "%d", r * 1000 / 2 }')"
done

echo "## dbthrottle at real distances (make bench-rtt; one run, $T s per figure)"
echo
echo "Load (uptime) at the start: ${load0#*load average: }; at the end:" \
    "$(uptime | sed 's/.*load average: //'); $(($(date +%s) - t_start)) s in all."
echo "Each distance: a delay-proxy holds every chunk half the round trip each way in front of Redis,"
echo "PostgreSQL and PgBouncer (itself reaching PostgreSQL through the delay). Ratios are of tps."
echo
echo "| distance (configured round trip) | Redis PING p50, ms | PG -c1 latency direct, ms | direct -c1 tps | uncached / direct | kept / direct | PgBouncer / direct | uncached / PgBouncer | kept / PgBouncer | 16 proc at 4 / direct -c4 | 16 via PgBouncer / direct -c4 | ours / PgBouncer (16) | 5 proc at 4 / direct -c4 | first waiter behind a kept permit: RTT more than an uncontended acquire (prober alone, uncached → beside the keeper) | what keeping costs the first waiter, RTT (beside the same keeper, both uncached → both keeping) | uncontended acquire (prober alone uncached − direct, both at 20/s), RTT |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
cat "$work/rows"
for f in "$work"/fleet.*.label; do
    [ -f "$f" ] || continue
    echo
    echo "### Fleet at $(cat "$f")"
    echo
    out=${f%.label}
    if ! grep -Eq '^\|[-:| ]+\|$' "$out"; then
        echo "| figure | value |"
        echo "|---|---|"
    fi
    cat "$out"
done
[ -z "$fleet_failed" ] || die "bench/rtt_fleet.sh failed at: $fleet_failed"
