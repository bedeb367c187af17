# redis_over_tls.sh - rediss://: the library under pgbench throttles through a Redis that speaks
# only TLS (redis-server --port 0 --tls-port, certificates from tests/support/tls.sh), measured
# at the server (dbt_probe's advisory locks); and a certificate that does not verify (another CA,
# expired, for another host) or a Redis that wants a client certificate we do not give is a
# configuration error: psql is refused with a line that names the cause and the setting to fix,
# nothing runs at the server, and `dbthrottle check` fails with the same line. With the client
# certificate given, the same Redis throttles.
echo "# redis_over_tls: rediss:// throttles; certificates that do not verify are refused loudly"
. "$top/tests/support/tls.sh"
tls_make_certs "$work/tls" || fail "redis_over_tls: openssl could not make the certificates"
tl_ca=$work/tls/ca.crt

# tl_redis NAME CERT AUTH_CLIENTS: a redis-server with only a TLS port (in $tl_port), CERT its
# certificate, Redis' tls-auth-clients as given; its pid is killed at exit with the others.
tl_redis() {
    mkdir -p "$work/tls-$1"
    tl_tries=0
    while :; do
        tl_port=$(free_port)
        redis-server --port 0 --tls-port "$tl_port" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$work/tls-$1" --logfile "$work/tls-$1/redis.log" \
            --tls-cert-file "$work/tls/$2.crt" --tls-key-file "$work/tls/$2.key" \
            --tls-ca-cert-file "$tl_ca" --tls-auth-clients "$3" &
        tl_pid=$!
        echo "$tl_pid" >>"$work/pids"
        wait_until 10 'ss -Hltn "( sport = :$tl_port )" | grep -q . || ! kill -0 $tl_pid 2>/dev/null'
        ss -Hltn "( sport = :$tl_port )" | grep -q . && break
        kill -9 "$tl_pid" 2>/dev/null
        tl_tries=$((tl_tries + 1))
        [ $tl_tries -lt 5 ] || { fail "redis_over_tls: redis-server --tls-port did not start"; break; }
    done
}
tl_cli() { # tl_cli PORT redis-cli args...: over TLS, with the client certificate
    p=$1
    shift
    redis-cli --tls --cacert "$tl_ca" --cert "$work/tls/client.crt" --key "$work/tls/client.key" \
        -p "$p" "$@"
}

tl_redis good server no
tl_good=$tl_port
tl_redis expired expired no
tl_expired=$tl_port
tl_redis wronghost wronghost no
tl_wronghost=$tl_port
tl_redis mutual server yes
tl_mutual=$tl_port

# The limit holds over TLS: 12 pgbench clients at a limit of 3, measured at the server.
echo "SELECT dbt_probe(20);" >"$work/tl_probe.sql"
mark
PGAPPNAME=tl_limit throttled DBTHROTTLE_MAX_QUERIES=3 DBTHROTTLE_REDIS_CA="$tl_ca" \
    DBTHROTTLE_REDIS_URL="rediss://127.0.0.1:$tl_good" \
    pgbench -n -c 12 -j 12 -t 5 -f "$work/tl_probe.sql" >"$work/tl_limit.out" 2>&1
tl_rc=$?
tl_evals=$(tl_cli "$tl_good" --raw info commandstats | grep -o 'cmdstat_evalsha:calls=[0-9]*' | cut -d= -f2)
check "redis_over_tls: pgbench -c 12 at a limit of 3 over rediss:// completes (rc $tl_rc), 60 probes ran ($(probes tl_limit)), at most 3 at once at the server and the limit reached ($(max_conc tl_limit)), the scripts ran on the TLS-only Redis (${tl_evals:-0} EVALSHA)" \
    '[ $tl_rc -eq 0 ] && [ "$(probes tl_limit)" -eq 60 ] && [ "$(max_conc tl_limit)" -eq 3 ] && [ "${tl_evals:-0}" -gt 0 ]'

# tl_refused NAME PORT HOST CAUSE FIX [ENV...]: psql refused with CAUSE and FIX in its message,
# nothing at the server; dbthrottle check fails with both.
tl_refused() {
    tl_name=$1 tl_p=$2 tl_host=$3 tl_cause=$4 tl_fix=$5
    shift 5
    mark
    PGAPPNAME="tl_$tl_name" throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://$tl_host:$tl_p" \
        "$@" psql -X -c "SELECT dbt_probe(0)" >"$work/tl.$tl_name" 2>&1
    tl_rc=$?
    env DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://$tl_host:$tl_p" "$@" \
        "$top/build/dbthrottle" check >"$work/tl.$tl_name.check" 2>&1
    tl_crc=$?
    check "redis_over_tls: $tl_name: psql refused (rc $tl_rc, probes $(probes "tl_$tl_name")): $(grep -m1 "^dbthrottle: .*$tl_cause" "$work/tl.$tl_name")" \
        '[ $tl_rc -ne 0 ] && [ "$(probes "tl_$tl_name")" -eq 0 ] && grep "$tl_cause" "$work/tl.$tl_name" | grep -q "$tl_fix"'
    check "redis_over_tls: $tl_name: dbthrottle check fails (rc $tl_crc): $(grep -m1 "$tl_cause" "$work/tl.$tl_name.check")" \
        '[ $tl_crc -ne 0 ] && grep "$tl_cause" "$work/tl.$tl_name.check" | grep -q "$tl_fix"'
}
tl_refused wrong_ca "$tl_good" 127.0.0.1 "certificate verify failed" DBTHROTTLE_REDIS_CA \
    DBTHROTTLE_REDIS_CA="$work/tls/otherca.crt"
