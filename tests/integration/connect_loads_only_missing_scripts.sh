# connect_loads_only_missing_scripts.sh - a connection asks Redis which scripts it has (SCRIPT
# EXISTS, pipelined with INFO) and loads only those it lacks: a one-shot psql opens two
# connections, and each loaded all four scripts, some 300 KB, on every connect (in a data centre,
# a few round trips of TCP slow start each). Judged by Redis' own count of SCRIPT LOADs
# (INFO commandstats) and the probes the server ran. After a SCRIPT FLUSH the first process loads
# what is missing, and its commands run; a second loads nothing (before: 8 loads each). A user
# whose ACL has no SCRIPT EXISTS (the documented lines of older versions) still works: it loads
# them all, as before.
it_connect_loads_only_missing_scripts() {
    cl_loads() {
        v=$(rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_script|load:calls=\([0-9]*\),.*/\1/p')
        echo "${v:-0}"
    }
    cl_run() { # cl_run APP [ENV...]: one one-shot psql, a probe
        app=$1
        shift
        throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cl_scripts PGAPPNAME="$app" "$@" \
            psql -qAtX -c "SELECT dbt_probe(1)" >/dev/null 2>>"$work/cl_scripts.err"
    }
    mark
    rcli script flush >/dev/null
    l0=$(cl_loads)
    cl_run cl_first
    l1=$(cl_loads)
    cl_run cl_second
    l2=$(cl_loads)
    check "after a SCRIPT FLUSH the first process loads what is missing ($((l1 - l0)) loads), and its probe ran ($(probes cl_first))" \
        '[ $((l1 - l0)) -ge 1 ] && [ "$(probes cl_first)" -eq 1 ]'
    check "a second process loads no script: Redis has them ($((l2 - l1)) loads; before: 8), and its probe ran ($(probes cl_second))" \
        '[ $((l2 - l1)) -eq 0 ] && [ "$(probes cl_second)" -eq 1 ]'
    rcli ACL SETUSER cl_old on '>clpw' '~*' '+@all' '-script|exists' >/dev/null
    cl_run cl_old DBTHROTTLE_REDIS_URL="redis://cl_old:clpw@127.0.0.1:$rport"
    l3=$(cl_loads)
    check "a user without SCRIPT EXISTS loads them all, as before ($((l3 - l2)) loads), and its probe ran ($(probes cl_old))" \
        '[ $((l3 - l2)) -ge 4 ] && [ "$(probes cl_old)" -eq 1 ]'
    rcli ACL DELUSER cl_old >/dev/null
}
