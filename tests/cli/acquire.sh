#!/bin/sh
# acquire.sh - dbthrottle acquire POOL -- CMD against a redis-server this script starts (and stops)
# on a free loopback port: concurrency at a limit measured by the commands' own timestamps, exit
# statuses passed through, refusals with exit 75, signals (to the waiting and the running acquire,
# from the terminal), SIGKILL, Redis unreachable (open, closed), the descriptors CMD inherits, the
# connection kind and weights. Redis' own state is read with redis-cli. Each check prints one line;
# the last line is "N passed, N failed", and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin acquire
export DBTHROTTLE_LOG_LEVEL=error
redis_start

# bg OUT CMD...: runs CMD in the background, output in OUT, its pid in $bg (killed at the end).
bg() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
# exited PID: true once PID is gone (the shell's own children: reaped by wait in the caller).
exited() { ! kill -0 "$1" 2>/dev/null; }

# ---- usage ---------------------------------------------------------------------------------------
echo "# usage"
out=$("$D" acquire --help 2>&1); rc=$?
check "acquire --help: exit 0 and a usage line" '[ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^usage: dbthrottle acquire"'
"$D" acquire --no-such-option p -- true >/dev/null 2>"$work/err"; rc=$?
check "acquire --no-such-option: exit 2, one line naming it" '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "no-such-option" "$work/err"'
"$D" acquire --limit 1 p >/dev/null 2>"$work/err"; rc=$?
check "acquire without CMD: exit 2 ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "no command" "$work/err"'
"$D" acquire p -- true >/dev/null 2>"$work/err"; rc=$?
check "acquire without a limit: exit 2, nothing run unthrottled by accident ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "no limit" "$work/err"'
"$D" acquire --wait soon --limit 1 p -- true >/dev/null 2>"$work/err"; rc=$?
check "acquire --wait soon: exit 2, the library's duration parser's message ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "DBTHROTTLE_WAIT_TIMEOUT: bad value \"soon\"" "$work/err"'
"$D" --help | grep -q "^  acquire" && ok "dbthrottle --help lists acquire" || fail "dbthrottle --help lists acquire"
grep -q '^\.SS "\?dbthrottle acquire' "$top/docs/dbthrottle.1" && ok "dbthrottle(1) has a section for acquire" || fail "dbthrottle(1) has a section for acquire"

# ---- 10 at a limit of 2, measured by the commands themselves -------------------------------------
echo "# concurrency"
: >"$work/times"
i=0
while [ $i -lt 10 ]; do
    bg "$work/c.$i" "$D" acquire cc --limit 2 -- sh -c 'echo "s $(date +%s%N)" >>"$1"; sleep 0.3; echo "e $(date +%s%N)" >>"$1"' sh "$work/times"
    echo "$bg" >>"$work/c.pids"
    i=$((i + 1))
done
rcs=
for p in $(cat "$work/c.pids"); do
    wait "$p"
    rcs="$rcs$?"
done
# Each command's start and end are inside its permit: the most that overlap is a lower bound of the
# permits held at once. An end and a start at the same instant do not overlap (ends sort first).
peak=$(sort -k2,2n -k1,1r "$work/times" | awk '$1 == "s" { n++; if (n > m) m = n } $1 == "e" { n-- } END { print m + 0 }')
check "10 commands at a limit of 2: all ran and exited 0 ($rcs), at most 2 at once by their own timestamps (peak $peak)" '[ "$rcs" = 0000000000 ] && [ "$(grep -c "^s" "$work/times")" -eq 10 ] && [ "$(grep -c "^e" "$work/times")" -eq 10 ] && [ "$peak" -le 2 ] && [ "$peak" -ge 1 ]'
info "the commands' peak concurrency: $peak (2 expected on an idle machine)"
check "after them, nothing held or queued in Redis" nothing_left q

