# fleet_state_visible.sh - every process that uses the library with a limit is listed by
# `dbthrottle status --json`, read from Redis by the command, in the state it is really in. Four
# real workers on one pool (lease 3 s): one throttling, one disabled (DBTHROTTLE_DISABLE=on with a
# limit set), and two cut off from Redis (the Unix socket they reach it through is taken away,
# their connections killed) while the command still reads Redis over TCP: the one in open mode is
# listed as running unthrottled, the one in closed mode as refusing. Once the socket is back, the
# open one reports how many commands it ran unthrottled, which the PostgreSQL log bounds from
# outside (the probes it ran during the cut), and the closed one how many it refused. Their logs
# say so at warn level, a line per stretch rather than per command, and their exit summaries count
# refusals and unthrottled commands apart.
echo "# fleet_state_visible: throttling, unthrottled, refusing and disabled workers in status --json"
D=$top/build/dbthrottle
fport=$(free_port)
fsock=$work/fleet.sock
redis-server --port "$fport" --bind 127.0.0.1 --unixsocket "$fsock" --unixsocketperm 700 \
    --save "" --appendonly no --dir "$work" --logfile "$work/fleet-redis.log" &
fpid=$!
echo "$fpid" >>"$work/pids"
wait_until 10 "redis-cli -p $fport ping 2>/dev/null | grep -q PONG" || fail "fleet_state_visible: its Redis did not start"
fcli() { redis-cli -p "$fport" "$@"; }
# fleet_json > FILE: the fleet's state as the command reads it, over TCP.
fleet_json() { "$D" status --json --redis "redis://127.0.0.1:$fport"; }
# fleet STATE_OF... : python over the last status (d = the document, by_pid = processes by pid);
# false while a process it names is not listed (a worker cut off for longer than its record's
# life is listed again at its next report).
fleet() {
    fleet_json >"$work/fleet.json" 2>"$work/fleet.err" || return 1
    python3 - "$work/fleet.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
by_pid = {p["pid"]: p for p in d.get("processes", [])}
try:
    sys.exit(0 if eval(sys.argv[2]) else 1)
except KeyError:
    sys.exit(1)
PY
}
common="DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=500ms DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_POOL=fleet DBTHROTTLE_LOG_LEVEL=warn"
tcp=DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$fport
sock=DBTHROTTLE_REDIS_URL=unix://$fsock
wargs="-n 0 -s 50"
spawn "$work/fl.thr" PGAPPNAME=fl_thr $common $tcp DBTHROTTLE_LOG="$work/fl.thr.log"
thr=$spawned
spawn "$work/fl.dis" PGAPPNAME=fl_dis $common $tcp DBTHROTTLE_DISABLE=on DBTHROTTLE_LOG="$work/fl.dis.log"
dis=$spawned
spawn "$work/fl.open" PGAPPNAME=fl_open $common $sock DBTHROTTLE_ON_REDIS_ERROR=open DBTHROTTLE_LOG="$work/fl.open.log"
opn=$spawned
spawn "$work/fl.closed" PGAPPNAME=fl_closed $common $sock DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_LOG="$work/fl.closed.log"
cls=$spawned
wargs=

all4="all(p in by_pid for p in ($thr, $dis, $opn, $cls))"
states="[by_pid[p]['state'] for p in ($thr, $dis, $opn, $cls)]"
check "fleet_state_visible: the four workers are listed, three throttling and one disabled" \
    wait_until 20 "fleet \"$all4 and $states == ['throttling', 'disabled', 'throttling', 'throttling']\""
check "fleet_state_visible: each is listed with host, pid, program, version and pool" 'python3 - "$work/fleet.json" "$thr" "$(hostname)" <<PY
import json, sys
d = json.load(open(sys.argv[1])); pid = int(sys.argv[2]); host = sys.argv[3]
p = [p for p in d["processes"] if p["pid"] == pid][0]
assert p["host"] == host and p["program"] == "fault_worker" and p["version"] and p["pools"] == ["fleet"], p
assert p["on_redis_error"] == "open" and p["last_outage"] is None and p["unthrottled_commands"] == 0, p
PY'
grep -q '"state":"disabled","reason":"DBTHROTTLE_DISABLE=on"' "$work/fleet.json" && ok "fleet_state_visible: the disabled worker says why" || fail "fleet_state_visible: the disabled worker says why ($(cat "$work/fleet.json"))"

# The cut: the socket goes (no reconnect can succeed), and its connections are killed.
mv "$fsock" "$fsock.away"
cut_ms=$(now_ms)
# Until none is left, twice 200 ms apart: a connect that completed in the kernel before the move is
# accepted by Redis after, and a connection that was not in the list survived the cut (one loaded
# run: the open worker counted 18 unthrottled commands, having reached Redis again, while the
# server ran 124 of its probes in the cut).
kill_socket_clients() {
    ks_n=0
    for id in $(fcli client list | grep "laddr=$fsock" | sed 's/^id=\([0-9]*\) .*/\1/'); do
        fcli client kill id "$id" >/dev/null
        ks_n=$((ks_n + 1))
    done
    [ $ks_n -eq 0 ]
}
kill_socket_clients || :
# The probes counted from here: until its connections are killed the worker still reaches Redis
# (on a loaded machine the kills took long enough for 3 more throttled probes of 50 ms).
mark
ks_quiet=0 ks_rounds=0
while [ $ks_quiet -lt 2 ] && [ $ks_rounds -lt 50 ]; do
    if kill_socket_clients; then ks_quiet=$((ks_quiet + 1)); else ks_quiet=0; fi
    ks_rounds=$((ks_rounds + 1))
    sleep 0.2
