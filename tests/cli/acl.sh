#!/bin/sh
# acl.sh - the Redis ACLs of docs/operations.md, and what dbthrottle run and check verify before a
# worker starts. The users are parsed out of docs/operations.md (its "ACL SETUSER" lines), so the
# documentation and this test cannot drift apart. With them: throttled workers (the preload, real
# PostgreSQL) and every dbthrottle subcommand, with no command denied (Redis' own ACL LOG) and the
# limit held (PostgreSQL's advisory-lock counter). Then each permission the worker user needs,
# taken away in turn: dbthrottle run refuses to start the worker (exit 2, naming the command), so
# the dry run covers every command the scripts send. Then the other checks: a library that does
# not load, a wrong password, an evicting maxmemory-policy, Redis without persistence, check's
# --redis and --key-prefix, a dry run that changes nothing, no bare LD_PRELOAD in the docs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin cli-acl
tmux_sock=dbt-acl-$$
suite_cleanup() { tmux -L "$tmux_sock" kill-server 2>/dev/null; }

export DBTHROTTLE_LOG_LEVEL=warn
redis_start
pg_start
counter_install
admin_url=$DBTHROTTLE_REDIS_URL
bg() {
    out=$1
    shift
    "$@" >"$out" 2>&1 &
    bg=$!
    echo "$bg" >>"$work/pids"
}
# acl_denials USER: how many commands Redis refused that user (its ACL LOG, read as the admin).
acl_denials() { rcli ACL LOG 128 | grep -cx "$1"; }
# acl_denials_but_config USER: the same, but for CONFIG GET (which dbthrottle check tries, to read
# the persistence settings, and which the documented users lack on purpose). In each entry
# "object" comes before "username".
acl_denials_but_config() {
    rcli ACL LOG 128 | awk -v u="$1" 'key == "object" { obj = $0 } key == "username" && $0 == u && obj != "config|get" { n++ } { key = $0 } END { print n + 0 }'
}

# ---- the documented users ---------------------------------------------------------------------
echo "# the ACL users of docs/operations.md"
doc=$top/docs/operations.md
grep '^ACL SETUSER dbthrottle-' "$doc" >"$work/acl.doc"
check "docs/operations.md documents a worker and an operator user ($(wc -l <"$work/acl.doc") ACL SETUSER lines)" 'grep -q "^ACL SETUSER dbthrottle-worker " "$work/acl.doc" && grep -q "^ACL SETUSER dbthrottle-operator " "$work/acl.doc"'
# setuser LINE [PERMISSION]: runs the documented line (passwords "wpw" and "opw"), without the
# word "+PERMISSION" when one is given.
setuser() {
    # shellcheck disable=SC2046
    rcli $(echo "$1" | sed -e 's/>CHANGE-ME-worker/>wpw/; s/>CHANGE-ME-operator/>opw/' |
        tr ' ' '\n' | grep -vxF -- "+${2:-}")
}
worker_line=$(grep '^ACL SETUSER dbthrottle-worker ' "$work/acl.doc")
operator_line=$(grep '^ACL SETUSER dbthrottle-operator ' "$work/acl.doc")
out=$(setuser "$worker_line"; setuser "$operator_line")
check "the documented lines are accepted by Redis ($(echo $out))" '[ "$(echo $out)" = "OK OK" ]'
wurl=redis://dbthrottle-worker:wpw@127.0.0.1:$rport
ourl=redis://dbthrottle-operator:opw@127.0.0.1:$rport

# Every command the scripts call is granted: the workers' scripts to both users, the operator's
# (status.lua, admin.lua) to the operator (a command new in a script must be added to the doc).
# (redis.call('X', redis.pcall('X', and "(... redis.call or redis.pcall)('X'" alike)
calls() { grep -ohE "redis\.p?call\)?\('[A-Za-z]+'" "$@" | sed "s/.*('//; s/'//" | tr A-Z a-z | sort -u; }
granted() { echo "$1" | tr ' ' '\n' | grep -qxF "+$2"; }
missing=
for c in $(calls "$top"/lua/_common.lua "$top"/lua/acquire.lua "$top"/lua/release.lua "$top"/lua/cancel.lua "$top"/lua/renew.lua); do
    granted "$worker_line" "$c" || missing="$missing worker:$c"
