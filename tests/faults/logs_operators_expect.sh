# logs_operators_expect.sh - the log as an operator runs it. A log file renamed under a running
# worker (logrotate without copytruncate) is followed: new lines land in the new file, none is
# lost (the grant lines of both files add up to the probes PostgreSQL ran); DBTHROTTLE_LOG=
# syslog:PATH sends each line to a syslog socket (here one this test owns: DBTHROTTLE_LOG=syslog
# writes to /dev/log, which a test cannot own without root side effects, and differs only in the
# path) with the facility and severity in its <PRI> and the program and pid in its header; every
# line of a file carries host= and prog=; a bad setting's error comes in the chosen format and
# place (JSON, a file), a bad facility named; DBTHROTTLE_LOG_STATS writes each pool's counters
# every period at the default level, whose intervals add up to its totals; the exit summary names
# the version the process reports in Redis.
echo "# logs_operators_expect: rotation, syslog, host and program, config errors in json, stats lines"
lo_host=$(hostname)
lo_prog=$(basename "$worker")
lo_count() { cat "$2" 2>/dev/null | grep -c "$1"; } # lo_count PATTERN FILE: 0 when no file

# ---- rotation ------------------------------------------------------------------------------------
mark
# One grant line per probe is what lets the server's count prove no line was lost: so permits are
# not kept between commands here, whatever the suite's mode (keeping is on by default, and one
# kept permit serves many probes with a single grant line).
PGAPPNAME=lo_rot wargs="-n 0 -s 20" spawn "$work/lo.rot.out" DBTHROTTLE_MAX_QUERIES=2 \
    DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG="$work/lo.rot.log"
lo_rot_pid=$spawned
wait_until 20 'grep -q "event=grant" "$work/lo.rot.log" 2>/dev/null'
mv "$work/lo.rot.log" "$work/lo.rot.log.1"
# The worker goes on writing: within a bounded time the path it was given has a file again.
wait_until 20 '[ "$(lo_count event=grant "$work/lo.rot.log")" -ge 5 ]'
lo_rot_new_ms=$waited_ms
lo_old_size=$(wc -c <"$work/lo.rot.log.1")
lo_new_lines=$(lo_count event=grant "$work/lo.rot.log")
# more lines in the new file while the renamed one stays as it was
wait_until 20 '[ "$(lo_count event=grant "$work/lo.rot.log")" -ge $((lo_new_lines + 20)) ]'
lo_old_size2=$(wc -c <"$work/lo.rot.log.1")
"$top/build/dbthrottle" status --json >"$work/lo.status.json" 2>&1
kill -TERM "$lo_rot_pid"
wait_workers
lo_grants=$(cat "$work/lo.rot.log.1" "$work/lo.rot.log" 2>/dev/null | grep -c "event=grant")
check "logs: a renamed log file is followed: new lines in the new file after ${lo_rot_new_ms}ms, the renamed one unchanged after ($lo_old_size then $lo_old_size2 bytes)" \
    '[ "$lo_rot_new_ms" -ge 0 ] && [ "$lo_old_size" -eq "$lo_old_size2" ] && grep -q "event=summary" "$work/lo.rot.log"'
check "logs: no line lost in the rotation: $lo_grants grant lines in both files, $(probes lo_rot) probes at the server" \
    '[ "$lo_grants" -gt 0 ] && [ "$lo_grants" -eq "$(probes lo_rot)" ]'
lo_reported=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print([p for p in d["processes"] if p["pid"] == int(sys.argv[2])][0]["version"])' "$work/lo.status.json" "$lo_rot_pid" 2>/dev/null)
check "logs: the exit summary names the version the process reported in Redis ($lo_reported), and counts every probe ($(probes lo_rot))" \
    '[ -n "$lo_reported" ] && grep "event=summary" "$work/lo.rot.log" | grep -q " version=$lo_reported " &&
     [ "$(grep "event=summary" "$work/lo.rot.log" | tr " " "\n" | grep "^grants=" | cut -d= -f2)" -eq "$(probes lo_rot)" ]'
check "logs: every line of the file carries host=$lo_host and prog=$lo_prog" \
    '[ "$(cat "$work/lo.rot.log.1" "$work/lo.rot.log" | grep -vc " host=$lo_host prog=$lo_prog pid=")" -eq 0 ]'