tl_refused expired "$tl_expired" 127.0.0.1 "certificate has expired" "renew" DBTHROTTLE_REDIS_CA="$tl_ca"
tl_refused wrong_host "$tl_wronghost" localhost "hostname mismatch" DBTHROTTLE_REDIS_URL \
    DBTHROTTLE_REDIS_CA="$tl_ca"
tl_refused no_client_cert "$tl_mutual" 127.0.0.1 "requires a client certificate" \
    DBTHROTTLE_REDIS_CERT DBTHROTTLE_REDIS_CA="$tl_ca"

# With the client certificate, the Redis that wants one throttles.
mark
PGAPPNAME=tl_mutual throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://127.0.0.1:$tl_mutual" \
    DBTHROTTLE_REDIS_CA="$tl_ca" DBTHROTTLE_REDIS_CERT="$work/tls/client.crt" \
    DBTHROTTLE_REDIS_KEY="$work/tls/client.key" psql -X -c "SELECT dbt_probe(0)" >"$work/tl.mutual" 2>&1
tl_rc=$?
tl_held=$(tl_cli "$tl_mutual" --raw info commandstats | grep -o 'cmdstat_evalsha:calls=[0-9]*' | cut -d= -f2)
check "redis_over_tls: with DBTHROTTLE_REDIS_CERT and _KEY the Redis that requires a client certificate throttles (rc $tl_rc, probes $(probes tl_mutual), ${tl_held:-0} EVALSHA)" \
    '[ $tl_rc -eq 0 ] && [ "$(probes tl_mutual)" -eq 1 ] && [ "${tl_held:-0}" -ge 2 ]'

# rediss:// at a port that speaks no TLS (the harness' plain Redis), DBTHROTTLE_ON_REDIS_ERROR
# left open: a plain Redis never answers a TLS hello (it waits for the line end of what it takes
# for an inline command), which looked like an outage, so 8 psql at a limit of 2 all ran at once.
# It is a configuration error: every psql refused, naming DBTHROTTLE_REDIS_URL and saying the
# server does not speak TLS; nothing at the server; dbthrottle check and run refuse too.
mark
tl_i=0
while [ $tl_i -lt 8 ]; do
    PGAPPNAME=tl_plain throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://127.0.0.1:$rport" \
        psql -X -c "SELECT dbt_probe(500)" >"$work/tl.plain.$tl_i" 2>&1 &
    eval "tl_p$tl_i=\$!"
    tl_i=$((tl_i + 1))
done
tl_i=0 tl_refused_n=0
while [ $tl_i -lt 8 ]; do
    eval "wait \$tl_p$tl_i" || true
    grep -q "DBTHROTTLE_REDIS_URL does not speak TLS" "$work/tl.plain.$tl_i" && tl_refused_n=$((tl_refused_n + 1))
    tl_i=$((tl_i + 1))
done
check "redis_over_tls: rediss:// at a plain Redis, open mode: 8 psql at a limit of 2 all refused ($tl_refused_n of 8: $(grep -h -m1 "^dbthrottle: .*does not speak TLS" "$work"/tl.plain.* | head -1)), $(probes tl_plain) probes ran at the server, at most $(max_conc tl_plain) at once" \
    '[ $tl_refused_n -eq 8 ] && [ "$(probes tl_plain)" -eq 0 ] && [ "$(max_conc tl_plain)" -le 2 ]'
env DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://127.0.0.1:$rport" "$top/build/dbthrottle" check \
    >"$work/tl.plain.check" 2>&1
tl_crc=$?
env DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="rediss://127.0.0.1:$rport" "$top/build/dbthrottle" run -- true \
    >"$work/tl.plain.run" 2>&1
tl_rrc=$?
check "redis_over_tls: rediss:// at a plain Redis: dbthrottle check fails (rc $tl_crc) and run refuses (rc $tl_rrc) with the same line: $(grep -m1 "speak TLS" "$work/tl.plain.run")" \
    '[ $tl_crc -ne 0 ] && [ $tl_rrc -eq 2 ] && grep -q "DBTHROTTLE_REDIS_URL does not speak TLS" "$work/tl.plain.check" && grep -q "DBTHROTTLE_REDIS_URL does not speak TLS" "$work/tl.plain.run"'

# The reverse: redis:// at the TLS-only port. Redis resets the connection on the first command,
# which looked like an outage (all 8 ran at once in open mode); a TLS record sent on a second
# connection is answered with an alert: a configuration error, every psql refused.
mark
tl_i=0
while [ $tl_i -lt 8 ]; do
    PGAPPNAME=tl_rev throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$tl_good" \
        psql -X -c "SELECT dbt_probe(500)" >"$work/tl.rev.$tl_i" 2>&1 &
    eval "tl_p$tl_i=\$!"
    tl_i=$((tl_i + 1))
done
tl_i=0 tl_refused_n=0
while [ $tl_i -lt 8 ]; do
    eval "wait \$tl_p$tl_i" || true
    grep -q "DBTHROTTLE_REDIS_URL speaks TLS on that port" "$work/tl.rev.$tl_i" && tl_refused_n=$((tl_refused_n + 1))
    tl_i=$((tl_i + 1))
done
check "redis_over_tls: redis:// at a TLS-only Redis, open mode: 8 psql at a limit of 2 all refused ($tl_refused_n of 8: $(grep -h -m1 "^dbthrottle: .*speaks TLS" "$work"/tl.rev.* | head -1)), $(probes tl_rev) probes ran at the server, at most $(max_conc tl_rev) at once" \
    '[ $tl_refused_n -eq 8 ] && [ "$(probes tl_rev)" -eq 0 ] && [ "$(max_conc tl_rev)" -le 2 ]'
