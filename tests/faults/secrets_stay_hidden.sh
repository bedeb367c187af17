# secrets_stay_hidden.sh - secrets. Passwords given in the connection string, PGPASSWORD, a .pgpass file and the
# Redis URL never appear in a log line (debug level, both formats), an error message, or a Redis
# key or value; the log file is created mode 0600. The paths that print most are taken: a
# connection permit, a wait, a refusal, and a wrong Redis password.
echo "# secrets_stay_hidden: secrets stay out of logs, errors and Redis"
redis_stop
redis_start --requirepass redis-Secret-9f3
rcli() { redis-cli -p "$rport" --no-auth-warning -a redis-Secret-9f3 "$@"; }
export DBTHROTTLE_REDIS_URL="redis://:redis-Secret-9f3@127.0.0.1:$rport"
psql -qAtX -c "ALTER ROLE postgres PASSWORD 'pg-Secret-conninfo'" >/dev/null
printf '127.0.0.1:%s:*:postgres:pg-Secret-pgpass\n' "$PGPORT" >"$work/pgpass"
chmod 600 "$work/pgpass"
c9="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_LOG_LEVEL=debug DBTHROTTLE_LOG_QUERY=on"
throttled $c9 DBTHROTTLE_LOG="$work/c9.logfmt" psql -X \
    "host=127.0.0.1 port=$PGPORT user=postgres password=pg-Secret-conninfo dbname=postgres" \
    -c "SELECT dbt_probe(0)" >"$work/c9.out1" 2>&1
throttled $c9 DBTHROTTLE_LOG="$work/c9.json" DBTHROTTLE_LOG_FORMAT=json PGPASSWORD=pg-Secret-env \
    psql -X -c "SELECT dbt_probe(0)" >"$work/c9.out2" 2>&1
throttled $c9 DBTHROTTLE_LOG="$work/c9.pgpass" PGPASSFILE="$work/pgpass" \
    psql -X -c "SELECT dbt_probe(0)" >"$work/c9.out3" 2>&1
# a wait and a refusal: one holder, and a second client that gives up after 100 ms
wargs="-n 1 -s 1500" spawn "$work/c9.holder" $c9 DBTHROTTLE_LOG="$work/c9.holder.log" PGPASSWORD=pg-Secret-env
wait_until 10 '[ "$(live_holders)" -eq 1 ]'
throttled $c9 DBTHROTTLE_LOG="$work/c9.refused" DBTHROTTLE_WAIT_TIMEOUT=100ms PGPASSWORD=pg-Secret-env \
    psql -X -c "SELECT dbt_probe(0)" >"$work/c9.out4" 2>&1
wait_workers
# a wrong Redis password: the error goes to stderr and the log
throttled $c9 DBTHROTTLE_REDIS_URL="redis://:wrong-Secret-77@127.0.0.1:$rport" \
    DBTHROTTLE_LOG=stderr PGPASSWORD=pg-Secret-env psql -X -c "SELECT 1" >"$work/c9.out5" 2>&1
# Malformed URLs where a password stands where the parser reads none (issue 29: an "@host"
# forgotten, upper case, a query string, a file line split at a '=' in the URL): refused loudly in
# psql's error, the log and `dbthrottle check`, the password nowhere. Each URL's password is
# "Secret-77" after a word, so the grep below finds any of them.
printf 'redis_url: rediss://:nf-Secret-77@127.0.0.1:%s/0?ssl=none\n' "$rport" >"$work/c9.conf"
c9n=0 c9bad=""
for c9url in "redis://:noat-Secret-77" "redis://app:user-Secret-77" "rediss://:slash-Secret-77/" \
    "redis-sentinel://:sent-Secret-77" "REDIS://:upper-Secret-77" "unix://:unix-Secret-77@" \
    "redis://127.0.0.1:$rport/0?password=query-Secret-77" "file"; do
    c9n=$((c9n + 1))
    c9env="DBTHROTTLE_REDIS_URL=$c9url"
    [ "$c9url" = file ] && c9env="DBTHROTTLE_CONFIG=$work/c9.conf"
    throttled $c9 "$c9env" DBTHROTTLE_LOG="$work/c9.bad$c9n.log" PGPASSWORD=pg-Secret-env \
        psql -X -c "SELECT dbt_probe(0)" >"$work/c9.bad$c9n.psql" 2>&1
    env "$c9env" DBTHROTTLE_MAX_QUERIES=1 "$top/build/dbthrottle" check >"$work/c9.bad$c9n.check" 2>&1
    c9rc=$?
    check "secrets_stay_hidden: malformed URL $c9n refused by psql and check (rc $c9rc): $(grep -m1 -o "bad configuration: .*" "$work/c9.bad$c9n.psql" | cut -c20-110)" \
        'grep -q "bad configuration" "$work/c9.bad$c9n.psql" && grep -q "config_error" "$work/c9.bad$c9n.log" && [ $c9rc -ne 0 ] && grep -q "DBTHROTTLE_REDIS_URL\|unknown setting" "$work/c9.bad$c9n.check"'
    c9bad="$c9bad $work/c9.bad$c9n.log $work/c9.bad$c9n.psql $work/c9.bad$c9n.check"
done
check "secrets_stay_hidden: no malformed URL's password in psql's errors, the logs or check's output" '! cat $c9bad | grep -E "Secret-77"'
rcli --scan >"$work/c9.keys"
for k in $(cat "$work/c9.keys"); do
    case $(rcli type "$k") in
    list) rcli lrange "$k" 0 -1 ;; zset) rcli zrange "$k" 0 -1 withscores ;; string) rcli get "$k" ;;
    hash) rcli hgetall "$k" ;;
    esac
done >"$work/c9.values" 2>&1
all="$c9bad $work/c9.logfmt $work/c9.json $work/c9.pgpass $work/c9.holder.log $work/c9.refused $work/c9.out1 $work/c9.out2 $work/c9.out3 $work/c9.out4 $work/c9.out5 $work/c9.keys $work/c9.values $work/workers.err"
check "secrets_stay_hidden: the logs said something ($(cat "$work"/c9.logfmt "$work"/c9.json | wc -l) lines) and the refusal and the wrong password were reported" 'grep -q "event=grant" "$work/c9.logfmt" && grep -q "\"event\":\"grant\"" "$work/c9.json" && grep -q "no query permit" "$work/c9.out4" && grep -qi "auth" "$work/c9.out5"'
check "secrets_stay_hidden: no password anywhere: logs, messages, Redis keys and values" '! cat $all | grep -E "Secret-(conninfo|env|pgpass|9f3|77)"'
check "secrets_stay_hidden: the Redis URL is shown with its password masked" 'grep -q "redis://:\*\*\*@\|redis://:xxxxx@\|redis://:\[redacted\]@" "$work/c9.out5" || ! grep -q "redis://" "$work/c9.out5"'
check "secrets_stay_hidden: log files are created mode 0600 ($(stat -c %a "$work/c9.logfmt"))" '[ "$(stat -c %a "$work/c9.logfmt")" = 600 ] && [ "$(stat -c %a "$work/c9.json")" = 600 ]'
psql -qAtX -c "ALTER ROLE postgres PASSWORD NULL" >/dev/null
redis_stop
unset -f rcli
rcli() { redis-cli -p "$rport" "$@"; }
redis_start
