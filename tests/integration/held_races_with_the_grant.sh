# held_races_with_the_grant.sh - PQfinish, PQreset and PQcancel racing the grant of the held command
# (60 rounds each; a thread of the program reads the holder's result, which frees the permit, while
# the main thread ends the held command 0-20 ms later), and PQfinish's race again under valgrind: no
# crash, no hang, every round accounted for, nothing held or queued in Redis afterwards
it_held_races_with_the_grant() {
    for how in finish reset cancel valgrind; do
        pool=held_race_$how
        rounds=60
        [ $how = valgrind ] && ! hc_valgrind && continue
        [ $how = valgrind ] && rounds=15
        HC_WRAP=
        [ $how = valgrind ] && HC_WRAP="valgrind -q --error-exitcode=9 --log-file=$work/hc.race.valgrind.%p"
        race=$how
        [ $how = valgrind ] && race=finish
        hc_run $pool race HELD_RACE=$race HELD_ROUNDS=$rounds DBTHROTTLE_WAIT_TIMEOUT=20s
        HC_WRAP=
        wait "$hc_pid"
        rc=$?
        wait_until 10 '[ "$(hc_card $pool holders)" = 0 ] && [ "$(hc_card $pool queue)" = 0 ]'
        case $how in
        finish | valgrind) outcome='true' ;;
        reset) outcome='[ "$(hc_val next_ok)" = $rounds ]' ;;
        cancel) outcome='[ "$(hc_val next_ok)" = $rounds ] && [ "$(hc_val other)" = 0 ] && [ $(($(hc_val ran) + $(hc_val cancelled))) = $rounds ]' ;;
        esac
        check "$pool: $rounds rounds, no crash or hang (rc $rc; $(hc_said); $(cat "$work"/hc.race.valgrind.* 2>/dev/null | head -5)), nothing held or queued after (holders $(hc_card $pool holders), queue $(hc_card $pool queue))" \
            '[ $rc -eq 0 ] && [ "$(hc_val rounds)" = $rounds ] && '"$outcome"' && [ "$(hc_card $pool holders)" = 0 ] && [ "$(hc_card $pool queue)" = 0 ]'
    done
}