done
for c in $(calls "$top"/lua/*.lua); do
    granted "$operator_line" "$c" || missing="$missing operator:$c"
done
check "every command the scripts call is granted to the users that run them${missing:+ (missing:$missing)}" '[ -z "$missing" ]'

# ---- what each user may write ------------------------------------------------------------------
# Every key of a pool, of each kind (lua/protocol/keys.def, the one list), as ACL DRYRUN judges a
# write of it: the worker writes the pool's state but never the operator's keys (the override,
# the drain, the class definitions, the controller's record); the operator writes them all.
echo "# what the worker and the operator may write"
op_keys="limit drain classes limit:adapt"
denied_bad= allowed_bad=
for kind in q c; do
    for suffix in $(sed -n 's/^key [A-Z_]* *\([a-z_]*\).*/\1/p' "$top/lua/protocol/keys.def") limit:adapt holders:tagged queue:tagged owners:h owners:w owners:s; do
        key="dbthrottle:{p:q:x}:$kind:$suffix"
        w=$(rcli ACL DRYRUN dbthrottle-worker SET "$key" 1 2>&1)
        o=$(rcli ACL DRYRUN dbthrottle-operator SET "$key" 1 2>&1)
        case " $op_keys " in
        *" $suffix "*) [ "$w" != OK ] || denied_bad="$denied_bad $kind:$suffix" ;;
        *) [ "$w" = OK ] || allowed_bad="$allowed_bad $kind:$suffix" ;;
        esac
        [ "$o" = OK ] || allowed_bad="$allowed_bad operator:$kind:$suffix"
    done
done
for key in "dbthrottle:{p}:wake:00000000000000aa" "dbthrottle:{p}:procs" "dbthrottle:{p}:procinfo"; do
    [ "$(rcli ACL DRYRUN dbthrottle-worker RPUSH "$key" 1 2>&1)" = OK ] || allowed_bad="$allowed_bad $key"
done
check "the worker may write every key of a pool's state (keys.def, both kinds, tags, owners, wake lists, records)${allowed_bad:+ (refused:$allowed_bad)}" '[ -z "$allowed_bad" ]'
check "the worker may not write the operator's keys ($op_keys, both kinds)${denied_bad:+ (allowed:$denied_bad)}" '[ -z "$denied_bad" ]'
w_get=$(rcli ACL DRYRUN dbthrottle-worker GET "dbthrottle:{p}:q:limit" 2>&1)
check "the worker may read them ($w_get)" '[ "$w_get" = OK ]'
# The pool's live settings (dbthrottle set): the operator's, read by every worker.
w_set=$(rcli ACL DRYRUN dbthrottle-worker SET "dbthrottle:{p}:settings" 1 2>&1)
w_sget=$(rcli ACL DRYRUN dbthrottle-worker GET "dbthrottle:{p}:settings" 2>&1)
o_set=$(rcli ACL DRYRUN dbthrottle-operator SET "dbthrottle:{p}:settings" 1 2>&1)
check "a pool's live settings: the worker reads them and may not write them, the operator may ($w_sget; $w_set; $o_set)" \
    '[ "$w_sget" = OK ] && [ "$w_set" != OK ] && [ "$o_set" = OK ]'
DBTHROTTLE_REDIS_URL="$wurl" "$D" set wop wait_timeout 1s --create >/dev/null 2>"$work/wu.set.err"; w_src=$?
check "dbthrottle set with the worker's credentials: refused (rc $w_src), nothing set" \
    '[ $w_src -ne 0 ] && [ "$(rcli EXISTS "dbthrottle:{wop}:settings")" = 0 ]'
rcli SET "dbthrottle:{wop}:q:limit_seen" 2 >/dev/null
DBTHROTTLE_REDIS_URL="$wurl" "$D" limit wop 50 --create >/dev/null 2>"$work/wu.limit.err"; w_rc=$?
DBTHROTTLE_REDIS_URL="$wurl" "$D" drain wop --create >/dev/null 2>"$work/wu.drain.err"; w_drc=$?
check "dbthrottle limit and drain with the worker's credentials: refused (rc $w_rc, $w_drc: $(head -c 200 "$work/wu.limit.err")), nothing set" \
    '[ $w_rc -ne 0 ] && [ $w_drc -ne 0 ] && [ "$(rcli EXISTS "dbthrottle:{wop}:q:limit" "dbthrottle:{wop}:q:drain")" = 0 ] && grep -q "access at least one of the keys\\|NOPERM" "$work/wu.limit.err" && grep -q "access at least one of the keys\\|NOPERM" "$work/wu.drain.err"'
