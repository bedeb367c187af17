# cluster.sh - a Redis Cluster of three primaries on loopback, for the tests that need one
# (sourced after lib.sh, whose free_port it uses).
#
# topology_cluster_start DIR: three `redis-server --cluster-enabled yes` on free loopback ports,
# their data, logs and pid files in DIR, joined by `redis-cli --cluster create` (no replicas), and
# waits until every node says cluster_state:ok. Sets $cluster_ports ("P1 P2 P3") and exports
# DBTHROTTLE_REDIS_URL=redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3. Returns non-zero
# (after stopping what it started) when the cluster did not form.
# topology_cluster_stop DIR: kills exactly the servers DIR's pid files name, nothing else (other
# redis-servers run on the same machine).
# ccli PORT ARGS...: redis-cli on one node.

ccli() {
    cc_port=$1
    shift
    redis-cli -p "$cc_port" "$@"
}

# The node's own log says whether it bound its port: a port another process took in the meantime
# is given up and another one is chosen.
cluster_node_start() { # cluster_node_start DIR -> a port in $cn_port, or returns 1
    cn_tries=0
    while [ $cn_tries -lt 5 ]; do
        cn_port=$(free_port)
        $(redis_nice) redis-server --port "$cn_port" --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file "$1/nodes-$cn_port.conf" --cluster-node-timeout 2000 \
            --save "" --appendonly no --dir "$1" --logfile "$1/redis-$cn_port.log" \
            --pidfile "$1/redis-$cn_port.pid" --daemonize yes --enable-debug-command yes \
            >/dev/null 2>&1
        cn_i=0
        while [ $cn_i -lt 100 ]; do
            ccli "$cn_port" ping 2>/dev/null | grep -q PONG && return 0
            cn_i=$((cn_i + 1))
            sleep 0.05
        done
        [ -f "$1/redis-$cn_port.pid" ] && kill -9 "$(cat "$1/redis-$cn_port.pid")" 2>/dev/null
        rm -f "$1/redis-$cn_port.pid"
        cn_tries=$((cn_tries + 1))
    done
    return 1
}

topology_cluster_start() {
    tc_dir=$1
    mkdir -p "$tc_dir"
    cluster_ports=
    for tc_n in 1 2 3; do
        cluster_node_start "$tc_dir" || { topology_cluster_stop "$tc_dir"; return 1; }
        cluster_ports="$cluster_ports $cn_port"
    done
    cluster_ports=${cluster_ports# }
    tc_addrs=
    for tc_p in $cluster_ports; do tc_addrs="$tc_addrs 127.0.0.1:$tc_p"; done
    # shellcheck disable=SC2086 # one argument per node
    redis-cli --cluster create $tc_addrs --cluster-replicas 0 --cluster-yes \
        >"$tc_dir/create.log" 2>&1 || { topology_cluster_stop "$tc_dir"; return 1; }
    tc_i=0
    for tc_p in $cluster_ports; do
        until ccli "$tc_p" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'; do
            tc_i=$((tc_i + 1))
            [ $tc_i -lt 400 ] || { topology_cluster_stop "$tc_dir"; return 1; }
            sleep 0.05
        done
    done
    tc_url=
    for tc_p in $cluster_ports; do tc_url="$tc_url,127.0.0.1:$tc_p"; done
    export DBTHROTTLE_REDIS_URL="redis-cluster://${tc_url#,}"
}

topology_cluster_stop() {
    for tc_pidfile in "$1"/redis-*.pid; do
        [ -f "$tc_pidfile" ] || continue
        tc_pid=$(cat "$tc_pidfile")
        [ -n "$tc_pid" ] && ours "$tc_pid" && kill -9 "$tc_pid" 2>/dev/null
        rm -f "$tc_pidfile"
    done
}

# cluster_owner SLOT: the port of the primary that serves SLOT now (CLUSTER SLOTS of the first
# node that answers).
cluster_owner() {
    for co_p in $cluster_ports; do
        co_out=$(ccli "$co_p" --raw cluster slots 2>/dev/null) || continue
        echo "$co_out" | awk -v s="$1" '
            NR % 1 == 0 { a[NR] = $0 }
            END {
                for (i = 1; i <= NR; i++)
                    if (a[i] ~ /^[0-9]+$/ && a[i + 1] ~ /^[0-9]+$/ && a[i + 2] ~ /^[0-9.]+$/ &&
                        a[i + 3] ~ /^[0-9]+$/ && a[i] + 0 <= s + 0 && s + 0 <= a[i + 1] + 0) {
                        print a[i + 3]
                        exit
                    }
            }'
        return 0
    done
    return 1
}
