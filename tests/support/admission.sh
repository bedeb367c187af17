# admission.sh - what the server saw of a fleet of fault_worker probes around a fault, for the
# cases that measure what a failover, a restart or a data loss admits (sourced by a case of
# tests/faults after lib.sh and run.sh's helpers). Everything is read from PostgreSQL's log: each
# probe logs, as it starts, how many probes of its application hold their advisory lock at that
# moment (dbt_probe, lib.sh), and the log line's time.
#
#   adm_begin                  the log's times in UTC (ms since midnight, as adm_now); call once
#   adm_now                    now, in ms since UTC midnight (the log's clock)
#   adm_fleet N APP ENV...     N workers (wargs as set) with application_name APP and ENV
#   adm_stop_fleet             SIGTERM to them, waited for; bad exits in $adm_bad
#   adm_probes APP             its probes as "<ms since UTC midnight> <n at once>" lines
#   adm_probes_in APP          the same, of the log lines on standard input
#   adm_max APP FROM [TO]      the most probes of APP at once among those started in [FROM, TO)
#   adm_first APP FROM         ms from FROM to the first probe of APP started at or after it (-1:
#                              none)
#   adm_over APP LIMIT FROM    how long (ms) probes of APP ran above LIMIT at once since FROM: from
#                              the first start above it to the last one above it (0: never)
#   adm_stat FIELD             a counter of the query semaphores' stats in Redis, summed over pools
#   adm_full APP N FROM        true once a probe of APP started at or after FROM with N at once (the
#                              limit just filled: its holders are at the start of their statements)

adm_begin() {
    psql -qAtX -c "ALTER SYSTEM SET log_timezone = 'UTC'" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 0.2
}

adm_now() { echo $((($(date -u +%s%N) / 1000000) % 86400000)); }

adm_fleet() {
    af_n=$1
    af_app=$2
    shift 2
    af_i=0
    while [ $af_i -lt "$af_n" ]; do
        spawn "$work/adm.$af_app.$af_i" PGAPPNAME="$af_app" "$@"
        af_i=$((af_i + 1))
    done
}

adm_stop_fleet() {
    for p in ${spawned_list:-}; do kill -TERM "$p" 2>/dev/null; done
    adm_bad=0
    for p in ${spawned_list:-}; do wait "$p" || adm_bad=$((adm_bad + 1)); done
    spawned_list=
}

# The probes of APP as "<ms since midnight> <n at once>" lines, in log order: of the server log,
# or (adm_probes_in) of the part of it on standard input.
adm_probes_in() {
    awk -v app="app=$1" '$0 ~ "dbt_conc " app " n=" {
        split($2, t, ":")
        ms = (t[1] * 3600 + t[2] * 60 + t[3]) * 1000
        n = $0
        sub(/.* n=/, "", n)
        printf "%d %d\n", ms, n + 0
    }'
}
adm_probes() { adm_probes_in "$1" <"$work/pg/server.log"; }

adm_max() {
    adm_probes "$1" | awk -v from="$2" -v to="${3:-999999999}" \
        '$1 >= from && $1 < to && $2 > m { m = $2 } END { print m + 0 }'
}

adm_first() {
    adm_probes "$1" | awk -v from="$2" '$1 >= from { print $1 - from; f = 1; exit } END { if (!f) print -1 }'
}

adm_over() {
    adm_probes "$1" | awk -v lim="$2" -v from="$3" \
        '$1 >= from && $2 > lim { if (!a) a = $1; b = $1 } END { print (a ? b - a : 0) }'
}

adm_stat() {
    rcli --raw eval "local n, cur = 0, '0'
        repeat
            local r = redis.call('SCAN', cur, 'MATCH', '*:q:stats', 'COUNT', 1000)
            cur = r[1]
            for _, k in ipairs(r[2]) do n = n + (tonumber(redis.call('HGET', k, ARGV[1])) or 0) end
        until cur == '0'
        return n" 0 "$1"
}

adm_full() {
    [ "$(adm_probes "$1" | awk -v n="$2" -v from="$3" '$1 >= from && $2 >= n { f = 1 } END { print f + 0 }')" = 1 ]
}