# ---- exit statuses -------------------------------------------------------------------------------
echo "# exit status"
"$D" acquire es --limit 1 -- sh -c 'exit 3'; rc=$?
check "CMD exits 3: acquire exits 3" '[ $rc -eq 3 ]'
"$D" acquire es --limit 1 -- sh -c 'kill -KILL $$'; rc=$?
check "CMD killed by SIGKILL: acquire exits 137 (128+9)" '[ $rc -eq 137 ]'
"$D" acquire es --limit 1 -- sh -c 'kill -TERM $$'; rc=$?
check "CMD killed by SIGTERM: acquire exits 143 (128+15)" '[ $rc -eq 143 ]'
"$D" acquire es --limit 1 -- no-such-command-dbt >/dev/null 2>"$work/err"; rc=$?
check "CMD not found: exit 127, said ($(cat "$work/err"))" '[ $rc -eq 127 ] && grep -q "no-such-command-dbt" "$work/err"'
printf 'echo from-a-script-without-shebang\n' >"$work/noshebang"
chmod +x "$work/noshebang"
out=$("$D" acquire es --limit 1 -- "$work/noshebang"); rc=$?
check "a script without #! runs under sh, as execvp runs it ($out)" '[ $rc -eq 0 ] && [ "$out" = from-a-script-without-shebang ]'
check "after them, nothing held or queued in Redis" nothing_left q

# ---- refusals: exit 75 after --wait --------------------------------------------------------------
echo "# --wait"
export DBTHROTTLE_LEASE=30s
# CMD says when it runs (its pid): a signal that comes before CMD started ends acquire instead.
bg "$work/hold" "$D" acquire wt --limit 1 -- sh -c 'echo $$ >"$1"; exec sleep 60' sh "$work/wt.cmd"
hold=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{wt}")" -eq 1 ] && [ -s "$work/wt.cmd" ]'
hold_seen=$?
hold_cmd=$(cat "$work/wt.cmd" 2>/dev/null)
t0=$(now_ms)
"$D" acquire wt --limit 1 --wait 500ms -- touch "$work/wt.ran" 2>"$work/err"; rc=$?
el=$(($(now_ms) - t0))
check "while another holds the only permit, --wait 500ms: exit 75 after ${el} ms, CMD not run ($(cat "$work/err"))" '[ $rc -eq 75 ] && [ ! -e "$work/wt.ran" ] && [ $el -ge 450 ] && [ $el -lt 10000 ] && grep -q "within 500ms" "$work/err"'
check "and its place left the queue (Redis: no waiter)" '[ $hold_seen -eq 0 ] && [ "$(live_waiters q "dbthrottle:{wt}")" -eq 0 ]'
"$D" acquire wt --limit 1 --wait 0 -- touch "$work/wt.ran" 2>/dev/null; rc=$?
check "--wait 0: exit 75 at once, CMD not run" '[ $rc -eq 75 ] && [ ! -e "$work/wt.ran" ]'

# ---- SIGTERM while waiting: the wait ends, exit 143 ----------------------------------------------
echo "# signals"
bg "$work/waiter" "$D" acquire wt --limit 1 --wait infinite -- touch "$work/wt.ran"
waiter=$bg
wait_until 15 '[ "$(live_waiters q "dbthrottle:{wt}")" -eq 1 ]'
waiter_seen=$?
kill -TERM "$waiter"
wait "$waiter"; rc=$?
check "SIGTERM to a waiting acquire: exit 143, CMD not run" '[ $rc -eq 143 ] && [ ! -e "$work/wt.ran" ]'
check "and its place left the queue at once (Redis: no waiter within 5 s; the lease is 30 s)" '[ $waiter_seen -eq 0 ] && wait_until 5 "[ \$(live_waiters q \"dbthrottle:{wt}\") -eq 0 ]"'
kill -TERM "$hold"
wait "$hold"; rc=$?
check "SIGTERM to the holding acquire: passed on to CMD (sleep, gone), exit 143" '[ $rc -eq 143 ] && [ -n "$hold_cmd" ] && exited "$hold_cmd"'
check "its permit is back at once (Redis: no holder within 5 s; the lease is 30 s)" '[ $hold_seen -eq 0 ] && wait_until 5 "[ \$(live_holders q \"dbthrottle:{wt}\") -eq 0 ]"'

# CMD that handles SIGTERM: it decides when to end, and the permit is held until then.
bg "$work/trap" "$D" acquire tr --limit 1 -- sh -c 'trap "echo term >\"$1\"; sleep 2; kill \$!; exit 9" TERM; echo ready >"$1.ready"; sleep 60 & wait' sh "$work/tr.got"
trap_acq=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{tr}")" -eq 1 ] && [ -s "$work/tr.got.ready" ]'
kill -TERM "$trap_acq"
wait_until 10 '[ -s "$work/tr.got" ]'
held_meanwhile=$(live_holders q "dbthrottle:{tr}")
wait "$trap_acq"; rc=$?
check "SIGTERM to acquire, CMD traps it: CMD got it once, ran its handler (held meanwhile: $held_meanwhile), acquire exits with CMD's 9" '[ "$(cat "$work/tr.got")" = term ] && [ "$held_meanwhile" -eq 1 ] && [ $rc -eq 9 ]'
check "its permit is back once CMD ended" '[ "$held_meanwhile" -eq 1 ] && wait_until 5 "[ \$(live_holders q \"dbthrottle:{tr}\") -eq 0 ]"'

