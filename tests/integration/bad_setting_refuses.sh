# bad_setting_refuses.sh - bad configuration refuses rather than runs unthrottled
it_bad_setting_refuses() {
    throttled DBTHROTTLE_MAX_QUERIES=abc psql -qAt -c "select 1" >"$work/bad.out" 2>"$work/bad.err"
    rc=$?
    check "bad setting: psql fails (rc $rc)" [ $rc -ne 0 ]
    check "bad setting: one line naming the setting and the value" \
        grep -q 'DBTHROTTLE_MAX_QUERIES: bad value \\"abc\\"' "$work/bad.err"
}
