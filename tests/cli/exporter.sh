#!/bin/sh
# exporter.sh - dbthrottle exporter scraped by a real HTTP client (curl), against a redis-server
# and a PostgreSQL this script starts (and stops) on free loopback ports: dbthrottle_up through a
# Redis outage (killed, then stopped: a scrape still answers within its --timeout), build_info,
# the wait and hold histograms against the grants psql sessions made, values without float
# noise, a pool name that is not UTF-8 (escaped in labels, text and JSON, the raw name usable),
# a Unix socket, SIGTERM; then status' error forms, status of a pool that never existed, top -b
# without escape codes, and drain --wait (returns once the holder's permit is released; at its
# timeout names the holder); then names checked by RFC 3629 (promtool accepts the scrape), names
# that would show alike (a\xff as text and as a byte) kept apart, drain --wait of one kind, drain
# --wait against a stopped holder whose lease lapsed, status --prometheus of a missing pool, HEAD's
# Content-Length and the holders' HELP. Each check prints one line; the last line is "N passed, N failed",
# and the exit status is non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin cli-exporter

export DBTHROTTLE_LOG_LEVEL=warn
redis_start
pg_start
counter_install

# bg OUT CMD...: runs CMD in the background, its pid in $bg (killed at the end in any case).
bg() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
# scrape URL OUT [CURL OPTIONS...]: GETs URL into OUT; the HTTP status in $code, the time in $took_ms.
scrape() {
    sc_url=$1 sc_out=$2
    shift 2
    sc_t0=$(now_ms)
    code=$(curl -s --max-time 30 -o "$sc_out" -w '%{http_code}' "$@" "$sc_url")
    took_ms=$(($(now_ms) - sc_t0))
}
# sample FILE NAME{LABELS}: the value of that sample ("" when absent).
sample() { [ -e "$1" ] && awk -v s="$2" '$1 == s { print $2 }' "$1"; }
# exposition FILE: every line is a HELP, a TYPE or a well-formed sample of a HELPed and TYPEd
# family; the text is UTF-8; values carry no float noise (the shortest text that reads back).
exposition() {
    python3 - "$1" <<'PY'
import re, sys
raw = open(sys.argv[1], "rb").read()
text = raw.decode("utf-8")  # a label value must be UTF-8: raises otherwise
typed = {}
label = r'[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"'
for line in text.splitlines():
    m = re.match(r"# (HELP|TYPE) (dbthrottle_[a-z_]+) (.+)$", line)
    if m:
        if m.group(1) == "TYPE":
            assert m.group(3) in ("gauge", "counter", "histogram"), line
            typed[m.group(2)] = m.group(3)
        continue
    m = re.match(r"(dbthrottle_[a-z_]+)(\{%s(?:,%s)*\})? (\S+)$" % (label, label), line)
    assert m, line
    name, value = m.group(1), m.group(3)
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    fam = base if typed.get(base) == "histogram" else name
    assert fam in typed, line
    if value in ("+Inf", "NaN"):
        continue
    v = float(value)
    shortest = str(int(v)) if v == int(v) and abs(v) < 2**53 else repr(v)
    assert value == shortest, "float noise: %s (shortest %s)" % (line, shortest)
PY
}

# ---- the exporter, up -----------------------------------------------------------------------------
echo "# exporter"
out=$("$D" exporter --help); rc=$?
check "exporter --help: exit 0 and a usage line" '[ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^usage: dbthrottle exporter"'
"$D" exporter --no-such-option >/dev/null 2>"$work/err"; rc=$?
check "exporter --no-such-option: exit 2, one line naming it" '[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "no-such-option" "$work/err"'
"$D" exporter --listen nonsense >/dev/null 2>"$work/err"; rc=$?
check "exporter --listen nonsense: exit 1, said ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -q "HOST:PORT or unix:/PATH" "$work/err"'
bg "$work/exp.err" env DBTHROTTLE_LOG="$work/exp.log" "$D" exporter --listen 127.0.0.1:0 --timeout 1s
exp=$bg
wait_until 10 'grep -q "listening on" "$work/exp.err"'
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/exp.err")
url=http://127.0.0.1:$port/metrics
check "exporter: says where it listens (port '$port')" '[ -n "$port" ]'
scrape "$url" "$work/m0"
check "exporter: GET /metrics answers 200 with dbthrottle_up 1 (http $code)" '[ "$code" = 200 ] && [ "$(sample "$work/m0" dbthrottle_up)" = 1 ]'
version=$(sed -n 's/^dbthrottle_build_info{version="\([^"]*\)"} 1$/\1/p' "$work/m0")
check "exporter: dbthrottle_build_info{version=\"$version\"} 1" 'echo "$version" | grep -Eq "^[0-9]+\.[0-9]+\.[0-9]+"'
if "$D" --version >/dev/null 2>&1; then
    check "exporter: build_info's version is the command's ($("$D" --version))" '[ "$("$D" --version)" = "dbthrottle $version" ]'