# ---- syslog --------------------------------------------------------------------------------------
# The receiver: a unix datagram socket that writes each message it gets as a line.
python3 - "$work/lo.syslog.sock" "$work/lo.syslog.msgs" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "ab", buffering=0) as out:
    while True:
        out.write(s.recv(65536).replace(b"\n", b"\\n") + b"\n")
PY
echo $! >>"$work/pids"
wait_until 10 '[ -S "$work/lo.syslog.sock" ]'
: >"$work/lo.syslog.msgs"
PGAPPNAME=lo_syslog throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG_LEVEL=info \
    DBTHROTTLE_LOG="syslog:$work/lo.syslog.sock" DBTHROTTLE_LOG_FACILITY=local3 \
    sh -c 'echo $$ >"$1"; exec psql -X -c "SELECT dbt_probe(0)"' sh "$work/lo.psql.pid" \
    >"$work/lo.syslog.out" 2>"$work/lo.syslog.err"
lo_psql=$(cat "$work/lo.psql.pid")
wait_until 10 'grep -q "event=summary" "$work/lo.syslog.msgs"'
# local3 is facility 19: info 19*8+6 = 158, the summary too
check "logs: DBTHROTTLE_LOG=syslog:PATH: the grant and summary reach the socket as '<158>Mmm dd hh:mm:ss psql[$lo_psql]: level=info event=...', nothing on stderr: $(grep -m1 "event=grant" "$work/lo.syslog.msgs")" \
    'grep -qE "^<158>[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} psql\[$lo_psql\]: level=info event=grant " "$work/lo.syslog.msgs" &&
     grep -qE "^<158>.* psql\[$lo_psql\]: level=info event=summary " "$work/lo.syslog.msgs" && [ ! -s "$work/lo.syslog.err" ]'
# A receiver that is gone: the lines are not lost, they go to stderr.
PGAPPNAME=lo_syslog_gone throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG_LEVEL=info \
    DBTHROTTLE_LOG="syslog:$work/lo.nobody.sock" psql -X -c "SELECT dbt_probe(0)" \
    >/dev/null 2>"$work/lo.syslog_gone.err"
check "logs: syslog unreachable: the library says so and writes its lines to stderr: $(grep -m1 log_error "$work/lo.syslog_gone.err")" \
    'grep -q "event=log_error.*cannot reach syslog" "$work/lo.syslog_gone.err" && grep -q "event=grant" "$work/lo.syslog_gone.err"'

# ---- the README's log, for workers of two users ------------------------------------------------------
# The README's /etc/dbthrottle.conf is every worker's of the host, whatever user runs it, so its
# `log` must take the lines of a second user's worker too (a file the first writer made 0600 did
# not: the second's lines went to its program's stderr). Its value here: syslog's /dev/log becomes
# this test's socket (writable by all, as /dev/log is), a file path a file of $work.
lo_readme_log=$(sed -n 's/^ *log *= *//p' "$top/README.md" | head -n 1)
case $lo_readme_log in
syslog | syslog:*) lo_log="syslog:$work/lo.syslog.sock" ;;
stderr) lo_log=stderr ;;
*) lo_log="$work/lo.readme.log" ;;
esac
chmod 666 "$work/lo.syslog.sock"
lo_users_ok=0
for lo_uid in 0 65534; do
    : >"$work/lo.user.$lo_uid.pid"
    chmod 666 "$work/lo.user.$lo_uid.pid" # the other user writes its pid there
    PGAPPNAME=lo_users PGUSER=postgres setpriv --reuid=$lo_uid --regid=$lo_uid --clear-groups \
        env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG_LEVEL=info \
        DBTHROTTLE_LOG="$lo_log" sh -c 'echo $$ >"$1"; exec psql -X -c "SELECT dbt_probe(0)"' \
        sh "$work/lo.user.$lo_uid.pid" >/dev/null 2>"$work/lo.user.$lo_uid.err"
    lo_pid=$(cat "$work/lo.user.$lo_uid.pid")
    case $lo_log in
    syslog:*) wait_until 10 'grep -q "psql\[$lo_pid\]: level=info event=grant " "$work/lo.syslog.msgs"' ;;
    stderr) grep -q "event=grant .* pid=$lo_pid " "$work/lo.user.$lo_uid.err" ;;
    *) grep -q "event=grant .* pid=$lo_pid " "$lo_log" 2>/dev/null ;;
    esac && ! grep -q "event=log_error" "$work/lo.user.$lo_uid.err" && lo_users_ok=$((lo_users_ok + 1))
