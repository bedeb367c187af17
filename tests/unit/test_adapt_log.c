/* dbthrottle adapt's logged limit changes read back (cli/adapt_log.c): lines as the controller
 * writes them (cli/cmd_adapt.c's say(): logfmt, ts first, pool and kind last), and lines that
 * are not one of this pool's and kind's changes. */
#include "adapt_log.h"

#include <criterion/criterion.h>

Test(adapt_log, a_change_as_adapt_logs_it)
{
    dbt_adapt_change c;
    cr_assert(dbt_adapt_log_change(
        "ts=2026-12-03T07:01:30.282062Z level=info event=adapt_change from=1 to=2 reason=\"raise "
        "1->2: held 1.4/1, waiters 3.4\" dry_run=true pool=app kind=query\n",
        "app", "query", &c));
    cr_expect_eq(c.at_us, INT64_C(1796281290282062), "%lld", (long long)c.at_us);
    cr_expect_eq(c.from, 1);
    cr_expect_eq(c.to, 2);
    cr_expect(c.dry_run);
    cr_expect_str_eq(c.reason, "raise 1->2: held 1.4/1, waiters 3.4");
}

/* A pool name with what logfmt quotes and escapes (a blank, a quote, a byte of no UTF-8 sequence
 * as \xNN): matched as adapt named it. The controller's first change, from a limit it did not
 * know (0), is one too. */
Test(adapt_log, a_quoted_pool_and_an_unknown_from)
{
    dbt_adapt_change c;
    cr_assert(dbt_adapt_log_change("ts=2026-12-03T07:01:29Z level=info event=adapt_change from=0 "
                                   "to=1 reason=\"start\" dry_run=false pool=\"my \\\"app\\\" "
                                   "\\xff\" kind=connection",
                                   "my \"app\" \xff", "connection", &c));
    cr_expect_eq(c.from, 0);
    cr_expect_eq(c.to, 1);
    cr_expect_not(c.dry_run);
    cr_expect_eq(c.at_us % 1000000, 0);
}

Test(adapt_log, other_lines_are_not_changes)
{
    dbt_adapt_change c;
    const char *change = "ts=2026-12-03T07:01:30.5Z level=info event=adapt_change from=1 to=2 "
                         "reason=x dry_run=true pool=app kind=query";
    cr_expect(dbt_adapt_log_change(change, "app", "query", &c));
    cr_expect_eq(c.at_us % 1000000, 500000, "a tenth of a second as such");
    cr_expect_not(dbt_adapt_log_change(change, "ap", "query", &c), "another pool");
    cr_expect_not(dbt_adapt_log_change(change, "app", "connection", &c), "another kind");
    cr_expect_not(dbt_adapt_log_change("ts=2026-12-03T07:01:30Z level=info event=adapt_hold "
                                       "limit=2 pool=app kind=query",
                                       "app", "query", &c),
                  "another event");
    cr_expect_not(dbt_adapt_log_change("ts=yesterday level=info event=adapt_change from=1 to=2 "
                                       "pool=app kind=query",
                                       "app", "query", &c),
                  "a ts it cannot read");
    cr_expect_not(dbt_adapt_log_change("ts=2026-12-03T07:01:30Z event=adapt_change from=1 to=0 "
                                       "pool=app kind=query",
                                       "app", "query", &c),
                  "a limit of 0");
    cr_expect_not(dbt_adapt_log_change("ts=2026-12-03T07:01:30Z event=adapt_change from=1 to=2 "
                                       "pool=\"app kind=query",
                                       "app", "query", &c),
                  "a quote that does not end");
    cr_expect_not(dbt_adapt_log_change("{\"ts\":\"2026-12-03T07:01:30Z\",\"event\":"
                                       "\"adapt_change\"}",
                                       "app", "query", &c),
                  "not logfmt");
    cr_expect_not(dbt_adapt_log_change("", "app", "query", &c));
    /* a pool name the log cut ("..." before its closing quote) matches no whole name */
    cr_expect_not(dbt_adapt_log_change("ts=2026-12-03T07:01:30Z event=adapt_change from=1 to=2 "
                                       "pool=\"aaaa...\" kind=query",
                                       "aaaa...", "query", &c));
}