done
check "fleet_state_visible: cut off, the open-mode worker is listed as running unthrottled and the closed-mode one as refusing, the others unchanged" \
    wait_until 20 "fleet \"$states == ['throttling', 'disabled', 'unthrottled', 'refusing'] and 'cut off from Redis' in by_pid[$opn]['reason']\""
sleep 1
cut_probes=$(probes fl_open)
mv "$fsock.away" "$fsock"
back_ms=$(now_ms)
check "fleet_state_visible: Redis back, both report the outage: the open one its unthrottled commands, the closed one its refusals" \
    wait_until 20 "fleet \"$states == ['throttling', 'disabled', 'throttling', 'throttling'] and by_pid[$opn]['last_outage'] and by_pid[$opn]['last_outage']['until_ms'] and by_pid[$cls]['last_outage'] and by_pid[$cls]['last_outage']['refused_commands'] > 0\""
outage_of() {
    python3 -c "import json, sys; print([p for p in json.load(open('$work/fleet.json'))['processes'] if p['pid'] == $1][0]['last_outage']['$2'])"
}
reported=$(outage_of "$opn" unthrottled_commands)
check "fleet_state_visible: the unthrottled count it reports ($reported) covers the probes the server ran during the cut ($cut_probes)" \
    '[ "$reported" -ge $((cut_probes - 2)) ] && [ "$cut_probes" -ge 10 ]'
# One outage from the cut, however its connections died: a reply read after the first failure to
# a call sent before it, or a connection Redis accepted from its backlog after the cut and the test
# killed, must not end it and begin another (status then showed the cost of the last piece only).
since_o=$(outage_of "$opn" since_ms)
since_c=$(outage_of "$cls" since_ms)
check "fleet_state_visible: the outage both report began with the cut (open $((since_o - cut_ms)) ms, closed $((since_c - cut_ms)) ms after it), one outage however its connections died" \
    '[ $((since_o - cut_ms)) -ge -50 ] && [ $((since_o - cut_ms)) -le 1500 ] && [ $((since_c - cut_ms)) -ge -50 ] && [ $((since_c - cut_ms)) -le 1500 ]'

for p in $thr $dis $opn $cls; do kill -TERM "$p" 2>/dev/null; done
wait_workers
# Counted once the worker has exited: a command is counted unthrottled as it is sent, and the
# renewal that reports the count can reach Redis before that command's probe starts at the
# server (one run read 128 reported against 127 probes in the log).
since_cut=$(probes fl_open)
info "open worker: $reported commands reported unthrottled; the server ran $cut_probes of its probes in the $((back_ms - cut_ms)) ms cut, $since_cut from the cut to the worker's exit"
check "fleet_state_visible: the unthrottled count it reports ($reported) is no more than the probes the server ran from the cut to the worker's exit ($since_cut)" \
    '[ "$reported" -le "$since_cut" ]'
opn_lines=$(grep -c "level=warn event=unthrottled" "$work/fl.open.log")
cls_lines=$(grep -c "level=warn event=refused" "$work/fl.closed.log")
# One line, then at most one per 10 s while it lasts (plus the second of backoff after it).
most=$((2 + (back_ms - cut_ms) / 10000))
check "fleet_state_visible: the cut is in the workers' logs at warn level, at most $most lines, not one per command (open: $opn_lines unthrottled lines for $reported commands; closed: $cls_lines refused lines)" \
    '[ "$opn_lines" -ge 1 ] && [ "$opn_lines" -le "$most" ] && [ "$cls_lines" -ge 1 ] && [ "$cls_lines" -le "$most" ]'
check "fleet_state_visible: the exit summaries count apart: open unthrottled=N refusals=0, closed refusals=N unthrottled=0 ($(grep -h event=summary "$work/fl.open.log" "$work/fl.closed.log" | sed 's/.*\(refusals=[0-9]* unthrottled=[0-9]*\).*/\1/' | tr '\n' ' '))" \
    'grep "event=summary" "$work/fl.open.log" | grep -q "refusals=0 unthrottled=[1-9]" && grep "event=summary" "$work/fl.closed.log" | grep -q "refusals=[1-9][0-9]* unthrottled=0"'
check "fleet_state_visible: the workers that exited are no longer listed" \
    wait_until 10 "fleet \"not any(p in by_pid for p in ($thr, $dis, $opn, $cls))\""
kill -9 "$fpid" 2>/dev/null
wait "$fpid" 2>/dev/null
