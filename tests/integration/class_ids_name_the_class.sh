# class_ids_name_the_class.sh - the class of each connection (rules, decided once; or the process'
# DBTHROTTLE_CLASS) is named in the permit ids Redis holds; a process with no class setting keeps
# the 3-part id
it_class_ids_name_the_class() {
    rules='interactive:application_name=web*;batch:user=nobody'
    # Held until the checks are done (hold_begin's application_name is the name given).
    hold_begin web-1 DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS_RULES="$rules"
    hold_begin other DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS_RULES="$rules"
    hold_begin cls_ids_batch DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS=batch
    hold_begin cls_ids_plain DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_ids}:q:holders")" -ge 4 ]'
    ids=$(cls_ids cls_ids)
    running=$(psql -qAt -c "select count(*) from pg_stat_activity where query = 'select pg_sleep(120)' and state = 'active'")
    check "4 statements run at the server ($running) and Redis holds 4 permits: $ids" \
        '[ "$running" -eq 4 ] && [ "$(echo $ids | wc -w)" -eq 4 ]'
    check "application_name=web-1 matched the interactive rule: <cid>.<serial>.interactive.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.interactive\.1\.8( |$)"'
    check "a connection no rule matches is in the default class: <cid>.<serial>.-.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.-\.1\.8( |$)"'
    check "DBTHROTTLE_CLASS=batch: <cid>.<serial>.batch.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.batch\.1\.8( |$)"'
    check "no class setting: the 3-part id <cid>.<serial>.8, as before classes" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.8( |$)"'
    hold_end_all
}