# A user who may read a pool's keys but not run the scripts: settings prints what it read and
# fails, saying the values in force are not known (a stranger's find: it exited 0).
rcli ACL SETUSER dbt-peek on '>peekpw' '~*' '+@read' '+@connection' '+info' '+script|load' >/dev/null
DBTHROTTLE_REDIS_URL="redis://dbt-peek:peekpw@127.0.0.1:$rport" "$D" settings wop >"$work/peek.out" 2>"$work/peek.err"; p_rc=$?
check "settings as a user who may not run the scripts: exit $p_rc (1), says the values in force are not known ($(head -c 200 "$work/peek.err"))" \
    '[ $p_rc = 1 ] && grep -q "values in force are not known" "$work/peek.err" && grep -q "no live setting" "$work/peek.out"'
rcli ACL DELUSER dbt-peek >/dev/null
rcli ACL LOG RESET >/dev/null

# ---- workers with the worker user -------------------------------------------------------------
echo "# workers as dbthrottle-worker"
rcli ACL LOG RESET >/dev/null
mark
pids=
for i in 1 2 3 4; do
    bg "$work/w.$i" env PGAPPNAME=t_aclw DBTHROTTLE_REDIS_URL="$wurl" DBTHROTTLE_ON_REDIS_ERROR=closed \
        "$D" run --max-queries 1 --pool aclpool -- psql -qAtX -c "SELECT dbt_probe(300)" -c "SELECT dbt_probe(100)"
    pids="$pids $bg"
done
# Two more preloaded directly (no dbthrottle run, so no check before): the library's own commands.
for i in 5 6; do
    bg "$work/w.$i" env PGAPPNAME=t_aclw DBTHROTTLE_REDIS_URL="$wurl" DBTHROTTLE_ON_REDIS_ERROR=closed \
        DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=aclpool LD_PRELOAD="$preload" \
        psql -qAtX -c "SELECT dbt_probe(300)" -c "SELECT dbt_probe(100)"
    pids="$pids $bg"
done
wrc=0
for p in $pids; do wait "$p" || wrc=1; done
grants=$(rcli HGET "dbthrottle:{aclpool}:q:stats" grants)
# Redis grants some of the 12, not each: a psql's second statement may run on the permit it kept
# from its first while nobody waited, and the host's processes pass permits to each other (a
# loaded make test saw 11).
check "6 workers as dbthrottle-worker at a limit of 1: all succeeded, 12 probes, at most 1 at once at the server (most: $(max_conc t_aclw), probes: $(probes t_aclw)), $grants of them granted by Redis" '[ $wrc -eq 0 ] && [ "$(probes t_aclw)" -eq 12 ] && [ "$(max_conc t_aclw)" -eq 1 ] && [ "${grants:-0}" -ge 1 ]'
check "workers: Redis denied dbthrottle-worker nothing ($(acl_denials dbthrottle-worker) in its ACL LOG)" '[ "$(acl_denials dbthrottle-worker)" -eq 0 ] && ! grep -q NOPERM "$work"/w.*'
check "workers: their keys are under the documented pattern (none outside dbthrottle:*)" '[ -z "$(rcli --scan | grep -v "^dbthrottle:")" ]'

