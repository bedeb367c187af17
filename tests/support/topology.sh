# topology.sh - Redis topologies of several servers for the tests (sourced after lib.sh, whose
# free_port it uses): every server on a free loopback port, its files and pid file in a directory
# the test names, stopped by pid file (never by name: other suites' servers run on this machine).

# ---- Sentinel: a primary, two replicas, three sentinels -----------------------------------------
# topology_sentinel_start DIR: starts them and waits (bounded) until every sentinel names the
# primary as master "mymaster" and knows both replicas and the other two sentinels. Exports
#   topo_primary_port, topo_replica_ports ("P1 P2"), topo_sentinel_ports ("S1 S2 S3"),
#   topo_sentinels ("127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3", the list a redis-sentinel:// URL
#   takes), topo_master_name (mymaster).
# Optional, set before the call: TOPO_DATA_PASS (requirepass and masterauth of the data servers,
# and the sentinels' auth-pass), TOPO_SENTINEL_PASS (the sentinels' own requirepass, and their
# sentinel-pass to each other), TOPO_REPLICA_PRIORITIES (the two replicas' replica-priority, in
# order, from their start: "100 0" makes the first replica the only one Sentinel may promote, for a
# case that needs to know which; default 100 each), TOPO_DOWN_AFTER_MS (the sentinels'
# down-after-milliseconds, default 1000: the failover cases' leases are sized to outlast the
# detection it gives). Returns non-zero (with a line saying what)
# when it did not come up.
# topo_cli PORT ARGS...: redis-cli to a data server (with TOPO_DATA_PASS); topo_scli PORT ARGS...:
# to a sentinel (with TOPO_SENTINEL_PASS).
topo_cli() { tc_p=$1; shift; REDISCLI_AUTH=${TOPO_DATA_PASS:-} redis-cli -p "$tc_p" "$@" 2>/dev/null; }
topo_scli() { tc_p=$1; shift; REDISCLI_AUTH=${TOPO_SENTINEL_PASS:-} redis-cli -p "$tc_p" "$@" 2>/dev/null; }

# topo_spawn DIR NAME PING_CMD PROGRAM ARGS...: starts one server in the background, its pid in
# DIR/NAME.pid, and waits until PING_CMD (given the port in $tp_port) answers PONG. The port is
# chosen here (free_port) and tried again on another when the server loses the race for it.
topo_spawn() {
    ts_dir=$1 ts_name=$2 ts_ping=$3
    shift 3
    for ts_try in 1 2 3 4 5; do
        tp_port=$(free_port)
        $(redis_nice) "$@" --port "$tp_port" >"$ts_dir/$ts_name.out" 2>&1 &
        echo $! >"$ts_dir/$ts_name.pid"
        echo "$tp_port" >"$ts_dir/$ts_name.port"
        ts_i=0
        while [ $ts_i -lt 200 ]; do
            [ "$($ts_ping "$tp_port" ping)" = PONG ] && return 0
            kill -0 "$(cat "$ts_dir/$ts_name.pid")" 2>/dev/null || break
            ts_i=$((ts_i + 1))
            sleep 0.05
        done
        kill -9 "$(cat "$ts_dir/$ts_name.pid")" 2>/dev/null
        wait "$(cat "$ts_dir/$ts_name.pid")" 2>/dev/null
        rm -f "$ts_dir/$ts_name.pid"
    done
    echo "topology: $ts_name did not start (see $ts_dir/$ts_name.out)"
    return 1
}

