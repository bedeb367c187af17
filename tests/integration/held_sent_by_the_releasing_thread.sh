# held_sent_by_the_releasing_thread.sh - pgbench -c16 -j16 at a limit of 4 (one process, 16
# threads: nearly every command is held, its permit passed on by another thread of the process):
# each held command is sent by the thread that gives its permit back, not handed to a thread of
# ours that must be woken for the command and again for its grant. Judged by the kernel's count of
# the process' voluntary context switches (getrusage of the child, all its threads): pgbench sleeps
# once per transaction for its answer; a hand-off to a thread of ours adds two sleeps per held
# command (for the command, for the grant), which put the process at 4.3-4.8 per transaction before
# (1.8 after). All transactions run, and the limit holds at the server.
it_held_sent_by_the_releasing_thread() {
    printf 'select dbt_probe(0);\n' >"$work/probe0.sql"
    mark
    out=$(PGAPPNAME=held_rel throttled DBTHROTTLE_MAX_QUERIES=4 /usr/bin/python3 -c '
import resource, subprocess, sys
p = subprocess.run(["pgbench", "-n", "-c", "16", "-j", "16", "-t", "300", "-f", sys.argv[1]],
                   capture_output=True, text=True)
done = [l.split()[-1] for l in p.stdout.splitlines() if l.startswith("number of transactions actually processed")]
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(p.returncode, done[0] if done else "-", "%.2f" % (ru.ru_nvcsw / 4800.0))
' "$work/probe0.sql" 2>&1)
    rel_rc=$(echo "$out" | awk 'END { print $1 }')
    rel_done=$(echo "$out" | awk 'END { print $2 }')
    rel_csw=$(echo "$out" | awk 'END { print $3 }')
    check "held_rel: pgbench -c16 -j16 at limit 4: all 4800 transactions ran (rc $rel_rc, $rel_done)" \
        '[ "$rel_rc" = 0 ] && [ "$rel_done" = 4800/4800 ]'
    check "held_rel: fewer than 3 voluntary context switches per transaction: no thread of ours woken per held command ($rel_csw)" \
        'awk -v v="$rel_csw" "BEGIN { exit !(v + 0 > 0 && v < 3) }"'
    check "held_rel: at the server 4800 probes, never more than 4 at once (saw $(max_conc held_rel) at once, $(probes held_rel) probes)" \
        '[ "$(probes held_rel)" = 4800 ] && [ "$(max_conc held_rel)" -le 4 ]'
}
