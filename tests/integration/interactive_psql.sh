# interactive_psql.sh - interactive psql, typed at in a terminal (tmux)
it_interactive_psql() {
    if command -v tmux >/dev/null; then
        rm -f "$work/trace17.log"
        sock=$work/tmux.sock
        # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
        tmux -S "$sock" new-session -d -x 120 -y 30 \
            "env LD_PRELOAD=$preload DBTHROTTLE_REDIS_URL=$DBTHROTTLE_REDIS_URL DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 \
             DBTHROTTLE_LOG=$work/trace17.log DBTHROTTLE_LOG_LEVEL=info PGHOST=$PGHOST PGPORT=$PGPORT \
             PGUSER=postgres PGDATABASE=postgres psql -X; sleep 30"
        i=0
        until tmux -S "$sock" capture-pane -p | grep -q 'postgres=#' || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
        # tmux reads a trailing ';' as the end of its own command: "\\;" is a literal one
        for line in "select 'typed' || 'in'" "begin" "select 2" "commit"; do
            tmux -S "$sock" send-keys -l "$line\\;"
            tmux -S "$sock" send-keys Enter
        done
        i=0
        until [ "$(grep -c 'event=release' "$work/trace17.log" 2>/dev/null)" = 2 ] || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
        screen=$(tmux -S "$sock" capture-pane -p)
        tmux -S "$sock" kill-server 2>/dev/null
        grants=$(grep -c 'event=grant' "$work/trace17.log")
        check "interactive psql: the screen shows the result, 2 grants for a query and a transaction ($grants)" \
            'echo "$screen" | grep -q typedin && [ "$grants" = 2 ]'
    fi
}
