#!/bin/sh
# respawn.sh CMD ARGS... - runs CMD again 50 ms after it ends, until $CHAOS_STOP_NS (epoch ns), as a
# service manager restarts a killed application server (systemd's Restart=always). Without it a
# Python worker that the nemesis SIGKILLed was gone for the rest of the run: 11 clients of 19 went
# on, and the server ran fewer than the limit whenever pgbench was between runs (seed 5 in CI:
# 1.57 s after a PostgreSQL restart with nothing waiting in Redis), which the checker took for
# capacity the throttle lost. CMD itself stops at $CHAOS_STOP_NS.
while [ "$(date +%s%N)" -lt "$CHAOS_STOP_NS" ]; do
    "$@"
    sleep 0.05
done
