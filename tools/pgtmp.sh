#!/bin/sh
# pgtmp.sh start DIR   - initdb + start a throwaway PostgreSQL in DIR on a free loopback port;
#                        prints the port. Runs the server as the postgres user when root.
# pgtmp.sh restart DIR - restarts it (on the same port) to apply settings that need a restart.
# pgtmp.sh stop DIR    - stops it and removes DIR.
set -eu
cmd=$1
dir=$2
bindir=$(pg_config --bindir 2>/dev/null || true)
[ -x "$bindir/initdb" ] || bindir=/usr/lib/postgresql/15/bin
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
case $cmd in
start)
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    as_pg "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1
    # In the file, not on the command line, so that tests may ALTER SYSTEM them.
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
max_connections = 200
CONF
    tries=0
    while :; do
        port=$(( ( $(od -An -N2 -tu2 /dev/urandom) % 30000 ) + 20000 ))
        if as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start \
            -o "-p $port" >/dev/null 2>&1; then
            echo "$port" >"$dir/port"
            echo "$port"
            exit 0
        fi
        tries=$((tries + 1))
        [ $tries -lt 10 ] || { cat "$dir/server.log" >&2; exit 1; }
    done
    ;;
restart)
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w restart -m fast
    ;;
stop)
    if [ -d "$dir/data" ]; then
        as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: pgtmp.sh start|restart|stop DIR" >&2
    exit 2
    ;;
esac
