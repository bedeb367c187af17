#!/bin/sh
# sentinel.sh start DIR | stop DIR - the Sentinel topology of a chaos run (a primary, two replicas,
# three sentinels: tests/support/topology.sh), for orchestrate.py and run.sh. start prints
# "PRIMARY_PORT SENTINEL_LIST" once every sentinel agrees on the primary; stop ends every server
# of DIR. The servers carry the run's DBT_HARNESS_RUN, so the harness' cleanup knows them as its own.
set -u
. "$(dirname "$0")/../support/lib.sh"
. "$(dirname "$0")/../support/topology.sh"
work=${DBT_HARNESS_RUN:-}
case $1 in
start)
    topology_sentinel_start "$2" >&2 || exit 1
    echo "$topo_primary_port $topo_sentinels"
    ;;
stop)
    topology_stop "$2"
    ;;
esac