fi
check "exporter: dbthrottle_scrape_duration_seconds is there" '[ -n "$(sample "$work/m0" dbthrottle_scrape_duration_seconds)" ]'
scrape "http://127.0.0.1:$port/other" "$work/404"
check "exporter: another path answers 404 (http $code)" '[ "$code" = 404 ]'
check "exporter: the exposition is well formed" exposition "$work/m0"

# ---- histograms against the grants psql made ------------------------------------------------------
echo "# histograms"
mark
for i in 1 2 3; do
    env PGAPPNAME=t_hist "$D" run --max-queries 1 --pool hp -- psql -qAtX -c "SELECT dbt_probe(50)" >/dev/null
done
# Each psql's release is sent as it exits, not awaited: poll for it.
wait_until 10 '[ "$(live_holders q "dbthrottle:{hp}")" -eq 0 ]'
wait_until 10 'scrape "$url" "$work/m1"; [ "$(sample "$work/m1" "dbthrottle_hold_seconds_count{pool=\"hp\",kind=\"query\",class=\"\"}")" = 3 ]'
grants=$(sample "$work/m1" 'dbthrottle_grants_total{pool="hp",kind="query"}')
wcount=$(sample "$work/m1" 'dbthrottle_wait_seconds_count{pool="hp",kind="query",class=""}')
hcount=$(sample "$work/m1" 'dbthrottle_hold_seconds_count{pool="hp",kind="query",class=""}')
winf=$(sample "$work/m1" 'dbthrottle_wait_seconds_bucket{pool="hp",kind="query",class="",le="+Inf"}')
check "histograms: 3 probes ran ($(probes t_hist)), 3 grants ($grants); wait _count $wcount, hold _count $hcount, le=+Inf $winf: all 3" '[ "$(probes t_hist)" = 3 ] && [ "$grants" = 3 ] && [ "$wcount" = 3 ] && [ "$hcount" = 3 ] && [ "$winf" = 3 ]'
check "histograms: buckets cumulative, le from 0.001 to 60 then +Inf, hold _sum >= 3 x 50 ms" 'python3 - "$work/m1" <<PY
import re, sys
les, vals, hsum = [], [], None
for line in open(sys.argv[1]):
    m = re.match(r"dbthrottle_hold_seconds_bucket\{pool=\"hp\",kind=\"query\",class=\"\",le=\"([^\"]+)\"\} (\d+)$", line)
    if m:
        les.append(m.group(1)); vals.append(int(m.group(2)))
    m = re.match(r"dbthrottle_hold_seconds_sum\{pool=\"hp\",kind=\"query\",class=\"\"\} (\S+)$", line)
    if m:
        hsum = float(m.group(1))
assert les == ["0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"], les
assert vals == sorted(vals) and vals[-1] == 3, vals
assert hsum is not None and hsum >= 0.15, hsum
PY'
# A known value: 1061 ms of waiting in all reads 1.061, not 1.0609999999999999.
rcli hset "dbthrottle:{fp}:q:stats" grants 1 wait_ms 1061 >/dev/null
"$D" status --prometheus fp >"$work/fp.prom"
check "values without float noise: wait_seconds_total of 1061 ms is $(sample "$work/fp.prom" 'dbthrottle_wait_seconds_total{pool="fp",kind="query"}')" '[ "$(sample "$work/fp.prom" "dbthrottle_wait_seconds_total{pool=\"fp\",kind=\"query\"}")" = 1.061 ]'
scrape "$url" "$work/m2"
check "status --prometheus and the exporter print the same samples (but the scrape duration)" '[ "$(grep -v "^dbthrottle_scrape_duration" "$work/fp.prom" | grep "{pool=\"fp\"" )" = "$(grep "{pool=\"fp\"" "$work/m2")" ] && grep -q "^dbthrottle_up 1$" "$work/fp.prom"'