# The terminal's ^C reaches the whole foreground process group (acquire and CMD): acquire does not
# send CMD a second one. CMD counts the SIGINTs it gets, in a pseudo-terminal of python's.
cat >"$work/in_terminal.py" <<'PY'
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
deadline = time.time() + 20
while b"ready" not in out and time.time() < deadline:
    out += os.read(fd, 1024)
time.sleep(0.3)
os.write(fd, b"\x03")  # the terminal's interrupt character: SIGINT to the foreground group
while time.time() < deadline:
    try:
        b = os.read(fd, 1024)
    except OSError:
        break
    if not b:
        break
    out += b
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
print("status", os.waitstatus_to_exitcode(st))
PY
cat >"$work/count_int.py" <<'PY'
import signal, sys, time
n = 0
def on_int(sig, frame):
    global n
    n += 1
signal.signal(signal.SIGINT, on_int)
print("ready", flush=True)
t = time.time()
while time.time() - t < 20 and n == 0:
    time.sleep(0.05)
time.sleep(1)  # a second SIGINT, if one were passed on, comes within this
print("sigints", n, flush=True)
sys.exit(5)
PY
python3 "$work/in_terminal.py" "$D" acquire tty --limit 1 -- python3 "$work/count_int.py" >"$work/tty.out" 2>&1
check "^C at a terminal: CMD gets the terminal's SIGINT once, not a second from acquire; exit 5 ($(tr '\n' ' ' <"$work/tty.out"))" 'grep -q "sigints 1\$" "$work/tty.out" && grep -qx "status 5" "$work/tty.out"'

# ---- SIGKILL of acquire: the lease ends the permit; CMD does not run on without it ----------------
echo "# SIGKILL"
bg "$work/k" env DBTHROTTLE_LEASE=3s "$D" acquire kp --limit 1 -- sh -c 'echo $$ >"$1"; exec sleep 60' sh "$work/k.cmd"
kacq=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{kp}")" -eq 1 ] && [ -s "$work/k.cmd" ]'
kill_seen=$?
kcmd=$(cat "$work/k.cmd")
kill -KILL "$kacq"
wait_until 20 '[ "$(live_holders q "dbthrottle:{kp}")" -eq 0 ]'
gone_ms=$waited_ms
check "SIGKILL of acquire (lease 3 s): Redis has no holder within lease + lease/3 (4 s; after ${gone_ms} ms, polling slack 1 s)" '[ $kill_seen -eq 0 ] && [ $gone_ms -ge 0 ] && [ $gone_ms -le 5000 ]'
check "and CMD got SIGTERM (it would run on without a permit)" '[ -n "$kcmd" ] && wait_until 5 "exited $kcmd"'

# ---- Redis unreachable ---------------------------------------------------------------------------
echo "# Redis unreachable"
dead=redis://127.0.0.1:$(free_port)
out=$(DBTHROTTLE_REDIS_URL=$dead "$D" acquire ru --limit 1 -- sh -c 'echo ran; exit 4' 2>"$work/err"); rc=$?
check "open (the default): CMD runs unthrottled with a warning, its exit 4 passed ($(grep acquire "$work/err"))" '[ $rc -eq 4 ] && [ "$out" = ran ] && grep -q "warning: Redis is unreachable.*runs unthrottled" "$work/err"'
out=$(DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_REDIS_URL=$dead "$D" acquire ru --limit 1 -- sh -c 'echo ran; exit 4' 2>"$work/err"); rc=$?
check "closed: exit 75 with the reason, CMD not run ($(grep acquire "$work/err"))" '[ $rc -eq 75 ] && [ -z "$out" ] && grep -q "Redis is unreachable and DBTHROTTLE_ON_REDIS_ERROR=closed" "$work/err"'
out=$(DBTHROTTLE_DISABLE=on DBTHROTTLE_REDIS_URL=$dead "$D" acquire ru -- sh -c 'echo ran; exit 4' 2>"$work/err"); rc=$?
check "DBTHROTTLE_DISABLE=on: CMD runs, said on stderr, exit 4" '[ $rc -eq 4 ] && [ "$out" = ran ] && grep -q "DBTHROTTLE_DISABLE is on" "$work/err"'