# ---- every subcommand with the operator user --------------------------------------------------
echo "# dbthrottle as dbthrottle-operator"
rcli ACL LOG RESET >/dev/null
export DBTHROTTLE_REDIS_URL="$ourl"
bg "$work/hold" env PGAPPNAME=t_aclo "$D" run --max-queries 1 --pool aclop -- psql -qAtX -c "SELECT dbt_probe(30000)"
hold=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{aclop}")" -eq 1 ]'
check "run as dbthrottle-operator: the worker holds its permit" '[ "$(live_holders q "dbthrottle:{aclop}")" -eq 1 ]'
DBTHROTTLE_MAX_QUERIES=1 "$D" check >"$work/o.check" 2>&1; rc=$?
# The operator may not run CONFIG GET (it reads requirepass): INFO persistence cannot show RDB save
# points, so check says it cannot tell, and how to verify.
check "check as dbthrottle-operator: exit 0, says it cannot tell whether Redis persists and how to verify ($(grep "cannot tell" "$work/o.check" | head -c 300))" '[ $rc -eq 0 ] && tail -1 "$work/o.check" | grep -qx ok && grep -q "cannot tell whether Redis persists" "$work/o.check" && grep -q "CONFIG GET save" "$work/o.check" && ! grep -q "persists nothing" "$work/o.check"'
rcli CONFIG SET appendonly yes >/dev/null
DBTHROTTLE_MAX_QUERIES=1 "$D" check >"$work/o.check" 2>&1; rc=$?
rcli CONFIG SET appendonly no >/dev/null
check "check as dbthrottle-operator, appendonly yes: exit 0, no persistence warning (INFO's aof_enabled)" '[ $rc -eq 0 ] && ! grep -q "cannot tell\|persists nothing" "$work/o.check"'
check "the operator user may not read Redis' configuration (CONFIG GET requirepass is refused)" '! redis-cli -p "$rport" --user dbthrottle-operator --pass opw --no-auth-warning CONFIG GET requirepass 2>&1 | grep -q "^requirepass\$" && redis-cli -p "$rport" --user dbthrottle-operator --pass opw --no-auth-warning CONFIG GET requirepass 2>&1 | grep -q NOPERM'
"$D" status aclop >"$work/o.status" 2>&1; rc=$?
check "status as dbthrottle-operator: exit 0, the holder listed" '[ $rc -eq 0 ] && grep -q " $hold " "$work/o.status"'
"$D" status never-was >"$work/o.nw" 2>&1; rc=$?
check "status of a pool that never existed as dbthrottle-operator: exit 1, \"no pool\" (not NOPERM: EXISTS is granted) ($(cat "$work/o.nw"))" '[ $rc -eq 1 ] && grep -q "no pool \"never-was\"" "$work/o.nw"'
"$D" status --json >"$work/o.json" 2>&1; rc=$?
check "status --json (every pool: SCAN) as dbthrottle-operator: exit 0, both pools" '[ $rc -eq 0 ] && grep -q "\"aclop\"" "$work/o.json" && grep -q "\"aclpool\"" "$work/o.json"'
"$D" status --prometheus >"$work/o.prom" 2>&1; rc=$?
check "status --prometheus as dbthrottle-operator: exit 0" '[ $rc -eq 0 ] && grep -q "^dbthrottle_holders" "$work/o.prom"'
tmux -L "$tmux_sock" -f /dev/null new-session -d -s top -x 160 -y 40 \
    "env DBTHROTTLE_REDIS_URL=$ourl $D top --interval 200ms; echo top-exited-\$?; sleep 30"
