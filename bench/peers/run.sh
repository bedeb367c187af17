#!/bin/sh
# run.sh - `make bench-peers`: dbthrottle's semaphore beside its peers, same parameters, one run.
# Installs what it needs outside the repo (npm's redis-semaphore and ioredis in
# ${XDG_CACHE_HOME:-~/.cache}/dbthrottle-bench; Debian's python3-redis, zookeeper,
# libcurator-recipes-java and a JDK), starts a throwaway redis-server for the semaphores, another
# for the independent holder counter, and a ZooKeeper for Curator, and for each implementation and
# scenario runs N worker processes with the same loop (acquire, count, hold, uncount, release;
# see dbt_worker.c), then prints one table: cycles/s, utilization of the ideal, wait p50/p99/max,
# Jain's fairness index over the workers, Redis commands per grant, most holders seen at once.
# dbthrottle also runs two rows of its own: the handover between processes of one host (limit 1,
# 4 processes: each release matched with the next grant in another process, CLOCK_MONOTONIC in
# both) beside the Redis RTT, and two simulated hosts (two DBTHROTTLE_SHARE_DIRs) x 8 processes.
# Each target of issue 19 is printed beside its ratio.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
here=$top/bench/peers
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dbthrottle-bench
SECONDS_PER_RUN=${PEERS_SECONDS:-6}
work=$(mktemp -d /tmp/dbt-peers-XXXXXX)
cleanup() {
    for p in ${rpid:-} ${cpid:-} ${zpid:-}; do { kill "$p" && wait "$p"; } 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# ---- peers ---------------------------------------------------------------------------------
have_rs=
if command -v node >/dev/null && command -v npm >/dev/null; then
    mkdir -p "$cache/node"
    if [ ! -d "$cache/node/node_modules/redis-semaphore" ] || [ ! -d "$cache/node/node_modules/ioredis" ]; then
        (cd "$cache/node" && npm install --no-audit --no-fund --silent redis-semaphore ioredis >/dev/null 2>&1) || true
    fi
    [ -d "$cache/node/node_modules/redis-semaphore" ] && have_rs=1
fi
[ -n "$have_rs" ] || echo "# npm's redis-semaphore could not be installed: its rows are left out"

# The "Redis in Action" fair semaphore is written in Python against Debian's python3-redis.
have_ria=
sh "$top/tools/install-deps.sh" python3-redis >/dev/null 2>&1 || true
/usr/bin/python3 -c 'import redis' 2>/dev/null && have_ria=1
[ -n "$have_ria" ] || echo "# python3-redis is missing: the Redis in Action rows are left out"

# Curator's InterProcessSemaphoreV2 on ZooKeeper: Debian's zookeeper and libcurator-recipes-java,
# a JDK to compile the worker. PEERS_NO_CURATOR=1 leaves it out.
have_cur=
if [ -z "${PEERS_NO_CURATOR:-}" ]; then
    sh "$top/tools/install-deps.sh" zookeeper libcurator-recipes-java default-jdk-headless >/dev/null 2>&1 || true
    cp_jars=
    for j in curator-client curator-framework curator-recipes zookeeper zookeeper-jute guava \
        slf4j-api slf4j-nop netty-buffer netty-codec netty-common netty-handler netty-resolver \
        netty-transport metrics-core snappy-java commons-io commons-cli; do
        if [ -f "/usr/share/java/$j.jar" ]; then cp_jars="$cp_jars${cp_jars:+:}/usr/share/java/$j.jar"; fi
    done
    if command -v javac >/dev/null && [ -n "$cp_jars" ] &&
        mkdir -p "$work/java" && javac -cp "$cp_jars" -d "$work/java" "$here/CuratorWorker.java" 2>"$work/javac.err"; then
        have_cur=1
    else
        echo "# Curator could not be set up ($(head -c 200 "$work/javac.err" 2>/dev/null)): its rows are left out"
    fi
fi

port() { echo $(( ( $(od -An -N2 -tu2 /dev/urandom) % 30000 ) + 20000 )); }
rport=$(port)
cport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/r.log" &
rpid=$!
redis-server --port "$cport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/c.log" &
cpid=$!
until redis-cli -p "$rport" ping >/dev/null 2>&1 && redis-cli -p "$cport" ping >/dev/null 2>&1; do sleep 0.05; done
if [ -n "$have_cur" ]; then
    zport=$(port)
    mkdir -p "$work/zk"
    printf 'tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n' \
        "$work/zk" "$zport" >"$work/zoo.cfg"
    java -cp "$cp_jars" org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" >"$work/zk.log" 2>&1 &
    zpid=$!
    i=0
    until echo ruok | timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$zport; cat >&3; cat <&3" 2>/dev/null | grep -q imok || [ $i -ge 100 ]; do
        sleep 0.1; i=$((i + 1))
    done
    [ $i -ge 100 ] && { echo "# ZooKeeper did not start: Curator's rows are left out"; have_cur=; }
fi

rtt=$(/usr/bin/python3 - "$rport" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
v = []
for i in range(3000):
    t = time.perf_counter(); s.sendall(b"PING\r\n"); s.recv(64); v.append(time.perf_counter() - t)
v.sort(); print("%.1f" % (v[len(v) // 2] * 1e6))
PY
)

# Whether the library knows the host-sharing settings (an unknown DBTHROTTLE_* name is a
# configuration error, so they are set only then); without, the two "hosts" are one, as today.
share_known=
grep -q DBTHROTTLE_SHARE_DIR "$top/build/bench/dbt-peer-worker" && share_known=1

# Commands dbthrottle's clients sent to the semaphores' Redis so far, by INFO commandstats (which
# also counts what scripts call inside Redis: only the commands a client sends are summed).
client_cmds() {
    redis-cli -p "$rport" info commandstats | tr -d '\r' | awk -F'[:=,]' '
        $1 ~ /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|blpop|brpop|blmpop|blmove|brpoplpush|hello|select|ping|auth|script\|[a-z]+|client\|[a-z]+)$/ { n += $3 }
        END { print n + 0 }'
}
# Grants so far: the counter's count-up calls, one per grant whatever the implementation.
grants() { redis-cli -p "$cport" info commandstats | sed -n 's/^cmdstat_eval\(sha\)\{0,1\}:calls=\([0-9]*\),.*/\2/p' | tr -d '\r' | awk '{ n += $1 } END { print n + 0 }'; }
now_ms() { /usr/bin/python3 -c 'import time; print(int(time.time() * 1000))'; }

# run IMPL LIMIT WORKERS HOLD_MS [HOSTS [EVENTS [ENV...]]]: one scenario; appends a result line
# to $work/results. HOSTS > 1 (dbthrottle): worker i is on simulated host i % HOSTS (its own
# DBTHROTTLE_SHARE_DIR); EVENTS=1: the workers log their cycles for the handover; ENV: settings.
run() {
    impl=$1 limit=$2 workers=$3 hold=$4 hosts=${5:-1} events=${6:-}
    shift 4
    shift $(($# < 2 ? $# : 2))
    label=$impl
    [ "$hosts" -eq 1 ] || label="$impl $hosts hosts"
    [ $# -eq 0 ] || label="$label $*"
    redis-cli -p "$rport" flushall >/dev/null
    redis-cli -p "$cport" flushall >/dev/null
    t0=$(now_ms)
    # every worker connected and the queue formed (16 JVMs take seconds to start on 2 cores)
    warm=1500
    [ "$impl" = curator ] && warm=10000
    # 16 node processes took over 7 s to start on the loaded 2-core VM: rows of 0 cycles
    [ "$impl" = redis-semaphore ] && warm=4000
    start=$((t0 + warm))
    end=$((start + SECONDS_PER_RUN * 1000))
    rm -rf "$work"/w.* "$work"/ev.* "$work"/host.*
    i=0
    pids=
    while [ $i -lt "$workers" ]; do
        h=$((i % hosts))
        out=$work/w.$h.$i
        case $impl in
        dbthrottle)
            hostenv=
            if [ "$hosts" -gt 1 ] && [ -n "$share_known" ]; then
                mkdir -p "$work/host.$h"
                hostenv=DBTHROTTLE_SHARE_DIR=$work/host.$h
            fi
            env $hostenv ${events:+DBT_PEER_EVENTS=$work/ev.$i} "$@" \
                "$top/build/bench/dbt-peer-worker" "$rport" "$cport" "$limit" "$hold" "$start" "$end" "$out" &
            ;;
        curator) java -cp "$work/java:$cp_jars" CuratorWorker "127.0.0.1:$zport" "$cport" "$limit" "$hold" "$start" "$end" "$out" & ;;
        ria-no-lock) /usr/bin/python3 "$here/ria_worker.py" "$rport" "$cport" "$limit" "$hold" "$start" "$end" "$out" & ;;
        redis-semaphore) NODE_PATH=$cache/node/node_modules node "$here/redis_semaphore_worker.js" "$rport" "$cport" "$limit" "$hold" "$start" "$end" "$out" & ;;
        esac
        pids="$pids $!"
        i=$((i + 1))
    done
    sleep "$(echo "$start $(now_ms)" | awk '{ d = ($1 - $2) / 1000; printf "%.3f\n", (d > 0 ? d : 0) }')"
    # The window's commands by INFO commandstats (dbthrottle's clients only), over its grants.
    c_start=$(client_cmds)
    g_start=$(grants)
    # Commands the clients send per grant: one second of MONITOR in the middle of the run,
    # without what scripts run inside Redis ("[db lua]"), over the grants of that second.
    sleep "$(echo "$SECONDS_PER_RUN" | awk '{ printf "%.3f\n", $1 / 2 - 0.5 }')"
    g0=$(grants)
    timeout 1 redis-cli -p "$rport" monitor >"$work/monitor" 2>/dev/null || true
    g1=$(grants)
    sent=$(grep -c '^[0-9.]* \[[0-9]* [0-9]' "$work/monitor" || true)
    sleep "$(echo "$end $(now_ms)" | awk '{ d = ($1 - $2) / 1000 - 0.05; printf "%.3f\n", (d > 0 ? d : 0) }')"
    c_end=$(client_cmds)
    g_end=$(grants)
    for p in $pids; do wait "$p" || true; done
    most=$(redis-cli -p "$cport" get most)
    cs=nan
    [ "$impl" != dbthrottle ] || cs="$((c_end - c_start))/$((g_end - g_start))"
    /usr/bin/python3 - "$label" "$limit" "$workers" "$hold" "$SECONDS_PER_RUN" "$sent/$((g1 - g0))" "${most:-0}" "$rtt" \
        "$hosts" "$cs" "$work" "$work"/w.* >>"$work/results" <<'PY'
import glob, os, sys
impl, limit, workers, hold, secs, cmds, most, rtt, hosts, cs, work = sys.argv[1:12]
sent, sampled = (int(x) for x in cmds.split("/"))
limit, workers, hold, secs, most = int(limit), int(workers), float(hold), float(secs), int(most or 0)
per, waits, held, per_host = [], [], 0.0, {}
for f in sys.argv[12:]:
    lines = open(f).read().split()
    per.append(int(lines[1])); held += float(lines[3]); waits += [float(x) for x in lines[4:]]
    h = os.path.basename(f).split(".")[1]
    per_host[h] = per_host.get(h, 0) + int(lines[1])
total = sum(per)
waits.sort()
pct = lambda p: waits[min(len(waits) - 1, int(p / 100 * len(waits)))] if waits else float("nan")
rate = total / secs
mean_hold = held / total if total else float("nan")
ideal = limit * 1000 / mean_hold if total else float("nan")
jain = total * total / (len(per) * sum(x * x for x in per)) if total else float("nan")
cpg = "%.2f" % (sent / sampled) if sampled and impl != "curator" else "zk" if impl == "curator" else "nan"
fifo = max(0, workers - limit) / limit * mean_hold  # each waits for (N - L) / L holds, round robin
# Jain's index over the simulated hosts' throughputs (1.000 with one host).
hv = list(per_host.values())
jain_hosts = sum(hv) ** 2 / (len(hv) * sum(x * x for x in hv)) if total else float("nan")
# Commands per grant by INFO commandstats over the whole window (dbthrottle only).
try:
    c, g = (int(x) for x in cs.split("/")); cs_cpg = "%.2f" % (c / g)
except Exception:
    cs_cpg = "nan"
# The handover (limit 1): the cycles of every process in grant order; where the next grant is in
# another process that was already waiting when this one released, release -> grant is one
# handover between processes. A grant before the release would be two holders at once.
cyc = []
for f in glob.glob(os.path.join(work, "ev.*")):
    for line in open(f):
        a, g, r = (float(x) for x in line.split())
        cyc.append((g, a, r, f))
cyc.sort()
ho, overlap = [], 0
for prev, cur in zip(cyc, cyc[1:]):
    if cur[3] == prev[3] or cur[1] >= prev[2]:
        continue
    if cur[0] < prev[2]:
        overlap += 1
    else:
        ho.append(cur[0] - prev[2])
ho.sort()
hp = lambda p: ho[min(len(ho) - 1, int(p / 100 * len(ho)))] if ho else float("nan")
print(f"{impl}|{limit}|{workers}|{hold:g}|{rate:.0f}|{rate / ideal:.3f}|{pct(50):.1f}|{pct(99):.1f}|{waits[-1] if waits else 0:.1f}|{fifo:.1f}|{jain:.3f}|{cpg}|{most}|{hosts}|{jain_hosts:.3f}|{cs_cpg}|{hp(50):.1f}|{hp(99):.1f}|{len(ho)}|{overlap}")
PY
}

impls=dbthrottle
[ -n "$have_rs" ] && impls="$impls redis-semaphore"
[ -n "$have_ria" ] && impls="$impls ria-no-lock"
[ -n "$have_cur" ] && impls="$impls curator"
for scenario in "4 16 0" "4 16 5" "4 16 50" "1 2 0"; do
    for impl in $impls; do
        # shellcheck disable=SC2086
        run $impl $scenario
    done
done
# dbthrottle's own rows: the handover between processes (with sharing off too, once the library
# knows the setting: the same run's "today"), and two simulated hosts of 8 processes each.
run dbthrottle 1 4 1 1 1
[ -z "$share_known" ] || run dbthrottle 1 4 1 1 1 DBTHROTTLE_HOST_SHARE=off
run dbthrottle 4 16 5 2

echo "dbthrottle beside its peers: semaphore level (loopback Redis 7.0, RTT p50 $rtt us; ${SECONDS_PER_RUN} s per row)"
echo "hold includes the independent counter's two round trips; ideal = limit / measured mean hold;"
echo "FIFO wait = (workers - limit) / limit x mean hold, what a fair queue gives each waiter"
[ -n "$share_known" ] || echo "# the library does not know DBTHROTTLE_SHARE_DIR yet: the two \"hosts\" are one, as before host sharing"
printf "%-40s %5s %7s %6s %9s %6s %9s %9s %9s %9s %6s %8s %5s\n" impl limit workers hold cycles/s util \
    "wait p50" "wait p99" "wait max" "FIFO" Jain "cmd/grant" most
while IFS='|' read -r impl limit workers hold rate util p50 p99 max fifo jain cpg most rest; do
    printf "%-40s %5s %7s %4sms %9s %6s %7sms %7sms %7sms %7sms %6s %8s %5s\n" "$impl" "$limit" "$workers" "$hold" "$rate" \
        "$util" "$p50" "$p99" "$max" "$fifo" "$jain" "$cpg" "$most"
    [ "$rate" != 0 ] || echo "# ^ no cycle in the window: the workers started after it (a loaded machine); rerun"
done <"$work/results"
/usr/bin/python3 - "$work/results" "$rtt" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.strip().split("|")
    rows[(f[0], f[1], f[2], f[3])] = f
rtt = float(sys.argv[2])
def ratio(a, b, i):
    try: return float(a[i]) / float(b[i])
    except Exception: return float("nan")
d0, r0 = rows.get(("dbthrottle", "4", "16", "0")), rows.get(("redis-semaphore", "4", "16", "0"))
if d0 and r0:
    print(f"cycles/s at hold 0, dbthrottle / redis-semaphore: {ratio(d0, r0, 4):.1f}x (target >= 10)")
d5 = rows.get(("dbthrottle", "4", "16", "5"))
if d5:
    print(f"dbthrottle utilization at 5 ms holds: {d5[5]} (target >= 0.97)")
d50 = rows.get(("dbthrottle", "4", "16", "50"))
if d50:
    print(f"dbthrottle wait p99 at 50 ms holds / FIFO wait: {float(d50[7]) / float(d50[9]):.2f} (target <= 1.3)")
h = rows.get(("dbthrottle", "1", "4", "1"))
if h:
    print(f"handover between processes of one host: p50 {float(h[16]):.1f} us, p99 {float(h[17]):.1f} us over {h[18]} handovers"
          f" = {float(h[16]) / rtt:.2f} RTT (Redis RTT p50 {rtt:.1f} us; target p50 <= 50 us)"
          + (f"; {h[19]} grants BEFORE the release: more holders than the limit!" if h[19] != "0" else ""))
h = rows.get(("dbthrottle DBTHROTTLE_HOST_SHARE=off", "1", "4", "1"))
if h:
    print(f"  the same with DBTHROTTLE_HOST_SHARE=off: p50 {float(h[16]):.1f} us, p99 {float(h[17]):.1f} us = {float(h[16]) / rtt:.2f} RTT")
t = rows.get(("dbthrottle 2 hosts", "4", "16", "5"))
if t:
    print(f"two simulated hosts x 8 processes, limit 4, 5 ms holds: wait p99 / FIFO ideal {float(t[7]) / float(t[9]):.2f} (target <= 1.3),"
          f" Jain across hosts {t[14]} (target >= 0.99), across processes {t[10]}, Redis commands per grant {t[15]}"
          f" by INFO commandstats ({t[11]} by MONITOR; 3 before host sharing, the issue hopes for well below: but with both hosts waiting neither is sole, see docs/performance.md), most holders {t[12]} (limit 4)")
d5 = rows.get(("dbthrottle", "4", "16", "5"))
if d5:
    print(f"  one host x 16 processes, same run: Redis commands per grant {d5[15]} by INFO commandstats")
PY
