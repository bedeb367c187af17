# share_dir_unusable.sh - a share directory the library cannot use (issue 29): read-only, full,
# under a regular file, or a file where its dbthrottle-<uid> directory should be. Each process
# says so once per pool and cause, at the library's default log level (a warning that names the
# directory and the reason; it was an info line nobody saw), however many commands it runs, and
# throttles unshared: all its commands run, never more at once at the server than the limit.
# As root a mode 0555 directory is still writable, so the read-only and the full directory are a
# read-only bind mount and an 8 KiB tmpfs in a mount namespace of the workers' own (unshare -m).
echo "# share_dir_unusable: a read-only, full or misplaced share directory warns once per process"

# sdu_run NAME DIR CAUSE [WRAP...]: 3 workers of $sdu_n commands each (limit 2), sharing in DIR,
# at the library's default log level, started under WRAP (a command that ends with: exec "$@").
sdu_event=host_share_unavailable # the line expected; a run may set another, for itself only
sdu_run() {
    sdu_name=$1 sdu_dir=$2 sdu_cause=$3
    shift 3
    mark
    i=0
    while [ $i -lt 3 ]; do
        "$@" env -u DBTHROTTLE_LOG_LEVEL LD_PRELOAD="$preload" PGAPPNAME="sdu_$sdu_name" \
            DBTHROTTLE_POOL="sdu_$sdu_name" DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_HOST_SHARE=on \
            DBTHROTTLE_SHARE_DIR="$sdu_dir" DBTHROTTLE_LOG=stderr "$worker" -n "$sdu_n" -s "$sdu_ms" \
            >"$work/sdu.$sdu_name.out.$i" 2>"$work/sdu.$sdu_name.err.$i" &
        eval "sdu_pid$i=$!"
        i=$((i + 1))
    done
    sdu_bad=0
    for i in 0 1 2; do eval "wait \$sdu_pid$i" || sdu_bad=$((sdu_bad + 1)); done
    # One line per process, at warn, with the directory and the cause; none at info.
    sdu_lines=0
    for i in 0 1 2; do
        n=$(grep -c "event=$sdu_event" "$work/sdu.$sdu_name.err.$i")
        w=$(grep "level=warn event=$sdu_event" "$work/sdu.$sdu_name.err.$i" |
            grep -F "$sdu_dir" | grep -c "$sdu_cause")
        [ "$n" -eq 1 ] && [ "$w" -eq 1 ] && sdu_lines=$((sdu_lines + 1))
    done
    sdu_line=$(cat "$work"/sdu."$sdu_name".err.* | grep -m1 "$sdu_event" | sed 's/ host=.*//')
    sdu_event=host_share_unavailable
    check "share_dir_unusable: $sdu_name: one warning per process naming the dir and \"$sdu_cause\" ($sdu_lines of 3): ${sdu_line:-none}" \
        '[ "$sdu_lines" -eq 3 ]'
    check "share_dir_unusable: $sdu_name: all ran ($(sum_field ok "$work"/sdu."$sdu_name".out.*) of $((3 * sdu_n)), $sdu_bad failed), at most 2 at once at the server (most seen: $(max_conc "sdu_$sdu_name"))" \
        '[ "$sdu_bad" -eq 0 ] && [ "$(sum_field ok "$work"/sdu."$sdu_name".out.*)" -eq $((3 * sdu_n)) ] && [ "$(max_conc "sdu_$sdu_name")" -le 2 ]'
}

# Under a regular file: mkdir of <dir>/dbthrottle-<uid> fails with ENOTDIR. These workers run
# past the 10 s after which a pool tries to attach again (60 probes of 400 ms at 2 at once, 12 s):
# the same cause is not said again.
: >"$work/sdu.file"
sdu_n=20 sdu_ms=400
sdu_run under_a_file "$work/sdu.file/shm" "Not a directory"
# A cause that changes while a process runs is said again: one worker under a regular file; once
# it has warned, the file becomes a directory whose shm is a symlink to nowhere.
# Its next try (10 s later) fails for another reason: a second warning, and only that one.
: >"$work/sdu.cc"
env -u DBTHROTTLE_LOG_LEVEL LD_PRELOAD="$preload" PGAPPNAME=sdu_cc DBTHROTTLE_POOL=sdu_cc \
    DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$work/sdu.cc/shm" \
    DBTHROTTLE_LOG=stderr "$worker" -n 30 -s 450 >"$work/sdu.cc.out" 2>"$work/sdu.cc.err" &
sdu_cc=$!
wait_until 10 'grep -qs host_share_unavailable "$work/sdu.cc.err"'
rm "$work/sdu.cc" && mkdir "$work/sdu.cc" && ln -s "$work/sdu.nowhere" "$work/sdu.cc/shm"
wait "$sdu_cc"
sdu_rc=$?
sdu_causes=$(grep "level=warn event=host_share_unavailable" "$work/sdu.cc.err" | sed 's/.* reason="\([^"]*\)".*/\1/' |
    sed "s|$work/||g" | tr '\n' ';')
check "share_dir_unusable: a cause that changes is said again, each once (rc $sdu_rc, ran $(sum_field ok "$work/sdu.cc.out") of 30): $sdu_causes" \
    '[ "$sdu_rc" -eq 0 ] && [ "$(grep -c host_share_unavailable "$work/sdu.cc.err")" -eq 2 ] && [ "$sdu_causes" = "share directory sdu.cc/shm: Not a directory;share directory sdu.cc/shm: No such file or directory;" ]'

sdu_n=8 sdu_ms=5
# A file where the directory <dir>/dbthrottle-<uid> should be is not a reason to stop sharing:
# each process warns that the directory is not the user's own and shares through one that is
# (other_users_cannot_stall_sharing has the case of another user's directory).
mkdir -p "$work/sdu.misplaced" && : >"$work/sdu.misplaced/dbthrottle-$(id -u)"
sdu_event=host_share_dir_taken sdu_run file_for_dir "$work/sdu.misplaced" "not a directory"
if unshare -m true 2>/dev/null; then
    mkdir -p "$work/sdu.ro" "$work/sdu.full"
    # Read-only: a bind mount of an empty directory, remounted read-only (root writes through
    # any mode, not through a read-only mount).
    sdu_run read_only "$work/sdu.ro" "Read-only file system" unshare -m sh -c \
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"' "$work/sdu.ro"
    # Full: a tmpfs of 8 KiB has no room for a segment.
    sdu_run no_space "$work/sdu.full" "No space left on device" unshare -m sh -c \
        'mount -t tmpfs -o size=8k,mode=0755 tmpfs "$0" && exec "$@"' "$work/sdu.full"
else
    info "share_dir_unusable: no mount namespace here (unshare -m): the read-only and full cases are left out"
fi
nothing_left