screen() { tmux -L "$tmux_sock" capture-pane -p -t top; }
wait_until 10 'screen | grep -q " $hold "'
check "top as dbthrottle-operator: shows the holder" 'screen | grep -q " $hold "'
tmux -L "$tmux_sock" send-keys -t top q
wait_until 5 'screen | grep -q "top-exited-0"'
check "top as dbthrottle-operator: exit 0" 'screen | grep -q "top-exited-0"'
"$D" limit aclop 3 >/dev/null 2>&1 && [ "$(rcli GET "dbthrottle:{aclop}:q:limit")" = 3 ]; rc=$?
check "limit as dbthrottle-operator: the override is in Redis" '[ $rc -eq 0 ]'
"$D" limit aclop --clear >/dev/null 2>&1 && [ "$(rcli EXISTS "dbthrottle:{aclop}:q:limit")" = 0 ]; rc=$?
check "limit --clear as dbthrottle-operator: the override is gone" '[ $rc -eq 0 ]'
"$D" drain aclop >/dev/null 2>&1 && [ "$(rcli EXISTS "dbthrottle:{aclop}:q:drain")" = 1 ]; rc=$?
check "drain as dbthrottle-operator: the drain is in Redis" '[ $rc -eq 0 ]'
"$D" resume aclop >/dev/null 2>&1 && [ "$(rcli EXISTS "dbthrottle:{aclop}:q:drain")" = 0 ]; rc=$?
check "resume as dbthrottle-operator: the drain is gone" '[ $rc -eq 0 ]'
"$D" class aclop interactive --share 75% --priority 1 --wait 5s --queue-cap 10 >"$work/o.class" 2>&1 && "$D" class aclop --aging 30s >>"$work/o.class" 2>&1 && [ -n "$(rcli GET "dbthrottle:{aclop}:q:classes")" ]; rc=$?
check "class as dbthrottle-operator: the definitions are in Redis" '[ $rc -eq 0 ]'
"$D" class aclop >>"$work/o.class" 2>&1 && "$D" status aclop >>"$work/o.class" 2>&1 && [ "$(grep -c "^  interactive " "$work/o.class")" -ge 4 ]; rc=$?
check "class (the list) and status as dbthrottle-operator: the class table" '[ $rc -eq 0 ]'
"$D" class aclop --clear >>"$work/o.class" 2>&1 && [ "$(rcli EXISTS "dbthrottle:{aclop}:q:classes")" = 0 ]; rc=$?
check "class --clear as dbthrottle-operator: the definitions are gone" '[ $rc -eq 0 ]'
permit=$(rcli ZRANGE "dbthrottle:{aclop}:q:holders" 0 0)
"$D" evict aclop "$permit" >"$work/o.evict" 2>&1; rc=$?
check "evict as dbthrottle-operator: exit 0, the permit ($permit) gone from Redis" '[ $rc -eq 0 ] && [ -n "$permit" ] && [ -z "$(rcli ZSCORE "dbthrottle:{aclop}:q:holders" "$permit")" ]'
"$D" limit aclgone 2 --create >/dev/null 2>&1 && "$D" forget aclgone >"$work/o.forget" 2>&1 && [ "$(rcli --scan --pattern "dbthrottle:{aclgone}:*" | grep -c .)" = 0 ]; rc=$?
check "forget as dbthrottle-operator: the pool's keys are gone ($(cat "$work/o.forget"))" '[ $rc -eq 0 ]'
# The adaptive controller (lua/adapt.lua): its lease, its limit, its resignation.
"$D" adapt acladapt --min 1 --max 4 --start 2 --interval 200ms --window 1s --lease 3s --ttl 6s \
    >/dev/null 2>"$work/o.adapt" &
adapt_pid=$!
echo "$adapt_pid" >>"$work/pids"
wait_until 20 '[ "$(rcli GET "dbthrottle:{acladapt}:q:limit")" = 2 ] && [ "$(rcli HGET "dbthrottle:{acladapt}:q:limit:adapt" pid)" = "$adapt_pid" ]'; rc=$?
check "adapt as dbthrottle-operator: it leads (its pid in the record) and its start limit is in Redis" '[ $rc -eq 0 ]'
kill -TERM "$adapt_pid" 2>/dev/null
wait "$adapt_pid"; rc=$?
check "adapt as dbthrottle-operator: SIGTERM resigns (the record's owner emptied), exit 0 ($rc)" '[ $rc -eq 0 ] && [ -z "$(rcli HGET "dbthrottle:{acladapt}:q:limit:adapt" owner)" ]'
kill -INT "$hold" 2>/dev/null
check "operator: Redis denied dbthrottle-operator nothing but check's CONFIG GET ($(acl_denials_but_config dbthrottle-operator) others in its ACL LOG)" '[ "$(acl_denials_but_config dbthrottle-operator)" -eq 0 ] && ! grep -v "cannot tell whether Redis persists" "$work"/o.* | grep -q NOPERM'
export DBTHROTTLE_REDIS_URL="$admin_url"