done
check "logs: the README's log ($lo_readme_log) takes the lines of workers of two users (uid 0 and 65534): $lo_users_ok of 2 ($(cat "$work"/lo.user.*.err | grep -m1 log_error))" \
    '[ "$lo_users_ok" -eq 2 ]'

# ---- configuration errors in the chosen format -----------------------------------------------------
# lo_json_event FILE EVENT WORD: FILE has a JSON line (every line of ours is one) of EVENT whose
# error names WORD, with host and prog.
lo_json_event() {
    python3 - "$@" <<'PY'
import json, sys
path, event, word = sys.argv[1:4]
ok = False
for line in open(path, errors="replace"):
    if not line.startswith("{"):
        continue  # psql's own message
    d = json.loads(line)
    assert d["host"] and d["prog"], d
    if d["event"] == event and word in d.get("error", ""):
        ok = True
sys.exit(0 if ok else 1)
PY
}
PGAPPNAME=lo_cfg throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=soon \
    DBTHROTTLE_LOG_FORMAT=json psql -X -c "SELECT dbt_probe(0)" >/dev/null 2>"$work/lo.cfg.err"
check "logs: a bad setting's error is logged in JSON when DBTHROTTLE_LOG_FORMAT=json: $(grep -m1 config_error "$work/lo.cfg.err")" \
    'lo_json_event "$work/lo.cfg.err" config_error DBTHROTTLE_WAIT_TIMEOUT'
PGAPPNAME=lo_cfg throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG_FACILITY=local9 \
    DBTHROTTLE_LOG_FORMAT=json DBTHROTTLE_LOG="$work/lo.cfg.log" psql -X -c "SELECT dbt_probe(0)" \
    >/dev/null 2>"$work/lo.cfg2.err"
check "logs: ... and in the log file DBTHROTTLE_LOG names; a bad facility is named: $(cat "$work/lo.cfg.log" 2>/dev/null | head -1)" \
    'lo_json_event "$work/lo.cfg.log" config_error DBTHROTTLE_LOG_FACILITY && ! grep -q "^{" "$work/lo.cfg2.err"'
check "logs: a command refused for a bad setting is still refused ($(probes lo_cfg) probes ran)" \
    '[ "$(probes lo_cfg)" -eq 0 ]'

# ---- the periodic stats line, and the version in the exit summary ----------------------------------
mark
PGAPPNAME=lo_stats wargs="-n 0 -s 20" spawn "$work/lo.stats.out" DBTHROTTLE_MAX_QUERIES=2 \
    DBTHROTTLE_POOL=lo_stats DBTHROTTLE_LOG_LEVEL=warn DBTHROTTLE_LOG_STATS=1s \
    DBTHROTTLE_LOG="$work/lo.stats.log"
lo_stats_pid=$spawned
wait_until 30 '[ "$(lo_count event=stats "$work/lo.stats.log")" -ge 3 ]'
lo_stats_ms=$waited_ms
kill -TERM "$lo_stats_pid"
wait_workers
check "logs: DBTHROTTLE_LOG_STATS=1s at the default level: 3 stats lines after ${lo_stats_ms}ms, each for an interval of at least the period" \
    '[ "$lo_stats_ms" -ge 1900 ] && [ "$(grep "event=stats" "$work/lo.stats.log" | tr " " "\n" | awk -F= "\$1 == \"interval_ms\" && \$2 + 0 < 990" | wc -l)" -eq 0 ]'
check "logs: the stats lines' intervals add up to their totals (the last: $(grep "event=stats" "$work/lo.stats.log" | tail -1 | tr " " "\n" | grep "^total_grants="))" \
    'python3 - "$work/lo.stats.log" <<PY
import sys
lines = [dict(kv.split("=", 1) for kv in l.split() if "=" in kv) for l in open(sys.argv[1]) if "event=stats" in l]
for k in ("grants", "waits", "timeouts", "refusals", "unthrottled"):
    assert sum(int(l[k]) for l in lines) == int(lines[-1]["total_" + k]), k
assert int(lines[-1]["total_grants"]) > 0
PY'