# ---- what CMD inherits ---------------------------------------------------------------------------
echo "# descriptors"
echo passed-on >"$work/fd7"
# The same listing without acquire is the caller's own (written to the same file, the same fd 1;
# readlink as a command, not a substitution, whose pipe would be sh's; the glob's own descriptor,
# closed by then, is left out).
list_fds='for f in /proc/$$/fd/*; do [ -L "$f" ] && printf "%s " "${f##*/}" && readlink "$f"; done'
sh -c "$list_fds" 7<"$work/fd7" >"$work/fds"
mv "$work/fds" "$work/fds.caller"
"$D" acquire fd --limit 1 -- sh -c "$list_fds" 7<"$work/fd7" >"$work/fds"
check "CMD inherits no descriptor of ours (no socket, no eventfd, no pipe of its guard: the $(grep -c . "$work/fds") it has open are those the same command has without acquire), and fd 7 that the caller passed" '! grep -q "socket:\|anon_inode:" "$work/fds" && cmp -s "$work/fds" "$work/fds.caller" && grep -q "^7 $work/fd7\$" "$work/fds"'

# ---- the connection kind and weights -------------------------------------------------------------
echo "# kinds and weights"
bg "$work/kc" "$D" acquire kc --kind connection --limit 1 -- sleep 60
kc=$bg
wait_until 15 '[ "$(live_holders c "dbthrottle:{kc}")" -eq 1 ]'
check "--kind connection: the permit is the pool's connection permit (Redis), none of its queries'" '[ "$(live_holders c "dbthrottle:{kc}")" -eq 1 ] && [ "$(live_holders q "dbthrottle:{kc}")" -eq 0 ]'
"$D" acquire kc --kind connection --limit 1 --wait 0 -- true 2>/dev/null; rc=$?
out=$("$D" acquire kc --limit 1 --wait 0 -- echo query-free); rc2=$?
check "another connection permit: exit 75; a query permit of the same pool: free ($out)" '[ $rc -eq 75 ] && [ $rc2 -eq 0 ] && [ "$out" = query-free ]'
kill -TERM "$kc"
wait "$kc"
bg "$work/w2" "$D" acquire wg --limit 2 --weight 2 -- sleep 60
w2=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{wg}")" -eq 1 ]'
id=$(rcli --raw zrange "dbthrottle:{wg}:q:holders" 0 0)
"$D" acquire wg --limit 2 --wait 0 -- true 2>/dev/null; rc=$?
check "--weight 2 at a limit of 2: its permit takes both units (id $id), another gets none: exit 75" '[ $rc -eq 75 ] && [ "$(echo "$id" | cut -d. -f4)" = 2 ]'
"$D" acquire wg --limit 2 --weight 3 -- true 2>"$work/err"; rc=$?
check "--weight 3 at a limit of 2: exit 2, it could never be granted" '[ $rc -eq 2 ] && grep -q "more than the limit" "$work/err"'
kill -TERM "$w2"
wait "$w2"
check "in the end, nothing held or queued in Redis (queries, connections)" '[ -n "$id" ] && nothing_left q && nothing_left c'

# ---- a signal the caller ignores stays ignored (nohup, trap "" HUP) ----------------------------
echo "# ignored signals"
bg "$work/nh.hold" "$D" acquire nh --limit 1 -- sh -c 'echo $$ >"$1"; exec sleep 60' sh "$work/nh.cmd"
nh_hold=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{nh}")" -eq 1 ] && [ -s "$work/nh.cmd" ]'
nh_hold_seen=$?
bg "$work/nh.out" sh -c 'trap "" HUP; exec "$1" acquire nh --limit 1 --wait infinite -- echo job-ran' sh "$D"
nh=$bg
wait_until 15 '[ "$(live_waiters q "dbthrottle:{nh}")" -eq 1 ]'
nh_wait_seen=$?
kill -HUP "$nh"
# A SIGHUP taken would end the wait at once (exit 129, its place gone from the queue): 3 s later,
# Redis still has it waiting.
wait_until 3 '[ "$(live_waiters q "dbthrottle:{nh}")" -eq 0 ]'
nh_ended=$?
nh_waiters=$(live_waiters q "dbthrottle:{nh}")
kill -TERM "$nh_hold"
wait "$nh_hold"
wait "$nh"; rc=$?
check "SIGHUP ignored by acquire's caller: still waiting 3 s after it (Redis: $nh_waiters waiter), then granted once the holder ended: CMD ran, exit $rc ($(tr '\n' ' ' <"$work/nh.out"))" '[ $nh_hold_seen -eq 0 ] && [ $nh_wait_seen -eq 0 ] && [ $nh_ended -ne 0 ] && [ "$nh_waiters" -eq 1 ] && [ $rc -eq 0 ] && grep -qx job-ran "$work/nh.out"'
check "and nothing of it is left in Redis" 'nothing_left q "dbthrottle:{nh}"'