# ---- each permission of the worker taken away: the dry run finds it ----------------------------
echo "# dbthrottle run refuses a user that lacks a permission"
lacking=
for c in $(echo "$worker_line" | tr ' ' '\n' | sed -n 's/^+//p'); do
    # select: sent only for a database index other than 0 (below); script|exists: asked at
    # connect, and without it every connect loads all the scripts, as before it was asked
    # (integration connect_loads_only_missing_scripts): not a refusal
    case $c in select | 'script|exists') continue ;; esac
    setuser "$worker_line" "$c" >/dev/null
    DBTHROTTLE_REDIS_URL="$wurl" "$D" run --max-queries 1 -- true 2>"$work/err"
    rc=$?
    name=$(echo "$c" | sed 's/|.*//')
    [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -qi "$name" "$work/err" &&
        grep -q DBTHROTTLE_REDIS_URL "$work/err" || lacking="$lacking $c(rc=$rc: $(head -c 200 "$work/err"))"
done
setuser "$worker_line" 'script|exists' >/dev/null
DBTHROTTLE_REDIS_URL="$wurl" "$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: a worker user of the older lines (no script|exists) is not refused ($rc: $(head -c 200 "$work/err"))" '[ $rc -eq 0 ]'
setuser "$worker_line" >/dev/null
check "run: a worker user without any one of its permissions is refused with exit 2, one line naming the command and DBTHROTTLE_REDIS_URL${lacking:+ (not so:$lacking)}" '[ -z "$lacking" ]'
setuser "$worker_line" select >/dev/null
DBTHROTTLE_REDIS_URL="$wurl/1" "$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: a database index without SELECT: exit 2 ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -qi select "$work/err"'
setuser "$worker_line" >/dev/null
DBTHROTTLE_REDIS_URL="$wurl/1" "$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: the documented worker user with a database index: starts ($(cat "$work/err"))" '[ $rc -eq 0 ]'
setuser "$worker_line" rpush >/dev/null
DBTHROTTLE_REDIS_URL="$wurl" DBTHROTTLE_MAX_QUERIES=1 "$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: the same refusal (exit 1, the command named)" '[ $rc -eq 1 ] && grep -qi rpush "$work/err"'
setuser "$worker_line" >/dev/null
# A user of the worker ACL documented before GETRANGE (the scripts read the class definitions with
# it, a bounded length: issue 29): the library still takes its permits, reading them whole with
# GET as before; Redis' ACL LOG shows each refusal.
setuser "$worker_line" getrange >/dev/null
rcli ACL LOG RESET >/dev/null
rcli set "dbthrottle:{oldacl}:q:classes" "aging=0;default=;a:50:0:-:-;b:50:0:-:-" >/dev/null
DBTHROTTLE_REDIS_URL="$wurl" "$D" acquire oldacl --limit 1 --class a -- true 2>"$work/err"; rc=$?
check "a worker user without GETRANGE (the ACL documented before it): granted all the same, the refusal in the ACL LOG ($(head -c 200 "$work/err"))" '[ $rc -eq 0 ] && [ "$(rcli hget "dbthrottle:{oldacl}:q:stats" grants)" = 1 ] && rcli ACL LOG | grep -qx getrange'
setuser "$worker_line" >/dev/null

# ---- the other checks ---------------------------------------------------------------------------
echo "# the other checks before a worker starts"
"$D" run --max-queries 1 -- sh -c 'echo started' >"$work/out" 2>"$work/err"; rc=$?
check "run, all well: the program starts" '[ $rc -eq 0 ] && grep -qx started "$work/out"'
DBTHROTTLE_REDIS_URL=redis://dbthrottle-worker:nope@127.0.0.1:$rport "$D" run --max-queries 1 -- sh -c 'echo started' >"$work/out" 2>"$work/err"; rc=$?
check "run: a wrong password: exit 2, not started, one line naming DBTHROTTLE_REDIS_URL, no password ($(cat "$work/err"))" '[ $rc -eq 2 ] && ! grep -q started "$work/out" && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q DBTHROTTLE_REDIS_URL "$work/err" && ! grep -q nope "$work/err"'
DBTHROTTLE_REDIS_URL=redis://dbthrottle-worker:nope@127.0.0.1:$rport "$D" run --no-check --max-queries 1 -- sh -c 'echo started' >"$work/out" 2>&1; rc=$?
check "run --no-check: starts anyway" '[ $rc -eq 0 ] && grep -qx started "$work/out"'
DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport/99 "$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: a database index out of range: exit 2 ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q DBTHROTTLE_REDIS_URL "$work/err"'
DBTHROTTLE_REDIS_URL=redis://no-such-host.invalid:6379 "$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: an unknown Redis host: exit 2 ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q DBTHROTTLE_REDIS_URL "$work/err"'
echo "not a library" >"$work/libfake.so"
"$D" run --library "$work/libfake.so" --max-queries 1 -- sh -c 'echo started' >"$work/out" 2>"$work/err"; rc=$?
check "run: a --library that does not load: exit 2, not started, named ($(cat "$work/err"))" '[ $rc -eq 2 ] && ! grep -q started "$work/out" && grep -q "libfake.so" "$work/err" && grep -q -- --library "$work/err"'
rcli CONFIG SET maxmemory-policy allkeys-lru >/dev/null
"$D" run --max-queries 1 -- true 2>"$work/err"; rc=$?
check "run: Redis with maxmemory-policy allkeys-lru: exit 2, said ($(cat "$work/err"))" '[ $rc -eq 2 ] && grep -q "maxmemory-policy is allkeys-lru" "$work/err"'
rcli CONFIG SET maxmemory-policy volatile-ttl >/dev/null
DBTHROTTLE_MAX_QUERIES=1 "$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: maxmemory-policy volatile-ttl is an error (exit 1)" '[ $rc -eq 1 ] && grep -q "maxmemory-policy is volatile-ttl" "$work/err"'
rcli CONFIG SET maxmemory-policy noeviction >/dev/null
DBTHROTTLE_MAX_QUERIES=1 "$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: Redis without persistence: exit 0 with a warning that drains and overrides would be lost ($(cat "$work/err"))" '[ $rc -eq 0 ] && grep -q "persists nothing" "$work/err" && grep -q drain "$work/err"'
rcli CONFIG SET save "3600 1" >/dev/null
DBTHROTTLE_MAX_QUERIES=1 "$D" check >/dev/null 2>"$work/err"; rc=$?
check "check: Redis with RDB save points: no warning" '[ $rc -eq 0 ] && ! grep -q "persists nothing" "$work/err"'
rcli CONFIG SET save "" >/dev/null

DBTHROTTLE_REDIS_URL=redis://127.0.0.1:1 DBTHROTTLE_MAX_QUERIES=1 "$D" check --redis "$wurl" >"$work/out" 2>"$work/err"; rc=$?
check "check --redis URL: the option wins over the environment ($(cat "$work/err"))" '[ $rc -eq 0 ] && grep -q "dbthrottle-worker:\*\*\*@" "$work/out"'
DBTHROTTLE_MAX_QUERIES=1 "$D" check --redis "$wurl" --key-prefix acltest: >"$work/out" 2>"$work/err"; rc=$?
check "check --key-prefix P: the dry run is on P's keys, which the worker user may not touch: exit 1 ($(cat "$work/err"))" '[ $rc -eq 1 ] && grep -Eq "^  DBTHROTTLE_KEY_PREFIX +\"acltest:\" +environment" "$work/out" && grep -q "NOPERM.*keys" "$work/err"'
DBTHROTTLE_MAX_QUERIES=1 "$D" check --key-prefix acltest: >"$work/out" 2>"$work/err"; rc=$?
check "check --key-prefix P as the admin: exit 0" '[ $rc -eq 0 ]'
DBTHROTTLE_MAX_QUERIES=1 "$D" check --redis "redis://dbthrottle-worker:nope@127.0.0.1:$rport" >/dev/null 2>"$work/err"; rc=$?
check "check --redis with a wrong password: exit 1, naming DBTHROTTLE_REDIS_URL, no password" '[ $rc -eq 1 ] && grep -q DBTHROTTLE_REDIS_URL "$work/err" && ! grep -q nope "$work/err"'

# A dry run on a pool in use changes nothing: its keys' contents are the same before and after.
bg "$work/busy" env PGAPPNAME=t_aclb "$D" run --max-queries 1 --pool busy -- psql -qAtX -c "SELECT dbt_probe(30000)"
busy=$bg
wait_until 15 '[ "$(live_holders q "dbthrottle:{busy}")" -eq 1 ]'
bg "$work/busy2" env PGAPPNAME=t_aclb "$D" run --max-queries 1 --pool busy -- psql -qAtX -c "SELECT 1"
wait_until 15 '[ "$(live_waiters q "dbthrottle:{busy}")" -eq 1 ]'
busy2=$bg
# Each key's contents (DUMP) and its PTTL. The holder and the waiter renew on their own: both are
# stopped (SIGSTOP) around the two dumps, so that only the check can change a key, and continued
# after, whatever happened (harness_cleanup continues them too).
dump() { for k in $(rcli --scan --pattern 'dbthrottle:{busy}*' | sort); do echo "$k $(rcli --no-raw DUMP "$k" | md5sum | cut -c1-32) $(rcli PTTL "$k")"; done; }
stopped() { [ "$(sed "s/.*) //" "/proc/$1/stat" 2>/dev/null | cut -c1)" = T ]; } # /proc: a minimal Debian may lack ps
kill -STOP "$busy" "$busy2"
wait_until 10 'stopped "$busy" && stopped "$busy2"'
# A renewal sent just before the stop has run in Redis by the time two dumps in a row agree (the
# keys and their contents; the PTTLs count down). Each new dump is compared with the one before it
# (the loop compared the previous dump with itself, and so ended at its second round whatever
# Redis did meanwhile).
dump >"$work/before"
same_as_before() {
    dump >"$work/again"
    cut -d" " -f1,2 "$work/before" >"$work/before.keys"
    cut -d" " -f1,2 "$work/again" >"$work/again.keys"
    cmp -s "$work/before.keys" "$work/again.keys" && return 0
    cp "$work/again" "$work/before"
    return 1
}
wait_until 10 same_as_before
DBTHROTTLE_POOL=busy DBTHROTTLE_MAX_QUERIES=1 "$D" check >/dev/null 2>&1; rc=$?
dump >"$work/after"
kill -CONT "$busy" "$busy2"
# Same keys, same contents; no TTL gained or lost, none lengthened (PTTL after <= before).
ttl_ok=$(python3 - "$work/before" "$work/after" <<'PY'
import sys
rows = [dict((l.split()[0], l.split()[1:]) for l in open(f)) for f in sys.argv[1:]]
before, after = rows
bad = [k for k in before if k not in after or before[k][0] != after[k][0]] + [k for k in after if k not in before]
for k in before:
    if k in after and before[k][0] == after[k][0]:
        b, a = int(before[k][1]), int(after[k][1])
        if (b < 0) != (a < 0) or a > b:
            bad.append("%s pttl %d -> %d" % (k, b, a))
print(" ".join(bad) if bad else "ok")
PY
)
# What changed, for the log: the two dumps' lines of the keys found wrong (key, content digest,
# PTTL; "<" before, ">" after).
ttl_diff=
[ "$ttl_ok" = ok ] || ttl_diff=$(diff "$work/before" "$work/after" | grep '^[<>]' |
    grep -F "$(echo "$ttl_ok" | tr ' ' '\n' | grep '^dbthrottle:')" | tr '\n' ' ')
check "check's dry run on a pool with a holder and a waiter (both stopped): exit 0, its keys' contents unchanged, no TTL gained, lost or lengthened ($(wc -l <"$work/before") keys: $ttl_ok${ttl_diff:+; $ttl_diff})" '[ $rc -eq 0 ] && [ "$(wc -l <"$work/before")" -ge 5 ] && [ "$ttl_ok" = ok ]'
kill -INT "$busy" 2>/dev/null

# ---- the docs and make install ----------------------------------------------------------------
echo "# docs, make install"
# By its absolute path, or by the installed name libdbthrottle.so, which the package and make
# install put in ld.so's search path (tests/package/deb.sh runs every such line after dpkg -i);
# never by a relative path or another name.
bare=$(grep -n 'LD_PRELOAD=["'"'"']\?[^/$"'"'"' ]' "$top/README.md" "$top"/docs/*.md "$top"/docs/*.1 "$top"/docs/*.7 |
    grep -v 'LD_PRELOAD=\$' | grep -v 'LD_PRELOAD=libdbthrottle\.so\([ `]\|$\)' || true)
check "README and docs preload the library by an absolute path or its installed name only${bare:+ ($bare)}" '[ -z "$bare" ]'
make -s -n -C "$top" install PREFIX=/usr >"$work/install.n" 2>&1
make -s -n -C "$top" install PREFIX=/usr DESTDIR="$work/stage" >"$work/install.staged" 2>&1
check "make install runs ldconfig when it installs into the system (not into a DESTDIR staging tree)" 'grep -q ldconfig "$work/install.n" && ! grep -q "^ *ldconfig" "$work/install.staged"'

summary