topology_sentinel_start() {
    td=$1
    mkdir -p "$td"
    topo_master_name=mymaster
    ts_pass=
    [ -n "${TOPO_DATA_PASS:-}" ] && ts_pass="--requirepass $TOPO_DATA_PASS --masterauth $TOPO_DATA_PASS"
    mkdir -p "$td/primary"
    # shellcheck disable=SC2086 # $ts_pass is two options or none
    topo_spawn "$td" primary topo_cli redis-server --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$td/primary" --enable-debug-command yes $ts_pass || return 1
    topo_primary_port=$tp_port
    topo_replica_ports=
    for r in 1 2; do
        mkdir -p "$td/replica$r"
        ts_prio=$(echo "${TOPO_REPLICA_PRIORITIES:-}" | awk -v r=$r '{ print ($r == "" ? 100 : $r) }')
        # shellcheck disable=SC2086
        topo_spawn "$td" "replica$r" topo_cli redis-server --bind 127.0.0.1 --save "" \
            --appendonly no --dir "$td/replica$r" --enable-debug-command yes \
            --replica-priority "$ts_prio" --replicaof 127.0.0.1 "$topo_primary_port" $ts_pass || return 1
        topo_replica_ports="$topo_replica_ports${topo_replica_ports:+ }$tp_port"
    done
    topo_sentinel_ports=
    topo_sentinels=
    for s in 1 2 3; do
        mkdir -p "$td/sentinel$s"
        # Sentinel rewrites its configuration file: one each, in its own directory.
        {
            echo "bind 127.0.0.1"
            echo "dir $td/sentinel$s"
            echo "sentinel monitor $topo_master_name 127.0.0.1 $topo_primary_port 2"
            echo "sentinel down-after-milliseconds $topo_master_name ${TOPO_DOWN_AFTER_MS:-1000}"
            echo "sentinel failover-timeout $topo_master_name 5000"
            echo "sentinel parallel-syncs $topo_master_name 1"
            [ -n "${TOPO_DATA_PASS:-}" ] && echo "sentinel auth-pass $topo_master_name $TOPO_DATA_PASS"
            [ -n "${TOPO_SENTINEL_PASS:-}" ] && echo "requirepass $TOPO_SENTINEL_PASS" &&
                echo "sentinel sentinel-pass $TOPO_SENTINEL_PASS"
        } >"$td/sentinel$s/sentinel.conf"
        topo_spawn "$td" "sentinel$s" topo_scli redis-sentinel "$td/sentinel$s/sentinel.conf" || return 1
        topo_sentinel_ports="$topo_sentinel_ports${topo_sentinel_ports:+ }$tp_port"
        topo_sentinels="$topo_sentinels${topo_sentinels:+,}127.0.0.1:$tp_port"
    done
    export topo_primary_port topo_replica_ports topo_sentinel_ports topo_sentinels topo_master_name
    # Agreed: each sentinel names the primary, sees two replicas and two other sentinels (the
    # quorum a failover needs), and both replicas' links are up. Sentinels find each other
    # through the primary's hello channel every 2 s: generous bound for a loaded machine.
    topology_sentinel_ready 60 "$topo_primary_port" || {
        echo "topology: the sentinels did not agree on the primary within 60 s"
        return 1
    }
}

# topology_sentinel_ready SECONDS PORT: waits until every sentinel names PORT as the master and
# knows two replicas and two other sentinels, and every data server but PORT is its replica with
# its link up.
topology_sentinel_ready() {
    tr_end=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$tr_end" ]; do
        topo_agreed "$2" && return 0
        sleep 0.2
    done
    return 1
}
topo_agreed() {
    for sp in $topo_sentinel_ports; do
        [ "$(topo_scli "$sp" sentinel get-master-addr-by-name "$topo_master_name" | tail -1)" = "$1" ] || return 1
        ta_info=$(topo_scli "$sp" sentinel master "$topo_master_name" | paste - - | tr '\t' ' ')
        echo "$ta_info" | grep -qx "num-slaves 2" || return 1
        echo "$ta_info" | grep -qx "num-other-sentinels 2" || return 1
        echo "$ta_info" | grep -qx "flags master" || return 1
    done
    for dp in $topo_primary_port $topo_replica_ports; do
        [ "$dp" = "$1" ] && continue
        topo_cli "$dp" info replication | grep -q "^master_port:$1" || return 1
        topo_cli "$dp" info replication | grep -q "^master_link_status:up" || return 1
    done
    return 0
}

# topology_master_port: the master's port as the first sentinel that answers names it.
topology_master_port() {
    for sp in $topo_sentinel_ports; do
        tm=$(topo_scli "$sp" sentinel get-master-addr-by-name "$topo_master_name" | tail -1)
        [ -n "$tm" ] && { echo "$tm"; return 0; }
    done
    return 1
}

# topology_pid_of DIR PORT: the pid of the server of DIR on PORT.
topology_pid_of() {
    for pf in "$1"/*.port; do
        [ "$(cat "$pf")" = "$2" ] && { cat "${pf%.port}.pid"; return 0; }
    done
    return 1
}

# topology_stop DIR: kills (TERM, then KILL after 5 s) every server whose pid file is in DIR and
# that is still this run's (ours: a server a case killed left its pid file, and the pid may name
# another program's process by now), and waits for each; removes the pid files.
topology_stop() {
    for pf in "$1"/*.pid; do
        [ -f "$pf" ] || continue
        ours "$(cat "$pf")" || rm -f "$pf"
    done
    for pf in "$1"/*.pid; do
        [ -f "$pf" ] || continue
        tsp=$(cat "$pf")
        kill -CONT "$tsp" 2>/dev/null
        kill -TERM "$tsp" 2>/dev/null
    done
    for pf in "$1"/*.pid; do
        [ -f "$pf" ] || continue
        tsp=$(cat "$pf")
        tw=0
        while kill -0 "$tsp" 2>/dev/null && [ $tw -lt 100 ]; do
            tw=$((tw + 1))
            sleep 0.05
        done
        kill -9 "$tsp" 2>/dev/null
        wait "$tsp" 2>/dev/null
        rm -f "$pf"
    done
}
# ---- end of Sentinel ------------------------------------------------------------------------
