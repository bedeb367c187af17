# share_segment_damaged.sh - the host's segment is damaged under live workers. 6 workers share MAX_QUERIES=3
# (lease 1 s, 5 ms probes, DBTHROTTLE_LOG_LEVEL=info) and one DBTHROTTLE_SHARE_DIR; while they
# run, the segment file is overwritten in place with random bytes, then truncated to nothing, then
# given a zeroed first page (a header of no layout version this library knows), and then the
# segment directory is made mode 0777 (which must make a process refuse to share) and a 7th
# worker starts. After each step the workers must all be alive and the server must see work go on;
# throughout, never more than the limit at the server; at the end each worker, stopped with
# SIGTERM, must exit 0 (a SIGBUS or SIGSEGV would show as 135 or 139), and once the library
# shares, the fall-back must be visible: the workers' info log speaks of sharing, and after the
# chmod it names the directory.
#
# Before the library attaches to segments (run.sh's library_shares finds no call to
# dbt_share_attach) there is no file to damage: the steps are skipped and the bounds still checked.
echo "# share_segment_damaged: the host's segment damaged under 6 live workers"
mark
sd_limit=3
sd_uid=$(id -u)
sd_known=
share_dir_known && sd_known=1
sd_expect=
library_shares && sd_expect=1
info "host sharing: DBTHROTTLE_SHARE_DIR $([ -n "$sd_known" ] && echo known || echo unknown) to the library, segments $([ -n "$sd_expect" ] && echo attached by it || echo not used by it yet)"
sd_dir=$work/sd.host
sd_sub=$sd_dir/dbthrottle-$sd_uid
mkdir -p "$sd_dir"
touch "$work/workers.err"
sd_log0=$(($(wc -c <"$work/workers.err") + 1))
sd_spawn() { # sd_spawn N: worker N
    wargs="-s 5 -W $work/sd.ready.$1" spawn "$work/sd.out.$1" PGAPPNAME=sd DBTHROTTLE_POOL=sd \
        DBTHROTTLE_MAX_QUERIES=$sd_limit DBTHROTTLE_LEASE=1s DBTHROTTLE_LOG_LEVEL=info \
        ${sd_known:+DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR=$sd_dir}
    sd_pids="${sd_pids:-} $spawned"
}
sd_pids=
for n in 0 1 2 3 4 5; do sd_spawn $n; done
wait_until 20 '[ "$(probes sd)" -ge 20 ]' || info "the workers were slow to start ($(probes sd) probes in 20 s)"
sd_segment() { find "$sd_sub" -maxdepth 1 -type f 2>/dev/null | head -1; }
[ -z "$sd_expect" ] || check "share_segment_damaged: sharing is active: the segment file exists" '[ -n "$(sd_segment)" ]'
# The damages, each given the segment file.
sd_random() { dd if=/dev/urandom of="$1" bs="$(stat -c %s "$1" | awk '{ print ($1 > 0 ? $1 : 4096) }')" count=1 conv=notrunc 2>/dev/null; }
sd_truncate() { truncate -s 0 "$1"; }
sd_zero_header() { dd if=/dev/zero of="$1" bs=4096 count=1 conv=notrunc 2>/dev/null; }
sd_chmod_dir() { chmod 0777 "$sd_sub"; } # (the directory, not a file)
sd_applied= sd_skipped= sd_stalls= sd_dead=
# sd_step NAME DAMAGE: applies DAMAGE to the segment (every file in its directory now: a rebuild
# may have replaced it, or left the old one beside it), then waits for 10 more probes at the server
# and counts the workers no longer alive.
sd_step() {
    before=$(probes sd)
    if [ -n "$(sd_segment)" ]; then
        if [ "$2" = sd_chmod_dir ]; then
            sd_chmod_dir
        else
            for seg in $(find "$sd_sub" -maxdepth 1 -type f); do "$2" "$seg"; done
        fi
        sd_applied="$sd_applied $1"
    else
        sd_skipped="$sd_skipped $1"
    fi
    wait_until 15 "[ \$(probes sd) -ge $((before + 10)) ]" || sd_stalls="$sd_stalls $1"
    for p in $sd_pids; do
        kill -0 "$p" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] || sd_dead="$sd_dead $1:$p"
    done
}
sd_step random-bytes sd_random
sd_step truncated sd_truncate
sd_step zeroed-header sd_zero_header
sd_chmod_from=$(($(wc -c <"$work/workers.err") + 1))
sd_step dir-0777 sd_chmod_dir
sd_spawn 6
wait_until 15 "[ -e \"$work/sd.ready.6\" ]" || sd_stalls="$sd_stalls newcomer"
for n in 0 1 2 3 4 5; do wait_until 10 "[ -e \"$work/sd.ready.$n\" ]"; done
# Stop them all; each finishes its probe and reports.
kill -TERM $sd_pids 2>/dev/null
sd_exits=
for p in $sd_pids; do
    wait_until 15 "! kill -0 $p 2>/dev/null || [ \"\$(awk '{print \$3}' /proc/$p/stat 2>/dev/null)\" = Z ]"
    wait "$p"
    sd_exits="$sd_exits $?"
done
spawned_list=
sd_summaries=$(cat "$work"/sd.out.* | grep -c '^pid=.* ok=[1-9]')
conc=$(max_conc sd)
info "damages applied:${sd_applied:- none}; skipped (no segment file):${sd_skipped:- none}; $(probes sd) probes ran"
check "share_segment_damaged: at most $sd_limit probes ran at once at the server (most seen: $conc)" '[ "$conc" -le $sd_limit ]'
check "share_segment_damaged: the pool was saturated, so the counter was tested (most seen: $conc = $sd_limit)" '[ "$conc" -eq $sd_limit ]'
check "share_segment_damaged: every worker was alive after each step (gone:${sd_dead:- none})" '[ -z "$sd_dead" ]'
check "share_segment_damaged: work went on after each step and the newcomer ran (stalled:${sd_stalls:- none})" '[ -z "$sd_stalls" ]'
check "share_segment_damaged: the 7 workers exited 0 when stopped (statuses:$sd_exits) with their probes run ($sd_summaries summaries)" \
    '[ "$(echo $sd_exits)" = "0 0 0 0 0 0 0" ] && [ "$sd_summaries" -eq 7 ]'
if [ -n "$sd_expect" ]; then
    check "share_segment_damaged: the fall-back is visible: the workers' info log speaks of sharing" \
        'tail -c +"$sd_log0" "$work/workers.err" | grep -qi "shar"'
    check "share_segment_damaged: after the chmod, the log names the share directory" \
        'tail -c +"$sd_chmod_from" "$work/workers.err" | grep -qF "$sd_dir"'
fi
check "share_segment_damaged: nothing held or queued in the end" nothing_left
rcli flushall >/dev/null
wargs=