# ---- what the job leaves behind, and a permit lost while it runs ---------------------------------
echo "# the job's leftovers and a lost permit"
# CMD exits and leaves a process in the background: it is ended before the permit is released.
"$D" acquire lo --limit 1 -- sh -c 'sleep 60 & echo $! >"$1"' sh "$work/lo.pid"; rc=$?
lo=$(cat "$work/lo.pid" 2>/dev/null)
check "CMD left a background sleep and exited 0: acquire exits 0 once the sleep is ended too (no process left, nothing held)" '[ $rc -eq 0 ] && [ -n "$lo" ] && exited "$lo" && nothing_left q "dbthrottle:{lo}"'
# An orphan of CMD's (the subshell's sleep) comes to the guard, CMD's parent, when its parent
# exits; once it exits too, the guard reaps it: no zombie among the guard's children.
# (The guard's children's states from /proc, not ps: a fresh machine has no procps.)
out=$("$D" acquire zb --limit 1 -- sh -c '(sleep 0.1 &); sleep 1
    for f in /proc/[0-9]*/stat; do
        s=$(sed "s/.*) //" "$f" 2>/dev/null) || continue
        set -- $s
        [ "${2:-}" = "$PPID" ] && echo "$1"
    done
    true' 2>&1); rc=$?
check "an orphan of CMD's that exited is reaped by the guard: no zombie among its children (states: $(echo $out))" '[ $rc -eq 0 ] && [ -n "$out" ] && ! echo "$out" | grep -q Z'
# A permit lost while CMD runs (Redis stopped past the lease): closed ends CMD, open says so at once.
for mode in closed open; do
    rm -f "$work/ll.cmd"
    bg "$work/ll.$mode" env DBTHROTTLE_LEASE=1s DBTHROTTLE_REDIS_TIMEOUT=200ms DBTHROTTLE_ON_REDIS_ERROR=$mode "$D" acquire ll --limit 1 -- sh -c 'echo $$ >"$1"; exec sleep 60' sh "$work/ll.cmd"
    ll=$bg
    wait_until 15 '[ "$(live_holders q "dbthrottle:{ll}")" -eq 1 ] && [ -s "$work/ll.cmd" ]'
    ll_seen=$?
    ll_cmd=$(cat "$work/ll.cmd")
    kill -STOP "$redis_pid"
    if [ $mode = closed ]; then
        wait_until 10 'exited "$ll"'
        ll_ended=$?
        kill -CONT "$redis_pid"
        wait "$ll"; rc=$?
        check "closed: Redis stopped past the 1 s lease while CMD runs: CMD ended, acquire exits 143 and says why ($(grep acquire "$work/ll.$mode"))" '[ $ll_seen -eq 0 ] && [ $ll_ended -eq 0 ] && [ $rc -eq 143 ] && exited "$ll_cmd" && grep -q "permit of ll was lost.*closed, so sh is ended" "$work/ll.$mode"'
    else
        wait_until 10 'grep -q "permit of ll was lost" "$work/ll.$mode"'
        ll_said=$?
        kill -CONT "$redis_pid"
        check "open: the lost permit is said while CMD still runs ($(grep acquire "$work/ll.$mode"))" '[ $ll_seen -eq 0 ] && [ $ll_said -eq 0 ] && ! exited "$ll_cmd" && ! exited "$ll"'
        kill -TERM "$ll"
        wait "$ll"
    fi
done
check "and nothing of them is left in Redis" 'wait_until 5 "nothing_left q \"dbthrottle:{ll}\""'

# ---- a killed acquire's job, judged at the server ------------------------------------------------
# make chaos seed 12: acquire SIGKILLed while its psql ran a statement; its permit came back after
# the lease while the statement ran on at the server. Limit 1, lease 1 s: CMD (psql, and psql under
# sh -c, which a parent-death signal of sh's would not reach) is in dbt_probe(8000) when acquire is
# SIGKILLed; a second acquire then runs a probe. The advisory-lock counter says how many ran at once.
echo "# SIGKILL of acquire: its job and its statement end before the permit returns"
pg_start
counter_install
# What CMD's libpq connections ask of the server, as the server says it.
out=$(env -u PGOPTIONS DBTHROTTLE_LEASE=1s "$D" acquire po --limit 1 -- psql -qAtX -c 'show client_connection_check_interval' 2>&1)
check "CMD's psql asks for client_connection_check_interval: the server's session has $out (auto, lease/4)" '[ "$out" = 250ms ]'
out=$(PGOPTIONS='-c work_mem=7MB' DBTHROTTLE_LEASE=1s "$D" acquire po --limit 1 -- psql -qAtX -c 'show work_mem' -c 'show client_connection_check_interval' 2>&1 | tr '\n' ' ')
check "the caller's PGOPTIONS is kept, ours appended (the server: $out)" '[ "$out" = "7MB 250ms " ]'
out=$(PGOPTIONS='-c client_connection_check_interval=3s' "$D" acquire po --limit 1 -- psql -qAtX -c 'show client_connection_check_interval' 2>&1)
check "a PGOPTIONS that names the setting is left as it is (the server: $out)" '[ "$out" = 3s ]'
out=$(env -u PGOPTIONS DBTHROTTLE_SERVER_CHECK_INTERVAL=off "$D" acquire po --limit 1 -- sh -c 'echo "${PGOPTIONS-unset}"' 2>&1)
check "DBTHROTTLE_SERVER_CHECK_INTERVAL=off: PGOPTIONS left unset ($out)" '[ "$out" = unset ]'
# kj CASE CMD...: runs acquire -- CMD, kills it mid-probe, then a second acquirer's probe.
kj() {
    kj_case=$1
    shift
    mark
    bg "$work/kj.$kj_case" env DBTHROTTLE_LEASE=1s PGAPPNAME=kj "$D" acquire kj --limit 1 -- "$@"
    kj_acq=$bg
    wait_until 20 '[ "$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = '"'kj'"' and query like '"'%dbt_probe(8000)%'"' and state = '"'active'"'")" -eq 1 ]'
    kj_seen=$?
    kj_backend=$(psql -qAtX -c "select pid from pg_stat_activity where application_name = 'kj' and query like '%dbt_probe(8000)%' and state = 'active'")
    kill -KILL "$kj_acq"
    wait "$kj_acq" 2>/dev/null
    # The second acquirer queues at once: it is granted when the killed one's lease lapses.
    bg "$work/kj2.$kj_case" env DBTHROTTLE_LEASE=1s PGAPPNAME=kj "$D" acquire kj --limit 1 --wait 30s -- psql -qAtX -c 'select dbt_probe(300)'
    kj_second=$bg
    # The backend gone within lease + check interval (250 ms: auto, lease/4), polling slack 1 s.
    wait_until 20 '[ "$(psql -qAtX -c "select count(*) from pg_stat_activity where pid = ${kj_backend:-0}")" -eq 0 ]'
    kj_gone=$waited_ms
    wait "$kj_second"
    kj_rc=$?
    kj_max=$(max_conc kj)
    kj_n=$(probes kj)
    check "$kj_case: acquire SIGKILLed mid-statement (lease 1 s), a second acquire's probe ran (exit $kj_rc): at most 1 at once at the server (counted $kj_max in $kj_n probes)" '[ $kj_seen -eq 0 ] && [ $kj_rc -eq 0 ] && [ "$kj_n" -eq 2 ] && [ "$kj_max" -eq 1 ]'
    check "$kj_case: the orphan's backend left pg_stat_activity within lease + check interval (after ${kj_gone} ms, polling slack 1 s)" '[ -n "$kj_backend" ] && [ $kj_gone -ge 0 ] && [ $kj_gone -le 2250 ]'
    check "$kj_case: nothing of it left in Redis" 'wait_until 5 "nothing_left q \"dbthrottle:{kj}\""'
}
kj psql psql -qAtX -c 'select dbt_probe(8000)'
kj "sh -c psql" sh -c 'psql -qAtX -c "select dbt_probe(8000)"; echo after'

summary
