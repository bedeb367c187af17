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
    # down-after 2 s, not the 1 s default: beside make test's other lanes a just-promoted primary
    # (serving every client's reconnection and its replica's full sync) went unanswered for 1 s
    # once, and the sentinels failed over again from it, a fault the nemesis had not asked for
    # (seed 12: a second primary 2.2 s after the first). The checker's windows follow the
    # failovers' recorded ends, whatever the detection.
    TOPO_DOWN_AFTER_MS=2000 topology_sentinel_start "$2" >&2 || exit 1
    echo "$topo_primary_port $topo_sentinels"
    ;;
stop)
    topology_stop "$2"
    ;;
esac
