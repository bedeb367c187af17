# cleanup_kills_only_its_own.sh - a suite's cleanup kills the processes it started, never another
# program's. Pids come round again (32768 of them; the suites beside each other on one machine
# start hundreds of processes a minute), so a pid a suite listed for its cleanup, or a server's
# pid file a case left behind, may name another suite's process by the time it ends: killed with
# -9, that process ended with no word (a pre-fork server's child in sentinel_failover: no report,
# its parent exit 1; a whole run's workers with exit 137). A nested suite lists a process of its
# own and one it did not start (in a session of its own, working in /, its environment without
# the run's name): its cleanup must kill the first and leave the second.
echo "# cleanup_kills_only_its_own: a suite's cleanup and a pid that came round again"
co_dir=$work/cleanup
mkdir -p "$co_dir"
# The stranger: its own session and parent (setsid forks, the shell that started it exits), so
# neither this suite's process tree, its run's environment nor its work directory names it.
(cd / && exec env -u DBT_HARNESS_RUN setsid sh -c 'echo $$ >"$1"; exec sleep 120' sh "$co_dir/stranger.pid") &
wait_until 10 '[ -s "$co_dir/stranger.pid" ]' >/dev/null
co_stranger=$(cat "$co_dir/stranger.pid")
# The nested suite: harness_begin, one process of its own, both pids listed, exit (its cleanup).
sh -c '. "$1/../support/lib.sh"
    harness_begin cleanup
    sleep 120 &
    echo $! >"$2/own.pid"
    echo $! >>"$work/pids"
    cat "$2/stranger.pid" >>"$work/pids"
    exit 0' "$here/run.sh" "$here" "$co_dir" >/dev/null 2>&1
co_own=$(cat "$co_dir/own.pid" 2>/dev/null)
wait_until 10 '! kill -0 "$co_own" 2>/dev/null' >/dev/null
check "cleanup_kills_only_its_own: the nested suite's cleanup killed its own process ($co_own)" '[ -n "$co_own" ] && ! kill -0 "$co_own" 2>/dev/null'
co_alive=no
kill -0 "$co_stranger" 2>/dev/null && co_alive=yes
check "cleanup_kills_only_its_own: and left the process it did not start ($co_stranger) alone (alive: $co_alive)" '[ "$co_alive" = yes ]'
# Ours to end (its pid is known and it is still the sleep we started: alive above).
[ "$co_alive" = yes ] && kill "$co_stranger" 2>/dev/null
