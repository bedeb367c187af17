# same_results_throttled.sh - throttled pgbench gives the same results
it_same_results_throttled() {
    direct=$(psql -qAt -c "select count(*), sum(v) from r")
    through=$(throttled DBTHROTTLE_MAX_QUERIES=2 psql -qAt -c "select count(*), sum(v) from r")
    check "same result with and without the preload" [ "$direct" = "$through" ]
}
