# namespaces_share_no_segment.sh - processes that name one DBTHROTTLE_SHARE_DIR but live in
# different pid namespaces (containers on one /dev/shm) must not share a segment: the segment
# finds dead holders by kill(tid, 0) and wakes processes through abstract unix sockets, both of
# which mean something only within one pid (network) namespace. 3 workers in this namespace and
# 3 in one other pid namespace (`unshare --pid --fork`; same network: they reach Redis and
# PostgreSQL) share a limit of 2: each namespace gets a segment file of its own (its 3 workers
# share it: counted while all six are done but still attached, -E), every worker finishes, never
# more than 2 at once at the server, and once they have exited the last of each namespace has
# removed its segment file. Skipped where no pid namespace can be made (not root).
echo "# namespaces_share_no_segment: workers of one share dir in two pid namespaces"
if ! command -v unshare >/dev/null 2>&1 || ! unshare --pid --fork true 2>/dev/null || ! library_shares; then
    info "namespaces_share_no_segment: skipped (no pid namespace can be made here, or the library does not share)"
else
    mark
    ns_dir=$work/ns.host
    ns_sub=$ns_dir/dbthrottle-$(id -u)
    mkdir -p "$ns_dir" && chmod 700 "$ns_dir"
    ns_env="PGAPPNAME=ns DBTHROTTLE_POOL=ns DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR=$ns_dir"
    for n in 0 1 2; do
        wargs="-n 40 -s 5 -E $work/ns.end" spawn "$work/ns.out.$n" $ns_env
    done
    # The other namespace's three, started by one shell that is its pid 1; it exits 1 when any
    # of them did not exit 0.
    env LD_PRELOAD="$preload" $ns_env unshare --pid --fork sh -c '
        pids=
        for n in 3 4 5; do "$0" -n 40 -s 5 -E "$3" >"$1.$n" 2>>"$2" & pids="$pids $!"; done
        rc=0
        for p in $pids; do wait "$p" || rc=1; done
        exit $rc' "$worker" "$work/ns.out" "$work/workers.err" "$work/ns.end" &
    spawned_list="$spawned_list $!"
    # Each worker reports when its probes are done, then stays (attached) until ns.end exists.
    ns_reported() { cat "$work"/ns.out.* 2>/dev/null | grep -c '^pid='; }
    wait_until 120 '[ "$(ns_reported)" -eq 6 ]' || info "namespaces_share_no_segment: only $(ns_reported) of 6 workers reported"
    ns_segments=$(find "$ns_sub" -maxdepth 1 -type f -name '[0-9a-f]*.*' 2>/dev/null | wc -l)
    check "namespaces_share_no_segment: a segment per pid namespace ($ns_segments files in the share dir, want 2)" \
        '[ "$ns_segments" -eq 2 ]'
    : >"$work/ns.end"
    ns_bad=0
    for p in $spawned_list; do wait "$p" || ns_bad=$((ns_bad + 1)); done
    spawned_list=
    # Under FAULT_EXIT_NOW (the ASan passes) the workers _exit: no library exit, no detach.
    if [ -z "${FAULT_EXIT_NOW:-}" ]; then
        ns_left=$(ls -A "$ns_sub" 2>/dev/null | wc -l)
        check "namespaces_share_no_segment: the last process of each namespace removed its segment ($ns_left files left)" \
            '[ "$ns_left" -eq 0 ]'
    fi
    check "namespaces_share_no_segment: every worker finished ($(sum_field ok "$work"/ns.out.*) of 240 probes, $ns_bad bad exits)" \
        '[ "$ns_bad" -eq 0 ] && [ "$(sum_field ok "$work"/ns.out.*)" -eq 240 ]'
    check "namespaces_share_no_segment: at most 2 at once at the server (most seen: $(max_conc ns))" \
        '[ "$(max_conc ns)" -le 2 ]'
    nothing_left
fi