# ---- a pool name that is not UTF-8 ----------------------------------------------------------------
echo "# names"
raw=$(printf 'n\377x')
env PGAPPNAME=t_raw "$D" run --max-queries 1 --pool "$raw" -- psql -qAtX -c "SELECT 1" >/dev/null
"$D" status --prometheus >"$work/m3"
check "a pool name that is not UTF-8: its label is n\\xffx, the exposition UTF-8 and well formed" 'grep -q "^dbthrottle_grants_total{pool=\"n\\\\\\\\xffx\",kind=\"query\"} 1$" "$work/m3" && exposition "$work/m3"'
"$D" status "$raw" >"$work/raw.txt"; rc=$?
check "status RAW: the raw name is usable (exit $rc), shown as \"n\\xffx\"" '[ $rc -eq 0 ] && grep -q "^pool \"n\\\\xffx\" query: limit 1" "$work/raw.txt"'
"$D" status --json "$raw" >"$work/raw.json"
check "status --json: name \"n\\\\xffx\", name_raw 6eff78 (hex)" 'python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))[\"pools\"][0]
assert p[\"name\"] == \"n\\\\xffx\" and p[\"name_raw\"] == \"6eff78\", p
assert bytes.fromhex(p[\"name_raw\"]) == b\"n\\xffx\"
" "$work/raw.json"'
out=$("$D" drain "$raw" && "$D" resume "$raw"); rc=$?
check "drain and resume take the raw name (exit $rc)" '[ $rc -eq 0 ] && echo "$out" | grep -q "^pool \"n\\\\xffx\" query: draining" && echo "$out" | grep -q "^pool \"n\\\\xffx\" query: resumed"'

# ---- status' error forms --------------------------------------------------------------------------
echo "# status"
"$D" status --json --redis redis://127.0.0.1:1 >"$work/e.json" 2>/dev/null; rc=$?
check "status --json with Redis unreachable: exit 1, {\"error\": ...} ($(cat "$work/e.json"))" '[ $rc -eq 1 ] && python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert list(d) == [\"error\"] and d[\"error\"]" "$work/e.json"'
"$D" status --prometheus --redis redis://127.0.0.1:1 >"$work/e.prom" 2>/dev/null; rc=$?
check "status --prometheus with Redis unreachable: exit 1, dbthrottle_up 0 and build_info" '[ $rc -eq 1 ] && [ "$(sample "$work/e.prom" dbthrottle_up)" = 0 ] && grep -q "^dbthrottle_build_info{" "$work/e.prom" && ! grep -q "{pool=" "$work/e.prom"'
"$D" status never-was >"$work/nw.out" 2>"$work/nw.err"; rc=$?
check "status of a pool that never existed: exit 1 ($(cat "$work/nw.err"))" '[ $rc -eq 1 ] && grep -q "no pool \"never-was\" under the key prefix \"dbthrottle:\"" "$work/nw.err"'
"$D" status --json never-was >"$work/nw.json" 2>/dev/null; rc=$?
check "status --json of a pool that never existed: exit 1, the error form" '[ $rc -eq 1 ] && grep -q "\"error\"" "$work/nw.json"'
"$D" status hp >/dev/null 2>&1; rc=$?
check "status of a pool that exists: exit 0" '[ $rc -eq 0 ]'

# ---- top -b ---------------------------------------------------------------------------------------
echo "# top"
"$D" top -b -n 2 -d 0.2 >"$work/top.out" 2>&1; rc=$?
check "top -b -n 2: exit 0, 2 frames, no ESC byte" '[ $rc -eq 0 ] && [ "$(grep -c "^dbthrottle top" "$work/top.out")" -eq 2 ] && ! grep -q "$(printf "\033")" "$work/top.out" && grep -q "^pool \"hp\" query" "$work/top.out"'
"$D" top -n 1 >"$work/top2.out" 2>&1; rc=$?
check "top -n 1 into a file (no -b): exit 0, one plain frame, no ESC byte" '[ $rc -eq 0 ] && [ "$(grep -c "^dbthrottle top" "$work/top2.out")" -eq 1 ] && ! grep -q "$(printf "\033")" "$work/top2.out"'

# ---- Redis away: up 0 and only the series that need no Redis ---------------------------------------
echo "# outage"
redis_kill
scrape "$url" "$work/m4"
check "Redis killed: 200, dbthrottle_up 0, build_info and the scrape duration still there (http $code)" '[ "$code" = 200 ] && [ "$(sample "$work/m4" dbthrottle_up)" = 0 ] && grep -q "^dbthrottle_build_info{" "$work/m4" && grep -q "^dbthrottle_scrape_duration_seconds " "$work/m4"'
check "Redis killed: no pool series at all" '! grep -q "{pool=" "$work/m4" && exposition "$work/m4"'
check "Redis killed: the failed scrape is in DBTHROTTLE_LOG's file ($(grep -c scrape_failed "$work/exp.log" 2>/dev/null) lines)" 'grep -q "level=warn event=scrape_failed error=" "$work/exp.log"'
kill -HUP "$exp"
scrape "$url" "$work/m4b"
check "SIGHUP (logrotate) does not end the exporter: it answers on" '[ "$code" = 200 ] && kill -0 "$exp"'
redis_start
wait_until 10 'scrape "$url" "$work/m5"; [ "$(sample "$work/m5" dbthrottle_up)" = 1 ]'
check "Redis back: dbthrottle_up 1 again, without restarting the exporter" '[ "$(sample "$work/m5" dbthrottle_up)" = 1 ]'
kill -STOP "$redis_pid"
scrape "$url" "$work/m6"
kill -CONT "$redis_pid"
check "Redis stopped (SIGSTOP): the scrape still answers, up 0, in ${took_ms} ms (--timeout 1s; bound 5 s)" '[ "$code" = 200 ] && [ "$(sample "$work/m6" dbthrottle_up)" = 0 ] && [ "$took_ms" -lt 5000 ]'
wait_until 10 'scrape "$url" "$work/m7"; [ "$(sample "$work/m7" dbthrottle_up)" = 1 ]'
check "Redis resumed: up 1" '[ "$(sample "$work/m7" dbthrottle_up)" = 1 ]'
kill -TERM "$exp"
wait_until 10 '! kill -0 "$exp" 2>/dev/null'
wait "$exp"
rc=$?
check "SIGTERM: the exporter stops with exit 0 (exit $rc)" '[ $rc -eq 0 ]'

# ---- a Unix socket --------------------------------------------------------------------------------
bg "$work/unix.err" "$D" exporter --listen "unix:$work/m.sock"
uexp=$bg
wait_until 10 '[ -S "$work/m.sock" ]'
scrape http://localhost/metrics "$work/m8" --unix-socket "$work/m.sock"
check "unix socket: GET /metrics answers, up 1 (http $code)" '[ "$code" = 200 ] && [ "$(sample "$work/m8" dbthrottle_up)" = 1 ]'
kill -INT "$uexp"
wait_until 10 '! kill -0 "$uexp" 2>/dev/null'
wait "$uexp"
rc=$?
check "unix socket: SIGINT stops it (exit $rc) and the socket file goes" '[ $rc -eq 0 ] && [ ! -e "$work/m.sock" ]'

# ---- drain --wait ---------------------------------------------------------------------------------
echo "# drain --wait"
bg "$work/dw.hold" env PGAPPNAME=dw_app "$D" run --max-queries 1 --pool dw -- psql -qAtX -c "SELECT pg_sleep(60)"
holder=$bg
wait_until 10 '[ "$(live_holders q "dbthrottle:{dw}")" -eq 1 ]'
backend=$(psql -qAtX -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'dw_app'")
"$D" drain dw --wait --timeout 1s >"$work/dw1.out" 2>"$work/dw1.err"; rc=$?
check "drain --wait --timeout 1s while psql (pid $holder) holds: exit 1, names it ($(head -2 "$work/dw1.err" | tail -1))" '[ $rc -eq 1 ] && grep -q "1 unit still held after 1.0s" "$work/dw1.err" && grep -q "host $(hostname) pid $holder" "$work/dw1.err"'
check "drain --wait's timeout names the holder's backend pid ($backend), application_name and state" 'grep -q "backend pid $backend application_name \"dw_app\" state running" "$work/dw1.err"'
# A newcomer queues behind the drain: the oldest wait grows.
bg "$work/dw.wait" env PGAPPNAME=dw_wait "$D" run --max-queries 1 --pool dw -- psql -qAtX -c "SELECT 7"
waiter=$bg
wait_until 10 '[ "$(live_waiters q "dbthrottle:{dw}")" -eq 1 ]'
wait_until 10 'scrape_ok=$("$D" status --prometheus dw | sample /dev/stdin "dbthrottle_oldest_wait_seconds{pool=\"dw\",kind=\"query\"}"); [ -n "$scrape_ok" ] && [ "$scrape_ok" != 0 ]'
check "a waiter queued: dbthrottle_oldest_wait_seconds{pool=\"dw\"} > 0 ($scrape_ok) and status shows the oldest wait" '[ -n "$scrape_ok" ] && [ "$scrape_ok" != 0 ] && "$D" status dw | grep -q "^pool \"dw\" query: limit 1, 1 holding, 1 waiting, oldest wait "'
bg "$work/dw2.out" "$D" drain dw --wait --timeout 60s
drainer=$bg
wait_until 5 'grep -q draining "$work/dw2.out"'
check "drain --wait: still waiting while the permit is held" 'kill -0 "$drainer" 2>/dev/null'
psql -qAtX -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'dw_app'" >/dev/null
wait_until 20 '! kill -0 "$drainer" 2>/dev/null'
wait "$drainer"
rc=$?
check "drain --wait: returns 0 once the holder's permit is released (psql cancelled), Redis holds none" '[ $rc -eq 0 ] && grep -q "no permit held" "$work/dw2.out" && [ "$(live_holders q "dbthrottle:{dw}")" -eq 0 ] && [ "$(live_holders c "dbthrottle:{dw}")" -eq 0 ]'
check "drain --wait: the waiter behind the drain was not granted" '[ "$(live_waiters q "dbthrottle:{dw}")" -eq 1 ] && kill -0 "$waiter" 2>/dev/null'
"$D" resume dw >/dev/null
wait_until 20 '! kill -0 "$waiter" 2>/dev/null'
check "resume: the waiter ran its query" '[ "$(cat "$work/dw.wait")" = 7 ]'
"$D" drain dw --timeout 1s >/dev/null 2>&1; rc=$?
check "drain --timeout without --wait: usage error (exit 2)" '[ $rc -eq 2 ]'


# ---- names that are not UTF-8 by RFC 3629, and names that show alike -------------------------------
echo "# strict UTF-8 and one-to-one names"
# Each is invalid UTF-8 that a lax check takes: a lead byte above F4, a surrogate, overlong forms,
# a code point above U+10FFFF, the lead bytes C0 and C1. The last name is valid (U+1F600).
bad_names="b\365\200\200\200 c\355\240\200 d\340\200\200 e\360\200\200\200 f\364\220\200\200 g\300\200 h\301\201 ok\360\237\230\200"
set --
for spec in $bad_names; do
    nm=$(printf "$spec")
    "$D" limit "$nm" 3 --create >/dev/null
    set -- "$@" "$nm"
done
"$D" status --prometheus "$@" >"$work/u8.prom"; rc=$?
check "invalid UTF-8 names: status --prometheus exit $rc, promtool check metrics accepts it ($(promtool check metrics <"$work/u8.prom" 2>&1 | head -1))" '[ $rc -eq 0 ] && promtool check metrics <"$work/u8.prom" >/dev/null 2>&1 && exposition "$work/u8.prom"'
check "invalid UTF-8 names: each byte of them shown as \\xNN (b\\xf5\\x80\\x80\\x80, c\\xed\\xa0\\x80, g\\xc0\\x80), the valid one as is" 'grep -q "^dbthrottle_limit{pool=\"b\\\\\\\\xf5\\\\\\\\x80\\\\\\\\x80\\\\\\\\x80\",kind=\"query\"} 3$" "$work/u8.prom" && grep -q "^dbthrottle_limit{pool=\"c\\\\\\\\xed\\\\\\\\xa0\\\\\\\\x80\",kind=\"query\"} 3$" "$work/u8.prom" && grep -q "^dbthrottle_limit{pool=\"g\\\\\\\\xc0\\\\\\\\x80\",kind=\"query\"} 3$" "$work/u8.prom" && grep -q "^dbthrottle_limit{pool=\"ok$(printf "\360\237\230\200")\",kind=\"query\"} 3$" "$work/u8.prom"'
"$D" status --json "$@" >"$work/u8.json"; rc=$?
check "invalid UTF-8 names: status --json (exit $rc) is UTF-8 JSON (python3 decodes it)" '[ $rc -eq 0 ] && python3 -c "
import json, sys
d = json.loads(open(sys.argv[1], \"rb\").read().decode(\"utf-8\"))
names = [p[\"name\"] for p in d[\"pools\"]]
assert \"c\\\\xed\\\\xa0\\\\x80\" in names and \"ok\\U0001f600\" in names, names
" "$work/u8.json"'
"$D" status "$@" >"$work/u8.txt"; rc=$?
check "invalid UTF-8 names: the table (exit $rc) is UTF-8 and shows \"c\\xed\\xa0\\x80\"" '[ $rc -eq 0 ] && python3 -c "import sys; open(sys.argv[1], \"rb\").read().decode(\"utf-8\")" "$work/u8.txt" && grep -q "^pool \"c\\\\xed\\\\xa0\\\\x80\" query" "$work/u8.txt"'
# A pool named with the four characters a\xff and one named with the byte a<ff>.
lit='a\xff' byte=$(printf 'a\377')
"$D" limit "$lit" 1 --create >/dev/null
"$D" limit "$byte" 2 --create >/dev/null
"$D" status --prometheus "$lit" "$byte" >"$work/al.prom"; rc=$?
dups=$(grep -v '^#' "$work/al.prom" | awk '{print $1}' | sort | uniq -d)
check "names a\\xff (text) and a<ff> (byte): exit $rc, no duplicate series (dups: '$dups')" '[ $rc -eq 0 ] && [ -z "$dups" ] && promtool check metrics <"$work/al.prom" >/dev/null 2>&1'
check "names a\\xff and a<ff>: labels a\\\\\\\\xff (a backslash doubled, then escaped) = 1 and a\\\\xff (the byte) = 2" '[ "$(sample "$work/al.prom" "dbthrottle_limit{pool=\"a\\\\\\\\\\\\\\\\xff\",kind=\"query\"}")" = 1 ] && [ "$(sample "$work/al.prom" "dbthrottle_limit{pool=\"a\\\\\\\\xff\",kind=\"query\"}")" = 2 ]'
"$D" status "$lit" "$byte" >"$work/al.txt"
"$D" status --json "$lit" "$byte" >"$work/al.json"
check "names a\\xff and a<ff>: the table shows \"a\\\\\\\\xff\" and \"a\\\\xff\", JSON names differ" 'grep -q "^pool \"a\\\\\\\\xff\" query" "$work/al.txt" && grep -q "^pool \"a\\\\xff\" query" "$work/al.txt" && python3 -c "
import json, sys
names = [p[\"name\"] for p in json.load(open(sys.argv[1]))[\"pools\"]]
assert len(set(names)) == 2, names
" "$work/al.json"'

# ---- drain --wait counts the drained kinds only ------------------------------------------------
echo "# drain --wait, one kind"
bg "$work/dq.hold" "$D" acquire dq --kind connection --limit 1 -- sleep 120
dqhold=$bg
wait_until 10 '[ "$(live_holders c "dbthrottle:{dq}")" -eq 1 ]'
t0=$(now_ms)
"$D" drain dq --queries --wait --timeout 10s >"$work/dq.out" 2>"$work/dq.err"; rc=$?
took=$(($(now_ms) - t0))
check "drain --queries --wait while only a connection permit is held: exit 0 in ${took} ms ($(cat "$work/dq.out" "$work/dq.err" | tail -1))" '[ $rc -eq 0 ] && grep -q "no permit held" "$work/dq.out" && [ "$took" -lt 9000 ] && [ "$(live_holders c "dbthrottle:{dq}")" -eq 1 ]'
"$D" drain dq --connections --wait --timeout 1s >/dev/null 2>"$work/dq2.err"; rc=$?
check "drain --connections --wait --timeout 1s: exit 1, names the connection permit only" '[ $rc -eq 1 ] && grep -q "connection permit" "$work/dq2.err" && ! grep -q "query permit" "$work/dq2.err"'
kill -TERM "$dqhold"
wait "$dqhold" 2>/dev/null
"$D" resume dq >/dev/null

# ---- drain --wait and a lease that lapsed without a release ------------------------------------
echo "# drain --wait, a lapsed lease"
bg "$work/dl.hold" env DBTHROTTLE_LEASE=1s "$D" acquire dl --limit 1 -- sleep 120
dlhold=$bg
wait_until 10 '[ "$(live_holders q "dbthrottle:{dl}")" -eq 1 ]'
# Its child by /proc (procps' pgrep is not on a minimal Debian; any thread of acquire may fork).
dl_child() { cat /proc/"$dlhold"/task/*/children 2>/dev/null | tr -s ' ' '\n' | grep -m1 .; }
wait_until 10 '[ -n "$(dl_child)" ]'
dlcmd=$(dl_child)
kill -STOP "$dlhold"
t0=$(now_ms)
"$D" drain dl --wait --timeout 60s >"$work/dl.out" 2>"$work/dl.err"; rc=$?
took=$(($(now_ms) - t0))
lapsed_in_redis=$(rcli --raw eval "local t = redis.call('TIME') return redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. (t[1] * 1000 + math.floor(t[2] / 1000)))" 1 "dbthrottle:{dl}:q:holders")
check "drain --wait while the holder (pid $dlhold) is stopped, its lease lapsed (Redis: $lapsed_in_redis lapsed, its command pid $dlcmd still runs): exit $rc in $took ms, not drained ($(head -1 "$work/dl.err"))" '[ $rc -eq 1 ] && [ "$took" -lt 50000 ] && [ "$lapsed_in_redis" -ge 1 ] && kill -0 "$dlcmd" && grep -q "1 lease lapsed without a release" "$work/dl.err" && grep -q "their holders may still run" "$work/dl.err" && grep -q "lease lapsed .* ago, never released): host $(hostname) pid $dlhold" "$work/dl.err" && ! grep -q "no permit held" "$work/dl.out"'
kill -CONT "$dlhold"
kill -TERM "$dlhold"
wait "$dlhold" 2>/dev/null
"$D" resume dl >/dev/null

# ---- status --prometheus of a missing pool, HEAD, HELP ------------------------------------------
echo "# status --prometheus, HEAD, HELP"
"$D" status --prometheus never-was-2 >"$work/nw.prom" 2>"$work/nw2.err"; rc=$?
check "status --prometheus of a pool that never existed: exit 1, up 1 (Redis was read), build_info, no pool series, the message on stderr" '[ $rc -eq 1 ] && [ "$(sample "$work/nw.prom" dbthrottle_up)" = 1 ] && grep -q "^dbthrottle_build_info{" "$work/nw.prom" && ! grep -q "{pool=" "$work/nw.prom" && grep -q "no pool \"never-was-2\"" "$work/nw2.err"'
"$D" status --prometheus dq never-was-2 >"$work/nw3.prom" 2>/dev/null; rc=$?
check "status --prometheus of one pool that exists and one that does not: exit 1, the one that exists shown" '[ $rc -eq 1 ] && [ "$(sample "$work/nw3.prom" dbthrottle_up)" = 1 ] && grep -q "{pool=\"dq\"" "$work/nw3.prom" && ! grep -q "never-was-2" "$work/nw3.prom"'
bg "$work/exp3.err" "$D" exporter --listen 127.0.0.1:0
exp3=$bg
wait_until 10 'grep -q "listening on" "$work/exp3.err"'
port3=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/exp3.err")
scrape "http://127.0.0.1:$port3/metrics" "$work/m9"
getlen=$(wc -c <"$work/m9")
headlen=$(curl -s --max-time 30 -I "http://127.0.0.1:$port3/metrics" | tr -d '\r' | sed -n 's/^[Cc]ontent-[Ll]ength: //p')
check "HEAD /metrics: Content-Length $headlen, GET's body $getlen bytes (within 40: the scrape duration varies)" '[ -n "$headlen" ] && [ "$headlen" -gt 1000 ] && [ $((headlen - getlen)) -lt 40 ] && [ $((getlen - headlen)) -lt 40 ]'
check "the exporter's scrape with all the names above passes promtool check metrics" 'promtool check metrics <"$work/m9" >/dev/null 2>&1 && exposition "$work/m9"'
check "dbthrottle_holders' HELP says units (a permit of weight w counts w)" 'grep -q "^# HELP dbthrottle_holders Units held by live leases (a permit of weight w counts w)\.$" "$work/m9"'
kill -TERM "$exp3"
wait "$exp3" 2>/dev/null

summary
